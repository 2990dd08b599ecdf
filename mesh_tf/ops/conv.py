"""Convolution over named spatial dims (1-d, 2-d and 3-d).

A convolution reads ``x[batch..., spatial..., in_channels]`` (any dim order)
and a filter ``[filter_spatial..., in_channels, out_channels]``.  Under a
layout:

* batch-like dims and ``out_channels`` split freely;
* a split ``in_channels`` leaves partial sums (a lazy SUM all-reduce);
* a split spatial dim (stride 1, "SAME"-size output) is a block of the
  image: each processor receives the ``(k-1)//2`` rows before its block and
  the ``k-1-(k-1)//2`` rows after it from its neighbours on that mesh axis
  (zeros past the image edge), then convolves locally with VALID padding.
  This is the halo exchange of large 3-D image models; its cost is two
  point-to-point receives per split spatial dim;
* filter spatial dims never split.

Pooling lives in :mod:`mesh_tf.ops.pool`.

Gradients: the input gradient of a stride-1 convolution is another
convolution (flipped filter, swapped channel dims, mirrored padding), with
its own halo exchange; the filter gradient uses TF's ``Conv*DBackpropFilter``
kernels on the halo-extended slices and sums over split batch and spatial
dims lazily.
"""

import itertools
import math

from mesh_tf.core import dims as dims_lib
from mesh_tf.core.errors import LayoutError, MtfError, ShapeError
from mesh_tf.graph import Operation, Tensor
from mesh_tf.lowering.lazy_tf import tf
from mesh_tf.lowering.mesh_impl import LazyAllreduceSum
from mesh_tf.ops.base import dim_name as _as_name
from mesh_tf.ops.base import permutation as _perm
from mesh_tf.ops.base import transpose_slice as _transpose

__all__ = ["ConvOperation", "ConvFilterGradOperation", "conv", "conv1d",
           "conv2d", "conv3d", "resolve_padding", "same_padding"]


