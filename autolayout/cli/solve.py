"""``mtf-layout solve``: the optimal layout and its costs."""

import argparse

import pandas as pd

from autolayout.default_search import solve_default
from autolayout.meshes.mesh_search import DEFAULT_MAX_AXES
from autolayout.cli import common, html, inputs, plans
from autolayout.cli import output as out
from autolayout.cli.arguments import add_model_args
from autolayout.cli.context import Answer, Command
from autolayout.cli.errors import CliInputError
from autolayout.cli import scale
from autolayout.cli.pipeline import (add_pipeline_args, pipelined_hint,
                                     run_pipeline)


def _arguments(p):
  add_model_args(p)
  html.add_argument(p)
  p.add_argument("--devices", "-n", type=int,
                 help="search every mesh shape of this many devices and "
                 "keep the best (the default without --mesh: the "
                 "topology's chips, axes named after its physical dims)")
  p.add_argument("--max-axes", type=int, default=None,
                 help="when searching meshes: most mesh axes (default "
                 f"{DEFAULT_MAX_AXES})")
  d = p.add_argument_group(
      "training decisions (a zoo Transformer's training step)")
  for flag, what in (("--zero-stage", "ZeRO stage 0-3, or one per "
                      "variable group: ffn=3,attention=3,embedding=1,norm=0"),
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
                 "the shapes, batch or mesh changed) and say what changed;"
                 " with --pipeline, a layout such as tp=8,pp=64,dp=6,v=2")
  add_pipeline_args(p)


def _run(args, ctx):
  if getattr(args, "pipeline", False) or pipelined_hint(args) is not None:
    # --pipeline, or --hint of a pipelined plan: the pipelined search.
    return run_pipeline(args, ctx)
  with ctx.phase("model and topology"):
    setup = common.Setup(args)
  topology, model = setup.topology, setup.model
  budget = inputs.memory_budget(args, topology)
  hint = plans.read(args.hint) if args.hint else None
  with ctx.phase("search"):
    found = _search(ctx, args, setup, budget, hint)
  if isinstance(found, Answer):
    return found   # the pipelined plan, faster (autolayout.cli.scale)
  result, decisions_tried, tried, fell_back, compared = found
  report = result.report
  saved = None
  if args.save:
    with ctx.phase("plan file"):
      saved = plans.save(result, args, model)

  def table(ctx):
    how = ("given" if tried is None else
           f"best of {int(tried['step_time_s'].notna().sum())} shapes tried")
    common.header(ctx, "solve", model, topology,
                  f"mesh {report.mesh_shape.text} ({how}), "
                  "memory budget "
                  f"{out.fmt_bytes(budget) if budget else 'none'}",
                  overlap=setup.overlap)
    if setup.question_from:
      ctx.line(f"(the question of plan {setup.question_from}: its model, "
               "overrides, training or forward pass, topology and mesh)")
    if fell_back:
      ctx.line("no layout of the step as built fits the budget, so the "
               "training decisions (precision, ZeRO stage, recompute, "
               "microbatches) were searched too")
    if tried is not None:
      view = tried[["mesh", "step_time_s", "status"]].rename(
          columns={"step_time_s": "step"})
      out.render(ctx.console, view, "Mesh shapes tried", index=False,
                 formats={"step": out.fmt_time}, best={"step": "min"})
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
    for line in compared:
      ctx.line(line)
    if saved is not None:
      ctx.line(f"saved the plan to {args.save}")

  return Answer(
      json=lambda: common.payload(
          model, topology, result=out.layout_record(
              report, result, training=common.training_record(
                  result, model, topology, decisions_tried)),
          question="train" if model.train else "forward",
          meshes_tried=(None if tried is None
                        else out.frame_records(tried)),
          **({"spaces_compared": list(compared)} if compared else {}),
          **plans.solve_record(args, result)),
      csv=lambda: pd.DataFrame([out.summary_row(report, result, "auto")]),
      csv_index=False, table=table,
      plot=common.compare_plot({str(result.rules) or "replicated": report},
                               model, topology),
      views=html.one(report, result))


