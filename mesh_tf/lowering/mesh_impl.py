"""MeshImpl: the mesh geometry and the backend contract's defaults.

A backend holds a mesh shape and layout rules and operates on
:class:`LaidOutTensor` values (one slice per processor; the value types are
in :mod:`mesh_tf.lowering.laid_out`).  This module holds what a MeshImpl
*is*: its geometry (``tensor_layout``, ``slice_shape``, ``processor_groups``
...), which dims an op may split, and the primitives (``_allreduce``...)
that a bare MeshImpl lacks (:class:`BackendRequiredError`; the abstract
contract is :class:`~mesh_tf.lowering.backend.MeshBackend`).  The public,
recorded methods that call those primitives (``allreduce``, ``slicewise``
...) are in :mod:`mesh_tf.lowering.collectives`.
"""

import math

from mesh_tf.core import dims as dims_lib
from mesh_tf.core.errors import (MtfError, UnknownNameError,
                                 UnsplittableDimError)
from mesh_tf.core.layout import TensorLayout, convert_to_layout_rules
from mesh_tf.lowering import geometry
from mesh_tf.lowering.collectives import RecordedCollectives
# The value types, importable from here as before the split.
from mesh_tf.lowering.laid_out import (LaidOutTensor, LaidOutVariable,  # noqa: F401
                                       LazyAllreduceSum)
from mesh_tf.lowering.trace import CollectiveTrace


class BackendRequiredError(MtfError):
  """A communication or slice primitive was called on a bare MeshImpl."""


