"""The training step: one tf.function per step, loss decreases, and a mesh
run matches a 1-device run step by step."""

import numpy as np
import pytest
import tensorflow as tf

import mesh_tf as mtf
from mesh_tf import models, training
from mesh_tf.training import optimize

LAYOUT = "batch:rows;d_ff:cols;heads:cols;vocab:cols"
B, D, F, K = (mtf.Dimension("batch", 16), mtf.Dimension("d_model", 8),
              mtf.Dimension("d_ff", 16), mtf.Dimension("out", 4))
RNG = np.random.RandomState(0)
XV = RNG.randn(16, 8).astype(np.float32)
YV = RNG.randn(16, 4).astype(np.float32)


def _mlp(mesh):
  x = mtf.import_tf_tensor(mesh, None, mtf.Shape([B, D]), dtype="float32")
  y = mtf.import_tf_tensor(mesh, None, mtf.Shape([B, K]), dtype="float32")
  w1 = mtf.get_variable(mesh, "w1", mtf.Shape([D, F]),
                        initializer=mtf.random_normal_initializer(stddev=0.3))
  b1 = mtf.get_variable(mesh, "b1", mtf.Shape([F]), initializer=0.0)
  w2 = mtf.get_variable(mesh, "w2", mtf.Shape([F, K]),
                        initializer=mtf.random_normal_initializer(stddev=0.3))
  h = mtf.relu(mtf.einsum([x, w1], reduced_dims=[D]) + b1)
  pred = mtf.einsum([h, w2], reduced_dims=[F])
  return mtf.reduce_mean(mtf.square(pred - y)), [x, y], [pred]


def test_mlp_step_is_one_function_and_matches_one_device():
  losses = {}
  for mesh_shape, n in [("rows:1;cols:1", 1), ("rows:2;cols:4", 8)]:
    step = training.make_train_step(_mlp, mesh_shape, LAYOUT,
                                    mtf.logical_cpu_devices(n),
                                    optimize.MomentumOptimizer(0.05, 0.9))
    losses[n] = []
    for _ in range(6):
      loss, pred = step(XV, YV)
      losses[n].append(float(loss))
    assert pred.shape == (16, 4)
    assert step._function.experimental_get_tracing_count() == 1
  np.testing.assert_allclose(losses[8], losses[1], rtol=1e-5)
  assert losses[8][-1] < 0.7 * losses[8][0]


def _tiny_lm():
  return models.transformer_lm(layers=1, d_model=16, heads=4, d_kv=4,
                               d_ff=32, vocab=32, length=8, batch=8)


def test_transformer_loss_decreases_and_first_steps_match_one_device():
  values = _tiny_lm().random_values(seed=3)
  values["targets"] = values["inputs"]  # learnable: copy the input
  losses = {}
  for mesh_shape, n in [("rows:1;cols:1", 1), ("rows:2;cols:4", 8)]:
    model = _tiny_lm()
    step = training.train_step_for_model(
        model, mesh_shape, LAYOUT, mtf.logical_cpu_devices(n),
        optimize.SgdOptimizer(1.0))
    losses[n] = [float(step(**values)) for _ in range(5)]
  np.testing.assert_allclose(losses[8], losses[1], rtol=2e-5, atol=2e-5)
  assert all(b < a for a, b in zip(losses[8], losses[8][1:])), losses[8]
  assert losses[8][-1] < 0.8 * losses[8][0], losses[8]


def test_step_errors():
  def non_scalar(mesh):
    loss, inputs, _ = _mlp(mesh)
    w = mesh.graph.trainable_variables[0]
    return w.outputs[0], inputs
  with pytest.raises(mtf.MtfError, match="must be a scalar"):
    training.make_train_step(non_scalar, "all:1", "",
                             mtf.logical_cpu_devices(1),
                             optimize.SgdOptimizer(0.1))

  def not_an_import(mesh):
    loss, inputs, _ = _mlp(mesh)
    return loss, [inputs[0] * 2.0]
  with pytest.raises(mtf.MtfError, match="not import_tf_tensor"):
    training.make_train_step(not_an_import, "all:1", "",
                             mtf.logical_cpu_devices(1),
                             optimize.SgdOptimizer(0.1))
  step = training.make_train_step(lambda m: _mlp(m)[:2], "all:1", "",
                                  mtf.logical_cpu_devices(1),
                                  optimize.SgdOptimizer(0.1))
  with pytest.raises(mtf.MtfError, match="takes 2 inputs"):
    step(XV)
  with pytest.raises(mtf.ShapeError, match=r"has shape \[15, 8\], the step "
                     r"takes \[16, 8\]"):
    step(XV[:15], YV)
  with pytest.raises(mtf.MtfError, match="is float64, the step takes float32"):
    step(tf.constant(XV, tf.float64), YV)
