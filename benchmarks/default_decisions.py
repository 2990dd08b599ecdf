"""Can a training decision make a step faster when no memory binds?

The default question (:mod:`autolayout.default_search`) searches ZeRO
stage, recompute and microbatches only when the step as built fits no
layout.  That is right only if, with memory to spare, none of them wins on
time.  For each case this prints the decision-free plan (ZeRO 0, no
recompute, k = 1) next to the fastest plan of the whole decision search
(every stage, recompute count and k of :func:`autolayout.training.decisions.
search_training`, with the per-group descent) at the same dtype and no
memory budget, and their ratio (< 1: a decision wins on time).

Run: ``PYTHONPATH=. python benchmarks/default_decisions.py`` (a minute or
two), ``--case transformer_tiny@tpu-v5e-2x4@x:2;y:4``.
"""

import argparse
import time

from autolayout.training import decisions
from mesh_tf import models

CASES = (
    "transformer_tiny@tpu-v5e-2x4@x:2;y:4",
    "transformer_tiny@dgx-h100@x:8",
    "moe_tiny@tpu-v5e-2x4@x:2;y:4",
)


def run(case, dtype, time_limit_s):
  name, topology, mesh = case.split("@")
  config = models.get_config(name)
  t0 = time.perf_counter()
  free = decisions.search_training(
      config, mesh, topology, None, param_dtype=dtype,
      fixed={"zero_stage": 0, "recompute": 0, "microbatches": 1},
      time_limit_s=time_limit_s)
  best = decisions.search_training(config, mesh, topology, None,
                                   param_dtype=dtype,
                                   time_limit_s=time_limit_s)
  a, b = free.result.step_time_s, best.result.step_time_s
  d = best.decisions.as_dict()
  print(f"{case:40s} {dtype:9s} decision-free {a:.4e} s  searched "
        f"{b:.4e} s  ratio {b / a:.6f}  chosen zero_stage="
        f"{d['zero_stage']} recompute={d['recompute']} "
        f"k={d['microbatches']}  ({best.result.status}, "
        f"{time.perf_counter() - t0:.1f} s)", flush=True)


def main():
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--case", action="append")
  p.add_argument("--dtype", action="append",
                 help="compute dtypes (default float32 and bfloat16)")
  p.add_argument("--time-limit", type=float, default=120.0)
  args = p.parse_args()
  for case in args.case or CASES:
    for dtype in args.dtype or ("float32", "bfloat16"):
      run(case, dtype, args.time_limit)


if __name__ == "__main__":
  main()
