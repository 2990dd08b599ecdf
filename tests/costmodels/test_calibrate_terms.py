"""Mechanics of the per-pattern compute fits, the overlap efficiency, the one
topology serialiser and topology-file discovery.  Fits are checked against
synthetic timings made from known parameters; no timing is asserted (the
timing claims live in benchmarks/cost_model_truth.py)."""

import json
import math

import pytest

import costmodels
import mesh_tf as mtf
from costmodels import compute, topology_json
from costmodels import overlap as overlap_lib
from costmodels.calibrate import overlap_fit
from costmodels.calibrate import pattern_fit
from costmodels.calibrate import topology_file
from costmodels.calibrate.timings import Sample
from costmodels.compute_fits import ComputeClassFit
from costmodels.hardware import ChipSpec, LinkSpec
from costmodels.topology import PhysicalDim, Topology
from mesh_tf.lowering.einsum_kernels import einsum_pattern
from mesh_tf.lowering.trace import ComputeRecord

FITS = (ComputeClassFit("matmul", 5e-5, 3e10, math.inf, 0.01, 4),
        ComputeClassFit("transposed", 4e-4, 8e9, 2e9, 0.2, 5),
        ComputeClassFit("conv", 0.0, 9e9))


def _chip(fits=FITS):
  link = LinkSpec("device", "host", 4e9, 1e-5, overlap_efficiency=0.4)
  return ChipSpec("cpu-8x-logical", "cpu", 1.5e11, 2**30, 6e10, link,
                  launch_overhead_s=2e-5, shared_compute_factor=6.0,
                  matmul_flops_by_dtype=(("float32", 1.5e11),
                                         ("bfloat16", 7.5e10)),
                  compute_fits=fits)


def _topology():
  chip = _chip()
  return Topology("mycpu", chip, (PhysicalDim("device", 8, chip.link,
                                              "switch"),))


# --- which pattern an einsum is ------------------------------------------------
@pytest.mark.parametrize("eq, pattern", [
    ("abc,cd->abd", "matmul"), ("abc,abd->cd", "matmul"),
    ("ab,bc->ac", "matmul"), ("abcd,abde->abce", "batched"),
    ("abcd,bed->abce", "transposed"),
    ("ab,ac->cb", "matmul"), ("abc,cde->adbe", "transposed"),
    ("ac,ab->bc", "matmul"), ("abcd,abce->abed", "batched"),
    ("ab,b->a", "matmul"), ("abc,c->a", "transposed"),
    ("ab,ab->ab", "product"), ("ab,bc,cd->ad", "transposed")])
def test_einsum_pattern(eq, pattern):
  assert einsum_pattern(eq) == pattern


def test_swapped_operands_give_the_same_product():
  import numpy as np
  from mesh_tf.lowering.einsum_kernels import einsum_kernel, swaps_operands
  from mesh_tf.lowering.lazy_tf import tf
  rng = np.random.default_rng(0)
  g, x = rng.normal(size=(6, 5)), rng.normal(size=(6, 3))
  assert swaps_operands("ac,ab->bc")
  got = einsum_kernel("ac,ab->bc")(tf.constant(g), tf.constant(x))
  np.testing.assert_allclose(got.numpy(), np.einsum("ac,ab->bc", g, x),
                             rtol=1e-12)


def test_calibration_plan_labels_each_form_as_the_lowering_does():
  from costmodels.calibrate import measure
  for quick in (False, True):
    for pattern, eq, _, _ in measure.make_plan(("x:8",), quick).einsums:
      assert einsum_pattern(eq) == pattern, eq


def test_lowered_records_carry_their_pattern():
  g = mtf.Graph()
  mesh = mtf.Mesh(g, "m")
  x = mtf.zeros(mesh, "batch:4;d:8")
  w = mtf.zeros(mesh, "d:8;e:16")
  v = mtf.zeros(mesh, "batch:4;e:16")
  u = mtf.zeros(mesh, "d:8;h:2;k:4")
  y = mtf.einsum([x, w], "batch:4;e:16")        # plain matmul
  gw = mtf.einsum([v, x], "d:8;e:16")           # run with operands swapped
  t = mtf.einsum([x, u], "h:2;batch:4;k:4")     # result transposed
  p = mtf.einsum([y, v], "batch:4;e:16")        # a product
  trace = costmodels.trace_graph(g, "x:2", "batch:x",
                                 outputs=[y, gw, t, p])
  by_name = {r.op_name: r for r in trace.compute if r.matmul}
  assert [by_name[z.operation.name].pattern for z in (y, gw, t, p)] == [
      "matmul", "matmul", "transposed", "product"]
  # (rows, cols) of each product, as it runs: batch split in two; the
  # swapped gradient is x's d by v's e; a broadcast product has none.
  assert [by_name[z.operation.name].matrix for z in (y, gw, t, p)] == [
      (1, 2, 16), (1, 8, 16), (1, 2, 8), ()]
  assert all(r.pattern == "" and r.matrix == () for r in trace.compute
             if not r.matmul)


