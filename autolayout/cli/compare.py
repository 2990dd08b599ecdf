"""``mtf-layout compare``: several layouts side by side."""

import pandas as pd

from autolayout.cli import common, html, inputs, plans
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


def _run(args, ctx):
  setup = common.Setup(args)
  topology, model = setup.topology, setup.model
  budget = inputs.memory_budget(args, topology)
  base_mesh = common.mesh_of(args, topology)
  reports, results, legend = {}, {}, []
  for i, spec in enumerate(args.layout, 1):
    name, rules_text, mesh_text = inputs.parse_layout_spec(spec, i)
    ref = plans.layout_ref(spec)
    if ref is not None:  # [NAME=]@plan.json: its rules on its mesh
      name = ref[0] or ref[1]
    if name in reports:
      raise CliInputError(f"two layouts are named {name!r}",
                          hint="name them: --layout dp=batch:data")
    if ref is not None:
      rules, mesh, _ = plans.layout("@" + ref[1], model, topology)
      reports[name] = common.evaluate(model, mesh, rules, topology)
    elif rules_text.lower() == "auto":
      if mesh_text or args.mesh:
        mesh = (inputs.parse_mesh(mesh_text, topology) if mesh_text
                else base_mesh)
        result = common.solve(ctx, setup, mesh, args, budget)
      else:  # the layout and mesh `solve` would give
        result = common.solve_meshes(ctx, setup, args, budget)
        mesh = result.mesh_shape
      reports[name], results[name] = result.report, result
    else:
      mesh = (inputs.parse_mesh(mesh_text, topology) if mesh_text
              else base_mesh)
      rules = inputs.parse_rules(rules_text, model, mesh)
      reports[name] = common.evaluate(model, mesh, rules, topology,
                                      setup.overlap)
    legend.append({"layout": name, "mesh": mesh.text,
                   "rules": out.wrap_rules(reports[name].layout_rules)
                   or "(none)"})
  rows = [out.summary_row(r, results.get(n), n) for n, r in reports.items()]
  df = pd.DataFrame(rows).set_index("layout")

  def table(ctx):
    common.header(ctx, "compare", model, topology,
                  overlap=setup.overlap)
    out.render(ctx.console, pd.DataFrame(legend), "Layouts", index=False)
    axes = [c for c in df.columns if c.startswith("comm_")
            and c.endswith("_s") and c != "comm_time_s"]
    interference = [r.interference_time_s for r in reports.values()]
    extra = ["interference_time_s"] if any(interference) else []
    cols = (["step_time_s", "compute_time_s"] + axes + extra
            + ["peak_memory_bytes", "fits"])
    view = df[cols].rename(columns={
        "step_time_s": "step", "compute_time_s": "compute",
        "interference_time_s": "interf.",
        "peak_memory_bytes": "peak mem",
        **{a: "comm " + a[5:-2] for a in axes}})
    view["fits"] = view["fits"].map({True: "yes", False: "NO"})
    fmts = {c: (lambda v: out.fmt_time(v, 3)) for c in view.columns
            if c not in ("peak mem", "fits")}
    fmts["peak mem"] = lambda v: out.fmt_bytes(v, 3)
    out.render(ctx.console, view, "Per-device costs (* best in column)",
               formats=fmts, best={c: "min" for c in fmts},
               caption="step = compute + exposed comm on each axis"
               + (" + interf. (interference: the compute slowed by the "
                  "comm hidden under it)" if extra else ""))

  return Answer(
      json=lambda: common.payload(model, topology, layouts=[
          out.layout_record(r, results.get(n), n)
          for n, r in reports.items()]),
      csv=lambda: df, table=table,
      plot=common.compare_plot(reports, model, topology),
      views=html.several(reports, model.outputs, budget))


COMMAND = Command(
    "compare", help="several layouts side by side",
    description="Cost several layouts on one model and topology; the best "
    "value of each column is marked *.", add_arguments=_arguments, run=_run)
