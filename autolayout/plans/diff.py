"""``diff(plan_a, plan_b)``: how two plans differ, rule by rule and decision
by decision, with what each difference costs.

Each row is one named dim whose rule differs (``d_ff: model -> data``), one
other decision, or the mesh / topology.  A rule's cost delta is measured
alone: :func:`costmodels.evaluate` of A with **only that rule** changed to
B's, minus A.  Rules interact (two dims of one tensor may not share a mesh
axis, and a collective's price depends on every dim of its tensor), so the
single-rule deltas need not add up to the total delta; the diff says so
when they do not.  Like PyTorch AutoParallel's ``diff_solutions``, but per
named dim.

Both plans are priced on B's graph, mesh and topology (A's rules are
projected there first: rules naming a dim or axis that B lacks are dropped,
and a row says so).  Without a graph only the stored costs are compared.
"""

import dataclasses
import math
from typing import Any, Optional, Tuple

import costmodels
from mesh_tf.core.errors import LayoutError
from mesh_tf.core.layout import LayoutRules
from autolayout.search import assignments
from autolayout.plans import identity as plan_identity
from autolayout.plans.costs import PredictedCosts
from autolayout.training.families import TrainingDecisions


# A cost vector of a diff (each plan's costs, a row's delta) is the plans'
# one costs record.
Costs = PredictedCosts


@dataclasses.dataclass(frozen=True)
class DiffRow:
  """One difference between two plans.

  Attributes:
    kind: ``"rule"``, ``"rules"`` (changes valid only together, priced as
      one), ``"decision"``, ``"mesh"`` or ``"topology"``.
    name: the dim (rules: the dims joined by ``+``), decision family, or
      ``"mesh"``/``"topology"``.
    a, b: the value in each plan (for a rule: the mesh axis, None when the
      dim is not split).
    delta: cost of changing only this from A's to B's, minus A's cost (a
      :class:`Costs`), or None when it cannot be priced alone.
    note: why not, or what else to know (e.g. the rule is gone on B's mesh).
  """
  kind: str
  name: str
  a: Any
  b: Any
  delta: Optional[Costs] = None
  note: str = ""

  def as_dict(self):
    return {"kind": self.kind, "name": self.name, "a": self.a, "b": self.b,
            "delta": None if self.delta is None else self.delta.as_dict(),
            "note": self.note}


@dataclasses.dataclass(frozen=True)
class PlanDiff:
  """The differences of plan B from plan A (see the module docstring).

  Attributes:
    rows: the :class:`DiffRow` s, rules first (by dim name).
    a_costs, b_costs: each plan's :class:`Costs` (re-evaluated on B's graph
      when one was given, else the stored predictions).
    notes: lines about the comparison as a whole (interactions, pricing).
    priced: whether rows were priced on a graph.
  """
  rows: Tuple[DiffRow, ...]
  a_costs: Costs
  b_costs: Costs
  notes: Tuple[str, ...]
  priced: bool

  @property
  def total(self):
    """``b_costs - a_costs``."""
    return self.b_costs.minus(self.a_costs)

  def as_dict(self):
    return {"rows": [r.as_dict() for r in self.rows],
            "a": self.a_costs.as_dict(), "b": self.b_costs.as_dict(),
            "total": self.total.as_dict(), "notes": list(self.notes),
            "priced": self.priced}

  def to_dataframe(self):
    """One row per difference: kind, name, a, b, the step time, peak memory
    and per-axis communication deltas, and the note."""
    import pandas as pd  # pylint: disable=g-import-not-at-top
    axes = sorted({a for r in self.rows if r.delta
                   for a, _ in r.delta.comm_time_by_axis}
                  | {a for a, _ in self.total.comm_time_by_axis})
    recs = []
    for r in list(self.rows) + [DiffRow("total", "(all)", "", "",
                                        self.total)]:
      d = r.delta
      rec = {"kind": r.kind, "name": r.name, "a": _show(r.a),
             "b": _show(r.b),
             "step_time_delta_s": d.step_time_s if d else None,
             "peak_memory_delta_bytes": d.peak_memory_bytes if d else None}
      for a in axes:
        rec[f"comm_{a}_delta_s"] = dict(d.comm_time_by_axis).get(a, 0.0) \
            if d else None
      rec["note"] = r.note
      recs.append(rec)
    return pd.DataFrame(recs)

  def __str__(self):
    lines = []
    for r in self.rows:
      head = f"{r.kind} {r.name}: {_show(r.a)} -> {_show(r.b)}"
      lines.append(head + (f"  [{describe(r.delta)}]" if r.delta else ""))
      if r.note:
        lines.append(f"    {r.note}")
    if not self.rows:
      lines.append("the plans make the same decisions")
    lines.append(f"total: {describe(self.total)}")
    lines.extend(self.notes)
    return "\n".join(lines)


