"""Mixed precision and hardware truth (issue 13, item 1): per-dtype peaks,
the roofline at each op's own dtype, exposed HBM and its reserve, master and
compute dtypes of variables, bf16 decoding with its own KV-cache memory."""

import numpy as np
import pytest

import mesh_tf as mtf
import costmodels
from costmodels import hardware, memory, precision
from mesh_tf import models
from mesh_tf.training import optimize
from mesh_tf.models import decoding as dl
from mesh_tf.training import train_step_for_model

GIB = 2**30


def test_every_chip_has_a_matmul_peak_per_dtype_below_bf16_for_fp32():
  for chip in hardware.CHIPS.values():
    bf16 = chip.peak_flops_per_s("bfloat16")
    assert bf16 == chip.peak_bf16_flops_per_s
    assert chip.peak_flops_per_s("fp32_strict") < chip.peak_flops_per_s(
        "float32") <= bf16 / 2 or chip.kind == "tpu"
    assert chip.peak_flops_per_s("float32") <= bf16 / 2
    assert chip.peak_vector_flops_per_s < bf16


def test_gpu_float32_matmuls_run_on_tf32_and_tpus_at_a_sixth():
  a100, h100 = hardware.CHIPS["a100"], hardware.CHIPS["h100"]
  assert a100.peak_flops_per_s("float32") == 156e12
  assert a100.peak_flops_per_s("fp32_strict") == 19.5e12
  assert h100.peak_flops_per_s("tf32") == 494.5e12
  v4 = hardware.CHIPS["tpu-v4"]
  assert v4.peak_flops_per_s("float32") == pytest.approx(275e12 / 6)
  assert precision.peak_flops_per_s(a100, "int32") == a100.vector_flops_per_s
  assert precision.peak_flops_per_s(a100, "bfloat16", matmul=False) == 19.5e12


def test_hbm_is_what_the_chip_exposes():
  assert hardware.CHIPS["h100"].hbm_bytes == 81559 * 2**20
  assert 79.6 < hardware.CHIPS["h100"].hbm_bytes / GIB < 79.7
  assert hardware.CHIPS["a100"].hbm_bytes == 80 * GIB
  assert hardware.usable_memory_bytes("h100", 0.0) == 81559 * 2**20
  assert hardware.usable_memory_bytes("h100", 0.1) == int(
      81559 * 2**20 * 0.9)
  with pytest.raises(mtf.MtfError, match="not a fraction"):
    hardware.usable_memory_bytes("h100", 1.5)


def _matmul_graph(dtype):
  g = mtf.Graph()
  mesh = mtf.Mesh(g, "m")
  x = mtf.zeros(mesh, "batch:4096,d_model:4096", dtype=dtype)
  w = mtf.get_variable(mesh, "w", "d_model:4096,d_ff:4096", dtype=dtype)
  mtf.einsum([x, w], output_shape="batch:4096,d_ff:4096")
  return g


def test_the_roofline_prices_each_einsum_at_its_own_dtype():
  times = {}
  for dtype in ("bfloat16", "float32"):
    r = costmodels.evaluate(_matmul_graph(dtype), "m:8", "", "dgx-a100")
    [rec] = [c for c in r.trace.compute if c.matmul]
    assert rec.dtype == dtype
    times[dtype] = r.compute_time_s
  # Both are compute-bound (2*4096^3 FLOPs): TF32 is half the bf16 peak.
  assert times["float32"] == pytest.approx(2 * times["bfloat16"], rel=1e-3)


def test_reports_show_the_reserve_and_fit_against_usable_memory():
  g = _matmul_graph("float32")
  r = costmodels.evaluate(g, "m:8", "", "dgx-h100")
  assert r.memory_reserve_fraction == hardware.DEFAULT_MEMORY_RESERVE_FRACTION
  assert r.usable_memory_bytes == hardware.usable_memory_bytes("h100")
  assert "usable" in r.summary() and "5% reserve" in r.summary()
  big = costmodels.evaluate(g, "m:8", "", "dgx-h100",
                            memory_reserve_fraction=0.9999999)
  assert not big.fits_in_memory and r.fits_in_memory
  assert "fraction_of_usable" in r.to_dataframe("memory")


def test_master_and_slice_dtypes_store_fp32_and_compute_in_bf16():
  g = mtf.Graph()
  mesh = mtf.Mesh(g, "m")
  vd = mtf.VariableDType("float32", "bfloat16")
  w = mtf.get_variable(mesh, "w", "a:8,b:16", dtype=vd)
  assert w.dtype == "bfloat16"
  [var] = g.trainable_variables
  assert var.dtype == "float32"
  assert memory.tensor_category(w) == "params"
  assert memory.tensor_category(var.outputs[0]) == "params"
  # A slice_dtype equal to the master adds no op.
  u = mtf.get_variable(mesh, "u", "a:8", master_dtype="bfloat16",
                       slice_dtype="bfloat16")
  assert isinstance(u.operation, mtf.Variable) and u.dtype == "bfloat16"
  assert vd == mtf.VariableDType("float32", "bfloat16", "bfloat16")
  assert hash(vd) == hash(mtf.VariableDType("float32", "bfloat16"))
  with pytest.raises(AttributeError):
    vd.master_dtype = "float16"


