"""The achievable fraction of the matmul peak: priced by the roofline, kept
out of MFU's denominator, carried by topology files."""

import json

import pytest

import costmodels
from costmodels import compute, hardware, precision, topology_json
from costmodels.calibrate import topology_file
from mesh_tf.lowering.trace import ComputeRecord


def _record(flops, dtype="bfloat16", matmul=True):
  return ComputeRecord("op", flops, 0, 0, dtype, matmul, "matmul")


@pytest.mark.parametrize("name", sorted(hardware.CHIPS))
def test_every_preset_has_a_sourced_fraction_below_one(name):
  chip = hardware.CHIPS[name]
  eff = chip.matmul_efficiency("bfloat16")
  assert 0.5 < eff < 1.0
  assert chip.achievable_flops_per_s("bfloat16") == pytest.approx(
      chip.peak_bf16_flops_per_s * eff)


def test_a_matmul_record_costs_flops_over_peak_times_fraction():
  a100 = hardware.CHIPS["a100"]
  flops = 10**15
  t = compute.compute_time(_record(flops), a100)
  assert t == pytest.approx(flops / (312e12 * 267.9 / 312))
  assert t > flops / a100.peak_bf16_flops_per_s   # slower than datasheet
  # float32 runs at TF32, at the same fraction (no TF32 measurement: the
  # bf16 entry stands for it); elementwise work keeps the vector peak.
  t32 = compute.compute_time(_record(flops, "float32"), a100)
  assert t32 == pytest.approx(flops / (156e12 * a100.matmul_efficiency()))
  vec = compute.compute_time(_record(flops, matmul=False), a100)
  assert vec == pytest.approx(flops / 19.5e12)


def test_a_chip_without_fractions_keeps_its_peak():
  chip = hardware.CHIPS["h100"]._replace(matmul_efficiency_by_dtype=())
  assert chip.matmul_efficiency("bfloat16") == 1.0
  assert compute.compute_time(_record(989e12), chip) == pytest.approx(1.0)


def test_fractions_resolve_dtypes_like_the_peaks():
  chip = hardware.CHIPS["a100"]._replace(matmul_efficiency_by_dtype=(
      ("bfloat16", 0.8), ("tf32", 0.6), ("float32", 0.9)))
  assert chip.matmul_efficiency("float32") == 0.6        # TF32 by default
  assert chip.matmul_efficiency("fp32_strict") == 0.9
  assert chip.matmul_efficiency("float16") == 0.8        # not listed
  assert precision.achievable_flops_per_s(chip, "float32") == \
      pytest.approx(156e12 * 0.6)
  assert precision.achievable_flops_per_s(chip, "float64") == \
      pytest.approx(19.5e12 * 0.9)
  # Datasheet peaks are untouched.
  assert precision.peak_flops_per_s(chip, "float32") == 156e12


def test_mfu_divides_by_the_datasheet_peak():
  from autolayout.cli import common

  class Config:
    batch, length = 4, 8

    @staticmethod
    def num_parameters():
      return 10**9

  class Result:
    class report:
      step_time_s = 2.0

  class Model:
    config = Config

  topo = costmodels.get_topology("dgx-a100")
  mfu = common.model_flops_utilization(Result, Model, topo)
  assert mfu == pytest.approx(6 * 10**9 * 32 / (2.0 * 8 * 312e12))


def test_topology_files_round_trip_the_fractions(tmp_path):
  topo = costmodels.get_topology("dgx-h100")
  path = tmp_path / "h100.json"
  topology_file.write_topology(path, topo)
  data = json.loads(path.read_text())
  assert data["version"] == topology_json.VERSION
  assert data["chip"]["matmul_efficiency_by_dtype"] == {
      "bfloat16": pytest.approx(792.1 / 989)}
  assert topology_file.read_topology(path) == topo


def test_version_2_files_load_with_no_fraction(tmp_path):
  data = topology_json.topology_to_dict(costmodels.get_topology("dgx-h100"))
  data["version"] = 2
  del data["chip"]["matmul_efficiency_by_dtype"]
  path = tmp_path / "v2.json"
  path.write_text(json.dumps(data))
  chip = topology_file.read_topology(path).chip
  assert chip.matmul_efficiency_by_dtype == ()
  assert chip.achievable_flops_per_s("bfloat16") == 989e12


def test_the_header_and_topologies_show_the_achievable_rate():
  from autolayout.cli import common, topologies
  text = common.peak_text(hardware.CHIPS["a100"])
  assert "312 TFLOP/s" in text and "85.9%: 267.9" in text
  assert "priced at" not in common.peak_text(
      hardware.CHIPS["a100"]._replace(matmul_efficiency_by_dtype=()))
  frame = topologies.topologies_frame()
  row = frame.loc["dgx-a100"]
  assert row["achievable_bf16_flops_per_s"] == pytest.approx(267.9e12)
  assert row["bf16_flops_per_s"] == 312e12
