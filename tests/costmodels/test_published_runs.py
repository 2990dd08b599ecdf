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


def test_other_published_runs_out_of_sample():
  """BLOOM-176B on Jean Zay (TP 4 x PP 12 x DP 8, microbatch 2, ZeRO 1,
  Omni-Path between nodes) and MT-NLG 530B are out of sample: BLOOM lies
  within 10% of its ~150 TFLOP/s, MT-NLG's three sizes follow their
  published trend, and a run that misses 5% says what the model lacks."""
  bloom = next(r for r in pr.OTHER_RUNS if r[0] == "BLOOM-176B")
  cfg, topo, a, got = pr.predict_other(bloom)
  assert abs(got / bloom[6] - 1) <= 0.10, got
  if abs(got / bloom[6] - 1) > 0.05:
    assert "BLOOM-176B" in pr.MISSING
  lay = a.layout
  assert (lay.model, lay.stages, lay.data, lay.microbatch, lay.zero,
          lay.chips) == (4, 12, 8, 2, 1, 384)
  assert a.cost.layers_per_group == (5,) + (6,) * 10 + (5,)
  assert a.microbatches == 2048 // 16 and a.idle_chips == 0
  # 4 x 100 Gbit/s Omni-Path per node of 8: a quarter of HDR's per GPU.
  assert topo.dims[0].link.bandwidth_bytes_per_s == 4 * 100e9 / 8 / 8
  assert 4 * topo.dims[0].link.bandwidth_bytes_per_s == (
      pr.get_topology("a100x8-nodes48-cal").dims[0].link
      .bandwidth_bytes_per_s)
  assert cfg.vocab == 250880 and cfg.layers == 70
  mtnlg = [r for r in pr.OTHER_RUNS if r[0] == "MT-NLG-530B"]
  preds = [pr.predict_other(r)[3] for r in mtnlg]
  assert [r[2] for r in mtnlg] == [2240, 2800, 3360]
  assert preds == sorted(preds, reverse=True)   # 126 > 121 > 113
  for run, p in zip(mtnlg, preds):
    if abs(p / run[6] - 1) > 0.05:
      assert run[0] in pr.MISSING
