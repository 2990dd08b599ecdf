"""Benchmark: einsum forms timed on 8 devices at once against their price.

The cost model prices every ``transposed`` einsum (TF transposes an operand
or the result around its BatchMatMul) with one fit: a fixed cost, a FLOP
rate and a byte rate, fitted on the dense forms of the calibration plan
(``costmodels.calibrate.measure.make_plan``).  This times those forms and
the expert einsums of the zoo's mixture of experts at the size
``benchmarks/cost_model_truth.py`` steps it (``[batch, experts, capacity,
d_model]`` by ``[experts, d_model, d_ff]``, the output projection, and the
weights' gradient, which sums out batch and capacity), each chained on
every device in shuffled rounds, and prints each one's measured time, its
price from a calibrated topology file, and their ratio.

The MoE is the model whose layouts ``cost_model_truth.py`` ranks worst; its
layouts that leave the expert einsums whole were priced 15-35% fast.

Reproduce (about 20 s after a calibration):
  mtf-layout calibrate --cpu-devices 8 -o /tmp/cpu8.json
  python benchmarks/einsum_forms.py -t /tmp/cpu8.json
"""

import argparse
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

#: The MoE's expert einsums in cost_model_truth.py (batch 16, 8 experts,
#: capacity 4, d_model 64, d_ff 128), whole and with the experts split 8
#: ways (one expert a device).
EXPERT_FORMS = (
    ("transposed", "abcd,bde->abce", (16, 8, 4, 64), (8, 64, 128)),
    ("transposed", "abce,bed->abcd", (16, 8, 4, 128), (8, 128, 64)),
    ("transposed", "abcd,abce->bde", (16, 8, 4, 64), (16, 8, 4, 128)),
    ("transposed", "abcd,bde->abce", (16, 1, 4, 64), (1, 64, 128)),
    ("transposed", "abcd,abce->bde", (16, 1, 4, 64), (16, 1, 4, 128)),
)


def main(argv=None):
  p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  p.add_argument("-t", "--topology", required=True,
                 help="a calibrated topology file (mtf-layout calibrate)")
  p.add_argument("--rounds", type=int, default=9)
  args = p.parse_args(argv)
  import mesh_tf as mtf
  mtf.set_logical_cpu_devices(8)
  import costmodels
  from costmodels import compute
  from costmodels.calibrate import measure
  chip = costmodels.get_topology(args.topology).chip
  forms = tuple(e for e in measure.make_plan(("x:8",)).einsums
                if e[0] == "transposed") + EXPERT_FORMS
  plan = measure.Plan((), (), forms, (), ("float32",), 5, (),
                      kernel_sizes=(), step_depths=())
  probes = [q for q in measure.prepare(plan, mtf.logical_cpu_devices(8))
            if q.sample.what == "matmul" and q.sample.group_size == 8]
  times = measure.interleaved(probes, args.rounds, calls=3)
  print(f"{'equation':>16} {'lhs':>16} {'rhs':>16} {'MFLOP':>6} "
        f"{'measured':>9} {'priced':>8} {'ratio':>6}  GFLOP/s")
  out = []
  for (_, eq, xs, ws), q, t in zip(forms, probes, times):
    s = q.measured(t)
    priced = (chip.launch_overhead_s
              + chip.compute_fit(s.pattern).time_s(s.flops, s.nbytes)
              + compute.handoff_time(s.matrix, chip))
    ratio = s.seconds / priced
    print(f"{eq:>16} {str(xs):>16} {str(ws):>16} {s.flops / 1e6:6.2f} "
          f"{s.seconds * 1e3:7.3f}ms {priced * 1e3:6.3f}ms {ratio:6.2f}  "
          f"{s.flops / s.seconds / 1e9:6.1f}")
    out.append({"equation": eq, "lhs": xs, "rhs": ws,
                "expert": (eq, xs, ws) in {e[1:] for e in EXPERT_FORMS},
                "ratio": round(ratio, 3)})
  print(json.dumps(out))


if __name__ == "__main__":
  main()
