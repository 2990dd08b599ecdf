"""The MeshImpl geometry and the backend contract (:class:`MeshBackend`).

A backend holds a mesh shape and layout rules and operates on
:class:`LaidOutTensor` values (one slice per processor; the value types are
in :mod:`mesh_tf.lowering.laid_out`).  The public methods
here (``allreduce``, ``allconcat``, ``alltoall``, ``receive``, ``slicewise``...)
record into ``self.trace`` and then call the backend's primitive
(``_allreduce``...), so that every backend running the same op lowering code
produces the same trace.

A dim split over several mesh axes (rule ``batch:x+y``) is gathered,
split, scattered and exchanged by *one* collective over the group that spans
those axes, ordered major first (the first axis of the rule is the major
index): ``allconcat(x, (x_axis, y_axis), j)``.  It is one
:class:`CollectiveRecord` whose ``mesh_axes`` name the axes in rule order and
whose ``group_size`` is their product, as XLA issues one all-gather over the
combined replica group for JAX's ``P(('x', 'y'))``.
"""

import contextlib
import math

from mesh_tf.core import dims as dims_lib
from mesh_tf.core import dtypes as dtypes_lib
from mesh_tf.core.errors import (MtfError, UnknownNameError,
                                 UnsplittableDimError)
from mesh_tf.core.layout import TensorLayout, convert_to_layout_rules
from mesh_tf.lowering import geometry
# The value types, importable from here as before the split.
from mesh_tf.lowering.laid_out import (LaidOutTensor, LaidOutVariable,  # noqa: F401
                                       LazyAllreduceSum)
from mesh_tf.lowering.trace import (CollectiveRecord, CollectiveTrace,
                                    ComputeRecord)


class BackendRequiredError(MtfError):
  """A communication or slice primitive was called on a bare MeshImpl."""


