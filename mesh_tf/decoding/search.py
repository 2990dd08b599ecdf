"""Decoding loops on a :class:`~mesh_tf.decoding.DecodeStep`: greedy,
sampling and beam search.

Each loop calls the same lowered step once per position: the prompt is fed
token by token (filling the cache), then each step's choice is fed back.
All choices that depend on numbers are made on the devices (argmax, top-k)
or, for beam search, on the host from the devices' top-k candidates, with
ties broken by the lowest index; so on every layout the tokens are the same
unless two logits are equal up to rounding.

Sampling is Gumbel-max: ``argmax(logits / temperature + g)`` with
``g = -log(-log(u))`` and ``u`` from
:func:`mesh_tf.lowering.random_kernels.numpy_random` keyed by the seed and
each element's index in a ``[memory_length, batch, vocab]`` tensor (the
step's row of it), so a (seed, step) pair always gives the same noise.
"""

import numpy as np

from mesh_tf.lowering import random_kernels
from mesh_tf.models.decoding import DecodingError

__all__ = ["decode", "greedy_decode", "sample_decode", "beam_search",
           "gumbel_noise"]


def _prompts(step, prompts, num_steps, rows):
  prompts = np.asarray(prompts, dtype=np.int32)
  if prompts.ndim != 2 or prompts.shape[1] < 1:
    raise DecodingError(f"prompts must be int ids [sequences, length >= 1],"
                        f" got shape {prompts.shape}")
  d = step.decoding
  if prompts.shape[0] != rows:
    raise DecodingError(f"{prompts.shape[0]} prompts, but the step decodes "
                        f"{rows} sequences (batch={d.batch}); build it with "
                        "a matching batch")
  total = prompts.shape[1] + int(num_steps)
  if total > d.memory_length:
    raise DecodingError(f"prompt length {prompts.shape[1]} + num_steps "
                        f"{num_steps} = {total} positions exceed the cache "
                        f"memory_length={d.memory_length}")
  if prompts.min() < 0 or prompts.max() >= d.config.vocab:
    raise DecodingError(f"prompt ids must be in [0, vocab="
                        f"{d.config.vocab})")
  return prompts, total


def _check_mode(step, mode):
  if step.decoding.mode != mode:
    raise DecodingError(f"this loop needs a step built with mode={mode!r}, "
                        f"got mode={step.decoding.mode!r}")


def gumbel_noise(seed, position, batch, vocab, memory_length):
  """The Gumbel noise ``[batch, vocab]`` (float32) of step ``position``."""
  u = random_kernels.numpy_random(
      (memory_length, batch, vocab), seed, dtype="float64",
      begin=(position, 0, 0), slice_shape=(1, batch, vocab))[0]
  return (-np.log(-np.log(u))).astype(np.float32)


def _run(step, prompts, num_steps, extra):
  """The shared loop of greedy and sampling: ``extra(t)`` gives the other
  feeds of position ``t``."""
  d = step.decoding
  prompts, total = _prompts(step, prompts, num_steps, d.batch)
  tokens = np.zeros((d.batch, total), np.int32)
  plen = prompts.shape[1]
  tokens[:, :plen] = prompts
  for t in range(total - 1):
    out = step(ids=tokens[:, t], position=np.full(d.batch, t, np.int32),
               **extra(t))
    if t + 1 >= plen:
      tokens[:, t + 1] = out["next_ids"].numpy()
  return tokens


def greedy_decode(step, prompts, num_steps):
  """Greedy decoding: each next token is the argmax of the logits.

  Args:
    step: a :class:`DecodeStep` of a ``mode="greedy"`` decoding graph.
    prompts: int ids ``[batch, prompt_length]`` (``prompt_length >= 1``).
    num_steps: tokens to generate after the prompt.

  Returns:
    int32 array ``[batch, prompt_length + num_steps]``: prompt then tokens.

  Raises:
    DecodingError: for a wrong mode, prompt shape or too many positions.
  """
  _check_mode(step, "greedy")
  return _run(step, prompts, num_steps, lambda t: {})


def sample_decode(step, prompts, num_steps, seed=0):
  """Temperature / top-k sampling (the step's options), seeded.

  The same ``seed`` gives the same tokens on every layout and mesh.
  Arguments and result as :func:`greedy_decode`.
  """
  _check_mode(step, "sample")
  d = step.decoding
  plen = np.shape(prompts)[1] if np.ndim(prompts) == 2 else 0
  zeros = np.zeros((d.batch, d.config.vocab), np.float32)

  def extra(t):
    if t + 1 < plen:  # still reading the prompt: the choice is unused
      return {"gumbel": zeros}
    return {"gumbel": gumbel_noise(seed, t, d.batch, d.config.vocab,
                                   d.memory_length)}
  return _run(step, prompts, num_steps, extra)


def beam_search(step, prompts, num_steps):
  """Beam search: keeps the ``beam_size`` hypotheses of highest total
  log-probability.

  Every step the devices return each row's ``beam_size`` best next tokens;
  the host keeps the best ``beam_size`` of the ``beam_size**2`` candidates
  of each sequence (ties: lowest beam, then lowest rank), and the next step
  reorders the caches by the kept candidates' parents.

  Args:
    step: a :class:`DecodeStep` of a ``mode="beam"`` graph whose batch is
      ``len(prompts) * beam_size``.
    prompts: int ids ``[sequences, prompt_length]``.
    num_steps: tokens to generate.

  Returns:
    ``(tokens, scores)``: int32 ``[sequences, beam_size, prompt_length +
    num_steps]``, best hypothesis first, and their float64 total
    log-probabilities ``[sequences, beam_size]``.
  """
  _check_mode(step, "beam")
  d = step.decoding
  k = d.beam_size
  n = d.batch // k
  prompts, total = _prompts(step, prompts, num_steps, n)
  plen = prompts.shape[1]
  tokens = np.zeros((n, k, total), np.int32)
  tokens[:, :, :plen] = prompts[:, None, :]
  scores = np.full((n, k), -np.inf)
  scores[:, 0] = 0.0  # the beams start identical: expand only the first
  parents = np.arange(n * k, dtype=np.int32)
  identity = parents.copy()
  for t in range(total - 1):
    out = step(ids=tokens[:, :, t].reshape(-1),
               position=np.full(d.batch, t, np.int32), parents=parents)
    parents = identity
    if t + 1 < plen:
      continue
    logp = out["beam_log_probs"].numpy().astype(np.float64).reshape(n, k, k)
    ids = out["beam_ids"].numpy().reshape(n, k, k)
    cand = (scores[:, :, None] + logp).reshape(n, k * k)
    order = np.argsort(-cand, axis=1, kind="stable")[:, :k]
    beam_of, rank = order // k, order % k
    rows = np.arange(n)[:, None]
    scores = cand[rows, order]
    tokens = tokens[rows, beam_of]
    tokens[:, :, t + 1] = ids[rows, beam_of, rank]
    parents = (rows * k + beam_of).reshape(-1).astype(np.int32)
  return tokens, scores


def decode(step, prompts, num_steps, seed=0):
  """Decodes with the step's mode; returns the best tokens ``[sequences,
  prompt_length + num_steps]`` (beam search: the best hypothesis)."""
  mode = step.decoding.mode
  if mode == "greedy":
    return greedy_decode(step, prompts, num_steps)
  if mode == "sample":
    return sample_decode(step, prompts, num_steps, seed)
  return beam_search(step, prompts, num_steps)[0][:, 0]
