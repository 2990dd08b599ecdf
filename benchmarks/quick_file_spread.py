"""Benchmark: how far apart calibration files made the same way predict.

A user gets one calibration file; the truth benchmark
(``benchmarks/cost_model_truth.py``) scores one file against steps it
measures in the same run, so two of its runs differ by the noise of both the
file and the steps.  This benchmark holds the steps fixed: it reads one
run's measured steps (``cost_model_truth.py --save-steps steps.json``) and
scores several calibration files against them -- files given, or ``--calibrate
N`` quick calibrations made one after another now -- by predicting every
layout from each file alone (``costmodels.evaluate``, as ``mtf-layout`` reads a
file).  Per file and model it prints Spearman's and Kendall's rank
correlations and the median and worst absolute error of the predicted step
(SciPy's, as the truth benchmark computes them,
``benchmarks/truth_stats.py``), then per model the spread (largest less
smallest) of each over the files.  ``--refit`` prices each file as the
current fitting code fits its stored timings (``calibration.samples``), so
files measured before a change to a fit are scored as if made after it, on
the very same timings.

Ends with one JSON line: per statistic its smallest value over files and
models (``spearman_min``, ``kendall_min``), its largest
(``median_abs_err_max``, ``worst_abs_err_max``) and its largest spread
over the files of any model (``spearman_spread``, ``median_abs_err_spread``).

Reproduce:
  python benchmarks/cost_model_truth.py --quick --save-steps /tmp/steps.json
  python benchmarks/quick_file_spread.py --steps /tmp/steps.json --calibrate 6
  python benchmarks/quick_file_spread.py --steps /tmp/steps.json \\
      --files q1.json q2.json --refit
"""

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from benchmarks import truth_stats  # noqa: E402
from benchmarks.truth_timing import training_graph  # noqa: E402


def refitted(path):
  """The topology the current fitting code makes of ``path``'s stored
  timings."""
  from costmodels.calibrate import calibration, timings
  from costmodels.calibrate.topology_file import read_topology_file
  _, meta = read_topology_file(path)
  if not meta.get("samples"):
    raise SystemExit(f"{path} stores no timings (calibration.samples); "
                     "calibrate again with `mtf-layout calibrate`")
  samples = [timings.sample_from_dict(s) for s in meta["samples"]]
  return calibration.fit_topology(samples, meta["devices"],
                                  name=os.path.basename(path)[:-5])[0]


def score(topology, steps, builders):
  """``{model: (spearman, kendall, median err, worst err)}`` of
  ``topology``'s predictions of the ``steps`` rows."""
  import costmodels
  out = {}
  for name, rows in steps.items():
    pred = [costmodels.evaluate(training_graph(builders[name]).graph,
                                r["mesh"], r["rules"],
                                topology).wall_step_time_s for r in rows]
    meas = [r["measured_s"] for r in rows]
    errs = [abs(p - m) / m for p, m in zip(pred, meas)]
    out[name] = (truth_stats.spearman(pred, meas),
                 truth_stats.kendall(pred, meas),
                 statistics.median(errs), max(errs))
  return out


def main(argv=None):
  p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  p.add_argument("--steps", required=True,
                 help="measured steps (cost_model_truth.py --save-steps)")
  p.add_argument("--files", nargs="*", default=[],
                 help="calibration files to score")
  p.add_argument("--calibrate", type=int, default=0,
                 help="make this many quick calibrations now and score them")
  p.add_argument("--refit", action="store_true",
                 help="fit each file's stored timings with the current code")
  args = p.parse_args(argv)
  with open(args.steps) as f:
    steps = json.load(f)
  from benchmarks.cost_model_truth import MESHES, zoo_layouts
  from costmodels import calibrate as cal_lib
  import costmodels
  files = list(args.files)
  folder = tempfile.mkdtemp()
  for i in range(args.calibrate):
    path = os.path.join(folder, f"quick{i + 1}.json")
    t0 = time.perf_counter()
    cal_lib.calibrate(path, cpu_devices=8, meshes=MESHES, quick=True)
    print(f"# calibrated {path} in {time.perf_counter() - t0:.1f} s",
          file=sys.stderr)
    files.append(path)
  if not files:
    raise SystemExit("give --files or --calibrate N")
  builders = {name: build for name, (build, _) in zoo_layouts().items()}
  unknown = sorted(set(steps) - set(builders))
  if unknown:
    raise SystemExit(f"{args.steps}: models {unknown} are not in the truth "
                     f"benchmark's zoo ({sorted(builders)})")
  scores = {}
  for path in files:
    topology = (refitted(path) if args.refit
                else costmodels.get_topology(path))
    scores[path] = score(topology, steps, builders)
    print(os.path.basename(path) + ": " + "  ".join(
        f"{m} {s[0]:.3f}/{s[1]:.3f}/{100 * s[2]:.1f}%/{100 * s[3]:.1f}%"
        for m, s in scores[path].items()))
  print("per model over the files (Spearman, Kendall, median err, worst "
        "err): min-max")
  spread = {}
  for m in steps:
    cols = list(zip(*(scores[f][m] for f in files)))
    spread[m] = [max(c) - min(c) for c in cols]
    print(f"  {m}: " + ", ".join(
        f"{min(c):.3f}-{max(c):.3f}" if i < 2 else
        f"{100 * min(c):.1f}-{100 * max(c):.1f}%"
        for i, c in enumerate(cols)))
  everything = [s for per in scores.values() for s in per.values()]
  print(json.dumps({
      "files": len(files),
      "spearman_min": round(min(s[0] for s in everything), 4),
      "kendall_min": round(min(s[1] for s in everything), 4),
      "median_abs_err_max": round(max(s[2] for s in everything), 4),
      "worst_abs_err_max": round(max(s[3] for s in everything), 4),
      "spearman_spread": round(max(v[0] for v in spread.values()), 4),
      "median_abs_err_spread": round(max(v[2] for v in spread.values()),
                                     4)}))


if __name__ == "__main__":
  main()
