"""Mesh TensorFlow's Adafactor decay helpers and optimizer factories."""

import types

import numpy as np
import pytest

import mesh_tf as mtf
from tests.layout_harness import run

W0 = np.linspace(-1, 1, 32).reshape(8, 4).astype(np.float32)


def _train(optimizer, mesh_shape="rows:2;cols:4", layout="a:rows;b:cols",
           steps=3):
  graph = mtf.Graph()
  mesh = mtf.Mesh(graph, "m")
  w = mtf.get_variable(mesh, "w", "a:8;b:4", initializer=W0)
  loss = mtf.reduce_sum(mtf.square(w - 0.5))
  [g] = mtf.gradients([loss], [w])
  optimizer.apply_grads([g], [w])
  n = mtf.convert_to_shape(mesh_shape).size
  impl = mtf.PlacementMeshImpl(mesh_shape, layout, mtf.logical_cpu_devices(n))
  for _ in range(steps):
    mtf.Lowering(graph, {mesh: impl})
  return impl.export_to_tf_tensor(impl.variables["w"].value(),
                                  w.shape).numpy()


def test_decay_helpers_match_their_formulas():
  t = np.array([1.0, 2.0, 5.0], np.float32)

  def build(mesh):
    tt = mtf.import_tf_tensor(mesh, t, "s:3")
    return [mtf.optimize.adafactor_decay_rate_adam(0.99)(tt),
            mtf.optimize.adafactor_decay_rate_pow(0.8)(tt)]
  (adam, pw), _ = run(build, "x:2", "")
  np.testing.assert_allclose(adam, 0.99 * (1 - 0.99 ** (t - 1))
                             / (1 - 0.99 ** t), rtol=1e-5, atol=1e-7)
  np.testing.assert_allclose(pw, 1 - t ** -0.8, rtol=1e-5)


def test_a_decay_schedule_equals_the_built_in_one():
  default = _train(mtf.optimize.AdafactorOptimizer())
  scheduled = _train(mtf.optimize.AdafactorOptimizer(
      decay_rate=mtf.optimize.adafactor_decay_rate_pow(0.8)))
  other_layout = _train(mtf.optimize.AdafactorOptimizer(
      decay_rate=mtf.optimize.adafactor_decay_rate_pow(0.8)), "x:8", "")
  assert not np.allclose(default, W0)
  np.testing.assert_allclose(scheduled, default, rtol=1e-6)
  np.testing.assert_allclose(other_layout, default, rtol=1e-5, atol=1e-6)


def test_make_optimizer_from_hparams():
  hp = types.SimpleNamespace(
      optimizer="Adafactor", optimizer_adafactor_decay_type="adam",
      optimizer_adafactor_beta1=0.0, optimizer_adafactor_beta2=0.999,
      optimizer_adafactor_memory_exponent=0.8,
      optimizer_adafactor_clipping_threshold=1.0,
      optimizer_adafactor_factored=True,
      optimizer_adafactor_multiply_by_parameter_scale=True)
  opt = mtf.optimize.make_optimizer(hp, 0.01)
  assert isinstance(opt, mtf.optimize.AdafactorOptimizer)
  assert opt.learning_rate == 0.01 and callable(opt.decay_rate)
  assert not np.allclose(_train(opt), W0)
  sgd = mtf.optimize.make_optimizer(types.SimpleNamespace(optimizer="SGD"),
                                    0.1)
  np.testing.assert_allclose(_train(sgd, steps=1), W0 - 0.1 * 2 * (W0 - 0.5),
                             rtol=1e-6)
  with pytest.raises(mtf.MtfError, match="unknown optimizer 'Lion'"):
    mtf.optimize.make_optimizer(types.SimpleNamespace(optimizer="Lion"), 1)
  hp.optimizer_adafactor_decay_type = "cosine"
  with pytest.raises(mtf.MtfError, match="decay_type 'cosine'"):
    mtf.optimize.make_optimizer(hp, 0.01)