# --- fitting -------------------------------------------------------------------
def _synthetic(fit, sizes, n=8, launch=2e-5):
  return [Sample("matmul", "", n, b, float(f),
                 launch + fit.time_s(f, b), pattern=fit.pattern)
          for f, b in sizes]


def test_fit_patterns_recovers_known_parameters():
  sizes = [(4e6, 3e5), (6.7e7, 1.3e6), (8e6, 4e6), (1.7e7, 1e6)]
  chained = (FITS[0], FITS[1]._replace(bandwidth_bytes_per_s=math.inf))
  samples = (_synthetic(chained[1], sizes) + _synthetic(chained[0], sizes)
             # One-device timings do not enter the all-devices fits.
             + [Sample("matmul", "", 1, 1, 1e6, 1.0, pattern="matmul")])
  got = {f.pattern: f for f in pattern_fit.fit_patterns(samples, "float32", 8,
                                                    2e-5)}
  assert set(got) == {"matmul", "transposed"}
  for want in chained:
    f = got[want.pattern]
    assert f.latency_s == pytest.approx(want.latency_s, rel=1e-6)
    assert f.flops_per_s == pytest.approx(want.flops_per_s, rel=1e-6)
    assert f.bandwidth_bytes_per_s == pytest.approx(
        want.bandwidth_bytes_per_s, rel=1e-6)
    assert f.rel_residual < 1e-9 and f.samples == 4


def test_a_products_chain_is_priced_by_its_flops_not_its_bytes():
  # Chained products whose times grow with their bytes too: the fit gives
  # no byte term (a chain's bytes are hot in cache, and its probes' bytes
  # grow with their FLOPs; bytes are priced by the cost of a byte in a
  # step), it prices the timings by FLOPs and a fixed cost, and it is
  # exact where the bytes follow the FLOPs.
  truth = FITS[1]   # transposed: 8 GFLOP/s and 2 GB/s
  sizes = [(f, f / 40) for f in (4e6, 8e6, 1.7e7, 6.7e7)]
  (got,) = pattern_fit.fit_patterns(_synthetic(truth, sizes), "float32", 8,
                                2e-5)
  assert got.bandwidth_bytes_per_s == math.inf
  assert got.latency_s == pytest.approx(truth.latency_s, rel=1e-6)
  assert 1 / got.flops_per_s == pytest.approx(
      1 / truth.flops_per_s + 1 / (40 * truth.bandwidth_bytes_per_s),
      rel=1e-6)
  # Convolutions keep their bytes term (test_conv_tiles), memory-bound
  # work its bandwidth (test_elementwise_work_gets_a_bytes_fit...).


def test_fit_patterns_falls_back_to_a_rate_when_timings_do_not_grow():
  # The larger conv ran faster (noise): one rate through the origin.
  noisy = [Sample("matmul", "", 8, 0, f, t, pattern="conv")
           for f, t in ((1e6, 2e-3), (1e7, 1e-3))]
  (fit,) = pattern_fit.fit_patterns(noisy, "float32", 8, 0.0)
  assert fit.latency_s == 0.0 and 0 < fit.flops_per_s < math.inf
  assert fit.time_s(1e6, 0) < 2e-3 and fit.time_s(1e7, 0) > 1e-3


@pytest.mark.parametrize("eta", [0.0, 0.35, 0.9])
def test_fit_overlap_recovers_the_efficiency(eta):
  samples = []
  for nbytes, m in ((1 << 18, 4e-3), (1 << 20, 9e-3)):
    # Compute shorter than the comm, and (the last) long enough to hide it.
    for c in (1e-3, 3e-3, 5e-2):
      # The cost model's law: exposed E, and the hidden rest slows compute.
      e = max(0.0, m - eta * c)
      t = c + e + overlap_lib.interference_time(m - e, eta)
      for what, s in (("overlap_comm", m), ("overlap_compute", c),
                      ("overlap_both", t)):
        samples.append(Sample(what, "x", 8, nbytes, c * 1e9, s,
                              link="device"))
  got, count, spread = overlap_fit.fit_overlap(samples, "device")
  assert got == pytest.approx(eta, abs=1e-9) and count == 6
  assert spread == pytest.approx(0.0, abs=1e-9)
  assert overlap_fit.fit_overlap(samples, "process") is None


