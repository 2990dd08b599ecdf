"""Steps and tables the ``mtf-layout`` subcommands share: loading the model
and topology once, solving with one :class:`~autolayout.LayoutSearch` per
model, the header lines, the JSON model record and the rules, memory, axes
and summary tables of one layout."""

import math

import pandas as pd

import costmodels
from autolayout.search import assignments
from autolayout.arguments import DEFAULTS
from autolayout.meshes.mesh_search import DEFAULT_MAX_AXES
from autolayout.search.solve import LayoutSearch, auto_layout
from autolayout.spec import search_spec
from autolayout.cli import inputs, plans
from autolayout.cli.errors import CliInputError
from autolayout.cli import output as out
from autolayout.cli.models import load_model, parse_overrides


class Setup:
  """The parsed ``--topology`` and ``--model``, and the model's search.

  ``search`` keeps the model's cost tables, so every solve of one command
  (compare's several ``auto`` layouts, explain's runner-ups) builds them
  once per mesh.
  """

  def __init__(self, args, layout=None):
    # A layout read from a plan file (-l @plan.json) asks the plan's own
    # question: its model, training or forward pass, and topology.
    # ``layout``: the plan argument to ask it of, when ``args.layout`` is
    # not one (compare's several layouts).
    layout = layout or getattr(args, "layout", None)
    self.plan = None
    if isinstance(layout, str) and plans.is_ref(layout):
      self.plan = plans.read(plans.ref_path(layout))
    hint = getattr(args, "hint", None)
    self.question_from = None
    asked = self.plan
    if self.plan is None and hint and not args.model:
      # `solve --hint plan.json` alone asks the plan's own question.
      asked = plans.read(hint)
      plans.ask_plans_question(args, asked)
      self.question_from = hint
    plans.budget_and_objective(args, asked)
    if self.plan is not None and args.topology is None:
      self.topology = self.plan.topology
      args.topology = self.plan.topology_preset or self.plan.topology.name
    else:
      args.topology = args.topology or DEFAULTS.topology
      self.topology = inputs.get_topology(args.topology)
    if self.plan is not None:
      self.model = plans.model_for(self.plan, plans.ref_path(layout), args)
    elif not args.model:
      raise CliInputError("--model is required (or -l @PLAN.json, whose "
                          "model is the default)",
                          hint="e.g. --model transformer")
    else:
      self.model = load_model(args.model, parse_overrides(args.set),
                              args.train)
    self.overlap = getattr(args, "overlap", True)
    self.search = LayoutSearch(
        self.model.graph, self.model.outputs,
        memory_reserve_fraction=inputs.memory_reserve(args),
        max_axes_per_dim=getattr(args, "max_axes_per_dim", 1))


def mesh_of(args, topology):
  """``--mesh`` (or the topology's default), parsed and checked."""
  text = getattr(args, "mesh", None) or inputs.default_mesh(topology)
  mesh = inputs.parse_mesh(text, topology)
  args.resolved_mesh = mesh.text
  return mesh


SOLVED_MESH = "the mesh `solve` chooses for these arguments"
DEFAULT_MESH = ("the topology's data x model mesh (give --mesh, or -l auto "
                "for the mesh `solve` chooses)")


def solve_meshes(ctx, setup, args, budget):
  """The layout a bare ``solve`` gives without ``--mesh``: the best of
  every mesh shape of the topology's chips (the same search,
  :func:`autolayout.default_search.solve_default`), so that ``report``,
  ``explain`` and ``compare`` explain the layout ``solve`` recommends."""
  from autolayout.default_search import solve_default
  model, topology = setup.model, setup.topology
  n = topology.num_chips
  with ctx.progress(f"solving every mesh shape of {n} devices") as update:
    answer = solve_default(
        model.graph, outputs=model.outputs,
        spec=query(args, setup, None, budget, num_devices=n),
        search=setup.search, mesh_progress=update.on_mesh)
  args.resolved_mesh = answer.result.mesh_shape.text
  return answer.result


def solve(ctx, setup, mesh, args, budget, hint=None):
  """The optimal layout on ``mesh``, with a live progress display
  (``hint``: a previous Plan to start from)."""
  model, topology = setup.model, setup.topology
  unit = "B" if args.objective == "memory" else "s"
  with ctx.progress(f"solving {model.name} on {mesh.text} "
                    f"({topology.name})", unit) as update:
    return auto_layout(model.graph, outputs=model.outputs,
                       spec=query(args, setup, mesh, budget),
                       progress=update, search=setup.search, hint=hint)


