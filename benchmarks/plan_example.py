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

Measured side by side on the shared 2-core machine (3 alternating runs
of the CLI each, load 4-9): 16.4 s wall quiet before; CPU 19.5 s before
and 6.1 s after.  This script runs the command in-process
(``--time-limit 600``, so that a loaded machine cannot cut the search
short and change the answer), prints the CLI's own phase summary (the
phases add up to the wall time), and then times the eager explanation
alone.  Wall and CPU seconds are both printed: on a shared machine the
wall time varies with the load, the CPU time less.

Reproduce:
  python benchmarks/plan_example.py
"""

import io
import os
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


if __name__ == "__main__":
  main()