class MeshImpl(RecordedCollectives):
  """A mesh shape and layout rules: the geometry, and the recorded methods.

  ``MeshImpl(shape, layout_rules)`` itself answers geometry questions, as Mesh TF
  programs ask them (``tensor_layout``, ``tensor_dimension_to_mesh_axis``,
  ``slice_shape``, ``ndims``, ``size``, ``processor_groups``...).  Running
  ops needs a backend, a :class:`MeshBackend` subclass that implements the
  primitives (``_allreduce``...); on a bare MeshImpl the recorded methods
  that reach one raise :class:`BackendRequiredError`.

  Args:
    shape: the mesh shape, a Shape or string like ``"rows:2;cols:4"``.
    layout_rules: LayoutRules or a string like ``"batch:rows"`` (Mesh TF's
      keyword; subclasses such as PlacementMeshImpl call it ``layout``).

  Example:
    >>> impl = MeshImpl("rows:2;cols:4", "batch:rows")
    >>> impl.slice_shape("batch:8;d:6"), impl.ndims, impl.size
    ((4, 6), 2, 8)
  """

  def __init__(self, shape, layout_rules):
    self.shape = dims_lib.convert_to_shape(shape)
    self.layout_rules = convert_to_layout_rules(layout_rules)
    for dim_name, axes in self.layout_rules.rules:
      for axis in axes:
        if axis not in self.shape:
          raise UnknownNameError(
              f"layout rule {dim_name}:{'+'.join(axes)} names mesh axis "
              f"{axis!r}, which is not in mesh {self.shape!r}; use one of "
              f"{self.shape.dimension_names}")
    self.trace = CollectiveTrace()
    self._op_name = "<outside op>"
    self._strides = tuple(self._compute_strides())
    # Shape -> (TensorLayout, slice sizes) under this impl's fixed rules:
    # an op asks for the same few shapes many times (the search lowers
    # each op under thousands of layouts, each on a fresh impl).
    self._layouts = {}

  # --- geometry ---------------------------------------------------------
  @property
  def size(self):
    return self.shape.size

  @property
  def ndims(self):
    return self.shape.ndims

  @property
  def supports_control_dependencies(self):
    """Whether ``mtf.depend`` orders work on this backend (Mesh TF's flag)."""
    return True

  def laid_out_size(self, tensor_shape):
    """Elements of a tensor of ``tensor_shape`` over all processors
    (replicas counted)."""
    return self.size * math.prod(self.slice_shape(tensor_shape))

  def slice_size(self, tensor_shape):
    """Elements of one processor's slice of a tensor of ``tensor_shape``."""
    return math.prod(self.slice_shape(tensor_shape))

  def mesh_dimension_name_to_size(self, name):
    return self.shape.get_dim_by_name(name).size

  def _compute_strides(self):
    strides, s = [], 1
    for d in reversed(self.shape.dims):
      strides.append(s)
      s *= d.size
    return reversed(strides)

  def mesh_axis_index(self, axis):
    """Index of a mesh axis given by index or name."""
    if isinstance(axis, int):
      return axis
    return self.shape.index(axis)

  def pnum_to_processor_coordinates(self, pnum):
    return tuple((pnum // st) % d.size
                 for st, d in zip(self._strides, self.shape.dims))

  def processor_coordinates_to_pnum(self, coords):
    return sum(c * st for c, st in zip(coords, self._strides))

  def processor_groups(self, mesh_axes):
    """Groups of pnums that vary only along ``mesh_axes`` (tuple of indices).

    Each group lists its pnums in row-major order of their coordinates on
    ``mesh_axes``; the groups themselves are ordered by their first pnum.
    Computed on each call; a backend that issues collectives keeps a
    :class:`~mesh_tf.lowering.geometry.ProcessorGroups` table instead.
    """
    return geometry.processor_groups(
        [d.size for d in self.shape.dims], mesh_axes)

  def tensor_layout(self, arg):
    """The TensorLayout of an mtf Tensor or Shape (validated); a
    TensorLayout is returned as it is."""
    if isinstance(arg, TensorLayout):
      return arg
    shape = getattr(arg, "shape", arg)
    if isinstance(shape, dims_lib.Shape):
      hit = self._layouts.get(shape)
      if hit is None:
        # Only valid layouts are kept; an invalid one raises (naming the
        # tensor) every time it is asked for.
        layout = self.layout_rules.tensor_layout(
            shape, self.shape, getattr(arg, "name", None))
        hit = self._layouts[shape] = (
            layout, layout.slice_sizes(shape, self.shape))
      return hit[0]
    name = getattr(arg, "name", None)
    return self.layout_rules.tensor_layout(shape, self.shape, name)

  def tensor_dimension_to_mesh_axis(self, dim):
    """The mesh-axis index ``dim`` maps to, or None.

    Raises:
      MultiAxisDimError: if the dim splits over several mesh axes; code
        that handles those asks :meth:`tensor_dimension_to_mesh_axes`.
    """
    return self.layout_rules.tensor_dimension_to_mesh_axis(dim, self.shape)

  def tensor_dimension_to_mesh_axes(self, dim):
    """The mesh-axis indices ``dim`` splits over, major first; () if none.

    The tuple is what the recorded collectives take as a dim's "mesh
    axis": ``allconcat(x, impl.tensor_dimension_to_mesh_axes(d), j)``.
    """
    return self.layout_rules.tensor_dimension_to_mesh_axes(dim, self.shape)

  def split_axes(self, dims):
    """The mesh axes (indices, size > 1, sorted) that split any of
    ``dims``: what a reduction over those dims must all-reduce over."""
    return tuple(sorted({a for d in dims
                         for a in self.tensor_dimension_to_mesh_axes(d)
                         if self.shape[a].size > 1}))

  def dim_axes(self, dim):
    """The mesh axes of size > 1 that ``dim`` splits over, major first;
    None if there are none (how ops ask "is this dim split, and where")."""
    axes = tuple(a for a in self.tensor_dimension_to_mesh_axes(dim)
                 if self.shape[a].size > 1)
    return axes or None

  def block_index(self, pnum, mesh_axes):
    """Which block of a dim split over the ordered ``mesh_axes`` processor
    ``pnum`` holds."""
    return geometry.block_index(self.pnum_to_processor_coordinates(pnum),
                                [d.size for d in self.shape.dims],
                                self._ordered_axes(mesh_axes))

  def slice_shape(self, arg):
    """Per-processor slice shape (tuple of ints) of a Tensor or Shape."""
    shape = getattr(arg, "shape", arg)
    if isinstance(shape, dims_lib.Shape) and not isinstance(
        arg, TensorLayout):
      self.tensor_layout(arg)  # fills the entry (or raises, naming arg)
      return self._layouts[shape][1]
    shape = dims_lib.convert_to_shape(shape)
    return self.tensor_layout(arg).slice_sizes(shape, self.shape)

  def slice_begin(self, arg, pnum):
    """Offsets of processor ``pnum``'s slice in the full tensor."""
    shape = dims_lib.convert_to_shape(getattr(arg, "shape", arg))
    layout = self.tensor_layout(arg)
    coords = self.pnum_to_processor_coordinates(pnum)
    sizes = [d.size for d in self.shape.dims]
    out = []
    for d, axes in zip(shape.dims, layout.tensor_axis_to_mesh_axes):
      n = math.prod(sizes[a] for a in axes)
      out.append(geometry.block_index(coords, sizes, axes) * (d.size // n))
    return tuple(out)

  def mesh_axis_to_cumprod(self, tensor_shape):
    """For each mesh axis, the product of the sizes of the tensor dims
    before the one it splits (None if it splits none): Mesh TF's helper
    for flat slice numbering."""
    shape = dims_lib.convert_to_shape(tensor_shape)
    cumprod = shape.cumprod
    mesh_to_tensor = self.tensor_layout(shape).mesh_axis_to_tensor_axis(
        self.ndims)
    return [None if ta is None else cumprod[ta] for ta in mesh_to_tensor]

  def slice_num(self, tensor_shape, pnum):
    """The number of processor ``pnum``'s slice of a tensor of
    ``tensor_shape``: equal on processors holding the same slice (its
    replicas), row-major over the split dims' mesh coordinates."""
    coords = self.pnum_to_processor_coordinates(pnum)
    num = 0
    for a in self.tensor_layout(
        dims_lib.convert_to_shape(tensor_shape)).mesh_axes():
      num = num * self.shape[a].size + coords[a]
    return num

  def laid_out_slice_num(self, tensor_shape):
    """A scalar int32 slice per processor: :meth:`slice_num` (Mesh TF's;
    e.g. to seed random ops alike on replicas)."""
    from mesh_tf.lowering.lazy_tf import tf
    return self.slicewise_pnum(
        lambda p: tf.constant(self.slice_num(tensor_shape, p), tf.int32),
        slice_shape=(), dtype="int32", flops=0)

  def check_splittable(self, op):
    """Raises UnsplittableDimError if ``op`` would split a dim it cannot."""
    bad = op.lowering_unsplittable_dims
    if not bad:
      return
    for t in list(op.inputs) + list(op.outputs):
      for d in t.shape:
        if d.name in bad:
          axes = self.tensor_dimension_to_mesh_axes(d)
          if axes:
            names = "+".join(self.shape[a].name for a in axes)
            raise UnsplittableDimError(
                f"operation {op.name} ({type(op).__name__}) cannot split dim "
                f"{d} of tensor {t.name}, but the layout maps it to mesh axis "
                f"{', '.join(str(self.shape[a]) for a in axes)}; remove the "
                f"rule {d.name}:{names} or rename the dim for this op")

  # --- primitives: a bare MeshImpl has none ------------------------------
  # ``MeshImpl(shape, layout)`` answers geometry (Mesh TF programs build one
  # for that); moving or computing slices needs a backend.
  def _no_backend(self, what):
    return BackendRequiredError(
        f"{what} needs a backend, but this is a bare MeshImpl{self.shape!r} "
        "(geometry only); use mtf.PlacementMeshImpl(shape, layout, devices) "
        "to run on devices, or mtf.ShapeMeshImpl(shape, layout) to trace "
        "shapes and collectives")

  def _allreduce(self, x, mesh_axes, reduction):
    raise self._no_backend("allreduce")

  def _allconcat(self, x, mesh_axis, concat_axis):
    raise self._no_backend("allconcat")

  def _reduce_scatter(self, x, mesh_axis, split_axis):
    raise self._no_backend("reduce_scatter")

  def _alltoall(self, x, mesh_axis, split_axis, concat_axis):
    raise self._no_backend("alltoall")

  def _receive(self, x, mesh_axes, source_pcoord):
    raise self._no_backend("receive")

  def _slicewise(self, fn, inputs, outputs, with_pnum):
    raise self._no_backend("slicewise")

  def _import(self, value, shape, slice_shape, dtype):
    raise self._no_backend("import_laid_out")

  def export_to_tf_tensor(self, x, shape):
    raise self._no_backend("export_to_tf_tensor")

  def _make_variable(self, name, shape, slice_shape, dtype, initializer,
                     trainable):
    raise self._no_backend("make_variable")
