"""Plans with dims over several mesh axes run end to end: JAX shards and
compiles them (the dim is a tuple in the PartitionSpec), PyTorch's
distribute_tensor gives our slices (one Shard per mesh dim), and DTensor,
which has one mesh dim per tensor dim, refuses with a typed error."""

import json
import os
import subprocess
import sys

import pytest

from autolayout.plans import export
from autolayout.errors import ExportError
from tests.autolayout.plans.export import plans


def test_specs_name_both_axes_and_round_trip_through_the_plan_file(tmp_path):
  import mesh_tf
  plan = plans.make("multi_ff")
  p = tmp_path / "plan.json"
  plan.save(p)
  again = mesh_tf.load_plan(str(p), plans.tiny_model()[0].graph)
  assert again.rules == plan.rules
  assert again.rules.mesh_axes_of("d_ff") == ("data", "model")
  assert json.loads(p.read_text())["rules"]["d_ff"] == ["data", "model"]
  jax = export.to_jax(plan)
  assert jax["params"]["layer_0/ffn/wi/kernel"]["partition_spec"] == [
      None, ["data", "model"]]
  torch = export.to_torch(plan)
  assert torch["params"]["layer_0/ffn/wi/kernel"]["placements"] == [
      {"shard": 1}, {"shard": 1}]
  with pytest.raises(ExportError, match="one mesh dim"):
    export.to_dtensor(plan)


def test_real_jax_runs_multi_axis_plans(tmp_path):
  pytest.importorskip("jax")
  paths = []
  for which in ("multi_dp", "multi_ff", "megatron"):
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
  results = json.loads(out.read_text())
  for path in paths[:2]:
    r = results[path]
    assert r["params"] == 24 and r["activations"] == 21
    # Our trace has collectives over both axes at once; so does the HLO.
    want = {(k, tuple(a)) for k, a in r["predicted"] if len(a) > 1}
    got = {(k, tuple(a)) for k, a in r["hlo_collectives"]}
    assert want, path
    assert {k for k, _ in want} <= {k for k, a in got
                                    if set(a) == {"data", "model"}}, (
                                        path, want, got)
  # The same forward loss under every plan.
  losses = [results[p]["loss"] for p in paths]
  assert losses[0] == pytest.approx(losses[2], rel=1e-5)
  assert losses[1] == pytest.approx(losses[2], rel=1e-5)


def test_real_torch_distributes_multi_axis_params(tmp_path):
  pytest.importorskip("torch")
  plan = plans.make("multi_ff")
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
