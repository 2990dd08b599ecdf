"""Layout-search benchmark: solve time and model size vs. depth.

Builds Transformer LMs (forward + backward + Adam update) of 2, 24, 96 and
192 layers, and solves each on a 2D and a 3D mesh with 2 CP-SAT workers,
printing the time to build the cost tables and the program, the CP-SAT
time to proven optimality (all phases, tie-break included), the time the
solver-independent check (``costmodels.evaluate``) takes, and the model
size.  It then finds the smallest peak memory any layout reaches
(``objective="memory"``) and solves for time again under a budget halfway
between that and the fastest layout's peak, which adds the compressed
memory constraints.  The
"solve / 2-layer" column compares solve time with the 2-layer model's.

A second table puts a hand-written Transformer (benchmarks/handwritten.py:
its own names, mtf.layers and raw einsums under name scopes, SGD) next to
the zoo's of the same sizes and step (SGD), at 8, 32 and 96 layers on
``data:2;model:4`` (dgx-h100): the time ``auto_layout`` takes, split into
building the program and solving it, and the hand-written / zoo ratio.
The machine's load average is printed with it: on a shared machine, rerun
with more ``--repeats`` when it is high.

Reproduce:
  python benchmarks/solve.py                  # all depths
  python benchmarks/solve.py --layers 2 24    # some
  python benchmarks/solve.py --layers --handwritten 8 32 96   # second only
  python benchmarks/solve.py --layers --handwritten 8 --repeats 7
"""

import argparse
import statistics
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(
    __file__))))

# OR-Tools before TensorFlow (which the gradient kernels may load).
from ortools.sat.python import cp_model  # noqa: F401,E402  isort:skip

import rich.console  # noqa: E402
import rich.table  # noqa: E402

import autolayout  # noqa: E402
from autolayout.search import solve as solve_lib  # noqa: E402
from benchmarks import handwritten  # noqa: E402
from mesh_tf.training import optimize  # noqa: E402
from mesh_tf.gradients import gradients  # noqa: E402
from mesh_tf.models.transformer import transformer_lm  # noqa: E402

MESHES = [("2D", "data:2;model:4", "dgx-h100"),
          ("3D", "node:4;data:2;model:4", "h100x8-nodes4")]


def build_model(num_layers):
  m = transformer_lm(layers=num_layers, d_model=1024, heads=16, d_kv=64,
                     d_ff=4096, vocab=32768, length=1024, batch=64)
  grads = gradients([m.loss], m.graph.trainable_variables)
  optimize.AdamWeightDecayOptimizer(1e-4).apply_grads(
      grads, m.graph.trainable_variables)
  return m


def build_zoo_sgd(num_layers):
  """The zoo LM with the hand-written graph's sizes and SGD step."""
  m = transformer_lm(layers=num_layers, d_model=1024, heads=16, d_kv=64,
                     d_ff=4096, vocab=32768, length=1024, batch=64)
  variables = list(m.graph.trainable_variables)
  grads = gradients([m.loss], [v.outputs[0] for v in variables])
  optimize.SgdOptimizer(1e-3).apply_grads(grads, variables)
  return m.graph, [m.loss]


def compare_handwritten(depths, console, workers, time_limit, repeats=3,
                        budget="1TB"):
  """The hand-written graph next to the zoo's, side by side per depth: each
  is solved ``repeats`` times, interleaved, and the median is shown (the
  machine is shared, and one CP-SAT run's time varies).  ``budget``: a
  memory budget every depth fits (96 layers do not fit an H100), so that the
  memory constraints are built and solved as in a real query."""
  load = os.getloadavg()[0]
  table = rich.table.Table(
      title="auto_layout on data:2;model:4 (dgx-h100): hand-written vs zoo "
      f"Transformer, fwd+bwd+SGD, budget {budget} (median of {repeats}, "
      f"interleaved; load average {load:.1f} at start)")
  for col in ("layers", "graph", "ops", "tables", "build s", "solve s",
              "total s", "hand / zoo", "rules"):
    table.add_column(col)
  for n in depths:
    graphs = {label: make(n) for label, make in (
        ("zoo", build_zoo_sgd), ("hand", handwritten.build))}
    runs = {label: [] for label in graphs}
    for _ in range(repeats):
      for label, (graph, outs) in graphs.items():
        t0 = time.perf_counter()
        r = autolayout.auto_layout(graph, "data:2;model:4", outs,
                                   "dgx-h100", memory_budget=budget,
                                   time_limit_s=time_limit,
                                   num_workers=workers)
        runs[label].append((time.perf_counter() - t0, r))
    totals = {}
    for label, (graph, _) in graphs.items():
      total = statistics.median(t for t, _ in runs[label])
      r = runs[label][0][1]
      totals[label] = total
      ratio = (f"{totals['hand'] / totals['zoo']:.2f}x"
               if label == "hand" else "")
      table.add_row(
          str(n), label, str(len(graph.operations)),
          str(r.model_size.tables),
          f"{statistics.median(x.build_time_s for _, x in runs[label]):.2f}",
          f"{statistics.median(x.solve_time_s for _, x in runs[label]):.2f}",
          f"{total:.2f}", ratio, str(r.rules))
  console.print(table)
  console.print(f"load average at the end: {os.getloadavg()[0]:.1f} "
                f"({os.cpu_count()} CPUs)")


