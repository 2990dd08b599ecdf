"""Megatron-LM's Table 1 (Narayanan et al. 2021) under its published
layouts: the calibrated A100 cluster predicts every row within 5% and
follows the published trend (benchmarks/published_runs.py prints it)."""

from scipy import stats

from benchmarks import published_runs as pr


def test_published_layouts_within_five_percent_and_in_trend():
  predicted, published = [], []
  for row in pr.MEGATRON_TABLE_1:
    a = pr.predict_a(row)
    got = pr.tflops(row, a.step_time_s)
    assert abs(got / row[-1] - 1) <= 0.05, (row[0], got, row[-1])
    assert a.peak_memory_bytes <= 76 * 2**30, row[0]
    predicted.append(got)
    published.append(row[-1])
  assert stats.spearmanr(predicted, published).statistic >= 0.7


def test_published_layout_is_what_the_paper_ran():
  row = pr.MEGATRON_TABLE_1[-1]   # 1008B: TP 8 x PP 64 x DP 6, 3072 GPUs
  lay = pr.published_layout(row)
  assert (lay.model, lay.stages, lay.data, lay.microbatch, lay.recompute) == (
      8, 64, 6, 1, "full")
  assert lay.schedule_name() == "interleaved_1f1b" and lay.chips == 3072
  a = pr.predict_a(row)
  assert a.microbatches == 3072 // 6 and a.idle_chips == 0
  # The paper's FLOP count with recompute: 96 B s l h^2 (1 + s/6h + V/16lh).
  cfg = pr.config_of(row)
  assert pr.hardware_flops(cfg) == 96 * 3072 * 2048 * 128 * 25600**2 * (
      1 + 2048 / (6 * 25600) + 51200 / (16 * 128 * 25600))
