"""Sharded storage of weights, gradients and optimizer state (ZeRO stages
1/2/3, issue 13 item 2): equal results on 1/2/4/8 devices, the trace the
cost model predicts, the memory it saves, checkpoints across storage
layouts."""

import numpy as np
import pytest

import mesh_tf as mtf
import costmodels
from mesh_tf import models
from mesh_tf.training import optimize, storage
from mesh_tf.training import train_step_for_model

MESHES = {1: ("all:1", ""), 2: ("data:2", "batch:data"),
          4: ("data:2;model:2", "batch:data;d_ff:model;heads:model"),
          8: ("data:4;model:2", "batch:data;d_ff:model;heads:model")}
SHARD = ";d_model_storage:data"


def _step(stage, mesh, rules, param_dtype=None, opt=None):
  model = models.build_model("transformer_tiny", param_dtype=param_dtype)
  storage.shard_storage(model.graph, storage.StoragePlan(stage))
  n = mtf.convert_to_shape(mesh).size
  step = train_step_for_model(
      model, mesh, rules, mtf.logical_cpu_devices(n),
      opt or optimize.AdamWeightDecayOptimizer(1e-2))
  loss = float(step(**model.random_values()))
  return model, step, loss


_BASELINES = {}


def _baseline(n):
  """The unsharded step on the same mesh and compute layout."""
  if n not in _BASELINES:
    _, step, loss = _step(0, *MESHES[n])
    _BASELINES[n] = loss, step.variable_values()
  return _BASELINES[n]


@pytest.mark.parametrize("n", [1, 2, 4, 8])
@pytest.mark.parametrize("stage", [1, 2, 3])
def test_every_stage_equals_the_unsharded_step(stage, n):
  mesh, rules = MESHES[n]
  rules = rules + SHARD if n > 1 else rules
  model, step, loss = _step(stage, mesh, rules)
  base_loss, base_w = _baseline(n)
  one_loss, one_w = _baseline(1)
  assert loss == pytest.approx(base_loss, rel=1e-6)
  assert loss == pytest.approx(one_loss, rel=1e-5)
  for name, w in step.variable_values().items():
    # Same mesh: the same sums in the same order (a reduce-scatter adds the
    # peers' parts in the all-reduce's order), up to TF's kernel rounding.
    np.testing.assert_allclose(w, base_w[name], rtol=1e-6, atol=1e-7,
                               err_msg=name)
    # Adam divides by sqrt(v): near-zero gradients amplify the rounding of
    # a different summation order, hence the looser 1-device check.
    np.testing.assert_allclose(w, one_w[name], rtol=1e-3, atol=1e-5,
                               err_msg=name)
  # The lowering's collectives are exactly what the cost model predicts.
  predicted = costmodels.trace_graph(model.graph, mesh, rules)
  assert sorted(c.key() for c in predicted.collectives) == sorted(
      c.key() for c in step.mesh_impl.trace.collectives)


def _kinds(trace, axis):
  out = {}
  for c in trace.collectives:
    if c.mesh_axes == (axis,):
      out[c.kind] = out.get(c.kind, 0) + 1
  return out


def test_stages_gather_reduce_scatter_and_regather_as_documented():
  mesh, rules = MESHES[8]
  kinds = {}
  for stage in (0, 1, 2, 3):
    model = models.build_model("transformer_tiny")
    storage.shard_storage(model.graph, stage)
    grads = mtf.gradients([model.loss], model.graph.trainable_variables)
    optimize.SgdOptimizer(0.1).apply_grads(grads,
                                           model.graph.trainable_variables)
    r = costmodels.evaluate(model.graph, mesh,
                            rules + (SHARD if stage else ""), "dgx-h100")
    kinds[stage] = _kinds(r.trace, "data")
  n_vars = len(models.build_model("transformer_tiny").graph
               .trainable_variables)
  # Unsharded: one all-reduce per weight gradient, plus the activations'.
  others = kinds[0]["allreduce"] - n_vars
  assert set(kinds[0]) == {"allreduce"} and others >= 1
  assert kinds[1] == {"allconcat": n_vars, "allreduce": n_vars + others}
  # Stage 2: every weight gradient is reduce-scattered onto its shard.
  assert kinds[2] == {"allconcat": n_vars, "reduce_scatter": n_vars,
                      "allreduce": others}
  # Stage 3: gathered again in backward for the gradients that read the
  # weight (not biases, the additive position table, the embedding gather).
  assert kinds[2]["allconcat"] < kinds[3]["allconcat"] < 2 * n_vars