def _search(ctx, args, setup, budget, hint):
  """The answer: ``(LayoutResult, training decisions tried, mesh shapes
  tried or None, whether the training decisions were searched because
  no layout of the step as built fits, the lines saying which plan spaces
  were compared at scale)``, or the pipelined plan's Answer where it is
  the faster (:mod:`autolayout.cli.scale`)."""
  topology, model = setup.topology, setup.model
  decisions_tried = ()
  tried = None   # the mesh shapes tried, when searching meshes
  fell_back = False   # no layout of the step as built fits: decisions
  compared = ()   # the plan spaces compared at scale (autolayout.cli.scale)
  if args.devices is not None and args.mesh:
    raise CliInputError("give either --mesh or --devices, not both",
                        hint="--devices searches every mesh shape")
  if args.mesh and _plan_search(args, model):
    mesh = common.mesh_of(args, topology)
    result, decisions_tried = _training_plan(ctx, args, model, mesh,
                                             topology, budget)
  elif _plan_search(args, model):
    # No mesh: mesh shapes and training decisions searched together,
    # whether --train was given or training is the default question.
    n = topology.num_chips if args.devices is None else args.devices
    inputs.check_devices(n, topology)
    if scale.applies(args, model, topology, n):
      choice = scale.compare(
          ctx, args, model, topology, budget,
          lambda limit: _training_meshes(ctx, args, model, topology, budget,
                                         n, limit))
      if choice.answer is not None:
        return choice.answer
      (result, decisions_tried, tried), compared = (choice.unpipelined,
                                                    choice.compared)
    else:
      result, decisions_tried, tried = _training_meshes(
          ctx, args, model, topology, budget, n)
  else:
    # The default question: the API's own path (autolayout.default_search),
    # so mtf.auto_layout and a bare solve answer alike.
    mesh = common.mesh_of(args, topology) if args.mesh else None
    n = None
    if mesh is None:
      n = topology.num_chips if args.devices is None else args.devices
      inputs.check_devices(n, topology)
    found = []

    def default(time_limit_s=None):
      found.append(_default_search(ctx, args, setup, mesh, budget, n, hint,
                                   time_limit_s))
      return (found[-1].result, found[-1].decisions_tried, found[-1].meshes)
    if mesh is None and _fall_back(args, model) and scale.applies(
        args, model, topology, n):
      # The training step by default, of a model at scale: its plan is
      # compared with the pipelined one where it searched the training
      # decisions (autolayout.cli.scale).
      choice = scale.compare(
          ctx, args, model, topology, budget, default,
          not_comparable=lambda: None if found[-1].fell_back else (
              "the step as built fits, so its training decisions were not "
              "searched; add --train to plan them, pipelined or not"))
      if choice.answer is not None:
        return choice.answer
      compared = choice.compared
    else:
      default()
      compared = _not_searched(args, model, topology, n)
    answer = found[-1]
    result, tried = answer.result, answer.meshes
    decisions_tried, fell_back = answer.decisions_tried, answer.fell_back
  return result, decisions_tried, tried, fell_back, compared


def _default_search(ctx, args, setup, mesh, budget, n, hint,
                    time_limit_s=None):
  """The default question's answer (:func:`autolayout.default_search.
  solve_default`), within ``time_limit_s`` (default ``--time-limit``)."""
  model = setup.model
  if time_limit_s is not None:
    args = argparse.Namespace(**{**vars(args), "time_limit": time_limit_s})
  what = (f"solving {model.name} on {mesh.text} "
          f"({setup.topology.name})" if mesh is not None
          else f"solving every mesh shape of {n} devices")
  unit = "B" if args.objective == "memory" else "s"
  with ctx.progress(what, unit) as update:
    return solve_default(
        model.graph, outputs=model.outputs,
        spec=common.query(args, setup, mesh, budget, num_devices=n),
        config=model.config if _fall_back(args, model) else None,
        search=setup.search, hint=hint,
        progress=update if mesh is not None else None,
        mesh_progress=update.on_mesh if mesh is None else None,
        decision_progress=_steps(ctx) if mesh is not None else None)


def _not_searched(args, model, topology, n):
  """The line saying that the pipelined space was not searched, for a
  forward-pass question of a model the training question would plan
  pipelined too (pipelining an inference step is not in the space)."""
  config = model.config
  if (model.train or args.layout_only or n is None or config is None
      or not hasattr(config, "recompute")
      or not scale.applies(args, model, topology, n)):
    return ()
  return ("pipelined plans: not searched (the pipelined space plans "
          "training steps, and this question is the forward pass; add "
          "--train to compare them with the unpipelined training plan)",)


