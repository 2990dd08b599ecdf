"""Benchmark: the default ``mtf-layout solve --train`` on Megatron-LM's
Table 1 rows and the zoo's large presets (issue 45 item 3: each solves in
<= 30 s wall at default settings, and says optimal or its proven gap).

For each case it runs the command in this process, as a user types it
(``solve -m gpt3_175b --set <the row's dims and batch> -t
a100x8-nodesN-cal --train -f json``), and prints the wall time (model
building and both searches included; the interpreter's start-up is not),
the status and gap, which plan space won (pipelined or the unpipelined
CP-SAT search), the plan and, for a Table 1 row, its TFLOP/s per GPU in
the paper's units beside the published figure and (a), the published
layout's prediction (``benchmarks/published_runs.py``).

Run: ``PYTHONPATH=. python benchmarks/default_solves.py`` (10 rows and 7
zoo cases, 20-30 s each here), ``--rows 1.7B,1008B``, ``--no-zoo``.
"""

import argparse
import contextlib
import io
import json
import os
import time

import mesh_tf  # noqa: F401  (OR-Tools before TensorFlow)
from autolayout.cli.app import main as cli
from benchmarks import published_runs as pr


def _overrides(cfg_overrides):
  return ",".join(f"{k}={v}" for k, v in cfg_overrides.items())


def solve(model, overrides, topology):
  """``(wall s, JSON answer)`` of the default ``solve --train``."""
  argv = ["solve", "-m", model, "-t", topology, "--train", "-f", "json"]
  if overrides:
    argv[3:3] = ["--set", _overrides(overrides)]
  buf = io.StringIO()
  t0 = time.perf_counter()
  with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(
      io.StringIO()):
    code = cli(argv)
  wall = time.perf_counter() - t0
  if code != 0:
    return wall, None
  return wall, json.loads(buf.getvalue())


def summary(answer):
  """``(space, status, gap, step s, plan text)`` of a solve answer."""
  if "plans" in answer:  # the pipelined space won
    p = answer["plans"][0]
    return ("pipelined", answer["status"], answer["gap"], p["step_s"],
            p["layout"])
  r = answer["result"]
  s = r["solver"]
  dec = r.get("decisions") or {}
  return ("unpipelined", s["status"], s["gap"], r["step_time_s"],
          f"{r['mesh']} {r['rules']} {dec}")


def main():
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--rows", help="comma-separated Table 1 rows (default all)")
  p.add_argument("--no-zoo", action="store_true")
  p.add_argument("--no-table", action="store_true")
  args = p.parse_args()
  walls = []
  rows = [] if args.no_table else [
      r for r in pr.MEGATRON_TABLE_1
      if not args.rows or r[0] in args.rows.split(",")]
  for r in rows:
    wall, ans = solve("gpt3_175b", pr.row_overrides(r), pr.topology_of(r))
    walls.append(wall)
    ta = pr.tflops(r, pr.predict_a(r).step_time_s)
    if ans is None:
      print(f"{r[0]:>7} {r[6]:>5} GPUs: no plan ({wall:.1f} s)")
      continue
    space, status, gap, step, plan = summary(ans)
    tb = pr.tflops(r, step)
    print(f"{r[0]:>7} {r[6]:>5} GPUs  published {r[-1]:>5.1f}  (a) "
          f"{ta:6.1f}  default solve {tb:6.1f} ({tb / ta - 1:+.1%} vs (a))"
          f"  {space}, {status} gap {gap:.3g}, {wall:.1f} s wall; {plan}",
          flush=True)
  cases = [] if args.no_zoo else pr.ZOO_CASES
  for name, topo, overrides in cases:
    wall, ans = solve(name, overrides, topo)
    walls.append(wall)
    label = f"{name}{'*' if overrides else ''} on {topo}"
    if ans is None:
      print(f"{label}: no plan ({wall:.1f} s)")
      continue
    space, status, gap, step, plan = summary(ans)
    print(f"{label}: {space}, {status} gap {gap:.3g}, step {step:.3f} s, "
          f"{wall:.1f} s wall; {plan}", flush=True)
  if walls:
    print(f"wall: max {max(walls):.1f} s over {len(walls)} solves; load "
          f"{os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
  main()
