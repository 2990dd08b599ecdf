"""ZeRO over a data size that divides no storage dim: the pipelined price
says what the lowering does.  The lowering lays a variable's storage dim
(``d_model``) over the data axis only where the data size divides it, and
stores the variable whole otherwise (with a plain all-reduce of its
gradient); the price shards exactly the variables the lowering shards,
in bytes (the real slices on 8 logical CPU devices) and in collectives
(the pipelined lowering's trace)."""

import pytest

import mesh_tf as mtf
from autolayout.meshes import pipeline_search as ps
from autolayout.plans import pipelined, run_pipelined
from autolayout.training import zero as zero_lib
from autolayout.training.pipeline_price import (PipelineLayout,
                                                measure_stage, price_layout)
from costmodels.pipeline import StageWork
from costmodels.topology import gpu_cluster
from mesh_tf import models
from mesh_tf.pipeline import PipelineTrainStep
from mesh_tf.pipeline.schedule import Step
from mesh_tf.training import optimize
from tests.autolayout.meshes.plan_traces import plan_collectives


def _config(d_model):
  return models.get_config("transformer_tiny", layers=2, batch=12,
                           d_model=d_model, d_ff=128, heads=4, d_kv=8,
                           vocab=256, length=16)


def _priced(d_model, data, zero):
  cfg = _config(d_model)
  topo = gpu_cluster("a100", nodes=2 * data, gpus_per_node=1)
  lay = PipelineLayout(1, 2, data, zero=zero)
  price = price_layout(cfg, topo, lay)
  return cfg, topo, price, pipelined.plan_of_price(price, cfg, topo, "tiny")


def test_sharded_part_counts_the_variables_the_data_size_divides():
  work = StageWork(layer_s=1.0, layer_storage=((0, 10), (33, 30), (64, 60)))
  assert work.sharded_part(1000, 2) == 600
  assert work.sharded_part(1000, 3) == 300
  assert work.sharded_part(1000, 11) == 300
  assert work.sharded_part(1000, 5) == 0
  assert work.sharded_fraction(2) == pytest.approx(0.6)
  # A work without the split (built by hand) shards everything.
  assert StageWork(layer_s=1.0).sharded_part(1000, 7) == 1000


@pytest.mark.parametrize("d_model,data,zero", [
    (33, 2, 1), (33, 2, 3), (33, 3, 3)])
def test_state_bytes_are_the_lowered_slices(d_model, data, zero):
  """d_model 33: 2 replicas store every variable whole (no storage rule),
  3 replicas shard it; the predicted variables of the busiest stage are
  the bytes of the lowered step's slices on its devices."""
  cfg, _, price, plan = _priced(d_model, data, zero)
  sharded = d_model % data == 0
  assert ("d_model_storage:data" in str(plan.rules)) == sharded
  devices = mtf.logical_cpu_devices(8)[:plan.mesh_shape.size]
  d = plan.training
  step = PipelineTrainStep(
      models.transformer_parts(pipelined.step_config(cfg, d)),
      d.pipeline.pipeline, plan.mesh_shape, plan.rules, devices,
      optimize.AdamWeightDecayOptimizer(1e-3), zero_lib.storage_plan(zero))
  step.initialize_variables()
  measured = run_pipelined._state_bytes(step, devices)
  predicted = dict(plan.costs.memory_by_category)["weights_and_optimizer"]
  assert predicted == max(measured)
  whole = dict(_priced(d_model, data, 0)[3].costs.memory_by_category)
  assert (predicted < whole["weights_and_optimizer"]) == sharded


@pytest.mark.parametrize("data", [2, 3])
def test_zero3_collectives_are_the_lowerings(data):
  """Whole variables (d_model 33 on 2 replicas) all-reduce their
  gradients per microbatch and gather nothing; sharded ones (3 replicas)
  reduce-scatter and gather their shards twice per microbatch: the
  priced bytes are the lowered trace's, per layer and microbatch."""
  cfg, topo, price, plan = _priced(33, data, 3)
  work = measure_stage(cfg, topo, 1, 2)
  sync = work.sharded_part(work.layer_sync_bytes, data)
  assert sync == (work.layer_sync_bytes if data == 3 else 0)
  assert price.work.layer_gather_bytes == 2 * (sync // data)
  assert price.work.working_bytes == work.working_bytes + sync
  got = {}
  for seg, c, src in plan_collectives(cfg, price, plan):
    if c.kind in ("send", "recv") or not src.startswith("layer_"):
      continue
    assert isinstance(seg.step, Step) and c.mesh_axes == ("data",)
    key = (c.kind, src.split("/")[0], seg.step.microbatch)
    got[key] = got.get(key, 0) + c.bytes_per_device
  m = price.cost.pipeline.microbatches
  kinds = {k for k, _, _ in got}
  if data == 2:
    assert kinds == {"allreduce"}
    assert set(got.values()) == {work.layer_sync_bytes}
  else:
    assert kinds == {"allconcat", "reduce_scatter"}
    assert {v for (k, _, _), v in got.items() if k == "allconcat"} == {
        price.work.layer_gather_bytes}
    assert {v for (k, _, _), v in got.items()
            if k == "reduce_scatter"} == {sync}
  assert len(got) == len(kinds) * cfg.layers * m


def test_zero1_over_an_indivisible_data_size_is_zero0():
  """ZeRO 1 on 2 replicas of d_model 33 lowers as ZeRO 0 (whole state, a
  plain all-reduce once per step as ZeRO 0 is priced; the recomputed
  layers read the one cast copy); ZeRO 3 adds the
  per-microbatch all-reduce of its storage op and saves nothing, and the
  search's memory bound is the priced state."""
  _, _, z0, _ = _priced(33, 2, 0)
  _, _, z1, _ = _priced(33, 2, 1)
  _, _, z3, _ = _priced(33, 2, 3)
  # One held cast copy of each layer weight, where ZeRO 0's recomputed
  # layer casts its weights again (the step holds both casts).
  assert z1.work._replace(layer_copy_bytes=0) == z0.work._replace(
      layer_copy_bytes=0)
  assert 2 * z1.work.layer_copy_bytes == z0.work.layer_copy_bytes
  assert z1.step_time_s == z0.step_time_s
  assert z3.peak_memory_bytes == z1.peak_memory_bytes
  assert z3.step_time_s > z0.step_time_s
  cfg, topo = _config(33), gpu_cluster("a100", nodes=4, gpus_per_node=1)
  work = measure_stage(cfg, topo, 1, 2)
  assert ps._state_bound(work, cfg.layers, 2, 2, 3) == (
      cfg.layers // 2 * z3.work.layer_state_bytes)
  assert work.layer_state_bytes == z3.work.layer_state_bytes
