"""The threaded-kernel cost of a matrix product, the records' product
shapes, and collective fits whose reps' kernels are a known part of each
timing.  Fits are checked against synthetic timings made from known
parameters; no timing is asserted (see benchmarks/cost_model_truth.py)."""

import json
import math
import random

import pytest

import costmodels
from costmodels import compute
from costmodels.calibrate import calibration, probes
from costmodels.calibrate import collective_fit
from costmodels.calibrate import pattern_fit
from costmodels.calibrate import threaded_kernel
from costmodels.calibrate import topology_file
from costmodels.calibrate.timings import Sample
from costmodels.collective_fits import CollectiveFit
from costmodels.compute_fits import ComputeClassFit
from mesh_tf.lowering.trace import ComputeRecord

INLINE_S, THREADED_S, LIMIT = 5e-5, 1.2e-4, (1, 16, 64)
MATRIX_S = 7e-7


def _kernel_samples(noise=0.0, limit=LIMIT, rng=None, matrix_s=0.0):
  rng = rng or random.Random(0)
  out = []
  for m in probes.KERNEL_SIZES:
    t = INLINE_S + (0.0 if all(n <= k for n, k in zip(m, limit))
                    else THREADED_S) + matrix_s * (m[0] - 1)
    out.append(Sample("kernel", "", 8, 0, 2.0 * m[0] * m[1] * m[2] * 8,
                      t * (1 + rng.uniform(-noise, noise)),
                      pattern="batched", matrix=m))
  return out


# --- the fit -------------------------------------------------------------------
@pytest.mark.parametrize("matrix_s", [0.0, MATRIX_S])
@pytest.mark.parametrize("limit", [(1, 16, 64), (1, 32, 128), (1, 8, 8),
                                   (2, 16, 64)])
def test_fit_recovers_the_cost_and_the_largest_inline_product(limit,
                                                              matrix_s):
  got = threaded_kernel.fit_threaded_kernel(
      _kernel_samples(0.05, limit, matrix_s=matrix_s), 8)
  assert got.inline_max == limit
  assert got.seconds == pytest.approx(THREADED_S, rel=0.15)
  assert got.matrix_s == pytest.approx(matrix_s, rel=0.2, abs=3e-8)
  assert got.samples == len(probes.KERNEL_SIZES)


@pytest.mark.parametrize("matrix_s", [0.0, MATRIX_S])
def test_one_timing_a_busy_machine_stretched_does_not_set_the_cost(matrix_s):
  # The quick plan times every other product once or twice; a busy
  # machine stretched one threaded product's timing 10x (seen on 8 logical
  # CPU devices of a 2-core machine: 1561 us beside 107-172 us).  The
  # midpoint rule took it for the threaded level (about 1.4 ms); the robust
  # fit keeps the level the other products show.
  quick = probes.KERNEL_SIZES[::2]
  samples = [s for s in _kernel_samples(0.05, matrix_s=matrix_s)
             if s.matrix in quick]
  samples = [s._replace(seconds=10 * s.seconds) if s.matrix == (1, 32, 8)
             else s for s in samples]
  got = threaded_kernel.fit_threaded_kernel(samples, 8)
  assert got.seconds == pytest.approx(THREADED_S, rel=0.2)
  assert got.matrix_s == pytest.approx(matrix_s, rel=0.2, abs=3e-8)


def test_the_batch_term_needs_two_batches():
  # Without a batch sweep nothing is known of the batch: no term.
  few = [s for s in _kernel_samples(matrix_s=MATRIX_S) if s.matrix[0] <= 2]
  assert threaded_kernel.fit_threaded_kernel(few, 8).matrix_s == 0.0


def test_a_sweep_without_a_step_costs_nothing():
  flat = [s._replace(seconds=INLINE_S) for s in _kernel_samples()]
  got = threaded_kernel.fit_threaded_kernel(flat, 8)
  assert (got.seconds, got.inline_max, got.samples) == (0.0, (), len(flat))
  assert got.rel_residual == pytest.approx(0.0, abs=1e-9)
  assert got.matrix_s == pytest.approx(0.0, abs=1e-12)
  assert threaded_kernel.fit_threaded_kernel([], 8) is None
  # Timings of another device count are not used.
  assert threaded_kernel.fit_threaded_kernel(_kernel_samples(), 4) is None



