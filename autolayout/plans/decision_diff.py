"""The cost of each training decision two plans differ in.

A decision (the parameter dtype, the ZeRO stage, recompute, microbatches)
changes the training step's graph, so it is priced like a rule seen from
the end: B's step rebuilt with **only that decision** as in A, laid out
with B's rules (projected onto that graph: storage dims follow the ZeRO
stage), and B's cost minus that one is the delta of moving that decision
from A's value to B's.  Decisions interact with each other and with the
rules, so the deltas need not add up to the total.
"""

import dataclasses

import costmodels
from mesh_tf.core.errors import LayoutError, MtfError
from autolayout.plans import decisions as plan_decisions
from autolayout.plans import diff as plan_diff
from autolayout.training import zero
from autolayout.training.decisions import build_training


def json_value(decisions, family):
  """A family's value in the plan file's JSON form."""
  v = getattr(decisions, family)
  return zero.as_json(v) if family == "zero_stage" else v


def rows(plan_a, plan_b, config, b_costs, overlap=True):
  """``[DiffRow, ...]`` of the decision families A and B differ in, each
  priced alone on ``config``'s step (``b_costs``: B's own
  :class:`~autolayout.plans.diff.Costs`)."""
  Costs, DiffRow = plan_diff.Costs, plan_diff.DiffRow
  a = plan_decisions.decisions_of(plan_a.decisions)
  b = plan_decisions.decisions_of(plan_b.decisions)
  if a is None and b is None:
    return []
  default = plan_decisions.TrainingDecisions()
  a, b = a or default, b or default
  out = []
  for family in b._fields:
    if getattr(a, family) == getattr(b, family):
      continue
    va, vb = json_value(a, family), json_value(b, family)
    if b is default or config is None:
      out.append(DiffRow("decision", family, va, vb, None,
                         "priced only with B's training step (B holds no "
                         "decisions or no zoo model)"))
      continue
    moved = b._replace(**{family: getattr(a, family)})
    try:
      t = build_training(config, moved)
      rules, dropped = plan_diff.project_rules(plan_b.rules, t.graph,
                                     plan_b.mesh_shape)
      report = costmodels.evaluate(t.graph, plan_b.mesh_shape, rules,
                                   plan_b.topology, microbatches=t.plan,
                                   overlap=overlap)
    except (LayoutError, MtfError) as e:
      out.append(DiffRow("decision", family, va, vb, None,
                         f"B with only {family} as in A does not build or "
                         f"lay out: {str(e).split(';')[0]}"))
      continue
    note = "B with only this decision as in A, on B's rules"
    if dropped:
      note += (" (dropped there: "
               + ", ".join(f"{d}:{x}" for d, x, _ in dropped) + ")")
    out.append(DiffRow("decision", family, va, vb,
                       b_costs.minus(Costs.of(report)), note))
  return out


def diff(plan_a, plan_b, built):
  """:func:`autolayout.plans.diff.diff` of two plans on B's step ``built``
  (a :class:`~autolayout.plans.decisions.BuiltPlan`), with each training
  decision that differs priced alone too (see the module docstring)."""
  d = plan_diff.diff(plan_a, plan_b, built.graph, built.outputs,
                     built.microbatches)
  if built.config is None:
    return d
  priced = rows(plan_a, plan_b, built.config, d.b_costs)
  kept = tuple(r for r in d.rows if r.kind != "decision")
  return dataclasses.replace(d, rows=kept + tuple(priced))

