"""Mesh TensorFlow's convolution op classes, conv backprops and transposed
convolutions, in its positional convention.

The original's conv ops read tensors laid out as
``[batch..., spatial x n, channels]`` and filters as
``[filter spatial x n, in, out]`` (``[..., out, in]`` for transposed
convolutions), with TF's "SAME"/"VALID" padding and NHWC-style strides
``[1, s_1, ..., s_n, 1]``.  Under a layout, batch and channel dims split
(a split contracted channel leaves a lazy SUM all-reduce, a split batch dim
of a filter gradient too); spatial and filter-spatial dims never split here,
as in the original.  mesh-tf's own :func:`~mesh_tf.ops.conv.conv` splits
spatial dims of stride-1 convolutions with a halo exchange;
:class:`Conv2dOperation` and :class:`Conv3dOperation` are that op with the
original's constructor.

Each TF kernel (``Conv*DBackpropInput``, ``Conv*DBackpropFilter``,
``Conv*D``) runs on each processor's slices, with the batch dims flattened.
"""

import math

from mesh_tf.core import dims as dims_lib
from mesh_tf.core.errors import MtfError, ShapeError
from mesh_tf.graph import Operation, Tensor
from mesh_tf.lowering.laid_out import LazyAllreduceSum
from mesh_tf.lowering.lazy_tf import tf
from mesh_tf.ops import conv as conv_ops

__all__ = ["Conv2dOperation", "Conv3dOperation",
           "Conv2or3dBackpropInputOperation",
           "Conv2or3dBackpropFilterOperation", "Conv2dTransposeOperation",
           "Conv3dTransposeOperation", "conv2d_backprop_filter",
           "conv2d_backprop_input", "conv2d_transpose",
           "conv2d_transpose_backprop_filter",
           "conv2d_transpose_backprop_input", "conv3d_backprop_filter",
           "conv3d_backprop_input", "conv3d_transpose",
           "conv3d_transpose_backprop_filter",
           "conv3d_transpose_backprop_input"]


def _rank(n, what):
  if n not in (2, 3):
    raise MtfError(f"{what}: conv_dimension must be 2 or 3, got {n!r}")
  return n


def _strides(strides, n, what):
  """Per-spatial-dim strides from an int, n values or NHWC-style n + 2."""
  if strides is None:
    return [1] * n
  if isinstance(strides, int):
    return [strides] * n
  strides = [int(s) for s in strides]
  if len(strides) == n + 2:
    strides = strides[1:-1]
  if len(strides) != n or any(s < 1 for s in strides):
    raise ShapeError(f"{what}: strides {strides} must be {n} positive "
                     f"values (or [1, s_1..s_{n}, 1])")
  return strides


def _padding(padding, what):
  p = str(padding).upper()
  if p not in ("SAME", "VALID"):
    raise ShapeError(f"{what}: padding {padding!r} must be 'SAME' or "
                     "'VALID'")
  return p