def test_kernels_without_a_pool_fit_no_handoff_only_the_batch():
  # One intra-op thread (logical CPU devices that outnumber the cores):
  # every product runs inline, and the quick sweep's noise alone once
  # fitted a 617 us "hand-off" to the batch of 1024.  With handoff=False
  # the law has no step; the batch term is still recovered.
  quick = probes.KERNEL_SIZES[::2]
  rng = random.Random(3)
  samples = [s._replace(seconds=(INLINE_S + MATRIX_S * (s.matrix[0] - 1))
                        * (1 + rng.uniform(-0.1, 0.1)))
             for s in _kernel_samples() if s.matrix in quick]
  got = threaded_kernel.fit_threaded_kernel(samples, 8, handoff=False)
  assert (got.seconds, got.inline_max) == (0.0, ())
  assert got.matrix_s == pytest.approx(MATRIX_S, rel=0.3)
  assert got.samples == len(samples)
  # Fed the same sweep, the fit with a hand-off finds a step in the noise.
  stepped = [s._replace(seconds=s.seconds * (1.8 if s.matrix[1] == 32
                                             else 1.0)) for s in samples]
  assert threaded_kernel.fit_threaded_kernel(stepped, 8).seconds > 0
  assert threaded_kernel.fit_threaded_kernel(
      stepped, 8, handoff=False).seconds == 0.0


def test_fit_topology_reads_the_pool_from_the_devices_info():
  # The measuring process reports its intra-op threads; with one, the same
  # timings that show a step (above) fit no hand-off.
  info = {"devices": [f"/device:CPU:{d}" for d in range(8)],
          "device_types": ["CPU"]}
  samples = _compute_samples(THREADED_S) + _kernel_samples()
  pooled, _ = calibration.fit_topology(samples, info, "k")
  assert pooled.chip.threaded_kernel_s == pytest.approx(THREADED_S)
  inline, _ = calibration.fit_topology(
      samples, dict(info, intra_op_threads=1), "k")
  assert (inline.chip.threaded_kernel_s, inline.chip.inline_kernel_max) == (
      0.0, ())
  # TensorFlow's default pools (0) and several threads keep the hand-off.
  for threads in (0, 2):
    got, _ = calibration.fit_topology(
        samples, dict(info, intra_op_threads=threads), "k")
    assert got.chip.threaded_kernel_s == pytest.approx(THREADED_S)

# --- what a record carries and costs --------------------------------------------
def _chip(threaded=THREADED_S, limit=LIMIT, matrix_s=0.0):
  fits = tuple(ComputeClassFit(p, 1e-5, 3e10, 4e9) for p in
               ("matmul", "batched", "transposed", "elementwise"))
  return costmodels.get_topology("dgx-h100").chip._replace(
      compute_fits=fits, launch_overhead_s=2e-5, shared_compute_factor=4.0,
      threaded_kernel_s=threaded, inline_kernel_max=limit,
      batch_matrix_s=matrix_s)


@pytest.mark.parametrize("matrix, pays", [
    ((1, 16, 64), False), ((1, 17, 8), True), ((1, 8, 65), True),
    ((2, 4, 4), True), ((), False)])
def test_a_product_above_the_inline_size_pays_the_threaded_cost(matrix,
                                                               pays):
  rec = ComputeRecord("mm", 10**6, 10**4, 10**4, "float32", True, "matmul",
                      matrix)
  base = compute.compute_time(rec, _chip(threaded=0.0))
  assert compute.compute_time(rec, _chip()) == pytest.approx(
      base + (THREADED_S if pays else 0.0))
  # With no inline size known, every product pays; other records never.
  assert compute.compute_time(rec, _chip(limit=())) == pytest.approx(
      base + (THREADED_S if matrix else 0.0))
  vec = ComputeRecord("add", 10**4, 10**4, 10**4)
  assert compute.compute_time(vec, _chip()) == compute.compute_time(
      vec, _chip(threaded=0.0))


@pytest.mark.parametrize("pattern", ["batched", "transposed"])
def test_each_matrix_of_a_batch_beyond_the_first_pays(pattern):
  def cost(batch, chip):
    return compute.compute_time(ComputeRecord(
        "bmm", 10**5, 10**4, 10**4, "float32", True, pattern,
        (batch, 1, 1)), chip)
  for batch in (2, 16, 1024):
    assert cost(batch, _chip(matrix_s=MATRIX_S)) == pytest.approx(
        cost(batch, _chip()) + MATRIX_S * (batch - 1))
  # One matrix is a plain product: nothing beyond its threaded cost.
  assert cost(1, _chip(matrix_s=MATRIX_S)) == cost(1, _chip())


def test_presets_have_no_threaded_cost():
  for name in ("tpu-v4-4x4x4", "dgx-h100"):
    chip = costmodels.get_topology(name).chip
    assert (chip.threaded_kernel_s, chip.inline_kernel_max,
            chip.batch_matrix_s) == (0.0, (), 0.0)


