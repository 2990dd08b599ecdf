"""What each op declares next to its lowering: its gradient (or why it has
none), its cost signature, and which tensors are variable gradients; and the
one fused softmax."""

import importlib
import pkgutil

import numpy as np
import pytest
import tensorflow as tf

import mesh_tf as mtf
from autolayout.search.view import op_signature
from costmodels import memory
from mesh_tf.gradients import (GradientError, gradient_function, gradients,
                               register_gradient)
from tests.layout_harness import check_layouts, run

B, D, K = mtf.Dimension("b", 4), mtf.Dimension("d", 8), mtf.Dimension("k", 4)
RNG = np.random.RandomState(3)
XV = RNG.randn(4, 8).astype(np.float32)
GV = RNG.randn(4, 8).astype(np.float32)


def _op_classes():
  """Every public Operation subclass defined in mesh_tf's op modules."""
  for pkg in ("mesh_tf.ops", "mesh_tf.layers"):
    mod = importlib.import_module(pkg)
    for info in pkgutil.iter_modules(mod.__path__, pkg + "."):
      importlib.import_module(info.name)
  importlib.import_module("mesh_tf.gradients")
  seen, stack = [], list(mtf.Operation.__subclasses__())
  while stack:
    cls = stack.pop()
    stack.extend(cls.__subclasses__())
    if cls.__module__.startswith("mesh_tf.") and not cls.__name__.startswith(
        "_") and cls not in seen:
      seen.append(cls)
  return seen


def _undeclared(classes):
  """Classes that declare neither a gradient nor why they have none, or
  both."""
  return sorted(c.__name__ for c in classes
                if (c.gradient is not mtf.Operation.gradient)
                == bool(c.no_gradient_reason))


def test_every_op_declares_its_gradient_or_why_it_has_none():
  classes = _op_classes()
  names = {c.__name__ for c in classes}
  assert {"EinsumOperation", "SoftmaxOperation", "PoolOperation",
          "ConvOperation", "NormOperation", "OneHotOperation"} <= names
  assert _undeclared(classes) == []


def test_the_declaration_check_catches_an_undeclared_op():
  class Silent(mtf.Operation):
    pass

  class Both(mtf.Operation):
    no_gradient_reason = "none"

    def gradient(self, grad_ys):
      return [None]
  assert _undeclared([Silent, Both, mtf.ops.einsum.EinsumOperation]) == [
      "Both", "Silent"]


def test_a_missing_gradient_names_the_reason():
  graph = mtf.Graph()
  mesh = mtf.Mesh(graph, "m")
  x = mtf.import_tf_tensor(mesh, XV, mtf.Shape([B, D]))
  [gx] = gradients([mtf.reduce_sum(mtf.exp(x))], [x])
  with pytest.raises(GradientError,
                     match=r"ElementwiseGradOperation.*second derivatives"):
    gradients([mtf.reduce_sum(gx)], [x])


def test_register_gradient_installs_the_gradient_method():
  class Halve(mtf.Operation):
    def __init__(self, x):
      super().__init__([x], name="halve")
      self._outputs = [mtf.Tensor(self, x.shape, x.dtype)]

  assert Halve.gradient is mtf.Operation.gradient   # declares none yet

  @register_gradient(Halve)
  def _halve_grad(op, grad_ys):
    return [grad_ys[0] * 0.5]

  assert Halve.gradient is _halve_grad
  graph = mtf.Graph()
  mesh = mtf.Mesh(graph, "m")
  x = mtf.import_tf_tensor(mesh, XV, mtf.Shape([B, D]))
  y = Halve(x).outputs[0]
  assert y.operation.has_gradient
  assert gradient_function(y.operation) is _halve_grad
  [gx] = gradients([mtf.reduce_sum(y)], [x])
  assert gx.shape == x.shape


def _layers(mesh, n):
  x = mtf.zeros(mesh, mtf.Shape([B, D]))
  for i in range(n):
    w = mtf.get_variable(mesh, f"w{i}", mtf.Shape([D, K]))
    h = mtf.relu(mtf.einsum([x, w], output_shape=mtf.Shape([B, K])))
    x = mtf.einsum([h, w], output_shape=mtf.Shape([B, D]))
  return x


