"""Ops that cut and join tensors along one named dim: concat, split, stack,
unstack, slice and pad.

Every layout is lowered.  When the dim being cut or joined is split over a
mesh axis, each processor first gathers it (one all-concat per operand over
that axis), does the local op, and keeps its own block of the result; that
last step is free (like ``allsplit``).  ``stack`` never communicates: the new
dim's block on each processor is made of operands it already holds.
"""

import builtins

from mesh_tf.core import dims as dims_lib
from mesh_tf.core.errors import ShapeError, UnknownNameError
from mesh_tf.graph import Operation, Tensor
from mesh_tf.lowering.lazy_tf import tf
from mesh_tf.ops import creation

__all__ = ["concat", "split", "stack", "unstack", "slice", "mtf_slice", "pad",
           "ConcatOperation", "SplitOperation", "StackOperation",
           "UnstackOperation", "SliceOperation", "PadOperation"]


def _dim_name(d):
  return d if isinstance(d, str) else dims_lib.convert_to_dimension(d).name


def _find_dim(op_name, x, dim):
  """Position of dim ``dim`` (name or Dimension) in ``x``'s shape."""
  name = _dim_name(dim)
  if name not in x.shape:
    raise UnknownNameError(
        f"{op_name}: {x.name} {x.shape!r} has no dim named {name!r}; use one "
        f"of {x.shape.dimension_names}")
  if not isinstance(dim, str):
    dim = dims_lib.convert_to_dimension(dim)
    if x.shape.get_dim_by_name(name) != dim:
      raise ShapeError(
          f"{op_name}: dim {dim} does not match dim "
          f"{x.shape.get_dim_by_name(name)} of {x.name} {x.shape!r}")
  return x.shape.index(name)


def _check_int(op_name, what, v, low=0):
  if isinstance(v, builtins.bool) or not isinstance(v, int) or v < low:
    raise ShapeError(f"{op_name}: {what} must be an integer >= {low}, got "
                     f"{v!r}")


def _zeros_for(grads, tensors):
  """Output gradients with None replaced by zeros (for ops that glue them)."""
  return [g if g is not None else creation.zeros_like(t)
          for g, t in zip(grads, tensors)]


class _OneDimOperation(Operation):
  """Base of the ops here: a local op along dim ``self.axis`` (a position)
  of the output(s), run on operands gathered along that dim if it is split.
  """

  @property
  def unsplittable_dims(self):
    """The op's dim, as Mesh TF defines it."""
    return frozenset([self.dim_name])

  @property
  def lowering_unsplittable_dims(self):
    """None: a split dim is gathered, processed, and split again."""
    return frozenset()

  def _mesh_axis(self, impl):
    """The mesh axes (indices, major first) that split the dim, or None."""
    return impl.dim_axes(self.outputs[0].shape[self.axis])

  def _gathered(self, lowering, x, mesh_axis):
    laid = lowering.laid_out(x)
    if mesh_axis is None:
      return laid
    return lowering.mesh_impl(self).allconcat(laid, mesh_axis,
                                              x.shape.index(self.dim_name))

  def _lower_local(self, lowering, fn, inputs):
    """Runs ``fn(*full_slices) -> list of full-along-dim outputs`` and keeps
    each processor's block of the dim (of every output)."""
    impl = lowering.mesh_impl(self)
    a = self._mesh_axis(impl)
    laid = [self._gathered(lowering, x, a) for x in inputs]
    axis = self.axis
    shapes = [impl.slice_shape(t) for t in self.outputs]

    def kernel(pnum, *ts):
      ys = fn(*ts)
      if a is None:
        return ys
      c = impl.block_index(pnum, a)
      out = []
      for y, s in zip(ys, shapes):
        begin = [0] * len(s)
        begin[axis] = c * s[axis]
        out.append(tf.slice(y, begin, s))
      return out
    # Backends pass a single output's value bare.
    kernel_one = lambda pnum, *ts: kernel(pnum, *ts)[0]
    ys = impl.slicewise_pnum(kernel_one if len(shapes) == 1 else kernel,
                             *laid, slice_shape=shapes,
                             dtype=[t.dtype for t in self.outputs], flops=0)
    for t, y in zip(self.outputs, ys):
      lowering.set_tensor_lowering(t, y)


