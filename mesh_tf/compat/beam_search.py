"""Mesh TensorFlow's ``mtf.beam_search`` module: ``greedy_decode`` on a
user ``logits_fn``.

The original ran its decoding loop as an ``mtf.while_loop``.  mesh-tf has no
while loop, so the loop is unrolled: one copy of ``logits_fn`` per position
of ``length_dim`` (the graph grows with the length).  The result is the
original's, including its early stop: once every sequence holds ``eos_id``,
no further position is written.  For long or cached decoding use
:mod:`mesh_tf.decoding`, whose loops run one lowered step per token.

``beam_search`` is the alive/finished beam search of tensor2tensor that
Mesh TF used, unrolled the same way; ``compute_topk_scores_and_seq`` is its
gather of the best hypotheses.  For cached decoding of mesh-tf's models,
:func:`mesh_tf.decoding.beam_search` runs one lowered step per token.
"""

from mesh_tf.compat import functions as fn_lib
from mesh_tf.core import dims as dims_lib
from mesh_tf.core.errors import MtfError, ShapeError
from mesh_tf.ops import creation as creation_ops
from mesh_tf.ops import einsum as einsum_ops
from mesh_tf.ops import elementwise as ew
from mesh_tf.ops import gather as gather_ops
from mesh_tf.ops import reduce as reduce_ops
from mesh_tf.ops import reshape as reshape_ops
from mesh_tf.ops import slicing
from mesh_tf.ops import topk as topk_ops

__all__ = ["EOS_ID", "INF", "beam_search", "compute_topk_scores_and_seq",
           "greedy_decode"]

EOS_ID = 1
INF = 1.0e7  # a score that no hypothesis reaches; -INF marks "none"


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


def _select(selector, x, old_beam):
  """``x``'s entries along ``old_beam`` picked by a one-hot ``selector``
  ``[batch..., beam, old_beam]`` (an einsum, so ``old_beam`` may be split);
  integer and bool tensors go through float32, exact for ids < 2**24."""
  kind = x.dtype
  xf = x if kind == "float32" else ew.cast(x, "float32")
  out_dims = [d for d in selector.shape.dims if d.name != old_beam.name] + [
      d for d in x.shape.dims
      if d.name != old_beam.name and d.name not in selector.shape]
  y = einsum_ops.einsum([selector, xf],
                        output_shape=dims_lib.Shape(out_dims))
  return y if kind == "float32" else ew.cast(y, kind)


def compute_topk_scores_and_seq(sequences, scores, scores_to_gather, flags,
                                beam_dim, prefix="default", states=None):
  """The ``beam_dim.size`` best hypotheses by ``scores`` (Mesh TF's helper).

  Args:
    sequences: int32 ``[batch..., old_beam, length]``.
    scores: float ``[batch..., old_beam]``; its last dim is the old beam dim.
    scores_to_gather: float ``[batch..., old_beam]``, gathered like the
      sequences (e.g. log-probabilities without the length penalty).
    flags: bool ``[batch..., old_beam]`` (e.g. "finished").
    beam_dim: the Dimension of the result's beams (size k <= old beams).
    prefix: accepted for Mesh TF compatibility (op names).
    states: optional list of Tensors with the old beam dim, gathered too.

  Returns:
    ``(topk_seq, topk_gathered_scores, topk_finished_flags,
    topk_gathered_states)``, with ``beam_dim`` in place of the old beam dim,
    best first (ties: lowest old index).
  """
  del prefix
  old_beam = scores.shape.dims[-1]
  if beam_dim.size > old_beam.size:
    raise ShapeError(f"compute_topk_scores_and_seq: beam_dim {beam_dim} is "
                     f"larger than the candidates' dim {old_beam}")
  _, index = topk_ops.top_k(scores, old_beam, beam_dim)
  selector = gather_ops.one_hot(index, old_beam, dtype="float32")
  seq = _select(selector, sequences, old_beam)
  gathered = _select(selector, scores_to_gather, old_beam)
  fl = _select(selector, flags, old_beam)
  new_states = [_select(selector, t, old_beam) for t in (states or [])]
  return seq, gathered, fl, new_states


