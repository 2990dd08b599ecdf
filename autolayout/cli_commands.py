"""The subcommands of ``mtf-layout`` (see :mod:`autolayout.cli`).

Each ``cmd_*`` takes the parsed arguments and a :class:`Context`, builds its
pandas tables, and writes them as rich tables, JSON or CSV.  Errors are
raised (typed) and turned into one-line messages by :func:`cli.main`.
"""

import contextlib
import json
import math
import sys
import time

import pandas as pd

import costmodels
from mesh_tf.core.layout import convert_to_layout_rules
from autolayout import cli_inputs as inputs
from autolayout import cli_output as out
from autolayout.cli_models import CliInputError, load_model, parse_overrides


class Context:
  """Where output goes: a rich Console on stdout for tables, one on stderr
  for progress, and the raw stream for JSON/CSV."""

  def __init__(self, fmt, stream=None):
    from rich.console import Console
    self.fmt = fmt
    self.stream = stream or sys.stdout
    self.console = Console(file=self.stream, highlight=False)
    self.err = Console(stderr=True, highlight=False)

  @contextlib.contextmanager
  def progress(self, what, unit="s"):
    """A live display while the solver runs (on stderr, only on a terminal,
    gone when done): a spinner, the elapsed time and, through the yielded
    ``update(best, bound, elapsed_s)``, the best objective so far and the
    solver's bound (``unit``: "s" or "B")."""
    from rich.progress import (Progress, SpinnerColumn, TextColumn,
                               TimeElapsedColumn)
    with Progress(SpinnerColumn(), TextColumn("{task.description}"),
                  TimeElapsedColumn(), console=self.err, transient=True,
                  disable=not self.err.is_terminal) as p:
      task = p.add_task(what, total=None)

      def update(best, bound, elapsed_s):
        fmt = out.fmt_time if unit == "s" else out.fmt_bytes
        # Short enough for 80 columns; the elapsed time has its own column.
        p.update(task, description=(
            f"solving: best {fmt(best)}, bound {fmt(bound)}"))
      yield update

  def json(self, payload):
    json.dump(payload, self.stream, indent=2, allow_nan=False)
    self.stream.write("\n")

  def csv(self, df, index=True):
    out.write_csv(df, self.stream, index=index)

  def line(self, text=""):
    from rich.text import Text
    self.console.print(Text(text))


# --- common setup ------------------------------------------------------------
def _setup(args):
  topology = inputs.get_topology(args.topology)
  model = load_model(args.model, parse_overrides(args.set), args.train)
  return topology, model


def _mesh_of(args, topology):
  text = getattr(args, "mesh", None) or inputs.default_mesh(topology)
  mesh = inputs.parse_mesh(text, topology)
  args.resolved_mesh = inputs.mesh_str(mesh)
  return mesh


def _solve(ctx, model, mesh, topology, args, budget):
  import autolayout
  unit = "B" if args.objective == "memory" else "s"
  with ctx.progress(f"solving {model.name} on {inputs.mesh_str(mesh)} "
                    f"({topology.name})", unit) as update:
    return autolayout.auto_layout(
        model.graph, mesh, model.outputs, topology, budget, args.objective,
        args.time_limit, args.workers, args.seed, progress=update)


def _evaluate(model, mesh, rules, topology):
  return costmodels.evaluate(model.graph, mesh, rules, topology,
                             outputs=model.outputs)


def _header(ctx, command, model, topology, extra=""):
  chip = topology.chip
  ctx.line(f"{command}: {model.description}")
  if model.overrides:
    ctx.line("  with " + ",".join(f"{k}={v}"
                                  for k, v in model.overrides.items()))
  ctx.line(f"topology {topology.name}: {topology.num_chips} x {chip.name}, "
           f"{out.fmt_bytes(chip.hbm_bytes)} HBM each")
  if extra:
    ctx.line(extra)
  ctx.line()


def _model_json(model, topology):
  return {"name": model.name, "description": model.description,
          "overrides": dict(model.overrides),
          "ops": len(model.graph.operations),
          "topology": topology.name, "chips": topology.num_chips,
          "chip": topology.chip.name}


def _payload(command, model, topology, **rest):
  return {"schema": out.SCHEMA, "command": command,
          "model": _model_json(model, topology), **rest}