class ConcatOperation(_OneDimOperation):
  """Concatenates ``xs`` along dim ``concat_dim_name``.

  Attributes:
    dim_name: the concatenated dim.
    sizes: that dim's size in each operand (the gradient splits by them).
    axis: its position.
  """

  def __init__(self, xs, concat_dim_name, name=None):
    if not xs:
      raise ShapeError("concat needs at least one tensor")
    super().__init__(xs, name=name or "concat")
    self.dim_name = _dim_name(concat_dim_name)
    self.axis = _find_dim(self.name, xs[0], self.dim_name)
    base = xs[0].shape
    self.sizes = []
    for x in xs:
      if (self.dim_name not in x.shape
          or x.shape.index(self.dim_name) != self.axis
          or x.shape - [self.dim_name] != base - [self.dim_name]):
        raise ShapeError(
            f"{self.name}: operands {xs[0].name} {base!r} and {x.name} "
            f"{x.shape!r} must have the same dims, in the same order, except "
            f"for the size of {self.dim_name!r}")
      self.sizes.append(x.shape.get_dim_by_name(self.dim_name).size)
    self.sizes = tuple(self.sizes)
    out = base.resize_dimension(self.dim_name, sum(self.sizes))
    self._outputs = [Tensor(self, out, xs[0].dtype)]

  def lower(self, lowering):
    self._lower_local(lowering, lambda *ts: [tf.concat(ts, self.axis)],
                      self.inputs)

  def cost_params(self):
    return (self.axis, self.sizes)

  def gradient(self, grad_ys):
    g = grad_ys[0]
    if g is None:
      return [None] * len(self.inputs)
    if len(self.inputs) == 1:
      return [g]
    return list(split(g, self.dim_name, list(self.sizes),
                      name=f"{self.name}_grad"))


def concat(xs, concat_dim_name, name=None):
  """Concatenates a list of tensors along the dim named ``concat_dim_name``.

  The operands have the same dims in the same order; only the size of the
  concatenated dim may differ.

  Raises:
    UnknownNameError: if the first operand has no such dim.
    ShapeError: if the operands' other dims differ.

  Example:
    >>> y = concat([x1, x2], "length")   # doctest: +SKIP
  """
  return ConcatOperation(list(xs), concat_dim_name, name=name).outputs[0]


