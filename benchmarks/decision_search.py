"""The decision search's two ways to pick (ZeRO stage, recompute count) at
one mesh and k, side by side: one joint CP-SAT program over every candidate
(:mod:`autolayout.training.decision_program`) against the candidates' own programs
solved in turn with the incumbent as a cutoff
(:mod:`autolayout.training.candidate_search`, the default).

Both run on the same warm :class:`autolayout.training.decisions.Candidates` (graphs
and tables built once, before either is timed), alternating, so the times
compare the solves alone.  Prints each one's chosen decisions, step time
and median wall time, and the ratio.

Run: ``PYTHONPATH=. python benchmarks/decision_search.py`` or
``--case moe_tiny@tpu-v5e-2x4@x:2;y:4 --repeats 3``.
"""

import argparse
import statistics
import time

import costmodels
from autolayout.training import decisions
from costmodels import arguments as cm_args
from mesh_tf import models

CASES = ("transformer_tiny@tpu-v5e-2x4@x:2;y:4",
         "moe_tiny@tpu-v5e-2x4@x:2;y:4")


def run(case, repeats):
  name, topology, mesh = case.split("@")
  config = models.get_config(name)
  topo = costmodels.get_topology(topology)
  budget = cm_args.resolve_memory_budget("hbm", topo)
  cands = decisions.Candidates(config)
  pairs = [decisions.TrainingDecisions("bfloat16", s, r, 1)
           for s in (0, 1, 2, 3)
           for r in decisions.recompute_choices(config.layers)]
  for d in pairs:   # warm: every graph and its tables on the mesh
    cands.get(d)[1].problem(mesh, topo, budget)
  times = {True: [], False: []}
  answers = {}
  for _ in range(repeats):
    for joint in (True, False):
      t0 = time.perf_counter()
      tg, r = decisions.solve_decisions(cands, pairs, mesh, topo, budget,
                                        600, joint=joint)
      times[joint].append(time.perf_counter() - t0)
      answers[joint] = (tg.decisions, r.step_time_s, r.status)
  for joint in (True, False):
    d, step, status = answers[joint]
    print(f"{case:38s} {'joint' if joint else 'in turn':8s} "
          f"{len(pairs)} candidates: zero_stage={d.zero_stage} "
          f"recompute={d.recompute} step {step:.6e} s ({status}), "
          f"median {statistics.median(times[joint]):.2f} s")
  same = answers[True][1] == answers[False][1]
  print(f"{case:38s} in turn / joint: "
        f"{statistics.median(times[False]) / statistics.median(times[True]):.3f}"
        f", same step time: {same}", flush=True)


def main():
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--case", action="append")
  p.add_argument("--repeats", type=int, default=3)
  args = p.parse_args()
  for case in args.case or CASES:
    run(case, args.repeats)


if __name__ == "__main__":
  main()
