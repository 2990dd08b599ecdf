"""Calibration mechanics: topology files, fits, the new cost terms, errors,
and a --quick calibration end to end on 8 logical CPU devices (in a
subprocess).  No timing is asserted: the timing claims live in
benchmarks/cost_model_truth.py."""

import json
import math
import os

import numpy as np
import pytest

import costmodels
import mesh_tf as mtf
from costmodels import calibrate as cal
from costmodels import compute
from costmodels.calibrate import calibration, measure, probes, topology_file
from costmodels.calibrate.timings import Sample
from costmodels.collective_fits import CollectiveFit, find_fit
from costmodels.hardware import ChipSpec, LinkSpec
from costmodels.topology import PhysicalDim, Topology
from mesh_tf.lowering.trace import ComputeRecord

FITS = (CollectiveFit("allreduce", "per_device_sums", 2e-5, 3e9, "p-1",
                      "(p-1)n", 0, 0.1, 6),
        CollectiveFit("allreduce", "reduce_broadcast", 4e-5, 5e9, "1", "n",
                      262144, 0.2, 6),
        CollectiveFit("allgather", "concat_per_device", 1e-5, 4e9, "p-1",
                      "pn"),
        CollectiveFit("permute", "copy", 3e-6, math.inf, "1", "n"))


