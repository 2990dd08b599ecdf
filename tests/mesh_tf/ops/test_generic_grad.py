"""GenericGradOperation: TF's autodiff of another op's lowered slices,
under several layouts, eager and in tf.function."""

import numpy as np
import pytest
import tensorflow as tf

import mesh_tf as mtf
from tests.layout_harness import check_layouts, run

RNG = np.random.RandomState(13)
XV = RNG.randn(4, 8).astype(np.float32)    # a:4, b:8
GV = RNG.randn(4, 8).astype(np.float32)
WV = RNG.randn(8, 2).astype(np.float32)    # b:8, c:2


class _Cube(mtf.Operation):
  """x ** 3 per slice, with no gradient of its own."""

  no_gradient_reason = "test op"

  def __init__(self, x):
    super().__init__([x], name="cube")
    self._outputs = [mtf.Tensor(self, x.shape, x.dtype)]

  def lower(self, lowering):
    impl = lowering.mesh_impl(self)
    lowering.set_tensor_lowering(self.outputs[0], impl.slicewise(
        lambda t: t * t * t, lowering.laid_out(self.inputs[0]),
        shape=self.outputs[0].shape))


def test_generic_grad_of_a_slicewise_op_matches_the_derivative():
  def build(mesh):
    x = mtf.import_tf_tensor(mesh, XV, "a:4;b:8")
    g = mtf.import_tf_tensor(mesh, GV, "a:4;b:8")
    op = _Cube(x)
    return [op.outputs[0], mtf.GenericGradOperation(op, [g]).outputs[0]]
  assert check_layouts(build, ["a:4", "b:8"],
                       lambda: [XV ** 3, 3 * XV ** 2 * GV], rtol=1e-4,
                       atol=1e-4, limit=6) > 6


def test_generic_grad_through_all_reduces_of_einsum_and_reduce():
  def build(mesh):
    x = mtf.import_tf_tensor(mesh, XV, "a:4;b:8")
    w = mtf.import_tf_tensor(mesh, WV, "b:8;c:2")
    y = mtf.einsum([x, w], output_shape="a:4;c:2")
    s = mtf.reduce_sum(x, reduced_dim=x.shape.dims[1])
    gy = mtf.ones_like(y) * 0.5
    gs = mtf.import_tf_tensor(mesh, GV[:, 0], "a:4")
    dx, dw = mtf.GenericGradOperation(y.operation, [gy]).outputs
    (ds,) = mtf.GenericGradOperation(s.operation, [gs]).outputs
    return [dx, dw, ds]

  def ref():
    gy = np.full((4, 2), 0.5, np.float32)
    return [gy @ WV.T, XV.T @ gy, np.repeat(GV[:, :1], 8, axis=1)]
  check_layouts(build, ["a:4", "b:8", "c:2"], ref, rtol=1e-4, atol=1e-4,
                limit=6)


def test_generic_grad_serves_as_a_gradient_method_and_in_tf_function():
  class Cube2(_Cube):
    no_gradient_reason = None

    def gradient(self, grad_ys):
      return mtf.GenericGradOperation(self, grad_ys).outputs

  def lowered():
    g = mtf.Graph()
    mesh = mtf.Mesh(g, "mesh")
    x = mtf.import_tf_tensor(mesh, XV, "a:4;b:8")
    loss = mtf.reduce_sum(Cube2(x).outputs[0])
    (dx,) = mtf.gradients([loss], [x])
    impl = mtf.PlacementMeshImpl("x:2", "b:x", mtf.logical_cpu_devices(2))
    return mtf.Lowering(g, {mesh: impl}).export_to_tf_tensor(dx)
  np.testing.assert_allclose(tf.function(lowered)().numpy(), 3 * XV ** 2,
                             rtol=1e-5)
  np.testing.assert_allclose(lowered().numpy(), 3 * XV ** 2, rtol=1e-5)


def test_generic_grad_records_the_rerun_forward_under_its_name():
  def build(mesh):
    x = mtf.import_tf_tensor(mesh, XV, "a:4;b:8")
    s = mtf.reduce_sum(x, reduced_dim=x.shape.dims[1])
    op = mtf.GenericGradOperation(s.operation, [mtf.ones_like(s)])
    return [s, op.outputs[0]]
  _, trace = run(build, "x:2", "b:x")
  assert sorted((c.kind, c.op_name.endswith("generic_grad"))
                for c in trace.collectives) == [("allreduce", False),
                                                ("allreduce", True)]


def test_generic_grad_checks_grad_ys():
  g = mtf.Graph()
  mesh = mtf.Mesh(g, "m")
  x = mtf.zeros(mesh, "a:4")
  op = _Cube(x)
  with pytest.raises(mtf.ShapeError, match="1 outputs but 2 grad_ys"):
    mtf.GenericGradOperation(op, [x, x])
  with pytest.raises(mtf.ShapeError, match="must be a Tensor of that shape"):
    mtf.GenericGradOperation(op, [mtf.zeros(mesh, "a:2")])
