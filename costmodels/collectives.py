"""Alpha-beta costs of collectives: pure functions of bytes, group size and
link parameters.

Notation: ``p`` participants, ``alpha`` the per-step latency (seconds),
``B`` the bandwidth (bytes/s) one participant has *in one direction* towards
its neighbour (ring, line) or the switch, after links shared by concurrent
groups are divided (see :class:`LinkParams`).  ``n`` is the per-participant
message size in bytes.

Structures:

* ``ring``: a wraparound ring of bidirectional links.  Ring algorithms send
  half of the data clockwise and half counter-clockwise, so they run at
  ``2B``.
* ``line``: a chain without wraparound.  A ring embedded in a line uses every
  link once in each direction per step, so it runs at ``B``.
* ``switch``: every participant has ``B`` into a non-blocking switch
  (NVSwitch, an InfiniBand fat tree); ring algorithms run at ``B``.

The ring formulas (Patarasuk & Yuan, "Bandwidth optimal all-reduce algorithms
for clusters of workstations", JPDC 2009; Thakur, Rabenseifner & Gropp,
"Optimization of collective communication operations in MPICH", IJHPCA 2005)
are, with ``b_alg`` the algorithm bandwidth (``2B`` on a ring, else ``B``):

* reduce-scatter of ``n`` bytes: ``(p-1) alpha + (p-1)/p * n / b_alg``
* all-gather of ``n`` bytes *per participant*: ``(p-1) alpha + (p-1) n / b_alg``
* all-reduce = reduce-scatter + all-gather: ``2(p-1) alpha + 2(p-1)/p n/b_alg``

On a torus (several segments, one per physical dimension) collectives run
dimension by dimension, as in the 2D-torus all-reduce of Ying et al., "Image
Classification at Supercomputer Scale" (2018) and Mikami et al. (2018):
reduce-scatter along each dimension in turn, each on the data left by the
previous one, then all-gather back in reverse order.  The first dimension
carries the most data, so the fastest dimension goes first.
"""

import math
from typing import NamedTuple, Tuple

from mesh_tf.core.errors import MtfError
from costmodels import collective_fits

STRUCTURES = ("ring", "line", "switch")


class LinkParams(NamedTuple):
  """The links one group of a collective uses along one physical dimension.

  Attributes:
    size: participants along this dimension.
    bandwidth_bytes_per_s: ``B``: bytes/s each participant sends in one
      direction, after sharing with concurrent groups.
    latency_s: ``alpha``, per algorithm step.
    structure: ``"ring"``, ``"line"`` or ``"switch"``.
    owners: mesh-axis names this dimension belongs to (for attributing time
      to mesh axes; not used by the formulas).
    measured: the link's calibrated
      :class:`~costmodels.collective_fits.CollectiveFit` entries; a kind
      with an entry on every link is priced by them instead of the ring
      formulas.
    barrier_s: the link's fixed cost per collective
      (:attr:`costmodels.hardware.LinkSpec.barrier_s`).
  """
  size: int
  bandwidth_bytes_per_s: float
  latency_s: float
  structure: str = "ring"
  owners: Tuple[str, ...] = ()
  measured: tuple = ()
  barrier_s: float = 0.0

  @property
  def algorithm_bandwidth_bytes_per_s(self):
    """Bandwidth of a ring algorithm on these links; see
    :func:`algorithm_bandwidth`."""
    return algorithm_bandwidth(self.bandwidth_bytes_per_s, self.structure)


def _check(structure, p):
  if structure not in STRUCTURES:
    raise MtfError(f"unknown link structure {structure!r}; use one of "
                   f"{STRUCTURES}")
  if p < 1:
    raise MtfError(f"a collective needs at least one participant, got {p}")


def algorithm_bandwidth(bandwidth_bytes_per_s, structure):
  """``b_alg``, the bandwidth a ring algorithm gets: ``2B`` on a ring (half
  the data goes each way round), ``B`` on a line or a switch.

  Example:
    >>> algorithm_bandwidth(100.0, "ring"), algorithm_bandwidth(100.0, "line")
    (200.0, 100.0)
  """
  return bandwidth_bytes_per_s * (2 if structure == "ring" else 1)


def reduce_scatter_time(nbytes, group_size, bandwidth_bytes_per_s, latency_s,
                        structure="ring"):
  """Ring reduce-scatter of ``nbytes`` per participant (each ends with 1/p).

  ``T = (p-1) alpha + (p-1)/p * n / b_alg``.

  Example:
    >>> reduce_scatter_time(800, 4, 100.0, 0.0, "line")
    6.0
  """
  p = group_size
  _check(structure, p)
  if p == 1:
    return 0.0
  b_alg = algorithm_bandwidth(bandwidth_bytes_per_s, structure)
  return (p - 1) * latency_s + (p - 1) / p * nbytes / b_alg


