"""``mtf-layout diff A.json B.json``: two plans rule by rule and decision by
decision, with the cost delta of each."""

import argparse

import pandas as pd

from autolayout.plans import decision_diff
from autolayout.plans import diff as plan_diff
from autolayout.plans import decisions as plan_decisions
from autolayout.plans import pipeline_diff, pipelined
from autolayout.cli import output as out
from autolayout.cli import plans
from autolayout.cli.arguments import add_output_args
from autolayout.cli.context import Answer, Command


def _arguments(p):
  p.add_argument("a", metavar="A.json", help="the plan to start from")
  p.add_argument("b", metavar="B.json", help="the plan to compare with it")
  g = p.add_argument_group("model (default: rebuilt from B's file)")
  g.add_argument("--model", "-m",
                 help="the model of B, if B's file does not say how to "
                 "build it (plans saved by `solve --save` do)")
  g.add_argument("--set", "-s", action="append", default=[],
                 metavar="K=V[,K=V]", help="with --model: its overrides")
  g.add_argument("--train", action="store_true",
                 help="with --model: its training step")
  add_output_args(p, plot=False)


def _run(args, ctx):
  a, b = plans.read(args.a), plans.read(args.b)
  if pipelined.is_pipelined(a) or pipelined.is_pipelined(b):
    # Priced by the pipelined cost model (autolayout.plans.pipeline_diff).
    (config_a, costs_a), (config_b, costs_b) = (_config(a, args.a, args),
                                                _config(b, args.b, args))
    d = pipeline_diff.diff(a, b, config_a, config_b, costs_a, costs_b)
  else:
    d = _diff(a, b, args)
  df = d.to_dataframe()

  def table(ctx):
    ctx.line(f"diff: {args.a} -> {args.b} ({b.model.name})")
    ctx.line(f"  A: {out.wrap_rules(a.rules) or '(replicated)'} on "
             f"{a.mesh_shape.text}")
    ctx.line(f"  B: {out.wrap_rules(b.rules) or '(replicated)'} on "
             f"{b.mesh_shape.text}")
    ctx.line()
    if not d.rows:
      ctx.line("the plans make the same decisions (no rule, decision, mesh "
               "or topology differs)")
      return
    view = pd.DataFrame({"change": [_change(k, n, x, y) for k, n, x, y in
                                    zip(df["kind"], df["name"], df["a"],
                                        df["b"])]})
    fmts = {}
    for c in df.columns:
      if c.endswith("_delta_s") or c == "peak_memory_delta_bytes":
        short = _SHORT.get(c) or "comm " + c[len("comm_"):-len("_delta_s")]
        view[short] = df[c]
        fmts[short] = _signed(out.fmt_bytes if "memory" in c
                              else out.fmt_time)
    out.render(ctx.console, view, "Differences (each priced alone: only "
               "that change)", formats=fmts, index=False)
    for r in d.rows:
      if r.note:
        ctx.line(f"{r.kind} {r.name}: {r.note}")
    for n in d.notes:
      ctx.line(n)

  return Answer(json=lambda: {"a": args.a, "b": args.b, **d.as_dict()},
                csv=lambda: df, csv_index=False, table=table)


def _diff(a, b, args):
  """The diff of two unpipelined plans, priced on B's model."""
  if args.model:
    # B's model as given (its training step rebuilt for B's decisions,
    # checked against B's fingerprint).
    model = plans.model_for(b, args.b, argparse.Namespace(
        model=args.model, set=args.set, train=True if args.train else None))
  else:
    model = plans.model_of(b, args.b)
  if model is None:
    return plan_diff.diff(a, b)
  return decision_diff.diff(a, b, plan_decisions.BuiltPlan(
      model.graph, model.outputs, model.microbatches, model.decisions,
      model.config if model.decisions is not None else None))


_SHORT = {"step_time_delta_s": "step", "peak_memory_delta_bytes": "peak mem"}


def _config(plan, path, args):
  """``(zoo config, repriced costs or None)`` of a plan in a pipelined
  diff (``--model`` for B)."""
  from autolayout.cli import pipelined_plan
  if pipelined.is_pipelined(plan):
    return pipelined_plan.config_for(
        plan, path, args if path == args.b and args.model else None)
  return plan_decisions.config_of(plan), None


def _change(kind, name, a, b):
  if kind == "total":
    return "total"
  if kind == "rules":
    return f"{name.replace('+', ', ')} together"
  return f"{kind} {name}: {_show(a)} -> {_show(b)}"


def _show(v):
  return "(not split)" if v is None or v == "(not split)" else str(v)


def _signed(fmt):
  """A formatter of deltas: ``+1.2 us``, ``-4 KiB``, ``-`` for none."""
  def show(v):
    if v is None or v != v:  # None or NaN: not priced alone
      return "-"
    return ("+" if v >= 0 else "-") + fmt(abs(v))
  return show


COMMAND = Command(
    "diff", help="two plan files rule by rule, with the cost of each change",
    description="Compare plan B with plan A: each rule (dim -> mesh axis) "
    "and decision that differs, with the step time, peak memory and "
    "communication per axis that changing only it costs (priced on B's "
    "model, mesh and topology; rules interact, so the deltas need not add "
    "up).", add_arguments=_arguments, run=_run)
