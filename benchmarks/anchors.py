"""Published large-model training runs against the tool's predictions.

Two anchors (issue 13):

* **Megatron-LM GPT-3 175B on 1,024 A100s** (Narayanan et al., 2021: about
  138 TFLOP/s per GPU including recompute, with 8-way tensor parallelism in
  the node, 8-way pipelining and data parallelism).  Pipelining is not
  expressible here, so the published layout is taken as: tensor parallel 8
  inside each node (``heads``, ``d_ff``, ``vocab`` on ``model``), data
  parallel 128 over the nodes, ZeRO stage 1 (the distributed optimizer),
  every block recomputed, bf16.
* **PaLM 540B on 6,144 TPU v4 chips** (Chowdhery et al., 2022: 46.2% MFU;
  two pods of 3,072 chips, data parallel across pods, and in each pod 12-way
  model parallel x 256-way data parallel with the weights sharded over the
  data axis too).  Taken as mesh ``data:512;model:12`` on
  ``tpu-v4-2pods-16x16x12`` (a pod's 12-chip dim minor-most, so that the
  12-way model axis embeds), ZeRO stage 3 (weights sharded over ``data``),
  every block recomputed, bf16.  The zoo block is multi-head, GELU and
  serial (PaLM: multi-query, SwiGLU, parallel), about 432B parameters; MFU
  counts the zoo model's own parameters.

For each it prints the published layout's prediction and the tool's own
plan (mesh shapes and training decisions searched,
:func:`autolayout.meshes.training_meshes.search_training_meshes`), with step time,
MFU, peak memory and the decisions.

Run: ``PYTHONPATH=. python benchmarks/anchors.py [--only palm|megatron]
[--no-search]``.
"""

import argparse
import time

import costmodels
from autolayout.training import decisions
from autolayout.meshes.training_meshes import search_training_meshes
from costmodels import hardware
from mesh_tf import models

GIB = 2**30

ANCHORS = {
    "megatron": dict(
        model="gpt3_175b", topology="a100x8-nodes128", mesh="data:128;model:8",
        rules="batch:data;heads:model;d_ff:model;vocab:model;"
              "d_model_storage:data",
        decisions=dict(zero_stage=1, recompute=96),
        published="138 TFLOP/s per GPU (about 44% of 312 TFLOP/s bf16 "
                  "counting recompute; 6*N*T model FLOPs: about 33%)"),
    "palm": dict(
        model="palm_540b", topology="tpu-v4-2pods-16x16x12",
        mesh="data:512;model:12",
        rules="batch:data;heads:model;d_ff:model;vocab:model;"
              "d_model_storage:data",
        decisions=dict(zero_stage=3, recompute=118),
        published="46.2% MFU"),
}


def _mfu(config, topology, step):
  return (6 * config.num_parameters() * config.batch * config.length
          / (step * topology.num_chips * topology.chip.peak_bf16_flops_per_s))


def _line(what, config, topology, report, d, wall=None):
  print(f"  {what}: step {report.step_time_s:.2f} s, MFU "
        f"{_mfu(config, topology, report.step_time_s):.1%}, peak "
        f"{report.peak_memory_bytes / GIB:.1f} of "
        f"{report.usable_memory_bytes / GIB:.1f} GiB usable "
        f"({'fits' if report.fits_in_memory else 'DOES NOT FIT'}), "
        f"decisions {d.as_dict()}"
        + ("" if wall is None else f", searched in {wall:.0f} s"))
  print(f"    mesh {report.mesh_shape}, exposed comm "
        f"{report.comm_time_s:.2f} s by axis "
        + ", ".join(f"{a} {t:.2f}" for a, t in
                    report.comm_time_by_axis.items()))


def published(anchor):
  """The published layout's prediction: fixed mesh, rules and decisions,
  the microbatch count the smallest that fits (1, 2, 4...)."""
  a = ANCHORS[anchor]
  config = models.get_config(a["model"])
  topology = costmodels.get_topology(a["topology"])
  budget = hardware.usable_memory_bytes(topology.chip)
  last = None
  for k in (1, 2, 4, 8, 16):
    if config.batch % k:
      continue
    d = decisions.TrainingDecisions("bfloat16", microbatches=k,
                                    **a["decisions"])
    training = decisions.build_training(config, d)
    report = costmodels.evaluate(training.graph, a["mesh"], a["rules"],
                                 topology, microbatches=training.plan)
    last = (report, d)
    if report.peak_memory_bytes <= budget:
      break
  return config, topology, last


def main():
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  p.add_argument("--only", choices=sorted(ANCHORS))
  p.add_argument("--no-search", action="store_true",
                 help="only the published layouts")
  p.add_argument("--time-limit", type=float, default=60.0)
  args = p.parse_args()
  for name in ([args.only] if args.only else sorted(ANCHORS)):
    a = ANCHORS[name]
    config, topology, (report, d) = published(name)
    chip = topology.chip
    print(f"== {name}: {a['model']} ({config.num_parameters() / 1e9:.0f}B "
          f"params) on {topology.name} ({topology.num_chips} x "
          f"{chip.name}; MFU over the {chip.peak_bf16_flops_per_s / 1e12:g} "
          f"TFLOP/s bf16 peak, matmuls priced at "
          f"{chip.achievable_flops_per_s('bfloat16') / 1e12:.4g}); "
          f"published: {a['published']}")
    _line(f"published layout ({a['rules']})", config, topology, report, d)
    if args.no_search:
      continue
    t0 = time.perf_counter()
    plan, _ = search_training_meshes(config, topology,
                                     time_limit_s=args.time_limit)
    _line(f"tool's plan ({plan.result.rules})", config, topology,
          plan.result.report, plan.decisions, time.perf_counter() - t0)


if __name__ == "__main__":
  main()
