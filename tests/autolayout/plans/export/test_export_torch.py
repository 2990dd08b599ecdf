"""The PyTorch DTensor export, proven with real ``distribute_tensor`` on a
CPU DeviceMesh of 8 gloo processes (a subprocess, so that torch stays out of
the test process)."""

import json
import os
import subprocess
import sys

import pytest

from autolayout.plans import export
from autolayout.errors import ExportError
from autolayout.plans.export import torch as torch_export
from tests.autolayout.plans.export import plans

pytest.importorskip("torch")


def test_placements_are_indexed_by_mesh_dim():
  spec = export.to_torch(plans.make("2d"))
  assert set(spec) == {"mesh", "params"}
  assert spec["mesh"] == {"axis_names": ["data", "model"], "shape": [2, 4]}
  wi = spec["params"]["layer_0/ffn/wi/kernel"]   # [d_model, d_ff]
  wo = spec["params"]["layer_0/ffn/wo/kernel"]   # [d_ff, d_model]
  assert wi["placements"] == [{"shard": 0}, {"shard": 1}]
  assert wo["placements"] == [{"shard": 1}, {"shard": 0}]
  pos = spec["params"]["positional_embedding"]   # [length, d_model]
  assert pos["placements"] == [{"shard": 1}, {"replicate": True}]
  assert set(wi) == {"shape", "dims", "placements"}


def test_a_dim_over_two_axes_shards_on_both_in_mesh_order():
  assert torch_export.placements([("a", "b"), ()], ["a", "b"]) == [
      {"shard": 0}, {"shard": 0}]
  with pytest.raises(ExportError, match="in an order other than"):
    torch_export.placements([("b", "a")], ["a", "b"])


def test_real_distribute_tensor_gives_our_slices(tmp_path):
  plan = plans.make("2d")
  spec_path, expected_path = tmp_path / "torch.json", tmp_path / "exp.json"
  spec_path.write_text(json.dumps(export.to_torch(plan)))
  expected_path.write_text(json.dumps(plans.expected_slices(plan)))
  proc = subprocess.run(
      [sys.executable,
       os.path.join(os.path.dirname(__file__), "run_torch.py"),
       str(spec_path), str(expected_path)],
      cwd=plans.ROOT, capture_output=True, text=True, timeout=300)
  assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
  assert "TORCH-OK 24 params on 8 ranks" in proc.stdout
