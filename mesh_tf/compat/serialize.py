"""Mesh TensorFlow's ``serialize_training_step``: a training step run as a
loop over microbatches, with gradients and outputs summed in accumulators.
"""

from mesh_tf.core import dims as dims_lib
from mesh_tf.core.errors import MtfError, ShapeError
from mesh_tf.graph import Tensor
from mesh_tf.ops import creation as creation_ops
from mesh_tf.ops import einsum as einsum_ops
from mesh_tf.ops import elementwise as ew
from mesh_tf.ops import gather as gather_ops
from mesh_tf.ops import reshape as reshape_ops
from mesh_tf.ops import while_loop as loop_ops

__all__ = ["serialize_training_step"]


def serialize_training_step(features, model_fn, batch_dim, num_splits):
  """Runs ``model_fn`` on ``num_splits`` microbatches in turn, in one
  :func:`~mesh_tf.while_loop`, and sums what each gives.

  Microbatch ``m`` holds the examples ``m, m + num_splits, ...`` of
  ``batch_dim`` (the batch dim is viewed as ``[batch_dim / num_splits,
  num_splits]``), so a split batch dim stays split the same way.

  Args:
    features: a dict of mtf Tensors, each with ``batch_dim``.
    model_fn: a function from a dict of microbatch features to a dict of
      output Tensors that holds ``"loss"`` (a sum over the batch gives the
      whole batch's loss once the microbatches are summed).
    batch_dim: the batch Dimension (or its name).
    num_splits: the number of microbatches; it divides ``batch_dim``.

  Returns:
    ``(grads, outputs)``: the gradients of the summed loss for each of
    ``graph.trainable_variables`` (in that order), and the outputs, each
    summed over the microbatches, or, when it has the batch dim,
    reassembled into the whole batch.  Each gradient is all-reduced once
    after the loop, not once per microbatch.

  Raises:
    ShapeError: if ``num_splits`` does not divide the batch dim, or a
      feature lacks it.
    MtfError: if ``model_fn`` gives no ``"loss"``, or a trainable variable
      gets no gradient.

  Example:
    >>> grads, outs = serialize_training_step(   # doctest: +SKIP
    ...     {"x": x, "y": y}, model_fn, batch, num_splits=4)
  """
  from mesh_tf.gradients import gradients  # pylint: disable=g-import-not-at-top
  features = dict(features)
  if not features or not all(isinstance(v, Tensor)
                             for v in features.values()):
    raise MtfError("serialize_training_step needs a dict of mtf Tensors as "
                   "features")
  first = next(iter(features.values()))
  mesh, graph = first.mesh, first.graph
  name = batch_dim if isinstance(batch_dim, str) else (
      dims_lib.convert_to_dimension(batch_dim).name)
  for k, v in features.items():
    if name not in v.shape:
      raise ShapeError(f"serialize_training_step: feature {k!r} "
                       f"{v.shape!r} has no batch dim {name!r}")
  batch = first.shape.get_dim_by_name(name)
  if (not isinstance(num_splits, int) or num_splits < 1
      or batch.size % num_splits):
    raise ShapeError(f"serialize_training_step: num_splits={num_splits!r} "
                     f"must be a positive divisor of {batch}")
  micro = dims_lib.Dimension("_microbatch", num_splits)
  small = dims_lib.Dimension(name, batch.size // num_splits)
  keys = []

  def split_view(shape):
    return reshape_ops.replace_dimensions(shape, batch, [small, micro])

  def select(t, onehot):
    whole = reshape_ops.reshape(t, split_view(t.shape))
    return einsum_ops.einsum([whole, ew.cast(onehot, t.dtype)],
                             output_shape=t.shape.resize_dimension(
                                 name, small.size))

  def body(m):
    onehot = gather_ops.one_hot(m, micro, dtype="int32")
    outputs = dict(model_fn({k: select(v, onehot)
                             for k, v in features.items()}))
    if "loss" not in outputs:
      raise MtfError("serialize_training_step: model_fn must return a dict "
                     f"with a 'loss' Tensor, got keys {sorted(outputs)}")
    variables = graph.trainable_variables
    grads = gradients([outputs["loss"]], [v.outputs[0] for v in variables])
    missing = [v.name for v, g in zip(variables, grads) if g is None]
    if missing:
      raise MtfError(f"serialize_training_step: no gradient for trainable "
                     f"variables {missing}; does the loss depend on them?")
    keys[:] = list(outputs)
    sums = []
    for t in outputs.values():
      if small in t.shape:
        # This microbatch's rows of the whole batch, zeros elsewhere: the
        # loop's sum reassembles the batch.
        spread = einsum_ops.einsum(
            [t, ew.cast(onehot, t.dtype)],
            output_shape=reshape_ops.replace_dimensions(t.shape, small,
                                                        [small, micro]))
        t = reshape_ops.reshape(
            spread, reshape_ops.replace_dimensions(spread.shape,
                                                   [small, micro], batch))
      sums.append(t)
    return [m + 1] + sums + list(grads)

  out = loop_ops.while_loop(
      lambda m: ew.less(m, num_splits), body,
      [creation_ops.constant(mesh, 0, dtype="int32")], has_accumulators=True)
  n = len(keys)
  return list(out[1 + n:]), dict(zip(keys, out[1:1 + n]))