# --- pricing ---------------------------------------------------------------------
def test_a_pattern_fit_prices_its_records():
  chip = _chip()
  rec = ComputeRecord("op", 10**8, 10**6, 2 * 10**6, "float32", True,
                      "transposed")
  assert compute.compute_time(rec, chip) == pytest.approx(
      2e-5 + FITS[1].time_s(1e8, 3e6))
  # Another dtype scales the FLOP rate by the chip's peak ratio.
  half = rec._replace(dtype="bfloat16")
  assert compute.compute_time(half, chip) == pytest.approx(
      2e-5 + FITS[1].time_s(1e8, 3e6, 0.5))
  # Bytes-bound records keep the shared memory-bandwidth floor.
  wide = rec._replace(pattern="conv", flops_per_device=1,
                      output_bytes_per_device=10**9)
  assert compute.compute_time(wide, chip) == pytest.approx(
      2e-5 + 6.0 * (10**9 + 2 * 10**6) / 6e10)


def test_records_without_a_fit_keep_the_roofline():
  chip = _chip()
  for rec in (ComputeRecord("op", 10**8, 10**6, 0, "float32", True,
                            "batched"),
              ComputeRecord("op", 10**8, 10**6, 0, "float32", False)):
    assert compute.compute_time(rec, chip) == pytest.approx(
        2e-5 + 6.0 * compute.roofline_time(1e8, 1e6, chip, rec.dtype,
                                           rec.matmul))
  preset = costmodels.get_topology("dgx-h100").chip
  rec = ComputeRecord("op", 10**9, 10**6, 0, "bfloat16", True, "transposed")
  assert compute.compute_time(rec, preset) == compute.roofline_time(
      1e9, 1e6, preset, "bfloat16", True)


# --- one serialiser ------------------------------------------------------------
def test_topology_file_keeps_pattern_fits_and_overlap(tmp_path):
  topo = _topology()
  path = tmp_path / "t.json"
  topology_file.write_topology(path, topo)
  data = json.loads(path.read_text())
  assert data["version"] == topology_json.VERSION == 9
  back = costmodels.get_topology(str(path))
  assert back == topo
  assert back.chip.compute_fit("transposed") == FITS[1]
  assert back.dims[0].link.overlap_efficiency == 0.4
  # Plan files embed the same form.
  assert topology_json.topology_from_dict(
      topology_json.topology_to_dict(topo)) == topo


def test_version_1_files_still_read(tmp_path):
  data = topology_json.topology_to_dict(_topology(), {})
  data["version"] = 1
  del data["chip"]["compute_fits"]
  for link in [data["chip"]["link"]] + [d["link"] for d in data["dims"]]:
    del link["overlap_efficiency"]
  path = tmp_path / "old.json"
  path.write_text(json.dumps(data))
  back = topology_file.read_topology(path)
  assert back.chip.compute_fits == ()
  assert back.dims[0].link.overlap_efficiency is None


def _legacy(value):
  """The schema-less form plan files embedded before version 2."""
  if hasattr(value, "_fields"):
    return {f: _legacy(getattr(value, f)) for f in value._fields}
  if isinstance(value, tuple):
    return [_legacy(v) for v in value]
  return value


def test_plan_files_with_the_old_embedded_form_still_read():
  topo = costmodels.get_topology("h100x8-nodes2")
  old = {"name": topo.name, "chip": _legacy(topo.chip),
         "dims": [_legacy(d) for d in topo.dims]}
  assert topology_json.topology_from_dict(json.loads(json.dumps(old))) == topo


