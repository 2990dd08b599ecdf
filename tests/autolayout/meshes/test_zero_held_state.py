"""What a pipelined step holds per device under ZeRO 0-3, float32 and
bfloat16 compute: the price's variables (master weights and optimizer
slots) and the compute copies it keeps all step are the lowered step's,
byte for byte, on 8 logical CPU devices.

The lowering (:mod:`mesh_tf.training.storage`) stores the float32 master
sharded from ZeRO 1 on; under ZeRO 1 and 2 it gathers the compute copy
once per step (from the cast of the shard under bfloat16) and keeps it;
under ZeRO 3 it keeps only the cast shard and gathers per use."""

import dataclasses

import pytest

import mesh_tf as mtf
from autolayout.plans import pipelined, run_pipelined
from autolayout.training import zero as zero_lib
from autolayout.training.pipeline_price import (PipelineLayout,
                                                measure_stage, price_layout)
from costmodels import memory as memory_lib
from costmodels.topology import gpu_cluster
from mesh_tf import models
from mesh_tf.ops.variables import Variable
from mesh_tf.lowering.lowering import Lowering
from mesh_tf.pipeline import PipelineTrainStep
from mesh_tf.training import optimize
from tests.autolayout.meshes.plan_traces import plan_collectives

DATA = 2


def _config():
  return models.get_config("transformer_tiny", layers=2, batch=12,
                           d_model=32, d_ff=128, heads=4, d_kv=8,
                           vocab=256, length=16)


def _held_copies(step, devices):
  """Bytes per device of the weights' compute copies each stage's ``pre``
  ops lower to (kept from the step's start to its last backward): the
  real TF slices, each counted once."""
  index = {d: i for i, d in enumerate(devices)}
  out, seen, kept = [0] * len(devices), set(), []
  for c in step.program.chunks:
    impl = step.impls[c.stage]
    lw = Lowering.empty(c.graph, {c.mesh: impl})
    lw.lower_operations(c.pre)
    for op in c.pre:
      for t in op.outputs:
        if (isinstance(op, Variable)
            or memory_lib.tensor_category(t) != "params"):
          continue
        for p, s in enumerate(lw.tensors[t].to_laid_out_tensor()
                              .tensor_list):
          if id(s) not in seen:
            seen.add(id(s))
            kept.append(s)   # ids stay unique while the slices live
            out[index[impl.devices[p]]] += (int(s.shape.num_elements())
                                            * s.dtype.size)
  return out


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
@pytest.mark.parametrize("zero", [0, 1, 2, 3])
def test_state_and_copies_are_the_lowered_slices(zero, dtype):
  cfg = _config()
  topo = gpu_cluster("a100", nodes=2 * DATA, gpus_per_node=1)
  lay = PipelineLayout(1, 2, DATA, zero=zero)
  work = measure_stage(cfg, topo, 1, DATA, param_dtype=dtype)
  price = price_layout(cfg, topo, lay, work)
  plan = pipelined.plan_of_price(price, cfg, topo, "tiny")
  devices = mtf.logical_cpu_devices(8)[:plan.mesh_shape.size]
  step_cfg = dataclasses.replace(
      pipelined.step_config(cfg, plan.training),
      param_dtype=None if dtype == "float32" else dtype)
  step = PipelineTrainStep(
      models.transformer_parts(step_cfg), plan.training.pipeline.pipeline,
      plan.mesh_shape, plan.rules, devices,
      optimize.AdamWeightDecayOptimizer(1e-3), zero_lib.storage_plan(zero))
  step.initialize_variables()
  memory = dict(plan.costs.memory_by_category)
  state = run_pipelined._state_bytes(step, devices)
  assert memory["weights_and_optimizer"] == max(state)
  copies = _held_copies(step, devices)
  stages = step.pipeline.stages
  per_stage = len(devices) // stages
  held = price.work
  for s in range(stages):
    n = price.cost.layers_per_group[s]
    want = n * held.layer_copy_bytes + held.end_copy_bytes(s, stages)
    assert copies[s * per_stage:(s + 1) * per_stage] == [want] * per_stage
  busiest = max(range(stages), key=lambda s: price.cost.stage_memory_bytes[s])
  assert memory["weight_copies"] == copies[busiest * per_stage]
  if dtype == "float32":
    # No cast copies; under ZeRO 1-2 the gathered float32 copy, whole.
    assert (max(copies) > 0) == (zero in (1, 2))


def test_zero3_gathers_at_the_ends_are_the_lowerings():
  """ZeRO 3 at the pipeline's ends: each end stage gathers the shards of
  the ends' variables it reads, once per pass that reads them (the first
  stage's embedding lookup and position embedding forward only; the last
  stage's tied output layer forward and backward, its final norm's scale
  twice and bias once): the priced bytes per microbatch are the lowered
  trace's."""
  from costmodels.stage_work import end_gathers
  from mesh_tf.pipeline.schedule import Step
  cfg = _config()
  topo = gpu_cluster("a100", nodes=2 * DATA, gpus_per_node=1)
  lay = PipelineLayout(1, 2, DATA, zero=3)
  price = price_layout(cfg, topo, lay)
  plan = pipelined.plan_of_price(price, cfg, topo, "tiny")
  got = {}
  for seg, c, src in plan_collectives(cfg, price, plan):
    if (c.kind == "allconcat" and not src.startswith("layer_")
        and isinstance(seg.step, Step)):
      key = (seg.stage, seg.step.microbatch)
      got[key] = got.get(key, 0) + c.bytes_per_device
  first, last = end_gathers(price.work, DATA)
  m = price.cost.pipeline.microbatches
  assert got == {**{(0, i): first for i in range(m)},
                 **{(1, i): last for i in range(m)}}
  assert first < last and price.work.base_gather_bytes == first + last
