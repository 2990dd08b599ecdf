"""The overlap efficiency of a link: how much of an all-reduce compute
beside it hides (:func:`fit_overlap`)."""

import math

import numpy as np


def overlap_efficiency_of(comm_s, compute_s, both_s):
  """``eta`` of one timed triple (see :func:`fit_overlap`), in [0, 1].

    >>> round(overlap_efficiency_of(1.0, 4.0, 4.5), 6)   # all hidden
    0.5
    >>> round(overlap_efficiency_of(4.0, 1.0, 4.75), 6)  # 0.25 = eta**2
    0.5
  """
  x = comm_s + compute_s - both_s
  if x <= 0 or comm_s <= 0 or compute_s <= 0:
    return 0.0
  eta = x / comm_s if comm_s * comm_s <= x * compute_s else math.sqrt(
      x / compute_s)
  return min(1.0, eta)


def fit_overlap(samples, link):
  """The overlap efficiency of the axes on physical link ``link``, or
  None if it has no overlap timings.

  Per timed triple -- an all-reduce alone (``M``), an einsum chain alone
  (``C``), both in one call (``T``) -- the cost model's law with the sync
  released as compute starts (:mod:`costmodels.overlap`: exposed ``E =
  max(0, M - eta C)``, and each hidden second slows the compute by ``1 -
  eta``), ``T = C + E + (1 - eta)(M - E)``, is solved for ``eta`` with the
  saving ``x = M + C - T``: ``eta = x / M`` where the compute hides all of
  the communication (``M**2 <= x C``), else ``eta = sqrt(x / C)``.  The
  estimate is the median over triples, clipped to ``[0, 1]``.

  Returns:
    ``(eta, samples, rel_spread)``: the median, the triple count and the
    median absolute deviation of the per-triple values.
  """
  parts = {}
  for s in samples:
    if s.what.startswith("overlap_") and s.link == link:
      parts.setdefault((s.axis, s.nbytes, s.flops), {})[s.what] = s.seconds
  etas = []
  for p in parts.values():
    if len(p) == 3:
      m, c, t = p["overlap_comm"], p["overlap_compute"], p["overlap_both"]
      etas.append(overlap_efficiency_of(m, c, t))
  if not etas:
    return None
  eta = float(np.median(etas))
  return eta, len(etas), float(np.median(np.abs(np.array(etas) - eta)))
