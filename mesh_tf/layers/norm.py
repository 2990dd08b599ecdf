"""Fused layer normalisation and RMS normalisation ops, with gradients.

Composed from elementwise ops, a layer norm costs about eleven mtf ops
forward and fifteen backward; fused, it is one op each way, which cuts the
lowered Transformer step by a third.  The normalised dim may be split
across the mesh: the statistics are then all-reduced over its mesh axis
(two passes, as the unfused mean-then-variance would).

Forward:   ``xhat = (x - mean) * r``, ``r = rsqrt(var + eps)``,
           ``y = xhat * scale + bias``  (RMS: no mean, ``r =
           rsqrt(mean(x^2) + eps)``, no bias).
Backward:  ``g = dy * scale``,
           ``dx = r * (g - mean(g) - xhat * mean(g * xhat))`` (RMS: without
           ``mean(g)``), ``dscale = sum(dy * xhat)``, ``dbias = sum(dy)``
           over every dim but the normalised one.
"""

from mesh_tf.core.errors import ShapeError
from mesh_tf.graph import Operation, Tensor
from mesh_tf.lowering.lazy_tf import tf
from mesh_tf.lowering.mesh_impl import LazyAllreduceSum


class _NormLowering:
  """Per-slice kernels shared by the forward and backward ops."""

  def __init__(self, impl, x, dim, epsilon, rms):
    self.impl = impl
    self.axis = x.shape.index(dim.name)
    self.ndims = x.shape.ndims
    self.n = float(dim.size)
    self.epsilon = epsilon
    self.rms = rms
    # The normalised dim's mesh axes (a tuple, major first), or None.
    self.mesh_axis = impl.dim_axes(dim)

  def mtf_kernel_key(self):
    """What the per-slice kernels depend on (see lowering.fusion)."""
    return (self.axis, self.ndims, self.n, self.epsilon, self.rms,
            self.mesh_axis)

  def vec(self, t):
    """A [d] slice reshaped to broadcast along ``axis``."""
    shape = [1] * self.ndims
    shape[self.axis] = -1
    return tf.reshape(t, shape)

  def mean(self, kernel, *inputs):
    """``sum(kernel(*slices)) / n`` over the normalised dim, keepdims."""
    shape = list(inputs[0].slice_shape)
    shape[self.axis] = 1
    s = self.impl.slicewise(
        lambda *ts: tf.reduce_sum(kernel(*ts), self.axis, keepdims=True)
        / self.n, *inputs, slice_shape=shape, flops=2 * inputs[0].slice_size)
    if self.mesh_axis is not None:
      s = self.impl.allreduce(s, self.mesh_axis, "SUM")
    return s

  def local_xhat(self, t):
    """(xhat, r) of a slice whose normalised dim is whole."""
    if self.rms:
      r = tf.math.rsqrt(tf.reduce_mean(tf.square(t), self.axis, keepdims=True)
                        + self.epsilon)
      return t * r, r
    t = t - tf.reduce_mean(t, self.axis, keepdims=True)
    r = tf.math.rsqrt(tf.reduce_mean(tf.square(t), self.axis, keepdims=True)
                      + self.epsilon)
    return t * r, r

  def stats(self, laid_x):
    """Laid-out keepdims statistics of x over the (split) normalised dim.

    Returns ``(mean or None for RMS, variance or mean square, rsqrt_fn)``,
    where ``rsqrt_fn(v)`` is ``rsqrt(v + epsilon)``.
    """
    eps = self.epsilon
    if self.rms:
      ms = self.mean(tf.square, laid_x)
      return None, ms, lambda ms_: tf.math.rsqrt(ms_ + eps)
    mu = self.mean(lambda t: t, laid_x)
    var = self.mean(lambda t, m: tf.square(t - m), laid_x, mu)
    return mu, var, lambda v: tf.math.rsqrt(v + eps)


class NormOperation(Operation):
  """``layer_norm`` (or ``rms_norm`` with ``rms=True``) over ``dim``.

  Inputs: ``x``, ``scale`` [dim] and, for layer norm with a bias, ``bias``.
  """

  def __init__(self, x, dim, scale, bias=None, epsilon=1e-6, rms=False,
               name=None):
    inputs = [x, scale] + ([bias] if bias is not None else [])
    super().__init__(inputs, name=name or ("rms_norm" if rms else
                                           "layer_norm"))
    for t in inputs[1:]:
      if t.shape.dims != [dim]:
        raise ShapeError(f"{self.name}: {t.name} {t.shape!r} must have the "
                         f"shape [{dim}]")
    self.dim, self.epsilon, self.rms = dim, epsilon, rms
    self.has_bias = bias is not None
    self._outputs = [Tensor(self, x.shape, x.dtype)]

  def cost_params(self):
    return (self.dim, self.epsilon, self.rms, self.has_bias)

  def lower(self, lowering):
    impl = lowering.mesh_impl(self)
    x = self.inputs[0]
    k = _NormLowering(impl, x, self.dim, self.epsilon, self.rms)
    laid = [lowering.laid_out(t) for t in self.inputs]
    if k.mesh_axis is None:  # One kernel when the normalised dim is whole.
      def fused(t, s, *b):
        y = k.local_xhat(t)[0] * k.vec(s)
        return y + k.vec(b[0]) if b else y
      lowering.set_tensor_lowering(self.outputs[0], impl.slicewise(
          fused, *laid, shape=x.shape, flops=8 * laid[0].slice_size))
      return
    mu, var, rsqrt = k.stats(laid[0])
    has_bias = self.has_bias

    def kernel(t, s, v, *rest):
      if mu is not None:
        t, rest = t - rest[0], rest[1:]
      y = t * rsqrt(v) * k.vec(s)
      if has_bias:
        y = y + k.vec(rest[0])
      return y
    args = [laid[0], laid[1], var] + ([mu] if mu is not None else []) + (
        laid[2:])
    lowering.set_tensor_lowering(self.outputs[0], impl.slicewise(
        kernel, *args, shape=x.shape, flops=4 * laid[0].slice_size))

  def gradient(self, grad_ys):
    (dy,) = grad_ys
    if dy is None:
      return [None] * len(self.inputs)
    return NormGradOperation(self, dy).outputs


