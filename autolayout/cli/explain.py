"""``mtf-layout explain``: why each rule was chosen, and the cost of
dropping it."""

import math

import pandas as pd

from mesh_tf.core.layout import LayoutRules
from autolayout.search.explain import explain
from autolayout.cli import common, inputs, pipelined_plan, plans
from autolayout.cli import output as out
from autolayout.cli.arguments import add_model_args
from autolayout.cli.context import Answer, Command


def _arguments(p):
  add_model_args(p)
  p.add_argument("--layout", "-l", default="auto", metavar="RULES",
                 help="layout rules to explain (default auto), or "
                 "@PLAN.json (a plan file's rules and mesh)")


def _mem_delta(new, base):
  if new is None or (isinstance(new, float) and math.isnan(new)):
    return "-"
  d = new - base
  return ("+" if d >= 0 else "-") + out.fmt_bytes(abs(d))


def _missing(v):
  """None, NaN or an empty name: a value the explanation does not have."""
  return v is None or v == "" or (isinstance(v, float) and math.isnan(v))


def _runner_up(r):
  """The runner-up's axis for the dim; "replicated" when the best other
  layout leaves the dim unsplit (its axis is None, its rules are not);
  "-" when there is none (or its time is unknown)."""
  if _missing(r["runner_up_step_time_s"]):
    return "-"
  if not _missing(r["runner_up_axis"]):
    return r["runner_up_axis"]
  return "replicated" if r["runner_up_rules"] is not None else "-"


def _why(r, base, budget=None):
  rule = f"{r['dim']}:{r['axis']}"
  t0, w = base.step_time_s, r["without_step_time_s"]
  parts = []
  if w is None or (isinstance(w, float) and math.isnan(w)):
    parts.append("dropping it gives an invalid layout")
  else:
    dt = w - t0
    if dt > 0:
      parts.append(f"dropping it makes the step {out.fmt_time(dt)} slower")
    elif dt < 0:
      over = (budget is not None
              and r["without_peak_memory_bytes"] > budget)
      parts.append(f"dropping it makes the step {out.fmt_time(-dt)} faster"
                   + (", but the layout needs it for memory" if over
                      else " (it fits without the rule)"))
    else:
      parts.append("dropping it leaves the step time unchanged")
    dm = r["without_peak_memory_bytes"] - base.peak_memory_bytes
    if dm > 0:
      parts.append(f"and needs {out.fmt_bytes(dm)} more per device")
      if r["without_peak_memory_bytes"] > base.hbm_bytes:
        parts.append("(over HBM)")
  if _runner_up(r) == "-":
    # No other axis gives a valid layout (or none was reached): say so,
    # never "on nan".
    parts.append("; it has no runner-up axis")
  else:
    dr = r["runner_up_step_time_s"] - t0
    where = ("replicated" if _missing(r["runner_up_axis"])
             else f"on {r['runner_up_axis']}")
    parts.append(f"; {where} instead it would be "
                 f"{out.fmt_time(abs(dr))} "
                 f"{'slower' if dr >= 0 else 'faster'}")
  return f"{rule}: " + " ".join(parts).replace(" ;", ";")


def _run(args, ctx):
  piped = pipelined_plan.read(args.layout)
  if piped is not None:
    # A pipelined plan: its decisions moved, priced by the pipelined model.
    return pipelined_plan.explain(args, ctx, piped)
  setup = common.Setup(args)
  topology, model = setup.topology, setup.model
  from_plan = plans.layout_arg(args.layout, model, topology, args)
  auto = not from_plan and args.layout.strip().lower() == "auto"
  budget = inputs.memory_budget(args, topology)
  result = None  # the solver's answer, when it chose the layout
  which = "the plan's" if from_plan else "given"
  if auto and not args.mesh:
    result = common.solve_meshes(ctx, setup, args, budget)
    mesh, which = result.mesh_shape, common.SOLVED_MESH
  else:
    mesh = from_plan[1] if from_plan else common.mesh_of(args, topology)
    if not from_plan and not args.mesh:
      which = common.DEFAULT_MESH
  if from_plan:
    rules = from_plan[0]
    base = common.evaluate(model, mesh, rules, topology)
  elif auto:
    if result is None:
      result = common.solve(ctx, setup, mesh, args, budget)
    rules, base = result.rules, result.report
  else:
    rules = inputs.parse_rules(args.layout, model, mesh)
    base = common.evaluate(model, mesh, rules, topology,
                           setup.overlap)
  objective = result.objective if result else (
      getattr(args, "objective", None) or "time")
  with ctx.progress("pricing each rule's alternatives"):
    ex = explain(setup.search, mesh, rules, topology, budget, objective,
                 report=base, overlap=setup.overlap)

  def table(ctx):
    common.header(ctx, "explain", model, topology,
                  f"mesh {mesh.text} ({which})",
                  overlap=setup.overlap)
    ctx.line(f"layout {base.layout_rules or '(none)'}: step "
             f"{out.fmt_time(base.step_time_s)}, peak "
             f"{out.fmt_bytes(base.peak_memory_bytes)}")
    rows = []
    for _, r in ex.iterrows():
      rows.append({
          "rule": f"{r['dim']}:{r['axis']}",
          "without it": out.fmt_delta(r["without_step_time_s"],
                                      base.step_time_s),
          "mem without": _mem_delta(r["without_peak_memory_bytes"],
                                    base.peak_memory_bytes),
          "runner-up": _runner_up(r),
          "on runner-up": out.fmt_delta(r["runner_up_step_time_s"],
                                        base.step_time_s)})
    out.render(ctx.console, pd.DataFrame(rows, columns=[
        "rule", "without it", "mem without", "runner-up", "on runner-up"]),
        "Each rule vs. dropping it and vs. its runner-up axis (step time)",
        index=False)
    for _, r in ex.iterrows():
      ctx.line(_why(r, base, budget))

  def plot(plots):
    variants = {"chosen": base}
    for dim, _ in base.layout_rules.pairs:
      rest = [(d, a) for d, a in base.layout_rules.pairs if d != dim]
      try:
        variants[f"-{dim}"] = common.evaluate(
            model, mesh, LayoutRules(rest), topology, setup.overlap)
      except Exception:  # pylint: disable=broad-except
        pass  # dropping a rule can leave an invalid layout; skip that bar
    return plots.compare_figure(variants, "Dropping each rule")

  return Answer(
      json=lambda: common.payload(model, topology,
                                  result=out.layout_record(base, result),
                                  rules=out.frame_records(ex)),
      csv=lambda: ex, csv_index=False, table=table, plot=plot)


COMMAND = Command(
    "explain", help="why each rule was chosen",
    description="For each rule of a layout (default: the solver's), the "
    "step time and memory without it and with the dim on its runner-up "
    "axis.", add_arguments=_arguments, run=_run)
