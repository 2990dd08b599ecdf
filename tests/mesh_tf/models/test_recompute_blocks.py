"""Activation recompute per Transformer block (issue 13 item 3), alone and
with sharded storage: one TrainStep equal to the baseline, the trace the
cost model predicts, more FLOPs and fewer saved activations."""

import numpy as np
import pytest

import mesh_tf as mtf
import costmodels
from mesh_tf import models
from mesh_tf.training import optimize, storage
from mesh_tf.training import train_step_for_model

MESH, RULES = "data:4;model:2", "batch:data;d_ff:model;heads:model"


def _run(recompute, stage=0, param_dtype=None, sgd=False):
  model = models.build_model("transformer_tiny", recompute=recompute,
                             param_dtype=param_dtype)
  storage.shard_storage(model.graph, stage)
  rules = RULES + (";d_model_storage:data" if stage else "")
  step = train_step_for_model(model, MESH, rules, mtf.logical_cpu_devices(8),
                              optimize.SgdOptimizer(0.5) if sgd else
                              optimize.AdamWeightDecayOptimizer(1e-2))
  loss = float(step(**model.random_values()))
  predicted = costmodels.trace_graph(model.graph, MESH, rules)
  assert sorted(c.key() for c in predicted.collectives) == sorted(
      c.key() for c in step.mesh_impl.trace.collectives)
  report = costmodels.evaluate(model.graph, MESH, rules, "dgx-h100")
  return loss, step.variable_values(), report


@pytest.fixture(scope="module")
def baseline():
  return _run(0)


@pytest.mark.parametrize("recompute,stage", [(1, 0), (2, 0), (2, 3), (1, 2)])
def test_recompute_alone_and_with_sharding_equals_the_baseline(
    baseline, recompute, stage):
  base_loss, base_w, base_r = baseline
  loss, w, r = _run(recompute, stage)
  assert loss == pytest.approx(base_loss, rel=1e-6)
  for name, value in w.items():
    np.testing.assert_allclose(value, base_w[name], rtol=1e-6, atol=1e-7,
                               err_msg=name)
  # Priced as extra forward FLOPs and smaller saved activations (sharded
  # storage also shrinks the optimizer's FLOPs, so compare those unsharded).
  if stage == 0:
    assert r.flops_per_device > base_r.flops_per_device
  assert r.memory_by_category["activations"] < \
      base_r.memory_by_category["activations"]


def test_more_recomputed_blocks_cost_more_flops_and_less_memory(baseline):
  reports = [baseline[2]] + [_run(k)[2] for k in (1, 2)]
  flops = [r.flops_per_device for r in reports]
  acts = [r.memory_by_category["activations"] for r in reports]
  assert flops == sorted(flops) and len(set(flops)) == 3
  assert acts == sorted(acts, reverse=True) and len(set(acts)) == 3


def test_everything_combined_with_bf16_matches_within_bf16_tolerance():
  # SGD: Adam's normalised steps turn bf16 rounding of near-zero gradients
  # into full-size updates of the other sign.
  base_loss, base_w, _ = _run(0, sgd=True)
  loss, w, r = _run(2, 3, "bfloat16", sgd=True)
  assert loss == pytest.approx(base_loss, rel=2e-2)
  for name, value in w.items():
    np.testing.assert_allclose(value, base_w[name], atol=3e-2, rtol=3e-2,
                               err_msg=name)


def test_recompute_must_be_a_layer_count():
  with pytest.raises(mtf.MtfError, match="recompute=3 must be in"):
    models.build_model("transformer_tiny", recompute=3)
