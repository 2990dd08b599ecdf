"""Mesh TensorFlow's ``clip_activation_gradient``: an identity whose
backward pass clips the gradient by its root-mean-square, and the summaries
the original recorded beside it."""

from mesh_tf.gradients import custom_gradient
from mesh_tf.ops import elementwise as ew
from mesh_tf.ops import reduce as reduce_ops

__all__ = ["clip_activation_gradient", "summary_for_clip_activation_gradient"]


def _rms(t):
  return ew.sqrt(reduce_ops.reduce_mean(ew.square(t)))


def clip_activation_gradient(x, clip_rms_norm=None):
  """``x`` unchanged; in the backward pass its gradient ``g`` becomes
  ``g / max(1, rms(g) / clip_rms_norm)``, the RMS taken over all of ``g``
  (an all-reduce when ``x`` is split).  No clipping without
  ``clip_rms_norm``.

  Unlike the original, the forward pass records no summaries; call
  :func:`summary_for_clip_activation_gradient` for them.

  Example:
    >>> h = clip_activation_gradient(h, clip_rms_norm=1.0)  # doctest: +SKIP
  """
  def grad_fn(forward_op, grad_ys):
    del forward_op
    (g,) = grad_ys
    if g is None or not clip_rms_norm:
      return [g]
    denom = ew.maximum(ew.divide(_rms(g), float(clip_rms_norm)), 1.0)
    return [ew.divide(g, denom)]
  return custom_gradient(ew.identity, grad_fn, [x],
                         name="clip_activation_gradient")


def summary_for_clip_activation_gradient(t, name=None, batch_dims=None):
  """Records the mean and max of ``t`` and, with ``batch_dims``, the mean,
  max and variance of its per-example RMS, as ``tf.compat.v1`` scalar
  summaries (graph mode).

  Returns:
    The list of summary ops.
  """
  from mesh_tf.compat.laid_out_ops import scalar_summary  # pylint: disable=g-import-not-at-top
  ops = [scalar_summary("mean/", reduce_ops.reduce_mean(t)),
         scalar_summary("max/", reduce_ops.reduce_max(t))]
  if batch_dims:
    rms = ew.sqrt(reduce_ops.reduce_mean(ew.square(t),
                                         output_shape=batch_dims))
    mean = reduce_ops.reduce_mean(rms)
    ops += [scalar_summary(f"rms_mean/{name}", mean),
            scalar_summary(f"rms_max/{name}", reduce_ops.reduce_max(rms)),
            scalar_summary(f"rms_var/{name}", reduce_ops.reduce_mean(
                ew.square(ew.subtract(rms, mean))))]
  return ops
