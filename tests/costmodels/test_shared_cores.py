"""The pipelined step on devices that share a host's cores: a stage that
waits leaves its cores to the stages that compute (costmodels.shared_cores),
hand-computed schedules, the bounds, and presets priced as before; the
measured parts of the stage work it needs (the forward pass), and a ZeRO
shard's update that keeps its records' fixed costs."""

import pytest

from autolayout.training import decisions as dec
from autolayout.training.pipeline_price import PipelineLayout, price_layout
from costmodels import pipeline as pipe
from costmodels import shared_cores as sc
from costmodels.evaluate import trace_graph
from costmodels.stage_work import price_sync, stage_work
from costmodels.topology import get_topology, map_mesh
from mesh_tf import models
from mesh_tf.core.errors import MtfError
from mesh_tf.pipeline import Pipeline


def test_effective_cores_and_speedup_of_factor_4_over_8_devices():
  # 8 devices 4x slower all at once than alone: the host runs 2 alone.
  assert sc.effective_cores(4.0, 8) == 2.0
  # 8 stages of one device: 1 or 2 computing run alone (4x), 4 share 2
  # devices' worth (2x), all 8 run at the priced speed.
  assert [sc.stage_speedup(k, 8, 4.0) for k in (1, 2, 4, 8)] == [
      4.0, 4.0, 2.0, 1.0]
  # 2 stages of 4 devices: one stage alone gets all the cores (2x).
  assert sc.stage_speedup(1, 2, 4.0) == 2.0
  # Own compute per device (every preset): always the priced speed.
  assert sc.stage_speedup(1, 8, 1.0) == 1.0
  with pytest.raises(MtfError, match="shared_compute_factor=0"):
    sc.effective_cores(0.0, 8)


def test_one_microbatch_through_two_stages_runs_each_step_alone():
  # F 1 s, B 2 s per stage; f = 4 over 2 stages: each step runs alone at
  # min(4, 2 / 1) = 2x: 0.5 + 0.5 + 1 + 1.
  pl = Pipeline("stage", 2, 1, 2)
  assert sc.schedule_time(pl, (1.0, 1.0), (2.0, 2.0), (0.0, 0.0),
                          4.0) == pytest.approx(3.0)
  # Own cores: the plain schedule, (m + p - 1)(F + B).
  assert sc.schedule_time(pl, (1.0, 1.0), (2.0, 2.0), (0.0, 0.0),
                          1.0) == pytest.approx(6.0)


def test_two_microbatches_1f1b_by_hand():
  # Stage 0 runs F0 F1 B0 B1, stage 1 F0 B0 F1 B1; f = 4, 2 stages.
  #  0.0-0.5 s0 F0 alone (2x)          0.5-1.5 s0 F1 + s1 F0 (1x)
  #  1.5-2.5 s1 B0 alone (2 s at 2x)   2.5-3.5 s0 B0 + s1 F1 (1x)
  #  3.5-4.5 s0 B0 (its last 1 s) + s1 B1 (1x)
  #  4.5-5.0 s1 B1 alone (1 s left)    5.0-6.0 s0 B1 alone (2 s at 2x)
  pl = Pipeline("stage", 2, 2, 2)
  assert sc.schedule_time(pl, (1.0, 1.0), (2.0, 2.0), (0.0, 0.0),
                          4.0) == pytest.approx(6.0)
  # = the total work over the cores, 2 stages x 2 x 3 s / 2, where the
  # bubble formula says m t (1 + (p - 1) / m) = 9.
  assert 2 * 3 * (1 + 1 / 2) == 9.0


def test_once_per_step_work_shares_the_cores_with_the_drain():
  # F = B = 1, each stage's update 1 s.  s0 F, s1 F, s1 B alone (0.5 s
  # each); then s1's update and s0's B together (1 s); s0's update alone.
  pl = Pipeline("stage", 2, 1, 2)
  assert sc.schedule_time(pl, (1.0, 1.0), (1.0, 1.0), (1.0, 1.0),
                          4.0) == pytest.approx(3.0)