def _training_report(stage, param_dtype=None):
  model = models.build_model("gpt2_small", layers=2,
                             param_dtype=param_dtype)
  storage.shard_storage(model.graph, stage)
  variables = list(model.graph.trainable_variables)
  grads = mtf.gradients([model.loss], variables)
  optimize.AdamWeightDecayOptimizer(1e-4).apply_grads(grads, variables)
  return costmodels.evaluate(
      model.graph, "data:8", "batch:data" + (";d_model_storage:data"
                                             if stage else ""), "dgx-h100")


def test_sharding_divides_master_and_optimizer_memory_by_the_data_axis():
  r0, r1, r3 = (_training_report(s) for s in (0, 1, 3))
  w = "layer_0/ffn/wi/kernel"
  assert r1.variable_bytes_per_device[w] * 8 == \
      r0.variable_bytes_per_device[w]
  assert r1.memory_by_category["optimizer"] * 8 == pytest.approx(
      r0.memory_by_category["optimizer"], rel=1e-3)
  # Stage 3 frees each gathered copy after its use: fewer parameter bytes
  # live at the peak than stage 1, which keeps the copies for backward.
  assert r3.memory_by_category["params"] < r1.memory_by_category["params"]
  assert r3.peak_memory_bytes < r1.peak_memory_bytes < r0.peak_memory_bytes


def test_mixed_precision_gathers_the_bf16_copy():
  r32, r16 = _training_report(3), _training_report(3, "bfloat16")
  g32 = sum(c.bytes_per_device for c in r32.collectives
            if c.kind == "allconcat")
  g16 = sum(c.bytes_per_device for c in r16.collectives
            if c.kind == "allconcat")
  assert g16 * 2 == g32


def test_a_checkpoint_restores_bit_identically_under_another_storage(
    tmp_path):
  mesh, rules = MESHES[8]
  _, step, _ = _step(3, mesh, rules + SHARD)
  saved = step.variable_values()
  prefix = step.save(str(tmp_path / "ckpt"))
  for other_mesh, other in ((mesh, rules),
                            ("data:8", "batch:data;d_model_storage:data")):
    model = models.build_model("transformer_tiny")
    storage.shard_storage(model.graph, 2)
    fresh = train_step_for_model(model, other_mesh, other,
                                 mtf.logical_cpu_devices(8),
                                 optimize.AdamWeightDecayOptimizer(1e-2))
    fresh.restore(prefix)
    for name, v in fresh.variable_values().items():
      np.testing.assert_array_equal(v, saved[name], err_msg=name)


def test_bad_stage_and_graphs_with_gradients_are_rejected():
  model = models.build_model("transformer_tiny")
  with pytest.raises(mtf.MtfError, match="unknown ZeRO stage 4"):
    storage.shard_storage(model.graph, 4)
  mtf.gradients([model.loss], model.graph.trainable_variables)
  with pytest.raises(mtf.MtfError, match="before mtf.gradients"):
    storage.shard_storage(model.graph, 3)


def test_groups_get_their_own_storage_dims():
  model = models.build_model("transformer_tiny")
  storage.shard_storage(model.graph, 3, group_of=storage.layer_role)
  names = {d.name for v in model.graph.trainable_variables for d in v.shape}
  assert {"d_model_storage_attention", "d_model_storage_ffn",
          "d_model_storage_embedding"} <= names
  assert storage.storage_dim_name("d_model", "ffn") == "d_model_storage_ffn"


