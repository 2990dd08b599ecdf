"""``mtf-layout solve --pipeline``: the fastest pipelined layout of a zoo
Transformer on a GPU cluster or a TPU slice
(:mod:`autolayout.meshes.pipeline_search`), with a published layout as a
starting hint.

``--hint`` takes, besides a plan file, a pipelined layout written
``tp=8,pp=64,dp=6,v=2[,mb=1][,recompute=full][,placement=inner][,zero=1]``: it is
priced first, starts the search as its incumbent, and the answer says how
the plan compares with it.

Example::

  mtf-layout solve -m gpt3_175b -t a100x8-nodes128-cal --pipeline \\
      --hint tp=8,pp=16,dp=8,v=2
"""

import pandas as pd

from costmodels import hardware
from autolayout.cli import inputs
from autolayout.cli.context import Answer
from autolayout.cli.errors import CliInputError
from autolayout.cli.models import parse_overrides
from autolayout.meshes.pipeline_search import search_pipelines
from autolayout.training.pipeline_price import PipelineLayout, is_torus
from mesh_tf import models

_KEYS = {"tp": "model", "pp": "stages", "dp": "data", "v": "chunks",
         "mb": "microbatch", "recompute": "recompute",
         "placement": "placement", "schedule": "schedule", "zero": "zero"}


# The placements of a torus, as the answer names them.
_TORUS_PLACES = {
    "inner": "on the minor ICI dims, stages outermost",
    "data-outer": "on the minor ICI dims, data outermost"}


def add_pipeline_args(p):
  g = p.add_argument_group("pipeline parallelism (zoo Transformers on GPU "
                           "clusters and TPU slices)")
  g.add_argument("--pipeline", action="store_true",
                 help="search tensor x pipeline x data parallel layouts "
                 "(stages, chunks, microbatch size, recompute, idle chips "
                 "or padding); --hint may then be a layout such as "
                 "tp=8,pp=64,dp=6,v=2")
  g.add_argument("--pipeline-stages", type=int, default=None, metavar="P",
                 help="with --pipeline: search only layouts of P pipeline "
                 "stages (e.g. to save a pipelined plan of a small model)")
  g.add_argument("--no-pipeline", action="store_true",
                 help="on a multi-node GPU cluster or a TPU slice of 64 "
                 "chips or more, search only the unpipelined layouts (by "
                 "default a large model's training plan there is the "
                 "faster of the pipelined and the unpipelined search, "
                 "within about 16 s)")


def parse_layout_hint(text):
  """A :class:`PipelineLayout` from ``tp=8,pp=64,dp=6,v=2[,...]``.

  Raises:
    CliInputError: naming the item and the form.

  Example:
    >>> parse_layout_hint("tp=8,pp=4,dp=32,v=3").describe()
    'TP 8 (inner) x PP 4 (v=3, interleaved_1f1b) x DP 32, microbatch 1, recompute full'
  """
  fields = {}
  for part in str(text).split(","):
    key, sep, value = part.strip().partition("=")
    if not sep or key not in _KEYS:
      raise CliInputError(
          f"cannot read {part.strip()!r} of pipeline hint {text!r}",
          hint="write e.g. --hint tp=8,pp=64,dp=6,v=2 (keys: "
          f"{', '.join(_KEYS)})")
    name = _KEYS[key]
    if name in ("recompute", "placement", "schedule"):
      fields[name] = value
    else:
      try:
        fields[name] = int(value)
      except ValueError:
        raise CliInputError(f"pipeline hint {key}={value!r} is not an "
                            "integer", hint=f"e.g. {key}=2") from None
  return PipelineLayout(**fields)


def pipeline_config(args):
  """The zoo Transformer config of ``-m`` / ``--set``.

  Raises:
    CliInputError: for a model that is not a zoo Transformer.
  """
  try:
    config = models.get_config(args.model, **parse_overrides(args.set))
  except Exception as e:  # noqa: BLE001  (an unknown preset or field)
    raise CliInputError(f"--pipeline needs a zoo Transformer preset: {e}",
                        hint="e.g. -m gpt3_175b --set layers=48") from None
  if not hasattr(config, "heads") or not hasattr(config, "recompute"):
    raise CliInputError(f"--pipeline needs a zoo Transformer, not "
                        f"{args.model!r}", hint="e.g. -m gpt3_175b")
  return config


def pipelined_hint(args):
  """The pipelined plan ``--hint plan.json`` names, or None (no hint, a
  layout hint, or an unpipelined plan)."""
  from autolayout.plans import pipelined
  from autolayout.cli import plans
  hint = getattr(args, "hint", None)
  if not hint or not str(hint).endswith(".json"):
    return None
  plan = plans.read(hint)
  return plan if pipelined.is_pipelined(plan) else None


def _ask_plans_question(args, plan):
  """``solve --hint plan.json`` of a pipelined plan asks its question: its
  zoo model and overrides, topology and memory budget, unless given."""
  from autolayout.cli import plans as cli_plans
  if not args.model:
    cli_plans.take_plans_model(args, plan, example="gpt3_175b")
  if args.topology is None:
    args.topology = plan.topology_preset or plan.topology.name
  if getattr(args, "memory_budget", None) is None and (
      plan.solver.memory_budget_bytes is not None):
    args.memory_budget = str(plan.solver.memory_budget_bytes)


