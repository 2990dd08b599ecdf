"""``mtf-layout pareto``: the memory-versus-step-time front."""

import pandas as pd

from autolayout.search.pareto import pareto
from autolayout.cli import common
from autolayout.cli import output as out
from autolayout.cli.arguments import add_model_args
from autolayout.cli.context import Answer, Command


def _arguments(p):
  add_model_args(p, budget=False)
  p.add_argument("--max-points", type=int, default=12,
                 help="most points (default 12)")


def _run(args, ctx):
  setup = common.Setup(args)
  topology, model = setup.topology, setup.model
  mesh = common.mesh_of(args, topology)
  with ctx.progress(f"tracing the Pareto front on {mesh.text}"):
    results, _ = pareto(
        model.graph, mesh, model.outputs, topology, args.max_points,
        args.time_limit, args.workers, args.seed, search=setup.search, overlap=setup.overlap)
  rows = [{"point": i + 1, "rules": str(r.rules) or "(none)",
           "step_time_s": r.step_time_s,
           "peak_memory_bytes": r.peak_memory_bytes,
           "fits": r.peak_memory_bytes <= topology.chip.hbm_bytes,
           "status": r.status} for i, r in enumerate(results)]
  df = pd.DataFrame(rows)

  def table(ctx):
    common.header(ctx, "pareto", model, topology,
                  f"mesh {mesh.text}",
                  overlap=setup.overlap)
    fastest = results[0].step_time_s
    view = df.rename(columns={"step_time_s": "step",
                              "peak_memory_bytes": "peak mem"})
    view["rules"] = view["rules"].map(out.wrap_rules)
    view.insert(3, "slower", [f"{t / fastest - 1:+.0%}" if fastest else "-"
                              for t in df["step_time_s"]])
    view["fits"] = view["fits"].map({True: "yes", False: "NO"})
    statuses = set(view["status"])
    caption = ("each point is the fastest layout using less memory than "
               "the one above it")
    if statuses == {"optimal"}:
      view = view.drop(columns=["status"])
      caption += "; all proven optimal"
    out.render(ctx.console, view, "Pareto front: the fastest layout for "
               "each memory budget", index=False,
               formats={"step": lambda v: out.fmt_time(v, 3),
                        "peak mem": lambda v: out.fmt_bytes(v, 3)},
               caption=caption)

  return Answer(
      json=lambda: common.payload(
          model, topology, mesh=mesh.text,
          points=[out.layout_record(r.report, r) for r in results]),
      csv=lambda: df, csv_index=False, table=table,
      plot=lambda plots: plots.pareto_front(
          results, hbm_bytes=topology.chip.hbm_bytes).figure)


COMMAND = Command(
    "pareto", help="the memory-vs-step-time front",
    description="Every layout that is fastest for some memory budget, from "
    "fastest to leanest.", add_arguments=_arguments, run=_run)
