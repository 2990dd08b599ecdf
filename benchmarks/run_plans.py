"""Plans run for real: the tiny Transformer's training plan for each ZeRO
stage and with recompute and microbatches, priced on dgx-h100 (mesh
data:2;model:4) and run as ``mtf-layout run`` runs it on 8 logical CPU
devices: predicted against
measured step time and per-device state, and the loss.

  PYTHONPATH=. python benchmarks/run_plans.py [--steps 5]

The predicted step time is for the plan's topology (H100s), so the
measured/predicted ratio says how much slower these CPU devices are; the
per-device state (weights, optimizer state, accumulators) must match
exactly.
"""

import argparse

from mesh_tf.lowering.placement import logical_cpu_devices, set_logical_cpu_devices

# Data parallel over ``data``, tensor parallel over ``model``, and the
# ZeRO storage dims over ``data`` (what ZeRO shards in practice).
RULES = ("batch:data;d_ff:model;heads:model;vocab:model;"
         "d_model_storage:data")
CASES = [("stage 0", 0, 0, 1), ("stage 1", 1, 0, 1), ("stage 2", 2, 0, 1),
         ("stage 3", 3, 0, 1), ("stage 3, recompute 2", 3, 2, 1),
         ("stage 0, k=2", 0, 0, 2), ("stage 3, k=4", 3, 0, 4)]


def plan_for(stage, recompute, k):
  """The plan of the tiny Transformer's step with these decisions and
  :data:`RULES` on dgx-h100, as ``solve --save`` would write it."""
  from mesh_tf import models
  from autolayout.plans.plan import make_plan
  from autolayout.training.decisions import TrainingDecisions, build_training
  import costmodels
  d = TrainingDecisions("float32", stage, recompute, k)
  t = build_training(models.get_config("transformer_tiny"), d)
  mesh, topo = "data:2;model:4", costmodels.get_topology("dgx-h100")
  rules = RULES if stage else RULES.replace(";d_model_storage:data", "")
  report = costmodels.evaluate(t.graph, mesh, rules, topo,
                               microbatches=t.plan)
  return make_plan(t.graph, mesh, rules, topo, report, name="transformer_tiny",
                   decisions=d.as_dict(),
                   source={"model": "transformer_tiny", "overrides": {},
                           "train": True})


def main():
  p = argparse.ArgumentParser()
  p.add_argument("--steps", type=int, default=5)
  args = p.parse_args()
  set_logical_cpu_devices(8)
  from autolayout.plans import run as run_lib
  print(f"{'plan':22s} {'predicted':>12s} {'measured':>10s} {'ratio':>6s} "
        f"{'state pred':>10s} {'state meas':>10s} {'peak pred':>10s}  loss")
  for name, stage, rec, k in CASES:
    plan = plan_for(stage, rec, k)
    r = run_lib.run_plan(plan, logical_cpu_devices(8), 2, args.steps)
    print(f"{name:22s} {r.predicted_step_time_s * 1e6:9.1f} us "
          f"{r.measured_step_time_s * 1e3:7.1f} ms "
          f"{r.measured_step_time_s / r.predicted_step_time_s:6.0f} "
          f"{r.predicted_state_bytes:10d} {max(r.measured_state_bytes):10d} "
          f"{r.predicted_peak_bytes:10d}  {r.losses[0]:.3f} -> "
          f"{r.losses[-1]:.3f}", flush=True)


if __name__ == "__main__":
  main()
