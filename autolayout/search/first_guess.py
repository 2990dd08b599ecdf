"""A first solution for CP-SAT: local search over the program's own tables.

CP-SAT's relaxation of a layout program is usually tight at the root, and
then most of a solve is spent finding a layout that reaches the bound,
starting from the hint.  The replicated layout is far from it (about 7x the
optimal step time on a Transformer), and CP-SAT walks down through a dozen
solutions.  :func:`local_search` gets to or near the optimum in a few
milliseconds with best-improvement moves over the tables' exact values, and
:func:`complete` turns the layout into a value for every variable of the
program (the tables' :math:`y` and the integers the overlap terms define),
which CP-SAT takes as its first solution as it is.

The hint changes how fast CP-SAT proves the optimum, not which layout it
returns: every phase is solved to proven optimality, and the last one (the
tie-break) has a unique optimum.
"""

import collections

from autolayout.search import assignments, formulation, overlap_program

# Best-improvement rounds, per dim of the program; each round moves one
# dim, so this bounds the walk well past any layout's number of rules.
ROUNDS_PER_DIM = 3
# Layouts priced at most (tens of microseconds each): the guess stays a
# small part of a solve on programs with many dims and multi-axis options.
MAX_EVALUATIONS = 3000


class _Values:
  """The objective of a global layout from the program's tables, and the
  bytes its memory steps go over ``budget``."""

  def __init__(self, form, which, memory):
    self._tables = [
        (tb.scope, {c: i for i, c in enumerate(tb.choices)},
         tb.time_s if which == "time" else tb.comm_s, tb.terms)
        for tb in form.tables]
    self._spec = form.overlap if form.rounded_terms else None
    self._steps, self._budget = memory if memory else ((), None)

  def __call__(self, layout):
    """``(bytes over budget, seconds)``, or None if a table rejects it."""
    total, terms = 0.0, collections.defaultdict(float)
    for scope, index, cost, tterms in self._tables:
      i = index.get(tuple(layout.get(d) for d in scope))
      if i is None:
        return None
      total += cost[i]
      for k, col in tterms:
        terms[k] += col[i]
    if self._spec is not None:
      total += overlap_program.exposed_sync_value(self._spec, terms)
    over = 0
    if self._budget is not None:
      for step in self._steps:
        used = sum(per.get(tuple(layout.get(d) for d in scope), 0)
                   for scope, per in step.items())
        over += max(0, used - self._budget)
    return over, total


def local_search(form, space, which="time", banned=frozenset(),
                 memory=None):
  """A good layout of ``form``'s program, as CP-SAT's hint ``{DimAxis:
  0/1}``; None when the replicated layout is not in the program.

  From the replicated layout, each round takes the move that lowers
  ``which`` (``"time"`` or ``"comm"``, overlap included) the most: one dim
  to another option or unsplit, unsplitting the dims of its tensors that
  use the same axes.  Moves that break the memory budget are taken only
  when they break it by less.

  Args:
    form: a :class:`~autolayout.search.formulation.Formulation`.
    space: its :class:`~autolayout.search.assignments.DimSpace`.
    which: the first phase's objective.
    banned: DimAxis pairs the program forbids.
    memory: ``(steps, budget)``: constraint 5's per-step coefficients
      ``({scope: {sigma: bytes}}, ...)`` and the budget in bytes; None: no
      memory bound.
  """
  value = _Values(form, which, memory)
  dims = space.dims
  layout = {d: None for d in dims}
  best = value(layout)
  if best is None:
    return None
  evaluations = 0
  for _ in range(ROUNDS_PER_DIM * len(dims)):
    if evaluations > MAX_EVALUATIONS:
      break
    move = None
    for d in dims:
      for option in (None,) + tuple(space.options[d]):
        if option == layout[d] or (
            option is not None
            and formulation.DimAxis(d, option) in banned):
          continue
        trial = dict(layout)
        trial[d] = option
        axes = set(assignments.option_axes(option))
        for e in dims:
          if (e != d and trial[e] is not None
              and frozenset((d, e)) in space.conflicts
              and axes & set(assignments.option_axes(trial[e]))):
            trial[e] = None
        v = value(trial)
        evaluations += 1
        if v is not None and v < (best if move is None else move[0]):
          move = (v, trial)
    if move is None:
      break
    best, layout = move
  return {k: int(layout[k.dim] == k.axis) for k in form.vars.x}


