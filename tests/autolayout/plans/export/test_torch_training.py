"""The PyTorch export of a training plan: FSDP2 settings by ZeRO stage,
what FSDP2 cannot express listed, and the export applied in real PyTorch
(DTensor and fully_shard on 8 gloo ranks; a subprocess)."""

import json
import os
import subprocess
import sys

import pytest

from autolayout.plans import decisions as plan_decisions
from autolayout.plans.export import to_torch
from tests.autolayout.plans.export import plans
from tests.autolayout.plans.export.test_jax_training import plan_for

pytest.importorskip("torch")


def test_fsdp_settings_follow_the_zero_stage():
  t3 = to_torch(plan_for(3, 1, 2, "bfloat16"))["training"]
  wi = t3["variables"]["layer_0/ffn/wi/kernel"]
  assert wi["fully_shard"] == {"mesh_dims": ["data"],
                               "reshard_after_forward": True,
                               "shard_dim": 0}
  assert t3["activation_checkpointing"]["blocks"] == ["layer_0"]
  assert t3["gradient_accumulation"]["microbatches"] == 2
  assert t3["mixed_precision"]["param_dtype"] == "bfloat16"
  t1 = to_torch(plan_for(1, 0, 1))["training"]
  assert not t1["variables"]["layer_0/ffn/wi/kernel"]["fully_shard"][
      "reshard_after_forward"]
  assert any("no stage 1" in n for n in t1["not_expressible"])
  t0 = to_torch(plan_for(0, 0, 1))["training"]
  assert all(v["fully_shard"] is None for v in t0["variables"].values())


@pytest.mark.parametrize("stage, rec, k, dtype", [(3, 1, 2, "bfloat16"),
                                                  (1, 0, 1, "float32")])
def test_real_pytorch_applies_the_training_export(tmp_path, stage, rec, k,
                                                  dtype):
  plan = plan_for(stage, rec, k, dtype)
  spec = to_torch(plan)
  report = plan_decisions.evaluate(plan)
  param_bytes = sum(b for n, b in report.variable_bytes_per_device.items()
                    if n in spec["params"])
  sp, ex = tmp_path / "spec.json", tmp_path / "expected.json"
  sp.write_text(json.dumps(spec))
  ex.write_text(json.dumps({"param_bytes": param_bytes}))
  env = dict(os.environ, PYTHONPATH=plans.ROOT)
  proc = subprocess.run(
      [sys.executable, os.path.join(os.path.dirname(__file__),
                                    "run_torch_training.py"), str(sp),
       str(ex)], cwd=plans.ROOT, env=env, capture_output=True, text=True,
      timeout=300)
  assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
  assert "TORCH-TRAIN-OK" in proc.stdout
  assert f"{k} microbatches" in proc.stdout
  # Activation checkpointing is applied, not only exported: the listed
  # blocks run forward again in backward, with the same loss.
  assert (f"TORCH-CHECKPOINT-OK {rec} of 2 blocks checkpointed"
          in proc.stdout)
