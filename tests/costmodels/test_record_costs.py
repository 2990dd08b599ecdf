"""The fixed cost per compute record in a lowered step (fitted on training
steps of small models) and the pattern fits' fixed term: recovered from
synthetic timings made from known parameters, written into the chip and
round-tripped through the topology file.  No timing is asserted."""

import json
import math

import pytest

import costmodels
from costmodels import compute
from costmodels.calibrate import calibration
from costmodels.calibrate import compute_fit
from costmodels.calibrate import pattern_fit
from costmodels.calibrate import timings
from costmodels.calibrate import model_steps
from costmodels.calibrate import topology_file
from costmodels.calibrate.timings import CalibrationError, Sample
from costmodels.calibrate.record_costs import fit_record_costs
from costmodels.compute_fits import ComputeClassFit
from mesh_tf.lowering.trace import ComputeRecord

TRUTH = {"elementwise": 1.2e-4, "matmul": 3e-4, "transposed": 2e-4,
         "conv": 9e-4}
FITS = {"matmul": ComputeClassFit("matmul", 0.0, 2e10),
        "transposed": ComputeClassFit("transposed", 0.0, 1e10, 4e9),
        "elementwise": ComputeClassFit("elementwise", 0.0, math.inf, 5e9)}

# (class, count, flops, bytes) per step: mixes that tell the classes apart.
STEPS = [
    (("elementwise", 60, 0, 3e5), ("matmul", 20, 4e6, 1e5)),
    (("elementwise", 90, 0, 6e5), ("matmul", 12, 8e6, 1e5),
     ("transposed", 30, 1e7, 2e5)),
    (("elementwise", 40, 0, 2e5), ("conv", 5, 0, 0), ("matmul", 2, 0, 0)),
    (("elementwise", 150, 0, 9e5), ("transposed", 40, 2e7, 4e5),
     ("matmul", 10, 6e6, 1e5)),
]


def _step_time(records):
  t = 0.0
  for cls, n, f, b in records:
    fit = FITS.get(cls)
    t += n * TRUTH[cls]
    if fit is not None:
      t += f / fit.flops_per_s + (b / fit.bandwidth_bytes_per_s
                                  if math.isfinite(fit.bandwidth_bytes_per_s)
                                  else 0.0)
  return t


def _samples():
  return [Sample("model_step", "", 8, 0, float(sum(r[1] for r in recs)),
                 _step_time(recs), pattern=f"m{i}", records=recs)
          for i, recs in enumerate(STEPS)]


def test_fit_recovers_known_costs_per_class():
  got = fit_record_costs(_samples(), FITS.get, ridge=0.0)
  assert set(got.costs) == set(TRUTH) and got.samples == len(STEPS)
  for cls, want in TRUTH.items():
    assert got.costs[cls] == pytest.approx(want, rel=1e-6), cls
  assert got.rel_residual < 1e-9


def test_the_ridge_keeps_exact_data_close_and_shares_a_class_it_cannot_tell():
  # Four steps hardly pin four classes down: the weak pull moves the
  # split between classes more than it moves the steps' times.
  got = fit_record_costs(_samples(), FITS.get)
  assert got.rel_residual < 0.02
  for cls, want in TRUTH.items():
    assert got.costs[cls] == pytest.approx(want, rel=0.35), cls
  # conv and conv_filter always together: the pull splits their cost
  # instead of giving one of them all of it.
  together = [Sample("model_step", "", 8, 0, 0.0,
                     20 * 1e-4 + 4 * 1e-3, records=(
                         ("elementwise", 20, 0, 0), ("conv", 2, 0, 0),
                         ("conv_filter", 2, 0, 0))),
              Sample("model_step", "", 8, 0, 0.0, 50 * 1e-4,
                     records=(("elementwise", 50, 0, 0),))]
  got = fit_record_costs(together, lambda c: None)
  assert got.costs["conv"] > 1e-4 and got.costs["conv_filter"] > 1e-4
  assert got.costs["conv"] + got.costs["conv_filter"] == pytest.approx(
      2e-3, rel=0.1)


def test_no_model_steps_no_fit_and_empty_steps_are_an_error():
  assert fit_record_costs([Sample("launch", "", 8, 8, 1.0, 1e-5)],
                          FITS.get) is None
  with pytest.raises(CalibrationError, match="no compute records"):
    fit_record_costs([Sample("model_step", "", 8, 0, 0.0, 1e-3)], FITS.get)


