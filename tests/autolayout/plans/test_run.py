"""``mtf-layout run``: a training plan runs for real on 8 logical CPU
devices, its per-device state is what the plan predicted, its loss goes
down; a plan for more devices is refused naming how many it needs, and
``--scale-down`` runs it on a smaller mesh with the same rules."""

import json

import pytest

from mesh_tf.core.mesh_shape import convert_to_mesh_shape as MeshShape
from autolayout.cli import main
from autolayout.errors import PlanError
from autolayout.plans import decisions as plan_decisions
from autolayout.plans import run as run_lib
from tests.autolayout.cli.test_cli import assert_clean_error


@pytest.mark.parametrize("mesh, n, want", [
    ("data:4;model:4", 8, "data:4;model:2"),
    ("data:4;model:4", 4, "data:2;model:2"),
    ("x:6;y:2", 4, "x:2;y:2"),
    ("x:2;y:4", 8, "x:2;y:4"),
    ("x:8", 1, "x:1"),
])
def test_scale_down_keeps_axis_names_and_divides_sizes(mesh, n, want):
  mesh = MeshShape(mesh)
  got = run_lib.scale_down(mesh, n)
  assert got == MeshShape(want)
  assert got.size <= n
  for a, b in zip(mesh.dims, got.dims):
    assert a.name == b.name and a.size % b.size == 0


@pytest.fixture(scope="module")
def big_plan(tmp_path_factory):
  """A training plan for 16 devices (ZeRO 3 on the ffn and attention
  weights, one recomputed block, two microbatches)."""
  path = str(tmp_path_factory.mktemp("run") / "p16.json")
  assert main(["solve", "-m", "transformer_tiny", "-t", "h100x8-nodes2",
               "--mesh", "data:4;model:4", "--train", "--memory-budget",
               "70000", "--zero-stage", "ffn=3,attention=3,embedding=1",
               "--recompute", "1", "--microbatches", "2", "--save", path,
               "-f", "json"]) == 0
  return path


def test_a_plan_for_more_devices_is_refused_with_the_number(big_plan,
                                                             capsys):
  capsys.readouterr()
  plan = plan_decisions.load_plan(big_plan)
  with pytest.raises(PlanError, match="needs 16 devices, and 8 are at hand"):
    run_lib.check_devices(plan, 8)
  code = main(["run", big_plan])
  _, err = capsys.readouterr()
  assert_clean_error(err, code, 2, "it needs 16 devices, and 8 are at hand",
                     "--scale-down")


def test_run_scaled_down_measures_what_the_plan_predicts(big_plan, capsys):
  capsys.readouterr()
  code = main(["run", big_plan, "--scale-down", "--warmup", "1", "--steps",
               "2", "-f", "json"])
  out, err = capsys.readouterr()
  assert code == 0, err
  rep = json.loads(out)
  assert rep["mesh"] == "data:4;model:2" and len(rep["devices"]) == 8
  assert rep["predicted_on"] == "h100x8-nodes2 cut to 8 chips"
  assert rep["decisions"]["microbatches"] == 2
  # Every device holds exactly the bytes of state the cost model traced.
  assert set(rep["measured_state_bytes"]) == {rep["predicted_state_bytes"]}
  assert rep["loss_went_down"] and len(rep["losses"]) == 3
  assert rep["measured_step_time_s"] > 0 and rep["predicted_step_time_s"] > 0
  assert rep["measured_peak_bytes"] is None  # CPU: no allocator statistics


def test_run_refuses_a_forward_plan(tmp_path, capsys):
  path = str(tmp_path / "fwd.json")
  assert main(["solve", "-m", "transformer_tiny", "--forward", "-t",
               "dgx-h100", "--mesh", "data:2;model:4", "--save", path,
               "-f", "json"]) == 0
  capsys.readouterr()
  code = main(["run", path])
  _, err = capsys.readouterr()
  assert_clean_error(err, code, 2, "forward pass", "training step")


def test_gpus_are_refused_where_tensorflow_sees_none(big_plan, capsys):
  # The --gpus path on a machine without GPUs (CI's tensorflow-cpu): a
  # clean two-line error naming the option, and one for both options.
  from mesh_tf.lowering.lazy_tf import load_tensorflow
  if load_tensorflow().config.list_logical_devices("GPU"):
    pytest.skip("a GPU is at hand: `mtf-layout run --gpus` runs there")
  capsys.readouterr()
  code = main(["run", big_plan, "--gpus", "--scale-down"])
  _, err = capsys.readouterr()
  assert_clean_error(err, code, 2, "--gpus", "no GPU", "drop --gpus")
  code = main(["run", big_plan, "--gpus", "--cpu-devices", "8"])
  _, err = capsys.readouterr()
  assert_clean_error(err, code, 2, "not both", "--cpu-devices")