def test_critical_path_binds_when_one_stage_cannot_use_the_host():
  # 8 one-device stages, f = 4, one microbatch: one stage computes at a
  # time, at most 4x (alone): 16 unit steps / 4 = 4 s, more than the
  # total work over the cores (16 / 8 = 2 s).
  pl = Pipeline("stage", 8, 1, 8)
  assert sc.schedule_time(pl, (1.0,) * 8, (1.0,) * 8, (0.0,) * 8,
                          4.0) == pytest.approx(4.0)
  # f = 8 (one device alone keeps the host busy): the total work, 2 s.
  assert sc.schedule_time(pl, (1.0,) * 8, (1.0,) * 8, (0.0,) * 8,
                          8.0) == pytest.approx(2.0)


@pytest.mark.parametrize("schedule,v,m", [("gpipe", 1, 4), ("1f1b", 1, 4),
                                          ("1f1b", 1, 2),
                                          ("interleaved_1f1b", 2, 4)])
def test_between_the_critical_path_and_the_work_over_the_cores(schedule, v,
                                                               m):
  p, f = 4, 2.0
  pl = Pipeline("stage", p, m, p * v, v, schedule)
  fw = tuple(1.0 + 0.1 * j for j in range(p * v))
  bw = tuple(2.0 * x for x in fw)
  fin = (0.3, 0.2, 0.1, 0.4)
  t = sc.schedule_time(pl, fw, bw, fin, f)
  alone = sc.schedule_time(pl, fw, bw, fin, 1.0)  # the priced speed
  work = (m * (sum(fw) + sum(bw)) + sum(fin)) / p
  assert max(work, alone / f) - 1e-9 <= t <= alone + 1e-9
  assert t < alone


def _work():
  return pipe.StageWork(layer_s=3.0, first_s=0.6, last_s=1.5,
                        layer_step_s=0.2, layer_forward_s=1.0,
                        first_forward_s=0.3, last_forward_s=0.5)


def test_price_pipeline_on_shared_cores_is_the_schedule_time():
  pl = Pipeline("stage", 2, 2, 2)
  same = pipe.price_pipeline(_work(), pl, 2)
  one = pipe.price_pipeline(_work(), pl, 2, shared_compute_factor=1.0)
  shared = pipe.price_pipeline(_work(), pl, 2, shared_compute_factor=4.0)
  # Own compute: the bubble formula, exactly as before.
  assert one == same and same.core_sharing_s == 0.0
  assert same.step_time_s == same.steady_s + same.bubble_s + same.step_work_s
  # Shared: stage 0 runs F 1.3 / B 2.3 (embedding), stage 1 F 1.5 / B 3.0
  # (output layer and loss), each stage's update 0.2 after its last B.
  want = sc.schedule_time(pl, (1.3, 1.5), (2.3, 3.0), (0.2, 0.2), 4.0)
  assert shared.step_time_s == pytest.approx(want)
  # By hand (2x alone, 1x together): s0 F0 0.65; s0 F1 + s1 F0 to 1.95;
  # s1 F0's last 0.2 alone to 2.05; s1 B0 alone to 3.55; s0 B0 + s1 F1
  # to 5.05; s0 B0's last 0.8 + s1 B1 to 5.85; s1 B1's last 2.2 alone to
  # 6.95; s0 B1 + s1's update to 7.15; s0 B1's last 2.1 alone to 8.2; its
  # update to 8.3.
  assert want == pytest.approx(8.3)
  assert shared.steady_s == same.steady_s
  assert shared.bubble_s == same.bubble_s
  assert shared.core_sharing_s == pytest.approx(
      same.step_time_s - want) and shared.core_sharing_s > 0
  # No pipeline: one stage, nothing waits.
  flat = pipe.price_pipeline(_work(), None, 2, 4, shared_compute_factor=4.0)
  assert flat.core_sharing_s == 0.0


def test_unmeasured_forward_is_a_third_of_the_pass():
  w = pipe.StageWork(layer_s=3.0, first_s=0.6, last_s=1.5)
  assert w.forward_parts() == pytest.approx((1.0, 0.2, 0.5))


def _build(recompute):
  def build(layers):
    cfg = models.get_config("transformer_tiny", layers=layers, batch=4,
                            d_model=32, d_ff=64, heads=4, d_kv=8, vocab=128)
    d = dec.TrainingDecisions("bfloat16", 0, layers if recompute else 0, 2)
    t = dec.build_training(cfg, d)
    return t.graph, t.plan
  return build


