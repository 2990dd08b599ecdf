"""Shifts along a named dim, and halo exchange built on them.

``shift(x, offset, dim, wrap)`` moves elements ``offset`` places along
``dim`` (right for positive offsets), rolling them around when ``wrap`` or
filling with zeros otherwise.  When ``dim`` is split over a mesh axis into
blocks of ``k`` elements, write ``offset = q*k + r`` with ``0 <= r < k``:
element ``j`` of processor ``c``'s output block comes from processor
``c - q`` (its element ``j - r``) for ``j >= r``, and from processor
``c - q - 1`` (its element ``k + j - r``) for ``j < r``.  So every processor
sends its first ``k - r`` elements ``q`` processors on, and its last ``r``
elements ``q + 1`` processors on: at most two point-to-point receives of
``k`` elements in all, whatever the offset.
"""

import builtins

from mesh_tf.core import dims as dims_lib
from mesh_tf.core.errors import ShapeError, UnknownNameError
from mesh_tf.graph import Operation, Tensor
from mesh_tf.lowering.lazy_tf import tf
from mesh_tf.ops import slicing

__all__ = ["shift", "halo_exchange", "ShiftOperation"]


def _dim_of(what, x, dim):
  """The Dimension of ``x`` given by a name or a Dimension."""
  name = dim if isinstance(dim, str) else dims_lib.convert_to_dimension(
      dim).name
  if name not in x.shape:
    raise UnknownNameError(f"{what}: {x.name} {x.shape!r} has no dim named "
                           f"{name!r}; use one of {x.shape.dimension_names}")
  d = x.shape.get_dim_by_name(name)
  if not isinstance(dim, str) and dims_lib.convert_to_dimension(dim) != d:
    raise ShapeError(f"{what}: dim {dims_lib.convert_to_dimension(dim)} does "
                     f"not match dim {d} of {x.name} {x.shape!r}")
  return d


def _local_shift(t, offset, axis, size, wrap):
  """Shifts a TF tensor whose ``axis`` (of ``size``) is whole."""
  if wrap:
    return tf.roll(t, offset, axis) if offset % max(size, 1) else t
  if abs(offset) >= size:
    return tf.zeros_like(t)
  if offset == 0:
    return t
  keep = size - abs(offset)
  pad_shape = list(t.shape)
  pad_shape[axis] = abs(offset)
  zeros = tf.zeros(pad_shape, t.dtype)
  begin = [0] * len(t.shape)
  if offset < 0:
    begin[axis] = -offset
  size_ = list(t.shape)
  size_[axis] = keep
  kept = tf.slice(t, begin, size_)
  return tf.concat([zeros, kept] if offset > 0 else [kept, zeros], axis)


class ShiftOperation(Operation):
  """``y[..., i, ...] = x[..., i - offset, ...]`` along ``dim``.

  Attributes:
    offset, dim, wrap: as given (the gradient shifts by ``-offset``).
    axis: the dim's position.
  """

  def __init__(self, x, offset, dim, wrap, name=None):
    super().__init__([x], name=name or "shift")
    if isinstance(offset, builtins.bool) or not isinstance(offset, int):
      raise ShapeError(f"{self.name}: offset must be an integer, got "
                       f"{offset!r}")
    self.dim = _dim_of(self.name, x, dim)
    self.axis = x.shape.index(self.dim.name)
    self.offset = offset
    self.wrap = builtins.bool(wrap)
    self._outputs = [Tensor(self, x.shape, x.dtype)]

  @property
  def unsplittable_dims(self):
    """None: a split ``dim`` exchanges block edges with neighbours."""
    return frozenset()

  def lower(self, lowering):
    impl = lowering.mesh_impl(self)
    x, out = self.inputs[0], self.outputs[0]
    laid = lowering.laid_out(x)
    n, axis, wrap = self.dim.size, self.axis, self.wrap
    offset = self.offset % n if (wrap and n) else self.offset
    # One mesh axis or several (major first): the dim's blocks in order.
    a = impl.dim_axes(self.dim)
    if a is None or (not wrap and abs(offset) >= n):
      y = impl.slicewise(lambda t: _local_shift(t, offset, axis, n, wrap),
                         laid, shape=out.shape, flops=0)
      lowering.set_tensor_lowering(out, y)
      return
    k = laid.slice_shape[axis]
    q, r = divmod(offset, k)
    if r == 0:
      lowering.set_tensor_lowering(
          out, impl.shift_by_n_processors(laid, a, q, wrap))
      return
    head_shape = list(laid.slice_shape)
    head_shape[axis] = k - r
    tail_shape = list(laid.slice_shape)
    tail_shape[axis] = r
    head, tail = impl.slicewise(
        lambda t: tf.split(t, [k - r, r], axis), laid,
        slice_shape=[tuple(head_shape), tuple(tail_shape)], flops=0)
    head = impl.shift_by_n_processors(head, a, q, wrap)
    tail = impl.shift_by_n_processors(tail, a, q + 1, wrap)
    y = impl.slicewise(lambda t_, h: tf.concat([t_, h], axis), tail, head,
                       shape=out.shape, flops=0)
    lowering.set_tensor_lowering(out, y)

  def cost_params(self):
    return (self.axis, self.offset, self.wrap)

  def gradient(self, grad_ys):
    g = grad_ys[0]
    return [None if g is None else shift(
        g, -self.offset, self.dim, self.wrap, name=f"{self.name}_grad")]


