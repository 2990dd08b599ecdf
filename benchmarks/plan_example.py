"""Where the README plan example's time goes, phase by phase.

The README's plan example

  mtf-layout solve -m transformer_tiny -t dgx-h100 --mesh 'data:2;model:4' \\
      --memory-budget 20000 --save a.json

lays out a 5K-parameter model, yet took 27.7 s while printing "solve time
0.70 s (+ 8.38 s to build)".  Its budget (20,000 B) fits no layout of the
step as built, so the training decisions are searched: a walk over the
microbatch counts k (each a set of ZeRO-stage x recompute candidates, each
candidate a CP-SAT program) and then a descent over per-group stages.  The
"solve time" line is the last program's alone.

What the search no longer does (each leaves the answer as it was):

* the eager explanation of the k = 1 candidates' infeasibility (their most
  memory-saving candidate's own search for its smallest peak), which ran
  at every k where no candidate fits, although only a search in which no
  k fits reports it (timed below);
* building the program of a candidate whose memory alone fits no layout:
  the scan of every valid global layout over the memory steps
  (``autolayout.search.memory_steps.prune_by_layouts``, its
  ``least_peak``) proves it in milliseconds: 38 of the 60 programs built
  before (the step as built's among them), where 15 are built now;
* solving again what an earlier phase proved: the descent asks for the
  plan it starts from and its neighbours' fates again (6 programs;
  ``autolayout.training.candidate_search.Known``);
* 89 memory steps in each per-group-stage program where 7 give the same
  constraints (the step pruning now scans those meshes' 8,247 layouts),
  and CP-SAT without presolve on these budget-bound programs (half the
  solve);
* importing SciPy (twice), matplotlib and networkx, which a solve never
  uses (0.6 s).
* building each candidate's op keys, scopes and tables anew: the
  candidates on one mesh and dim-axis space share them (922 tables built
  where 92k were asked for), and the memory schedule lays out its chosen
  order once, not again for the liveness (1dc2e67 -> x42fast: 7.3 s ->
  6.7 s CPU, medians of 3, load 4).

* (this round, 7f764c0 -> h42fast; every program's CP-SAT proto and
  every scope table identical to 7f764c0's, checked on all 15) the
  cyclic collector walking the live graphs: 1,359 collections, 0.93 s
  of CPU, now 249 and 0.25 s (``autolayout.cli.app.GC_THRESHOLDS``), and
  the shutdown's collection of the search's leftovers, 0.3-0.5 s
  (``program``: ``gc.freeze`` once the answer is written); the overlap
  chains written term by term (each step's terms now summed per table
  choice with numpy, one weighted sum per constraint); the scope
  tables' per-assignment Python loops (gathers, overlap terms: numpy
  columns); every all-reduce record priced again per candidate and
  table (15k asked, 4k distinct, now kept with the shared structure);
  a Shape's hash and size recomputed ~5 x 10^5 times, a layout rule
  lookup that built a dict per dim, the memory schedule's sets rebuilt
  per step, and the memory steps' dominance scan (numpy).  Side by
  side at load 5, ``--bytecode``: 7.0 s of CPU before, 5.4 s after
  (medians of 3; ratio 0.78); see the report of h42fast for quiet
  numbers.

Measured side by side on the shared 2-core machine (``--against``, the
CLI command alternately from main 2ae876a and from this tree, load 4-9):
19.5 s of CPU before, 7.3 s after (medians; imports included), 40.9 s
and 18.7 s of wall at load 8-9; before, it took 16.4 s of wall on a quiet
machine.  Without ``--against`` this script runs the command in-process
(``--time-limit 600``, so that a loaded machine cannot cut the search
short and change the answer), prints the CLI's own phase summary (the
phases add up to the wall time), and then times the eager explanation
alone.  Wall and CPU seconds are both printed: on a shared machine the
wall time varies with the load, the CPU time less.

Reproduce:
  python benchmarks/plan_example.py
  # side by side with another tree (e.g. ``git archive 2ae876a | tar -x
  # -C /tmp/base``), the CLI command alternately in each, N times:
  python benchmarks/plan_example.py --against /tmp/base --runs 3
  # the same, each tree's modules compiled once and kept (as installed;
  # where PYTHONDONTWRITEBYTECODE is set every run compiles ~0.2 s):
  python benchmarks/plan_example.py --against /tmp/base --runs 3 --bytecode
"""

import argparse
import io
import os
import resource
import subprocess
import sys
import tempfile
import time
from contextlib import redirect_stderr, redirect_stdout

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(
    __file__))))

# OR-Tools before TensorFlow (which the gradient kernels may load).
from ortools.sat.python import cp_model  # noqa: F401,E402  isort:skip

ARGS = ["solve", "-m", "transformer_tiny", "-t", "dgx-h100", "--mesh",
        "data:2;model:4", "--memory-budget", "20000", "--time-limit", "600"]