def test_evaluate_charges_each_threaded_product_once():
  from mesh_tf import models
  model = models.mlp(layers=2, batch=64, d_model=32, d_ff=128, classes=8)
  topo = costmodels.get_topology("dgx-h100")
  topo = topo._replace(chip=_chip())
  zero = topo._replace(chip=_chip(threaded=0.0))
  trace = costmodels.trace_graph(model.graph, "x:8", "batch:x")
  pays = sum(1 for r in trace.compute if r.matmul and r.matrix
             and any(n > k for n, k in zip(r.matrix, LIMIT)))
  assert pays > 0
  got = costmodels.evaluate(model.graph, "x:8", "batch:x", topo,
                            overlap=False).step_time_s
  base = costmodels.evaluate(model.graph, "x:8", "batch:x", zero,
                             overlap=False).step_time_s
  assert got - base == pytest.approx(pays * THREADED_S)


# --- the topology file ------------------------------------------------------------
def test_files_round_trip_the_threaded_cost_and_versions_3_4_read(tmp_path):
  topo = costmodels.get_topology("dgx-h100")
  topo = topo._replace(chip=_chip(matrix_s=MATRIX_S))
  path = tmp_path / "t.json"
  topology_file.write_topology(path, topo)
  data = json.loads(path.read_text())
  assert data["version"] == topology_file.VERSION == 9
  assert data["chip"]["inline_kernel_max"] == [1, 16, 64]
  assert data["chip"]["batch_matrix_s"] == MATRIX_S
  assert topology_file.read_topology(path) == topo
  # Version 4: [rows, cols], no batch term.
  v4 = dict(data, version=4, chip=dict(data["chip"],
                                       inline_kernel_max=[16, 64]))
  del v4["chip"]["batch_matrix_s"]
  (tmp_path / "v4.json").write_text(json.dumps(v4))
  chip = topology_file.read_topology(tmp_path / "v4.json").chip
  assert (chip.inline_kernel_max, chip.batch_matrix_s) == ((1, 16, 64), 0.0)
  data["version"] = 3
  del data["chip"]["batch_matrix_s"]
  del data["chip"]["threaded_kernel_s"], data["chip"]["inline_kernel_max"]
  old = tmp_path / "v3.json"
  old.write_text(json.dumps(data))
  chip = topology_file.read_topology(old).chip
  assert (chip.threaded_kernel_s, chip.inline_kernel_max) == (0.0, ())


# --- calibration ----------------------------------------------------------------
def _compute_samples(threaded_s):
  """Timings of a chip with matmul chains that are all threaded."""
  out = []
  for group, s in ((1, 1.0), (8, 4.0)):
    for f in (4e6, 1.6e7, 6.7e7):
      extra = threaded_s if group == 8 else 0.0
      out.append(Sample("matmul", "", group, 0, f,
                        1e-5 + extra + s * f / 1e11, pattern="matmul"))
    for b in (5e5, 4e6):
      out.append(Sample("elementwise", "", group, int(b), 0.0,
                        1e-5 + s * b / 1e10))
    out.append(Sample("launch", "", group, 8, 1.0, 1e-5))
  return out


def test_fit_topology_takes_the_threaded_cost_out_of_the_matmul_latency():
  info = {"devices": [f"/device:CPU:{d}" for d in range(8)],
          "device_types": ["CPU"]}
  topo, rows = calibration.fit_topology(
      _compute_samples(THREADED_S) + _kernel_samples(), info, "k")
  chip = topo.chip
  assert chip.threaded_kernel_s == pytest.approx(THREADED_S)
  assert chip.inline_kernel_max == LIMIT
  # The chains' products were all threaded: their fixed cost beyond the
  # launch is the threaded cost, which the chip charges on its own.
  assert chip.compute_fit("matmul").latency_s == pytest.approx(0.0, abs=1e-9)
  assert "threaded kernel" in {r[0] for r in rows}
  # A batched pattern's probes pay each matrix of their batch too.
  batched = [Sample("matmul", "", 8, 0, f, 1e-5 + THREADED_S
                    + MATRIX_S * 127 + 4.0 * f / 1e11, pattern="batched",
                    matrix=(128, 32, 16)) for f in (4e6, 1.6e7, 6.7e7)]
  topo, rows = calibration.fit_topology(
      _compute_samples(THREADED_S) + batched
      + _kernel_samples(matrix_s=MATRIX_S), info, "k")
  assert topo.chip.batch_matrix_s == pytest.approx(MATRIX_S, rel=1e-6)
  assert topo.chip.compute_fit("batched").latency_s == pytest.approx(
      0.0, abs=1e-9)
  assert "batch matrix" in {r[0] for r in rows}
  without, _ = calibration.fit_topology(_compute_samples(THREADED_S), info,
                                        "no-sweep")
  assert without.chip.threaded_kernel_s == 0.0
  assert without.chip.compute_fit("matmul").latency_s == pytest.approx(
      THREADED_S, rel=1e-3)


