r"""The exposed communication of a layout as CP-SAT terms.

:mod:`costmodels.overlap` and :mod:`costmodels.prefetch` price the gradient
syncs hidden under the backward pass, the parameter gathers prefetched
under earlier compute, and the compute the hidden part slows.  Here the same
laws are written over the scope tables' overlap terms
(:attr:`autolayout.search.formulation.Table.terms`): suffix chains for the syncs,
prefix chains for the gathers, and a division equality for the
interference, each exact up to the rounding of one coefficient
(:func:`add_overlap_constraints`); :func:`exposed_sync_value` evaluates the
same laws in floats for one layout.
"""

import fractions
import math
from typing import NamedTuple

import numpy as np

from ortools.sat.python import cp_model

from costmodels import overlap as cm_overlap
from costmodels import prefetch as cm_prefetch
from autolayout.search.formulation import TableChoice


class _Terms:
  """The overlap terms of ``parts`` (``((Variables, tables), ...)``) by
  key, in units of ``unit`` seconds: each term's rounded columns per table
  (numpy, once per key and scale, although the chains of every axis ask
  for the same work and window terms), and each table's variables.

  A chain step's expression is then one coefficient per table choice,
  its terms' rounded coefficients summed (:meth:`expression`): the same
  linear form as the terms added one by one, with a tenth of the entries
  (a per-group-stage program of transformer_tiny: 32 prefetch windows of
  1,700 choices each summed into a few constraints; 0.16 s of its 0.26 s
  build was writing them term by term)."""

  def __init__(self, parts, unit):
    self.unit = unit
    self.ys = []       # per table with terms: its y variables
    self.by_key = {}   # key -> [(table position, column of seconds)]
    self._rounded = {}
    for v, tables in parts:
      for tb in tables:
        if not tb.terms:
          continue
        t = len(self.ys)
        self.ys.append([v.y[TableChoice(tb.scope, sigma)]
                        for sigma in tb.choices])
        for k, col in tb.terms:
          self.by_key.setdefault(k, []).append(
              (t, np.asarray(col, dtype=np.float64)))

  def linear(self, key, scale=1.0):
    """The term ``key`` in units, ``((table position, coefficients),
    ...)``: each choice's ``round(scale * seconds / unit)`` (``np.rint``
    rounds half to even, as ``round`` does)."""
    hit = self._rounded.get((key, scale))
    if hit is None:
      hit = self._rounded[(key, scale)] = tuple(
          (t, np.rint(scale * col / self.unit).astype(np.int64))
          for t, col in self.by_key.get(key, ()))
    return hit

  def expression(self, plus, minus=()):
    """``sum(plus) - sum(minus)`` of terms (each :meth:`linear`'s) as one
    weighted sum, a coefficient per table choice."""
    acc = {}
    for sign, group in ((1, plus), (-1, minus)):
      for term in group:
        for t, q in term:
          if t in acc:
            acc[t] = acc[t] + sign * q
          else:
            acc[t] = sign * q
    ys, coeffs = [], []
    for t in sorted(acc):
      nz = np.flatnonzero(acc[t])
      ys += [self.ys[t][i] for i in nz.tolist()]
      coeffs += acc[t][nz].tolist()
    return cp_model.LinearExpr.weighted_sum(ys, coeffs)


def _present(term):
  """Whether a term has any nonzero coefficient."""
  return any(q.any() for _, q in term)


def _count(terms):
  """The rounded (nonzero) coefficients of ``terms``."""
  return sum(int(np.count_nonzero(q)) for term in terms for _, q in term)


def _coefficient_sum(terms):
  return sum(int(q.sum()) for term in terms for _, q in term)


