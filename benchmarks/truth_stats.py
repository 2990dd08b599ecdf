"""The truth benchmark's statistics, by SciPy: rank correlations with ties
as SciPy defines them (:func:`scipy.stats.spearmanr`, Kendall's tau-b by
:func:`scipy.stats.kendalltau`), a bootstrap interval
(:func:`scipy.stats.bootstrap`), and the per-model summary, table and plot.

The file-alone figures (``*_file``) are what a user gets: the predictions
of the up-front calibration file, read as ``-t FILE.json`` reads it, against
the measured steps, without the interleaved probes' load correction.

Example:
  >>> round(spearman([1, 2, 3, 4], [10, 20, 40, 30]), 3)
  0.8
  >>> round(kendall([1, 2, 2, 3], [1, 2, 3, 3]), 3)
  0.8
"""

import statistics

import numpy as np
from scipy import stats as sps

from benchmarks.truth_timing import is_auto


def spearman(a, b):
  """Spearman's rank correlation, ties at their mean rank."""
  return float(sps.spearmanr(a, b).statistic)


def kendall(a, b):
  """Kendall's tau-b (ties in either ranking counted as tau-b does)."""
  return float(sps.kendalltau(a, b, variant="b").statistic)


def auto_vs_best_interval(rows, resamples=2000, seed=0):
  """A 90% bootstrap interval (percentile) of the auto layout's measured
  step over the best one's: each layout's timings resampled with
  replacement, apart, and the medians and their best taken again.
  ``None`` without timings."""
  if not all(len(r.times) >= 2 for r in rows):
    return None
  auto = next(i for i, r in enumerate(rows) if is_auto(r.label))

  def ratio(*times):
    meds = [np.median(t) for t in times]
    return meds[auto] / min(meds)
  res = sps.bootstrap(tuple(np.asarray(r.times) for r in rows), ratio,
                      n_resamples=resamples, vectorized=False,
                      paired=False, confidence_level=0.9,
                      method="percentile", rng=np.random.default_rng(seed))
  ci = res.confidence_interval
  return float(ci.low), float(ci.high)


def _errors(pred, meas):
  return [abs(p - m) / m for p, m in zip(pred, meas)]


def summarize(name, rows, load=None):
  """The figures of one model's rows: the interleaved fit's (headline),
  the up-front file's alone (``*_file``) and against each layout's
  fastest step."""
  pred = [r.predicted_s for r in rows]
  meas = [r.measured_s for r in rows]
  errs = _errors(pred, meas)
  auto = next(r for r in rows if is_auto(r.label))
  fastest = [r.fastest_s for r in rows]
  upfront = [r.predicted_upfront_s for r in rows]
  file_errs = _errors(upfront, meas)
  other = {}
  if all(r.predicted_other_s for r in rows):
    o = [r.predicted_other_s for r in rows]
    other = {"spearman_other": spearman(o, meas),
             "kendall_other": kendall(o, meas),
             "median_abs_err_other": statistics.median(_errors(o, meas)),
             "worst_abs_err_other": max(_errors(o, meas))}
  return {**other, "model": name, "spearman": spearman(pred, meas), "load": load,
          "spearman_file": spearman(upfront, meas),
          "kendall_file": kendall(upfront, meas),
          "median_abs_err_file": statistics.median(file_errs),
          "worst_abs_err_file": max(file_errs),
          "spearman_fastest": spearman(pred, fastest),
          "median_abs_err_fastest": statistics.median(_errors(pred,
                                                              fastest)),
          "kendall": kendall(pred, meas),
          "median_abs_err": statistics.median(errs),
          "worst_abs_err": max(errs),
          "auto_vs_best": auto.measured_s / min(meas),
          "auto_vs_best_main": auto.main_s / min(r.main_s for r in rows),
          "auto_vs_best_interval": auto_vs_best_interval(rows)}


