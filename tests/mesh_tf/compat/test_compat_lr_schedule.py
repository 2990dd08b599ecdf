"""Mesh TensorFlow's learning-rate schedules and multi-schedule optimizers,
against hand-written NumPy updates, on split and replicated layouts."""

import dataclasses

import numpy as np
import pytest

import mesh_tf as mtf
from mesh_tf.training import optimize

RNG = np.random.RandomState(3)
NAMES = ("encoder/w", "decoder/w", "other/w")
INIT = {n: RNG.randn(8, 4).astype(np.float32) for n in NAMES}
TARGET = {n: RNG.randn(8, 4).astype(np.float32) for n in NAMES}
STEPS = 3
TRAIN_STEPS = 4


def warmup(step, total):
  """A factor: (step + 1) / total, a scalar mtf Tensor."""
  return (step + 1.0) / float(total)


def _train(optimizer, mesh_shape, layout):
  """STEPS updates of loss = sum_n |w_n - target_n|^2 (grad 2 (w - t))."""
  graph = mtf.Graph()
  mesh = mtf.Mesh(graph, "m")
  ws = [mtf.get_variable(mesh, n, "a:8;b:4", initializer=INIT[n])
        for n in NAMES]
  loss = mtf.add_n([mtf.reduce_sum(mtf.square(
      w - mtf.constant(mesh, TARGET[n], w.shape)))
                    for w, n in zip(ws, NAMES)])
  grads = mtf.gradients([loss], ws)
  optimizer.apply_grads(grads, ws)
  n = mtf.convert_to_shape(mesh_shape).size
  impl = mtf.PlacementMeshImpl(mesh_shape, layout, mtf.logical_cpu_devices(n))
  for _ in range(STEPS):
    mtf.Lowering(graph, {mesh: impl})
  return {name: impl.export_to_tf_tensor(impl.variables[name].value(),
                                         ws[0].shape).numpy()
          for name in NAMES}, impl


def _numpy_adam(rates, b1=0.9, b2=0.999, eps=1e-6):
  """Adam without bias correction; rates[name](step) is the group's rate."""
  out = {}
  for name in NAMES:
    p = INIT[name].astype(np.float64)
    m = v = 0.0
    for step in range(STEPS):
      g = 2.0 * (p - TARGET[name])
      m = b1 * m + (1 - b1) * g
      v = b2 * v + (1 - b2) * g * g
      p = p - rates[name](step) * (m / (np.sqrt(v) + eps))
    out[name] = p
  return out


def _numpy_adafactor(rates):
  """Adafactor, unfactored (4 < 128), no parameter scale, with the rate."""
  def rms(x):
    return np.sqrt(np.mean(x * x))
  out = {}
  for name in NAMES:
    p = INIT[name].astype(np.float64)
    v = 0.0
    for step in range(STEPS):
      g = 2.0 * (p - TARGET[name])
      decay = 1.0 - (step + 1.0) ** -0.8
      v = decay * v + (1 - decay) * (g * g + 1e-30)
      x = g / np.sqrt(v)
      x = x / max(1.0, rms(x))
      p = p - rates[name](step) * x
    out[name] = p
  return out


def _rates(base):
  # encoder: 2 * (step + 1) / 4; decoder: None -> the base rate; other: no
  # group -> the base rate.
  return {"encoder/w": lambda s: 2.0 * (s + 1.0) / TRAIN_STEPS,
          "decoder/w": lambda s: base, "other/w": lambda s: base}


@pytest.mark.parametrize("mesh_shape,layout", [("rows:2;cols:4",
                                                 "a:rows;b:cols"),
                                                ("x:8", "a:x"), ("x:2", "")])
def test_adam_groups_follow_their_schedules(mesh_shape, layout):
  opt = optimize.AdamWithMultiLRSchedule(
      ["^encoder/", "^decoder/"], [[2.0, warmup], None],
      train_steps=TRAIN_STEPS, learning_rate=0.05)
  got, impl = _train(opt, mesh_shape, layout)
  want = _numpy_adam(_rates(0.05))
  for name in NAMES:
    np.testing.assert_allclose(got[name], want[name], rtol=2e-5, atol=2e-6,
                               err_msg=name)
  step = impl.export_to_tf_tensor(impl.variables["adam/step"].value(),
                                  mtf.Shape([])).numpy()
  assert float(step) == STEPS


