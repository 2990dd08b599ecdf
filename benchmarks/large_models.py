"""Training plans of the zoo's large models on their natural hardware.

For each (model, topology) it searches the training decisions (precision,
ZeRO stage, recompute, microbatches; :mod:`autolayout.decisions`) and the
layout rules under the chip's usable memory, and prints the plan and its
decisions, per-device memory by category, communication per mesh axis,
step time, model-FLOPs utilisation (6 * params * tokens / (step * chips *
bf16 peak)) and the build + solve time of every candidate.

Run: ``PYTHONPATH=. python benchmarks/large_models.py`` (all cases, several
minutes) or ``--case gpt3_175b@a100x8-nodes128``.
"""

import argparse
import time

import costmodels
from autolayout import decisions
from autolayout.cli import inputs
from costmodels import hardware
from mesh_tf import models

CASES = (
    ("gpt2_small", "dgx-a100"),
    ("mtf_5b", "dgx-h100"),
    ("gpt3_175b", "a100x8-nodes128"),
    ("gpt3_175b", "h100x8-nodes64"),
    ("gpt3_175b", "tpu-v4-8x8x16"),
)
GIB = 2**30


def run(name, topology_name, time_limit_s):
  config = models.get_config(name)
  topology = costmodels.get_topology(topology_name)
  mesh = inputs.default_mesh(topology)
  budget = hardware.usable_memory_bytes(topology.chip)
  t0 = time.perf_counter()
  plan = decisions.search_training(config, mesh, topology, budget,
                                   time_limit_s=time_limit_s)
  wall = time.perf_counter() - t0
  r = plan.result.report
  tokens = config.batch * config.length
  mfu = (6 * config.num_parameters() * tokens
         / (r.step_time_s * topology.num_chips
            * topology.chip.peak_bf16_flops_per_s))
  print(f"== {name} ({config.num_parameters() / 1e9:.3g}B params, "
        f"{tokens} tokens/step) on {topology_name} ({topology.num_chips} x "
        f"{topology.chip.name}), mesh {mesh}")
  print(f"  decisions: {plan.decisions.as_dict()}")
  print(f"  rules:     {plan.result.rules}")
  print(f"  step {r.step_time_s:.3f} s = compute {r.compute_time_s:.3f} s + "
        f"comm {r.comm_time_s:.3f} s;  MFU {mfu:.1%}")
  print("  comm per axis: " + ", ".join(
      f"{a} {t:.3f} s" for a, t in r.comm_time_by_axis.items()))
  print("  memory per device: " + ", ".join(
      f"{c} {b / GIB:.2f} GiB" for c, b in r.memory_by_category.items())
        + f"; peak {r.peak_memory_bytes / GIB:.2f} of "
        f"{r.usable_memory_bytes / GIB:.2f} GiB usable "
        f"({r.hbm_bytes / GIB:.2f} GiB HBM, "
        f"{r.memory_reserve_fraction:.0%} reserve)")
  for d, t, s in plan.tried:
    print(f"    candidate {d.as_dict()}: "
          + (f"step {t:.3f} s" if t is not None else "does not fit")
          + f", build + solve {s:.1f} s")
  print(f"  search wall time {wall:.1f} s")
  return plan, mfu


def main():
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--case", action="append",
                 help="MODEL@TOPOLOGY (default: every case)")
  p.add_argument("--time-limit", type=float, default=60.0,
                 help="CP-SAT seconds per candidate")
  args = p.parse_args()
  cases = CASES if not args.case else [tuple(c.split("@")) for c in args.case]
  for name, topo in cases:
    run(name, topo, args.time_limit)


if __name__ == "__main__":
  main()