def test_zoo_param_dtype_bf16_stores_fp32_masters_and_counts_bf16_copies():
  fp32 = models.build_model("transformer_tiny")
  bf16 = models.build_model("transformer_tiny", param_dtype="bfloat16")
  for m in (fp32, bf16):  # a training step: the copies live until backward
    variables = list(m.graph.trainable_variables)
    grads = mtf.gradients([m.loss], [v.outputs[0] for v in variables])
    optimize.SgdOptimizer(0.1).apply_grads(grads, variables)
  assert {v.dtype for v in bf16.graph.trainable_variables} == {"float32"}
  assert bf16.loss.dtype == "bfloat16"
  layout = ("rows:2;cols:4", "batch:rows;d_ff:cols;heads:cols")
  r32 = costmodels.evaluate(fp32.graph, *layout, "dgx-h100")
  r16 = costmodels.evaluate(bf16.graph, *layout, "dgx-h100")
  # The bf16 compute copies add half the masters' bytes to "params".
  assert r16.variable_bytes_per_device == r32.variable_bytes_per_device
  assert r16.memory_by_category["params"] > r32.memory_by_category["params"]
  assert {c.dtype for c in r16.trace.compute if c.matmul} == {"bfloat16"}


def test_bf16_training_step_on_8_devices_matches_fp32_within_bf16_tolerance():
  layout = ("rows:2;cols:4", "batch:rows;d_ff:cols;heads:cols;vocab:cols")
  losses, weights = {}, {}
  for pd in (None, "bfloat16"):
    model = models.build_model("transformer_tiny", param_dtype=pd)
    step = train_step_for_model(model, *layout, mtf.logical_cpu_devices(8),
                                optimize.SgdOptimizer(0.5))
    losses[pd] = float(step(**model.random_values()))
    weights[pd] = step.variable_values()
  assert losses["bfloat16"] == pytest.approx(losses[None], rel=2e-2)
  for name, w in weights[None].items():
    assert weights["bfloat16"][name].dtype == np.float32   # master kept
    np.testing.assert_allclose(weights["bfloat16"][name], w, atol=3e-2,
                               rtol=3e-2)


def test_bf16_decoding_stores_bf16_weights_and_is_predicted_faster():
  reports = {}
  for pd in (None, "bfloat16"):
    d = dl.decoding_model("gpt2_small", batch=1, memory_length=1024,
                          param_dtype=pd)
    # No per-step cast of a stored weight matrix (norm scales and biases,
    # vectors of d_model, stay float32 as usual in mixed precision).
    casts = [op for op in d.graph.operations
             if getattr(op, "kind", None) == "cast"
             and isinstance(op.inputs[0].operation, mtf.Variable)
             and op.inputs[0].shape.ndims > 1]
    assert not casts
    reports[pd] = costmodels.evaluate(d.graph, "model:8",
                                      "d_ff:model;vocab:model",
                                      "dgx-h100", outputs=d.cost_outputs())
  fp32, bf16 = reports[None], reports["bfloat16"]
  # One-token decoding is bound by reading the weights and the cache: half
  # the bytes, half the compute time (the all-reduces are latency-bound).
  assert bf16.compute_time_s < 0.55 * fp32.compute_time_s
  assert bf16.step_time_s < fp32.step_time_s
  for r in (fp32, bf16):
    assert r.memory_by_category["kv_cache"] > 0
    assert r.memory_by_category["optimizer"] == 0
  assert bf16.memory_by_category["kv_cache"] * 2 == \
      fp32.memory_by_category["kv_cache"]


def test_cli_memory_reserve_sets_the_budget_and_the_report():
  import json
  from tests.autolayout.cli.test_cli import run_cli
  p = run_cli("solve", "-m", "transformer_tiny", "-t", "dgx-h100", "--mesh",
              "data:8", "--memory-reserve", "10%", "-f", "json")
  assert p.returncode == 0, p.stderr
  res = json.loads(p.stdout)["result"]
  hbm = hardware.CHIPS["h100"].hbm_bytes
  assert res["memory"]["memory_reserve_fraction"] == 0.1
  assert res["memory"]["usable_bytes"] == int(hbm * 0.9)
  assert res["solver"]["memory_budget_bytes"] == int(hbm * 0.9)
  bad = run_cli("solve", "-m", "transformer_tiny", "-t", "dgx-h100",
                "--memory-reserve", "150%")
  assert bad.returncode != 0 and "--memory-reserve" in bad.stderr
