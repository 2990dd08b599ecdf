"""``mtf-layout report``: the full cost report of one layout."""

from autolayout.cli import common, html, inputs, pipelined_plan, plans
from autolayout.cli import output as out
from autolayout.cli.arguments import add_model_args
from autolayout.cli.context import Answer, Command


def _arguments(p):
  add_model_args(p)
  html.add_argument(p)
  p.add_argument("--layout", "-l", required=True, metavar="RULES",
                 help="layout rules, 'auto', or @PLAN.json (a plan file's "
                 "rules and mesh)")
  p.add_argument("--top", type=int, default=12,
                 help="ops shown in the table (default 12; JSON and CSV "
                 "have all)")
  p.add_argument("--view", default="ops",
                 choices=("ops", "axes", "memory", "collectives",
                          "variables"),
                 help="the table --format csv writes (default ops)")


def _run(args, ctx):
  piped = pipelined_plan.read(args.layout)
  if piped is not None:
    # A pipelined plan: priced by the pipelined cost model.
    return pipelined_plan.report(args, ctx, piped)
  setup = common.Setup(args)
  topology, model = setup.topology, setup.model
  from_plan = plans.layout_arg(args.layout, model, topology, args)
  auto = not from_plan and args.layout.strip().lower() == "auto"
  result = None
  which = "the plan's" if from_plan else "given"
  if auto and not args.mesh:
    result = common.solve_meshes(ctx, setup, args,
                                 inputs.memory_budget(args, topology))
    mesh, which = result.mesh_shape, common.SOLVED_MESH
  else:
    mesh = from_plan[1] if from_plan else common.mesh_of(args, topology)
    if not from_plan and not args.mesh:
      which = common.DEFAULT_MESH
  if from_plan:
    report = common.evaluate(model, mesh, from_plan[0], topology)
  elif auto:
    if result is None:
      result = common.solve(ctx, setup, mesh, args,
                            inputs.memory_budget(args, topology))
    report = result.report
  else:
    rules = inputs.parse_rules(args.layout, model, mesh)
    report = common.evaluate(model, mesh, rules, topology,
                           setup.overlap)
  ops = report.to_dataframe("ops").sort_values("time_s", ascending=False)

  def table(ctx):
    common.header(ctx, "report", model, topology,
                  f"mesh {report.mesh_shape.text} ({which})",
                  overlap=setup.overlap)
    common.show_rules(ctx, report)
    common.show_times(ctx, report, result)
    common.show_memory(ctx, report)
    common.show_axes(ctx, report)
    top = ops.head(args.top).copy()
    top["share"] = top["time_s"] / report.step_time_s \
        if report.step_time_s else 0.0
    top = top[["compute_time_s", "comm_time_s", "time_s", "share",
               "collectives"]].rename(columns={
                   "compute_time_s": "compute", "comm_time_s": "comm",
                   "time_s": "total", "collectives": "coll."})
    out.render(ctx.console, top, f"Top {len(top)} of {len(ops)} ops by "
               "time", caption="comm is charged to the op whose layout "
               "causes it",
               formats={"compute": out.fmt_time, "comm": out.fmt_time,
                        "total": out.fmt_time, "share": out.fmt_pct})

  return Answer(
      json=lambda: common.payload(
          model, topology,
          result=out.layout_record(report, result),
          ops=out.frame_records(ops, "op"),
          memory=out.frame_records(out.memory_frame(report), "category"),
          collectives=out.frame_records(report.to_dataframe("collectives"))),
      csv=lambda: (ops if args.view == "ops"
                   else report.to_dataframe(args.view)),
      csv_index=args.view != "collectives", table=table,
      plot=common.compare_plot(
          {str(report.layout_rules) or "replicated": report}, model,
          topology),
      views=html.one(report, result, model.outputs))


COMMAND = Command(
    "report", help="the full cost report of one layout",
    description="Per-op, per-axis and per-category costs of one layout.",
    add_arguments=_arguments, run=_run)
