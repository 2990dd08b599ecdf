"""Measured collective costs: what calibration fits, and how it prices.

The ring formulas of :mod:`costmodels.collectives` describe datasheet
hardware running bandwidth-optimal algorithms.  A calibrated link instead
carries, per collective kind, what the lowering *really* runs on those
devices and what it was measured to cost.  Each :class:`CollectiveFit` is

    ``T(p, n) = latency_s * steps(p) + volume(p, n) / bandwidth_bytes_per_s``

for ``p`` participants along the link and ``n`` input bytes per
participant, where ``steps`` and ``volume`` are *laws* named in the fit
(:data:`STEP_LAWS`, :data:`VOLUME_LAWS`).  Calibration picks, per kind, the
law pair whose least-squares fit leaves the smallest residual, so that the
shape of the curve is measured too, not assumed.  The laws are the generic
forms of the algorithms the placement backend uses:

* ``allreduce``: the group's first device sums once and copies the result
  out (``reduce_broadcast``).  A link may carry several fits of one kind,
  told apart by ``min_bytes`` (an algorithm that switches with size);
* ``allgather`` (the trace's ``allconcat``): every participant concatenates
  its peers' slices;
* ``alltoall``: split, exchange, concatenate;
* ``permute`` (the trace's ``receive``, a shift): one copy per participant.

Kinds are the canonical names of :mod:`costmodels.collectives`
(``allreduce``, ``allgather``, ``reduce_scatter``, ``alltoall``,
``permute``).

Example:
  >>> f = CollectiveFit("allreduce", "reduce_broadcast", 1e-5, 1e9,
  ...                   steps="1", volume="(p-1)n")
  >>> round(f.time_s(4, 1_000_000) * 1e3, 3)   # 10 us + 3 MB at 1 GB/s
  3.01
"""

from typing import NamedTuple, Optional

from mesh_tf.core.errors import MtfError

STEP_LAWS = {
    "1": lambda p: 1.0,
    "p-1": lambda p: float(p - 1),
}

VOLUME_LAWS = {
    "n": lambda p, n: float(n),
    "(p-1)n/p": lambda p, n: (p - 1) / p * n,
    "(p-1)n": lambda p, n: float((p - 1) * n),
    "pn": lambda p, n: float(p * n),
}


class CollectiveFit(NamedTuple):
  """The measured cost of one collective kind over one kind of link.

  Attributes:
    kind: canonical collective kind (see the module docstring).
    algorithm: what the lowering runs, e.g. ``"reduce_broadcast"``.
    latency_s: seconds per step (``steps(p)`` of them).
    bandwidth_bytes_per_s: bytes of ``volume(p, n)`` moved per second.
    steps: a key of :data:`STEP_LAWS`.
    volume: a key of :data:`VOLUME_LAWS`.
    min_bytes: the fit prices inputs of at least this many bytes per
      participant (the lowering switches algorithm at a size).
    rel_residual: the fit's RMS relative residual on its samples.
    samples: how many timings it was fitted on.
  """
  kind: str
  algorithm: str
  latency_s: float
  bandwidth_bytes_per_s: float
  steps: str = "1"
  volume: str = "n"
  min_bytes: int = 0
  rel_residual: float = 0.0
  samples: int = 0

  def time_s(self, p, nbytes):
    """Seconds for ``p`` participants holding ``nbytes`` each."""
    if p <= 1:
      return 0.0
    return (self.latency_s * STEP_LAWS[self.steps](p)
            + VOLUME_LAWS[self.volume](p, nbytes)
            / self.bandwidth_bytes_per_s)

  def __repr__(self):
    return (f"CollectiveFit({self.kind}/{self.algorithm} from "
            f"{self.min_bytes} B: {self.latency_s * 1e6:.3g} us x "
            f"{self.steps} + {self.volume} at "
            f"{self.bandwidth_bytes_per_s / 1e9:.3g} GB/s)")


def check_fit(fit):
  """Raises MtfError for a fit with an unknown law or a non-positive
  bandwidth; returns the fit."""
  if fit.steps not in STEP_LAWS:
    raise MtfError(f"collective fit {fit.kind}/{fit.algorithm} has step law "
                   f"{fit.steps!r}; use one of {sorted(STEP_LAWS)}")
  if fit.volume not in VOLUME_LAWS:
    raise MtfError(f"collective fit {fit.kind}/{fit.algorithm} has volume "
                   f"law {fit.volume!r}; use one of {sorted(VOLUME_LAWS)}")
  if not fit.bandwidth_bytes_per_s > 0 or fit.latency_s < 0:
    raise MtfError(f"collective fit {fit.kind}/{fit.algorithm} needs a "
                   "positive bandwidth and a non-negative latency, got "
                   f"{fit.bandwidth_bytes_per_s} B/s and {fit.latency_s} s")
  return fit


def find_fit(fits, kind, nbytes) -> Optional[CollectiveFit]:
  """The fit of ``kind`` for inputs of ``nbytes``: the one with the largest
  ``min_bytes`` not above ``nbytes``; None if ``fits`` has no such kind."""
  best = None
  for f in fits:
    if f.kind == kind and f.min_bytes <= nbytes and (
        best is None or f.min_bytes > best.min_bytes):
      best = f
  if best is None:
    # Below every threshold: the smallest one still describes the kind.
    of_kind = [f for f in fits if f.kind == kind]
    if of_kind:
      best = min(of_kind, key=lambda f: f.min_bytes)
  return best


def measured_phases(kind, nbytes, links):
  """``(LinkParams, seconds)`` per physical dimension for a collective over
  links that all carry measured fits of ``kind``; None if one does not.

  Dimensions run one after another, minor-most first; an all-gather's later
  dimensions gather what the earlier ones have already concatenated, and a
  shift is bounded by its slowest dimension (as in the ring model).
  """
  fits = [find_fit(link.measured, kind, nbytes) for link in links]
  if not links or any(f is None for f in fits):
    return None
  out, n = [], float(nbytes)
  for link, f in zip(links, fits):
    if kind == "allgather":
      f = find_fit(link.measured, kind, n)
      out.append((link, f.time_s(link.size, n)))
      n *= link.size
    else:
      out.append((link, f.time_s(link.size, n)))
  if kind == "permute" and len(out) > 1:
    worst = max(out, key=lambda lt: lt[1])
    return [worst]
  return out