def test_adafactor_groups_follow_their_schedules():
  opt = optimize.AdafactorWithMultiLRSchedule(
      variable_search=["encoder", "decoder"],
      alt_lr_schedules=[[2.0, warmup], [0.5, 0.2]],
      train_steps=TRAIN_STEPS, learning_rate=0.05,
      multiply_by_parameter_scale=False)
  got, _ = _train(opt, "rows:2;cols:4", "a:rows;b:cols")
  rates = _rates(0.05)
  rates["decoder/w"] = lambda s: 0.1
  want = _numpy_adafactor(rates)
  for name in NAMES:
    np.testing.assert_allclose(got[name], want[name], rtol=2e-5, atol=2e-6,
                               err_msg=name)


def test_without_groups_they_are_their_base_optimizers():
  plain, _ = _train(optimize.AdamWeightDecayOptimizer(0.05), "x:2", "a:x")
  multi, impl = _train(optimize.AdamWithMultiLRSchedule(learning_rate=0.05),
                       "x:2", "a:x")
  for name in NAMES:
    np.testing.assert_array_equal(multi[name], plain[name])
  assert "adam/step" not in impl.variables


def test_the_first_matching_group_wins():
  opt = optimize.AdamWithMultiLRSchedule(
      ["coder", "^encoder"], [[0.01], [1.0]], learning_rate=0.05)
  got, _ = _train(opt, "x:2", "")
  rates = {"encoder/w": lambda s: 0.01, "decoder/w": lambda s: 0.01,
           "other/w": lambda s: 0.05}
  want = _numpy_adam(rates)
  for name in NAMES:
    np.testing.assert_allclose(got[name], want[name], rtol=2e-5, atol=2e-6)


def test_product_learning_rate_and_compute_lr_for_step():
  assert optimize.product_learning_rate(3, 10, [0.5, 4.0]) == 2.0
  seen = []
  optimize.product_learning_rate(
      7, 10, [lambda s, t: seen.append((s, t)) or 1.0], offset=2)
  assert seen == [(5, 8)]
  rates = optimize.compute_lr_for_step([None, [0.1, 3.0], 0.5], 0.7,
                                       train_steps=100, step=0)
  np.testing.assert_allclose(rates, [0.7, 0.3, 0.5])
  by_step = optimize.compute_lr_for_step(
      [[lambda s, t: 1.0 - s / t]], 0.7, train_steps=100, step=25)
  assert by_step == [0.75]


def test_schedule_errors_name_the_option():
  with pytest.raises(mtf.MtfError, match="pass step="):
    optimize.compute_lr_for_step([[warmup]], 0.1)
  with pytest.raises(mtf.MtfError, match="factors=.*wrap a single factor"):
    optimize.product_learning_rate(0, 10, 0.5)
  with pytest.raises(mtf.MtfError,
                     match="2 regexes but alt_lr_schedules has 1"):
    optimize.AdamWithMultiLRSchedule(["a", "b"], [None], learning_rate=0.1)
  with pytest.raises(mtf.MtfError,
                     match="AdafactorWithMultiLRSchedule: variable_search "
                           "is given but alt_lr_schedules is None"):
    optimize.AdafactorWithMultiLRSchedule(variable_search=["a"])
  with pytest.raises(mtf.MtfError, match=r"entry '\(' is not a regex"):
    optimize.AdamWithMultiLRSchedule(["("], [None], learning_rate=0.1)
  with pytest.raises(mtf.MtfError, match="give a list of regexes"):
    optimize.AdamWithMultiLRSchedule("enc", [None], learning_rate=0.1)
  graph = mtf.Graph()
  mesh = mtf.Mesh(graph, "m")
  w = mtf.get_variable(mesh, "w", "a:2")
  with pytest.raises(mtf.MtfError, match=r"call apply_grads\(\[grad\], \['w'"):
    optimize.AdamWithMultiLRSchedule(["w"], [None], learning_rate=0.1
                                     ).apply_grad(w, w.operation)


def test_optimizers_are_values():
  a = optimize.AdamWithMultiLRSchedule(["x"], [[0.5]], learning_rate=0.1)
  b = optimize.AdamWithMultiLRSchedule(["x"], [[0.5]], learning_rate=0.1)
  c = optimize.AdamWithMultiLRSchedule(["y"], [[0.5]], learning_rate=0.1)
  assert a == b and hash(a) == hash(b) and a != c
  with pytest.raises(dataclasses.FrozenInstanceError):
    a.variable_search = ("z",)