def main(argv=None):
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--layers", type=int, nargs="*", default=[2, 24, 96, 192])
  p.add_argument("--handwritten", type=int, nargs="*", default=[8, 32, 96],
                 help="depths of the hand-written vs zoo comparison")
  p.add_argument("--repeats", type=int, default=3,
                 help="runs per graph and depth of the comparison (median)")
  p.add_argument("--workers", type=int, default=2)
  p.add_argument("--time-limit", type=float, default=120.0)
  args = p.parse_args(argv)
  console = rich.console.Console(width=250)
  table = rich.table.Table(title="autolayout: Transformer LM, fwd+bwd+Adam")
  for col in ("layers", "ops", "mesh", "rules", "build s", "solve s",
              "check s", "status", "vars", "constraints", "tables",
              "choices", "solve / 2-layer", "mem steps",
              "min-peak solve s", "budget: build s", "budget: solve s",
              "budget: status"):
    table.add_column(col)
  base = {}
  for n in args.layers:
    t0 = time.perf_counter()
    m = build_model(n)
    graph_s = time.perf_counter() - t0
    for label, mesh, topo in MESHES:
      # One search per graph: its tables serve the min-peak and budget runs.
      search = solve_lib.LayoutSearch(m.graph)
      problem = search.problem(mesh, topo)
      pr = solve_lib.solve_phases(problem.form, ["time", "tie"],
                                  args.time_limit, args.workers, 0)
      rules = solve_lib.rules_of(pr.x)
      t1 = time.perf_counter()
      solve_lib.validate(problem, rules)
      check_s = time.perf_counter() - t1
      size = solve_lib.model_size(problem)
      base.setdefault(label, pr.solve_time_s)
      peak = solve_lib.validate(problem, rules).peak_memory_bytes
      t1 = time.perf_counter()
      floor = search.min_peak(mesh, topo, args.time_limit, args.workers)[0]
      floor_s = time.perf_counter() - t1
      bproblem = search.problem(mesh, topo, memory_budget=(peak + floor) // 2)
      try:
        bpr = solve_lib.solve_phases(bproblem.form, ["time", "tie"],
                                     args.time_limit, args.workers, 0)
        bstatus, bsolve = bpr.status, f"{bpr.solve_time_s:.3f}"
      except solve_lib.InfeasibleLayoutError:
        bstatus, bsolve = "infeasible", "-"
      table.add_row(
          str(n), str(len(m.graph.operations)), f"{label} {mesh}",
          str(rules), f"{problem.build_time_s:.2f}",
          f"{pr.solve_time_s:.3f}", f"{check_s:.2f}", pr.status,
          str(size["variables"]), str(size["constraints"]),
          str(size["tables"]), str(size["table_choices"]),
          f"{pr.solve_time_s / base[label]:.2f}x",
          str(bproblem.form.memory_steps), f"{floor_s:.2f}",
          f"{bproblem.build_time_s:.2f}",
          bsolve, bstatus)
      console.print(f"{n} layers ({graph_s:.1f} s to build the graph), "
                    f"{label}: done")
  if args.layers:
    console.print(table)
  if args.handwritten:
    compare_handwritten(args.handwritten, console, args.workers,
                        args.time_limit, args.repeats)


if __name__ == "__main__":
  main()