# --- collectives beside their reps' kernels ----------------------------------
def test_collective_fit_keeps_residuals_relative_to_the_whole_rep():
  """A rep is the collective and a kernel of known price; where the kernel
  is nearly all of a rep, taking its price off first left a few
  microseconds (or less: clamped) whose relative residuals decided the
  fit.  Fitted beside the known price, the law is recovered."""
  truth = CollectiveFit("allreduce", "reduce_broadcast", 2e-5, 4e9, "p-1",
                        "pn")
  rng = random.Random(1)
  samples, price = [], {}
  for p in (2, 4, 8):
    for n in (2048, 16384, 131072, 1 << 20, 4 << 20):
      kernel = 1e-5 + 2 * n / 1e9   # the rep's square, about the whole rep
      s = Sample("allreduce", f"a{p}", p, n, 0.0,
                 (kernel + truth.time_s(p, n)) * (1 + rng.uniform(-.01, .01)))
      samples.append(s)
      price[s] = kernel
  r = collective_fit.fit_collective(samples, "allreduce", "reduce_broadcast",
                             offset=price.get)
  assert (r.fit.steps, r.fit.volume) == ("p-1", "pn")
  assert r.fit.bandwidth_bytes_per_s == pytest.approx(4e9, rel=0.05)
  assert r.fit.latency_s == pytest.approx(2e-5, rel=0.25)
  assert r.fit.rel_residual < 0.02
  assert math.isfinite(r.fit.bandwidth_bytes_per_s)


# --- convolutions: the bytes they read ---------------------------------------
def test_conv_fit_tells_the_bytes_read_from_the_flops():
  """Timings whose channels vary apart from their FLOPs (as the full plan's
  conv probes do) recover a term in the bytes read; with one shape per
  size the fit keeps the three-term law."""
  truth = ComputeClassFit("conv", 0.0, 2e10, 8e9, 0.0, 0, 1e8)
  launch = 3e-5
  rows = []
  for n, s, c, f, k in ((2, 16, 8, 8, 3), (4, 16, 4, 8, 3),
                        (1, 16, 1, 8, 3), (1, 16, 8, 1, 3)):
    xs, ws, os_, flops = probes.conv_shapes("conv", n, s, c, f, k)
    read = (math.prod(xs) + math.prod(ws)) * 4
    nbytes = read + math.prod(os_) * 4
    rows.append(Sample("matmul", "", 8, nbytes, float(flops),
                       launch + 2e-4 + truth.time_s(flops, nbytes,
                                                    input_bytes=read),
                       pattern="conv", input_bytes=read))
  (got,) = pattern_fit.fit_patterns(rows, "float32", 8, launch)
  assert got.input_bandwidth_bytes_per_s == pytest.approx(1e8, rel=1e-3)
  assert got.flops_per_s == pytest.approx(2e10, rel=1e-3)
  assert got.latency_s == pytest.approx(2e-4, rel=1e-3)
  (three,) = pattern_fit.fit_patterns(rows[:3], "float32", 8, launch)
  assert three.input_bandwidth_bytes_per_s == math.inf
  # Timings the bytes read explain alone (no FLOP or bytes term left).
  reads = [s._replace(seconds=launch + 2e-4 + s.input_bytes / 1e8)
           for s in rows]
  (only,) = pattern_fit.fit_patterns(reads, "float32", 8, launch)
  assert only.input_bandwidth_bytes_per_s == pytest.approx(1e8, rel=1e-3)
  assert math.isinf(only.flops_per_s) and math.isinf(
      only.bandwidth_bytes_per_s)


def test_the_read_term_prices_records_and_round_trips(tmp_path):
  fit = ComputeClassFit("conv", 1e-4, 1e10, 4e9, 0.1, 4, 2e8)
  chip = _chip()._replace(compute_fits=(fit,))
  rec = ComputeRecord("c", 10**7, 10**5, 4 * 10**5, "float32", True, "conv")
  plain = chip._replace(compute_fits=(fit._replace(
      input_bandwidth_bytes_per_s=math.inf),))
  assert compute.compute_time(rec, chip) - compute.compute_time(
      rec, plain) == pytest.approx(4 * 10**5 / 2e8)
  topo = costmodels.get_topology("dgx-h100")._replace(chip=chip)
  path = tmp_path / "conv.json"
  topology_file.write_topology(path, topo)
  assert topology_file.read_topology(path) == topo
  data = json.loads(path.read_text())
  del data["chip"]["compute_fits"][0]["input_bandwidth_bytes_per_s"]
  path.write_text(json.dumps(data))
  assert topology_file.read_topology(path).chip.compute_fits[0] == (
      plain.compute_fits[0])
