"""ShapeMeshImpl: runs the lowering on slice shapes only, without TensorFlow.

It records the same collective trace and slicewise FLOPs as
:class:`PlacementMeshImpl`, because the op lowering code is the same; only
the primitives differ.  The cost model prices its trace.
"""

from mesh_tf.lowering.laid_out import LaidOutTensor, LaidOutVariable
from mesh_tf.lowering.backend import MeshBackend


class ShapeMeshImpl(MeshBackend):
  """A backend that tracks slice shapes and dtypes, nothing else."""

  def _allreduce(self, x, mesh_axes, reduction):
    return LaidOutTensor(x.slice_shape, x.dtype)

  def _allconcat(self, x, mesh_axes, concat_axis):
    shape = list(x.slice_shape)
    shape[concat_axis] *= self._group_size(mesh_axes)
    return LaidOutTensor(shape, x.dtype)

  def _reduce_scatter(self, x, mesh_axes, split_axis):
    shape = list(x.slice_shape)
    shape[split_axis] //= self._group_size(mesh_axes)
    return LaidOutTensor(shape, x.dtype)

  def _alltoall(self, x, mesh_axes, split_axis, concat_axis):
    n = self._group_size(mesh_axes)
    shape = list(x.slice_shape)
    shape[split_axis] //= n
    shape[concat_axis] *= n
    return LaidOutTensor(shape, x.dtype)

  def _receive(self, x, mesh_axes, source_pcoord):
    return LaidOutTensor(x.slice_shape, x.dtype)

  def _slicewise(self, fn, inputs, outputs, with_pnum):
    pass  # Outputs already carry their slice shapes.

  def _import(self, value, shape, slice_shape, dtype):
    return LaidOutTensor(slice_shape, dtype)

  def export_to_tf_tensor(self, x, shape):
    raise NotImplementedError("ShapeMeshImpl holds no values to export")

  def _make_variable(self, name, shape, slice_shape, dtype, initializer,
                     trainable):
    return LaidOutVariable(name, shape, slice_shape, dtype, None)

  def laid_out_variable(self, name, shape, dtype):
    """A value-less stand-in: this backend holds only slice shapes."""
    return LaidOutVariable(name, shape, self.slice_shape(shape), dtype, None)
