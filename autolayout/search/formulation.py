r"""The layout search as a CP-SAT integer program.

Sets
  * :math:`D`: dim names; :math:`A`: mesh axes of size > 1;
    :math:`A(d)`: the options of dim :math:`d`: axes of :math:`A`, and with
    ``max_axes_per_dim`` > 1 ordered tuples of them, that divide it (and
    only for splittable dims).  :math:`a \ni b` below: option :math:`a`
    uses mesh axis :math:`b`.
  * :math:`\mathcal{S}`: *scope tables*, the maximal dim sets of the cost
    factors (see :mod:`autolayout.search.tables`); every factor's scope lies inside
    one table.  :math:`\Sigma(S)`: the valid local assignments of
    :math:`S \in \mathcal{S}` (:mod:`autolayout.search.assignments`).
  * :math:`\mathcal{T}`: distinct dim sets of tensors.
  * :math:`K`: memory steps, after compressing the schedule (equal live
    multisets merged, dominated ones dropped).

Variables
  * :math:`x_{d,a} \in \{0,1\}`: dim :math:`d` is split over option
    :math:`a` (created only for :math:`a \in A(d)`).
  * :math:`y_{S,\sigma} \in \{0,1\}`: table :math:`S` takes local assignment
    :math:`\sigma`.  Repeated layers share tables, so the model grows with the
    number of distinct dim sets, not with depth.
  * :math:`P \in \mathbb{Z}_{\ge 0}`: peak bytes per device (memory
    objective only).

Constraints
  1. :math:`\sum_{a} x_{d,a} \le 1` for every :math:`d` (one axis per dim).
  2. :math:`\sum_{d \in T} \sum_{a \ni b} x_{d,a} \le 1` for every
     :math:`T \in \mathcal{T}, b \in A` (an axis splits at most one dim of
     a tensor, once).
  3. :math:`\sum_{\sigma} y_{S,\sigma} = 1` for every table.
  4. :math:`x_{d,a} = \sum_{\sigma \in \Sigma(S): \sigma(d) = a}
     y_{S,\sigma}` for every table :math:`S`, :math:`d \in S`, :math:`a`
     (tables agree with the global rules).
  5. :math:`\sum_{S,\sigma} m_{k,S,\sigma} \, y_{S,\sigma} \le M` for every
     step :math:`k`, where :math:`m_{k,S,\sigma}` is the bytes per device of
     the tensors live at step :math:`k` hosted by table :math:`S` under
     :math:`\sigma` and :math:`M` the budget (or :math:`P`).

Objective
  * ``"time"``: :math:`\min \sum_{S,\sigma} \lfloor c_{S,\sigma}/u \rceil
    y_{S,\sigma}`, with :math:`c_{S,\sigma}` the summed compute and
    collective seconds of the table's factors (times their counts) and
    :math:`u` a time unit chosen so that the largest possible total is about
    :math:`10^{12}` units;
  * ``"comm"``: the same with collective seconds only;
  * ``"memory"``: :math:`\min P`.
  * Ties are broken deterministically by later phases that fix the optimum
    of the earlier ones: step time, then memory, then
    :math:`\min \sum_i 2^i x_i` over a fixed order of the :math:`x`
    (a unique solution, so the same input gives the same rules).
"""

import collections
import itertools
from typing import Dict, NamedTuple, Optional, Tuple

import numpy as np

from ortools.sat.python import cp_model

from autolayout.search import assignments

TIME_UNITS_TOTAL = 10**12


class DimAxis(NamedTuple):
  """Key of :math:`x`: a dim name and an option (a mesh-axis name, or a
  tuple of names for a dim over several axes)."""
  dim: str
  axis: assignments.Option


def dim_axis_order(k):
  """A sort key of :class:`DimAxis` (options of mixed types)."""
  return (k.dim, assignments.option_key(k.axis))


class TableChoice(NamedTuple):
  """Key of :math:`y`: a scope table (tuple of dim names) and an assignment."""
  scope: Tuple[str, ...]
  assignment: Tuple[Optional[str], ...]


class Table(NamedTuple):
  """A scope table with its per-assignment costs (seconds).

  ``time_s`` and ``comm_s`` hold everything that is always exposed (all
  compute; every collective but the gradient syncs when overlap is on).
  ``terms`` holds the overlap terms, ``((key, per-choice seconds), ...)``
  with ``key`` one of ``("sync", bucket, axis)`` (gradient-sync seconds on
  that axis), ``("work", segment)`` (compute seconds in that segment),
  ``("gather", prefetch bucket, axis)`` (prefetched gather seconds),
  ``("taken", segment, axis)`` (the same gathers by the sync segment of
  their deadline) or ``("window", window)`` (compute seconds in that
  prefetch window).
  """
  scope: Tuple[str, ...]
  choices: Tuple[Tuple[Optional[str], ...], ...]
  time_s: Tuple[float, ...]
  comm_s: Tuple[float, ...]
  terms: Tuple[Tuple[tuple, Tuple[float, ...]], ...] = ()


