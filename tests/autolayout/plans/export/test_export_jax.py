"""The JAX export, proven in real JAX on 8 fake CPU devices (a subprocess:
XLA_FLAGS must be set before JAX starts)."""

import json
import os
import subprocess
import sys

import pytest

from autolayout.plans import export
from autolayout.errors import ExportError
from autolayout.plans.export import jax as jax_export
from tests.autolayout.plans.export import plans

pytest.importorskip("jax")


def test_keys_and_one_spec_entry_per_positional_dim():
  spec = export.to_jax(plans.make("megatron"))
  assert set(spec) == {"mesh", "params", "activations"}
  assert spec["mesh"] == {"axis_names": ["data", "model"], "shape": [2, 4]}
  wi = spec["params"]["layer_0/ffn/wi/kernel"]
  assert wi == {"shape": [16, 32], "dims": ["d_model", "d_ff"],
                "partition_spec": [None, "model"]}
  q = spec["activations"]["layer_0/attention/q_proj"]
  assert q["dims"] == ["batch", "heads", "length", "d_kv"]
  assert q["partition_spec"] == ["data", "model", None, None]
  assert spec["activations"]["loss"]["partition_spec"] == []
  assert {"inputs", "targets", "logits", "final_norm/norm",
          "layer_1/ffn/wi/einsum"} <= set(spec["activations"])
  # Gradients and optimizer state are never activations to pin.
  assert not [n for n in spec["activations"] if "grad" in n]


def test_a_dim_over_several_axes_is_a_list():
  assert jax_export.partition_spec([(), ("a",), ("a", "b")]) == [
      None, "a", ["a", "b"]]


def test_rename_hook_mapping_and_function():
  plan = plans.make("megatron")
  spec = export.to_jax(plan, rename={"embedding/weights": "wte",
                                     "positional_embedding": None})
  assert "wte" in spec["params"] and "embedding/weights" not in spec["params"]
  assert "positional_embedding" not in spec["params"]
  fn = lambda n: n.replace("/", ".")  # noqa: E731
  spec = export.to_jax(plan, rename=fn)
  assert "layer_0.ffn.wi.kernel" in spec["params"]
  assert "layer_0.ffn.wi.einsum" in spec["activations"]
  with pytest.raises(ExportError, match="both .* the name 'x'"):
    export.to_jax(plan, rename=lambda n: "x")
  with pytest.raises(ExportError, match="non-empty strings"):
    export.to_jax(plan, rename=lambda n: 3)


def test_unknown_format_is_an_export_error():
  with pytest.raises(ExportError, match="unknown export format 'flax'"):
    export.export(plans.make("megatron"), "flax")


def test_real_jax_shards_compiles_and_has_the_predicted_collectives(
    tmp_path):
  paths = []
  for which in ("megatron", "vocab"):
    p = tmp_path / f"{which}.json"
    plans.make(which).save(p)
    paths.append(str(p))
  out = tmp_path / "out.json"
  env = dict(os.environ, PYTHONPATH=plans.ROOT, TF_CPP_MIN_LOG_LEVEL="2")
  proc = subprocess.run(
      [sys.executable, os.path.join(os.path.dirname(__file__), "run_jax.py"),
       str(out)] + paths, cwd=plans.ROOT, env=env, capture_output=True,
      text=True, timeout=300)
  assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
  assert "JAX-OK" in proc.stdout
  results = json.loads(out.read_text())
  for path in paths:
    r = results[path]
    # Every param and activation's shard shapes and offsets were checked.
    assert r["params"] == 24 and r["activations"] == 21
    # Per mesh axis, the collective kinds our trace predicts appear in the
    # compiled HLO.  (XLA may fold a reduction over `data` into one over
    # both axes, when it splits replicated work over `model` too.)
    for axis in ("data", "model"):
      want = {k for k, axes in r["predicted"] if axis in axes}
      got = {k for k, axes in r["hlo_collectives"] if axis in axes}
      assert want and want <= got, (path, axis, want, got)
  megatron = results[paths[0]]
  assert ["allreduce", ["model"]] in megatron["hlo_collectives"]
  # The sharded forward gives the same loss under both plans.
  assert results[paths[0]]["loss"] == pytest.approx(results[paths[1]]["loss"],
                                                    rel=1e-5)