class MeshImpl:
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

  @property
  def current_op_name(self):
    """The name trace records made now are attributed to."""
    return self._op_name

  @contextlib.contextmanager
  def recording(self, op_name):
    """Attributes trace records made inside to ``op_name``."""
    old, self._op_name = self._op_name, op_name
    try:
      yield
    finally:
      self._op_name = old

  # --- recorded public methods -----------------------------------------
  def _axes(self, mesh_axes):
    """A set of mesh axes (indices, names, or tuples of them: a multi-axis
    dim's axes) as sorted indices of size > 1."""
    if isinstance(mesh_axes, (int, str)):
      mesh_axes = [mesh_axes]
    flat = set()
    for a in mesh_axes:
      if isinstance(a, (tuple, list)):
        flat.update(self.mesh_axis_index(b) for b in a)
      else:
        flat.add(self.mesh_axis_index(a))
    return tuple(a for a in sorted(flat) if self.shape[a].size > 1)

  def _ordered_axes(self, mesh_axis):
    """One dim's mesh axes (an index, a name, or an ordered tuple of them,
    major first) as indices of size > 1, in order."""
    if isinstance(mesh_axis, (int, str)):
      mesh_axis = (mesh_axis,)
    axes = tuple(self.mesh_axis_index(a) for a in mesh_axis)
    if len(set(axes)) != len(axes):
      raise MtfError(f"mesh axes {axes} of one dim repeat an axis")
    return tuple(a for a in axes if self.shape[a].size > 1)

  def _group_size(self, axes):
    return math.prod(self.shape[a].size for a in axes)

  def _axes_str(self, axes):
    return "*".join(str(self.shape[a]) for a in axes)

  def _split_group(self, x, mesh_axis, split_axis, what):
    """The ordered axes of ``mesh_axis`` (empty: nothing to do), checking
    that slice axis ``split_axis`` of ``x`` divides over their group."""
    axes = self._ordered_axes(mesh_axis)
    if axes and x.slice_shape[split_axis] % self._group_size(axes):
      raise MtfError(f"{what}: slice axis {split_axis} of size "
                     f"{x.slice_shape[split_axis]} is not divisible by mesh "
                     f"axis {self._axes_str(axes)}")
    return axes

  def _record(self, kind, x, axes, reduction=None, source_op=None):
    self.trace.collectives.append(CollectiveRecord(
        self._op_name, kind, tuple(self.shape[a].name for a in axes),
        math.prod(self.shape[a].size for a in axes), x.slice_bytes,
        reduction, source_op or self._op_name))

  def allreduce(self, x, mesh_axes, reduction="SUM", source_op=None):
    """Reduces ``x`` over ``mesh_axes``; every participant gets the result.

    ``reduction`` is "SUM", "MAX" or "MIN".
    """
    x = x.to_laid_out_tensor()
    if reduction not in ("SUM", "MAX", "MIN"):
      raise MtfError(f"unknown all-reduce reduction {reduction!r}")
    axes = self._axes(mesh_axes)
    if not axes:
      return x
    self._record("allreduce", x, axes, reduction, source_op)
    return self._allreduce(x, axes, reduction)

  def allconcat(self, x, mesh_axis, concat_axis):
    """Concatenates the slices of ``x`` along ``mesh_axis`` on tensor axis
    ``concat_axis``; every participant gets the concatenation.

    ``mesh_axis`` may be an ordered tuple of axes (a multi-axis dim, major
    first): the slices are concatenated in block order.
    """
    x = x.to_laid_out_tensor()
    axes = self._ordered_axes(mesh_axis)
    if not axes:
      return x
    self._record("allconcat", x, axes)
    return self._allconcat(x, axes, concat_axis)

  def reduce_scatter(self, x, mesh_axis, split_axis, source_op=None):
    """SUM-reduces ``x`` over ``mesh_axis`` and leaves on each participant
    its part of tensor axis ``split_axis`` (by its coordinate on the axis):
    an all-reduce followed by an all-split, at half the all-reduce's cost.
    """
    x = x.to_laid_out_tensor()
    axes = self._split_group(x, mesh_axis, split_axis, "reduce_scatter")
    if not axes:
      return x
    self._record("reduce_scatter", x, axes, "SUM", source_op)
    return self._reduce_scatter(x, axes, split_axis)

  def allsplit(self, x, mesh_axis, split_axis):
    """Keeps, on each processor, its part of tensor axis ``split_axis``
    according to its coordinate on ``mesh_axis``.  No communication."""
    x = x.to_laid_out_tensor()
    axes = self._split_group(x, mesh_axis, split_axis, "allsplit")
    if not axes:
      return x
    shape = list(x.slice_shape)
    shape[split_axis] //= self._group_size(axes)
    size = shape[split_axis]

    def fn(pnum, t):
      from mesh_tf.lowering.lazy_tf import tf
      begin = [0] * len(shape)
      begin[split_axis] = self.block_index(pnum, axes) * size
      return tf.slice(t, begin, shape)
    return self.slicewise_pnum(fn, x, slice_shape=shape, flops=0)

  def alltoall(self, x, mesh_axis, split_axis, concat_axis):
    """Splits each slice along ``split_axis`` into n parts, sends part j to
    the processor with coordinate j on ``mesh_axis``, and concatenates what
    arrives along ``concat_axis`` in source order."""
    x = x.to_laid_out_tensor()
    axes = self._split_group(x, mesh_axis, split_axis, "alltoall")
    if not axes:
      return x
    self._record("alltoall", x, axes)
    return self._alltoall(x, axes, split_axis, concat_axis)

  def receive(self, x, mesh_axis, source_pcoord):
    """Each processor at position c along ``mesh_axis`` gets the slice of
    the processor at position ``source_pcoord[c]`` (zeros if None).

    ``mesh_axis`` is an axis, or one dim's ordered axes (major first):
    position c is then the block index c of a dim split over them, in the
    group of processors that vary only along those axes.
    """
    x = x.to_laid_out_tensor()
    axes = self._ordered_axes(mesh_axis)
    source_pcoord = tuple(source_pcoord)
    if not axes or source_pcoord == tuple(range(self._group_size(axes))):
      return x
    self._record("receive", x, axes)
    return self._receive(x, axes, source_pcoord)

  def shift_by_n_processors(self, x, mesh_axis, offset, wrap):
    """Moves each slice ``offset`` positions along ``mesh_axis`` (an axis,
    or one dim's ordered axes: along the dim's blocks)."""
    n = self._group_size(self._ordered_axes(mesh_axis))
    source = []
    for c in range(n):
      s = c - offset
      if wrap:
        s %= n
      source.append(s if 0 <= s < n else None)
    return self.receive(x, mesh_axis, source)

  def slicewise(self, fn, *inputs, shape=None, slice_shape=None, dtype=None,
                flops=None, matmul=False, fused=None, matrix=(), conv=()):
    """Applies ``fn`` to each processor's slices of ``inputs``.

    ``inputs`` are LaidOutTensors (or lazy sums, which are forced) or plain
    Python values passed as they are.  The output slice shape comes from
    ``shape`` (an mtf Shape laid out by the rules) or ``slice_shape``; give
    lists of them for several outputs.  ``flops`` defaults to the number of
    output elements per device; ``matmul`` marks a contraction (priced at
    the matrix units' peak for its dtype); a string there is also True and
    names the contraction's pattern (see
    :func:`mesh_tf.lowering.einsum_kernels.einsum_pattern`).  ``fused``, for a kernel of an
    elementwise chain, is ``(one bool per input: read from the fused
    producer, bool: the output stays in the fused kernel)``; those bytes are
    not recorded as memory traffic (see :mod:`mesh_tf.ops.base`).
    ``matrix``: the record's ``(batch, rows, cols)`` of a matrix product (see
    :class:`mesh_tf.lowering.trace.ComputeRecord`); ``conv`` likewise.
    """
    return self._slicewise_common(fn, inputs, shape, slice_shape, dtype,
                                  flops, with_pnum=False, matmul=matmul,
                                  fused=fused, matrix=matrix, conv=conv)

  def slicewise_pnum(self, fn, *inputs, shape=None, slice_shape=None,
                     dtype=None, flops=None):
    """Like :meth:`slicewise`, but calls ``fn(pnum, *slices)``."""
    return self._slicewise_common(fn, inputs, shape, slice_shape, dtype,
                                  flops, with_pnum=True)

  def _slicewise_common(self, fn, inputs, shape, slice_shape, dtype, flops,
                        with_pnum, matmul=False, fused=None, matrix=(),
                        conv=()):
    inputs = [x.to_laid_out_tensor() if hasattr(x, "to_laid_out_tensor")
              else x for x in inputs]
    multi = isinstance(shape, (list, tuple)) or (
        slice_shape is not None and slice_shape
        and isinstance(slice_shape[0], (list, tuple)))
    shapes = list(shape) if isinstance(shape, (list, tuple)) else [shape]
    if slice_shape is not None:
      slice_shapes = list(slice_shape) if multi else [slice_shape]
    else:
      slice_shapes = [self.slice_shape(s) for s in shapes]
    if dtype is None:
      laid = [x for x in inputs if isinstance(x, LaidOutTensor)]
      dtype = laid[0].dtype if laid else "float32"
    dtypes = list(dtype) if isinstance(dtype, (list, tuple)) else (
        [dtype] * len(slice_shapes))
    outs = [LaidOutTensor(s, d) for s, d in zip(slice_shapes, dtypes)]
    if flops is None:
      flops = sum(o.slice_size for o in outs)
    laid_in = [x for x in inputs if isinstance(x, LaidOutTensor)]
    if fused is None:
      read = sum(x.slice_bytes for x in laid_in)
      written = sum(o.slice_bytes for o in outs)
    else:
      skip_in, keep_out = fused
      read = sum(x.slice_bytes for x, skip in zip(inputs, skip_in)
                 if isinstance(x, LaidOutTensor) and not skip)
      written = 0 if keep_out else sum(o.slice_bytes for o in outs)
    # ``matmul`` may name the contraction's pattern (a str is a matmul).
    self.trace.compute.append(ComputeRecord(
        self._op_name, int(flops), written, read,
        (laid_in[0] if laid_in else outs[0]).dtype, bool(matmul),
        matmul if isinstance(matmul, str) else "", tuple(matrix),
        tuple(conv)))
    self._slicewise(fn, inputs, outs, with_pnum)
    return outs if multi else outs[0]

  def record_compute(self, flops, output_bytes, input_bytes,
                     dtype="float32"):
    """Records per-device work done outside ``slicewise`` (e.g. a fused
    variable update), so that every backend prices it alike."""
    self.trace.compute.append(ComputeRecord(
        self._op_name, int(flops), int(output_bytes), int(input_bytes),
        dtypes_lib.as_dtype(dtype)))

  def scalar_constant(self, value, dtype):
    """A LaidOutTensor holding the scalar ``value`` on every processor.

    Not recorded as compute.  Backends may share one per graph and device.
    """
    return self._scalar_constant(value, dtypes_lib.as_dtype(dtype))

  def _scalar_constant(self, value, dtype):
    return LaidOutTensor((), dtype)

  def import_laid_out(self, value, shape, dtype):
    """Slices a full (host) value onto the processors; not a collective."""
    shape = dims_lib.convert_to_shape(shape)
    return self._import(value, shape, self.slice_shape(shape),
                        dtypes_lib.as_dtype(dtype))

  def random(self, shape, dtype, kind, seed, **params):
    """A random tensor whose values depend on ``seed`` and each element's
    global index only, so every layout gives the same tensor."""
    from mesh_tf.lowering import random_kernels
    shape = dims_lib.convert_to_shape(shape)
    full = tuple(shape.to_integer_list())
    sl = self.slice_shape(shape)

    def fn(pnum):
      return random_kernels.tf_random(
          full, self.slice_begin(shape, pnum), sl, dtype, kind, seed, **params)
    return self.slicewise_pnum(fn, shape=shape, dtype=dtype)

  def laid_out_pnum(self):
    """A scalar int32 slice per processor holding its pnum."""
    from mesh_tf.lowering.lazy_tf import tf
    return self.slicewise_pnum(lambda p: tf.constant(p, tf.int32),
                               slice_shape=(), dtype="int32", flops=0)

  def laid_out_pcoord(self, mesh_axis):
    """A scalar int32 slice per processor holding its coordinate on an axis."""
    from mesh_tf.lowering.lazy_tf import tf
    a = self.mesh_axis_index(mesh_axis)
    return self.slicewise_pnum(
        lambda p: tf.constant(self.pnum_to_processor_coordinates(p)[a],
                              tf.int32),
        slice_shape=(), dtype="int32", flops=0)

  def make_variable(self, name, shape, dtype, initializer, trainable=True):
    """Creates (or returns the existing) laid-out variable ``name``.

    ``initializer(full_shape, slice_begin, slice_shape, dtype)`` returns the
    initial value of one slice.
    """
    shape = dims_lib.convert_to_shape(shape)
    sl = self.slice_shape(shape)
    nbytes = math.prod(sl) * dtypes_lib.size_of(dtype)
    self.trace.variables[name] = nbytes
    return self._make_variable(name, shape, sl, dtypes_lib.as_dtype(dtype),
                               initializer, trainable)

  def laid_out_variable(self, name, shape, dtype):
    """The LaidOutVariable ``name`` this backend already holds, for lowering
    one op that writes it (see :func:`~mesh_tf.lowering.lower_operation`).

    Raises:
      MtfError: if the backend has no such variable.
    """
    raise MtfError(
        f"backend {type(self).__name__} holds no variable {name} of "
        f"{shape!r}; lower its Variable op first, or pass "
        "variables={variable: laid_out} to lower_operation")

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