def _calibrated(processes=1):
  local = LinkSpec("device", "host", 4e9, 1e-5, FITS)
  chip = ChipSpec("cpu-8x-logical", "cpu", 1.5e11, 2**30, 6e10, local,
                  launch_overhead_s=2e-5, shared_compute_factor=7.0,
                  matmul_flops_by_dtype=(("float32", 1.5e11),
                                         ("bfloat16", 3e11)))
  dims = (PhysicalDim("device", 8 // processes, local, "switch"),)
  if processes > 1:
    grpc = LinkSpec("process", "grpc", 1e8, 1e-3,
                    (FITS[0]._replace(latency_s=1e-3, min_bytes=0),))
    dims = (PhysicalDim("process", processes, grpc, "switch"),) + dims
  return Topology("mycpu", chip, dims)


# --- topology files -----------------------------------------------------------
@pytest.mark.parametrize("topology", ["dgx-h100", "tpu-v4-4x4x4",
                                      "h100x8-nodes2", "calibrated",
                                      "calibrated-2"])
def test_topology_file_round_trips(tmp_path, topology):
  topo = (_calibrated(2) if topology == "calibrated-2" else _calibrated()
          if topology == "calibrated" else costmodels.get_topology(topology))
  path = tmp_path / "t.json"
  topology_file.write_topology(path, topo, {"note": "x"})
  back, meta = topology_file.read_topology_file(path)
  assert back == topo and meta == {"note": "x"}
  assert costmodels.get_topology(str(path)) == topo
  assert not [p for p in os.listdir(tmp_path) if p != "t.json"]


def test_get_topology_resolves_files_everywhere(tmp_path):
  path = str(tmp_path / "mycpu.json")
  topology_file.write_topology(path, _calibrated())
  g = mtf.Graph()
  mesh = mtf.Mesh(g, "m")
  x = mtf.zeros(mesh, "batch:64,d:32")
  w = mtf.get_variable(mesh, "w", "d:32,f:64")
  mtf.einsum([x, w], reduced_dims=[w.shape[0]])
  by_file = costmodels.evaluate(g, "a:2;b:4", "batch:a;d:b", path)
  by_value = costmodels.evaluate(g, "a:2;b:4", "batch:a;d:b", _calibrated())
  assert by_file.step_time_s == by_value.step_time_s > 0


def _bad(tmp_path, obj):
  path = tmp_path / "bad.json"
  path.write_text(json.dumps(obj))
  return str(path)


def test_wrong_schema_version_and_fields_are_typed_errors(tmp_path):
  good = topology_file.topology_json(_calibrated())
  with pytest.raises(topology_file.TopologyFileError, match="schema"):
    topology_file.read_topology(_bad(tmp_path, {**good, "schema": "other"}))
  with pytest.raises(topology_file.TopologyFileError, match="version 10"):
    topology_file.read_topology(_bad(tmp_path, {**good, "version": 10}))
  chip = {k: v for k, v in good["chip"].items() if k != "peak_flops_per_s"}
  with pytest.raises(topology_file.TopologyFileError,
                     match="peak_flops_per_s"):
    costmodels.get_topology(_bad(tmp_path, {**good, "chip": chip}))
  dims = [dict(good["dims"][0], size="eight")]
  with pytest.raises(topology_file.TopologyFileError, match=r"dims\[0\].size"):
    topology_file.read_topology(_bad(tmp_path, {**good, "dims": dims}))
  link = dict(good["dims"][0]["link"])
  link["collectives"] = [dict(link["collectives"][0], volume="n^2")]
  dims = [dict(good["dims"][0], link=link)]
  with pytest.raises(topology_file.TopologyFileError, match="volume law"):
    topology_file.read_topology(_bad(tmp_path, {**good, "dims": dims}))
  path = tmp_path / "notjson.json"
  path.write_text("{not json")
  with pytest.raises(topology_file.TopologyFileError, match="cannot read"):
    topology_file.read_topology(path)
  with pytest.raises(costmodels.TopologyError, match="does not exist"):
    costmodels.get_topology(str(tmp_path / "missing.json"))
  assert issubclass(topology_file.TopologyFileError, mtf.MtfError)


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path):
  path = tmp_path / "t.json"
  topology_file.write_topology(path, _calibrated())
  before = path.read_text()
  with pytest.raises(ValueError):  # NaN is not JSON
    topology_file.write_topology(path, _calibrated(), {"x": float("nan")})
  assert path.read_text() == before
  assert os.listdir(tmp_path) == ["t.json"]
  with pytest.raises(topology_file.TopologyFileError, match=r"\.json"):
    topology_file.write_topology(tmp_path / "t.txt", _calibrated())


# --- fits recover known parameters ------------------------------------------
def test_nonneg_lstsq_recovers_and_stays_nonnegative():
  xs = [[1.0, n] for n in (1e3, 1e4, 1e5, 1e6)]
  coef, rel = cal.nonneg_lstsq(xs, [3e-6 + n / 2e9 for n in (1e3, 1e4,
                                                               1e5, 1e6)])
  np.testing.assert_allclose(coef, [3e-6, 1 / 2e9], rtol=1e-9)
  assert rel < 1e-9
  # Timings that fall with size: the slope would be negative, so it is 0.
  coef, _ = cal.nonneg_lstsq(xs, [4e-3, 3e-3, 2e-3, 1e-3])
  assert coef[1] == 0 and coef[0] > 0
  with pytest.raises(cal.CalibrationError, match="positive"):
    cal.nonneg_lstsq(xs, [1.0, 0.0, 1.0, 1.0])


@pytest.mark.parametrize("truth", FITS[:3])
def test_fit_collective_recovers_law_and_parameters(truth):
  samples = [Sample(truth.kind, f"axis{p}", p, n, 0.0, truth.time_s(p, n))
             for p in (2, 4, 8) for n in (2048, 16384, 131072, 1 << 20,
                                          4 << 20)
             if n >= truth.min_bytes]
  r = cal.fit_collective(samples, truth.kind, truth.algorithm,
                         truth.min_bytes)
  assert (r.fit.steps, r.fit.volume) == (truth.steps, truth.volume)
  assert r.fit.latency_s == pytest.approx(truth.latency_s, rel=1e-6)
  assert r.fit.bandwidth_bytes_per_s == pytest.approx(
      truth.bandwidth_bytes_per_s, rel=1e-6)
  assert r.fit.rel_residual < 1e-9
  assert {a for a, _ in r.by_axis} == {"axis2", "axis4", "axis8"}


def test_fit_compute_recovers_peak_bandwidth_launch_and_sharing():
  peak, bw, l1, launch, factor = 2e11, 5e10, 1e-6, 2e-5, 6.0
  samples = []
  for group, lat, s in ((1, l1, 1.0), (8, launch, factor)):
    for f in (4e6, 6.7e7, 5e8):
      samples.append(Sample("matmul", "", group, 0, f, lat + s * f / peak))
    for b in (5e5, 4e6, 3e7):
      samples.append(Sample("elementwise", "", group, int(b), 0.0,
                            lat + s * b / bw))
    samples.append(Sample("launch", "", group, 8, 1.0, lat))
  fit = cal.fit_compute(samples, 8)
  assert fit.peak_flops_per_s == pytest.approx(peak, rel=1e-6)
  assert fit.bandwidth_bytes_per_s == pytest.approx(bw, rel=1e-6)
  assert fit.launch_alone_s == pytest.approx(l1, rel=1e-6)
  assert fit.launch_overhead_s == pytest.approx(launch, rel=1e-6)
  assert fit.shared_compute_factor == pytest.approx(factor, rel=1e-6)
  # Reference steps: their time per compute record is the launch cost.
  steps = [Sample("step", "", 8, 0, 17.0, 1e-3 + 17 * 5e-5),
           Sample("step", "", 8, 0, 77.0, 1e-3 + 77 * 5e-5)]
  assert cal.fit_compute(samples + steps, 8).launch_overhead_s == (
      pytest.approx(5e-5))
  with pytest.raises(cal.CalibrationError, match="no matmul"):
    cal.fit_compute([s for s in samples if s.what != "matmul"], 8)


def test_fit_topology_builds_links_per_physical_dimension():
  info = {"devices": [f"/job:worker/replica:0/task:{t}/device:CPU:{d}"
                      for t in range(2) for d in range(4)],
          "device_types": ["CPU"], "memory_bytes_per_device": 2**30}
  truth = {"device": FITS[0], "process": FITS[0]._replace(latency_s=1e-3)}
  samples = []
  for group, s in ((1, 1.0), (8, 4.0)):
    for f in (4e6, 6.7e7):
      samples.append(Sample("matmul", "", group, 0, f, 1e-5 + s * f / 1e11))
    for b in (5e5, 4e6):
      samples.append(Sample("elementwise", "", group, int(b), 0.0,
                            1e-5 + s * b / 1e10))
    samples.append(Sample("launch", "", group, 8, 1.0, 1e-5))
  for link, axis, p in (("device", "local", 4), ("process", "hosts", 2)):
    for n in (4096, 65536, 131072):
      # The rep's shape-restoring kernel (no bytes here) costs one launch.
      samples.append(Sample("allreduce", axis, p, n, 0.0,
                            truth[link].time_s(p, n) + 1e-5, link=link))
  topo, rows = calibration.fit_topology(samples, info, "two")
  assert [(d.name, d.size) for d in topo.dims] == [("process", 2),
                                                   ("device", 4)]
  proc = find_fit(topo.dims[0].link.collectives, "allreduce", 4096)
  assert proc.latency_s == pytest.approx(1e-3, rel=1e-3)
  assert topo.chip.shared_compute_factor == pytest.approx(4.0, rel=1e-6)
  assert {r[0] for r in rows} >= {"einsum", "launch", "allreduce"}


# --- the cost terms ----------------------------------------------------------
def test_presets_price_the_plain_roofline():
  rec = ComputeRecord("op", 10**9, 10**6, 10**6)
  for name in ("tpu-v4-4x4x4", "dgx-h100"):
    chip = costmodels.get_topology(name).chip
    assert (chip.launch_overhead_s, chip.shared_compute_factor) == (0, 1)
    assert compute.compute_time(rec, chip) == compute.roofline_time(
        10**9, 2 * 10**6, chip, rec.dtype, rec.matmul)


def test_launch_cost_and_shared_compute_are_priced_per_record():
  chip = _calibrated().chip
  rec = ComputeRecord("op", 3 * 10**8, 0, 0)
  assert compute.compute_time(rec, chip) == pytest.approx(
      2e-5 + 7.0 * compute.roofline_time(3e8, 0, chip, rec.dtype,
                                         rec.matmul))


def test_measured_collectives_use_the_algorithm_for_their_size():
  mapping = costmodels.map_mesh(_calibrated(), "a:2;b:4")
  small = costmodels.collective_time(("allreduce", ("b",), 4, 4096), mapping)
  large = costmodels.collective_time(("allreduce", ("b",), 4, 1 << 20),
                                     mapping)
  assert small == pytest.approx(FITS[0].time_s(4, 4096))
  assert large == pytest.approx(FITS[1].time_s(4, 1 << 20))
  both = costmodels.collective_time(("allreduce", ("a", "b"), 8, 4096),
                                    mapping)
  assert both == pytest.approx(FITS[0].time_s(8, 4096))  # one merged group
  shift = costmodels.collective_time(("receive", ("b",), 4, 1 << 20),
                                     mapping)
  assert shift == pytest.approx(3e-6)  # infinitely fast bytes
  # No fit for all-to-all: the ring formulas with the link's numbers.
  a2a = costmodels.collective_time(("alltoall", ("b",), 4, 4096), mapping)
  assert a2a == pytest.approx(costmodels.alltoall_time(4096, 4, 4e9, 1e-5,
                                                       "switch"))


def test_cross_process_axis_gets_its_own_fit():
  mapping = costmodels.map_mesh(_calibrated(2), "hosts:2;local:4")
  t = costmodels.collective_time(("allreduce", ("hosts",), 2, 4096), mapping)
  assert t == pytest.approx(FITS[0]._replace(latency_s=1e-3).time_s(2, 4096))


# --- calibrate(): errors and a quick run end to end --------------------------
def test_calibrate_needs_exactly_one_device_source(tmp_path):
  with pytest.raises(cal.CalibrationError, match="exactly one"):
    cal.calibrate(tmp_path / "x.json")
  with pytest.raises(cal.CalibrationError, match="exactly one"):
    cal.calibrate(tmp_path / "x.json", cpu_devices=8, gpus=1)
  with pytest.raises(cal.CalibrationError, match="at least 1"):
    cal.calibrate(tmp_path / "x.json", cpu_devices=0)
  with pytest.raises(topology_file.TopologyFileError, match=r"\.json"):
    cal.calibrate(tmp_path / "x.txt", cpu_devices=8)
  assert not os.listdir(tmp_path)


def test_calibrate_refuses_what_the_machine_cannot_give(tmp_path):
  out = tmp_path / "x.json"
  with pytest.raises(cal.CalibrationError, match="has 4 processors"):
    cal.calibrate(out, cpu_devices=8, meshes=["x:4"], quick=True)
  with pytest.raises(cal.CalibrationError, match="did not finish within"):
    cal.calibrate(out, cpu_devices=8, quick=True, timeout_s=1.0)
  import tensorflow as tf
  if not tf.config.list_physical_devices("GPU"):
    with pytest.raises(cal.CalibrationError, match="no GPU"):
      cal.calibrate(out, gpus=2, quick=True)
  assert not out.exists()


def test_calibrate_a_cluster_that_does_not_answer(tmp_path):
  from mesh_tf.distributed.local import free_ports
  ports = free_ports(2)
  with pytest.raises(cal.CalibrationError, match="does not answer"):
    cal.calibrate(tmp_path / "x.json", devices_per_task=4,
                  cluster=",".join(f"127.0.0.1:{p}" for p in ports),
                  cluster_timeout_s=2.0)
  assert not os.listdir(tmp_path)


def test_quick_calibration_end_to_end(tmp_path):
  out = tmp_path / "mycpu.json"
  c = cal.calibrate(out, cpu_devices=8, quick=True)
  topo = costmodels.get_topology(str(out))
  assert topo == c.topology and topo.num_chips == 8
  assert topo.chip.launch_overhead_s > 0
  assert topo.chip.shared_compute_factor > 0
  kinds = {f.kind for f in topo.dims[-1].link.collectives}
  assert kinds == {"allreduce", "allgather", "alltoall", "permute"}
  meta = topology_file.read_topology_file(out)[1]
  assert meta["meshes"] == ["x:8", "a:2;b:4"] and meta["samples"]
  # One sample per probe, as many as the progress bar was told.
  assert len(meta["samples"]) == measure.make_plan(
      tuple(meta["meshes"]), True, ("float32", "bfloat16")).num_benchmarks
  assert {"x", "a", "b"} <= {s["axis"] for s in meta["samples"]}
  assert set(c.frame().columns) == set(calibration.FIT_COLUMNS)
  # The fixed cost of a record inside a lowered step, from the small
  # models' training steps (that of a message is fitted only where the
  # data-parallel steps ran slower, which noise may hide in a quick run).
  assert "record in a step" in {r[0] for r in c.fits}
  steps = [s for s in meta["samples"] if s["what"] == "model_step"]
  # Only the Transformer and the wide MLP also data parallel
  # (Plan.data_steps): kilobyte and megabyte gradients.
  assert {s["pattern"] for s in steps} == {
      "transformer", "transformer batch:x", "transformer batch:b;d_ff:a",
      "conv3d", "mlp_wide", "mlp_wide batch:x"}
  assert all(s["records"] for s in steps)
  # Each collective of a step, for its bytes in a step (step_costs).
  assert all(len(s["transfers"]) == s["collectives"] for s in steps)
  # The reference steps give the step's fixed cost, and the quick plan
  # times a full and three thin convolutions a kernel.
  assert "step" in {r[0] for r in c.fits}
  assert {tuple(s["conv"]) for s in meta["samples"]
          if s["pattern"] == "conv"} == {(14, 1, 8), (14, 8, 1), (14, 8, 8),
                                         (2, 8, 8)}
  # The mixed steps run collectives of 1 to 7 messages (over a, b and
  # both), data parallel's of 7 each: what tells a collective's cost in a
  # step from a message's.
  per = {s["pattern"]: s["messages"] / s["collectives"] for s in steps
         if s["collectives"]}
  assert per["transformer batch:x"] == 7
  assert per["transformer batch:b;d_ff:a"] < 7 / 2
  # The tiny products' sweep, timed on all devices, and its fit.
  sweep = {tuple(s["matrix"]) for s in meta["samples"]
           if s["what"] == "kernel" and s["group_size"] == 8}
  assert sweep == set(probes.KERNEL_SIZES[::2])  # the quick plan's
  assert "threaded kernel" in {r[0] for r in c.fits}
  assert topo.chip.threaded_kernel_s >= 0
  from mesh_tf import models
  model = models.build_model("mlp_tiny")
  r = costmodels.evaluate(model.graph, "a:2;b:4", "batch:a", str(out))
  assert r.step_time_s > 0


def test_interleaved_times_every_probe_in_shuffled_rounds():
  """``measure.interleaved`` warms each probe once, then times it ``calls``
  times a round, the probes in a new order each round."""
  log = []

  class Fake:
    def __init__(self, name):
      self.name, self.warmed = name, 0

    def warm(self):
      self.warmed += 1

    def once(self):
      log.append(self.name)
      return float(len(log))

  probes = [Fake(k) for k in "abcde"]
  times = measure.interleaved(probes, rounds=6, calls=2)
  assert [p.warmed for p in probes] == [1] * 5
  assert [len(t) for t in times] == [12] * 5
  rounds = [log[i:i + 10:2] for i in range(0, len(log), 10)]
  assert all(sorted(r) == list("abcde") for r in rounds)
  assert len({tuple(r) for r in rounds}) > 1   # shuffled
  assert all(log[i] == log[i + 1] for i in range(0, len(log), 2))


def test_the_truth_benchmarks_extra_passes_time_every_step_in_new_orders():
  """``truth_timing.more_passes`` times each layout's step ``STEP_CALLS``
  more steady steps (after an untimed call) in each of ``passes - 1``
  passes, the layouts in a new order each pass; one pass adds nothing."""
  import random
  from benchmarks import truth_timing as truth
  log = []
  calls = [(lambda k=k: log.append(k), []) for k in "abcde"]
  truth.more_passes(calls, 1, random.Random(0))
  assert not log and all(not t for _, t in calls)
  truth.more_passes(calls, 4, random.Random(0))
  per_call = truth.STEP_CALLS + 1
  assert [len(t) for _, t in calls] == [3 * truth.STEP_CALLS] * 5
  passes = [log[i:i + 5 * per_call:per_call]
            for i in range(0, len(log), 5 * per_call)]
  assert len(passes) == 3 and all(sorted(p) == list("abcde") for p in passes)
  assert len({tuple(p) for p in passes}) > 1   # shuffled