@pytest.mark.parametrize("edit, match", [
    (lambda d: d["chip"]["compute_fits"][0].update(flops_per_s=0),
     r"compute_fits\[0\].*flops_per_s > 0"),
    (lambda d: d["dims"][0]["link"].update(overlap_efficiency=1.5),
     r"dims\[0\].link.overlap_efficiency is 1.5"),
    (lambda d: d["chip"]["compute_fits"][0].pop("pattern"),
     r"compute_fits\[0\] lacks the field 'pattern'"),
    (lambda d: d.update(version=10),
     r"versions \[1, 2, 3, 4, 5, 6, 7, 8, 9\]"),
    (lambda d: d["chip"]["compute_fits"][0].update(tile=[8, 0, 4]),
     r"compute_fits\[0\]: .*tile of 3 positive integers.*\(8, 0, 4\)"),
    (lambda d: d["chip"]["compute_fits"][0].update(tile=[8, 4]),
     r"compute_fits\[0\]: .*tile of 3 positive integers"),
    (lambda d: d["chip"]["compute_fits"][0].update(tile="8x4"),
     r"compute_fits\[0\].tile"),
    (lambda d: d["dims"][0]["link"].update(barrier_s=-1e-4),
     r"dims\[0\].link.barrier_s is -0.0001; it must be >= 0"),
    (lambda d: d["chip"].update(inline_kernel_max=[16]),
     r"inline_kernel_max must be \[\] or \[batch, rows, cols\]"),
    (lambda d: d["chip"].update(batch_matrix_s=-1.0),
     r"batch_matrix_s is -1.0; it must be >= 0"),
    (lambda d: d["chip"]["compute_fits"][0].update(
        input_bandwidth_bytes_per_s=-1.0),
     r"compute_fits\[0\]: .*input_bandwidth_bytes_per_s > 0"),
    (lambda d: d["chip"].update(threaded_kernel_s=-1.0),
     r"threaded_kernel_s is -1.0; it must be >= 0"),
    (lambda d: d["chip"].update(matmul_efficiency_by_dtype={"bfloat16": 1.2}),
     r"matmul_efficiency_by_dtype\['bfloat16'\] is 1.2"),
])
def test_bad_fields_get_typed_errors(tmp_path, edit, match):
  data = topology_json.topology_to_dict(_topology(), {})
  edit(data)
  path = tmp_path / "bad.json"
  path.write_text(json.dumps(data))
  with pytest.raises(topology_file.TopologyFileError, match=match):
    topology_file.read_topology(path)


# --- discovery -------------------------------------------------------------------
def test_discovery_finds_topology_files_only(tmp_path, monkeypatch):
  from autolayout.cli import topologies
  a, b = tmp_path / "a", tmp_path / "b"
  a.mkdir()
  b.mkdir()
  topology_file.write_topology(a / "mine.json", _topology())
  topology_file.write_topology(b / "theirs.json", _topology())
  (a / "package.json").write_text('{"name": "x"}')
  (a / "broken.json").write_text("{")
  found = topology_file.discover_topology_files([a, tmp_path / "none", b])
  assert [p.split("/")[-1] for p in found] == ["mine.json", "theirs.json"]
  monkeypatch.chdir(a)
  env = {topology_file.PATH_ENV: str(b)}
  assert topologies.discovered_files((), env) == ["mine.json",
                                                  str(b / "theirs.json")]
  assert topologies.discovered_files(["mine.json"], env) == [
      str(b / "theirs.json")]
  frame = topologies.topologies_frame(topologies.discovered_files((), env))
  assert {"mine.json", "tpu-v5e-16x16"} <= set(frame.index)


def test_elementwise_work_gets_a_bytes_fit_that_prices_vector_records(
    tmp_path):
  want = ComputeClassFit("elementwise", 3e-5, math.inf, 4e9)
  samples = [Sample("elementwise", "", 8, 2 * n, n // 4,
                    2e-5 + want.time_s(n // 4, 2 * n)) for n in
             (1 << 16, 1 << 19, 1 << 22)]
  (got,) = pattern_fit.fit_patterns(samples, "float32", 8, 2e-5)
  assert got.pattern == "elementwise" and got.flops_per_s == math.inf
  assert got.latency_s == pytest.approx(3e-5, rel=1e-6)
  assert got.bandwidth_bytes_per_s == pytest.approx(4e9, rel=1e-6)
  chip = _chip(FITS + (got,))
  rec = ComputeRecord("add", 10**6, 4 * 10**6, 8 * 10**6)
  assert compute.compute_time(rec, chip) == pytest.approx(
      2e-5 + max(3e-5 + 12e6 / 4e9, 6.0 * 12e6 / 6e10))
  topo = _topology()._replace(chip=chip)
  topology_file.write_topology(tmp_path / "e.json", topo)
  assert topology_file.read_topology(tmp_path / "e.json") == topo