def query(args, setup, mesh, budget, num_devices=None):
  """The command's one :class:`autolayout.spec.SearchSpec`, from its parsed
  options: the topology resolved once (:class:`Setup`), the mesh parsed
  once (:func:`mesh_of`), the budget in bytes and the training decisions
  each parsed once by their family (:func:`autolayout.cli.validate.
  fixed_decisions`)."""
  model = setup.model
  return search_spec(
      model.graph, topology=setup.topology, mesh_shape=mesh,
      num_devices=num_devices, memory_budget=budget,
      objective=args.objective, time_limit_s=args.time_limit,
      num_workers=args.workers, seed=args.seed, training=model.train,
      fixed=getattr(args, "fixed_decisions", None),
      param_dtype=model.overrides.get("param_dtype") or "bfloat16",
      overlap=setup.overlap,
      max_axes=getattr(args, "max_axes", None) or DEFAULT_MAX_AXES,
      memory_reserve_fraction=inputs.memory_reserve(args))


def evaluate(model, mesh, rules, topology, overlap=True):
  """The CostReport of ``rules`` on ``mesh``."""
  return costmodels.evaluate(model.graph, mesh, rules, topology,
                             outputs=model.outputs, overlap=overlap,
                             microbatches=model.microbatches)


def header(ctx, command, model, topology, extra="", overlap=True):
  chip = topology.chip
  ctx.line(f"{command}: {model.description}")
  ctx.line("question: " + ("the training step" if model.train else
                           "the forward pass (inference)")
           + ("" if overlap else "; every collective exposed (--no-overlap)"))
  if model.overrides:
    ctx.line("  with " + ",".join(f"{k}={v}"
                                  for k, v in model.overrides.items()))
  ctx.line(f"topology {topology.name}: {topology.num_chips} x {chip.name}, "
           f"{out.fmt_bytes(chip.hbm_bytes)} HBM each, "
           + peak_text(chip))
  if extra:
    ctx.line(extra)
  ctx.line()


def peak_text(chip):
  """``"bf16 peak 312 TFLOP/s (large matmuls priced at 85.9%: 267.9)"``:
  the datasheet peak MFU divides by, and the rate the roofline assumes."""
  peak = chip.peak_bf16_flops_per_s
  eff = chip.matmul_efficiency("bfloat16")
  if eff == 1.0:
    return f"bf16 peak {peak / 1e12:.4g} TFLOP/s"
  return (f"bf16 peak {peak / 1e12:.4g} TFLOP/s (large matmuls priced at "
          f"{eff:.1%}: {peak * eff / 1e12:.4g})")


def model_json(model, topology):
  chip = topology.chip
  return {"name": model.name, "description": model.description,
          "overrides": dict(model.overrides),
          "ops": len(model.graph.operations),
          "topology": topology.name, "chips": topology.num_chips,
          "chip": chip.name,
          "peak_bf16_flops_per_s": chip.peak_bf16_flops_per_s,
          "achievable_bf16_flops_per_s":
              chip.achievable_flops_per_s("bfloat16")}


def payload(model, topology, **rest):
  """A JSON payload's ``model`` record and the command's own keys."""
  return {"model": model_json(model, topology), **rest}


def compare_plot(reports, model, topology):
  """``--plot`` of one or more layouts' costs."""
  return lambda plots: plots.compare_figure(
      reports, f"{model.name} on {topology.name}")