def complete(form, x):
  """``{proto variable index: value}`` of the layout ``x`` (``{DimAxis:
  0/1}``): its :math:`x`, the table choices it makes, and every integer a
  linear equality or a max/min equality of the program then defines
  (evaluated in the order they were added, which is the order they depend
  on each other).  Only ``x`` when some table does not allow the layout."""
  model, v = form.model, form.vars
  values = {var.index: int(x.get(k, 0)) for k, var in v.x.items()}
  layout = {k.dim: k.axis for k, val in x.items() if val}
  ys = {}
  for tb in form.tables:
    sigma = tuple(layout.get(d) for d in tb.scope)
    if sigma not in tb.choices:
      return values
    for c in tb.choices:
      ys[v.y[formulation.TableChoice(tb.scope, c)].index] = int(c == sigma)
  values.update(ys)
  proto = model.proto
  for _ in range(2):  # a second pass catches any out-of-order definition
    for ct in proto.constraints:
      if len(ct.enforcement_literal):
        continue
      if ct.has_linear():
        _define_linear(ct.linear, values)
      elif ct.has_lin_max():
        _define_max(ct.lin_max, values)
      elif ct.has_int_div():
        _define_div(ct.int_div, values)
  return values


def set_hint(form, x, whole=False, solution=None):
  """Replaces the hint of ``form``'s model: ``x`` (``{DimAxis: 0/1}``,
  missing pairs 0); with ``whole``, every variable: ``solution`` (a solved
  program's values, e.g. the previous phase's) when given, else ``x``
  completed (:func:`complete`)."""
  model = form.model
  model.clear_hints()
  if not whole:
    for k, var in form.vars.x.items():
      model.add_hint(var, int((x or {}).get(k, 0)))
    return
  values = (dict(enumerate(solution)) if solution is not None
            else complete(form, x or {}))
  for i in sorted(values):
    model.add_hint(model.get_int_var_from_proto_index(i), int(values[i]))


def _define_linear(lin, values):
  """Sets the one unknown variable of ``sum(c * v) == k``, if any."""
  dom = list(lin.domain)
  if len(dom) != 2 or dom[0] != dom[1]:
    return
  unknown, rest = None, 0
  for var, c in zip(lin.vars, lin.coeffs):
    if var < 0:
      return  # a negated literal: not one this program writes
    if var in values:
      rest += c * values[var]
    elif unknown is None:
      unknown = (var, c)
    else:
      return
  if unknown is not None:
    q, r = divmod(dom[0] - rest, unknown[1])
    if not r:
      values[unknown[0]] = q


def _expr(e, values):
  total = e.offset
  for var, c in zip(e.vars, e.coeffs):
    if var < 0 or var not in values:
      return None
    total += c * values[var]
  return total


def _open_target(target, values):
  """Whether ``target`` is one unset variable (coefficient +-1) that an
  equality can define."""
  return (len(target.vars) == 1 and target.vars[0] >= 0
          and target.vars[0] not in values)


def _set_target(target, value, values):
  """Sets ``target``'s variable so that the target expression is
  ``value``, when that takes an integer."""
  q, r = divmod(value - target.offset, target.coeffs[0])
  if not r:
    values[target.vars[0]] = q


def _define_max(lm, values):
  """Sets the target of ``target == max(exprs)`` once every expression is
  known."""
  if not _open_target(lm.target, values):
    return
  parts = [_expr(e, values) for e in lm.exprs]
  if any(p is None for p in parts):
    return
  _set_target(lm.target, max(parts), values)


def _define_div(div, values):
  """Sets the target of ``target == num // den`` (the overlap
  interference's division equality, non-negative operands) once both are
  known."""
  if not _open_target(div.target, values):
    return
  num, den = (_expr(e, values) for e in div.exprs)
  if num is None or not den:
    return
  _set_target(div.target, num // den, values)
