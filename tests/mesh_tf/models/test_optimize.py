"""Optimizers vs NumPy references for a few steps, under a split layout."""

import numpy as np
import pytest

import mesh_tf as mtf
from mesh_tf import training
from mesh_tf.training import optimize

A, B = mtf.Dimension("a", 8), mtf.Dimension("b", 16)
RNG = np.random.RandomState(1)
W0 = RNG.randn(8, 16).astype(np.float32)
V0 = RNG.randn(16).astype(np.float32)
TW = RNG.randn(8, 16).astype(np.float32)
TV = RNG.randn(16).astype(np.float32)
STEPS = 3


def _build(mesh):
  """loss = 0.5 |w - tw|^2 + 0.5 |v - tv|^2, so grads are w - tw, v - tv."""
  tw = mtf.import_tf_tensor(mesh, None, mtf.Shape([A, B]), dtype="float32")
  tv = mtf.import_tf_tensor(mesh, None, mtf.Shape([B]), dtype="float32")
  w = mtf.get_variable(mesh, "w", mtf.Shape([A, B]), initializer=W0)
  v = mtf.get_variable(mesh, "v", mtf.Shape([B]), initializer=V0)
  loss = (mtf.reduce_sum(mtf.square(w - tw))
          + mtf.reduce_sum(mtf.square(v - tv))) * 0.5
  return loss, [tw, tv]


def _run(opt, mesh_shape, layout):
  n = mtf.convert_to_shape(mesh_shape).size
  step = training.make_train_step(_build, mesh_shape, layout,
                                  mtf.logical_cpu_devices(n), opt)
  for _ in range(STEPS):
    step(TW, TV)
  return step


# --- NumPy references, written from the papers' update rules ---------------
def _sgd(lr):
  def update(p, g, state, t):
    return p - lr * g
  return update


def _momentum(lr, mu):
  def update(p, g, state, t):
    state["m"] = mu * state.get("m", 0.0) + g
    return p - lr * state["m"]
  return update


def _adam_wd(lr, wd, b1, b2, eps):
  def update(p, g, state, t):
    state["m"] = b1 * state.get("m", 0.0) + (1 - b1) * g
    state["v"] = b2 * state.get("v", 0.0) + (1 - b2) * g * g
    return p - lr * (state["m"] / (np.sqrt(state["v"]) + eps) + wd * p)
  return update


def _adafactor(beta1, factor_min):
  def rms(x):
    return np.sqrt(np.mean(x * x))

  def update(p, g, state, t):
    decay = 1.0 - (t + 1.0) ** -0.8
    lr = min(1.0 / np.sqrt(t + 1.0), 0.01) * max(1e-3, rms(p))
    g2 = g * g + 1e-30
    if p.ndim == 2 and min(p.shape) >= factor_min:
      # Factored second moment: per-row and per-column running means of g^2,
      # V ~ outer(rows, cols) / mean(all).
      rows = decay * state.get("rows", 0.0) + (1 - decay) * g2.mean(axis=1)
      cols = decay * state.get("cols", 0.0) + (1 - decay) * g2.mean(axis=0)
      state["rows"], state["cols"] = rows, cols
      v = np.outer(rows, cols) / rows.mean()
    else:
      state["v"] = decay * state.get("v", 0.0) + (1 - decay) * g2
      v = state["v"]
    x = g / np.sqrt(v)
    x = x / max(1.0, rms(x))
    if beta1:
      state["m"] = beta1 * state.get("m", 0.0) + (1 - beta1) * x
      x = state["m"]
    return p - lr * x
  return update


def _reference(update):
  params = {"w": W0.astype(np.float64), "v": V0.astype(np.float64)}
  targets = {"w": TW, "v": TV}
  states = {"w": {}, "v": {}}
  for t in range(STEPS):
    for k in params:
      g = params[k] - targets[k]
      params[k] = update(params[k], g, states[k], t)
  return params


CASES = [
    ("sgd", lambda: optimize.SgdOptimizer(0.1), _sgd(0.1)),
    ("momentum", lambda: optimize.MomentumOptimizer(0.1, 0.9),
     _momentum(0.1, 0.9)),
    ("adam_wd", lambda: optimize.AdamWeightDecayOptimizer(
        0.05, weight_decay_rate=0.01, beta_1=0.8, beta_2=0.9, epsilon=1e-6),
     _adam_wd(0.05, 0.01, 0.8, 0.9, 1e-6)),
    ("adafactor", lambda: optimize.AdafactorOptimizer(
        min_dim_size_to_factor=8), _adafactor(0.0, 8)),
    ("adafactor_beta1", lambda: optimize.AdafactorOptimizer(
        beta1=0.9, min_dim_size_to_factor=8), _adafactor(0.9, 8)),
]


