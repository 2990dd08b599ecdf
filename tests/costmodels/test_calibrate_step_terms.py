"""The fixed cost of a step and the cost of a collective's bytes in a step
(``costmodels.calibrate.step_costs``): each probe's fit recovers known
parameters from synthetic timings, the topology carries them, and the
cost report prices them.  No timing is asserted."""

import math

import pytest

import costmodels
from costmodels.calibrate import calibration, step_costs, topology_file
from costmodels.calibrate.record_costs import fit_record_costs
from costmodels.calibrate.timings import Sample
from costmodels.collective_fits import CollectiveFit

from tests.costmodels.test_record_costs import (FITS, TRUTH, _measured_like,
                                                _samples, _work)

INFO = {"devices": [f"/device:CPU:{i}" for i in range(8)],
        "device_types": ["CPU"]}
STEP_S, RECORD_S = 2.5e-3, 1e-5
PER_MSG, GAMMA = 4e-5, 1 / 2e9


def _reference_steps(step_s=STEP_S, record_s=RECORD_S, counts=(14, 50, 98)):
  return [Sample("step", "", 8, 0, float(n), step_s + n * record_s)
          for n in counts]


def test_step_overhead_is_the_intercept_of_the_reference_steps():
  got = step_costs.fit_step_overhead(_reference_steps())
  assert got.seconds == pytest.approx(STEP_S, rel=1e-9)
  assert got.record_s == pytest.approx(RECORD_S, rel=1e-9)
  assert got.samples == 3 and got.rel_residual < 1e-9
  # Steps through the origin: no fixed cost, never a negative one.
  assert step_costs.fit_step_overhead(
      _reference_steps(step_s=0.0)).seconds == pytest.approx(0.0, abs=1e-12)
  assert step_costs.fit_step_overhead(
      [s._replace(seconds=1e-3 + s.flops * 2e-5 - (s.flops > 60) * 5e-4)
       for s in _reference_steps()]).seconds >= 0.0
  # One depth has no line.
  assert step_costs.fit_step_overhead(_reference_steps(counts=(14, 14))) \
      is None


AR = CollectiveFit("allreduce", "reduce_broadcast", 1e-5, 4e9, "1", "(p-1)n")


def _data_parallel(sizes):
  """The steps of ``_samples`` data parallel on x:8, one all-reduce of
  each of ``sizes`` bytes per step, timed at the true record costs,
  the chained price of their all-reduces' volume, ``PER_MSG`` a message,
  ``GAMMA`` a byte of volume and ``STEP_S`` a step."""
  vol = step_costs.collective_volumes([AR])
  out = []
  for s, nbytes in zip(_samples(), sizes):
    transfers = tuple(("allreduce", 8, b) for b in nbytes)
    v = sum(vol(*t)[0] for t in transfers)
    out.append(s._replace(
        pattern=s.pattern + " batch:x", messages=7 * len(nbytes),
        transfers=transfers,
        seconds=STEP_S + s.seconds + 7 * len(nbytes) * PER_MSG
        + v / AR.bandwidth_bytes_per_s + v * GAMMA))
  return out


SIZES = [(4096,) * 10, (2**20,) * 25, (512,) * 7, (2**22,) * 3 + (64,) * 40]


def test_collective_bytes_in_a_step_are_recovered():
  steps = [s._replace(seconds=s.seconds + STEP_S) for s in _samples()]
  steps += _data_parallel(SIZES)
  got = fit_record_costs(steps, FITS.get, ridge=0.0, step_s=STEP_S,
                         collective_volume=step_costs.collective_volumes(
                             [AR]))
  assert got.collective_byte_s == pytest.approx(GAMMA, rel=1e-6)
  assert got.message_s == pytest.approx(PER_MSG, rel=1e-6)
  for cls, want in TRUTH.items():
    assert got.costs[cls] == pytest.approx(want, rel=1e-6), cls
  # Collectives of one size per message cannot tell a byte from a
  # message: no such term.
  same = _data_parallel([(4096,) * k for k in (10, 25, 7, 43)])
  got = fit_record_costs(
      [s._replace(seconds=s.seconds + STEP_S) for s in _samples()] + same,
      FITS.get, ridge=0.0, step_s=STEP_S,
      collective_volume=step_costs.collective_volumes([AR]))
  assert got.collective_byte_s == 0.0