class NormGradOperation(Operation):
  """Gradients of a :class:`NormOperation`: dx, dscale (and dbias)."""

  no_gradient_reason = "second derivatives of norms are not built"

  def __init__(self, norm_op, dy, name=None):
    x, scale = norm_op.inputs[:2]
    super().__init__([x, scale, dy], name=name or f"{norm_op.name}_grad")
    self.norm_op = norm_op
    outs = [Tensor(self, x.shape, x.dtype, index=0),
            Tensor(self, scale.shape, scale.dtype, index=1)]
    if norm_op.has_bias:
      outs.append(Tensor(self, scale.shape, scale.dtype, index=2))
    self._outputs = outs

  def cost_params(self):
    return (self.norm_op.signature,)

  def lower(self, lowering):
    impl = lowering.mesh_impl(self)
    op = self.norm_op
    x, scale, dy = self.inputs
    k = _NormLowering(impl, x, op.dim, op.epsilon, op.rms)
    lx, ls, ldy = (lowering.laid_out(t) for t in self.inputs)
    others = [i for i in range(x.shape.ndims) if i != k.axis]
    axes = list(impl.split_axes([d for d in x.shape
                                 if d.name != op.dim.name]))

    def finish(tensor, laid):
      if axes:
        lowering.set_tensor_lowering(tensor, LazyAllreduceSum(impl, laid,
                                                              axes))
      else:
        lowering.set_tensor_lowering(tensor, laid)
    n_out = len(self.outputs)
    rms = op.rms
    if k.mesh_axis is None:  # One kernel when the normalised dim is whole.
      def fused(t, s, d):
        xh, r = k.local_xhat(t)
        g = d * k.vec(s)
        out = g - xh * tf.reduce_mean(g * xh, k.axis, keepdims=True)
        if not rms:
          out = out - tf.reduce_mean(g, k.axis, keepdims=True)
        grads = [out * r, tf.reduce_sum(d * xh, others)]
        if n_out == 3:
          grads.append(tf.reduce_sum(d, others))
        return grads
      outs = impl.slicewise(
          fused, lx, ls, ldy, shape=[t.shape for t in self.outputs],
          dtype=[t.dtype for t in self.outputs], flops=12 * lx.slice_size)
      lowering.set_tensor_lowering(self.outputs[0], outs[0])
      for t, laid in zip(self.outputs[1:], outs[1:]):
        finish(t, laid)
      return
    mu, var, rsqrt = k.stats(lx)
    center = mu is not None

    def xhat(t, v, m=None):
      return (t - m if m is not None else t) * rsqrt(v)
    stat_args = [var] + ([mu] if center else [])
    # mean(g * xhat) and, for layer norm, mean(g), over the normalised dim.
    m_gx = k.mean(lambda t, s, d, v, *m: d * k.vec(s) * xhat(t, v, *m),
                  lx, ls, ldy, *stat_args)
    grad_args = [m_gx]
    if center:
      grad_args.append(k.mean(lambda d, s: d * k.vec(s), ldy, ls))

    def dx_kernel(t, s, d, v, *rest):
      m = rest[0] if center else None
      rest = rest[1:] if center else rest
      xh = xhat(t, v, m)
      g = d * k.vec(s)
      out = g - xh * rest[0]
      if center:
        out = out - rest[1]
      return out * rsqrt(v)
    dx = impl.slicewise(dx_kernel, lx, ls, ldy, *stat_args, *grad_args,
                        shape=x.shape, flops=8 * lx.slice_size)
    lowering.set_tensor_lowering(self.outputs[0], dx)
    # dscale, dbias: sums over every dim but the normalised one.
    dscale = impl.slicewise(
        lambda t, d, v, *m: tf.reduce_sum(d * xhat(t, v, *m), others),
        lx, ldy, *stat_args, shape=scale.shape, flops=3 * lx.slice_size)
    finish(self.outputs[1], dscale)
    if op.has_bias:
      dbias = impl.slicewise(lambda d: tf.reduce_sum(d, others), ldy,
                             shape=scale.shape, flops=lx.slice_size)
      finish(self.outputs[2], dbias)