@pytest.mark.parametrize("name,make,update", CASES, ids=[c[0] for c in CASES])
def test_optimizer_matches_numpy_under_split_layout(name, make, update):
  step = _run(make(), "rows:2;cols:4", "a:rows;b:cols")
  got = step.variable_values()
  want = _reference(update)
  for k in ("w", "v"):
    np.testing.assert_allclose(got[k], want[k], rtol=2e-5, atol=2e-6,
                               err_msg=f"{name}: {k}")


def test_slots_are_laid_out_like_their_variable():
  step = _run(optimize.AdamWeightDecayOptimizer(0.01), "rows:2;cols:4",
              "a:rows;b:cols")
  held = step.mesh_impl.variables
  for var in ("w", "v"):
    for slot in ("adam_m", "adam_v"):
      s = held[f"{var}/{slot}"]
      assert s.slice_shape == held[var].slice_shape
      assert not s.slices[0].trainable
  assert held["w"].slice_shape == (4, 4)


def test_adafactor_factors_only_large_two_d_variables():
  graph = mtf.Graph()
  mesh = mtf.Mesh(graph, "m")
  loss, _ = _build(mesh)
  grads = mtf.gradients([loss], graph.trainable_variables)
  opt = optimize.AdafactorOptimizer(min_dim_size_to_factor=8)
  opt.apply_grads(grads, graph.trainable_variables)
  shapes = {v.name: v.shape for v in graph.all_variables}
  # vr: mean over the largest dim (b), vc: over the second largest (a).
  assert shapes["w/adafactor_vr"] == mtf.Shape([A])
  assert shapes["w/adafactor_vc"] == mtf.Shape([B])
  assert shapes["v/adafactor_v"] == mtf.Shape([B])
  assert "w/adafactor_v" not in shapes
  assert shapes["adafactor/step"] == mtf.Shape([])
  assert optimize.AdafactorOptimizer().factored_dims(
      mtf.Shape([A, B])) is None  # 8 < 128 by default


def test_weight_decay_exclusion_and_errors():
  opt = optimize.AdamWeightDecayOptimizer(
      0.1, weight_decay_rate=0.1, exclude_from_weight_decay=["bias$"])
  assert opt._use_weight_decay("dense/kernel")
  assert not opt._use_weight_decay("dense/bias")
  graph = mtf.Graph()
  mesh = mtf.Mesh(graph, "m")
  w = mtf.get_variable(mesh, "w", mtf.Shape([A, B]))
  with pytest.raises(mtf.MtfError, match="2 gradients for 1 variables"):
    optimize.SgdOptimizer(0.1).apply_grads([w, w], [w])
  with pytest.raises(mtf.MtfError, match=r"does not match variable w"):
    optimize.SgdOptimizer(0.1).apply_grads(
        [mtf.zeros(mesh, mtf.Shape([B]))], [w])
  with pytest.raises(mtf.MtfError, match="not one"):
    optimize.SgdOptimizer(0.1).apply_grads([w], [w * 2.0])


def test_sgd_with_a_scalar_tensor_learning_rate_matches_numpy():
  def build(mesh):
    loss, inputs = _build(mesh)
    return loss, inputs
  lr_value = 0.25
  step = training.make_train_step(
      build, "rows:2;cols:4", "a:rows;b:cols", mtf.logical_cpu_devices(8),
      None)
  graph, mesh = step.graph, step.mesh
  lr = mtf.constant(mesh, lr_value, dtype="float32")  # a schedule's value
  step = training.TrainStep(graph, mesh, step.loss, step.inputs,
                            step.mesh_impl, optimize.SgdOptimizer(lr))
  for _ in range(STEPS):
    step(TW, TV)
  w, v = W0.copy(), V0.copy()
  for _ in range(STEPS):
    w, v = w - lr_value * (w - TW), v - lr_value * (v - TV)
  values = step.variable_values()
  np.testing.assert_allclose(values["w"], w, rtol=1e-5)
  np.testing.assert_allclose(values["v"], v, rtol=1e-5)


def test_apply_gradient_descent_errors_name_the_tensors():
  graph = mtf.Graph()
  mesh = mtf.Mesh(graph, "m")
  w = mtf.get_variable(mesh, "w", mtf.Shape([A, B]))
  g = mtf.zeros(mesh, mtf.Shape([B]), name="g")
  with pytest.raises(mtf.ShapeError, match=r"gradient g.*variable w"):
    mtf.apply_gradient_descent(w, g, 0.1)
  lr = mtf.zeros(mesh, mtf.Shape([A]), name="lr")
  with pytest.raises(mtf.ShapeError, match=r"learning rate lr.*scalar"):
    mtf.apply_gradient_descent(w, mtf.zeros_like(w), lr)