class OverlapSpec(NamedTuple):
  r"""What the program needs of :mod:`costmodels.overlap`: the gradient
  bucket count, :math:`\eta_a` per mesh axis and the prefetch bucket count
  (:mod:`costmodels.prefetch`)."""
  num_buckets: int
  efficiency: Dict[str, float]
  num_prefetch: int = 0


class Variables:
  """The typed variable container of the program."""

  def __init__(self):
    self.x: Dict[DimAxis, cp_model.IntVar] = {}
    self.y: Dict[TableChoice, cp_model.IntVar] = {}
    self.peak: Optional[cp_model.IntVar] = None


class Formulation(NamedTuple):
  """A built program: the model, its variables and its objective terms."""
  model: cp_model.CpModel
  vars: Variables
  tables: Tuple[Table, ...]
  objectives: Dict[str, cp_model.LinearExpr]
  units: Dict[str, float]   # seconds (or bytes) per objective unit
  tie_break: Tuple[Tuple[DimAxis, ...], ...]
  memory_steps: int
  overlap: Optional["OverlapSpec"] = None
  rounded_terms: int = 0   # overlap coefficients rounded to units


# --- scope tables ---------------------------------------------------------
def host_scopes(scopes):
  """Maps each scope to the table that hosts it: the smallest maximal scope
  containing it (ties: lexicographically first)."""
  scopes = sorted(set(tuple(s) for s in scopes), key=lambda s: (-len(s), s))
  maximal = []
  for s in scopes:
    ss = set(s)
    if not any(ss <= set(m) for m in maximal):
      maximal.append(s)
  host = {}
  for s in scopes:
    ss = set(s)
    cands = [m for m in maximal if ss <= set(m)]
    host[s] = min(cands, key=lambda m: (len(m), m))
  return host


def _comm_by_axis(tables, f, sub, memo):
  """``(((axis, seconds), ...), {axis: barrier seconds})`` of one
  factor's instance."""
  key = ("axes", f.kind, f.key, sub)
  hit = memo.get(key)
  if hit is None:
    hit = memo[key] = (tables.comm_by_axis(f, sub),
                       dict(tables.wait_by_axis(f, sub)))
  return hit


def build_tables(tables, space, extra_scopes=(), placements=None):
  """Folds every factor of ``tables`` (a GraphTables) into scope tables.

  ``placements`` (from :func:`autolayout.search.overlap_terms.placements`) turns
  overlap on: gradient syncs and prefetched gathers go to ``Table.terms``
  instead of ``comm_s``, and compute is also split by schedule segment and
  prefetch window.

  Returns ``(list of Table, host map scope -> table scope)``.  Local
  assignments under which some factor's lowering is invalid are dropped.
  """
  host = host_scopes([f.scope for f in tables.factors] + list(extra_scopes))
  by_host = collections.defaultdict(list)
  for f in tables.factors:
    by_host[host[f.scope]].append(f)
  out = []
  for scope in sorted(set(host.values())):
    out.append(_scope_table(tables, space, scope, by_host.get(scope, []),
                            placements))
  return out, host


