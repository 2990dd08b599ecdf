"""The variables' floor (autolayout.search.infeasible.check_state_fits): every
variable is live for the whole step and held by some device, so no layout,
ZeRO stage, recompute count or microbatch count brings a device's peak
below their bytes spread evenly.  Below that floor the training search
says so at once instead of walking every k and mesh shape (GPT-3 175B on
8 chips: 60-140 s before, a few seconds now)."""

import math

import pytest

import mesh_tf as mtf
from autolayout.training import decisions
from autolayout.search import infeasible
from autolayout.meshes import training_meshes
from autolayout.errors import InfeasibleLayoutError
from mesh_tf import models
from mesh_tf.core import dtypes
from mesh_tf.core.mesh_shape import convert_to_mesh_shape
from tests.autolayout import graphs
from tests.autolayout.cli import cli_contract

MESH, TOPOLOGY = "rows:2;cols:4", "dgx-h100"
CONFIG = models.get_config("transformer_tiny", layers=1, batch=16)


def test_floor_is_every_variables_bytes_spread_evenly():
  training = decisions.build_training(CONFIG, decisions.TrainingDecisions(
      zero_stage=3, microbatches=2))
  graph = training.graph
  names = {v.name for v in graph.all_variables}
  assert any("adam" in n for n in names)   # optimizer slots count too
  total = sum(v.outputs[0].shape.size * dtypes.size_of(v.outputs[0].dtype)
              for v in graph.all_variables)
  assert infeasible.state_floor_bytes(graph, 8) == (total,
                                                    math.ceil(total / 8))


def test_floor_is_below_the_peak_of_every_layout():
  g, outs = graphs.mlp()
  _, floor = infeasible.state_floor_bytes(g, 8)
  peaks = [r.peak_memory_bytes for _, _, r in graphs.brute_force(g, MESH,
                                                                 outs)]
  assert len(peaks) > 10 and min(peaks) >= floor


def test_a_budget_below_the_floor_is_refused_with_the_devices_needed():
  g, _ = graphs.mlp()
  total, floor = infeasible.state_floor_bytes(g, 8)
  mesh = convert_to_mesh_shape(MESH)
  infeasible.check_state_fits(g, mesh, floor)     # at the floor: searched
  infeasible.check_state_fits(g, mesh, None)      # no budget
  with pytest.raises(InfeasibleLayoutError) as e:
    infeasible.check_state_fits(g, mesh, floor - 1, "the MLP")
  err = e.value
  assert isinstance(err, mtf.MtfError)
  assert (err.floor_bytes, err.num_devices, err.memory_budget) == (
      floor, 8, floor - 1)
  assert err.min_devices == math.ceil(total / (floor - 1)) == 9
  assert err.min_peak_bytes is None
  assert "the MLP on mesh rows:2,cols:4" in str(err)
  assert f"at least {floor} bytes" in str(err)
  assert "use at least 9 devices" in str(err)


def test_training_search_stops_at_the_floor_before_any_program():
  training = decisions.build_training(CONFIG, decisions.TrainingDecisions())
  _, floor = infeasible.state_floor_bytes(training.graph, 8)
  solved = []
  with pytest.raises(InfeasibleLayoutError) as e:
    decisions.search_training(CONFIG, MESH, TOPOLOGY, memory_budget=floor - 1,
                              progress=lambda d, t: solved.append(d))
  assert e.value.floor_bytes == floor and solved == []
  with pytest.raises(InfeasibleLayoutError) as e:
    decisions.search_training(CONFIG, MESH, TOPOLOGY, memory_budget=floor - 1,
                              exhaustive=True,
                              progress=lambda d, t: solved.append(d))
  assert e.value.floor_bytes == floor and solved == []
  with pytest.raises(InfeasibleLayoutError) as e:
    training_meshes.search_training_meshes(
        CONFIG, "tpu-v5e-2x4", memory_budget=floor - 1,
        progress=lambda *a: solved.append(a))
  # The first shape's screen found it; the other shapes were not screened.
  assert e.value.floor_bytes == floor and len(solved) == 1


def test_cli_says_how_many_devices_gpt3_needs():
  r = cli_contract.run(["solve", "-m", "gpt3_175b", "-t", "tpu-v5e-2x4"])
  assert r.code == 3, r.err
  assert cli_contract.problems(r) == []
  message, hint = r.err.strip().splitlines()[-2:]
  assert "variables (parameters and optimizer state) alone need at least " \
         "243.9 GiB" in message
  assert "over all 8 devices" in message
  assert hint == ("hint: use --memory-budget 244GiB or more (or none), at "
                  "least 138 devices, or a smaller model")