def _steps(ctx):
  """The decision search's ``progress``: each program is a step of the
  search phase (``k=2: best 496.1 us``)."""
  def step(decisions, step_time_s):
    if decisions is None:
      ctx.phase_step("the step as built: no layout fits")
      return
    what = (f"k={decisions.microbatches}"
            + ("" if isinstance(decisions.zero_stage, int)
               else ", stage per group"))
    ctx.phase_step(f"{what}: " + (
        f"best {out.fmt_time(step_time_s)}" if step_time_s is not None
        else "every candidate over budget"))
  return step


def _plan_search(args, model):
  config = model.config
  return (args.train and not args.layout_only and config is not None
          and hasattr(config, "recompute"))


def _fall_back(args, model):
  """Whether a bare ``solve`` (the training step by default, neither
  --train nor --forward nor --layout-only) whose step as built fits no
  layout searches the training decisions instead of failing."""
  config = model.config
  return (args.train is None and not args.layout_only and model.train
          and config is not None and hasattr(config, "recompute"))


def _fixed(args):
  """The training decisions given on the command line (not ``auto``), as
  parsed once by :func:`autolayout.cli.validate.fixed_decisions`."""
  return dict(args.fixed_decisions)


def _training_meshes(ctx, args, model, topology, budget, n,
                     time_limit_s=None):
  """The fastest mesh shape, training decisions and layout
  (autolayout.meshes.training_meshes)."""
  from autolayout.meshes.training_meshes import search_training_meshes
  steps = _mesh_steps(ctx)

  def on_mesh(update, what, i, count):
    update.on_mesh(what, i, count, None)
    steps(what)
  with ctx.progress(f"searching mesh shapes of {n} devices and training "
                    f"decisions of {model.name}") as update:
    plan, tried = search_training_meshes(
        model.config, topology, budget, n,
        args.max_axes or DEFAULT_MAX_AXES, fixed=_fixed(args),
        param_dtype=model.overrides.get("param_dtype") or "bfloat16",
        time_limit_s=(args.time_limit if time_limit_s is None
                      else time_limit_s),
        overlap=getattr(args, "overlap", True),
        memory_reserve_fraction=inputs.memory_reserve(args),
        progress=lambda mesh, stage, i, count: on_mesh(
            update, f"{mesh} ({stage})", i, count))
  steps(None)
  return plan.result, plan.tried, tried


def _mesh_steps(ctx):
  """A mesh search's progress calls come as each shape starts; each ends
  the previous shape's step of the search phase (``None``: the last)."""
  pending = []

  def step(label):
    if pending:
      ctx.phase_step(pending.pop())
    if label is not None:
      pending.append(label)
  return step


def _training_plan(ctx, args, model, mesh, topology, budget):
  """The fastest training decisions and layout (autolayout.training.decisions)."""
  from autolayout.training import decisions
  fixed = _fixed(args)
  param_dtype = model.overrides.get("param_dtype") or "bfloat16"
  with ctx.progress(f"searching training decisions of {model.name} on "
                    f"{mesh.text} ({topology.name})"):
    plan = decisions.search_training(
        model.config, mesh, topology, budget, fixed=fixed,
        param_dtype=param_dtype, time_limit_s=args.time_limit,
        memory_reserve_fraction=inputs.memory_reserve(args),
        overlap=getattr(args, "overlap", True), progress=_steps(ctx))
  return plan.result, plan.tried


COMMAND = Command(
    "solve", help="the optimal layout and its costs",
    description="Find the layout rules that minimise the objective under "
    "the memory budget, and show its per-device memory and communication "
    "per mesh axis.  A bare solve (no --train) lays out the step as built, "
    "as mtf.auto_layout does (one shared path, "
    "autolayout.default_search); only when no layout of it fits the budget "
    "does it search the training decisions (bf16, ZeRO stage, recompute, "
    "microbatches), because with memory to spare they only add time "
    "(benchmarks/default_decisions.py).  --train searches them "
    "always.", add_arguments=_arguments, run=_run)
