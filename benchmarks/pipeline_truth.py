"""Benchmark: does the pipelined cost model predict measured pipelined
steps, and rank pipelined layouts as the machine does?  (Issue 41 item 5:
a held-out model the calibration never saw; the probes are single-device
kernels and collectives, never a pipeline.)

On 8 TF logical CPU devices it

1. calibrates the devices (``costmodels.calibrate``, ``--quick`` by
   default, as a user's quick file) or reads ``--topology FILE``;
2. prices 14 pipelined layouts of one Transformer (8 layers) with the
   pipelined cost model
   (:func:`autolayout.training.pipeline_price.price_layout`) on that file:
   2, 4 and 8 stages; tensor parallelism 1, 2 and 4; GPipe, 1F1B and
   interleaved 1F1B; 1 to 8 microbatches; full recompute; ZeRO 1;
3. builds each layout's plan (:func:`autolayout.plans.pipelined.
   plan_of_price`) and the step that plan runs
   (:func:`autolayout.plans.run_pipelined.build_step`: a
   :class:`mesh_tf.pipeline.PipelineTrainStep`), warms it up, then times
   steady steps in shuffled rounds over the layouts (machine noise spreads
   over all of them) and keeps each layout's median;
4. prints predicted against measured per layout, and Spearman, Kendall,
   median and worst absolute error (SciPy, ``benchmarks/truth_stats.py``),
   beside the simplest predictor on the same data: one constant (the
   measured median; FLOPs alone is the same constant here but for
   recompute's extra forward pass, so both are shown), and beside the
   price without the cores that waiting stages leave to the others (the
   bubble formula at the all-devices speed, ``step_time_s +
   core_sharing_s``: what the model priced before
   :mod:`costmodels.shared_cores`), ``formula_*`` in the JSON;
5. ends with one JSON line of those figures.

Reproduce (about 3-4 min here):
  PYTHONPATH=. python benchmarks/pipeline_truth.py
  PYTHONPATH=. python benchmarks/pipeline_truth.py --topology full.json
"""

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

#: The model: a Transformer whose 8 layers split over 2, 4 and 8 stages,
#: at a size where a pipelined step takes tens to hundreds of ms here.
OVERRIDES = dict(layers=8, d_model=128, heads=8, d_kv=16, d_ff=512,
                 vocab=512, length=16, batch=16)

#: ``(label, PipelineLayout fields)``: model, stages, data, chunks,
#: microbatch rows, recompute, placement, schedule, scatter/gather, ZeRO.
LAYOUTS = (
    ("pp2-dp4-m2", (1, 2, 4, 1, 2, "none", "inner", "1f1b")),
    ("pp2-dp4-m4", (1, 2, 4, 1, 1, "none", "inner", "1f1b")),
    ("pp2-dp4-m4-gpipe", (1, 2, 4, 1, 1, "none", "inner", "gpipe")),
    ("pp2v2-dp4-m4", (1, 2, 4, 2, 1, "none", "inner", None)),
    ("tp2-pp2-dp2-m4", (2, 2, 2, 1, 2, "none", "inner", "1f1b")),
    ("tp2-pp2-dp2-m8", (2, 2, 2, 1, 1, "none", "inner", "1f1b")),
    ("pp4-dp2-m4", (1, 4, 2, 1, 2, "none", "inner", "1f1b")),
    ("pp4-dp2-m8-gpipe", (1, 4, 2, 1, 1, "none", "inner", "gpipe")),
    ("tp2-pp4-m4", (2, 4, 1, 1, 4, "none", "inner", "1f1b")),
    ("tp4-pp2-m4", (4, 2, 1, 1, 4, "none", "inner", "1f1b")),
    ("pp8-m2", (1, 8, 1, 1, 8, "none", "inner", "1f1b")),
    ("pp2-dp4-m2-recompute", (1, 2, 4, 1, 2, "full", "inner", "1f1b")),
    ("pp2-dp4-m2-zero1", (1, 2, 4, 1, 2, "none", "inner", "1f1b", True, 1)),
    ("tp2-pp2v2-dp2-m4", (2, 2, 2, 2, 2, "none", "inner", None)),
)


def _args():
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  p.add_argument("--topology", help="a calibrated topology file (default: "
                 "calibrate the 8 devices here first)")
  p.add_argument("--full", action="store_true",
                 help="calibrate fully instead of --quick")
  p.add_argument("--rounds", type=int, default=5,
                 help="shuffled timing rounds over the layouts (default 5)")
  p.add_argument("--calls", type=int, default=3,
                 help="steps timed per layout and round (default 3)")
  p.add_argument("--layouts", type=int, default=len(LAYOUTS),
                 help="time only the first N layouts (a quick check)")
  return p.parse_args()


def _constant_errors(meas, flops):
  """Median and worst absolute error of the two simplest predictors: one
  constant (the measured median) and FLOPs alone (time proportional to
  the step's FLOPs, its one rate fitted as the median ratio)."""
  c = statistics.median(meas)
  const = [abs(c - m) / m for m in meas]
  rate = statistics.median(m / f for m, f in zip(meas, flops))
  by_flops = [abs(rate * f - m) / m for m, f in zip(meas, flops)]
  return ((statistics.median(const), max(const)),
          (statistics.median(by_flops), max(by_flops)))


