"""``mtf-layout compare``: several layouts side by side.  A pipelined plan
(``-l @plan.json``) is priced by the pipelined cost model and its bubble
is a column of its own."""

import os

import pandas as pd

from autolayout.cli import common, html, inputs, pipelined_plan, plans
from autolayout.cli import output as out
from autolayout.cli.arguments import add_model_args
from autolayout.cli.context import Answer, Command
from autolayout.cli.errors import CliInputError


def _arguments(p):
  add_model_args(p)
  html.add_argument(p)
  p.add_argument("--layout", "-l", action="append", required=True,
                 metavar="[NAME=]RULES[@MESH]",
                 help="a layout: rules such as 'batch:data;d_ff:model', "
                 "'auto' (the solver's), or '' (replicated); optionally "
                 "named and on its own mesh: dp=batch:data@data:16; or a "
                 "plan file's rules and mesh: [NAME=]@plan.json. Repeat.")


def _pipelined(specs):
  """``{spec: pipelined Plan}`` of the ``[NAME=]@plan.json`` layouts that
  are pipelined plans."""
  out = {}
  for spec in specs:
    ref = plans.layout_ref(spec)
    if ref is not None:
      plan = pipelined_plan.read("@" + ref[1])
      if plan is not None:
        out[spec] = plan
  return out


def _setup(args, piped):
  """The :class:`~autolayout.cli.common.Setup` of the layouts that are not
  pipelined plans (without ``--model``, the first unpipelined plan's
  question); None when every layout is a pipelined plan and no
  ``--model`` is given."""
  rest = [s for s in args.layout if s not in piped]
  refs = [plans.layout_ref(s) for s in rest]
  first = next((r for r in refs if r is not None), None)
  if not args.model and first is not None:
    return common.Setup(args, layout="@" + first[1])
  if not args.model and not rest:
    return None
  if not args.model:
    raise CliInputError(
        "--model is required to price layouts that are not plan files "
        "beside a pipelined plan", hint="add -m (and --set) of the plan's "
        "model, e.g. -m transformer_tiny --set layers=4")
  return common.Setup(args)


def _run(args, ctx):
  piped = _pipelined(args.layout)
  setup = _setup(args, piped)
  if setup is None:  # pipelined plans only: the first one's question
    first = next(iter(piped.values()))
    topology, model = first.topology, None
  else:
    topology, model = setup.topology, setup.model
  budget = inputs.memory_budget(args, topology)
  reports, results, legend, rows, records = {}, {}, [], [], []
  model_record = None
  for i, spec in enumerate(args.layout, 1):
    name, rules_text, mesh_text = inputs.parse_layout_spec(spec, i)
    ref = plans.layout_ref(spec)
    if ref is not None:  # [NAME=]@plan.json: its rules on its mesh
      name = ref[0] or os.path.basename(ref[1])
    if name in reports:
      raise CliInputError(f"two layouts are named {name!r}",
                          hint="name them: --layout dp=@plan.json")
    if spec in piped:
      plan = piped[spec]
      config, costs = pipelined_plan.config_for(plan, ref[1], args)
      if model is None and model_record is None:
        model_record = pipelined_plan.model_json(plan, config)
      reports[name] = None  # priced by the pipelined cost model
      rows.append(pipelined_plan.summary_row(plan, costs, name))
      records.append(pipelined_plan.record(plan, costs, name))
      legend.append({"layout": name, "mesh": plan.mesh_shape.text,
                     "rules": out.wrap_rules(plan.rules) or "(none)"})
      continue
    if ref is not None:
      rules, mesh, _ = plans.layout("@" + ref[1], model, topology)
      reports[name] = common.evaluate(model, mesh, rules, topology)
    elif rules_text.lower() == "auto":
      if mesh_text or args.mesh:
        mesh = (inputs.parse_mesh(mesh_text, topology) if mesh_text
                else common.mesh_of(args, topology))
        result = common.solve(ctx, setup, mesh, args, budget)
      else:  # the layout and mesh `solve` would give
        result = common.solve_meshes(ctx, setup, args, budget)
        mesh = result.mesh_shape
      reports[name], results[name] = result.report, result
    else:
      mesh = (inputs.parse_mesh(mesh_text, topology) if mesh_text
              else common.mesh_of(args, topology))
      rules = inputs.parse_rules(rules_text, model, mesh)
      reports[name] = common.evaluate(model, mesh, rules, topology,
                                      setup.overlap)
    rows.append(out.summary_row(reports[name], results.get(name), name))
    records.append(out.layout_record(reports[name], results.get(name), name))
    legend.append({"layout": name, "mesh": mesh.text,
                   "rules": out.wrap_rules(reports[name].layout_rules)
                   or "(none)"})
  df = pd.DataFrame(rows).set_index("layout")
  flat = {n: r for n, r in reports.items() if r is not None}

  def table(ctx):
    if model is not None:
      common.header(ctx, "compare", model, topology, overlap=setup.overlap)
    else:
      ctx.line(f"compare: {model_record['description']}")
      ctx.line(f"topology {topology.name}: {topology.num_chips} x "
               f"{topology.chip.name}, {out.fmt_bytes(topology.chip.hbm_bytes)}"
               " HBM each, " + common.peak_text(topology.chip))
      ctx.line()
    out.render(ctx.console, pd.DataFrame(legend), "Layouts", index=False)
    axes = [c for c in df.columns if c.startswith("comm_")
            and c.endswith("_s") and c != "comm_time_s"]
    extra = (["interference_time_s"]
             if df["interference_time_s"].fillna(0).any() else [])
    bubble = (["bubble_time_s"] if "bubble_time_s" in df.columns else [])
    cols = (["step_time_s", "compute_time_s"] + axes + bubble + extra
            + ["peak_memory_bytes", "fits"])
    view = df[cols].rename(columns={
        "step_time_s": "step", "compute_time_s": "compute",
        "interference_time_s": "interf.", "bubble_time_s": "bubble",
        "peak_memory_bytes": "peak mem",
        **{a: "comm " + a[5:-2] for a in axes}})
    view["fits"] = view["fits"].map({True: "yes", False: "NO"})
    fmts = {c: (lambda v: out.fmt_time(v, 3)) for c in view.columns
            if c not in ("peak mem", "fits")}
    fmts["peak mem"] = lambda v: out.fmt_bytes(v, 3)
    out.render(ctx.console, view, "Per-device costs (* best in column)",
               formats=fmts, best={c: "min" for c in fmts},
               caption="step = compute + exposed comm on each axis"
               + (" + bubble (a pipelined plan's stages waiting for the "
                  "first and last microbatches)" if bubble else "")
               + (" + interf. (interference: the compute slowed by the "
                  "comm hidden under it)" if extra else ""))

  def payload():
    if model is not None:
      return common.payload(model, topology, layouts=records)
    return {"model": model_record, "layouts": records}

  return Answer(
      json=payload, csv=lambda: df, table=table,
      plot=(common.compare_plot(flat, model, topology) if flat else None),
      views=html.several(reports, model.outputs if model else None, budget))


COMMAND = Command(
    "compare", help="several layouts side by side",
    description="Cost several layouts on one model and topology; the best "
    "value of each column is marked *.", add_arguments=_arguments, run=_run)