def final_line(summaries):
  """The benchmark's JSON last line: the worst model's figures, headline
  and file-alone (and the second file's, ``*_other``, where rows have
  it), over the known models; the held-out models' (summaries with
  ``held_out``) under ``held_out_*``."""
  out = {}
  for prefix, group in (("", [s for s in summaries if not s.get("held_out")]),
                        ("held_out_", [s for s in summaries
                                       if s.get("held_out")])):
    if not group:
      continue
    out.update({
        f"{prefix}spearman_min": min(s["spearman"] for s in group),
        f"{prefix}kendall_min": min(s["kendall"] for s in group),
        # The worst model's median, so that every model must meet it.
        f"{prefix}median_abs_err": max(s["median_abs_err"] for s in group),
        f"{prefix}worst_abs_err": max(s["worst_abs_err"] for s in group),
        f"{prefix}auto_vs_best_max": max(s["auto_vs_best"] for s in group),
        f"{prefix}spearman_min_file": min(s["spearman_file"] for s in group),
        f"{prefix}median_abs_err_file": max(s["median_abs_err_file"]
                                            for s in group),
        f"{prefix}worst_abs_err_file": max(s["worst_abs_err_file"]
                                           for s in group)})
    if all("spearman_other" in s for s in group):
      out.update({
          f"{prefix}spearman_min_other": min(s["spearman_other"]
                                             for s in group),
          f"{prefix}median_abs_err_other": max(s["median_abs_err_other"]
                                               for s in group),
          f"{prefix}worst_abs_err_other": max(s["worst_abs_err_other"]
                                              for s in group)})
  loads = [s["load"] for s in summaries if s.get("load")]
  if loads:  # how much slower the machine was than at the up-front file
    out["load_max"] = max(loads)
  return out


def _rules_text(rules):
  return str(rules) if str(rules) else "(replicated)"


def table(console, name, rows, summary):
  from rich.table import Table
  t = Table(title=f"{name}: predicted vs measured training step "
            "(8 logical CPU devices)")
  for c in ("layout", "mesh", "rules", "predicted", "measured", "error",
            "fastest"):
    t.add_column(c, justify="left" if c in ("layout", "mesh", "rules")
                 else "right", overflow="fold")
  t.add_column("steps", justify="right")
  for r in sorted(rows, key=lambda r: r.measured_s):
    label, mesh, rules, p, m, fastest = r[:6]
    t.add_row(label, mesh, _rules_text(rules), f"{p * 1e3:.2f} ms",
              f"{m * 1e3:.2f} ms", f"{(p - m) / m:+.0%}",
              f"{fastest * 1e3:.2f} ms", str(len(r.times)))
  console.print(t)
  console.print(
      f"{name}: Spearman {summary['spearman']:.3f}, Kendall "
      f"{summary['kendall']:.3f}, median |err| "
      f"{summary['median_abs_err']:.1%}, worst |err| "
      f"{summary['worst_abs_err']:.1%}, auto / best measured "
      f"{summary['auto_vs_best']:.3f}  (against each layout's fastest step: "
      f"Spearman {summary['spearman_fastest']:.3f}, median |err| "
      f"{summary['median_abs_err_fastest']:.1%})")
  interval = summary.get("auto_vs_best_interval")
  if interval:
    console.print(
        f"{name}: auto / best measured {summary['auto_vs_best']:.3f} "
        f"(90% bootstrap interval {interval[0]:.3f}-{interval[1]:.3f}); "
        f"{summary['auto_vs_best_main']:.3f} from the main rounds alone, "
        "before the contenders' run-off")
  if summary.get("load"):
    console.print(
        f"{name}: machine load: the interleaved reference steps ran "
        f"{summary['load']:.2f}x their time in the up-front calibration; "
        "predicted from the up-front file instead: Spearman "
        f"{summary['spearman_file']:.3f}, median |err| "
        f"{summary['median_abs_err_file']:.1%}")
  console.print(
      f"{name}: from the up-front file alone (what a user gets): Spearman "
      f"{summary['spearman_file']:.3f}, Kendall {summary['kendall_file']:.3f}"
      f", median |err| {summary['median_abs_err_file']:.1%}, worst |err| "
      f"{summary['worst_abs_err_file']:.1%}")
  if "spearman_other" in summary:
    console.print(
        f"{name}: from the second file (--also-topology) alone: Spearman "
        f"{summary['spearman_other']:.3f}, Kendall "
        f"{summary['kendall_other']:.3f}, median |err| "
        f"{summary['median_abs_err_other']:.1%}, worst |err| "
        f"{summary['worst_abs_err_other']:.1%}")


def plot(path, results):
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt
  fig, ax = plt.subplots(figsize=(6, 6))
  lo, hi = float("inf"), 0.0
  for name, rows in results.items():
    p = [r.predicted_s * 1e3 for r in rows]
    m = [r.measured_s * 1e3 for r in rows]
    ax.scatter(m, p, label=name, s=22)
    lo, hi = min(lo, *p, *m), max(hi, *p, *m)
  ax.plot([lo, hi], [lo, hi], "k--", lw=0.8, label="predicted = measured")
  ax.set_xscale("log")
  ax.set_yscale("log")
  ax.set_xlabel("measured step (ms)")
  ax.set_ylabel("predicted step (ms)")
  ax.set_title("cost model vs measured, 8 logical CPU devices")
  ax.legend()
  fig.tight_layout()
  fig.savefig(path, dpi=110)
  plt.close(fig)