# --- tables of one layout ---------------------------------------------------
def _rules_frame(report):
  sizes = {}
  for t in report.graph.tensors:
    for d in t.shape.dims:
      sizes[d.name] = d.size
  mesh = {d.name: d.size for d in report.mesh_shape.dims}
  rows = []
  for d, a in report.layout_rules.pairs:
    n = math.prod(mesh[x] for x in assignments.option_axes(a))
    rows.append({"dim": d, "size": sizes.get(d),
                 "mesh axis": assignments.option_text(a), "axis size": n,
                 "per device": sizes.get(d, 0) // n})
  return pd.DataFrame(rows, columns=["dim", "size", "mesh axis", "axis size",
                                     "per device"])


def show_rules(ctx, report):
  df = _rules_frame(report)
  if not len(df):
    ctx.line("Layout rules: none (every tensor replicated)")
    return
  out.render(ctx.console, df, "Layout rules", index=False)


def model_flops_utilization(result, model, topology):
  """``6 * params * tokens / (step * chips * peak bf16)`` of a training
  step (the per-step batch is the config's), or None without a config.

  ``peak bf16`` is the datasheet peak, not the achievable rate the
  roofline prices matmuls at: that is the definition of MFU (PaLM,
  Chowdhery et al. 2022), so a plan that ran every matmul at the
  achievable rate with nothing else scores that fraction, not 100%."""
  config = model.config
  if config is None or not hasattr(config, "num_parameters"):
    return None
  tokens = config.batch * getattr(config, "length", 1)
  return (6 * config.num_parameters() * tokens
          / (result.report.step_time_s * topology.num_chips
             * topology.chip.peak_bf16_flops_per_s))


def training_record(result, model, topology, tried=()):
  """The JSON record of a training plan's decisions (None without)."""
  if result.decisions is None:
    return None
  return {"decisions": result.decisions.as_dict(),
          "model_flops_utilization": model_flops_utilization(
              result, model, topology),
          "candidates": [{"decisions": d.as_dict(), "step_time_s": t,
                          "fits": t is not None, "build_solve_s": s}
                         for d, t, s in tried]}


def show_decisions(ctx, result, model, topology):
  from autolayout.training import zero
  from mesh_tf.training.storage import GROUPS
  rows = []
  for k, v in result.decisions._asdict().items():
    if k != "zero_stage":
      rows.append((k, str(v)))
    elif isinstance(v, int):
      rows.append((k, f"{v} (every variable group)"))
    else:   # the stage of each variable group
      rows += [(f"zero_stage {g}", str(zero.stage_of(v, g)))
               for g in GROUPS]
  mfu = model_flops_utilization(result, model, topology)
  if mfu is not None:
    rows.append(("model FLOPs utilization", f"{mfu:.1%}"))
  df = pd.DataFrame(rows, columns=["decision", "value"])
  out.render(ctx.console, df, "Training decisions", index=False)


def show_memory(ctx, report):
  df = out.memory_frame(report).rename(columns={
      "bytes_per_device": "per device", "fraction_of_hbm": "of HBM"})
  # Each category's largest over the step, beside its bytes at the peak: a
  # training step's gradients are often 0 at the peak (the forward pass),
  # which alone reads as if the step had none.
  most = {c: int(v.max()) for c, v in
          report.memory.bytes_by_category_step.items() if len(v)}
  df.insert(1, "most in step", [most.get(c) for c in df.index])
  fmt = lambda v: "-" if v is None or v != v else out.fmt_bytes(v)
  out.render(ctx.console, df, "Memory per device (at the peak)",
             formats={"per device": out.fmt_bytes, "of HBM": out.fmt_pct,
                      "most in step": fmt},
             caption=("fits in usable HBM" if report.fits_in_memory else
                      "DOES NOT FIT in usable HBM")
             + "; most in step: the largest each category reaches")


def show_axes(ctx, report):
  df = out.axes_frame(report)
  df = df[["size", "link", "structure", "bandwidth_bytes_per_s",
           "collectives", "comm_time_s", "hidden_comm_time_s"]].rename(
               columns={"bandwidth_bytes_per_s": "bandwidth",
                        "comm_time_s": "exposed",
                        "hidden_comm_time_s": "hidden"})
  out.render(ctx.console, df, "Communication per mesh axis",
             formats={"bandwidth": out.fmt_rate, "exposed": out.fmt_time,
                      "hidden": out.fmt_time},
             abbrev={"structure": "struct.", "collectives": "coll.",
                     "bandwidth": "bw"},
             caption=("hidden: gradient syncs under the backward pass, "
                      "parameter all-gathers prefetched under earlier "
                      "compute"))


def show_times(ctx, report, result=None):
  rows = [("compute time", out.fmt_time(report.compute_time_s)),
          ("comm time", f"{out.fmt_time(report.comm_time_s)} exposed, "
           f"{out.fmt_time(report.hidden_comm_time_s)} hidden"
           + (f" (slows compute by "
              f"{out.fmt_time(report.interference_time_s)})"
              if report.interference_time_s else "")),
          ("token latency" if result is not None and
           result.objective == "latency" else "step time",
           out.fmt_time(report.step_time_s)),
          ("peak memory", f"{out.fmt_bytes(report.peak_memory_bytes)} of "
           f"{out.fmt_bytes(report.usable_memory_bytes)} usable ("
           f"{out.fmt_bytes(report.hbm_bytes)} HBM, "
           f"{report.memory_reserve_fraction:.0%} reserve)")]
  if result is not None:
    rows += [("status", f"{result.status} (gap {result.gap:.2%}, "
              f"objective {result.objective})"),
             ("solve time", f"{result.solve_time_s:.2f} s (+ "
              f"{result.build_time_s:.2f} s to build the program)")]
  df = pd.DataFrame(rows, columns=["", "value"])
  out.render(ctx.console, df, "Summary", index=False,
             justify={"value": "left"}, show_header=False)
