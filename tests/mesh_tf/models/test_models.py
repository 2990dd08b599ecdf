"""The model zoo: tiny models lower on 8 devices like on 1; real-size
presets build fast, with the advertised sizes and no weights allocated."""

import time
import tracemalloc

import numpy as np
import pytest

import mesh_tf as mtf
from mesh_tf import models
from mesh_tf.gradients import gradients

LM_LAYOUT = "batch:rows;d_ff:cols;heads:cols;vocab:cols"


def lower(model, mesh_shape, layout, values, tensors):
  n = mtf.convert_to_shape(mesh_shape).size
  impl = mtf.PlacementMeshImpl(mesh_shape, layout, mtf.logical_cpu_devices(n))
  lowering = mtf.Lowering(model.graph, {model.mesh: impl},
                          feeds=model.feeds(**values))
  shape_impl = mtf.ShapeMeshImpl(mesh_shape, layout)
  shape_lowering = mtf.Lowering(model.graph, {model.mesh: shape_impl},
                                feeds=model.feeds(**values))
  for t in tensors:
    shape_lowering.laid_out(t)
  out = [lowering.export_to_tf_tensor(t).numpy() for t in tensors]
  assert shape_impl.trace.collectives == impl.trace.collectives
  return out, impl.trace


@pytest.mark.parametrize("name,layout,overrides", [
    ("transformer_tiny", LM_LAYOUT, {}),
    # Dropout masks, gelu and rms_norm are layout-invariant too.
    ("transformer_tiny", "batch:cols;length:rows",
     dict(layers=1, dropout=0.2, activation="gelu", norm="rms_norm")),
    ("mlp_tiny", "batch:rows;d_ff:cols;classes:cols", {}),
    ("moe_tiny", "batch:rows;experts:rows;d_ff:cols;heads:cols", {}),
    ("conv3d_tiny", "depth:rows;height:cols", {}),
])
def test_tiny_model_on_8_devices_matches_1_device(name, layout, overrides):
  model = models.build_model(name, **overrides)
  values = model.random_values(seed=1)
  tensors = [model.loss, model.outputs["logits"]]
  base, _ = lower(model, "all:1", "", values, tensors)
  vals, trace = lower(model, "rows:2;cols:4", layout, values, tensors)
  for v, b in zip(vals, base):
    np.testing.assert_allclose(v, b, rtol=2e-4, atol=2e-5)
  assert np.isfinite(base[0]) and base[0] > 0
  assert trace.collectives  # the layout really distributes the model


@pytest.mark.parametrize("name,layout,overrides", [
    ("transformer_tiny", LM_LAYOUT, dict(layers=1, pad_id=0)),
    ("moe_tiny", "batch:rows;experts:rows;d_ff:cols;heads:cols", {}),
    ("conv3d_tiny", "depth:rows;height:cols", dict(layers=1)),
])
def test_gradients_on_8_devices_match_1_device(name, layout, overrides):
  model = models.build_model(name, **overrides)
  variables = [v.outputs[0] for v in model.graph.trainable_variables]
  grads = gradients([model.loss], variables)
  values = model.random_values(seed=2)
  base, _ = lower(model, "all:1", "", values, grads)
  vals, _ = lower(model, "rows:2;cols:4", layout, values, grads)
  for v, b, var in zip(vals, base, variables):
    np.testing.assert_allclose(v, b, rtol=1e-4, atol=1e-6, err_msg=var.name)
    assert np.abs(b).sum() > 0, f"{var.name} gets no gradient"


def test_lm_inputs_are_int32_token_ids_and_loss_is_scalar():
  model = models.transformer_lm(layers=1, vocab=32, length=4, batch=2)
  for key in ("inputs", "targets"):
    t = model.inputs[key]
    assert t.dtype == "int32"
    assert t.shape.dimension_names == ["batch", "length"]
  assert model.loss.shape.ndims == 0
  assert model.outputs["logits"].shape.dimension_names == [
      "batch", "length", "vocab"]
  with pytest.raises(KeyError, match="unknown model inputs"):
    model.feeds(tokens=np.zeros((2, 4), np.int32))


def test_every_preset_counts_its_parameters_like_its_graph():
  for name in models.list_models():
    model = models.build_model(name)
    assert model.num_parameters == model.config.num_parameters(), name


@pytest.mark.parametrize("name,low,high", [
    ("gpt2_small", 120e6, 130e6),
    ("mtf_5b", 4.5e9, 5.5e9),
    ("gpt3_175b", 170e9, 180e9),
])
def test_real_configs_have_their_advertised_sizes(name, low, high):
  assert low < models.get_config(name).num_parameters() < high


def test_96_layer_graph_builds_in_seconds_without_allocating_weights():
  tracemalloc.start()
  try:
    start = time.perf_counter()
    model = models.build_model("gpt3_175b")
    seconds = time.perf_counter() - start
    _, peak = tracemalloc.get_traced_memory()
  finally:
    tracemalloc.stop()
  assert model.config.layers == 96
  assert seconds < 10
  # 175B float32 weights would be 700 GB; even one d_model x d_ff matrix is
  # 2.4 GB.  The whole graph must fit in a few tens of MB.
  assert peak < 64 * 2 ** 20, f"graph building peaked at {peak} bytes"
  assert len(model.graph.operations) > 96 * 20


def test_build_model_overrides_and_errors():
  model = models.build_model("gpt3_175b", layers=2, d_model=64, heads=4,
                             d_kv=16, d_ff=128, vocab=128, length=8, batch=4)
  assert model.config.layers == 2 and model.config.d_model == 64
  with pytest.raises(mtf.MtfError, match="unknown model 'gpt5'"):
    models.build_model("gpt5")
  with pytest.raises(mtf.MtfError, match=r"no parameter\(s\) \['experts'\]"):
    models.build_model("gpt2_small", experts=8)
  with pytest.raises(mtf.ShapeError, match="unknown norm 'batch_norm'"):
    models.build_model("transformer_tiny", norm="batch_norm")


def test_moe_transformer_uses_moe_every_other_layer_and_adds_aux_loss():
  model = models.build_model("moe_tiny", layers=4)
  names = {v.name for v in model.graph.trainable_variables}
  assert {"layer_1/moe/wi", "layer_3/moe/wi", "layer_0/ffn/wi/kernel",
          "layer_2/ffn/wi/kernel"} <= names
  assert "layer_0/moe/wi" not in names
  assert set(model.outputs) == {"logits", "lm_loss", "aux_loss"}
