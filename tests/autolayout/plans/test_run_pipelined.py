"""``mtf-layout run`` of a pipelined plan: its PipelineTrainStep runs on 8
logical CPU devices (the program checked against the plan's fingerprint),
prints the pipelined prediction next to the measurement, and its loss goes
down; ``--scale-down`` keeps at least two stages and splits the layers
again over the stages left."""

import json

import pytest

import mesh_tf as mtf
from mesh_tf.core.mesh_shape import convert_to_mesh_shape as MeshShape
from autolayout.cli import main
from autolayout.errors import PlanError
from autolayout.plans import pipelined
from autolayout.plans import run_pipelined
from autolayout.training.pipeline_price import PipelineLayout, price_layout

SOURCE = {"model": "transformer_tiny", "overrides": {"layers": 2},
          "train": True}


def _plan(lay, topology="dgx-h100", layers=2):
  cfg = mtf.models.get_config("transformer_tiny", layers=layers)
  return pipelined.plan_of_price(price_layout(cfg, topology, lay), cfg,
                                 topology, "transformer_tiny",
                                 {**SOURCE, "overrides": {"layers": layers}})


def test_run_a_pipelined_plan_on_8_cpu_devices(tmp_path, capsys):
  # TP 2 x PP 2 x DP 2, 2 microbatches, ZeRO 1 over the data axis.
  path = _plan(PipelineLayout(2, 2, 2, microbatch=2, zero=1)).save(
      str(tmp_path / "p.json"))
  assert main(["run", path, "--eager", "--warmup", "1", "--steps", "2",
               "-f", "json"]) == 0
  rep = json.loads(capsys.readouterr().out)
  assert rep["mesh"] == "stage:2;data:2;model:2"
  assert rep["loss_went_down"] and len(rep["losses"]) == 3
  assert rep["predicted_step_time_s"] == pytest.approx(
      mtf.load_plan(path).costs.step_time_s, rel=1e-12)
  assert rep["pipeline"]["in_flight"] == [2, 1]
  assert rep["decisions"]["pipeline"]["stages"] == 2
  assert len(rep["measured_state_bytes"]) == 8
  assert all(b > 0 for b in rep["measured_state_bytes"])


def test_scale_down_keeps_two_stages_and_splits_the_layers_again():
  plan = _plan(PipelineLayout(2, 4, 2), "h100x8-nodes2", layers=6)
  assert plan.mesh_shape == MeshShape("stage:4;data:2;model:2")
  assert plan.training.pipeline.pipeline.split == (2, 1, 1, 2) or sum(
      plan.training.pipeline.pipeline.split) == 6
  # 8 devices: the other axes shrink first, the 4 stages stay.
  assert run_pipelined.scale_down(plan, 8) == MeshShape(
      "stage:4;data:1;model:2")
  # 2 devices: two stages, the 6 layers split again over them.
  two = run_pipelined.scale_down(plan, 2)
  assert two == MeshShape("stage:2;data:1;model:1")
  cut = run_pipelined.scaled_plan(plan, two, plan.topology)
  assert cut.training.pipeline.pipeline.split == (3, 3)
  assert cut.training.pipeline.idle_chips == 14
  with pytest.raises(PlanError, match="needs at least 2 devices"):
    run_pipelined.scale_down(plan, 1)


def test_run_a_padded_pipelined_plan(tmp_path, capsys):
  # 13 sequences on 8 chips (two 4-GPU nodes): PP 2 x DP 4 pads 3 rows to
  # whole microbatches; the plan records them, and run masks them out of
  # the loss as the lowering does (mesh_tf.training.padding).
  from costmodels.topology import gpu_cluster
  cfg = mtf.models.get_config("transformer_tiny", layers=2, batch=13)
  topo = gpu_cluster("a100", nodes=2, gpus_per_node=4)
  price = price_layout(cfg, topo, PipelineLayout(1, 2, 4))
  assert price.padded_sequences == 3
  plan = pipelined.plan_of_price(
      price, cfg, topo, "transformer_tiny",
      {**SOURCE, "overrides": {"layers": 2, "batch": 13}})
  assert plan.training.pipeline.padded_rows == 3
  path = plan.save(str(tmp_path / "padded.json"))
  assert mtf.load_plan(path) == plan
  assert main(["run", path, "--eager", "--warmup", "1", "--steps", "1",
               "-f", "json"]) == 0
  rep = json.loads(capsys.readouterr().out)
  assert rep["mesh"] == "stage:2;data:4;model:1"
  assert rep["loss_went_down"]
  assert rep["decisions"]["pipeline"]["padding"] == {
      "dim": "batch", "real_size": 13, "padded_size": 16}