def _scope_table(tables, space, scope, factors, placements):
  r"""The :class:`Table` of one host ``scope``: per local assignment
  :math:`\sigma`, the sums over its factors, as arrays over every
  :math:`\sigma` at once.  Each factor is priced once per assignment of
  its own (smaller) scope and gathered onto the :math:`\sigma` (a scope
  has up to thousands; a per-group-stage candidate of transformer_tiny
  spent most of its 0.5 s here one :math:`\sigma` and factor at a time).
  The sums run factor by factor in the same order as a per-:math:`\sigma`
  loop would, so every float is the same."""
  sigmas = assignments.local_assignments(space, scope)
  n = len(sigmas)
  pos = {d: i for i, d in enumerate(scope)}
  ok = np.ones(n, dtype=bool)
  t_sum, c_sum = np.zeros(n), np.zeros(n)
  extra = {}   # term key -> (per-sigma value, per-sigma touched)
  memo = {}
  gathers = {}   # a factor scope's positions -> (its assignments, index)
  codes = _codes(sigmas, len(scope))
  for f in factors:
    pick = tuple(pos[d] for d in f.scope)
    if pick not in gathers:
      gathers[pick] = _gather(sigmas, codes, pick)
    subs, inv = gathers[pick]
    vals = []
    for sub in subs:
      v = memo.get((f.kind, f.key, sub))
      if v is None:
        v = memo[(f.kind, f.key, sub)] = tables.value(f, sub)
      vals.append(v)
    ok &= np.array([v[0] for v in vals], dtype=bool)[inv]
    compute = np.array([v[1] for v in vals], dtype=np.float64)[inv]
    comm = np.array([v[2] for v in vals], dtype=np.float64)[inv]
    pl = placements[(f.kind, f.key)] if placements else None
    plain = f.count if pl is None else pl.plain
    t_sum += f.count * compute + plain * comm
    c_sum += plain * comm
    if pl is not None:
      _add_terms(extra, tables, f, pl, subs, vals, inv, memo)
  keep = np.flatnonzero(ok)
  keys = sorted((k for k, (_, touched) in extra.items()
                 if touched[keep].any()), key=repr)
  return Table(scope, tuple(sigmas[i] for i in keep.tolist()),
               tuple(t_sum[keep].tolist()), tuple(c_sum[keep].tolist()),
               tuple((k, tuple(extra[k][0][keep].tolist())) for k in keys))


def _codes(sigmas, width):
  """``sigmas`` (tuples of ``width`` options) as an int array, each
  position's options numbered in the order first seen."""
  numbers = [{} for _ in range(width)]
  return np.array([[numbers[i].setdefault(o, len(numbers[i]))
                    for i, o in enumerate(sigma)] for sigma in sigmas],
                  dtype=np.int64).reshape(len(sigmas), width)


def _gather(sigmas, codes, pick):
  """``(subs, inv)``: the distinct restrictions of ``sigmas`` to the
  positions ``pick``, in first-seen order, and each sigma's index into
  them (``codes``: :func:`_codes` of ``sigmas``; the rows found with
  numpy, not one tuple per sigma and factor scope)."""
  n = len(sigmas)
  if not pick or not n:
    return ([()] if n else []), np.zeros(n, dtype=np.int64)
  cols = codes[:, list(pick)]
  radix = cols.max(axis=0) + 1
  if float(np.prod(radix, dtype=np.float64)) < 2.0**62:
    # One integer per row (mixed radix): a 1-d unique, not one of rows.
    keys = np.zeros(n, dtype=np.int64)
    for i in range(len(pick)):
      keys = keys * radix[i] + cols[:, i]
    _, first, inv = np.unique(keys, return_index=True, return_inverse=True)
  else:
    _, first, inv = np.unique(cols, axis=0, return_index=True,
                              return_inverse=True)
  order = np.argsort(first, kind="stable")
  rank = np.empty_like(order)
  rank[order] = np.arange(len(order))
  subs = [tuple(sigmas[j][i] for i in pick) for j in first[order].tolist()]
  return subs, rank[inv.reshape(-1)]


def _add_terms(extra, tables, f, pl, subs, vals, inv, memo):
  r"""Adds one factor's overlap terms under each of its own assignments
  to ``extra``, as columns over those assignments: under an assignment
  with compute, ``n`` times it to ``("work", segment)`` per nonzero
  segment and to ``("window", w)`` per window of its placement; with
  collectives, per mesh axis ``a`` of its seconds ``t`` (barrier ``w``),
  ``n (t - w)`` to ``("sync", bucket, a)`` per sync bucket (the step does
  not wait for a gradient sync beyond its barrier,
  :mod:`costmodels.overlap`) and ``n t`` to ``("gather", bucket, a)``
  (and ``("taken", segment, a)``) per prefetched gather.  Each key gets
  the increments a per-:math:`\sigma` loop adds, in its order, so every
  float is the same (one numpy pass per increment, not one Python call
  per assignment: 69k calls in the README plan)."""
  def add(key, inc, hit):
    if not hit.any():
      return
    values, touched = extra.get(key, (None, None))
    if values is None:
      values, touched = np.zeros(len(inv)), np.zeros(len(inv), dtype=bool)
      extra[key] = (values, touched)
    touched |= hit[inv]
    values += np.where(hit, inc, 0.0)[inv]

  compute = np.array([v[1] for v in vals], dtype=np.float64)
  busy = np.array([bool(v[1]) for v in vals], dtype=bool)
  for seg, count in pl.segments:
    if seg:
      add(("work", seg), count * compute, busy)
  for w, count in pl.windows:
    add(("window", w), count * compute, busy)
  if not (pl.sync_buckets or pl.gathers):
    return
  n = len(subs)
  by_axis = {}   # axis -> (seconds, barrier seconds, which subs) per sub
  for j, (sub, v) in enumerate(zip(subs, vals)):
    if not v[2]:
      continue
    times, waits = _comm_by_axis(tables, f, sub, memo)
    for a, t in times:
      if a not in by_axis:
        by_axis[a] = (np.zeros(n), np.zeros(n), np.zeros(n, dtype=bool))
      secs, barrier, hit = by_axis[a]
      secs[j], barrier[j], hit[j] = t, waits.get(a, 0.0), True
  for a, (secs, barrier, hit) in by_axis.items():
    for b, count in pl.sync_buckets:
      add(("sync", b, a), count * (secs - barrier), hit)
    for b, seg, count in pl.gathers:
      add(("gather", b, a), count * secs, hit)
      if seg:
        add(("taken", seg, a), count * secs, hit)