def _clock():
  return time.perf_counter(), time.process_time()


def _since(t):
  wall, cpu = _clock()
  return wall - t[0], cpu - t[1]


def main():
  from autolayout.cli import main as cli_main
  from autolayout.errors import InfeasibleLayoutError
  from autolayout.training.decisions import (Candidates, TrainingDecisions,
                                             explain_infeasible,
                                             recompute_choices)
  from mesh_tf.models.configs import get_config
  import costmodels
  print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
  with tempfile.TemporaryDirectory() as d:
    out, err = io.StringIO(), io.StringIO()
    t = _clock()
    with redirect_stdout(out), redirect_stderr(err):
      code = cli_main(ARGS + ["--save", os.path.join(d, "a.json")])
    wall, cpu = _since(t)
  assert code == 0, err.getvalue()
  step = [l for l in out.getvalue().splitlines()
          if l.startswith("step time")]
  print(f"README plan example: {wall:.1f} s wall, {cpu:.1f} s CPU; "
        f"{step[0].split(None, 2)[2].strip()} step")
  print(" ".join(err.getvalue().split()))
  # The work removed: the eager explanation at k = 1 (every candidate of
  # it over budget), timed alone on fresh candidates.
  config = get_config("transformer_tiny")
  cands = Candidates(config)
  pairs = [TrainingDecisions("bfloat16", s, r, 1) for s in (0, 1, 2, 3)
           for r in recompute_choices(config.layers)]
  t = _clock()
  try:
    explain_infeasible(cands, pairs, "data:2;model:4",
                       costmodels.get_topology("dgx-h100"), 20000, 600.0)
  except InfeasibleLayoutError:
    pass
  ewall, ecpu = _since(t)
  print(f"removed: the eager explanation of k=1's infeasibility, "
        f"{ewall:.1f} s wall, {ecpu:.1f} s CPU ("
        f"{ewall / (wall + ewall):.0%} of the run it was part of)")


def _env(tree, d, name, bytecode):
  """The environment of one tree's runs: its sources first on the path;
  with ``bytecode``, compiled modules kept under ``d`` (neither tree's
  folder is written) as an installed package keeps them."""
  env = dict(os.environ, PYTHONPATH=tree)
  if bytecode:
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPYCACHEPREFIX"] = os.path.join(d, f"pycache-{name}")
  return env


def against(base, runs, bytecode=False):
  """The CLI command as a fresh process, alternately from ``base`` and from
  this tree, ``runs`` times each: wall and CPU (user + sys, CP-SAT's
  threads included) side by side, with the load when each started.
  ``bytecode``: each tree runs once untimed first, and its compiled
  modules are kept for the timed runs (where PYTHONDONTWRITEBYTECODE is
  set, every run otherwise compiles the trees' ~240 modules again: about
  0.2 s of CPU)."""
  here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  trees = (("base", os.path.abspath(base)), ("this", here))
  got = {name: [] for name, _ in trees}
  with tempfile.TemporaryDirectory() as d:
    cmds = {name: [sys.executable, "-m", "autolayout.cli"] + ARGS + [
        "--save", os.path.join(d, f"{name}.json")] for name, _ in trees}
    for name, tree in trees if bytecode else ():
      subprocess.run(cmds[name], env=_env(tree, d, name, True), cwd=d,
                     capture_output=True, check=True)
    for i in range(runs):
      for name, tree in trees:
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        load, t = os.getloadavg()[0], time.perf_counter()
        done = subprocess.run(cmds[name], env=_env(tree, d, name, bytecode),
                              cwd=d, capture_output=True, text=True,
                              check=True)
        wall = time.perf_counter() - t
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (after.ru_utime - before.ru_utime
               + after.ru_stime - before.ru_stime)
        step = [l.split(None, 2)[2].strip()
                for l in done.stdout.splitlines()
                if l.startswith("step time")][0]
        got[name].append((wall, cpu))
        print(f"run {i} {name}: {wall:.1f} s wall, {cpu:.1f} s CPU, "
              f"load {load:.1f}, step {step}")
  med = {name: [sorted(r[j] for r in rows)[len(rows) // 2]
                for j in (0, 1)] for name, rows in got.items()}
  print(f"median: base {med['base'][0]:.1f} s wall, {med['base'][1]:.1f} s "
        f"CPU; this tree {med['this'][0]:.1f} s wall, {med['this'][1]:.1f} "
        f"s CPU (CPU ratio {med['this'][1] / med['base'][1]:.2f})")


if __name__ == "__main__":
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--against", metavar="TREE",
                      help="a source tree to time side by side with this one")
  parser.add_argument("--runs", type=int, default=3)
  parser.add_argument("--bytecode", action="store_true",
                      help="with --against: keep each tree's compiled "
                      "modules between runs, as an installed package does")
  opts = parser.parse_args()
  if opts.against:
    against(opts.against, opts.runs, opts.bytecode)
  else:
    main()
