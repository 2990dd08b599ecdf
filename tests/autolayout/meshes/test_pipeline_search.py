"""The pipelined layout search: exact (brute force equals it), any chip
count gets a plan (idle chips or padding), and "no plan" names the chips
that would hold the model."""

import dataclasses
import math

import pytest

from autolayout.meshes import pipeline_search as ps
from autolayout.training.pipeline_price import (PipelineLayout,
                                                measure_stage,
                                                measuring_data, price_layout)
from costmodels.topology import gpu_cluster
from mesh_tf import models
from tests.autolayout.meshes.pipeline_brute import brute_best
from mesh_tf.pipeline import trace_pipeline
from mesh_tf.pipeline.schedule import Step
from mesh_tf.training import optimize


def _tiny(layers=4, batch=16, heads=4):
  return models.get_config("transformer_tiny", layers=layers, batch=batch,
                           d_model=32, d_ff=128, heads=heads, d_kv=8,
                           vocab=256, length=16)


@pytest.mark.parametrize("budget_mib,space", [
    (None, dict(tensor=(1, 2), microbatch=(1, 2), recompute=("full",))),
    (0.6, dict(tensor=(1,), microbatch=(1, 2), recompute=("full", "none"))),
])
def test_search_equals_brute_force_with_stages_chunks_microbatches(
    budget_mib, space):
  config = _tiny(batch=8)
  topo = gpu_cluster("a100", nodes=2, gpus_per_node=2)
  budget = 2**40 if budget_mib is None else int(budget_mib * 2**20)
  got = ps.search_pipelines(config, topo, budget, **space)
  want = brute_best(config, topo, budget, **space)
  assert got.status == "optimal" and got.gap == 0.0
  assert got.best.layout == want[1].layout
  assert got.best.step_time_s == want[1].step_time_s
  # The space holds several stage counts, chunk counts and microbatch
  # counts, and the budget binds where it is set.
  lays = ps.layouts(config, topo, **space)
  assert {x.stages for x in lays} >= {1, 2, 4}
  assert {x.chunks for x in lays} >= {1, 2}
  assert len({x.microbatches(config.batch) for x in lays}) >= 3
  if budget_mib is not None:
    assert got.over_budget + got.skipped > 0


@pytest.mark.parametrize("nodes,per_node", [
    (13, 1),     # a prime chip count
    (9, 1),      # odd
    (124, 8),    # 992 = 2^5 * 31
    (48, 8),     # 384 = 2^7 * 3
    (280, 8),    # 2240 = 2^6 * 5 * 7
    (384, 8),    # 3072 = 2^10 * 3
    (31, 8),     # a prime number of 8-GPU nodes
])
def test_any_chip_count_gets_a_plan(nodes, per_node):
  config = _tiny(layers=6, batch=96, heads=8) if per_node == 1 else (
      models.get_config("gpt3_175b", layers=8, d_model=1024, heads=16,
                        d_kv=64, d_ff=4096, vocab=51200, length=2048,
                        batch=1024))
  topo = gpu_cluster("a100", nodes=nodes, gpus_per_node=per_node)
  r = ps.search_pipelines(config, topo, microbatch=(1,),
                          recompute=("full",),
                          tensor=(1,) if per_node == 1 else (8,))
  best = r.best
  assert r.status == "optimal"
  assert best.layout.chips + best.idle_chips == nodes * per_node
  m = best.microbatches
  assert (m * best.layout.data * best.layout.microbatch
          == config.batch + best.padded_sequences)
  # The other way (the other data-parallel size of the same tensor and
  # stage counts) was priced too, and is not faster.  (``best.work`` is
  # re-priced for the best layout's ZeRO stage: measure afresh.)
  work = measure_stage(config, topo, best.layout.model,
                       measuring_data(best.layout, topo), 1, "full",
                       best.layout.placement)
  for d in ps._data_sizes(config, topo, best.layout.model,
                          best.layout.stages, 1):
    other = price_layout(config, topo, best.layout._replace(data=d), work)
    assert other.step_time_s >= best.step_time_s or (
        other.peak_memory_bytes > r.best.peak_memory_bytes * 10)
  # A prime or odd count the batch does not divide: chips idle or the
  # batch padded, and the plan says which.
  if (nodes * per_node) % 2:
    assert best.idle_chips > 0 or best.padded_sequences > 0