def _exposed_sync(model, terms, spec, a, eta):
  r"""``(e_a or None, rounded, the syncs' terms)``: the suffix chain of one
  axis's syncs."""
  nb = spec.num_buckets
  sync = {b: terms.linear(("sync", b, a)) for b in range(nb)}
  if not any(_present(s) for s in sync.values()):
    return None, 0, ()
  work = {s: terms.linear(("work", s), eta) for s in range(1, nb + 1)}
  taken = {s: terms.linear(("taken", s, a)) for s in range(1, nb + 1)}
  coupled = any(_present(t) for t in taken.values())
  hi = (_coefficient_sum(sync.values()) + _coefficient_sum(taken.values())
        + 1)
  lo = -hi - _coefficient_sum(work.values())
  # Each suffix is a variable Z_b = Z_{b+1} + (terms of bucket b), and e
  # is their max with 0 as an equality (tight whatever the objective,
  # so later phases and rounding cannot leave slack in it).
  zs, nxt, rounded = [], None, 0
  for b in range(nb - 1, -1, -1):
    plus = [sync[b], taken[b + 1]]
    rounded += _count(plus) + _count([work[b + 1]])
    z = model.new_int_var(lo, hi, f"suffix[{a},{b}]")
    expr = terms.expression(plus, [work[b + 1]])
    model.add(z == (expr + nxt if nxt is not None else expr))
    zs.append(z)
    nxt = z
  e = model.new_int_var(0, hi, f"exposed_sync[{a}]")
  if not coupled:
    model.add_max_equality(e, [0] + zs)
    return e, rounded, tuple(sync.values())
  # Gathers due after a release take compute capacity first; the syncs
  # exposed are then at most all of them.
  m = model.new_int_var(0, hi, f"sync_queue[{a}]")
  model.add_max_equality(m, [0] + zs)
  total = model.new_int_var(0, hi, f"sync_total[{a}]")
  model.add(total == terms.expression(sync.values()))
  model.add_min_equality(e, [m, total])
  return e, rounded, tuple(sync.values())


def _exposed_prefetch(model, terms, spec, a, eta):
  r"""``(p_a or None, rounded, the gathers' terms)``: the prefix chain of
  one axis's gathers."""
  npf = spec.num_prefetch
  gath = {b: terms.linear(("gather", b, a)) for b in range(npf)}
  if not any(_present(g) for g in gath.values()):
    return None, 0, ()
  win = {w: terms.linear(("window", w), eta) for w in range(npf)}
  hi = _coefficient_sum(gath.values()) + 1
  lo = -hi - _coefficient_sum(win.values())
  # Q_b = Q_{b-1} + g_b - eta C_b; a bucket without gathers on this axis
  # never holds the max, so its window joins the next variable's terms.
  qs, prev, pending, rounded = [], None, [], 0
  for b in range(npf):
    pending.append(win[b])
    if not _present(gath[b]):
      continue
    rounded += _count([gath[b]]) + _count(pending)
    q = model.new_int_var(lo, hi, f"prefix[{a},{b}]")
    expr = terms.expression([gath[b]], pending)
    model.add(q == (expr + prev if prev is not None else expr))
    qs.append(q)
    prev, pending = q, []
  p = model.new_int_var(0, hi, f"exposed_prefetch[{a}]")
  model.add_max_equality(p, [0] + qs)
  return p, rounded, tuple(gath.values())


def add_overlap_constraints(model, v, tables, spec, unit):
  r"""The exposed gradient-sync and prefetch time :math:`\sum_a (e_a +
  p_a)` (in units).

  For each axis :math:`a` with syncs and bucket :math:`b = B-1 \dots 0`:

  .. math::
     Z_{b,a} = Z_{b+1,a} + \sum_{S,\sigma} \lfloor c_{S,\sigma,b,a}/u
     \rceil y_{S,\sigma} - \sum_{S,\sigma} \lfloor \eta_a
     w_{S,\sigma,b+1}/u \rceil y_{S,\sigma} + \sum_{S,\sigma} \lfloor
     t_{S,\sigma,b+1,a}/u \rceil y_{S,\sigma}, \quad Z_{B,a} = 0,
     \qquad e_a = \max(0, Z_{0,a}, \dots, Z_{B-1,a}):

  :math:`Z_{b,a}` is the suffix :math:`\sum_{b' \ge b} c_{b',a} -
  \eta_a W_b + T_{b,a}` of :mod:`costmodels.overlap` (:math:`t`: the
  prefetched gathers due in a segment; with any, :math:`e_a` is also at
  most the syncs' total :math:`\sum_b c_{b,a}`), so :math:`e_a = E_a`.
  For each axis with prefetched gathers and prefetch bucket :math:`b = 0
  \dots B'-1`:

  .. math::
     Q_{b,a} = Q_{b-1,a} + \sum_{S,\sigma} \lfloor g_{S,\sigma,b,a}/u
     \rceil y_{S,\sigma} - \sum_{S,\sigma} \lfloor \eta_a
     C_{S,\sigma,b}/u \rceil y_{S,\sigma}, \quad Q_{-1,a} = 0,
     \qquad p_a = \max(0, Q_{0,a}, \dots):

  the prefix of :mod:`costmodels.prefetch`, so :math:`p_a = P_a`.

  The interference :math:`I_a = (1 - \eta_a) H_a` of the hidden time
  :math:`h_a = \sum_b c_{b,a} + \sum_b g_{b,a} - e_a - p_a \ge 0` is
  :math:`i_a = \lceil n_a h_a / d_a \rceil` (a division equality, exact
  whatever the objective), with :math:`n_a / d_a` the fraction
  :math:`1 - \eta_a`.

  Returns an :class:`OverlapTerms`.
  """
  if spec is None or not (spec.num_buckets or spec.num_prefetch):
    return OverlapTerms(0, 0, 0)
  terms = _Terms([(v, tables)], unit)
  axes = sorted({k[2] for tb in tables for k, _ in tb.terms
                 if k[0] in ("sync", "gather")})
  total, lost, rounded = [], [], 0
  for a in axes:
    eta = spec.efficiency.get(a, 0.0)
    mine, comm = [], []
    for build in (_exposed_sync, _exposed_prefetch):
      var, r, own = build(model, terms, spec, a, eta)
      if var is not None:
        total.append(var)
        mine.append(var)
        comm.extend(own)
        rounded += r
    i, r = _interference(model, a, eta, terms, comm, mine)
    if i is not None:
      lost.append(i)
      rounded += r
  if not total:
    return OverlapTerms(0, 0, 0)
  return OverlapTerms(sum(total), sum(total) + sum(lost), rounded)