def test_bf16_recompute_blocks_still_reduce_scatter_and_gather_bf16():
  """A recompute block lists the weights it reads; that must not stop the
  gather from moving the bf16 copy, nor the gradient from being
  reduce-scattered (a cast of the pending sum would force an all-reduce)."""
  from autolayout.training import decisions
  cfg = models.get_config("transformer_tiny", batch=16)
  counts = {}
  for pd in ("float32", "bfloat16"):
    tg = decisions.build_training(
        cfg, decisions.TrainingDecisions(pd, 3, cfg.layers, 2))
    r = costmodels.evaluate(tg.graph, MESHES[8][0], MESHES[8][1] + SHARD,
                            "dgx-h100", microbatches=tg.plan)
    counts[pd] = _kinds(r.trace, "data")
  # Only the tied embedding table (read through two casts) gathers float32
  # and all-reduces its gradient under bf16.
  assert counts["bfloat16"]["reduce_scatter"] >= \
      counts["float32"]["reduce_scatter"] - 1


MIXED = storage.StoragePlan(0, stages=(("attention", 3), ("embedding", 1),
                                       ("ffn", 2), ("norm", 0)))
MIXED_SHARD = (";d_model_storage_attention:data;d_model_storage_ffn:data"
               ";d_model_storage_embedding:data")


def test_mixed_per_group_stages_equal_the_unsharded_step():
  """Stage 3 for attention, 2 for the feed-forward, 1 for the embeddings,
  0 for the norms, on 8 devices: the baseline's loss and weights, and the
  collectives the cost model predicts."""
  mesh, rules = MESHES[8]
  rules = rules + MIXED_SHARD
  model = models.build_model("transformer_tiny")
  storage.shard_storage(model.graph, MIXED)
  shapes = {v.name: {d.name for d in v.shape}
            for v in model.graph.trainable_variables}
  assert "d_model_storage_attention" in shapes["layer_0/attention/q"]
  assert "d_model_storage_ffn" in shapes["layer_0/ffn/wi/kernel"]
  assert shapes["layer_0/ffn_norm/layer_norm/layer_norm_scale"] == {"d_model"}
  step = train_step_for_model(model, mesh, rules, mtf.logical_cpu_devices(8),
                              optimize.AdamWeightDecayOptimizer(1e-2))
  loss = float(step(**model.random_values()))
  base_loss, base_w = _baseline(8)
  assert loss == pytest.approx(base_loss, rel=1e-6)
  for name, w in step.variable_values().items():
    np.testing.assert_allclose(w, base_w[name], rtol=1e-6, atol=1e-7,
                               err_msg=name)
  predicted = costmodels.trace_graph(model.graph, mesh, rules)
  assert sorted(c.key() for c in predicted.collectives) == sorted(
      c.key() for c in step.mesh_impl.trace.collectives)
  scatters = [c for c in step.mesh_impl.trace.collectives
              if c.kind == "reduce_scatter"]
  # Stages 2 and 3 (attention, feed-forward) reduce-scatter; stage 1 (the
  # embeddings) all-reduces; stage 3 alone gathers again in backward.
  assert scatters and all("attention" in c.source_op or "ffn" in c.source_op
                          for c in scatters)
  regathers = {c.source_op for c in step.mesh_impl.trace.collectives
               if c.kind == "allconcat" and "backward" in c.source_op}
  assert regathers and all("attention" in s for s in regathers)


def test_per_group_stages_are_checked():
  model = models.build_model("transformer_tiny")
  with pytest.raises(mtf.MtfError, match="stage 5 of variable group 'ffn'"):
    storage.shard_storage(model.graph,
                          storage.StoragePlan(0, stages=(("ffn", 5),)))
  assert storage.variable_group(model.graph.trainable_variables[0]) == \
      "embedding"
