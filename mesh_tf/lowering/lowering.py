"""Lowering: turns an mtf Graph into per-processor computations."""

from mesh_tf.core.errors import MtfError
from mesh_tf.graph import Mesh, Operation, Tensor


class Lowering:
  """Lowers every operation of ``graph``, in graph order.

  Args:
    graph: the mtf Graph.
    mesh_to_impl: dict from each Mesh to its MeshImpl backend.
    feeds: optional dict from mtf Tensors made by ``import_tf_tensor`` to TF
      tensors that replace the imported value (e.g. ``tf.function`` args).
    autostack: accepted for Mesh TF compatibility; variables are never
      stacked here, so it has no effect.

  Example:
    >>> lowering = Lowering(graph, {mesh: mesh_impl})   # doctest: +SKIP
    >>> tf_y = lowering.export_to_tf_tensor(y)           # doctest: +SKIP
  """

  def __init__(self, graph, mesh_to_impl, feeds=None, autostack=True):
    self.graph = graph
    self.mesh_to_impl = dict(mesh_to_impl)
    self.feeds = dict(feeds or {})
    self.tensors = {}
    self.variables = {}
    self.lowered_operations = {}
    for op in graph.operations:
      impl = self.mesh_impl(op)
      for t in op.outputs:  # Layout errors name the tensor, not just a shape.
        impl.tensor_layout(t)
      impl.check_splittable(op)
      with impl.recording(op.name):
        op.lower(self)
      for t in op.outputs:
        if t not in self.tensors:
          raise AssertionError(f"{op} did not lower its output {t.name}")

  def mesh_impl(self, x):
    """The MeshImpl of a Mesh, Tensor or Operation."""
    mesh = x if isinstance(x, Mesh) else x.mesh
    impl = self.mesh_to_impl.get(mesh)
    if impl is None:
      raise MtfError(f"no MeshImpl was given for mesh {mesh.name!r}; pass "
                     "{mesh: mesh_impl} to Lowering")
    return impl

  def set_tensor_lowering(self, tensor, laid_out):
    """Records the lowered value (LaidOutTensor or lazy sum) of ``tensor``."""
    expected = self.mesh_impl(tensor).slice_shape(tensor)
    if tuple(laid_out.slice_shape) != expected:
      raise AssertionError(
          f"lowering of {tensor.name} has slice shape {laid_out.slice_shape},"
          f" expected {expected}")
    self.tensors[tensor] = laid_out

  def laid_out(self, tensor):
    """The LaidOutTensor of ``tensor``, forcing a pending all-reduce."""
    return self.tensors[tensor].to_laid_out_tensor()

  def export_to_tf_tensor(self, x):
    """The full value of mtf Tensor ``x`` as one TF tensor."""
    if not isinstance(x, Tensor):
      raise MtfError(f"export_to_tf_tensor expects an mtf Tensor, got {x!r}")
    if x not in self.tensors:
      raise MtfError(f"tensor {x.name} was not lowered: it belongs to another "
                     "graph, or was built after this Lowering")
    impl = self.mesh_impl(x)
    return impl.export_to_tf_tensor(self.laid_out(x), x.shape)

  def lowered_operation(self, op):
    """What an op with side effects lowered to (e.g. assign ops)."""
    if not isinstance(op, Operation):
      op = op.operation
    return self.lowered_operations.get(op)

  def collective_trace(self, mesh):
    return self.mesh_to_impl[mesh].trace

  # Mesh TensorFlow's master variables, for tf.compat.v1 graph programs
  # (see mesh_tf.lowering.masters; made on the first call).
  def copy_masters_to_slices(self):
    """A TF op that fills every variable's slices from its master."""
    from mesh_tf.lowering.masters import make_masters  # pylint: disable=g-import-not-at-top
    return make_masters(self).copy_masters_to_slices()

  def copy_slices_to_masters(self):
    """A TF op that writes every variable's slices into its master."""
    from mesh_tf.lowering.masters import make_masters  # pylint: disable=g-import-not-at-top
    return make_masters(self).copy_slices_to_masters()