def main():
  args = _args()
  from rich.console import Console
  console = Console(stderr=True)
  out = Console(width=120)
  from costmodels import calibrate as cal_lib
  import costmodels
  topo_path = args.topology
  if topo_path is None:
    topo_path = os.path.join(tempfile.mkdtemp(), "cpu8.json")
    t0 = time.perf_counter()
    cal_lib.calibrate(topo_path, cpu_devices=8, quick=not args.full,
                      progress=console)
    out.print(f"calibrated 8 logical CPU devices in "
              f"{time.perf_counter() - t0:.1f} s -> {topo_path}")
  topology = costmodels.get_topology(topo_path)
  import mesh_tf as mtf
  mtf.set_logical_cpu_devices(8)
  devices = mtf.logical_cpu_devices(8)
  from mesh_tf import models
  from autolayout.plans import pipelined, run_pipelined
  from autolayout.training import pipeline_price as pp
  from benchmarks import truth_stats
  config = models.get_config("transformer_tiny", **OVERRIDES)
  source = {"model": "transformer_tiny", "overrides": OVERRIDES,
            "train": True}
  rows = []
  for label, fields in LAYOUTS[:args.layouts]:
    lay = pp.PipelineLayout(*fields)
    priced = pp.price_layout(config, topology, lay)
    plan = pipelined.plan_of_price(priced, config, topology,
                                   name="transformer_pp", source=source)
    step = run_pipelined.build_step(plan, config, devices)
    batch = run_pipelined.batch_for(step, config.vocab)
    t0 = time.perf_counter()
    float(step(**batch))
    float(step(**batch))
    console.print(f"{label}: built and warmed up in "
                  f"{time.perf_counter() - t0:.1f} s; predicted "
                  f"{priced.step_time_s * 1e3:.1f} ms")
    flops = pp.hardware_flops(config, lay.recompute == "full")
    rows.append({"label": label, "layout": lay.describe(), "step": step,
                 "batch": batch, "predicted_s": priced.step_time_s,
                 "formula_s": (priced.step_time_s
                               + priced.cost.core_sharing_s),
                 "flops": flops, "times": []})
  rng = random.Random(0)
  for r in range(args.rounds):
    order = list(range(len(rows)))
    rng.shuffle(order)
    for i in order:
      row = rows[i]
      for _ in range(args.calls):
        t0 = time.perf_counter()
        float(row["step"](**row["batch"]))
        row["times"].append(time.perf_counter() - t0)
    console.print(f"round {r + 1}/{args.rounds} done, load "
                  f"{os.getloadavg()[0]:.2f}")
  pred = [row["predicted_s"] for row in rows]
  meas = [statistics.median(row["times"]) for row in rows]
  errs = [abs(p - m) / m for p, m in zip(pred, meas)]
  formula = [row["formula_s"] for row in rows]
  f_errs = [abs(p - m) / m for p, m in zip(formula, meas)]
  out.print(f"{'layout':<22} {'pipelined layout':<62} {'pred ms':>8} "
            f"{'meas ms':>8} {'err':>7} {'formula':>8} {'err':>7}")
  for row, p, m, f in zip(rows, pred, meas, formula):
    out.print(f"{row['label']:<22} {row['layout']:<62} {p * 1e3:8.1f} "
              f"{m * 1e3:8.1f} {(p - m) / m:+7.1%} {f * 1e3:8.1f} "
              f"{(f - m) / m:+7.1%}")
  (c_med, c_worst), (f_med, f_worst) = _constant_errors(
      meas, [row["flops"] for row in rows])
  summary = {
      "layouts": len(rows),
      "spearman": truth_stats.spearman(pred, meas),
      "kendall": truth_stats.kendall(pred, meas),
      "median_abs_err": statistics.median(errs), "worst_abs_err": max(errs),
      "constant_median_abs_err": c_med, "constant_worst_abs_err": c_worst,
      "flops_median_abs_err": f_med, "flops_worst_abs_err": f_worst,
      "formula_spearman": truth_stats.spearman(formula, meas),
      "formula_kendall": truth_stats.kendall(formula, meas),
      "formula_median_abs_err": statistics.median(f_errs),
      "formula_worst_abs_err": max(f_errs),
      "best_measured": rows[meas.index(min(meas))]["label"],
      "best_predicted": rows[pred.index(min(pred))]["label"],
      "predicted_best_vs_best": meas[pred.index(min(pred))] / min(meas),
      "load": os.getloadavg()[0]}
  out.print(f"Spearman {summary['spearman']:.3f}, Kendall "
            f"{summary['kendall']:.3f}, median error "
            f"{summary['median_abs_err']:.1%}, worst "
            f"{summary['worst_abs_err']:.1%}; one constant: median "
            f"{c_med:.1%}, worst {c_worst:.1%}; FLOPs alone: median "
            f"{f_med:.1%}, worst {f_worst:.1%}; predicted best runs "
            f"{summary['predicted_best_vs_best']:.3f}x the best measured")
  out.print(f"without shared cores (the bubble formula): Spearman "
            f"{summary['formula_spearman']:.3f}, Kendall "
            f"{summary['formula_kendall']:.3f}, median error "
            f"{summary['formula_median_abs_err']:.1%}, worst "
            f"{summary['formula_worst_abs_err']:.1%}")
  sys.stdout.flush()
  print(json.dumps({k: round(v, 4) if isinstance(v, float) else v
                    for k, v in summary.items()}))


if __name__ == "__main__":
  main()