def test_forward_part_is_measured_from_the_trace():
  topo = get_topology("dgx-a100")
  topo = topo._replace(dims=(topo.dims[0]._replace(size=1),
                             topo.dims[1]._replace(size=2)))
  plain = stage_work(_build(False), "data:2", "batch:data", topo,
                     data_axes=("data",))
  rec = stage_work(_build(True), "data:2", "batch:data", topo,
                   data_axes=("data",))
  for w in (plain, rec):
    layer, first, last = w.forward_parts()
    assert 0 < layer < w.layer_s and 0 < first < w.first_s
    assert 0 < last < w.last_s
  # Recomputation runs in the backward step: the forward pass is the same
  # records (but for one add the recomputing graph builds wider), the
  # backward step longer by about a forward.
  assert rec.layer_forward_s == pytest.approx(plain.layer_forward_s,
                                              rel=0.05)
  assert rec.layer_s - rec.layer_forward_s > (
      plain.layer_s - plain.layer_forward_s + 0.5 * plain.layer_forward_s)
  # Without recompute, the backward computes two products per forward one.
  assert 0.2 < plain.layer_forward_s / plain.layer_s < 0.45


def _shared(topology, factor):
  chip = topology.chip._replace(shared_compute_factor=factor)
  return topology._replace(chip=chip)


def test_presets_price_as_before_and_shared_cores_price_less():
  cfg = models.get_config("transformer_tiny", layers=4, batch=8)
  lay = PipelineLayout(1, 4, 2, microbatch=1)
  topo = get_topology("dgx-a100")
  preset = price_layout(cfg, topo, lay).cost
  assert preset.core_sharing_s == 0.0
  assert preset.step_time_s == pytest.approx(
      preset.steady_s + preset.bubble_s + preset.step_work_s, rel=1e-15)
  shared = price_layout(cfg, _shared(topo, 4.0), lay).cost
  # Every record's compute 4x slower all at once (the steady microbatches
  # and the bubble at that price); the waiting stages' cores go to the
  # others.
  assert shared.steady_s > preset.steady_s
  formula = shared.steady_s + shared.bubble_s + shared.step_work_s
  assert shared.core_sharing_s > 0
  assert shared.step_time_s == pytest.approx(
      formula - shared.core_sharing_s, rel=1e-12)
  # Never faster than the stages' total work over the host's cores.
  m = shared.microbatches
  total = sum(m * t for t in shared.stage_times_s) / 4
  assert shared.step_time_s >= total * (1 - 1e-9)



def test_a_zero_shards_update_pays_its_records_fixed_costs_whole():
  """ZeRO 1 over 4 replicas updates a quarter of each variable, in as many
  records as the whole one: the launch cost of each (calibrated; 0 on a
  preset) stays whole, the rest is divided."""
  topo = get_topology("dgx-a100")
  topo = topo._replace(dims=(topo.dims[0]._replace(size=1),
                             topo.dims[1]._replace(size=4)))
  launch = 1e-5
  cal = topo._replace(chip=topo.chip._replace(launch_overhead_s=launch))
  work = stage_work(_build(False), "data:2", "batch:data", cal,
                    data_axes=("data",), price_mesh="data:4")
  graphs = [_build(False)(n) for n in (1, 2)]
  steps = [sum(1 for r in trace_graph(g, "data:2", "batch:data").compute
               if plan.repeats(r.op_name) == 1) for g, plan in graphs]
  assert work.layer_step_fixed_s == pytest.approx(
      (steps[1] - steps[0]) * launch)
  assert stage_work(_build(False), "data:2", "batch:data", topo,
                    data_axes=("data",),
                    price_mesh="data:4").layer_step_fixed_s == 0.0
  mapping = map_mesh(cal, "data:4")
  zero1 = price_sync(work, mapping, ("data",), zero=1)
  part = work.sharded_fraction(4)
  rest = work.layer_step_s - work.layer_step_fixed_s
  assert zero1.layer_step_s == pytest.approx(
      work.layer_step_fixed_s + rest * (1 - part + part / 4))
  assert zero1.layer_step_s > work.layer_step_s / 4
