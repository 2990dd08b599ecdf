"""One default path for the API and the CLI (autolayout.default_search,
issue 14 item 4): ``mtf.auto_layout`` with the model's ``config`` answers a
training step that fits no layout with training decisions, exactly as a
bare ``mtf-layout solve`` does, and without ``config`` it still raises."""

import json
import math

import pytest

import mesh_tf as mtf
from autolayout import default_search
from autolayout.cli import main
from autolayout.cli.models import load_model
from autolayout.errors import InfeasibleLayoutError
from mesh_tf.core.errors import InvalidArgumentError

MESH, TOPOLOGY = "x:8", "dgx-h100"
KIB = 1024


@pytest.fixture(scope="module")
def model():
  # The CLI's own loader, so that the API and the CLI see one graph.
  return load_model("transformer_tiny", {"layers": 1, "batch": 1}, None)


def test_api_and_cli_fall_back_alike(model, capsys):
  # The smallest peak of the step as built, rounded down to a KiB: no
  # layout of the float32 step fits, the bf16 step does.
  with pytest.raises(InfeasibleLayoutError) as e:
    mtf.auto_layout(model.graph, MESH, model.outputs, topology=TOPOLOGY,
                    memory_budget="1KiB")
  kib = (e.value.min_peak_bytes - 1) // KIB
  budget = f"{kib}KiB"
  with pytest.raises(InfeasibleLayoutError, match="smallest peak"):
    mtf.auto_layout(model.graph, MESH, model.outputs, topology=TOPOLOGY,
                    memory_budget=budget)
  r = mtf.auto_layout(model.graph, MESH, model.outputs, topology=TOPOLOGY,
                      memory_budget=budget, config=model.config)
  assert r.decisions is not None
  assert r.decisions.param_dtype == "bfloat16"
  assert r.peak_memory_bytes <= kib * KIB
  assert r.graph is not model.graph   # the step built for the decisions
  argv = ["solve", "-m", "transformer_tiny", "--set", "layers=1,batch=1",
          "-t", TOPOLOGY, "--mesh", MESH, "--memory-budget", budget, "-f",
          "json"]
  assert main(argv + ["--layout-only"]) == 3   # nothing fits as built
  capsys.readouterr()
  code = main(argv)
  out, err = capsys.readouterr()
  assert code == 0, err
  res = json.loads(out)["result"]
  assert res["training"]["decisions"] == r.decisions.as_dict()
  assert res["training"]["decisions"]["param_dtype"] == "bfloat16"
  assert res["memory"]["peak_bytes"] <= kib * KIB
  assert math.isclose(res["step_time_s"], r.step_time_s, rel_tol=1e-12)
  assert res["rules"] == str(r.rules)


def test_the_default_answer_says_what_it_searched(model):
  a = default_search.solve_default(model.graph, MESH, model.outputs,
                                   TOPOLOGY, config=model.config)
  assert not a.fell_back and a.meshes is None and a.decisions_tried == ()
  assert a.result.decisions is None   # it fits as built: no decisions
  with pytest.raises(InvalidArgumentError, match="tie_break"):
    default_search.solve_default(model.graph, None, model.outputs, TOPOLOGY,
                                 tie_break=("memory",))