class OverlapTerms(NamedTuple):
  r"""The overlap part of the objectives, in units: ``exposed``
  (:math:`\sum_a e_a + p_a`, communication the step waits for) and
  ``time`` (that plus the interference :math:`\sum_a i_a`); ``rounded``
  counts the rounded coefficients (0: no overlap terms)."""
  exposed: object
  time: object
  rounded: int


#: Largest denominator of the fraction :math:`1 - \eta_a` in CP-SAT (the
#: hidden time, up to about TIME_UNITS_TOTAL, times its numerator stays
#: far inside int64).
_INTERFERENCE_DENOMINATOR = 10**5


def _interference(model, a, eta, terms, comm, exposed):
  """``(i_a or None, rounded)``: the compute axis ``a``'s hidden
  communication costs (see :func:`add_overlap_constraints`); ``comm``:
  the axis's sync and gather terms (of ``terms``, a :class:`_Terms`),
  ``exposed``: its e_a and p_a."""
  frac = fractions.Fraction(1.0 - eta).limit_denominator(
      _INTERFERENCE_DENOMINATOR)
  if frac <= 0:
    return None, 0
  if not any(_present(t) for t in comm):
    return None, 0
  hi = _coefficient_sum(comm) + 1
  h = model.new_int_var(0, hi, f"hidden[{a}]")
  model.add(h == terms.expression(comm) - sum(exposed))
  n, d = frac.numerator, frac.denominator
  num = model.new_int_var(d - 1, n * hi + d - 1, f"hidden_scaled[{a}]")
  model.add(num == n * h + (d - 1))
  i = model.new_int_var(0, n * hi // d + 1, f"interference[{a}]")
  model.add_division_equality(i, num, d)
  return i, _count(comm) + 2


def exposed_sync_value(spec, terms, with_interference=False):
  r""":math:`\sum_a (E_a + P_a)` in seconds from the summed ``Table.terms``
  of one layout (``{key: seconds}``), by the cost model's own formulas
  (with ``with_interference``, plus :math:`\sum_a I_a`: the step time's
  overlap part); 0.0 without overlap."""
  if spec is None:
    return 0.0
  nb, npf = spec.num_buckets, spec.num_prefetch
  work = [0.0] + [terms.get(("work", s), 0.0) for s in range(1, nb + 1)]
  window = [terms.get(("window", w), 0.0) for w in range(npf)]
  total = 0.0
  for a in sorted({k[2] for k in terms if k[0] in ("sync", "gather")}):
    eta = spec.efficiency.get(a, 0.0)
    sync = [terms.get(("sync", b, a), 0.0) for b in range(nb)]
    taken = [0.0] + [terms.get(("taken", s, a), 0.0)
                     for s in range(1, nb + 1)]
    gather = [terms.get(("gather", b, a), 0.0) for b in range(npf)]
    e = cm_overlap.exposed_sync_time(sync, work, eta, taken)
    p = cm_prefetch.exposed_prefetch_time(gather, window, eta)
    total += e + p
    if with_interference:
      hidden = (max(0.0, math.fsum(sync) - e)
                + max(0.0, math.fsum(gather) - p))
      total += cm_overlap.interference_time(hidden, eta)
  return total
