"""Training plans of the zoo's large models on their natural hardware.

For each (model, topology) it searches the mesh shape, the training
decisions (ZeRO stage and recompute count as CP-SAT decision families,
microbatches as phases; :mod:`autolayout.meshes.training_meshes`) and the layout
rules under the chip's usable memory, as ``mtf-layout solve --train``
does, and prints the plan and its decisions, per-device memory by
category, communication per mesh axis, step time, model-FLOPs utilisation
(6 * params * tokens / (step * chips * datasheet bf16 peak); matmuls
are priced at the chip's achievable fraction of it), the chosen program's
build and solve time, every k phase's program and the wall time.
``--mesh`` fixes the mesh instead.

Run: ``PYTHONPATH=. python benchmarks/large_models.py`` (all cases, several
minutes) or ``--case gpt3_175b@a100x8-nodes128``.
"""

import argparse
import time

import costmodels
from autolayout.training import decisions
from autolayout.meshes.training_meshes import search_training_meshes
from costmodels import hardware
from mesh_tf import models

CASES = (
    ("gpt2_small", "dgx-a100"),
    ("mtf_5b", "dgx-h100"),
    ("gpt3_175b", "a100x8-nodes128"),
    ("gpt3_175b", "h100x8-nodes64"),
    ("gpt3_175b", "tpu-v4-8x8x16"),
    ("palm_540b", "tpu-v4-2pods-16x16x12"),
)
GIB = 2**30


def run(name, topology_name, time_limit_s, mesh=None):
  config = models.get_config(name)
  topology = costmodels.get_topology(topology_name)
  budget = hardware.usable_memory_bytes(topology.chip)
  t0 = time.perf_counter()
  if mesh is None:
    plan, meshes = search_training_meshes(config, topology, budget,
                                          time_limit_s=time_limit_s)
  else:
    plan, meshes = decisions.search_training(
        config, mesh, topology, budget, time_limit_s=time_limit_s), None
  wall = time.perf_counter() - t0
  mesh = plan.result.mesh_shape
  r = plan.result.report
  tokens = config.batch * config.length
  mfu = (6 * config.num_parameters() * tokens
         / (r.step_time_s * topology.num_chips
            * topology.chip.peak_bf16_flops_per_s))
  chip = topology.chip
  print(f"== {name} ({config.num_parameters() / 1e9:.3g}B params, "
        f"{tokens} tokens/step) on {topology_name} ({topology.num_chips} x "
        f"{chip.name}, bf16 peak {chip.peak_bf16_flops_per_s / 1e12:g} "
        f"TFLOP/s, matmuls priced at "
        f"{chip.achievable_flops_per_s('bfloat16') / 1e12:.4g}), mesh {mesh}")
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
  print(f"  chosen program: build {plan.result.build_time_s:.1f} s "
        f"(every candidate's tables and the joint model), solve "
        f"{plan.result.solve_time_s:.2f} s, {plan.result.model_size}")
  for d, t, s in plan.tried:
    print(f"    k={d.microbatches} program -> {d.as_dict()}: "
          + (f"step {t:.3f} s" if t is not None else "does not fit")
          + f", build + solve {s:.1f} s")
  if meshes is not None:
    print("  mesh shapes: " + "; ".join(
        f"{r.mesh} {r.step_time_s:.2f} s ({r.searched})"
        if r.step_time_s == r.step_time_s and r.step_time_s is not None
        else f"{r.mesh} {r.status}" for r in meshes.itertuples()))
  print(f"  search wall time {wall:.1f} s")
  return plan, mfu


def main():
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--case", action="append",
                 help="MODEL@TOPOLOGY (default: every case)")
  p.add_argument("--time-limit", type=float, default=60.0,
                 help="CP-SAT seconds per program")
  p.add_argument("--mesh", help="fix the mesh (default: searched)")
  args = p.parse_args()
  cases = CASES if not args.case else [tuple(c.split("@")) for c in args.case]
  for name, topo in cases:
    run(name, topo, args.time_limit, args.mesh)


if __name__ == "__main__":
  main()