def _measured_like():
  """Probe timings of a synthetic chip (as test_calibrate builds them) and
  the model steps above."""
  samples = []
  for group, s in ((1, 1.0), (8, 4.0)):
    for f in (4e6, 6.7e7):
      samples.append(Sample("matmul", "", group, 0, f, 1e-5 + s * f / 1e11,
                            pattern="matmul"))
    for b in (5e5, 4e6):
      samples.append(Sample("elementwise", "", group, int(b), 0.0,
                            1e-5 + s * b / 1e10))
    samples.append(Sample("launch", "", group, 8, 1.0, 1e-5))
  for n in (4096, 65536, 131072):
    samples.append(Sample("allreduce", "x", 8, n, 0.0, 2e-5 + n / 1e9 + 1e-5,
                          link="device"))
  return samples


def test_fit_topology_prices_records_at_the_fitted_costs(tmp_path):
  info = {"devices": [f"/device:CPU:{i}" for i in range(8)],
          "device_types": ["CPU"]}
  base, _ = calibration.fit_topology(_measured_like(), info, "base")
  # Step times made with the probes' own fits pricing the FLOPs and bytes.
  steps = [s._replace(seconds=sum(r[1] * TRUTH[r[0]] + _work(base.chip, r)
                                  for r in s.records)) for s in _samples()]
  topo, rows = calibration.fit_topology(_measured_like() + steps, info, "x")
  chip = topo.chip
  assert chip.launch_overhead_s == pytest.approx(TRUTH["elementwise"],
                                                 rel=0.35)
  mm = chip.compute_fit("matmul")
  assert chip.launch_overhead_s + mm.latency_s == pytest.approx(
      TRUTH["matmul"], rel=0.35)
  assert any(r[0] == "record in a step" for r in rows)
  # The collectives are fitted as without the steps.
  assert topo.chip.link.collectives == base.chip.link.collectives
  rec = ComputeRecord("mm", 10**6, 0, 0, "float32", True, "matmul")
  assert compute.compute_time(rec, chip) == pytest.approx(
      chip.launch_overhead_s + mm.time_s(10**6, 0))
  # The file round-trips, samples with their records included.
  path = tmp_path / "steps.json"
  topology_file.write_topology(path, topo, calibration.json_safe(
      {"samples": [s._asdict() for s in steps]}))
  back, meta = topology_file.read_topology(path), json.loads(
      path.read_text())["calibration"]
  assert back == topo
  assert costmodels.get_topology(str(path)).chip == chip
  assert [timings.sample_from_dict(d) for d in meta["samples"]] == steps


def test_a_record_in_a_step_costs_at_least_a_kernel_alone():
  # Steps timed at their records' work alone (noise can make them so) fit
  # a record to almost nothing; the chip keeps what one kernel costs to
  # launch alone instead.
  info = {"devices": [f"/device:CPU:{i}" for i in range(8)],
          "device_types": ["CPU"]}
  base, _ = calibration.fit_topology(_measured_like(), info, "base")
  alone = compute_fit.fit_compute(_measured_like(), 8).launch_alone_s
  assert alone > 0
  steps = [s._replace(seconds=sum(_work(base.chip, r) for r in s.records))
           for s in _samples()]
  rc = fit_record_costs(steps, base.chip.compute_fit)
  assert rc.costs["elementwise"] < alone
  topo, _ = calibration.fit_topology(_measured_like() + steps, info, "x")
  assert topo.chip.launch_overhead_s == pytest.approx(alone)


def _work(chip, record):
  cls, n, f, b = record
  fit = chip.compute_fit(cls)
  if fit is None:
    return 0.0
  return ((f / fit.flops_per_s if math.isfinite(fit.flops_per_s) else 0.0)
          + (b / fit.bandwidth_bytes_per_s
             if math.isfinite(fit.bandwidth_bytes_per_s) else 0.0))


def _fit_steps(steps, extra_s, device_type="CPU"):
  """(base, topology, rows): the probes fitted alone, then with ``steps``
  timed at the true record costs, the probes' own fits' work, and
  ``extra_s(step)`` more, on 8 devices of ``device_type``."""
  info = {"devices": [f"/device:{device_type}:{i}" for i in range(8)],
          "device_types": [device_type]}
  base, _ = calibration.fit_topology(_measured_like(), info, "base")
  steps = [s._replace(seconds=sum(r[1] * TRUTH[r[0]] + _work(base.chip, r)
                                  for r in s.records) + extra_s(s))
           for s in steps]
  topo, rows = calibration.fit_topology(_measured_like() + steps, info, "x")
  return base, topo, rows