def _rename(x, old, new):
  return reshape_ops.rename_dimension(x, old, new)


def beam_search(logits_fn, initial_ids, alpha, states=None, eos_id=EOS_ID,
                stop_early=True, decode_length=None, use_tpu=True,
                dtype="float32", layout=None, mesh_shape=None,
                num_prefilter=2):
  """Beam search with a length penalty, on a user ``logits_fn``.

  Each step extends every alive hypothesis by every token, scores the
  extensions by ``log_prob / ((5 + length) / 6) ** alpha``, keeps the best
  ``2 * beams`` of them, and from those the best ``beams`` that did not just
  end in ``eos_id`` (the alive set) and the best ``beams`` ended ones so far
  (the finished set).  With ``stop_early``, search ends once, in every
  batch entry, the best finished hypothesis beats what the best alive one
  could still reach (tensor2tensor's test).

  Args:
    logits_fn: ``logits_fn(step_num, ids, states) -> (logits, new_states)``;
      ``ids`` is ``[batch..., beam, length]`` and ``logits`` is ``[batch...,
      beam, vocab]`` (vocab last): the next token's logits at position
      ``step_num``.
    initial_ids: int32 ``[batch..., beam, length]``, all beams equal; the
      search writes positions ``0 .. decode_length - 1``.
    alpha: length-penalty exponent.
    states: Tensors with the beam dim threaded through ``logits_fn`` (and
      reordered with the hypotheses).
    eos_id: the end-of-sequence id.
    stop_early: stop when the finished set cannot improve.
    decode_length: positions to decode (default: the length dim's size).
    use_tpu, dtype, layout, mesh_shape, num_prefilter: accepted for Mesh
      TF compatibility (no effect).

  Returns:
    ``(ids, scores)``: ``[batch..., beam, length]`` best first, and their
    scores ``[batch..., beam]``; a batch entry with no finished hypothesis
    returns its alive ones and their log-probabilities.
  """
  del use_tpu, dtype, layout, mesh_shape, num_prefilter
  mesh = initial_ids.mesh
  beam_dim, length_dim = initial_ids.shape.dims[-2:]
  k = beam_dim.size
  decode_length = length_dim.size if decode_length is None else int(
      decode_length)
  if not 0 < decode_length <= length_dim.size:
    raise ShapeError(f"beam_search: decode_length={decode_length} must be in"
                     f" [1, {length_dim.size}] (the length dim {length_dim})")
  states = list(states or [])
  batch_shape = initial_ids.shape - [length_dim]      # [batch..., beam]
  first = ew.equal(creation_ops.range(mesh, beam_dim, "int32"), 0)
  alive_seq = initial_ids
  alive_log_probs = ew.add(creation_ops.zeros(mesh, batch_shape),
                           ew.where(first, 0.0, -INF))
  finished_seq = creation_ops.zeros_like(initial_ids)
  finished_scores = creation_ops.constant(mesh, -INF, batch_shape)
  finished_flags = ew.cast(creation_ops.zeros(mesh, batch_shape, "int32"),
                           "bool")
  double = dims_lib.Dimension(f"double_{beam_dim.name}", 2 * k)
  cand = dims_lib.Dimension(f"candidates_{beam_dim.name}", 3 * k)
  done = None
  for i in range(decode_length):
    step_num = creation_ops.constant(mesh, i, dtype="int32")
    logits, new_states = logits_fn(step_num, alive_seq, states)
    vocab_dim = logits.shape.dims[-1]
    if logits.shape - [vocab_dim] != batch_shape:
      raise MtfError(f"beam_search: logits_fn returned {logits.shape!r}; "
                     f"expected {batch_shape!r} plus a vocab dim last")
    log_probs = reduce_ops.log_softmax(logits, vocab_dim)
    penalty = ((5.0 + i + 1) / 6.0) ** alpha
    curr = ew.multiply(ew.add(log_probs, alive_log_probs), 1.0 / penalty)
    flat_dim = dims_lib.Dimension(f"{beam_dim.name}_{vocab_dim.name}",
                                  k * vocab_dim.size)
    flat = reshape_ops.reshape(curr, (curr.shape - [beam_dim, vocab_dim])
                               + [flat_dim])
    top_scores, top_index = topk_ops.top_k(flat, flat_dim, double)
    top_log_probs = ew.multiply(top_scores, penalty)
    parent = ew.floordiv(top_index, vocab_dim.size)
    token = ew.mod(top_index, vocab_dim.size)
    selector = gather_ops.one_hot(parent, beam_dim, dtype="float32")
    top_seq = _select(selector, alive_seq, beam_dim)
    at = ew.cast(gather_ops.one_hot(step_num, length_dim, dtype="int32"),
                 "bool")
    top_seq = ew.where(at, ew.add(ew.multiply(top_seq, 0), token), top_seq,
                       output_shape=top_seq.shape)
    top_states = [_select(selector, t, beam_dim) for t in new_states]
    top_finished = ew.equal(token, eos_id)
    # The alive set: the best extensions that did not just finish.
    alive_pick = ew.add(top_scores,
                        ew.multiply(ew.cast(top_finished, "float32"), -INF))
    new_alive_seq, new_alive_lp, _, new_alive_states = (
        compute_topk_scores_and_seq(top_seq, alive_pick, top_log_probs,
                                    top_finished, beam_dim,
                                    states=top_states))
    # The finished set: the old one and the extensions that just finished.
    fin_pick = ew.add(top_scores, ew.multiply(
        ew.cast(ew.logical_not(top_finished), "float32"), -INF))
    pool_seq = slicing.concat(
        [_rename(finished_seq, beam_dim.name, cand.name),
         _rename(top_seq, double.name, cand.name)], cand.name)
    pool_scores = slicing.concat(
        [_rename(finished_scores, beam_dim.name, cand.name),
         _rename(fin_pick, double.name, cand.name)], cand.name)
    pool_flags = slicing.concat(
        [_rename(finished_flags, beam_dim.name, cand.name),
         _rename(top_finished, double.name, cand.name)], cand.name)
    new_fin_seq, new_fin_scores, new_fin_flags, _ = (
        compute_topk_scores_and_seq(pool_seq, pool_scores, pool_scores,
                                    pool_flags, beam_dim))
    if done is None:
      keep = lambda old, new: new  # noqa: E731
    else:
      keep = lambda old, new, d=done: ew.where(  # noqa: E731
          d, old, new, output_shape=new.shape)
    alive_seq = keep(alive_seq, new_alive_seq)
    alive_log_probs = keep(alive_log_probs, new_alive_lp)
    finished_seq = keep(finished_seq, new_fin_seq)
    finished_scores = keep(finished_scores, new_fin_scores)
    finished_flags = keep(finished_flags, new_fin_flags)
    states = [keep(o, n) for o, n in zip(states, new_alive_states)] if (
        done is not None and len(states) == len(new_alive_states)) else (
            new_alive_states)
    if stop_early:
      # tensor2tensor's test: every batch entry has a finished hypothesis
      # better than its best alive one could still become.
      max_penalty = ((5.0 + decode_length) / 6.0) ** alpha
      best_alive = reduce_ops.reduce_max(alive_log_probs,
                                         reduced_dim=beam_dim)
      best_finished = reduce_ops.reduce_max(
          ew.where(finished_flags, finished_scores,
                   creation_ops.constant(mesh, -INF, batch_shape)),
          reduced_dim=beam_dim)
      met = reduce_ops.reduce_all(ew.greater(
          best_finished, ew.multiply(best_alive, 1.0 / max_penalty)))
      done = met if done is None else ew.logical_or(done, met)
  any_finished = reduce_ops.reduce_any(finished_flags, reduced_dim=beam_dim)
  ids = ew.where(any_finished, finished_seq, alive_seq,
                 output_shape=initial_ids.shape)
  scores = ew.where(any_finished, finished_scores, alive_log_probs,
                    output_shape=batch_shape)
  return ids, scores
