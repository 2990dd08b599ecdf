"""The TF DTensor export, proven with real ``tf.experimental.dtensor`` on 8
logical CPU devices (a subprocess: logical devices are fixed per process)."""

import json
import os
import subprocess
import sys

import pytest

from autolayout.plans import export
from autolayout.errors import ExportError
from autolayout.plans.export import dtensor as dtensor_export
from tests.autolayout.plans.export import plans


def test_one_mesh_dim_or_unsharded_per_tensor_dim():
  spec = export.to_dtensor(plans.make("2d"))
  assert set(spec) == {"mesh", "params"}
  assert spec["mesh"] == {"axis_names": ["data", "model"], "shape": [2, 4]}
  wo = spec["params"]["layer_0/ffn/wo/kernel"]
  assert wo == {"shape": [32, 16], "dims": ["d_ff", "d_model"],
                "sharding_specs": ["model", "data"]}
  assert spec["params"]["layer_0/attention/o"]["sharding_specs"] == [
      "model", "unsharded", "data"]


def test_a_dim_over_two_axes_cannot_be_a_dtensor_layout():
  with pytest.raises(ExportError, match="one mesh dim"):
    dtensor_export.sharding_specs("w", [("a", "b")])


def test_real_dtensor_layouts_give_our_slices(tmp_path):
  plan = plans.make("2d")
  spec_path, expected_path = tmp_path / "dtensor.json", tmp_path / "exp.json"
  spec_path.write_text(json.dumps(export.to_dtensor(plan)))
  expected_path.write_text(json.dumps(plans.expected_slices(plan)))
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
  proc = subprocess.run(
      [sys.executable,
       os.path.join(os.path.dirname(__file__), "run_dtensor.py"),
       str(spec_path), str(expected_path)],
      cwd=plans.ROOT, env=env, capture_output=True, text=True, timeout=300)
  assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
  assert "DTENSOR-OK 24 params on 8 devices" in proc.stdout