@pytest.mark.parametrize("zero,need", [((0, 1, 2), 4), ((0, 1, 2, 3), 3)])
def test_no_plan_names_the_smallest_chip_count_that_would(zero, need):
  """Without ZeRO 3 the smallest count is one replica's stages; with it,
  data-parallel replicas that shard the whole state hold it on fewer
  (d_model 36: 3 replicas divide its storage dim, so the lowering shards
  it; see test_zero_whole_storage.py)."""
  config = dataclasses.replace(_tiny(layers=8, batch=8), d_model=36)
  small = gpu_cluster("a100", nodes=2, gpus_per_node=1)
  budget = 1250 * 2**10   # with the held bf16 compute copies
  space = dict(microbatch=(1,), recompute=("full",), zero=zero)
  with pytest.raises(ps.PipelineInfeasibleError,
                     match=f"smallest chip count that would hold it is {need}"
                     ) as e:
    ps.search_pipelines(config, small, budget, **space)
  assert e.value.min_chips == need
  # That many chips hold it, one fewer does not.
  ok = ps.search_pipelines(config, gpu_cluster("a100", nodes=need,
                                               gpus_per_node=1), budget,
                           **space)
  assert ok.best.peak_memory_bytes <= budget
  assert (ok.best.layout.zero == 3) == (3 in zero)
  with pytest.raises(ps.PipelineInfeasibleError):
    ps.search_pipelines(config, gpu_cluster("a100", nodes=need - 1,
                                            gpus_per_node=1), budget,
                        **space)


def test_tensor_parallelism_lands_on_nvlink_and_both_were_compared():
  config = models.get_config("gpt3_175b", layers=8, d_model=4096, heads=32,
                             d_kv=128, d_ff=16384, vocab=51200,
                             length=2048, batch=64)
  # 64 chips: with TP 8 and DP 8 the tensor axis can lie inside the nodes
  # or across all 8 of them.
  topo = gpu_cluster("a100", nodes=8, gpus_per_node=8)
  r = ps.search_pipelines(config, topo, tensor=(8,), microbatch=(1,),
                          recompute=("full",))
  inner, outer = r.by_placement["inner"], r.by_placement["outer"]
  assert inner is not None and outer is not None
  assert r.best.layout.placement == "inner" and inner < outer
  assert math.isclose(r.best.step_time_s, inner)


def test_one_measurement_serves_every_data_parallel_size():
  """Per-device work measured at data:2 is that measured at data:4 (the
  reuse the search relies on), and the gradient reduction is re-priced."""
  config = _tiny(batch=16)
  topo = gpu_cluster("a100", nodes=4, gpus_per_node=2)
  two = measure_stage(config, topo, 2, 2)
  four = measure_stage(config, topo, 2, 4)
  for f in ("layer_s", "first_s", "last_s", "layer_step_s",
            "layer_stash_bytes", "layer_state_bytes", "boundary_bytes",
            "layer_sync_bytes"):
    assert getattr(two, f) == pytest.approx(getattr(four, f), rel=1e-9), f
  lay = PipelineLayout(2, 1, 4)
  assert price_layout(config, topo, lay, two).step_time_s == pytest.approx(
      price_layout(config, topo, lay, four).step_time_s, rel=1e-9)


def test_published_layout_is_in_the_space_and_priced_the_same():
  config = _tiny(layers=4, batch=16)
  topo = gpu_cluster("a100", nodes=4, gpus_per_node=2)
  lay = PipelineLayout(2, 2, 2, 2, 1, "full", "inner")
  assert lay in ps.layouts(config, topo)
  r = ps.search_pipelines(config, topo, tensor=(2,), stages=(2,),
                          chunks=(2,), microbatch=(1,), recompute=("full",),
                          zero=(0,))
  direct = price_layout(config, topo, lay)
  assert r.best.layout == lay
  assert r.best.step_time_s == direct.step_time_s


