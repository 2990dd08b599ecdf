"""The CLI's defaults answer the user's question: the training step (or the
forward pass with --forward, said in the header), the best mesh shape when
none is given (physically named axes, the shapes tried listed), gradient
syncs hidden under the backward pass (--no-overlap exposes them), and the
API shares those defaults."""

import contextlib
import io
import json

import autolayout
import costmodels
from autolayout import cli
from autolayout.cli.models import load_model

TOPO = "tpu-v5e-2x4"
MODEL = ["--model", "transformer_tiny", "--topology", TOPO]


def _json(*argv):
  buf = io.StringIO()
  with contextlib.redirect_stdout(buf):
    assert cli.main([*argv, "--format", "json"]) == 0
  return json.loads(buf.getvalue())


def _table(*argv):
  buf = io.StringIO()
  with contextlib.redirect_stdout(buf):
    assert cli.main(list(argv)) == 0
  return buf.getvalue()


def test_solve_without_a_mesh_searches_mesh_shapes_and_says_so():
  data = _json("solve", *MODEL)
  assert data["question"] == "train"
  tried = data["meshes_tried"]
  assert {r["mesh"] for r in tried} == {"chips:8", "ici_x:2;ici_y:4", "ici_xy:4;ici_y:2"}
  steps = [r["step_time_s"] for r in tried]
  assert data["result"]["step_time_s"] == min(steps)
  assert data["result"]["mesh"] == tried[0]["mesh"]
  # The API answers the same question the same way.
  model = load_model("transformer_tiny")
  r = autolayout.auto_layout(model.graph, None, model.outputs, TOPO)
  assert r.step_time_s == data["result"]["step_time_s"]
  assert str(r.rules) == data["result"]["rules"]
  out = _table("solve", *MODEL)
  assert "question: the training step" in out
  assert "Mesh shapes tried" in out and "best of 3 shapes tried" in out
  assert "hidden" in out


def test_forward_and_train_flags():
  fwd = _json("solve", *MODEL, "--mesh", "x:2;y:4", "--forward")
  train = _json("solve", *MODEL, "--mesh", "x:2;y:4", "--train")
  assert fwd["question"] == "forward" and train["question"] == "train"
  assert "forward" in fwd["model"]["description"]
  assert fwd["model"]["ops"] < train["model"]["ops"]
  assert fwd["meshes_tried"] is None
  assert "question: the forward pass" in _table("solve", *MODEL, "--mesh",
                                                "x:2;y:4", "--forward")


def test_no_overlap_gives_the_conservative_figure():
  mesh = "x:2;y:4"
  on = _json("solve", *MODEL, "--mesh", mesh)["result"]
  off = _json("solve", *MODEL, "--mesh", mesh, "--no-overlap")["result"]
  assert on["overlap"] and not off["overlap"]
  assert off["hidden_comm_time_s"] == 0.0
  assert on["step_time_s"] <= off["step_time_s"]
  model = load_model("transformer_tiny")
  report = costmodels.evaluate(model.graph, mesh, off["rules"], TOPO,
                               outputs=model.outputs, overlap=False)
  assert off["step_time_s"] == report.step_time_s
  assert off["comm_time_s"] == report.total_comm_time_s
  report = costmodels.evaluate(model.graph, mesh, on["rules"], TOPO,
                               outputs=model.outputs)
  assert on["hidden_comm_time_by_axis_s"] == report.hidden_comm_time_by_axis
  assert "every collective exposed" in _table("solve", *MODEL, "--mesh",
                                              mesh, "--no-overlap")
