"""``mtf-layout solve``: the optimal layout and its costs."""

import dataclasses

import pandas as pd

from autolayout.arguments import DEFAULTS
from autolayout.mesh_search import auto_mesh_and_layout
from autolayout.cli import common, inputs, plans
from autolayout.cli import output as out
from autolayout.cli.arguments import add_model_args
from autolayout.cli.context import Answer, Command
from autolayout.cli.errors import CliInputError


def _arguments(p):
  add_model_args(p)
  p.add_argument("--devices", "-n", type=int,
                 help="instead of --mesh: search every mesh shape of this "
                 "many devices and keep the best")
  p.add_argument("--max-axes", type=int, default=None,
                 help="with --devices: most mesh axes (default 2)")
  d = p.add_argument_group(
      "training decisions (--train on a zoo Transformer)")
  for flag, what in (("--zero-stage", "ZeRO stage 0-3"),
                     ("--recompute", "blocks that recompute activations"),
                     ("--microbatches", "gradient-accumulation steps k")):
    d.add_argument(flag, default="auto", metavar="N|auto",
                   help=f"{what} (default auto: searched)")
  d.add_argument("--layout-only", action="store_true",
                 help="lay out the step as built (float32, no sharded "
                 "storage, recompute or microbatches) instead of searching "
                 "the training decisions")
  f = p.add_argument_group("plan files (docs/plan_files.md)")
  f.add_argument("--save", metavar="PLAN.json",
                 help="write the plan (model identity, mesh, topology, "
                 "rules, predicted costs, solver status) to this file")
  f.add_argument("--hint", metavar="PLAN.json",
                 help="start the solver from a previous plan (e.g. after "
                 "the shapes, batch or mesh changed) and say what changed")


def _run(args, ctx):
  setup = common.Setup(args)
  topology, model = setup.topology, setup.model
  budget = inputs.memory_budget(args, topology)
  tried = ()
  hint = plans.read(args.hint) if args.hint else None
  if args.devices is not None:
    inputs.check_devices(args.devices, topology)
    with ctx.progress(f"solving every mesh of {args.devices} devices") as (
        update):
      results, table = auto_mesh_and_layout(
          model.graph, args.devices, model.outputs, topology, budget,
          args.objective, args.max_axes or DEFAULTS.max_axes,
          args.time_limit, args.workers, args.seed, search=setup.search,
          hint=hint, progress=update.on_mesh)
    result = results[0]
    if (table["status"] == "time-limit").any():
      # Some mesh shapes were not reached in time: the best so far, not
      # proven best over every mesh.
      result = dataclasses.replace(result, status="feasible")
  elif _plan_search(args, model):
    mesh = common.mesh_of(args, topology)
    result, tried = _training_plan(ctx, args, model, mesh, topology, budget)
  else:
    mesh = common.mesh_of(args, topology)
    result = common.solve(ctx, setup, mesh, args, budget, hint=hint)
  report = result.report
  saved = plans.save(result, args, model) if args.save else None

  def table(ctx):
    common.header(ctx, "solve", model, topology,
                  f"mesh {inputs.mesh_str(report.mesh_shape)}, memory budget "
                  f"{out.fmt_bytes(budget) if budget else 'none'}")
    common.show_rules(ctx, report)
    if result.decisions is not None:
      common.show_decisions(ctx, result, model, topology)
    common.show_memory(ctx, report)
    common.show_axes(ctx, report)
    common.show_times(ctx, report, result)
    if result.hint_report is not None:
      ctx.line(f"Warm start from {args.hint}:")
      for line in str(result.hint_report).splitlines():
        ctx.line("  " + line)
    if saved is not None:
      ctx.line(f"saved the plan to {args.save}")

  return Answer(
      json=lambda: common.payload(
          model, topology, result=out.layout_record(
              report, result, training=common.training_record(
                  result, model, topology, tried)),
          **plans.solve_record(args, result)),
      csv=lambda: pd.DataFrame([out.summary_row(report, result, "auto")]),
      csv_index=False, table=table,
      plot=common.compare_plot({str(result.rules) or "replicated": report},
                               model, topology))


def _plan_search(args, model):
  config = model.config
  return (args.train and not args.layout_only and config is not None
          and hasattr(config, "recompute"))


def _training_plan(ctx, args, model, mesh, topology, budget):
  """The fastest training decisions and layout (autolayout.decisions)."""
  from autolayout import decisions
  fixed = {}
  for name in ("zero_stage", "recompute", "microbatches"):
    text = str(getattr(args, name))
    if text != "auto":
      try:
        fixed[name] = int(text)
      except ValueError:
        raise CliInputError(f"--{name.replace('_', '-')} {text!r} is not "
                            "an integer or auto",
                            hint=f"e.g. --{name.replace('_', '-')} 2")
  param_dtype = model.overrides.get("param_dtype") or "bfloat16"
  with ctx.progress(f"searching training decisions of {model.name} on "
                    f"{inputs.mesh_str(mesh)} ({topology.name})"):
    plan = decisions.search_training(
        model.config, mesh, topology, budget, fixed=fixed,
        param_dtype=param_dtype, time_limit_s=args.time_limit,
        memory_reserve_fraction=inputs.memory_reserve(args))
  return plan.result, plan.tried


COMMAND = Command(
    "solve", help="the optimal layout and its costs",
    description="Find the layout rules that minimise the objective under "
    "the memory budget, and show its per-device memory and communication "
    "per mesh axis.", add_arguments=_arguments, run=_run)
