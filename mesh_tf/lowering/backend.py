"""The backend contract: the abstract primitives every mesh backend
implements under :class:`~mesh_tf.lowering.mesh_impl.MeshImpl`'s recorded
public methods (one class, so that a backend missing a primitive fails at
construction, not mid-lowering)."""

import abc

from mesh_tf.lowering.mesh_impl import MeshImpl


class MeshBackend(MeshImpl, abc.ABC):
  """The backend contract: a MeshImpl that implements every primitive.

  Backends (:class:`~mesh_tf.lowering.PlacementMeshImpl`,
  :class:`~mesh_tf.lowering.ShapeMeshImpl`) subclass this; one that leaves
  a primitive out cannot be instantiated.  The primitives receive mesh-axis
  *indices*; ops call MeshImpl's public, recorded methods.
  """

  @abc.abstractmethod
  def _allreduce(self, x, mesh_axes, reduction):
    """All-reduce over a tuple of mesh-axis indices."""

  @abc.abstractmethod
  def _allconcat(self, x, mesh_axes, concat_axis):
    """All-gather over an ordered tuple of mesh-axis indices (one dim's,
    major first), concatenating on concat_axis in block order."""

  @abc.abstractmethod
  def _reduce_scatter(self, x, mesh_axes, split_axis):
    """SUM reduce-scatter over an ordered tuple of mesh-axis indices onto
    ``split_axis`` (block c to the processor of block index c)."""

  @abc.abstractmethod
  def _alltoall(self, x, mesh_axes, split_axis, concat_axis):
    """All-to-all over an ordered tuple of mesh-axis indices."""

  @abc.abstractmethod
  def _receive(self, x, mesh_axes, source_pcoord):
    """Point-to-point over an ordered tuple of mesh-axis indices: block
    index c of the group gets block source_pcoord[c]'s slice."""

  @abc.abstractmethod
  def _slicewise(self, fn, inputs, outputs, with_pnum):
    """Runs fn per processor, filling each output LaidOutTensor in place."""

  @abc.abstractmethod
  def _import(self, value, shape, slice_shape, dtype):
    """Slices a full host value onto the processors."""

  @abc.abstractmethod
  def export_to_tf_tensor(self, x, shape):
    """Assembles a full (TF) tensor from a LaidOutTensor of mtf ``shape``."""

  @abc.abstractmethod
  def _make_variable(self, name, shape, slice_shape, dtype, initializer,
                     trainable):
    """Creates per-processor variable slices; returns a LaidOutVariable."""