def _maybe_plot(args, make):
  path = getattr(args, "plot", None)
  if path:
    from autolayout import plots
    fig = make(plots)
    try:
      plots.save(fig, path)
    except (OSError, ValueError) as e:
      raise CliInputError(f"cannot write the plot to {path!r}: {e}",
                          hint="give --plot a writable path ending in "
                          ".png, .svg or .pdf")
    print(f"wrote {path}", file=sys.stderr)


# --- tables shared by solve / report ----------------------------------------
def _rules_frame(report):
  sizes = {}
  for t in report.graph.tensors:
    for d in t.shape.dims:
      sizes[d.name] = d.size
  mesh = {d.name: d.size for d in report.mesh_shape.dims}
  rows = [{"dim": d, "size": sizes.get(d), "mesh axis": a,
           "axis size": mesh[a], "per device": sizes.get(d, 0) // mesh[a]}
          for d, a in report.layout_rules.pairs]
  return pd.DataFrame(rows, columns=["dim", "size", "mesh axis", "axis size",
                                     "per device"])


def _show_rules(ctx, report):
  df = _rules_frame(report)
  if not len(df):
    ctx.line("Layout rules: none (every tensor replicated)")
    return
  out.render(ctx.console, df, "Layout rules", index=False)


def _show_memory(ctx, report):
  df = out.memory_frame(report).rename(columns={
      "bytes_per_device": "per device", "fraction_of_hbm": "of HBM"})
  out.render(ctx.console, df, "Memory per device (at the peak)",
             formats={"per device": out.fmt_bytes, "of HBM": out.fmt_pct},
             caption=("fits in HBM" if report.fits_in_memory else
                      "DOES NOT FIT in HBM"))


def _show_axes(ctx, report):
  df = out.axes_frame(report)
  df = df[["size", "link", "structure", "bandwidth_bytes_per_s",
           "collectives", "comm_time_s"]].rename(columns={
               "bandwidth_bytes_per_s": "bandwidth", "comm_time_s": "comm"})
  out.render(ctx.console, df, "Communication per mesh axis",
             formats={"bandwidth": out.fmt_rate, "comm": out.fmt_time})


def _show_times(ctx, report, result=None):
  rows = [("compute time", out.fmt_time(report.compute_time_s)),
          ("comm time", out.fmt_time(report.comm_time_s)),
          ("token latency" if result is not None and
           result.objective == "latency" else "step time",
           out.fmt_time(report.step_time_s)),
          ("peak memory", f"{out.fmt_bytes(report.peak_memory_bytes)} of "
           f"{out.fmt_bytes(report.hbm_bytes)}")]
  if result is not None:
    rows += [("status", f"{result.status} (gap {result.gap:.2%}, "
              f"objective {result.objective})"),
             ("solve time", f"{result.solve_time_s:.2f} s (+ "
              f"{result.build_time_s:.2f} s to build the program)")]
  df = pd.DataFrame(rows, columns=["", "value"])
  out.render(ctx.console, df, "Summary", index=False,
             justify={"value": "left"}, show_header=False)


# --- solve -------------------------------------------------------------------
def cmd_solve(args, ctx):
  topology, model = _setup(args)
  budget = inputs.memory_budget(args, topology)
  if args.devices is not None:
    import autolayout
    if args.mesh:
      raise CliInputError("give either --mesh or --devices, not both",
                          hint="--devices searches every mesh shape")
    inputs.check_devices(args.devices, topology)
    with ctx.progress(f"solving every mesh of {args.devices} devices"):
      results, _ = autolayout.auto_mesh_and_layout(
          model.graph, args.devices, model.outputs, topology, budget,
          args.objective, args.max_axes, args.time_limit, args.workers,
          args.seed)
    result = results[0]
  else:
    mesh = _mesh_of(args, topology)
    result = _solve(ctx, model, mesh, topology, args, budget)
  report = result.report
  if ctx.fmt == "json":
    ctx.json(_payload("solve", model, topology,
                      result=out.layout_record(report, result)))
  elif ctx.fmt == "csv":
    ctx.csv(pd.DataFrame([out.summary_row(report, result, "auto")]),
            index=False)
  else:
    _header(ctx, "solve", model, topology,
            f"mesh {inputs.mesh_str(report.mesh_shape)}, memory budget "
            f"{out.fmt_bytes(budget) if budget else 'none'}")
    _show_rules(ctx, report)
    _show_memory(ctx, report)
    _show_axes(ctx, report)
    _show_times(ctx, report, result)
  _maybe_plot(args, lambda plots: plots.compare_figure(
      {str(result.rules) or "replicated": report},
      f"{model.name} on {topology.name}"))
  return 0


def cmd_compare(args, ctx):
  topology, model = _setup(args)
  budget = inputs.memory_budget(args, topology)
  base_mesh = _mesh_of(args, topology)
  reports, results, legend = {}, {}, []
  for i, spec in enumerate(args.layout, 1):
    name, rules_text, mesh_text = inputs.parse_layout_spec(spec, i)
    if name in reports:
      raise CliInputError(f"two layouts are named {name!r}",
                          hint="name them: --layout dp=batch:data")
    mesh = inputs.parse_mesh(mesh_text, topology) if mesh_text else base_mesh
    if rules_text.lower() == "auto":
      result = _solve(ctx, model, mesh, topology, args, budget)
      reports[name], results[name] = result.report, result
    else:
      rules = inputs.parse_rules(rules_text, model, mesh)
      reports[name] = _evaluate(model, mesh, rules, topology)
    legend.append({"layout": name, "mesh": inputs.mesh_str(mesh),
                   "rules": inputs.wrap_rules(reports[name].layout_rules)
                   or "(none)"})
  rows = [out.summary_row(r, results.get(n), n) for n, r in reports.items()]
  df = pd.DataFrame(rows).set_index("layout")
  if ctx.fmt == "json":
    ctx.json(_payload("compare", model, topology, layouts=[
        out.layout_record(r, results.get(n), n) for n, r in reports.items()]))
  elif ctx.fmt == "csv":
    ctx.csv(df)
  else:
    _header(ctx, "compare", model, topology)
    out.render(ctx.console, pd.DataFrame(legend), "Layouts", index=False)
    axes = [c for c in df.columns if c.startswith("comm_")
            and c.endswith("_s") and c != "comm_time_s"]
    cols = (["step_time_s", "compute_time_s"] + axes
            + ["peak_memory_bytes", "fits"])
    view = df[cols].rename(columns={
        "step_time_s": "step", "compute_time_s": "compute",
        "peak_memory_bytes": "peak mem",
        **{a: "comm " + a[5:-2] for a in axes}})
    view["fits"] = view["fits"].map({True: "yes", False: "NO"})
    fmts = {c: (lambda v: out.fmt_time(v, 3)) for c in view.columns
            if c not in ("peak mem", "fits")}
    fmts["peak mem"] = lambda v: out.fmt_bytes(v, 3)
    out.render(ctx.console, view, "Per-device costs (* best in column; "
               "step = compute + comm on each axis)",
               formats=fmts, best={c: "min" for c in fmts})
  _maybe_plot(args, lambda plots: plots.compare_figure(
      reports, f"{model.name} on {topology.name}"))
  return 0


# --- report ------------------------------------------------------------------
def cmd_report(args, ctx):
  topology, model = _setup(args)
  mesh = _mesh_of(args, topology)
  result = None
  if args.layout.strip().lower() == "auto":
    result = _solve(ctx, model, mesh, topology, args,
                    inputs.memory_budget(args, topology))
    report = result.report
  else:
    rules = inputs.parse_rules(args.layout, model, mesh)
    report = _evaluate(model, mesh, rules, topology)
  ops = report.to_dataframe("ops").sort_values("time_s", ascending=False)
  if ctx.fmt == "json":
    ctx.json(_payload(
        "report", model, topology,
        result=out.layout_record(report, result),
        ops=out.frame_records(ops, "op"),
        memory=out.frame_records(out.memory_frame(report), "category"),
        collectives=out.frame_records(report.to_dataframe("collectives"))))
  elif ctx.fmt == "csv":
    df = ops if args.view == "ops" else report.to_dataframe(args.view)
    ctx.csv(df, index=args.view != "collectives")
  else:
    _header(ctx, "report", model, topology,
            f"mesh {inputs.mesh_str(report.mesh_shape)}")
    _show_rules(ctx, report)
    _show_times(ctx, report, result)
    _show_memory(ctx, report)
    _show_axes(ctx, report)
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
  _maybe_plot(args, lambda plots: plots.compare_figure(
      {str(report.layout_rules) or "replicated": report},
      f"{model.name} on {topology.name}"))
  return 0


# --- mesh --------------------------------------------------------------------
def cmd_mesh(args, ctx):
  import autolayout
  topology, model = _setup(args)
  budget = inputs.memory_budget(args, topology)
  n = args.devices if args.devices is not None else topology.num_chips
  inputs.check_devices(n, topology)
  with ctx.progress(f"solving every mesh shape of {n} devices"):
    results, table = autolayout.auto_mesh_and_layout(
        model.graph, n, model.outputs, topology, budget, args.objective,
        args.max_axes, args.time_limit, args.workers, args.seed)
  table = table.copy()
  table.insert(0, "rank", pd.array(
      [i + 1 if pd.notna(s) else None
       for i, s in enumerate(table["step_time_s"])], dtype="Int64"))
  if ctx.fmt == "json":
    by_mesh = {inputs.mesh_str(r.mesh_shape): r for r in results}
    ranking = []
    for rec in out.frame_records(table):
      r = by_mesh.get(rec["mesh"])
      rec["result"] = out.layout_record(r.report, r) if r else None
      ranking.append(rec)
    ctx.json(_payload("mesh", model, topology, devices=n, ranking=ranking))
  elif ctx.fmt == "csv":
    ctx.csv(table, index=False)
  else:
    _header(ctx, "mesh", model, topology,
            f"{n} devices, memory budget "
            f"{out.fmt_bytes(budget) if budget else 'none'}")
    view = table[["rank", "mesh", "rules", "step_time_s",
                  "peak_memory_bytes", "status"]].rename(columns={
                      "step_time_s": "step", "peak_memory_bytes": "peak mem"})
    view["rank"] = view["rank"].map(lambda v: "-" if pd.isna(v)
                                    else str(int(v)))
    view["rules"] = view["rules"].map(lambda v: "-" if v is None or (
        isinstance(v, float) and math.isnan(v)) else inputs.wrap_rules(v or
                                                               "(none)"))
    out.render(ctx.console, view, "Mesh shapes, each with its optimal "
               "layout (* best)", index=False,
               formats={"step": out.fmt_time, "peak mem": out.fmt_bytes},
               best={"step": "min"},
               caption="no-fit: does not embed in the topology; "
               "infeasible: over budget\n(peak mem: the least any layout "
               "needs)")
  _maybe_plot(args, lambda plots: plots.mesh_ranking(table).figure)
  return 0


# --- pareto ------------------------------------------------------------------
def cmd_pareto(args, ctx):
  import autolayout
  topology, model = _setup(args)
  mesh = _mesh_of(args, topology)
  with ctx.progress(f"tracing the Pareto front on {inputs.mesh_str(mesh)}"):
    results, _ = autolayout.pareto(
        model.graph, mesh, model.outputs, topology, args.max_points,
        args.time_limit, args.workers, args.seed)
  rows = [{"point": i + 1, "rules": str(r.rules) or "(none)",
           "step_time_s": r.step_time_s,
           "peak_memory_bytes": r.peak_memory_bytes,
           "fits": r.peak_memory_bytes <= topology.chip.hbm_bytes,
           "status": r.status} for i, r in enumerate(results)]
  df = pd.DataFrame(rows)
  if ctx.fmt == "json":
    ctx.json(_payload("pareto", model, topology, mesh=inputs.mesh_str(mesh),
                      points=[out.layout_record(r.report, r)
                              for r in results]))
  elif ctx.fmt == "csv":
    ctx.csv(df, index=False)
  else:
    _header(ctx, "pareto", model, topology, f"mesh {inputs.mesh_str(mesh)}")
    fastest = results[0].step_time_s
    view = df.rename(columns={"step_time_s": "step",
                              "peak_memory_bytes": "peak mem"})
    view["rules"] = view["rules"].map(_wrap_rules)
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
  _maybe_plot(args, lambda plots: plots.pareto_front(
      results, hbm_bytes=topology.chip.hbm_bytes).figure)
  return 0


# --- topologies --------------------------------------------------------------
def _shape_text(t):
  """``"16x16 torus"``, ``"4x4 mesh"`` or ``"4x8 nvlink4+ib-ndr"``."""
  sizes = "x".join(str(d.size) for d in t.dims)
  if all(d.structure == "switch" for d in t.dims):
    links = "+".join(d.link.name.replace("infiniband-", "ib-")
                     for d in reversed(t.dims) if d.size > 1)
    return f"{sizes} {links}"
  wrap = [d.wraparound for d in t.dims if d.size > 1]
  kind = "torus" if wrap and all(wrap) else "mesh" if not any(wrap) \
      else "partial torus"
  return f"{sizes} {kind}"


def topologies_frame(files=()):
  """One row per preset topology, then per topology file in ``files``:
  chips, chip, HBM, peak FLOP/s, the chip's own link bandwidth, and its
  physical shape."""
  rows = []
  for name in list(costmodels.list_topologies()) + list(files):
    t = inputs.get_topology(name)
    rows.append({"topology": name, "chips": t.num_chips,
                 "chip": t.chip.name,
                 "hbm_bytes": t.chip.hbm_bytes,
                 "bf16_flops_per_s": t.chip.peak_bf16_flops_per_s,
                 "link_bytes_per_s": t.chip.link.bandwidth_bytes_per_s,
                 "shape": _shape_text(t)})
  return pd.DataFrame(rows).set_index("topology")


def cmd_topologies(args, ctx):
  df = topologies_frame(getattr(args, "files", ()))
  if ctx.fmt == "json":
    ctx.json({"schema": out.SCHEMA, "command": "topologies",
              "topologies": [
                  {**rec, "dims": [
                      {"name": d.name, "size": d.size,
                       "link": d.link.name, "link_kind": d.link.kind,
                       "structure": d.structure,
                       "wraparound": d.wraparound,
                       "bandwidth_bytes_per_s":
                           d.link.bandwidth_bytes_per_s,
                       "latency_s": d.link.latency_s}
                      for d in inputs.get_topology(rec["topology"]).dims]}
                  for rec in out.frame_records(df, "topology")]})
  elif ctx.fmt == "csv":
    ctx.csv(df)
  else:
    view = df.drop(columns=["chip"]).rename(columns={"hbm_bytes": "HBM",
                              "bf16_flops_per_s": "TFLOP/s",
                              "link_bytes_per_s": "link"})
    out.render(ctx.console, view, "Preset topologies (link: the chip's "
               "own link, per direction)",
               formats={"HBM": lambda b: f"{b / 1e9:.3g} GB",
                        "TFLOP/s": lambda f: f"{f / 1e12:.4g}",
                        "link": out.fmt_rate},
               caption="other sizes of these families also work, e.g. "
               "tpu-v4-8x8x8, h100x8-nodes32, h100x8-nodes4-xdr")
  return 0


def _wrap_rules(rules):
  """Rules with a space after each ``;`` so long ones wrap between rules."""
  return str(rules).replace(";", "; ")


# --- explain -----------------------------------------------------------------
def cmd_explain(args, ctx):
  from autolayout.result import LayoutResult
  topology, model = _setup(args)
  mesh = _mesh_of(args, topology)
  budget = inputs.memory_budget(args, topology)
  if args.layout.strip().lower() == "auto":
    result = _solve(ctx, model, mesh, topology, args, budget)
  else:
    rules = inputs.parse_rules(args.layout, model, mesh)
    report = _evaluate(model, mesh, rules, topology)
    objective = getattr(args, "objective", None) or "time"
    result = LayoutResult(rules, mesh, report, objective,
                          report.step_time_s, "given", report.step_time_s, 0.0, 0.0, 0.0, {},
                          budget, topology, graph=model.graph,
                          outputs=tuple(model.outputs or ()))
  with ctx.progress("pricing each rule's alternatives"):
    ex = result.explain()
  base = result.report
  if ctx.fmt == "json":
    ctx.json(_payload("explain", model, topology,
                      result=out.layout_record(
                          base, result if result.status != "given" else None),
                      rules=out.frame_records(ex)))
  elif ctx.fmt == "csv":
    ctx.csv(ex, index=False)
  else:
    _header(ctx, "explain", model, topology, f"mesh {inputs.mesh_str(mesh)}")
    ctx.line(f"layout {base.layout_rules or '(none)'}: step "
             f"{out.fmt_time(base.step_time_s)}, peak "
             f"{out.fmt_bytes(base.peak_memory_bytes)}")
    rows = []
    for _, r in ex.iterrows():
      rows.append({
          "rule": f"{r['dim']}:{r['axis']}",
          "without it": out.fmt_delta(r["without_step_time_s"],
                                      base.step_time_s),
          "mem without": _mem_delta(r["without_peak_memory_bytes"],
                                    base.peak_memory_bytes),
          "runner-up": r["runner_up_axis"] or "-",
          "on runner-up": out.fmt_delta(r["runner_up_step_time_s"],
                                        base.step_time_s)})
    out.render(ctx.console, pd.DataFrame(rows, columns=[
        "rule", "without it", "mem without", "runner-up", "on runner-up"]),
        "Each rule vs. dropping it and vs. its runner-up axis (step time)",
        index=False)
    for _, r in ex.iterrows():
      ctx.line(_why(r, base))
  def make(plots):
    variants = {"chosen": base}
    for dim, _ in base.layout_rules.pairs:
      rest = [(d, a) for d, a in base.layout_rules.pairs if d != dim]
      try:
        variants[f"-{dim}"] = _evaluate(model, mesh, convert_to_layout_rules(
            ";".join(f"{d}:{a}" for d, a in rest)), topology)
      except Exception:  # pylint: disable=broad-except
        pass  # dropping a rule can leave an invalid layout; skip that bar
    return plots.compare_figure(variants, "Dropping each rule")
  _maybe_plot(args, make)
  return 0


def _mem_delta(new, base):
  if new is None or (isinstance(new, float) and math.isnan(new)):
    return "-"
  d = new - base
  return ("+" if d >= 0 else "-") + out.fmt_bytes(abs(d))


def _why(r, base):
  rule = f"{r['dim']}:{r['axis']}"
  t0, w = base.step_time_s, r["without_step_time_s"]
  parts = []
  if w is None or (isinstance(w, float) and math.isnan(w)):
    parts.append("dropping it gives an invalid layout")
  else:
    dt = w - t0
    if dt > 0:
      parts.append(f"dropping it makes the step {out.fmt_time(dt)} slower")
    elif dt < 0:
      parts.append(f"dropping it makes the step {out.fmt_time(-dt)} "
                   "faster, but the layout needs it for memory")
    else:
      parts.append("dropping it leaves the step time unchanged")
    dm = r["without_peak_memory_bytes"] - base.peak_memory_bytes
    if dm > 0:
      parts.append(f"and needs {out.fmt_bytes(dm)} more per device")
      if r["without_peak_memory_bytes"] > base.hbm_bytes:
        parts.append("(over HBM)")
  if r["runner_up_axis"]:
    dr = r["runner_up_step_time_s"] - t0
    parts.append(f"; on {r['runner_up_axis']} instead it would be "
                 f"{out.fmt_time(abs(dr))} "
                 f"{'slower' if dr >= 0 else 'faster'}")
  return f"{rule}: " + " ".join(parts).replace(" ;", ";")


# --- errors ------------------------------------------------------------------
def infeasible_message(err, args):
  """``(message, hint)`` for an InfeasibleLayoutError."""
  peak, budget = err.min_peak_bytes, err.memory_budget
  mesh = getattr(args, "resolved_mesh", None) or (
      f"{getattr(args, 'devices', None) or 'any number of'} devices")
  if peak is None:
    return str(err), "raise --memory-budget or use more devices"
  big = ", ".join(f"{n} {out.fmt_bytes(b)}" for n, b in err.dominating[:3])
  msg = (f"no layout of {args.model} on {mesh} ({args.topology}) fits the "
         f"memory budget of {out.fmt_bytes(budget)} per device; the "
         f"smallest feasible peak memory is {out.fmt_bytes(peak)} "
         f"({peak} bytes)")
  if peak >= 2**30:
    need = f"{math.ceil(peak / 2**30 * 10) / 10:g}GiB"
  else:
    need = f"{math.ceil(peak / 2**20)}MiB"
  hint = (f"use --memory-budget {need} or more (or "
          f"none), more devices, or a smaller model; largest tensors at "
          f"the peak: {big}")
  return msg, hint


def cmd_calibrate(args, ctx):
  from autolayout import cli_calibrate
  return cli_calibrate.cmd_calibrate(args, ctx)


COMMANDS = {"solve": cmd_solve, "compare": cmd_compare, "report": cmd_report,
            "mesh": cmd_mesh, "pareto": cmd_pareto,
            "topologies": cmd_topologies, "explain": cmd_explain,
            "calibrate": cmd_calibrate}


def run(args, stream=None):
  """Runs the subcommand ``args.command``; returns the exit code."""
  ctx = Context(args.format, stream)
  t0 = time.perf_counter()
  code = COMMANDS[args.command](args, ctx)
  if ctx.fmt == "table" and args.command not in ("topologies", "calibrate"):
    ctx.err.print(f"[dim]done in {time.perf_counter() - t0:.1f} s[/]")
  return code