def _show(v):
  if v is None:
    return "(not split)"
  if isinstance(v, dict) and "split" in v:  # a pipeline decision
    from autolayout.training.pipeline import FAMILY
    return FAMILY.describe(FAMILY.from_json(v))
  if isinstance(v, dict):  # a decision per group: {"ffn": 3, ...}
    return " ".join(f"{k}={x}" for k, x in sorted(v.items()))
  if isinstance(v, (int, float)):  # a decision's value
    return str(v)
  return assignments.option_text(v)


def describe(delta):
  """``"step +1.2 us, peak -4 KiB, comm model -3 us"``: the cost terms that
  moved (explain's terms: step time, peak memory, communication per axis)."""
  parts = [f"step {_sec(delta.step_time_s)}",
           f"peak {_bytes(delta.peak_memory_bytes)}"]
  for a, t in delta.comm_time_by_axis:
    if t:
      parts.append(f"comm {a} {_sec(t)}")
  for k, b in delta.memory_by_category:
    if b:
      parts.append(f"{k} {_bytes(b)}")
  return ", ".join(parts)


def _sec(t):
  for unit, f in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6), ("ns", 1e-9)):
    if abs(t) >= f or unit == "ns":
      return f"{t / f:+.4g} {unit}"


def _bytes(b):
  for unit, f in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10), ("B", 1)):
    if abs(b) >= f or unit == "B":
      return f"{b / f:+.4g} {unit}"


def project_rules(rules, graph, mesh_shape):
  """``(rules that still apply, [(dim, axis, why dropped)])`` on ``graph``
  and ``mesh_shape``: a rule is dropped when its dim no longer exists, its
  mesh axis is not in the mesh, the axis no longer divides the dim, or an op
  cannot split the dim."""
  sizes = {}
  for t in graph.tensors:
    for d in t.shape.dims:
      sizes.setdefault(d.name, set()).add(d.size)
  unsplittable = {}
  for op in graph.operations:
    for d in op.lowering_unsplittable_dims:
      unsplittable.setdefault(d, op.name)
  axes = {d.name: d.size for d in mesh_shape.dims}
  kept, dropped = [], []
  for dim, axis in rules.pairs:
    names = assignments.option_axes(axis)  # several for a multi-axis dim
    missing = [a for a in names if a not in axes]
    n = math.prod(axes.get(a, 1) for a in names)
    if dim not in sizes:
      dropped.append((dim, axis, f"dim {dim!r} no longer exists"))
    elif missing:
      dropped.append((dim, axis, f"mesh axis {missing[0]!r} is not in the "
                      "mesh"))
    elif any(s % n for s in sizes[dim]):
      size = next(s for s in sorted(sizes[dim]) if s % n)
      dropped.append((dim, axis, f"{assignments.option_text(axis)}={n} does "
                      f"not divide {dim}={size}"))
    elif dim in unsplittable:
      dropped.append((dim, axis, f"op {unsplittable[dim]} cannot split "
                      f"{dim!r}"))
    else:
      kept.append((dim, axis))
  return LayoutRules(kept), dropped


def _pairs(rules, dims):
  """``"batch:data;d_ff:-"``: the rules of ``dims`` (``-``: not split)."""
  return ";".join(f"{d}:{assignments.option_text(rules.get(d)) or '-'}"
                  for d in dims)


def _short(err):
  """The first clause of a layout error (what clashes, not the fix)."""
  return str(err).split(";")[0]


def _with(rules, dim, axis):
  pairs = [(d, a) for d, a in rules.pairs if d != dim]
  if axis is not None:
    pairs.append((dim, axis))
  return LayoutRules(pairs)


def diff_rules(a_rules, b_rules, graph, mesh_shape, topology, outputs=None,
               a_note=None, microbatches=None):
  """The :class:`PlanDiff` of two rule sets on one graph, mesh and topology
  (both priced with :func:`costmodels.evaluate`).

  Raises:
    mesh_tf.LayoutError: if ``a_rules`` or ``b_rules`` as a whole cannot lay
      the graph out.
  """
  def price(rules):
    return Costs.of(costmodels.evaluate(graph, mesh_shape, rules, topology,
                                        outputs=outputs,
                                        microbatches=microbatches))
  base, final = price(a_rules), price(b_rules)
  a, b = a_rules.as_dict(), b_rules.as_dict()
  rows, parts = [], []
  for dim in sorted(set(a) | set(b)):
    if a.get(dim) == b.get(dim):
      continue
    notes = [(a_note or {}).get(dim, "")]
    try:
      delta = price(_with(a_rules, dim, b.get(dim))).minus(base)
      parts.append(delta.step_time_s)
    except LayoutError as e:
      # Not valid on A's other rules: measure it on B's instead (B minus B
      # with only this rule as in A), the same change seen from the end.
      try:
        delta = final.minus(price(_with(b_rules, dim, a.get(dim))))
        notes.append("priced on B's other rules (alone on A's: "
                     f"{_short(e)})")
        parts.append(delta.step_time_s)
      except LayoutError as e2:
        delta = None
        del e2  # B's side clashes the same way, mirrored
        notes.append("valid only together with other changes (alone on "
                     f"A's rules: {_short(e)})")
    rows.append(DiffRow("rule", dim, a.get(dim), b.get(dim), delta,
                        "; ".join(n for n in notes if n)))
  # Changes valid only together (e.g. two dims swapping mesh axes) are
  # priced as one: A with all of them changed to B's.
  together = [r.name for r in rows if r.delta is None]
  if len(together) > 1:
    moved = a_rules
    for dim in together:
      moved = _with(moved, dim, b.get(dim))
    try:
      delta = price(moved).minus(base)
      parts.append(delta.step_time_s)
      rows.append(DiffRow(
          "rules", "+".join(together), _pairs(a, together),
          _pairs(b, together), delta,
          "these changes are valid only together, so they are priced as "
          "one"))
    except LayoutError:
      pass
  notes = []
  if rows:
    total = final.step_time_s - base.step_time_s
    alone = math.fsum(parts)
    notes.append(
        "each rule's delta is A with only that rule changed (or, where that "
        "is invalid, B with only that rule as in A); rules interact, so "
        "they need not add up: sum of single-rule step deltas "
        f"{_sec(alone)} vs total {_sec(total)}")
  return PlanDiff(tuple(rows), base, final, tuple(notes), True)