def test_search_equals_brute_force_with_the_zero_stage():
  """ZeRO 0-3 in the pipelined space: the search is still the
  brute-force optimum, and where the budget binds sharding more state
  (optimizer, gradients, weights) is what makes the plan fit."""
  config = _tiny(batch=8)
  topo = gpu_cluster("a100", nodes=4, gpus_per_node=2)
  space = dict(tensor=(1,), microbatch=(1,), recompute=("full",),
               zero=(0, 1, 2, 3))
  lays = ps.layouts(config, topo, **space)
  assert {x.zero for x in lays} == {0, 1, 2, 3}
  assert ps.DEFAULT_ZERO == (0, 1, 2, 3)
  assert all(x.data > 1 for x in lays if x.zero)
  chosen = set()
  for budget in (2**40, int(0.6 * 2**20), int(0.4 * 2**20)):
    got = ps.search_pipelines(config, topo, budget, **space)
    want = brute_best(config, topo, budget, **space)
    assert got.status == "optimal"
    assert got.best.layout == want[1].layout
    assert got.best.step_time_s == want[1].step_time_s
    chosen.add(got.best.layout.zero)
  # Each tighter budget is met by sharding more.  (ZeRO 1 moves the bytes
  # of ZeRO 0's all-reduce, as a reduce-scatter and an all-gather, and
  # updates a shard: with data parallelism it is never slower.)
  assert chosen == {1, 2, 3}