# --- constraint families (each adds to the model; some return terms) -----
def add_dim_axis_vars(model, v, space):
  """:math:`x_{d,a}` for allowed pairs, and constraint 1."""
  for d in space.dims:
    for a in space.options[d]:
      v.x[DimAxis(d, a)] = model.new_bool_var(f"x[{d},{a}]")
    xs = [v.x[DimAxis(d, a)] for a in space.options[d]]
    if len(xs) > 1:
      model.add_at_most_one(xs)


def add_tensor_axis_constraints(model, v, graph, space, chosen=None):
  r"""Constraint 2: an axis splits at most one dim of each tensor.

  ``chosen``: a candidate's :math:`z_c` in a program that joins several
  candidates (:mod:`autolayout.training.decision_program`): its copy of
  the rules may split an axis once only while it is chosen,
  :math:`\sum_{d \in T} x^c_{d,a} \le z_c`."""
  seen = set()
  for t in graph.tensors:
    names = tuple(sorted(t.shape.dimension_names))
    if names in seen or len(names) < 2:
      continue
    seen.add(names)
    for a in space.axes:
      xs = [v.x[DimAxis(d, o)] for d in names for o in space.options[d]
            if a in assignments.option_axes(o)]
      if len(xs) > 1:
        if chosen is None:
          model.add_at_most_one(xs)
        else:
          model.add(sum(xs) <= chosen)


def add_table_vars(model, v, tables, chosen=None):
  """:math:`y_{S,\\sigma}` and constraints 3 and 4.

  ``chosen``: as :func:`add_tensor_axis_constraints`; a candidate's table
  choices then sum to :math:`z_c` instead of 1 (all 0 unless chosen)."""
  for tb in tables:
    ys = []
    for sigma in tb.choices:
      k = TableChoice(tb.scope, sigma)
      v.y[k] = model.new_bool_var(f"y[{','.join(tb.scope)}|{sigma}]")
      ys.append(v.y[k])
    if chosen is None:
      model.add_exactly_one(ys)
    else:
      model.add(sum(ys) == chosen)
    for i, d in enumerate(tb.scope):
      by_axis = collections.defaultdict(list)
      for sigma, y in zip(tb.choices, ys):
        if sigma[i] is not None:
          by_axis[sigma[i]].append(y)
      for a in sorted(set(by_axis) | {k.axis for k in v.x if k.dim == d},
                      key=assignments.option_key):
        x = v.x.get(DimAxis(d, a))
        terms = by_axis.get(a, [])
        if x is None:
          for y in terms:
            model.add(y == 0)
        else:
          model.add(x == sum(terms))


def time_unit(tables, which="time"):
  """Seconds per objective unit: the largest possible total (including
  every gradient sync) is about :data:`TIME_UNITS_TOTAL` units."""
  top = 0.0
  for tb in tables:
    c = tb.time_s if which == "time" else tb.comm_s
    if not c:
      continue
    top += max(c)
    sync = [s for k, s in tb.terms if k[0] in ("sync", "gather")]
    if sync:
      top += max(sum(col) for col in zip(*sync))
  return top / TIME_UNITS_TOTAL if top > 0 else 1.0


def time_objective(v, tables, which="time", unit=None):
  """The scaled step-time (or comm-time) objective, without the overlap
  terms; returns (expr, unit)."""
  costs = [(tb, tb.time_s if which == "time" else tb.comm_s) for tb in tables]
  if unit is None:
    unit = time_unit(tables, which)
  ys, coeffs = [], []
  for tb, c in costs:
    for sigma, s in zip(tb.choices, c):
      q = int(round(s / unit))
      if q:
        ys.append(v.y[TableChoice(tb.scope, sigma)])
        coeffs.append(q)
  return cp_model.LinearExpr.weighted_sum(ys, coeffs), unit