def test_pattern_fit_is_not_decided_by_timings_near_the_launch_cost():
  # Elementwise timings on all devices with a launch cost of 15 us: the
  # smallest one is barely above it (noise).  Fitting the whole timing
  # keeps the bandwidth the large ones show.
  launch, bw = 1.5e-5, 6e9
  sizes = (131072, 1048576, 8388608, 33554432)
  times = [launch + b / bw for b in sizes]
  times[0] = launch + 0.5e-6
  samples = [Sample("elementwise", "", 8, b, b // 8, t)
             for b, t in zip(sizes, times)]
  (got,) = pattern_fit.fit_patterns(samples, "float32", 8, launch)
  assert got.bandwidth_bytes_per_s == pytest.approx(bw, rel=0.2)


def test_record_classes_counts_a_trace_per_pricing_class():
  import mesh_tf as mtf
  g = mtf.Graph()
  mesh = mtf.Mesh(g, "m")
  x = mtf.zeros(mesh, "batch:4;d:8")
  w = mtf.zeros(mesh, "d:8;e:16")
  y = mtf.relu(mtf.einsum([x, w], "batch:4;e:16"))
  trace = costmodels.trace_graph(g, "x:2", "batch:x", outputs=[y])
  got = dict((c, (n, f, b, m))
             for c, n, f, b, m in model_steps.record_classes(trace))
  assert got["matmul"][0] == 1 and got["matmul"][1] == 2 * 2 * 8 * 16
  assert got["matmul"][3] == ((1, 2, 16),)   # batch split in two
  assert got["elementwise"][3] == ()
  assert sum(n for n, _, _, _ in got.values()) == len(trace.compute)


def test_threaded_products_are_priced_apart_from_the_record_costs():
  """Steps whose matrix products pay the threaded-kernel cost: with that
  cost known, the fixed cost per record is the one the steps were made
  of, and without it the matmul records absorb it."""
  handoff = 1.5e-4
  big, small = (1, 64, 256), (1, 8, 8)
  steps = []
  for s, n_big in zip(_samples(), (9, 4, 12, 0)):
    recs = tuple(r + (((big,) * min(n_big, r[1])
                       + (small,) * (r[1] - min(n_big, r[1]))),)
                 if r[0] == "matmul" else r + ((),) for r in s.records)
    paid = sum(m == big for r in recs for m in r[4])
    steps.append(s._replace(records=recs, seconds=s.seconds + paid * handoff))
  def threaded(m):
    return handoff if m == big else 0.0
  got = fit_record_costs(steps, FITS.get, ridge=0.0, threaded=threaded)
  for cls, cost in got.costs.items():
    assert cost == pytest.approx(TRUTH[cls], rel=1e-6)
  blind = fit_record_costs(steps, FITS.get, ridge=0.0)
  assert blind.costs["matmul"] > TRUTH["matmul"] * 1.05


def test_messages_of_data_parallel_steps_price_a_message_in_a_step():
  per_msg = 8e-5
  steps = _samples() + [
      s._replace(pattern=s.pattern + " batch:x", messages=m,
                 seconds=s.seconds + m * per_msg)
      for s, m in zip(_samples(), (70, 175, 49, 301))]
  got = fit_record_costs(steps, FITS.get, ridge=0.0)
  assert got.message_s == pytest.approx(per_msg, rel=1e-6)
  for cls, want in TRUTH.items():
    assert got.costs[cls] == pytest.approx(want, rel=1e-6), cls
  assert fit_record_costs(_samples(), FITS.get).message_s == 0.0
  # In the topology: every collective fit of the one link costs at least
  # that per step of its law.
  base, topo, rows = _fit_steps(steps, lambda s: s.messages * per_msg)
  (ar,) = topo.chip.link.collectives
  (ar0,) = base.chip.link.collectives
  assert ar0.latency_s < per_msg / 2
  assert ar.latency_s == pytest.approx(per_msg, rel=0.35)
  assert ar.bandwidth_bytes_per_s == ar0.bandwidth_bytes_per_s
  assert topo.dims[-1].link == topo.chip.link
  assert any(r[0] == "message in a step" for r in rows)


def _laid_out(rules, fields):
  """The steps of :func:`_samples` under ``rules``, each with its
  ``fields`` (messages, collectives...)."""
  return [s._replace(pattern=f"{s.pattern} {rules}", **f)
          for s, f in zip(_samples(), fields)]


def _slower(steps, extra_s):
  """``steps``, each ``extra_s(step)`` seconds slower."""
  return [s._replace(seconds=s.seconds + extra_s(s)) for s in steps]


def _fitted(data, mixed, extra_s):
  """``(steps, fit)``: :func:`_samples` beside ``data`` and ``mixed`` steps
  made ``extra_s(step)`` slower, and their record-cost fit (no ridge)."""
  steps = _samples() + _slower(data + mixed, extra_s)
  return steps, fit_record_costs(steps, FITS.get, ridge=0.0)


#: The seconds a message and a collective add to a step in _mixed_steps.
PER_MSG, PER_COLL = 2e-5, 1.5e-4


def _mixed_steps():
  """(data-parallel steps on x:8, 7 messages a collective; mixed steps,
  1-7; the seconds a step's messages and collectives add)."""
  data = _laid_out("batch:x", [dict(messages=7 * k, collectives=k)
                               for k in (10, 25, 7, 43)])
  mixed = _laid_out("batch:b;d_ff:a", [
      dict(messages=m, collectives=k)
      for m, k in ((30, 18), (61, 40), (20, 15), (90, 52))])
  def extra(s):
    return s.messages * PER_MSG + s.collectives * PER_COLL
  return data, mixed, extra


def test_devices_sharing_cores_fit_no_wait_per_collective():
  # Logical CPU devices share the host's cores: a member that waits leaves
  # its core to the others, so the same steps fit no cost per collective,
  # and the messages take what the steps cost beyond the records.
  per_msg, per_coll, (data, mixed, extra) = PER_MSG, PER_COLL, _mixed_steps()
  samples = _samples() + [s._replace(seconds=s.seconds + extra(s))
                          for s in data + mixed]
  waited = fit_record_costs(samples, FITS.get, ridge=0.0)
  shared = fit_record_costs(samples, FITS.get, ridge=0.0, waits=False)
  assert waited.collective_s == pytest.approx(per_coll, rel=1e-6)
  assert shared.collective_s == 0.0
  assert shared.message_s > per_msg   # the waits' seconds, per message
  _, cpu, rows = _fit_steps(data + mixed, extra, "CPU")
  _, gpu, _ = _fit_steps(data + mixed, extra, "GPU")
  assert cpu.chip.link.barrier_s == 0.0 < gpu.chip.link.barrier_s
  assert "collective in a step" not in {r[0] for r in rows}


def test_collectives_of_mixed_steps_price_a_collective_in_a_step():
  # Data-parallel steps on x:8 (7 messages a collective) beside mixed
  # steps (1-7): a cost per message and one per collective, both known,
  # are both recovered, and the topology's device link pays the latter
  # once per collective.
  per_msg, per_coll, (data, mixed, extra) = PER_MSG, PER_COLL, _mixed_steps()
  _, got = _fitted(data, mixed, extra)
  assert got.message_s == pytest.approx(per_msg, rel=1e-6)
  assert got.collective_s == pytest.approx(per_coll, rel=1e-6)
  for cls, want in TRUTH.items():
    assert got.costs[cls] == pytest.approx(want, rel=1e-6), cls
  # Data parallel alone cannot tell the two apart: no cost per collective
  # (files written before the mixed steps have 0 collectives and read so).
  old = _samples() + [s._replace(seconds=s.seconds + extra(s),
                                 collectives=0) for s in data]
  assert fit_record_costs(old, FITS.get, ridge=0.0).collective_s == 0.0
  # Devices with their own engines (GPUs) wait idle at a collective: the
  # device link pays the cost per collective.
  base, topo, rows = _fit_steps(data + mixed, extra, "GPU")
  assert base.chip.link.barrier_s == 0.0
  assert topo.chip.link.barrier_s == pytest.approx(per_coll, rel=0.35)
  assert topo.dims[-1].link == topo.chip.link
  assert "collective in a step" in {r[0] for r in rows}
  # Priced once per collective, whatever its group or kind.
  m = costmodels.map_mesh(topo, "a:2;b:4")
  m0 = costmodels.map_mesh(topo._replace(dims=tuple(
      d._replace(link=d.link._replace(barrier_s=0.0)) for d in topo.dims)),
                           "a:2;b:4")
  for rec in (("allreduce", ("a",), 2, 4096), ("allreduce", ("a", "b"), 8,
                                                4096),
              ("allconcat", ("b",), 4, 512), ("receive", ("a",), 2, 64)):
    assert (costmodels.collective_time(rec, m)
            - costmodels.collective_time(rec, m0)) == pytest.approx(
                topo.chip.link.barrier_s, rel=1e-9)
    assert sum(costmodels.collective_time_by_axis(rec, m).values()) == (
        pytest.approx(costmodels.collective_time(rec, m), rel=1e-12))


def test_bytes_a_step_moves_get_their_own_cost_when_the_steps_vary_them():
  # Steps whose bytes per record differ by 10x: the extra seconds per
  # byte a step pays beyond the class fits is recovered exactly, and the
  # topology's pattern fits charge it.
  per_byte = 1 / 3e9
  wide = [(("elementwise", 30, 0, 3e7), ("matmul", 10, 4e7, 2e7)),
          (("elementwise", 50, 0, 6e7), ("matmul", 12, 8e7, 4e7))]
  steps = _samples() + [
      Sample("model_step", "", 8, 0, float(sum(r[1] for r in recs)),
             _step_time(recs), pattern=f"w{i}", records=recs)
      for i, recs in enumerate(wide)]
  steps = [s._replace(seconds=s.seconds + per_byte * sum(
      r[3] for r in s.records)) for s in steps]
  got = fit_record_costs(steps, FITS.get, ridge=0.0)
  assert got.byte_s == pytest.approx(per_byte, rel=1e-6)
  for cls, want in TRUTH.items():
    assert got.costs[cls] == pytest.approx(want, rel=1e-6), cls
  # Steps that all move about as many bytes per record cannot tell a byte
  # cost from a record cost: none is fitted.
  assert fit_record_costs(_samples(), FITS.get).byte_s == 0.0
  base, topo, rows = _fit_steps(
      steps, lambda s: per_byte * sum(r[3] for r in s.records))
  assert any(r[0] == "bytes in a step" for r in rows)
  for f0 in base.chip.compute_fits:
    f = topo.chip.compute_fit(f0.pattern)
    assert 1 / f.bandwidth_bytes_per_s == pytest.approx(
        1 / f0.bandwidth_bytes_per_s + per_byte, rel=0.35)


def test_the_cost_per_collective_counts_the_collectives_a_step_waits_for():
  # Data-parallel steps wait for none of their collectives (every one a
  # gradient sync), mixed steps for some: the cost per message and the one
  # per waited collective are both recovered, the latter as the link's
  # barrier, which data-parallel steps never pay.
  per_msg, per_coll = 1e-5, 9e-5
  data = _laid_out("batch:x", [dict(messages=7 * k, collectives=k,
                                    blocking=0) for k in (10, 25, 7, 43)])
  mixed = _laid_out("batch:b;d_ff:a", [
      dict(messages=m, collectives=k + w, blocking=w)
      for m, k, w in ((30, 10, 8), (61, 20, 21), (20, 7, 8), (90, 30, 22))])
  def extra(s):
    return s.messages * per_msg + s.blocking * per_coll
  steps, got = _fitted(data, mixed, extra)
  assert got.message_s == pytest.approx(per_msg, rel=1e-6)
  assert got.collective_s == pytest.approx(per_coll, rel=1e-6)
  # Counting every collective instead misprices both.
  old = [s._replace(blocking=None) for s in steps]
  assert fit_record_costs(old, FITS.get, ridge=0.0).rel_residual > 1e-3
  # Steps that wait for none of their collectives tell no barrier.
  assert fit_record_costs(_samples() + _slower(data, extra), FITS.get,
                          ridge=0.0).collective_s == 0.0
  _, topo, _ = _fit_steps(data + mixed, extra, "GPU")
  assert topo.chip.link.barrier_s == pytest.approx(per_coll, rel=0.35)


def test_a_record_in_a_step_costs_at_least_a_kernel_on_every_device():
  # Steps whose elementwise records cost nothing beyond their work (noise
  # can fit that): the chip's launch cost is floored at a kernel launched
  # on every device at once (30 us here), not at one launched alone (10 us).
  info = {"devices": [f"/device:CPU:{i}" for i in range(8)],
          "device_types": ["CPU"]}
  probes = [s._replace(seconds=3e-5) if s.what == "launch" and
            s.group_size == 8 else s for s in _measured_like()]
  base, _ = calibration.fit_topology(probes, info, "base")
  assert base.chip.launch_overhead_s == pytest.approx(3e-5, rel=0.05)
  free = dict(TRUTH, elementwise=0.0)
  steps = [s._replace(seconds=sum(r[1] * free[r[0]] + _work(base.chip, r)
                                  for r in s.records)) for s in _samples()]
  topo, _ = calibration.fit_topology(probes + steps, info, "x")
  assert topo.chip.launch_overhead_s == pytest.approx(
      base.chip.launch_overhead_s, rel=1e-6)
