"""Warm re-solve: a previous plan as CP-SAT's starting point, and a report of
what the new answer changed and why.

When shapes, the batch or the mesh change, the old plan is usually close to
the new optimum.  :func:`hint_values` maps its rules onto the new program's
:math:`x_{d,a}` variables **by name** (dim name, mesh axis name): a rule
whose dim or axis no longer exists, or that the new program does not allow
(the axis no longer divides the dim), is skipped and said so.  CP-SAT takes
the rest as a hint (``AddHint``): it tries that assignment first and keeps
it as the incumbent if it is feasible, so the search starts from the old
answer instead of the replicated layout.  The hint never changes what is
optimal, only how fast it is found.

:func:`hint_report` then says which rules changed and why, in explain's
terms: for each changed rule, the cost terms (step time, peak memory,
communication per mesh axis) that moving only that rule changes, priced on
the new graph with :func:`costmodels.evaluate`.
"""

import dataclasses
from typing import Any, Tuple

from mesh_tf.core.errors import LayoutError
from mesh_tf.core.layout import LayoutRules
from autolayout.plans import plan as plan_lib
from autolayout.plans import diff as plan_diff, file as plan_file
from autolayout.errors import PlanError


@dataclasses.dataclass(frozen=True)
class HintReport:
  """What a warm re-solve did with its hint.

  Attributes:
    hinted: the rules given to CP-SAT as the hint.
    skipped: ``((dim, axis, why), ...)``: the old plan's rules that do not
      exist or apply in the new program.
    kept: the old rules the new answer keeps.
    changes: a :class:`~autolayout.plans.diff.PlanDiff` from the hinted
      rules to the new answer, priced on the new graph (None when the
      hinted rules cannot lay the new graph out as a whole).
    why: one line per changed rule: what moved in the cost terms.
  """
  hinted: LayoutRules
  skipped: Tuple[Tuple[str, str, str], ...]
  kept: LayoutRules
  changes: Any
  why: Tuple[str, ...]

  def __str__(self):
    lines = [f"hint: {self.hinted or '(replicated)'}"]
    lines += [f"  skipped {d}:{a}: {why}" for d, a, why in self.skipped]
    lines.append(f"kept: {self.kept or '(none)'}")
    lines += self.why or ("no rule changed",)
    return "\n".join(lines)


def as_plan(hint):
  """A Plan from a Plan or a plan file path."""
  if isinstance(hint, plan_lib.Plan):
    return hint
  if isinstance(hint, (str, bytes)) or hasattr(hint, "__fspath__"):
    return plan_file.load_plan(hint)
  raise PlanError(f"hint must be a Plan or a plan file path, got "
                  f"{type(hint).__name__}")


def hint_values(plan, variables, graph, mesh_shape):
  """``({DimAxis: 0/1}, hinted rules, skipped)`` for the program's
  :math:`x` variables (``variables``: their DimAxis keys).

  Every variable gets a value: 1 for the old plan's rules that exist in the
  new program, 0 for the rest, so that the hint is a complete assignment.
  """
  rules, skipped = plan_diff.project_rules(plan.rules, graph, mesh_shape)
  keys = {(k.dim, k.axis): k for k in variables}
  on = []
  for dim, axis in rules.pairs:
    if (dim, axis) in keys:
      on.append((dim, axis))
    else:
      skipped.append((dim, axis, "the new program does not allow it"))
  values = {k: 0 for k in variables}
  for pair in on:
    values[keys[pair]] = 1
  return values, LayoutRules(on), tuple(skipped)


def hint_report(hinted, skipped, result):
  """The :class:`HintReport` of a solve that started from ``hinted``."""
  new = result.rules
  kept = LayoutRules([p for p in hinted.pairs if p in set(new.pairs)])
  try:
    changes = plan_diff.diff_rules(
        hinted, new, result.graph, result.mesh_shape, result.topology,
        list(result.outputs) or None)
  except LayoutError:
    changes = None
  why = []
  if changes is not None:
    for r in changes.rows:
      move = f"{r.name}: {plan_diff._show(r.a)} -> {plan_diff._show(r.b)}"
      if r.delta is None:
        why.append(f"{move} ({r.note})")
      else:
        why.append(f"{move}: alone it moves "
                   f"{plan_diff.describe(r.delta)}")
    if changes.rows:
      why.append(f"together: {plan_diff.describe(changes.total)} "
                 "relative to the hint")
    budget, peak = result.memory_budget, changes.a_costs.peak_memory_bytes
    if budget is not None and peak > budget:
      why.append(f"the hinted rules peak at {peak} bytes per device, over "
                 f"the memory budget of {budget} bytes")
  return HintReport(hinted, tuple(skipped), kept, changes, tuple(why))