def _forward_size(size, k, s, padding):
  """TF's output size of a convolution of ``size`` by window ``k``."""
  if padding == "SAME":
    return -(-size // s)
  return -(-(size - k + 1) // s)


def _split_shape(shape, n, what, name):
  """(batch dims, spatial dims, channel dim) of ``[batch..., sp x n, c]``."""
  if shape.ndims < n + 1:
    raise ShapeError(f"{what}: {name} {shape!r} needs at least {n + 1} dims "
                     f"(batch..., {n} spatial, channels)")
  dims = shape.dims
  return dims[:-(n + 1)], dims[-(n + 1):-1], dims[-1]


def _flatten(t, n_batch):
  """Reshapes a TF slice to ``[prod(batch), rest...]``."""
  shape = [int(s) for s in t.shape]
  return tf.reshape(t, [math.prod(shape[:n_batch])] + shape[n_batch:])


def _tf_strides(strides):
  return [1] + list(strides) + [1]


class _Conv2or3dKernelOp(Operation):
  """Shared checks and lowering of the TF-kernel conv ops."""

  def _setup(self, n, strides, padding, spatial, filter_shape):
    self._n = n
    self._strides = _strides(strides, n, self.name)
    self._padding = _padding(padding, self.name)
    self._spatial = [d.name for d in spatial]
    self._filter_spatial = [d.name for d in filter_shape.dims[:n]]

  @property
  def unsplittable_dims(self):
    """None, as Mesh TF defines it."""
    return frozenset()

  @property
  def lowering_unsplittable_dims(self):
    return frozenset(self._spatial + self._filter_spatial)

  def cost_params(self):
    return (self._n, tuple(self._strides), self._padding)

  def _finish(self, lowering, laid, contracted):
    """Leaves a lazy SUM all-reduce over the mesh axes of ``contracted``."""
    impl = lowering.mesh_impl(self)
    axes = list(impl.split_axes(contracted))
    out = self.outputs[0]
    lowering.set_tensor_lowering(
        out, LazyAllreduceSum(impl, laid, axes) if axes else laid)


class _Conv2or3dBackpropOp(_Conv2or3dKernelOp):
  """What both backprop ops check: the filter's rank, and its (in, out)
  channels as the forward op saw them (swapped when it was transposed)."""

  def _filter_channels(self, n, filter_shape, what, is_transpose):
    self._is_transpose = bool(is_transpose)
    if filter_shape.ndims != n + 2:
      raise ShapeError(f"{self.name}: {what} {filter_shape!r} needs "
                       f"{n} spatial dims and two channel dims")
    f_in, f_out = filter_shape.dims[n:]
    return (f_out, f_in) if is_transpose else (f_in, f_out)

  def cost_params(self):
    return super().cost_params() + (self._is_transpose,)


class Conv2or3dBackpropInputOperation(_Conv2or3dBackpropOp):
  """The input gradient of a 2-d/3-d convolution (Mesh TF's class, like
  ``tf.nn.conv2d_backprop_input``); with ``is_transpose``, the input
  gradient of a transposed convolution, which is a convolution of ``dy``.

  Args:
    conv_dimension: 2 or 3.
    is_transpose: whether the forward op was a transposed convolution.
    input_shape: the Shape of the forward input (the result's shape).
    conv_filter: the filter, ``[spatial x n, in, out]`` (``[..., out, in]``
      when ``is_transpose``).
    dy: the gradient of the forward output.
    strides, padding: the forward op's.
  """

  no_gradient_reason = ("second derivatives of convolutions are not built "
                        "(nor were they in Mesh TensorFlow)")

  def __init__(self, conv_dimension, is_transpose, input_shape, conv_filter,
               dy, strides, padding, name=None):
    n = _rank(conv_dimension, "Conv2or3dBackpropInputOperation")
    trans = "_trans" if is_transpose else ""
    super().__init__([dy, conv_filter],
                     name=name or f"conv{n}d{trans}_backprop")
    input_shape = dims_lib.convert_to_shape(input_shape)
    batch, spatial, channel = _split_shape(input_shape, n, self.name,
                                           "input_shape")
    self._setup(n, strides, padding, spatial, conv_filter.shape)
    f_in, f_out = self._filter_channels(n, conv_filter.shape, "filter",
                                        is_transpose)
    dy_batch, dy_spatial, dy_channel = _split_shape(dy.shape, n, self.name,
                                                    "dy")
    if channel != f_in or dy_channel != f_out or [
        d.name for d in dy_spatial] != self._spatial or dy_batch != batch:
      raise ShapeError(
          f"{self.name}: input_shape {input_shape!r}, filter "
          f"{conv_filter.shape!r} and dy {dy.shape!r} do not fit: the "
          f"input's channels must be the filter's {f_in}, dy's its {f_out}, "
          "and dy's other dims the input's names in the same order")
    self._outputs = [Tensor(self, input_shape, dy.dtype)]

  def lower(self, lowering):
    impl = lowering.mesh_impl(self)
    dy, w = self.inputs
    out = self.outputs[0]
    n, strides, padding = self._n, _tf_strides(self._strides), self._padding
    nb = dy.shape.ndims - n - 1
    out_slice = impl.slice_shape(out)
    sizes = [math.prod(out_slice[:nb])] + list(out_slice[nb:])
    transpose = self._is_transpose

    def kernel(dys, ws):
      flat = _flatten(dys, nb)
      if transpose:
        dx = tf.nn.convolution(flat, ws, strides=strides[1:-1],
                               padding=padding)
      elif n == 2:
        dx = tf.raw_ops.Conv2DBackpropInput(
            input_sizes=tf.constant(sizes, tf.int32), filter=ws,
            out_backprop=flat, strides=strides, padding=padding)
      else:
        dx = tf.raw_ops.Conv3DBackpropInputV2(
            input_sizes=tf.constant(sizes, tf.int32), filter=ws,
            out_backprop=flat, strides=strides, padding=padding)
      return tf.reshape(dx, out_slice)
    laid_w = lowering.laid_out(w)
    flops = 2 * math.prod(impl.slice_shape(dy)) * math.prod(
        laid_w.slice_shape[:n]) * out_slice[-1]
    laid = impl.slicewise(kernel, lowering.laid_out(dy), laid_w,
                          slice_shape=out_slice, dtype=out.dtype,
                          flops=flops, matmul=True)
    self._finish(lowering, laid, [dy.shape.dims[-1]])


class Conv2or3dBackpropFilterOperation(_Conv2or3dBackpropOp):
  """The filter gradient of a 2-d/3-d convolution (Mesh TF's class, like
  ``tf.nn.conv2d_backprop_filter``), or of a transposed one
  (``is_transpose``); summed over the batch dims (lazily where split).

  Args:
    conv_dimension: 2 or 3.
    is_transpose: whether the forward op was a transposed convolution.
    conv_input: the forward input.
    filter_shape: the filter's Shape (the result's shape).
    dy: the gradient of the forward output.
    strides, padding: the forward op's.
  """

  no_gradient_reason = ("second derivatives of convolutions are not built "
                        "(nor were they in Mesh TensorFlow)")

  def __init__(self, conv_dimension, is_transpose, conv_input, filter_shape,
               dy, strides, padding, name=None):
    n = _rank(conv_dimension, "Conv2or3dBackpropFilterOperation")
    trans = "_trans" if is_transpose else ""
    super().__init__([conv_input, dy],
                     name=name or f"conv{n}d{trans}_backprop_filter")
    filter_shape = dims_lib.convert_to_shape(filter_shape)
    batch, spatial, channel = _split_shape(conv_input.shape, n, self.name,
                                           "conv_input")
    self._setup(n, strides, padding, spatial, filter_shape)
    f_in, f_out = self._filter_channels(n, filter_shape, "filter_shape",
                                        is_transpose)
    dy_batch, _, dy_channel = _split_shape(dy.shape, n, self.name, "dy")
    if channel != f_in or dy_channel != f_out or dy_batch != batch:
      raise ShapeError(
          f"{self.name}: conv_input {conv_input.shape!r}, filter_shape "
          f"{filter_shape!r} and dy {dy.shape!r} do not fit: the input's "
          f"channels must be the filter's {f_in}, dy's its {f_out}")
    self._outputs = [Tensor(self, filter_shape, dy.dtype)]

  def lower(self, lowering):
    impl = lowering.mesh_impl(self)
    x, dy = self.inputs
    out = self.outputs[0]
    n, strides, padding = self._n, _tf_strides(self._strides), self._padding
    nb = x.shape.ndims - n - 1
    out_slice = impl.slice_shape(out)
    transpose = self._is_transpose
    fn = (tf.raw_ops.Conv2DBackpropFilter if n == 2
          else tf.raw_ops.Conv3DBackpropFilterV2)

    def kernel(xs, dys):
      xs, dys = _flatten(xs, nb), _flatten(dys, nb)
      if transpose:  # the transposed conv's output is the forward input
        xs, dys = dys, xs
      return fn(input=xs, filter_sizes=tf.constant(out_slice, tf.int32),
                out_backprop=dys, strides=strides, padding=padding)
    flops = 2 * math.prod(impl.slice_shape(dy if not transpose else x)) * (
        math.prod(out_slice[:n]) * out_slice[n])
    laid = impl.slicewise(kernel, lowering.laid_out(x), lowering.laid_out(dy),
                          slice_shape=out_slice, dtype=out.dtype,
                          flops=flops, matmul=True)
    self._finish(lowering, laid, x.shape.dims[:nb])


class _ConvTransposeOperation(_Conv2or3dKernelOp):
  """A transposed convolution (the input gradient of a convolution, used
  forward): ``[batch..., spatial x n, in]`` by ``[spatial x n, out, in]``
  gives ``[batch..., spatial * strides, out]``."""

  _N = None

  def __init__(self, conv_input, conv_filter, strides, padding, name=None):
    n = self._N
    super().__init__([conv_input, conv_filter],
                     name=name or f"conv{n}d_transpose")
    batch, spatial, channel = _split_shape(conv_input.shape, n, self.name,
                                           "conv_input")
    self._setup(n, strides, padding, spatial, conv_filter.shape)
    if conv_filter.shape.ndims != n + 2:
      raise ShapeError(f"{self.name}: filter {conv_filter.shape!r} needs "
                       f"{n} spatial dims and two channel dims")
    f_out, f_in = conv_filter.shape.dims[n:]
    if f_in != channel:
      raise ShapeError(
          f"{self.name}: the filter's last dim {f_in} must be the input's "
          f"channel dim {channel} (a transposed filter is [spatial..., out, "
          "in])")
    out_spatial = []
    for d, f, s in zip(spatial, conv_filter.shape.dims[:n], self._strides):
      size = d.size * s
      if _forward_size(size, f.size, s, self._padding) != d.size:
        raise ShapeError(
            f"{self.name}: spatial dim {d} at stride {s} gives {size}, but a "
            f"{self._padding} convolution of {size} by window {f.size} does "
            f"not give {d.size} back; use 'SAME' or a window <= the stride")
      out_spatial.append(dims_lib.Dimension(d.name, size))
    self._outputs = [Tensor(self, dims_lib.Shape(
        list(batch) + out_spatial + [f_out]), conv_input.dtype)]

  def gradient(self, grad_ys):
    (dy,) = grad_ys
    if dy is None:
      return [None, None]
    x, w = self.inputs
    n, strides, padding = self._n, self._strides, self._padding
    return [
        Conv2or3dBackpropInputOperation(
            n, True, x.shape, w, dy, strides, padding,
            name=f"{self.name}/grad_input").outputs[0],
        Conv2or3dBackpropFilterOperation(
            n, True, x, w.shape, dy, strides, padding,
            name=f"{self.name}/grad_filter").outputs[0]]

  def lower(self, lowering):
    impl = lowering.mesh_impl(self)
    x, w = self.inputs
    out = self.outputs[0]
    n, strides, padding = self._n, _tf_strides(self._strides), self._padding
    nb = x.shape.ndims - n - 1
    out_slice = impl.slice_shape(out)
    sizes = [math.prod(out_slice[:nb])] + list(out_slice[nb:])
    fn = (tf.raw_ops.Conv2DBackpropInput if n == 2
          else tf.raw_ops.Conv3DBackpropInputV2)

    def kernel(xs, ws):
      y = fn(input_sizes=tf.constant(sizes, tf.int32), filter=ws,
             out_backprop=_flatten(xs, nb), strides=strides, padding=padding)
      return tf.reshape(y, out_slice)
    laid_w = lowering.laid_out(w)
    flops = 2 * math.prod(impl.slice_shape(x)) * math.prod(
        laid_w.slice_shape[:n]) * out_slice[-1]
    laid = impl.slicewise(kernel, lowering.laid_out(x), laid_w,
                          slice_shape=out_slice, dtype=out.dtype,
                          flops=flops, matmul=True)
    self._finish(lowering, laid, [x.shape.dims[-1]])


class Conv2dTransposeOperation(_ConvTransposeOperation):
  """Mesh TF's ``Conv2dTransposeOperation(conv_input, conv_filter, strides,
  padding, name=None)``, like ``tf.nn.conv2d_transpose``."""
  _N = 2


class Conv3dTransposeOperation(_ConvTransposeOperation):
  """Mesh TF's ``Conv3dTransposeOperation(conv_input, conv_filter, strides,
  padding, name=None)``, like ``tf.nn.conv3d_transpose``."""
  _N = 3


class _ConvNdOperation(conv_ops.ConvOperation):
  """mesh-tf's :class:`~mesh_tf.ops.conv.ConvOperation` with Mesh TF's
  positional constructor; strided ones differentiate through the TF
  backprop kernels."""

  _N = None

  def __init__(self, conv_input, conv_filter, strides, padding, name=None):
    n = self._N
    what = name or f"conv{n}d"
    _, spatial, _ = _split_shape(conv_input.shape, n, what, "conv_input")
    if conv_filter.shape.ndims != n + 2:
      raise ShapeError(f"{what}: filter {conv_filter.shape!r} needs {n} "
                       "spatial dims and two channel dims")
    fdims = conv_filter.shape.dims
    strides = _strides(strides, n, what)
    self._padding_string = _padding(padding, what)
    names = [d.name for d in spatial]
    pads = conv_ops.resolve_padding(conv_input, names,
                                    [d.size for d in fdims[:n]], strides,
                                    self._padding_string)
    super().__init__(conv_input, conv_filter, names, fdims[:n], fdims[n],
                     fdims[n + 1], strides, pads, name=what)

  def gradient(self, grad_ys):
    (dy,) = grad_ys
    if dy is None or all(s == 1 for s in self.geometry.strides):
      return super().gradient(grad_ys)
    x, w = self.inputs
    n, strides = self._N, self.geometry.strides
    return [
        Conv2or3dBackpropInputOperation(
            n, False, x.shape, w, dy, strides, self._padding_string,
            name=f"{self.name}/grad_input").outputs[0],
        Conv2or3dBackpropFilterOperation(
            n, False, x, w.shape, dy, strides, self._padding_string,
            name=f"{self.name}/grad_filter").outputs[0]]


class Conv2dOperation(_ConvNdOperation):
  """Alias of :class:`~mesh_tf.ops.conv.ConvOperation` with Mesh TF's
  constructor ``Conv2dOperation(conv_input, conv_filter, strides, padding,
  name=None)``: input ``[batch..., h, w, in]``, filter ``[fh, fw, in,
  out]``."""
  _N = 2


class Conv3dOperation(_ConvNdOperation):
  """Alias of :class:`~mesh_tf.ops.conv.ConvOperation` with Mesh TF's
  constructor ``Conv3dOperation(conv_input, conv_filter, strides, padding,
  name=None)``: input ``[batch..., d, h, w, in]``, filter ``[fd, fh, fw,
  in, out]``."""
  _N = 3


# --- Mesh TF's functions --------------------------------------------------------
def _backprop_input(n, transpose):
  def fn(input_shape, conv_filter, dy, strides, padding, name=None):
    return Conv2or3dBackpropInputOperation(
        n, transpose, input_shape, conv_filter, dy, strides, padding,
        name=name).outputs[0]
  kind = f"conv{n}d{'_transpose' if transpose else ''}"
  fn.__name__ = fn.__qualname__ = f"{kind}_backprop_input"
  fn.__doc__ = (f"The gradient of the input of ``{kind}`` given ``dy`` "
                "(Mesh TF's function): a Tensor of ``input_shape``.")
  return fn


def _backprop_filter(n, transpose):
  def fn(conv_input, filter_shape, dy, strides, padding, name=None):
    return Conv2or3dBackpropFilterOperation(
        n, transpose, conv_input, filter_shape, dy, strides, padding,
        name=name).outputs[0]
  kind = f"conv{n}d{'_transpose' if transpose else ''}"
  fn.__name__ = fn.__qualname__ = f"{kind}_backprop_filter"
  fn.__doc__ = (f"The gradient of the filter of ``{kind}`` given ``dy`` "
                "(Mesh TF's function): a Tensor of ``filter_shape``.")
  return fn


conv2d_backprop_input = _backprop_input(2, False)
conv3d_backprop_input = _backprop_input(3, False)
conv2d_backprop_filter = _backprop_filter(2, False)
conv3d_backprop_filter = _backprop_filter(3, False)
conv2d_transpose_backprop_input = _backprop_input(2, True)
conv3d_transpose_backprop_input = _backprop_input(3, True)
conv2d_transpose_backprop_filter = _backprop_filter(2, True)
conv3d_transpose_backprop_filter = _backprop_filter(3, True)


def conv2d_transpose(conv_input, conv_filter, strides, padding, name=None):
  """Transposed 2-d convolution (Mesh TF's ops-level function): input
  ``[batch..., h, w, in]``, filter ``[fh, fw, out, in]``, output
  ``[batch..., h * sh, w * sw, out]``."""
  return Conv2dTransposeOperation(conv_input, conv_filter, strides, padding,
                                  name=name).outputs[0]


def conv3d_transpose(conv_input, conv_filter, strides, padding, name=None):
  """Transposed 3-d convolution (Mesh TF's ops-level function): input
  ``[batch..., d, h, w, in]``, filter ``[fd, fh, fw, out, in]``."""
  return Conv3dTransposeOperation(conv_input, conv_filter, strides, padding,
                                  name=name).outputs[0]