def diff(plan_a, plan_b, graph=None, outputs=None, microbatches=None):
  """How ``plan_b`` differs from ``plan_a``, with the cost of each change.

  Args:
    plan_a, plan_b: :class:`~autolayout.plans.plan.Plan` s.
    graph: the mtf Graph of ``plan_b`` (checked).  With it, every row is
      priced with :func:`costmodels.evaluate` on B's mesh and topology;
      without it, only the stored predictions are compared.
    outputs: the step's outputs (default: tensors no op reads).
    microbatches: the :class:`mesh_tf.microbatch.MicrobatchPlan` of
      ``graph`` when it is one microbatch of B's training step.

  Returns:
    A :class:`PlanDiff`; ``str()`` of it is a readable report.

  Raises:
    PlanMismatchError: if ``graph`` is not ``plan_b``'s graph.
  """
  extra = _other_rows(plan_a, plan_b)
  if graph is None:
    rows = []
    a, b = plan_a.rules.as_dict(), plan_b.rules.as_dict()
    for dim in sorted(set(a) | set(b)):
      if a.get(dim) != b.get(dim):
        rows.append(DiffRow("rule", dim, a.get(dim), b.get(dim), None,
                            "pass the graph to price each rule alone"))
    return PlanDiff(tuple(rows + extra), Costs.of(plan_a.costs),
                    Costs.of(plan_b.costs),
                    ("only the stored predictions are compared (no graph "
                     "given)",), False)
  plan_b.check(graph)
  a_rules, dropped = project_rules(plan_a.rules, graph, plan_b.mesh_shape)
  notes_by_dim = {d: f"A's rule {d}:{ax} is dropped: {why}"
                  for d, ax, why in dropped}
  d = diff_rules(a_rules, plan_b.rules, graph, plan_b.mesh_shape,
                 plan_b.topology, outputs, notes_by_dim, microbatches)
  rows = list(d.rows)
  have = {r.name for r in rows}
  for dim, axis, why in dropped:
    if dim not in have:
      rows.append(DiffRow("rule", dim, axis, plan_b.rules.as_dict().get(dim),
                          None, f"A's rule is dropped: {why}"))
  notes = list(d.notes)
  changed = plan_identity.differences(plan_a.model, plan_b.model)
  if changed:
    shown = "; ".join(changed[:4]) + (
        f" (and {len(changed) - 4} more)" if len(changed) > 4 else "")
    notes.append(f"A was made for another graph ({shown}); its rules are "
                 "priced on B's")
  if plan_a.mesh_shape != plan_b.mesh_shape or (
      plan_a.topology != plan_b.topology):
    notes.append("A is priced on B's mesh and topology")
  rows.sort(key=lambda r: (r.kind != "rule", r.name))
  return PlanDiff(tuple(rows) + tuple(extra),
                  d.a_costs, d.b_costs, tuple(notes), True)


def _other_rows(plan_a, plan_b):
  rows = []
  if plan_a.mesh_shape != plan_b.mesh_shape:
    rows.append(DiffRow("mesh", "mesh", plan_a.mesh_shape.text,
                        plan_b.mesh_shape.text, None,
                        "rules are priced on B's mesh"))
  if plan_a.topology != plan_b.topology:
    rows.append(DiffRow("topology", "topology", plan_a.topology.name,
                        plan_b.topology.name))
  if plan_a.training is None and plan_b.training is None:
    return rows
  # A plan without decisions is the step as built: every family's default.
  a = (plan_a.training or TrainingDecisions()).as_dict()
  b = (plan_b.training or TrainingDecisions()).as_dict()
  for k in sorted(set(a) | set(b)):
    if a.get(k) != b.get(k):
      rows.append(DiffRow("decision", k, a.get(k), b.get(k), None,
                          "this version does not price this decision alone"))
  return rows