def run_pipeline(args, ctx):
  """The ``--pipeline`` answer of ``mtf-layout solve`` (also for ``--hint``
  of a pipelined plan file: its layout starts the search)."""
  from autolayout.plans import pipelined
  from autolayout.cli import pipelined_plan
  plan = pipelined_hint(args)
  if plan is not None:
    _ask_plans_question(args, plan)
  topology = inputs.get_topology(args.topology)
  config = pipeline_config(args)
  budget = (inputs.memory_budget(args, topology)
            or hardware.usable_memory_bytes(topology.chip))
  hint = None
  if plan is not None:
    pipelined_plan.config_for(plan, args.hint, args)
    hint = pipelined.layout_of(plan, config)
  elif args.hint and not str(args.hint).endswith(".json"):
    hint = parse_layout_hint(args.hint)
  stages = getattr(args, "pipeline_stages", None)
  if stages is not None and not 1 <= stages <= config.layers:
    raise CliInputError(f"--pipeline-stages {stages}: the model has "
                        f"{config.layers} layers",
                        hint=f"give 1 to {config.layers} stages")
  with ctx.progress(f"searching pipelined layouts of {args.model} on "
                    f"{topology.name}"):
    r = search_pipelines(config, topology, budget,
                         stages=None if stages is None else (stages,),
                         time_limit_s=args.time_limit, hint=hint)
  return pipeline_answer(args, topology, budget, r, config=config)


def save_plan(args, topology, budget, r, config):
  """Writes the pipelined answer ``r.best`` to ``args.save`` as a plan
  file (its pipeline a training decision); returns the Plan.

  Raises:
    CliInputError: for a one-stage answer (no pipeline), or a path that
      cannot be written.
  """
  from autolayout.errors import PlanError
  from autolayout.plans import pipelined
  from autolayout.plans.plan import SolverInfo
  from autolayout.cli import plans
  best = r.best
  solver = SolverInfo(r.status, "time", best.step_time_s,
                      best.step_time_s if r.gap == 0 else None, r.gap,
                      int(budget), r.solve_time_s)
  # A one-stage answer is no pipeline: an unpipelined training plan.
  make = (pipelined.plan_of_price if best.cost.pipeline is not None
          else pipelined.one_stage_plan)
  try:
    plan = make(best, config, topology, args.model,
                {**plans.source(args), "train": True}, solver)
  except PlanError as e:
    raise CliInputError(str(e), hint="add --no-pipeline (without "
                        "--pipeline) to save the unpipelined search's "
                        "plan") from None
  try:
    plan.save(args.save)
  except PlanError as e:
    raise CliInputError(str(e), hint="give --save a writable path, e.g. "
                        "--save plan.json") from None
  return plan


def pipeline_answer(args, topology, budget, r, compared=(), config=None):
  """The Answer showing search result ``r`` (a
  :class:`~autolayout.meshes.pipeline_search.PipelineSearchResult`);
  ``compared``: lines saying which plan spaces were compared; with
  ``--save``, the plan is written (``config``: the zoo config
  searched)."""
  best = r.best
  saved = None
  if getattr(args, "save", None):
    saved = save_plan(args, topology, budget, r, config)

  def rows():
    out = [("plan", best)] + ([("hint", r.hint)] if r.hint else [])
    return pd.DataFrame([{
        "which": name, "layout": p.layout.describe(),
        "step_s": p.step_time_s, "microbatches": p.microbatches,
        "bubble": p.cost.bubble_fraction,
        "peak_gib": p.peak_memory_bytes / 2**30,
        "idle_chips": p.idle_chips, "padded_sequences": p.padded_sequences}
        for name, p in out])

  def table(ctx):
    ctx.line(f"pipelined plan of {args.model} on {topology.name} "
             f"({topology.num_chips} chips), budget "
             f"{budget / 2**30:.1f} GiB per device: {r.status}"
             f"{' (gap 0)' if r.gap == 0 else ''}, {r.priced} layouts "
             f"priced, {r.skipped} pruned by bounds, "
             f"{r.solve_time_s:.1f} s")
    ctx.line(f"  {best.layout.describe()}")
    ctx.line(f"  mesh {best.layout.mesh()}; rules {best.rules}; layers "
             f"per stage group {best.cost.layers_per_group[:8]}"
             f"{'...' if len(best.cost.layers_per_group) > 8 else ''}")
    ctx.line(f"  step {best.step_time_s:.3f} s ({best.microbatches} "
             f"microbatches, bubble {best.cost.bubble_fraction:.1%}), peak "
             f"{best.peak_memory_bytes / 2**30:.1f} GiB, idle chips "
             f"{best.idle_chips}, padded sequences {best.padded_sequences}")
    for place, t in r.by_placement.items():
      where = (_TORUS_PLACES.get(place, place) if is_torus(topology) else
               "inside a node" if place == "inner" else "across nodes")
      ctx.line(f"  tensor axis {where}: best step "
               + ("none fits" if t is None else f"{t:.3f} s"))
    if r.hint is not None:
      ctx.line(f"  hint {r.hint.layout.describe()}: step "
               f"{r.hint.step_time_s:.3f} s, peak "
               f"{r.hint.peak_memory_bytes / 2**30:.1f} GiB"
               + (" (over the budget)" if r.hint.peak_memory_bytes > budget
                  else ""))
    for line in compared:
      ctx.line(line)
    if saved is not None and best.cost.pipeline is None:
      ctx.line(f"saved the plan to {args.save}: one stage, so an "
               "unpipelined training plan priced by the layout cost model "
               f"(step {saved.costs.step_time_s:.4g} s)")
    elif saved is not None:
      ctx.line(f"saved the plan to {args.save}")

  return Answer(
      json=lambda: {"model": args.model, "topology": topology.name,
                    "status": r.status, "gap": r.gap,
                    "solve_time_s": r.solve_time_s,
                    "by_placement": r.by_placement,
                    "plans": rows().to_dict("records"),
                    **({"spaces_compared": list(compared)}
                       if compared else {}),
                    **({"plan_file": args.save} if saved else {})},
      csv=rows, csv_index=False, table=table)
