"""Mesh TensorFlow's ``mtf.beam_search`` module: ``greedy_decode`` on a
user ``logits_fn``.

The original ran its decoding loop as an ``mtf.while_loop``.  mesh-tf has no
while loop, so the loop is unrolled: one copy of ``logits_fn`` per position
of ``length_dim`` (the graph grows with the length).  The result is the
original's, including its early stop: once every sequence holds ``eos_id``,
no further position is written.  For long or cached decoding use
:mod:`mesh_tf.decoding`, whose loops run one lowered step per token.

``beam_search`` and ``compute_topk_scores_and_seq`` are not implemented
here; :func:`mesh_tf.decoding.beam_search` is mesh-tf's beam search.
"""

from mesh_tf.compat import functions as fn_lib
from mesh_tf.core.errors import MtfError
from mesh_tf.ops import creation as creation_ops
from mesh_tf.ops import elementwise as ew
from mesh_tf.ops import gather as gather_ops
from mesh_tf.ops import reduce as reduce_ops

__all__ = ["EOS_ID", "greedy_decode"]

EOS_ID = 1


def greedy_decode(logits_fn, initial_ids, temperature=0.0,
                  initial_states=None, eos_id=EOS_ID, forced_ids=None,
                  use_tpu=True, seed=0):
  """Decodes greedily (or by sampling) one position at a time.

  Args:
    logits_fn: ``logits_fn(step_num, ids, states) -> (logits, new_states)``
      where ``step_num`` is a scalar int32 Tensor (the position being
      decoded), ``ids`` the ids so far and ``logits`` has the batch dims of
      ``initial_ids`` plus a vocab dim (last).
    initial_ids: int32 ``[<batch dims>, length_dim]``; nonzero entries are
      given (a prompt) and kept, zeros are decoded.
    temperature: 0 for argmax, else Gumbel sampling at that temperature
      (:func:`mesh_tf.sample_with_temperature`, seeded by ``seed`` and the
      position).
    initial_states: list of Tensors passed through ``logits_fn``.
    eos_id: id that ends a sequence; decoding stops once all have one.
    forced_ids: optional int32 Tensor shaped like ``initial_ids``; its
      nonzero entries replace the decoded ids.
    use_tpu: accepted for Mesh TF compatibility (no effect).

  Returns:
    int32 Tensor shaped like ``initial_ids``.

  Raises:
    MtfError: if ``logits_fn`` returns logits without the batch dims.
  """
  del use_tpu
  length_dim = initial_ids.shape.dims[-1]
  mesh = initial_ids.mesh
  batch_names = set(initial_ids.shape.dimension_names[:-1])
  states = list(initial_states or [])
  ids = initial_ids
  zero = creation_ops.zeros_like(initial_ids)
  for t in range(length_dim.size):
    step_num = creation_ops.constant(mesh, t, dtype="int32")
    logits, states = logits_fn(step_num, ids, states)
    states = list(states)
    if not batch_names <= set(logits.shape.dimension_names):
      raise MtfError(
          f"greedy_decode: logits_fn returned {logits.shape!r}, which lacks "
          f"batch dims of initial_ids {initial_ids.shape!r}")
    vocab_dim = logits.shape.dims[-1]
    new_ids = fn_lib.sample_with_temperature(logits, vocab_dim, temperature,
                                             seed=seed * 100003 + t)
    at = ew.cast(gather_ops.one_hot(step_num, length_dim, dtype="int32"),
                 "bool")
    # Write position t where the caller gave no id, unless all sequences
    # already hold eos (the original's while loop stops there).
    write = ew.logical_and(at, ew.equal(ids, 0))
    if t > 0:
      has_eos = reduce_ops.reduce_any(ew.equal(ids, eos_id),
                                      reduced_dim=length_dim)
      write = ew.logical_and(write, ew.logical_not(
          reduce_ops.reduce_all(has_eos)))
    candidate = ew.add(zero, ew.cast(new_ids, "int32"))
    if forced_ids is not None:
      candidate = ew.where(ew.not_equal(forced_ids, 0), forced_ids,
                           candidate)
    ids = ew.where(write, candidate, ids, output_shape=initial_ids.shape)
  return ids