def test_identical_layers_have_equal_signatures_and_others_differ():
  graph = mtf.Graph()
  mesh = mtf.Mesh(graph, "m")
  _layers(mesh, 2)
  einsums = [op for op in graph.operations
             if isinstance(op, mtf.ops.einsum.EinsumOperation)]
  assert einsums[0].name != einsums[2].name
  assert einsums[0].signature == einsums[2].signature
  assert einsums[0].signature != einsums[1].signature
  assert op_signature(einsums[0]) == einsums[0].signature
  x = mtf.zeros(mesh, mtf.Shape([B, D]))
  s = mtf.reduce_sum(x, output_shape=mtf.Shape([B])).operation
  m = mtf.reduce_max(x, output_shape=mtf.Shape([B])).operation
  assert s.signature != m.signature
  a, b = (mtf.shift(x, k, D, wrap=False).operation for k in (1, 2))
  assert a.signature != b.signature
  for op in graph.operations:
    hash(op.signature)


def test_autodiff_marks_the_gradients_of_variables():
  graph = mtf.Graph()
  mesh = mtf.Mesh(graph, "m")
  w = mtf.get_variable(mesh, "w", mtf.Shape([D, K]))
  x = mtf.import_tf_tensor(mesh, XV, mtf.Shape([B, D]))
  h = mtf.einsum([x, w], reduced_dims=[D])
  [dw, dx] = gradients([mtf.reduce_sum(mtf.square(h))], [w, x])
  assert dw.gradient_of is w
  assert dx.gradient_of is None     # x is not a variable
  assert h.gradient_of is None
  assert not hasattr(graph, "gradient_tensors")
  assert memory.tensor_category(dw) == "gradients"
  assert memory.tensor_category(dx) == "activations"


# --- the one softmax ---------------------------------------------------------
def test_one_softmax_under_both_names():
  assert mtf.layers.softmax is mtf.softmax
  graph = mtf.Graph()
  mesh = mtf.Mesh(graph, "m")
  x = mtf.import_tf_tensor(mesh, XV, mtf.Shape([B, D]))
  y = mtf.softmax(x, D)
  assert isinstance(y.operation, mtf.layers.SoftmaxOperation)
  assert len(graph.operations) == 2


def _np_softmax(x, axes, extra=None):
  m = np.max(x, axis=axes, keepdims=True)
  if extra is not None:
    m = np.maximum(m, extra)
  e = np.exp(x - m)
  z = e.sum(axis=axes, keepdims=True)
  if extra is not None:
    z = z + np.exp(extra - m)
  return e / z


@pytest.mark.parametrize("extra", [None, 1.5])
def test_softmax_over_two_split_dims_with_extra_logit(extra):
  def build(mesh):
    x = mtf.import_tf_tensor(mesh, XV, mtf.Shape([B, D]))
    return mtf.softmax(x, [B, D], extra_logit=extra)
  check_layouts(build, [B, D], lambda: _np_softmax(XV, (0, 1), extra),
                limit=6)


def test_softmax_with_extra_logit_collectives_and_gradient():
  def build(mesh):
    x = mtf.import_tf_tensor(mesh, XV, mtf.Shape([B, D]))
    g = mtf.import_tf_tensor(mesh, GV, mtf.Shape([B, D]))
    y = mtf.softmax(x, D, extra_logit=0.5)
    return [y] + gradients([y], [x], [g])
  (y, gx), trace = run(build, "x:8", "d:x")
  assert [(c.kind, c.reduction) for c in trace.collectives] == [
      ("allreduce", "MAX"), ("allreduce", "SUM"), ("allreduce", "SUM")]
  xt = tf.constant(XV)
  with tf.GradientTape() as tape:
    tape.watch(xt)
    z = tf.concat([xt, tf.fill([4, 1], 0.5)], 1)
    ref = tf.nn.softmax(z, 1)[:, :8]
  want = tape.gradient(ref, xt, output_gradients=GV).numpy()
  np.testing.assert_allclose(y, ref.numpy(), rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(gx, want, rtol=1e-4, atol=1e-6)


def test_softmax_rejects_a_tensor_extra_logit_naming_the_fix():
  graph = mtf.Graph()
  mesh = mtf.Mesh(graph, "m")
  x = mtf.import_tf_tensor(mesh, XV, mtf.Shape([B, D]))
  e = mtf.zeros(mesh, mtf.Shape([B]), name="extra")
  with pytest.raises(mtf.MtfError, match=r"extra_logit extra.*log_softmax"):
    mtf.softmax(x, D, extra_logit=e)