def shift(x, offset, dim, wrap, name=None):
  """Shifts ``x`` by ``offset`` along ``dim`` (right if positive).

  Args:
    x: an mtf Tensor.
    offset: an integer; negative shifts left.
    dim: a Dimension of ``x`` (or its name).
    wrap: True to roll elements around, False to fill with zeros.
    name: op name.

  Works when ``dim`` is split across the mesh: each processor receives the
  boundary elements it needs from its neighbours (see the module docstring).

  Raises:
    UnknownNameError: if ``x`` has no such dim.
    ShapeError: if ``offset`` is not an integer.

  Example:
    >>> prev = shift(x, 1, length, wrap=False)   # doctest: +SKIP
  """
  return ShiftOperation(x, offset, dim, wrap, name=name).outputs[0]


def halo_exchange(x, blocks_dim, block_size_dim, halo_size, wrap=False):
  """Extends each block with ``halo_size`` elements of its neighbours.

  ``x`` holds a sequence cut into blocks: ``blocks_dim`` counts the blocks,
  ``block_size_dim`` runs within one.  The result's ``block_size_dim`` grows
  by ``2 * halo_size``: each block gets the last ``halo_size`` elements
  before it and the first ``halo_size`` after it (zeros past the ends,
  unless ``wrap``).  Halos may span several blocks.  Built from
  :func:`shift`, :func:`~mesh_tf.ops.slicing.slice` and
  :func:`~mesh_tf.ops.slicing.concat`, so ``blocks_dim`` may be split.

  Raises:
    UnknownNameError: if a dim is not in ``x``.
    ShapeError: if the two dims are the same or ``halo_size`` is negative.

  Example:
    >>> y = halo_exchange(x, h_blocks, h_block_size, 1)   # doctest: +SKIP
  """
  blocks = _dim_of("halo_exchange", x, blocks_dim)
  within = _dim_of("halo_exchange", x, block_size_dim)
  if blocks.name == within.name:
    raise ShapeError(f"halo_exchange: blocks_dim and block_size_dim are both "
                     f"{blocks}; pass two different dims of {x.name}")
  if (isinstance(halo_size, builtins.bool) or not isinstance(halo_size, int)
      or halo_size < 0):
    raise ShapeError(f"halo_exchange: halo_size must be an integer >= 0, got "
                     f"{halo_size!r}")
  if halo_size == 0:
    return x
  b = within.size
  whole, part = divmod(halo_size, b)
  before = [shift(x, t, blocks, wrap) for t in builtins.range(whole, 0, -1)]
  after = [shift(x, -t, blocks, wrap) for t in builtins.range(1, whole + 1)]
  if part:
    last = slicing.slice(x, b - part, part, within.name)
    first = slicing.slice(x, 0, part, within.name)
    before.insert(0, shift(last, whole + 1, blocks, wrap))
    after.append(shift(first, -(whole + 1), blocks, wrap))
  return slicing.concat(before + [x] + after, within.name)
