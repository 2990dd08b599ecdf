"""``mtf-layout mesh``: every mesh shape of N devices, ranked."""

import math

import pandas as pd

from autolayout.meshes.mesh_search import auto_mesh_and_layout
from autolayout.cli import common, html, inputs
from autolayout.cli import output as out
from autolayout.cli.arguments import add_model_args
from autolayout.cli.context import Answer, Command


def _arguments(p):
  add_model_args(p, mesh=False)
  html.add_argument(p)
  p.add_argument("--devices", "-n", type=int,
                 help="number of devices (default: the topology's chips)")
  p.add_argument("--max-axes", type=int, default=2,
                 help="most mesh axes (default 2)")


def _rules_cell(v):
  if v is None or (isinstance(v, float) and math.isnan(v)):
    return "-"
  return out.wrap_rules(v or "(none)")


def _run(args, ctx):
  setup = common.Setup(args)
  topology, model = setup.topology, setup.model
  budget = inputs.memory_budget(args, topology)
  n = args.devices if args.devices is not None else topology.num_chips
  inputs.check_devices(n, topology)
  with ctx.progress(f"solving every mesh shape of {n} devices") as update:
    results, table = auto_mesh_and_layout(
        model.graph, n, model.outputs, topology, budget, args.objective,
        args.max_axes, args.time_limit, num_workers=args.workers,
        seed=args.seed,
        search=setup.search, overlap=setup.overlap, physical_names=True,
        progress=update.on_mesh)
  table = table.copy()
  table.insert(0, "rank", pd.array(
      [i + 1 if pd.notna(s) else None
       for i, s in enumerate(table["step_time_s"])], dtype="Int64"))

  def json():
    by_mesh = {r.mesh_shape.text: r for r in results}
    ranking = []
    for rec in out.frame_records(table):
      r = by_mesh.get(rec["mesh"])
      rec["result"] = out.layout_record(r.report, r) if r else None
      ranking.append(rec)
    return common.payload(model, topology, devices=n, ranking=ranking)

  def show(ctx):
    common.header(ctx, "mesh", model, topology,
                  f"{n} devices, memory budget "
                  f"{out.fmt_bytes(budget) if budget else 'none'}",
                  overlap=setup.overlap)
    view = table[["rank", "mesh", "rules", "step_time_s",
                  "peak_memory_bytes", "status"]].rename(columns={
                      "step_time_s": "step", "peak_memory_bytes": "peak mem"})
    view["rank"] = view["rank"].map(lambda v: "-" if pd.isna(v)
                                    else str(int(v)))
    view["rules"] = view["rules"].map(_rules_cell)
    out.render(ctx.console, view, "Mesh shapes, each with its optimal "
               "layout (* best)", index=False,
               formats={"step": out.fmt_time, "peak mem": out.fmt_bytes},
               best={"step": "min"},
               caption="no-fit: does not embed in the topology; "
               "infeasible: over budget\n(peak mem: the least any layout "
               "needs)")

  return Answer(json=json, csv=lambda: table, csv_index=False, table=show,
                plot=lambda plots: plots.mesh_ranking(table).figure,
                views=html.ranked(results, model.outputs))


COMMAND = Command(
    "mesh", help="rank every mesh shape of N devices",
    description="Solve every mesh shape of N devices that embeds in the "
    "topology and rank them.", add_arguments=_arguments, run=_run)
