"""The recorded collectives: MeshImpl's public communication, slicewise and
variable methods.

Each one records what it moves into ``self.trace`` (a
:class:`~mesh_tf.lowering.trace.CollectiveRecord` or ``ComputeRecord``,
attributed to the op being lowered, see :meth:`recording`) and then calls
the backend's primitive (``_allreduce``...; the contract is
:class:`~mesh_tf.lowering.backend.MeshBackend`).  Every backend running the
same op lowering code therefore produces the same trace: the cost model
prices it, and the layout search compares it.

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
from mesh_tf.core.errors import MtfError
from mesh_tf.lowering.laid_out import LaidOutTensor
from mesh_tf.lowering.trace import CollectiveRecord, ComputeRecord

__all__ = ["RecordedCollectives"]


class RecordedCollectives:
  """MeshImpl's recorded methods (a mixin of :class:`~mesh_tf.lowering.
  mesh_impl.MeshImpl`, which owns ``shape``, ``trace`` and the geometry
  these methods use)."""

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