def test_zero_shards_the_optimizer_state_and_swaps_the_all_reduce():
  config = _tiny(batch=16)
  topo = gpu_cluster("a100", nodes=4, gpus_per_node=2)
  lay = PipelineLayout(1, 2, 4, 1, 1, "full", "inner")
  work = measure_stage(config, topo, 1, 2)
  assert work.layer_optimizer_bytes > 0 and work.layer_gradient_bytes > 0
  z0, z1, z2 = (price_layout(config, topo, lay._replace(zero=z), work)
                for z in (0, 1, 2))
  # Memory: ZeRO 1 takes 3/4 of each layer's optimizer state and float32
  # master weights off a device (data 4; the lowering stores both
  # sharded), ZeRO 2 the gradients' too.
  masters = (work.layer_state_bytes - work.layer_optimizer_bytes
             - work.layer_gradient_bytes)
  assert (z0.work.layer_state_bytes - z1.work.layer_state_bytes
          == work.layer_optimizer_bytes - work.layer_optimizer_bytes // 4
          + masters - masters // 4)
  assert (z1.work.layer_state_bytes - z2.work.layer_state_bytes
          == work.layer_gradient_bytes - work.layer_gradient_bytes // 4)
  assert z0.peak_memory_bytes > z1.peak_memory_bytes > z2.peak_memory_bytes
  # Time: a reduce-scatter and an all-gather instead of the all-reduce
  # (the update of a quarter shard); ZeRO 2 reduce-scatters per
  # microbatch, so it is slower than ZeRO 1 with several microbatches.
  assert z1.work.layer_step_s == pytest.approx(work.layer_step_s / 4)
  assert z1.work.layer_sync_s > 0 and z0.work.layer_sync_s > 0
  assert z2.work.layer_s > z1.work.layer_s
  assert z2.microbatches > 1 and z2.step_time_s > z1.step_time_s
  assert "ZeRO 1" in z1.layout.describe()
  with pytest.raises(Exception, match="zero=4"):
    price_layout(config, topo, lay._replace(zero=4), work)


@pytest.mark.parametrize("recompute", ["full", "none"])
def test_zero3_gathers_per_microbatch_are_the_lowerings(recompute):
  """ZeRO 3 shards the weights too (less memory than ZeRO 2) and gathers
  each layer's shard before every microbatch's forward and backward: the
  predicted gather bytes are those of the pipelined lowering's trace, per
  layer and per microbatch (a backward without recompute regathers a few
  bytes less: priced within 1%)."""
  config = _tiny(batch=8)
  topo = gpu_cluster("a100", nodes=4, gpus_per_node=2)
  lay = PipelineLayout(1, 2, 2, 1, 1, recompute, "inner", zero=3)
  work = measure_stage(config, topo, 1, 2, 1, recompute)
  z3 = price_layout(config, topo, lay, work)
  z2 = price_layout(config, topo, lay._replace(zero=2), work)
  assert "ZeRO 3" in z3.layout.describe()
  # The same sharded state as ZeRO 2; only the cast shard held all step,
  # not the gathered compute copy.
  assert z3.work.layer_state_bytes == z2.work.layer_state_bytes
  assert z3.work.layer_copy_bytes < z2.work.layer_copy_bytes
  assert z3.peak_memory_bytes < z2.peak_memory_bytes
  assert z3.work.layer_s > z2.work.layer_s and z3.work.layer_sync_s == 0.0
  assert z3.work.layer_gather_bytes > 0 == z2.work.layer_gather_bytes
  pipe = z3.cost.pipeline
  lowered = dataclasses.replace(
      config, param_dtype="bfloat16",
      recompute=config.layers if recompute == "full" else 0)
  trace = trace_pipeline(lowered.parts(), pipe, lay.mesh(),
                         z3.rules + ";d_model_storage:data",
                         optimize.SgdOptimizer(0.1), storage=3)
  gathered = {}
  for seg in trace.segments:
    if not isinstance(seg.step, Step):
      continue
    for c in seg.collectives:
      if c.kind == "allconcat" and c.op_name.startswith("layer_"):
        assert c.mesh_axes == ("data",)
        key = (c.op_name.split("/")[0], seg.step.microbatch)
        gathered[key] = gathered.get(key, 0) + c.bytes_per_device
  # Every layer, every microbatch.
  assert len(gathered) == config.layers * pipe.microbatches
  for got in gathered.values():
    if recompute == "full":
      assert got == z3.work.layer_gather_bytes
    else:
      assert got == pytest.approx(z3.work.layer_gather_bytes, rel=0.01)


def test_zero1_gathers_each_shard_once_per_step():
  """ZeRO 1's all-gather of the updated weights is priced by the shard
  each device starts with (the all-gather convention of
  :func:`costmodels.collectives.allgather_time`): the lowering gathers
  ``layer_sync_bytes / D`` per layer and device, once per step."""
  config = _tiny(batch=8)
  topo = gpu_cluster("a100", nodes=4, gpus_per_node=2)
  lay = PipelineLayout(1, 2, 2, 1, 1, "full", "inner", zero=1)
  work = measure_stage(config, topo, 1, 2)
  z1 = price_layout(config, topo, lay, work)
  lowered = dataclasses.replace(config, param_dtype="bfloat16",
                                recompute=config.layers)
  trace = trace_pipeline(lowered.parts(), z1.cost.pipeline, lay.mesh(),
                         z1.rules + ";d_model_storage:data",
                         optimize.SgdOptimizer(0.1), storage=1)
  gathered = {}
  for seg in trace.segments:
    for c in seg.collectives:
      if c.kind == "allconcat" and c.op_name.startswith("layer_"):
        assert seg.step == "setup"
        key = c.op_name.split("/")[0]
        gathered[key] = gathered.get(key, 0) + c.bytes_per_device
  assert len(gathered) == config.layers
  assert set(gathered.values()) == {work.layer_sync_bytes // lay.data}


def test_no_plan_at_scale_names_a_chip_count_zero3_lowers():
  """GPT-3 175B on 16 A100s: no plan; the smallest count is found among
  meshes a grown cluster can take (data-parallel replicas that do not fit
  a node's dims are skipped), and ZeRO 3 needs no more chips."""
  config = models.get_config("gpt3_175b")
  needs = []
  for zero in ((0, 1, 2), (0, 1, 2, 3)):
    with pytest.raises(ps.PipelineInfeasibleError) as e:
      ps.search_pipelines(config, "a100x8-nodes2", microbatch=(1,),
                          zero=zero)
    assert e.value.min_chips is not None and e.value.min_chips % 8 == 0
    needs.append(e.value.min_chips)
  assert needs[1] <= needs[0]
  # That many chips hold it.
  ok = ps.search_pipelines(config, f"a100x8-nodes{needs[1] // 8}",
                           microbatch=(1,))
  assert ok.status == "optimal" and ok.best.layout.chips <= needs[1]