def test_the_topology_carries_both_terms_and_the_report_prices_them(
    tmp_path):
  base, _ = calibration.fit_topology(_measured_like(), INFO, "base")
  (ar,) = base.chip.link.collectives
  vol = step_costs.collective_volumes(base.chip.link.collectives)
  steps = []
  for s, nbytes in zip(_samples() + _samples(), [()] * 4 + SIZES):
    transfers = tuple(("allreduce", 8, b) for b in nbytes)
    v = [vol(*t) for t in transfers]
    steps.append(s._replace(
        pattern=s.pattern + (" batch:x" if nbytes else ""),
        messages=7 * len(nbytes), transfers=transfers,
        seconds=STEP_S + sum(r[1] * TRUTH[r[0]] + _work(base.chip, r)
                             for r in s.records)
        + 7 * len(nbytes) * PER_MSG + sum(t + x * GAMMA for x, t in v)))
  topo, rows = calibration.fit_topology(
      _measured_like() + _reference_steps() + steps, INFO, "x")
  assert topo.chip.step_overhead_s == pytest.approx(STEP_S, rel=1e-6)
  (ar1,) = topo.chip.link.collectives
  assert 1 / ar1.bandwidth_bytes_per_s == pytest.approx(
      1 / ar.bandwidth_bytes_per_s + GAMMA, rel=0.2)   # ridge, as above
  assert {"step", "collective bytes in a step"} <= {r[0] for r in rows}
  path = tmp_path / "t.json"
  topology_file.write_topology(path, topo)
  back = costmodels.get_topology(str(path))
  assert back == topo
  # The report adds the step's fixed cost once to the wall step, whatever
  # the layout; the step the search reproduces stays without it.
  from mesh_tf import models
  g = models.build_model("mlp_tiny").graph
  zero = topo._replace(chip=topo.chip._replace(step_overhead_s=0.0))
  for mesh, rules in (("x:8", ""), ("a:2;b:4", "batch:a")):
    r = costmodels.evaluate(g, mesh, rules, back)
    r0 = costmodels.evaluate(g, mesh, rules, zero)
    assert r.step_time_s == r0.step_time_s
    assert r.wall_step_time_s - r.step_time_s == pytest.approx(STEP_S,
                                                              rel=1e-9)
    assert r.step_overhead_s == topo.chip.step_overhead_s
    assert "with the chip's 2.5 ms per step" in r.summary()
  # The search still reproduces the cost model's step exactly.
  import autolayout
  res = autolayout.auto_layout(g, "x:8", topology=back, memory_budget=2**30,
                               time_limit_s=20)
  assert res.report.wall_step_time_s == pytest.approx(
      res.report.step_time_s + STEP_S)
  assert math.isfinite(ar1.bandwidth_bytes_per_s)


def test_files_without_the_terms_read_with_zero(tmp_path):
  import json
  topo = costmodels.get_topology("dgx-h100")
  path = tmp_path / "old.json"
  topology_file.write_topology(path, topo)
  data = json.loads(path.read_text())
  del data["chip"]["step_overhead_s"]
  data["version"] = 7
  path.write_text(json.dumps(data))
  assert costmodels.get_topology(str(path)).chip.step_overhead_s == 0.0
  data["chip"]["step_overhead_s"] = -1.0
  data["version"] = 8
  path.write_text(json.dumps(data))
  with pytest.raises(topology_file.TopologyFileError,
                     match=r"chip.step_overhead_s is -1.0"):
    costmodels.get_topology(str(path))