def same_padding(k):
  """TF's "SAME" padding for a window of ``k`` at stride 1: (before, after)."""
  return ((k - 1) // 2, k - 1 - (k - 1) // 2)


def _halo(impl, laid, axis, mesh_axis, before, after):
  """Extends each slice along tensor ``axis`` with its neighbours' edges.

  Processor ``c`` on ``mesh_axis`` gets the last ``before`` rows of ``c-1``
  and the first ``after`` rows of ``c+1`` (zeros at the ends).
  """
  shape = list(laid.slice_shape)
  n = shape[axis]
  parts = []

  def take(begin, size):
    sl = list(shape)
    sl[axis] = size

    def fn(t):
      b = [0] * len(shape)
      b[axis] = begin
      return tf.slice(t, b, sl)
    return impl.slicewise(fn, laid, slice_shape=sl, flops=0)
  if before:
    parts.append(impl.shift_by_n_processors(take(n - before, before),
                                            mesh_axis, 1, wrap=False))
  parts.append(laid)
  if after:
    parts.append(impl.shift_by_n_processors(take(0, after), mesh_axis, -1,
                                            wrap=False))
  if len(parts) == 1:
    return laid
  out = list(shape)
  out[axis] = n + before + after
  return impl.slicewise(lambda *ts: tf.concat(list(ts), axis), *parts,
                        slice_shape=out, flops=0)


class _ConvGeometry:
  """Names and paddings shared by the convolution ops."""

  def __init__(self, x_shape, spatial, filter_spatial, pads, strides):
    self.spatial = [x_shape.get_dim_by_name(n) for n in spatial]
    self.filter_spatial = list(filter_spatial)
    self.pads = [tuple(p) for p in pads]
    self.strides = list(strides)
    self.ksizes = [d.size for d in self.filter_spatial]

  def out_spatial(self):
    out = []
    for d, k, (b, a), s in zip(self.spatial, self.ksizes, self.pads,
                               self.strides):
      size = (d.size + b + a - k) // s + 1
      if size <= 0:
        raise ShapeError(f"convolution: spatial dim {d} is smaller than its "
                         f"window {k} (padding {(b, a)})")
      out.append(dims_lib.Dimension(d.name, size))
    return out

  def splittable(self, i):
    """A spatial dim splits only when stride 1 keeps its size."""
    k, (b, a), s = self.ksizes[i], self.pads[i], self.strides[i]
    return s == 1 and b + a == k - 1

  def unsplittable(self):
    names = {d.name for d in self.filter_spatial}
    names |= {d.name for i, d in enumerate(self.spatial)
              if not self.splittable(i)}
    return frozenset(names)

  def extended_shapes(self, x_shape):
    """The copy of an input slice that :meth:`extend` makes, as shapes
    whose slice bytes add up to its bytes under every layout.

    Along each spatial dim with padding ``b + a`` the copy holds ``n / k +
    b + a`` rows, whether the dim is split over ``k`` devices (the halo
    exchange's ``concat``) or not (``k = 1``, the ``Pad``): TF pads in a
    kernel of its own, as grappler's light passes leave it, not inside
    the convolution.  The product over the dims expands into one term per
    subset of them: the subset's dims stay (split as the layout says) and
    each other dim is replaced by its padding, folded into the size of the
    term's first dim.
    """
    padded = [(d.name, b + a) for d, (b, a) in zip(self.spatial, self.pads)
              if b + a]
    if not padded:
      return ()
    out = []
    for keep in itertools.product((True, False), repeat=len(padded)):
      dropped = [(n, p) for (n, p), k in zip(padded, keep) if not k]
      gone = {n for n, _ in dropped}
      dims = [d for d in x_shape if d.name not in gone]
      factor = math.prod(p for _, p in dropped)
      dims[0] = dims_lib.Dimension(dims[0].name, dims[0].size * factor)
      out.append(dims_lib.Shape(dims))
    return tuple(out)

  def extend(self, impl, op, laid, x_shape):
    """Halo-exchanges split spatial dims and zero-pads the others.

    Returns the extended LaidOutTensor (spatial dims in ``x_shape`` order).
    """
    local_pads = [(0, 0)] * x_shape.ndims
    for i, d in enumerate(self.spatial):
      ax = x_shape.index(d.name)
      b, a = self.pads[i]
      mesh_axis = impl.dim_axes(d)   # one axis or several, major first
      if mesh_axis is not None:
        block = laid.slice_shape[ax]
        if max(b, a) > block:
          where = " * ".join(str(impl.shape[m]) for m in mesh_axis)
          raise LayoutError(
              f"operation {op.name}: splitting spatial dim {d} over mesh "
              f"axis {where} gives blocks of {block}, "
              f"smaller than the halo {max(b, a)} of its window "
              f"{self.ksizes[i]}; split it over fewer processors")
        laid = _halo(impl, laid, ax, mesh_axis, b, a)
      else:
        local_pads[ax] = (b, a)
    if any(p != (0, 0) for p in local_pads):
      shape = [s + b + a for s, (b, a) in zip(laid.slice_shape, local_pads)]
      laid = impl.slicewise(lambda t: tf.pad(t, local_pads), laid,
                            slice_shape=shape, flops=0)
    return laid


class ConvOperation(Operation):
  """``y = conv(x, filter)`` over ``spatial_dims``, contracting
  ``contract_dim`` and producing ``produce_dim``.

  With ``flip`` the filter is mirrored spatially (the input gradient of a
  convolution is such a convolution).  ``pads`` gives (before, after) zero
  padding per spatial dim.
  """

  def __init__(self, x, conv_filter, spatial_dims, filter_spatial_dims,
               contract_dim, produce_dim, strides, pads, flip=False,
               name=None):
    super().__init__([x, conv_filter], name=name or "conv")
    self.spatial_names = [_as_name(d) for d in spatial_dims]
    self.filter_spatial_names = [_as_name(d) for d in filter_spatial_dims]
    self.contract_name = _as_name(contract_dim)
    self.produce_name = _as_name(produce_dim)
    self.flip = flip
    fs = conv_filter.shape
    want = set(self.filter_spatial_names) | {self.contract_name,
                                             self.produce_name}
    if set(fs.dimension_names) != want or fs.ndims != len(want):
      raise ShapeError(
          f"{self.name}: filter {conv_filter.name} {fs!r} must have exactly "
          f"the dims {sorted(want)}")
    for n in self.spatial_names + [self.contract_name]:
      if n not in x.shape:
        raise ShapeError(f"{self.name}: input {x.name} {x.shape!r} has no "
                         f"dim {n!r}")
    if x.shape.get_dim_by_name(self.contract_name) != fs.get_dim_by_name(
        self.contract_name):
      raise ShapeError(
          f"{self.name}: channel dim {x.shape.get_dim_by_name(self.contract_name)}"
          f" of {x.name} does not match the filter's "
          f"{fs.get_dim_by_name(self.contract_name)}")
    if self.produce_name in x.shape:
      raise ShapeError(f"{self.name}: output channel dim {self.produce_name!r}"
                       f" is already a dim of {x.name} {x.shape!r}")
    self.geometry = _ConvGeometry(
        x.shape, self.spatial_names,
        [fs.get_dim_by_name(n) for n in self.filter_spatial_names],
        pads, strides)
    out_sp = {d.name: d for d in self.geometry.out_spatial()}
    produce = fs.get_dim_by_name(self.produce_name)
    out_dims = []
    for d in x.shape:
      if d.name in out_sp:
        out_dims.append(out_sp[d.name])
      elif d.name == self.contract_name:
        out_dims.append(produce)
      else:
        out_dims.append(d)
    self._outputs = [Tensor(self, dims_lib.Shape(out_dims), x.dtype)]

  @property
  def unsplittable_dims(self):
    """The filter's and the input's spatial dims, as Mesh TF defines it."""
    return self.geometry.unsplittable() | frozenset(self.spatial_names)

  @property
  def lowering_unsplittable_dims(self):
    """The filter's spatial dims: split spatial dims exchange halos."""
    return self.geometry.unsplittable()

  def kernel_copy_shapes(self, known=None):  # pylint: disable=unused-argument
    """The input's zero-padded, halo-extended copy, live while the kernel
    runs (:meth:`_ConvGeometry.extended_shapes`); ``known``: as an einsum's."""
    return self.geometry.extended_shapes(self.inputs[0].shape)

  def cost_params(self):
    g = self.geometry
    return (tuple(self.spatial_names), tuple(self.filter_spatial_names),
            self.contract_name, self.produce_name, self.flip,
            tuple(g.pads), tuple(g.strides))

  def _batch_names(self, shape):
    skip = set(self.spatial_names) | {self.contract_name, self.produce_name}
    return [n for n in shape.dimension_names if n not in skip]

  def lower(self, lowering):
    impl = lowering.mesh_impl(self)
    x, w = self.inputs
    out = self.outputs[0]
    g = self.geometry
    laid_x = g.extend(impl, self, lowering.laid_out(x), x.shape)
    laid_w = lowering.laid_out(w)
    batch = self._batch_names(x.shape)
    x_order = batch + self.spatial_names + [self.contract_name]
    x_perm = _perm(x.shape.dimension_names, x_order)
    w_order = self.filter_spatial_names + [self.contract_name,
                                           self.produce_name]
    w_perm = _perm(w.shape.dimension_names, w_order)
    y_names = batch + self.spatial_names + [self.produce_name]
    y_perm = _perm(y_names, out.shape.dimension_names)
    out_slice = impl.slice_shape(out)
    nsp = len(self.spatial_names)
    flip, strides = self.flip, g.strides

    def kernel(xs, ws):
      xs = _transpose(xs, x_perm)
      ws = _transpose(ws, w_perm)
      if flip:
        ws = tf.reverse(ws, list(range(nsp)))
      bshape = [int(s) for s in xs.shape[:len(batch)]]
      rest = [int(s) for s in xs.shape[len(batch):]]
      xs = tf.reshape(xs, [math.prod(bshape)] + rest)
      y = tf.nn.convolution(xs, ws, strides=strides, padding="VALID")
      y = tf.reshape(y, bshape + [int(s) for s in y.shape[1:]])
      return _transpose(y, y_perm)
    w_slice = laid_w.slice_shape
    flops = 2 * math.prod(out_slice) * math.prod(
        w_slice[w.shape.index(n)] for n in self.filter_spatial_names) * (
            w_slice[w.shape.index(self.contract_name)])
    y = impl.slicewise(kernel, laid_x, laid_w, slice_shape=out_slice,
                       dtype=out.dtype, flops=flops, matmul="conv",
                       conv=_conv_dims(out, out_slice, self.spatial_names,
                                       w, w_slice, self.contract_name,
                                       self.produce_name))
    axes = impl.split_axes([x.shape.get_dim_by_name(self.contract_name)])
    if axes:
      lowering.set_tensor_lowering(out, LazyAllreduceSum(impl, y,
                                                         list(axes)))
    else:
      lowering.set_tensor_lowering(out, y)

  def gradient(self, grad_ys):
    (dy,) = grad_ys
    if dy is None:
      return [None, None]
    g = self.geometry
    if any(s != 1 for s in g.strides):
      raise MtfError(f"{self.name}: gradients of strided convolutions are "
                     f"not supported (strides {g.strides}); use stride 1 and "
                     "pooling to downsample")
    if self.flip:
      raise MtfError(f"{self.name}: second-order gradients of convolutions "
                     "are not supported")
    x, w = self.inputs
    mirrored = [(k - 1 - b, k - 1 - a) for k, (b, a) in zip(g.ksizes,
                                                              g.pads)]
    dx = ConvOperation(dy, w, self.spatial_names, self.filter_spatial_names,
                       self.produce_name, self.contract_name,
                       [1] * len(g.strides), mirrored, flip=True,
                       name=f"{self.name}/grad_input").outputs[0]
    dw = ConvFilterGradOperation(self, dy).outputs[0]
    return [dx, dw]


class ConvFilterGradOperation(Operation):
  """The gradient of a stride-1 :class:`ConvOperation` w.r.t. its filter."""

  no_gradient_reason = "second derivatives of convolutions are not built"

  def __init__(self, conv_op, dy, name=None):
    x, w = conv_op.inputs
    super().__init__([x, dy], name=name or f"{conv_op.name}/grad_filter")
    self.conv_op = conv_op
    self._outputs = [Tensor(self, w.shape, w.dtype)]

  @property
  def unsplittable_dims(self):
    return self.conv_op.geometry.unsplittable()

  def kernel_copy_shapes(self, known=None):  # pylint: disable=unused-argument
    """The input's zero-padded, halo-extended copy, live while the kernel
    runs (:meth:`_ConvGeometry.extended_shapes`); ``known``: as an einsum's."""
    return self.conv_op.geometry.extended_shapes(self.inputs[0].shape)

  def cost_params(self):
    return (self.conv_op.signature,)

  def lower(self, lowering):
    impl = lowering.mesh_impl(self)
    c = self.conv_op
    g = c.geometry
    x, dy = self.inputs
    out = self.outputs[0]
    laid_x = g.extend(impl, self, lowering.laid_out(x), x.shape)
    laid_dy = lowering.laid_out(dy)
    batch = c._batch_names(x.shape)
    nsp = len(c.spatial_names)
    x_perm = _perm(x.shape.dimension_names,
                   batch + c.spatial_names + [c.contract_name])
    dy_perm = _perm(dy.shape.dimension_names,
                    batch + c.spatial_names + [c.produce_name])
    w_names = c.filter_spatial_names + [c.contract_name, c.produce_name]
    w_perm = _perm(w_names, out.shape.dimension_names)
    out_slice = impl.slice_shape(out)
    w_local = [out_slice[out.shape.index(n)] for n in w_names]

    def kernel(xs, dys):
      xs = _transpose(xs, x_perm)
      dys = _transpose(dys, dy_perm)
      nb = len(batch)
      n = math.prod(int(s) for s in xs.shape[:nb])
      xs = tf.reshape(xs, [n] + [int(s) for s in xs.shape[nb:]])
      dys = tf.reshape(dys, [n] + [int(s) for s in dys.shape[nb:]])
      sizes = list(w_local)
      if nsp == 1:  # TF has no 1-d kernel: use 2-d with height 1.
        xs, dys = xs[:, None], dys[:, None]
        sizes = [1] + sizes
      fn = (tf.raw_ops.Conv3DBackpropFilterV2 if nsp == 3
            else tf.raw_ops.Conv2DBackpropFilter)
      dw = fn(input=xs, filter_sizes=tf.constant(sizes, tf.int32),
              out_backprop=dys, strides=[1] * len(sizes),
              padding="VALID")
      if nsp == 1:
        dw = dw[0]
      return _transpose(dw, w_perm)
    flops = 2 * math.prod(laid_dy.slice_shape) * math.prod(
        w_local[:nsp]) * w_local[nsp]
    y = impl.slicewise(kernel, laid_x, laid_dy, slice_shape=out_slice,
                       dtype=out.dtype, flops=flops, matmul="conv_filter",
                       conv=_conv_dims(dy, laid_dy.slice_shape,
                                       c.spatial_names, out, out_slice,
                                       c.contract_name, c.produce_name))
    axes = set(impl.split_axes([x.shape.get_dim_by_name(n)
                                for n in batch + c.spatial_names]))
    if axes:
      lowering.set_tensor_lowering(out, LazyAllreduceSum(impl, y, axes))
    else:
      lowering.set_tensor_lowering(out, y)


def _conv_dims(y, y_slice, spatial, w, w_slice, contract, produce):
  """``(out_width, in_channels, out_channels)`` of a convolution kernel on
  one device (:class:`mesh_tf.lowering.trace.ComputeRecord`'s ``conv``):
  the slice of the innermost spatial dim of its output ``y`` (the kernels
  see ``[batch, spatial..., channels]``) and the filter's channel slices."""
  return (int(y_slice[y.shape.index(spatial[-1])]),
          int(w_slice[w.shape.index(contract)]),
          int(w_slice[w.shape.index(produce)]))


def _filter_spatial_names(conv_filter, spatial, in_dim, out_dim):
  names = [n for n in conv_filter.shape.dimension_names
           if n not in (in_dim, out_dim)]
  if len(names) != len(spatial):
    raise ShapeError(
        f"convolution: filter {conv_filter.name} {conv_filter.shape!r} needs "
        f"{len(spatial)} spatial dims besides {in_dim!r} and {out_dim!r}")
  return names


def _pads(padding, ksizes, what):
  if isinstance(padding, str):
    p = padding.upper()
    if p == "SAME":
      return [same_padding(k) for k in ksizes]
    if p == "VALID":
      return [(0, 0)] * len(ksizes)
    raise ShapeError(f"{what}: padding {padding!r} must be 'SAME', 'VALID' "
                     "or a list of (before, after) pairs")
  pads = [tuple(p) for p in padding]
  if len(pads) != len(ksizes):
    raise ShapeError(f"{what}: {len(pads)} paddings for {len(ksizes)} "
                     "spatial dims")
  return pads


def resolve_padding(x, spatial, ksizes, strides, padding):
  """(before, after) zero padding per spatial dim of ``x`` for TF's
  ``padding`` ("SAME", "VALID" or explicit pairs) at ``strides``."""
  if isinstance(padding, str) and padding.upper() == "SAME" and any(
      s != 1 for s in strides):
    # TF's SAME for stride s: output ceil(n/s), total pad max(k-s, 0)-ish.
    pads = []
    for n, k, s in zip(spatial, ksizes, strides):
      size = x.shape.get_dim_by_name(n).size
      total = max((math.ceil(size / s) - 1) * s + k - size, 0)
      pads.append((total // 2, total - total // 2))
    return pads
  return _pads(padding, ksizes, "convolution")


def conv(x, conv_filter, spatial_dims, in_dim=None, out_dim=None,
         strides=None, padding="SAME", name=None):
  """N-d convolution (cross-correlation, as in TF) over named spatial dims.

  Args:
    x: input Tensor with ``spatial_dims`` and ``in_dim`` (any order; every
      other dim is batch-like).
    conv_filter: Tensor ``[filter spatial dims..., in_dim, out_dim]``; its
      spatial dims pair with ``spatial_dims`` in the filter's dim order.
    spatial_dims: names (or Dimensions) of the spatial dims of ``x``.
    in_dim, out_dim: the filter's channel dims (default: its last two).
    strides: per spatial dim (default 1).
    padding: "SAME", "VALID" or ``[(before, after), ...]``.

  Returns:
    ``x``'s shape with ``in_dim`` replaced by ``out_dim`` and spatial dims
    resized (same names).

  Raises:
    ShapeError: for inconsistent shapes.
  """
  spatial = [_as_name(d) for d in spatial_dims]
  names = conv_filter.shape.dimension_names
  in_dim = _as_name(in_dim) if in_dim is not None else names[-2]
  out_dim = _as_name(out_dim) if out_dim is not None else names[-1]
  fsp = _filter_spatial_names(conv_filter, spatial, in_dim, out_dim)
  ks = [conv_filter.shape.get_dim_by_name(n).size for n in fsp]
  strides = list(strides) if strides is not None else [1] * len(spatial)
  if isinstance(strides, int):
    strides = [strides] * len(spatial)
  if len(strides) != len(spatial):
    raise ShapeError(f"convolution: {len(strides)} strides for "
                     f"{len(spatial)} spatial dims")
  pads = resolve_padding(x, spatial, ks, strides, padding)
  return ConvOperation(x, conv_filter, spatial, fsp, in_dim, out_dim, strides,
                       pads, name=name).outputs[0]


def _convnd(n):
  def op(x, conv_filter, strides=None, padding="SAME", spatial_dims=None,
         name=None):
    if spatial_dims is None:
      spatial_dims = x.shape.dimension_names[-1 - n:-1]
    if isinstance(strides, int):
      strides = [strides] * n
    if strides is not None and len(strides) == n + 2:  # NHWC-style list
      strides = list(strides)[1:-1]
    return conv(x, conv_filter, spatial_dims, strides=strides,
                padding=padding, name=name or f"conv{n}d")
  op.__name__ = op.__qualname__ = f"conv{n}d"
  op.__doc__ = (f"{n}-d convolution of ``x [batch..., spatial x{n}, in]`` "
                f"with ``conv_filter [{n} filter dims, in, out]``; the "
                f"spatial dims default to the {n} dims before ``x``'s last.")
  return op


conv1d, conv2d, conv3d = _convnd(1), _convnd(2), _convnd(3)