def add_forbidden(model, v, forbid):
  """Adds ``x = 0`` for each ``(dim, axis)`` of ``forbid``: ``dim:axis``
  forbids every option of the dim using that axis, ``dim:x+y`` that one
  option.  Returns the set of forbidden :class:`DimAxis` keys."""
  forbidden = set()
  for dim, axis in forbid:
    banned = assignments.option_axes(axis)
    for k, var in v.x.items():
      if k.dim == dim and (
          banned == assignments.option_axes(k.axis) if len(banned) > 1
          else banned[0] in assignments.option_axes(k.axis)):
        model.add(var == 0)
        forbidden.add(k)
  return forbidden


def add_layout_exclusion(model, v, rules):
  r"""Adds :math:`\sum_{k \in Q} x_k - \sum_{k \notin Q} x_k \le |Q| - 1`:
  the answer is not exactly the layout ``Q`` = ``rules`` (a no-good)."""
  mine = {DimAxis(d, a) for d, a in rules.pairs}  # a: a name or a tuple
  if not mine <= set(v.x):
    return  # Q is not in the space: nothing to exclude
  model.add(sum(v.x[k] for k in mine)
            - sum(x for k, x in v.x.items() if k not in mine)
            <= len(mine) - 1)


def add_memory_constraints(model, v, steps, host, budget, with_peak):
  """Constraint 5.  ``steps`` is a list of ``{scope: {sigma: bytes}}``.

  With ``with_peak`` it creates :math:`P` (bounded by ``budget`` if given)
  and returns it; else it bounds every step by ``budget``.
  """
  bound = None
  if with_peak:
    ub = max(1, sum(max(c.values()) for step in steps for c in step.values()))
    if budget is not None:
      ub = min(ub, int(budget))
    v.peak = model.new_int_var(0, max(ub, 0), "peak_bytes")
    bound = v.peak
  elif budget is None:
    return None
  else:
    bound = int(budget)
  choices = collections.defaultdict(list)
  for k in v.y:
    choices[k.scope].append(k)
  # Per memory scope, found once (a program has tens of steps over the same
  # scopes): its host table, the scope's local assignments (``subs``) and,
  # for each choice of the host table, the index of its restriction to the
  # scope.  Each step then adds a scope's bytes to its host table's choices
  # as one numpy gather, not one dict lookup per choice (GPT-3's and
  # per-group-stage programs have thousands of choices per table: 2.5 s of
  # a 3 s build of a transformer_tiny per-group candidate).  The terms come
  # out in the order the choices first get bytes, as a running sum over the
  # scopes in step order would add them, so the program is the same.
  restricted = {}
  for step in steps:
    coeff, seen, order = {}, {}, []
    for scope, per in step.items():
      hit = restricted.get(scope)
      if hit is None:
        tscope = host[scope]
        pos = {d: i for i, d in enumerate(tscope)}
        pick = tuple(pos[d] for d in scope)
        subs, index, inv = [], {}, []
        for k in choices[tscope]:
          sub = tuple(k.assignment[i] for i in pick)
          if sub not in index:
            index[sub] = len(subs)
            subs.append(sub)
          inv.append(index[sub])
        hit = restricted[scope] = (tscope, subs,
                                   np.asarray(inv, dtype=np.int64))
      tscope, subs, inv = hit
      vals = np.fromiter(map(per.get, subs, itertools.repeat(0)),
                         dtype=np.int64, count=len(subs))[inv]
      nz = vals != 0
      if tscope not in coeff:
        coeff[tscope] = np.zeros(len(inv), dtype=np.int64)
        seen[tscope] = np.zeros(len(inv), dtype=bool)
      new = np.flatnonzero(nz & ~seen[tscope])
      if len(new):
        order.append((tscope, new))
        seen[tscope] |= nz
      coeff[tscope] += vals
    if order:
      ys, cs = [], []
      for tscope, idx in order:
        keys, c = choices[tscope], coeff[tscope]
        ys += [v.y[keys[i]] for i in idx.tolist()]
        cs += c[idx].tolist()
      model.add(cp_model.LinearExpr.weighted_sum(ys, cs) <= bound)
  return v.peak


def tie_break_groups(v, chunk=50):
  """The :math:`x` in a fixed order, in chunks whose weights
  :math:`2^i` fit in 64-bit integers."""
  keys = sorted(v.x, key=dim_axis_order)
  return tuple(tuple(keys[i:i + chunk]) for i in range(0, len(keys), chunk))
