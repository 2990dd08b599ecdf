"""The truth benchmark's statistics (``benchmarks/truth_stats.py``): rank
correlations with ties as SciPy defines them, the bootstrap interval, and
the JSON line's file-alone and held-out figures, on made-up rows."""

import pytest

from benchmarks import truth_stats
from benchmarks.truth_timing import Row


def _rows(pred, meas, upfront, other=None, times=None):
  out = []
  for i, (p, m, u) in enumerate(zip(pred, meas, upfront)):
    out.append(Row("auto" if i == 0 else f"l{i}", "x:8", "", p, m, m, u,
                   times[i] if times else (m, m * 1.01, m * 0.99), m,
                   None if other is None else other[i]))
  return out


def test_rank_correlations_handle_ties_as_scipy_defines_them():
  # Ties take their mean rank: [1, 2, 2, 3] ranks as [1, 2.5, 2.5, 4].
  assert truth_stats.spearman([1, 2, 2, 3], [1, 2, 3, 4]) == pytest.approx(
      0.9486833, rel=1e-6)
  assert truth_stats.kendall([1, 2, 2, 3], [1, 2, 3, 4]) == pytest.approx(
      0.9128709, rel=1e-6)
  assert truth_stats.spearman([3, 2, 1], [1, 2, 3]) == pytest.approx(-1.0)


def test_the_json_line_has_the_file_alone_and_held_out_figures():
  meas = [1.0, 2.0, 3.0, 4.0]
  known = truth_stats.summarize("mlp", _rows(
      [1.1, 2.2, 2.9, 4.4], meas, [1.2, 1.8, 3.3, 4.0], other=[1, 2, 3, 5]))
  held = dict(truth_stats.summarize("wide", _rows(
      [1.0, 2.0, 3.0, 4.0], meas, [4.0, 3.0, 2.0, 1.0])), held_out=True)
  line = truth_stats.final_line([known, held])
  assert line["spearman_min_file"] == pytest.approx(1.0)
  assert line["median_abs_err_file"] == pytest.approx(0.1)
  assert line["worst_abs_err_file"] == pytest.approx(0.2)
  assert line["median_abs_err"] == pytest.approx(0.1)
  assert line["spearman_min_other"] == pytest.approx(1.0)
  assert line["worst_abs_err_other"] == pytest.approx(0.25)
  # The held-out model is apart: its file ranks every layout backwards.
  assert line["held_out_spearman_min_file"] == pytest.approx(-1.0)
  assert line["held_out_spearman_min"] == pytest.approx(1.0)
  assert "held_out_spearman_min_other" not in line


def test_the_auto_layouts_bootstrap_interval_brackets_its_ratio():
  times = [(1.0, 1.1, 1.05, 0.95), (1.2, 1.3, 1.25, 1.1),
           (0.9, 1.0, 0.95, 1.05)]
  rows = _rows([1, 2, 3], [1.025, 1.225, 0.975], [1, 2, 3], times=times)
  lo, hi = truth_stats.auto_vs_best_interval(rows, resamples=500)
  ratio = rows[0].measured_s / min(r.measured_s for r in rows)
  assert 1.0 <= lo <= ratio <= hi
  assert truth_stats.auto_vs_best_interval(
      [r._replace(times=(1.0,)) for r in rows]) is None