def allgather_time(nbytes_per_device, group_size, bandwidth_bytes_per_s,
                   latency_s, structure="ring"):
  """Ring all-gather (all-concat): each participant starts with
  ``nbytes_per_device`` and ends with ``p`` times that.

  ``T = (p-1) alpha + (p-1) n / b_alg``.

  Example:
    >>> allgather_time(100, 4, 100.0, 0.0, "switch")
    3.0
  """
  p = group_size
  _check(structure, p)
  if p == 1:
    return 0.0
  b_alg = algorithm_bandwidth(bandwidth_bytes_per_s, structure)
  return (p - 1) * latency_s + (p - 1) * nbytes_per_device / b_alg


def allreduce_time(nbytes, group_size, bandwidth_bytes_per_s, latency_s,
                   structure="ring"):
  """Ring all-reduce of ``nbytes`` per participant.

  ``T = 2(p-1) alpha + 2(p-1)/p * n / b_alg`` (reduce-scatter + all-gather).

  Example:
    >>> allreduce_time(800, 4, 100.0, 0.0, "ring")
    6.0
  """
  return 2 * reduce_scatter_time(nbytes, group_size, bandwidth_bytes_per_s,
                                 latency_s, structure)


def alltoall_time(nbytes, group_size, bandwidth_bytes_per_s, latency_s,
                  structure="switch"):
  """All-to-all: each participant holds ``nbytes`` and sends ``n/p`` to each.

  * switch: ``(p-1) alpha + (p-1)/p * n / B`` (each port sends all but its
    own part);
  * ring: shortest-path routing, load spread over the ``2p`` directed links:
    ``(p-1) alpha + n * S / (2 p B)`` with ``S = sum_k min(k, p-k)``, the
    total hop distance from one participant to all others;
  * line: the middle link carries ``floor(p/2) ceil(p/2)`` parts of ``n/p``:
    ``(p-1) alpha + n/p * floor(p/2) * ceil(p/2) / B``.

  Example:
    >>> alltoall_time(400, 4, 100.0, 0.0, "line")
    4.0
  """
  p = group_size
  _check(structure, p)
  if p == 1:
    return 0.0
  b = bandwidth_bytes_per_s
  if structure == "switch":
    t = (p - 1) / p * nbytes / b
  elif structure == "ring":
    s = sum(min(k, p - k) for k in range(1, p))
    t = nbytes * s / (2 * p * b)
  else:
    t = nbytes / p * (p // 2) * ((p + 1) // 2) / b
  return (p - 1) * latency_s + t


def permute_time(nbytes, group_size, bandwidth_bytes_per_s, latency_s,
                 structure="ring", offset=1):
  """A shift (collective permute): every participant sends ``nbytes`` to the
  one ``offset`` places along.

  One step: ``alpha + d * n / B``, where ``d`` is the number of groups'
  messages that share a directed link: ``min(offset, p - offset)`` on a ring,
  ``offset`` on a line, 1 on a switch.

  Example:
    >>> permute_time(100, 8, 100.0, 0.5, "ring", offset=2)
    2.5
  """
  p = group_size
  _check(structure, p)
  if p == 1:
    return 0.0
  k = offset % p
  if k == 0:
    return 0.0
  if structure == "ring":
    d = min(k, p - k)
  elif structure == "line":
    d = k
  else:
    d = 1
  return latency_s + d * nbytes / bandwidth_bytes_per_s


# --- several dimensions (torus, node x GPU) --------------------------------
def _rs_order(links):
  # Fastest dimension first; ties keep the given (minor-first) order.
  return sorted(links, key=lambda l: -l.algorithm_bandwidth_bytes_per_s)


def reduce_scatter_phases(nbytes, links):
  """Per-dimension times of a dimension-ordered reduce-scatter.

  Returns a list of ``(LinkParams, seconds)`` in execution order: dimension
  ``i`` reduce-scatters the ``n / (p_0 ... p_{i-1})`` bytes left by the
  previous ones.
  """
  out, m = [], float(nbytes)
  for l in _rs_order(links):
    out.append((l, reduce_scatter_time(m, l.size, l.bandwidth_bytes_per_s,
                                       l.latency_s, l.structure)))
    m /= l.size
  return out


def torus_reduce_scatter_time(nbytes, links):
  """Dimension-ordered reduce-scatter over ``links`` (see the module doc):
  ``sum_i (p_i-1) alpha_i + (p_i-1)/p_i * n_i / b_alg_i``, with
  ``n_0 = n`` and ``n_{i+1} = n_i / p_i``, fastest dimension first.

  Example (a 2x2 line torus, B = 100 B/s, no latency):
    >>> links = [LinkParams(2, 100.0, 0.0, "line")] * 2
    >>> torus_reduce_scatter_time(800, links)   # 400/100 + 200/100
    6.0
  """
  return sum(t for _, t in reduce_scatter_phases(nbytes, links))


def torus_allreduce_time(nbytes, links):
  """Reduce-scatter then all-gather in reverse order: twice the
  reduce-scatter time (the all-gather phases move the same bytes)."""
  return 2 * torus_reduce_scatter_time(nbytes, links)


def torus_allgather_time(nbytes_per_device, links):
  """All-gather of ``n`` per participant: the reverse of a reduce-scatter of
  ``n * prod(p_i)`` bytes, so it takes the same time."""
  p = math.prod(l.size for l in links)
  return torus_reduce_scatter_time(nbytes_per_device * p, links)


def torus_alltoall_time(nbytes, links):
  """Dimension-ordered all-to-all: each dimension in turn exchanges all
  ``n`` bytes among its ``p_i`` participants: ``sum_i alltoall_i(n)``."""
  return sum(alltoall_time(nbytes, l.size, l.bandwidth_bytes_per_s,
                           l.latency_s, l.structure) for l in links)


def torus_permute_time(nbytes, links, offset=1):
  """A shift by ``offset`` in the row-major order of the group: bounded by
  the slowest dimension, ``max_i permute_i(n)``."""
  if not links:
    return 0.0
  if len(links) == 1:
    l = links[0]
    return permute_time(nbytes, l.size, l.bandwidth_bytes_per_s, l.latency_s,
                        l.structure, offset)
  return max(permute_time(nbytes, l.size, l.bandwidth_bytes_per_s,
                          l.latency_s, l.structure, 1) for l in links)


def phase_times(kind, nbytes, links):
  """``(LinkParams, seconds)`` per phase of collective ``kind``; the seconds
  sum to :func:`time_on_links`.  Used to attribute time to mesh axes.

  The largest ``barrier_s`` of ``links`` is paid once, by the phase of the
  link it belongs to: the group waits for its slowest member once, however
  many links its data crosses (a group of one waits for no one).

  Example:
    >>> l = LinkParams(2, 1e9, 0.0, "switch", ("a",), barrier_s=1e-4)
    >>> [round(t * 1e6, 3) for _, t in phase_times("permute", 1000, [l])]
    [101.0]
  """
  links = list(links)
  if not links:
    return []
  phases = list(_law_phases(kind, nbytes, links))
  wait = barrier_phase(links)
  if wait is None:
    return phases
  slow = wait[0]
  for i, (l, t) in enumerate(phases):
    if l is slow:
      phases[i] = (l, t + slow.barrier_s)
      return phases
  return phases + [(slow, slow.barrier_s)]


def barrier_phase(links):
  """``(link, seconds)`` of the barrier a collective over ``links`` pays
  (the largest ``barrier_s``, on its link; see :func:`phase_times`), or
  None when it pays none (no barrier, or a group of one).

  Example:
    >>> a = LinkParams(2, 1e9, 0.0, "switch", ("a",), barrier_s=1e-4)
    >>> b = LinkParams(4, 1e9, 0.0, "switch", ("b",), barrier_s=3e-4)
    >>> barrier_phase([a, b])[1]
    0.0003
  """
  if not links:
    return None
  slow = max(links, key=lambda l: l.barrier_s)
  if not slow.barrier_s > 0 or math.prod(l.size for l in links) < 2:
    return None
  return slow, slow.barrier_s


def _law_phases(kind, nbytes, links):
  """The phases of :func:`phase_times` before the barrier."""
  kind = _KIND_ALIASES.get(kind, kind)
  if any(l.measured for l in links):
    measured = collective_fits.measured_phases(kind, nbytes, links)
    if measured is not None:
      return measured
  if kind == "reduce_scatter":
    return reduce_scatter_phases(nbytes, links)
  if kind == "allreduce":
    return [(l, 2 * t) for l, t in reduce_scatter_phases(nbytes, links)]
  if kind == "allgather":
    p = math.prod(l.size for l in links)
    return reduce_scatter_phases(nbytes * p, links)
  if kind == "alltoall":
    return [(l, alltoall_time(nbytes, l.size, l.bandwidth_bytes_per_s,
                              l.latency_s, l.structure)) for l in links]
  if kind == "permute":
    if len(links) == 1:
      return [(links[0], torus_permute_time(nbytes, links))]
    times = [permute_time(nbytes, l.size, l.bandwidth_bytes_per_s,
                          l.latency_s, l.structure) for l in links]
    worst = max(range(len(links)), key=lambda i: times[i])
    return [(links[worst], times[worst])]
  raise MtfError(f"unknown collective kind {kind!r}; use one of "
                 f"{sorted(set(_KIND_ALIASES))}")


_KIND_ALIASES = {
    "allreduce": "allreduce", "all_reduce": "allreduce",
    "allconcat": "allgather", "allgather": "allgather",
    "all_gather": "allgather",
    "reduce_scatter": "reduce_scatter", "reducescatter": "reduce_scatter",
    "alltoall": "alltoall", "all_to_all": "alltoall",
    "receive": "permute", "permute": "permute", "shift": "permute",
}


def time_on_links(kind, nbytes, links):
  """Seconds of collective ``kind`` over ``links`` (one per dimension).

  ``kind`` is a trace kind (``allreduce``, ``allconcat``, ``alltoall``,
  ``receive``) or ``allgather``, ``reduce_scatter``, ``permute``.  ``nbytes``
  is each participant's *input* size, as in the trace.  A ``receive`` is
  priced as a shift by one (the trace does not record the offset).
  """
  return sum(t for _, t in phase_times(kind, nbytes, links))
