"""The JAX export of a training plan runs, and XLA's own numbers hold the
plan to account: for each ZeRO stage, with and without recompute, the
jitted step built from the export (examples/jax_train_from_plan.py) is
compiled on 8 fake CPU devices (a subprocess: XLA_FLAGS must be set before
JAX starts); the parameter and optimizer-state bytes XLA takes per device
equal the plan's exactly, the loss goes down, and every collective XLA
chose differently from the plan is listed with a reason."""

import json
import os
import subprocess
import sys

import pytest

import costmodels
from mesh_tf import models
from autolayout.plans.plan import make_plan
from autolayout.training.decisions import TrainingDecisions, build_training
from tests.autolayout.plans.export import plans

pytest.importorskip("jax")

# Data parallel over `data`, tensor parallel over `model`, ZeRO storage over
# `data` (how ZeRO shards in practice).
RULES = "batch:data;d_ff:model;heads:model;vocab:model;d_model_storage:data"
CASES = [(s, r, k) for s in (0, 1, 2, 3) for r in (0, 2) for k in (1,)] + [
    (3, 1, 2)]


def plan_for(stage, recompute, k, dtype="float32"):
  d = TrainingDecisions(dtype, stage, recompute, k)
  t = build_training(models.get_config("transformer_tiny"), d)
  topo = costmodels.get_topology("dgx-h100")
  rules = RULES if stage else RULES.replace(";d_model_storage:data", "")
  report = costmodels.evaluate(t.graph, "data:2;model:4", rules, topo,
                               microbatches=t.plan)
  return make_plan(t.graph, "data:2;model:4", rules, topo, report,
                   name="transformer_tiny", decisions=d.as_dict(),
                   source={"model": "transformer_tiny", "overrides": {},
                           "train": True})


def test_exported_steps_match_the_plan_in_xla(tmp_path):
  paths = []
  for s, r, k in CASES:
    p = tmp_path / f"stage{s}_rec{r}_k{k}.json"
    plan_for(s, r, k, "bfloat16" if k > 1 else "float32").save(p)
    paths.append(str(p))
  out = tmp_path / "xla.json"
  env = dict(os.environ, PYTHONPATH=plans.ROOT, TF_CPP_MIN_LOG_LEVEL="2")
  proc = subprocess.run(
      [sys.executable, os.path.join(plans.ROOT, "examples",
                                    "jax_train_from_plan.py"), *paths,
       "--steps", "2", "--json", str(out)], cwd=plans.ROOT, env=env,
      capture_output=True, text=True, timeout=600)
  assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
  assert "JAX-TRAIN-OK" in proc.stdout
  results = {os.path.basename(r["plan"]): r for r in
             json.loads(out.read_text())}
  for name, r in results.items():
    s = r["state_bytes"]
    # Exactly: what XLA takes as arguments (less the batch), what it
    # updates in place, and the shards JAX placed.
    assert s["plan"] == s["xla_arguments"] == s["xla_aliased"] == (
        s["xla_shards"]), (name, s)
    assert r["losses"][-1] < r["losses"][0], name
    assert r["peak"]["ratio_xla_to_plan"] > 0
    for d in r["collectives_differ"]:
      assert d["why"], (name, d)
  # ZeRO shards the state: stage 1 and up hold less per device than 0.
  s0 = results["stage0_rec0_k1.json"]["state_bytes"]["plan"]
  for stage in (1, 2, 3):
    assert results[f"stage{stage}_rec0_k1.json"]["state_bytes"]["plan"] < s0
  k2 = results["stage3_rec1_k2.json"]
  assert k2["decisions"]["microbatches"] == 2
  assert any("accumulators" in n for n in k2["not_expressible"])