class SplitOperation(_OneDimOperation):
  """Splits ``x`` along ``split_dim`` into pieces of ``sizes``.

  Attributes:
    dim_name, sizes: the dim and the size of each piece (for the gradient).
    axis: the dim's position.
  """

  def __init__(self, x, split_dim, sizes, name=None):
    super().__init__([x], name=name or "split")
    self.axis = _find_dim(self.name, x, split_dim)
    d = x.shape[self.axis]
    self.dim_name = d.name
    if isinstance(sizes, int) and not isinstance(sizes, builtins.bool):
      _check_int(self.name, "num_or_size_splits", sizes, 1)
      if d.size % sizes:
        raise ShapeError(
            f"{self.name}: cannot split dim {d} of {x.name} into {sizes} "
            "equal parts; pass a divisor of its size or a list of sizes")
      sizes = [d.size // sizes] * sizes
    sizes = tuple(sizes)
    for s in sizes:
      _check_int(self.name, "each split size", s)
    if sum(sizes) != d.size:
      raise ShapeError(f"{self.name}: split sizes {list(sizes)} sum to "
                       f"{sum(sizes)}, not to the size of dim {d} of {x.name}")
    self.sizes = sizes
    self._outputs = [
        Tensor(self, x.shape.resize_dimension(d.name, s), x.dtype, index=i)
        for i, s in enumerate(sizes)]

  def lower(self, lowering):
    self._lower_local(
        lowering, lambda t: tf.split(t, list(self.sizes), axis=self.axis),
        self.inputs)

  def cost_params(self):
    return (self.axis, self.sizes)

  def gradient(self, grad_ys):
    if all(g is None for g in grad_ys):
      return [None]
    gs = _zeros_for(grad_ys, self.outputs)
    return [gs[0] if len(gs) == 1 else concat(
        gs, self.dim_name, name=f"{self.name}_grad")]


def split(x, split_dim, num_or_size_splits, name=None):
  """Splits ``x`` along ``split_dim`` into a list of tensors.

  Args:
    x: an mtf Tensor.
    split_dim: a Dimension of ``x`` (or its name).
    num_or_size_splits: a number of equal parts, or a list of sizes.
    name: op name.

  Returns:
    A list of Tensors whose ``split_dim`` (same name) has the piece's size.

  Raises:
    UnknownNameError, ShapeError: for a bad dim or sizes.
  """
  return SplitOperation(x, split_dim, num_or_size_splits, name=name).outputs


class StackOperation(_OneDimOperation):
  """Stacks ``xs`` along a new dim ``dim_name`` inserted at ``axis``.

  If the new dim is split, each processor stacks only the operands of its
  block, which it holds already: no communication.

  Attributes:
    dim_name, axis: the new dim and its position.
  """

  def __init__(self, xs, dim_name, axis, name=None):
    if not xs:
      raise ShapeError("stack needs at least one tensor")
    super().__init__(xs, name=name or "stack")
    base = xs[0].shape
    for x in xs:
      if x.shape != base:
        raise ShapeError(f"{self.name}: operands {xs[0].name} {base!r} and "
                         f"{x.name} {x.shape!r} must have the same shape")
    if dim_name in base:
      raise ShapeError(f"{self.name}: new dim {dim_name!r} is already a dim "
                       f"of the operands {base!r}; choose another name")
    n = base.ndims
    if isinstance(axis, builtins.bool) or not isinstance(axis, int) or not (
        -n - 1 <= axis <= n):
      raise ShapeError(f"{self.name}: axis {axis!r} is out of range for a "
                       f"result of {n + 1} dims")
    self.axis = axis % (n + 1)
    self.dim_name = dim_name
    dims = base.dims
    out = dims_lib.Shape(dims[:self.axis] + [dims_lib.Dimension(
        dim_name, len(xs))] + dims[self.axis:])
    self._outputs = [Tensor(self, out, xs[0].dtype)]

  def lower(self, lowering):
    impl = lowering.mesh_impl(self)
    a = self._mesh_axis(impl)
    out = self.outputs[0]
    k = impl.slice_shape(out)[self.axis]

    def kernel(pnum, *ts):
      c = 0 if a is None else impl.block_index(pnum, a)
      return tf.stack(ts[c * k:(c + 1) * k], self.axis)
    lowering.set_tensor_lowering(out, impl.slicewise_pnum(
        kernel, *[lowering.laid_out(x) for x in self.inputs],
        shape=out.shape, flops=0))

  def cost_params(self):
    return (self.axis,)

  def gradient(self, grad_ys):
    g = grad_ys[0]
    if g is None:
      return [None] * len(self.inputs)
    return list(unstack(g, self.outputs[0].shape[self.axis],
                        name=f"{self.name}_grad"))


def stack(xs, dim_name, axis=0, name=None):
  """Stacks equal-shaped tensors along a new dim of size ``len(xs)``.

  Args:
    xs: a list of mtf Tensors of one shape.
    dim_name: the name of the new dim.
    axis: its position in the result (negative counts from the end).
    name: op name.

  Raises:
    ShapeError: if the shapes differ, the name is taken or axis is invalid.
  """
  return StackOperation(list(xs), dim_name, axis, name=name).outputs[0]


class UnstackOperation(_OneDimOperation):
  """Cuts ``x`` along ``dim`` into ``dim.size`` tensors without that dim.

  Attributes:
    dim: the removed Dimension; axis: its position in ``x``.
  """

  def __init__(self, x, dim, name=None):
    super().__init__([x], name=name or "unstack")
    self.axis = _find_dim(self.name, x, dim)
    self.dim = x.shape[self.axis]
    self.dim_name = self.dim.name
    out = x.shape - [self.dim_name]
    self._outputs = [Tensor(self, out, x.dtype, index=i)
                     for i in range(self.dim.size)]

  def lower(self, lowering):
    impl = lowering.mesh_impl(self)
    a = impl.dim_axes(self.dim)
    laid = self._gathered(lowering, self.inputs[0], a)
    n = self.dim.size
    # Backends pass a single output's value bare.
    ys = impl.slicewise(
        lambda t: (tf.unstack(t, n, axis=self.axis) if n != 1
                   else tf.squeeze(t, self.axis)), laid,
        shape=[t.shape for t in self.outputs], flops=0)
    for t, y in zip(self.outputs, ys):
      lowering.set_tensor_lowering(t, y)

  def cost_params(self):
    return (self.axis,)

  def gradient(self, grad_ys):
    if all(g is None for g in grad_ys):
      return [None]
    return [stack(_zeros_for(grad_ys, self.outputs), self.dim_name,
                  self.axis, name=f"{self.name}_grad")]


def unstack(x, dim, name=None):
  """Splits ``x`` along ``dim`` into a list of ``dim.size`` tensors.

  Raises:
    UnknownNameError: if ``x`` has no such dim.
  """
  return UnstackOperation(x, dim, name=name).outputs


class SliceOperation(_OneDimOperation):
  """``x[begin:begin+size]`` along dim ``slice_dim_name``.

  Attributes:
    dim_name, begin, size: what was sliced (the gradient pads back).
    old_size: the dim's size in ``x``; axis: its position.
  """

  def __init__(self, x, begin, size, slice_dim_name, name=None):
    super().__init__([x], name=name or "slice")
    self.axis = _find_dim(self.name, x, slice_dim_name)
    d = x.shape[self.axis]
    _check_int(self.name, "begin", begin)
    _check_int(self.name, "size", size)
    if begin + size > d.size:
      raise ShapeError(f"{self.name}: slice [{begin}, {begin + size}) is out "
                       f"of range for dim {d} of {x.name}")
    self.dim_name, self.begin, self.size, self.old_size = (d.name, begin, size,
                                                          d.size)
    self._outputs = [Tensor(self, x.shape.resize_dimension(d.name, size),
                            x.dtype)]

  def lower(self, lowering):
    def fn(t):
      begin = [0] * len(t.shape)
      begin[self.axis] = self.begin
      size = list(t.shape)
      size[self.axis] = self.size
      return [tf.slice(t, begin, size)]
    self._lower_local(lowering, fn, self.inputs)

  def cost_params(self):
    return (self.axis, self.begin, self.size)

  def gradient(self, grad_ys):
    g = grad_ys[0]
    if g is None:
      return [None]
    after = self.old_size - self.begin - self.size
    if self.begin == 0 and after == 0:
      return [g]
    return [pad(g, [self.begin, after], self.dim_name,
                name=f"{self.name}_grad")]


def slice(x, begin, size, slice_dim_name, name=None):  # pylint: disable=redefined-builtin
  """The part ``[begin, begin + size)`` of ``x`` along ``slice_dim_name``.

  The result keeps the dim's name, with size ``size``.

  Raises:
    UnknownNameError: if ``x`` has no such dim.
    ShapeError: if the range is out of bounds.

  Example:
    >>> y = slice(x, 2, 4, "length")   # doctest: +SKIP
  """
  return SliceOperation(x, begin, size, slice_dim_name, name=name).outputs[0]


mtf_slice = slice


class PadOperation(_OneDimOperation):
  """Pads ``x`` along ``dim_name`` with ``paddings = [before, after]``.

  Attributes:
    dim_name, paddings, constant_values: what was padded (the gradient
    slices back); axis: the dim's position.
  """

  def __init__(self, x, paddings, dim_name, constant_values=0, name=None):
    super().__init__([x], name=name or "pad")
    self.axis = _find_dim(self.name, x, dim_name)
    d = x.shape[self.axis]
    paddings = tuple(paddings)
    if len(paddings) != 2:
      raise ShapeError(f"{self.name}: paddings must be [before, after], got "
                       f"{list(paddings)}")
    for p in paddings:
      _check_int(self.name, "each padding", p)
    self.dim_name, self.paddings = d.name, paddings
    self.constant_values = constant_values
    self._outputs = [Tensor(
        self, x.shape.resize_dimension(d.name, d.size + sum(paddings)),
        x.dtype)]

  def lower(self, lowering):
    def fn(t):
      pads = [[0, 0] for _ in t.shape]
      pads[self.axis] = list(self.paddings)
      return [tf.pad(t, pads, constant_values=tf.constant(
          self.constant_values, t.dtype))]
    self._lower_local(lowering, fn, self.inputs)

  def cost_params(self):
    return (self.axis, self.paddings, self.constant_values)

  def gradient(self, grad_ys):
    g = grad_ys[0]
    if g is None:
      return [None]
    size = self.inputs[0].shape.get_dim_by_name(self.dim_name).size
    if not any(self.paddings):
      return [g]
    return [slice(g, self.paddings[0], size, self.dim_name,
                  name=f"{self.name}_grad")]


def pad(x, paddings, dim_name, constant_values=0, name=None):
  """Pads ``x`` along ``dim_name`` with ``paddings[0]`` elements before and
  ``paddings[1]`` after, of value ``constant_values``.

  Raises:
    UnknownNameError: if ``x`` has no such dim.
    ShapeError: if the paddings are not two non-negative integers.
  """
  return PadOperation(x, paddings, dim_name, constant_values,
                      name=name).outputs[0]
