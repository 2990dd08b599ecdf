"""A pipelined plan is a plan file every reader takes (issue 43 items 1-5
for the pipeline decisions of issue 45): ``solve --pipeline --save``
writes it; ``mtf.load_plan``, ``report -l @plan`` (and ``--html``),
``solve --hint``, ``diff`` and ``export`` read it; a tampered pipeline
field is named.  The plans are of the tiny Transformer (4 layers) on one
8-GPU node, the pipelined space restricted to 2 stages: each command runs
in a second or two."""

import copy
import json

import pytest

import mesh_tf as mtf
from autolayout.cli import main
from autolayout.errors import PlanFormatError, PlanMismatchError
from autolayout.plans import pipelined
from autolayout.plans.decisions import load_plan
from autolayout.training.pipeline import PipelineDecision

TINY = ["-m", "transformer_tiny", "--set", "layers=4", "-t", "dgx-h100"]


def _run(capsys, *argv):
  code = main(list(argv))
  out, err = capsys.readouterr()
  return code, out, err


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
  """``solve --pipeline --pipeline-stages 2 --save``, and its JSON."""
  path = tmp_path_factory.mktemp("pipelined") / "a.json"
  import contextlib
  import io
  buf = io.StringIO()
  with contextlib.redirect_stdout(buf):
    assert main(["solve", *TINY, "--pipeline", "--pipeline-stages", "2",
                 "--save", str(path), "-f", "json"]) == 0
  return str(path), json.loads(buf.getvalue())


def test_solve_saves_the_pipelined_plan_with_the_costs_it_printed(saved):
  path, answer = saved
  assert answer["plan_file"] == path
  plan = load_plan(path)
  assert pipelined.is_pipelined(plan)
  d = plan.training
  assert isinstance(d.pipeline, PipelineDecision)
  assert d.pipeline.pipeline.stages == 2 and d.pipeline.idle_chips == 0
  assert plan.mesh_shape.dimension_names == ["stage", "data", "model"]
  # The file holds the costs the search printed, and the bubble.
  assert plan.costs.step_time_s == pytest.approx(
      answer["plans"][0]["step_s"], rel=1e-12)
  terms = plan.costs.pipeline_terms
  assert terms["bubble_fraction"] == pytest.approx(
      answer["plans"][0]["bubble"])
  assert plan.solver.status == "optimal" and plan.solver.gap == 0.0
  # mtf.load_plan rebuilds the pipelined step and checks its fingerprint;
  # it also takes the zoo model the stages split.
  cfg = mtf.models.get_config("transformer_tiny", layers=4)
  assert mtf.load_plan(path, cfg.build().graph) == plan


def test_round_trip_save_load_report_gives_the_same_costs(saved, capsys):
  path, _ = saved
  plan = load_plan(path)
  code, out, _ = _run(capsys, "report", "-l", f"@{path}", "-f", "json")
  assert code == 0
  rep = json.loads(out)
  assert rep["result"]["step_time_s"] == plan.costs.step_time_s
  assert rep["stored"] == plan.costs.as_dict()
  assert rep["result"]["bubble_time_s"] == plan.costs.pipeline_terms[
      "bubble_s"]
  assert [s["in_flight"] for s in rep["stages"]] == list(
      plan.costs.pipeline_terms["in_flight"])
  code, out, _ = _run(capsys, "report", "-l", f"@{path}")
  assert code == 0
  for needle in ("bubble (", "boundary sends", "in flight", "the same"):
    assert needle in out


def test_report_html_shows_the_bubble_in_the_time_decomposition(
    saved, tmp_path, capsys):
  path, _ = saved
  page = tmp_path / "p.html"
  code, _, _ = _run(capsys, "report", "-l", f"@{path}", "--html", str(page))
  assert code == 0
  text = page.read_text()
  assert "bubble" in text and "compute + exposed comm stage + bubble" in (
      text.replace("step = ", ""))


def test_hint_starts_the_pipelined_search_from_the_plan(saved, capsys):
  path, _ = saved
  code, out, _ = _run(capsys, "solve", "--hint", path, "-f", "json")
  assert code == 0
  ans = json.loads(out)
  plan, hint = ans["plans"]
  assert hint["which"] == "hint" and plan["step_s"] <= hint["step_s"]
  assert hint["step_s"] == pytest.approx(load_plan(path).costs.step_time_s)


def _pair(tmp_path, **change):
  """Plan A (2 stages, 1F1B) and B, A with ``change`` to its layout."""
  from autolayout.training.pipeline_price import PipelineLayout, price_layout
  cfg = mtf.models.get_config("transformer_tiny", layers=4)
  src = {"model": "transformer_tiny", "overrides": {"layers": 4},
         "train": True}
  paths = []
  for name, lay in (("a", PipelineLayout(2, 2, 2, zero=1)),
                    ("b", PipelineLayout(2, 2, 2, zero=1)._replace(
                        **change))):
    plan = pipelined.plan_of_price(price_layout(cfg, "dgx-h100", lay), cfg,
                                   "dgx-h100", "transformer_tiny", src)
    paths.append(plan.save(str(tmp_path / f"{name}.json")))
  return paths


def test_diff_of_a_plan_with_itself_is_empty(saved, capsys):
  path, _ = saved
  code, out, _ = _run(capsys, "diff", path, path, "-f", "json")
  assert code == 0
  d = json.loads(out)
  assert d["rows"] == [] and d["total"]["step_time_s"] == 0.0


@pytest.mark.parametrize("change", [dict(chunks=2), dict(microbatch=2)])
def test_diff_prices_a_chunks_or_microbatches_change(tmp_path, capsys,
                                                     change):
  a, b = _pair(tmp_path, **change)
  code, out, _ = _run(capsys, "diff", a, b, "-f", "json")
  assert code == 0
  d = json.loads(out)
  (row,) = d["rows"]
  assert row["kind"] == "decision" and row["name"] == "pipeline"
  key = "chunks" if "chunks" in change else "microbatches"
  assert row["a"][key] != row["b"][key]
  # Only the pipeline differs, so its delta alone is the whole change.
  assert row["delta"]["step_time_s"] == pytest.approx(
      d["total"]["step_time_s"], rel=1e-9)
  assert row["delta"]["step_time_s"] != 0.0
  assert row["delta"]["pipeline"]["bubble_s"] == pytest.approx(
      d["b"]["pipeline"]["bubble_s"] - d["a"]["pipeline"]["bubble_s"])


@pytest.mark.parametrize("to", ["torch", "jax", "dtensor"])
def test_export_carries_the_pipeline_and_lists_what_it_cannot_say(
    tmp_path, capsys, to):
  _, b = _pair(tmp_path, chunks=2)
  code, out, _ = _run(capsys, "export", b, "--to", to)
  assert code == 0
  spec = json.loads(out)
  pipe = spec["pipeline"]
  assert pipe["not_expressible"]
  if to == "torch":
    assert pipe["schedule_class"] == ("torch.distributed.pipelining."
                                      "ScheduleInterleaved1F1B")
    assert pipe["n_microbatches"] == 4 and pipe["num_stages"] == 4
    assert [[s["stage_index"] for s in r["stages"]]
            for r in pipe["ranks"]] == [[0, 2], [1, 3]]
    assert any("tied" in m for m in pipe["not_expressible"])
    assert any("scatter/gather" in m for m in pipe["not_expressible"])
    # The real class names of the installed torch.
    torch_pipe = pytest.importorskip("torch.distributed.pipelining")
    assert hasattr(torch_pipe, pipe["schedule_class"].rsplit(".", 1)[1])
  else:
    assert pipe["param_stages"]["layer_0/attention/q"] == [0]
    assert pipe["param_stages"]["embedding/weights"] == [0, 1]
  assert spec["training"]["zero_stage"] == 1


def _tampered(saved, tmp_path, fn):
  path, _ = saved
  data = json.load(open(path, encoding="utf-8"))
  data = copy.deepcopy(data)
  fn(data["decisions"]["pipeline"])
  out = tmp_path / "t.json"
  out.write_text(json.dumps(data))
  return str(out)


@pytest.mark.parametrize("fn, error, needle", [
    (lambda p: p.update(idle_chips=3), PlanFormatError,
     r"decisions.pipeline.idle_chips=3, but mesh .* leaves 0 .*write "
     r"idle_chips=0"),
    (lambda p: p.update(stages=1), PlanFormatError,
     r"decisions.pipeline: stages=1 .* is no pipeline"),
    (lambda p: p.update(split=[3, 1]), PlanMismatchError,
     r"decisions.pipeline \(its schedule, split or chunks\) is not the "
     r"pipeline the plan was made and priced for"),
    (lambda p: p.update(schedule="gpipe"), PlanMismatchError,
     r"schedule=gpipe"),
    (lambda p: p.update(padding={"dim": "batch", "real_size": 8,
                                 "padded_size": 9}), PlanFormatError,
     r"decisions.pipeline.padding adds 1 rows"),
    (lambda p: p.update(padding={"dim": "batch", "real_size": 7,
                                 "padded_size": 8}), PlanFormatError,
     r"decisions.pipeline.padding pads batch=7, but the model's batch is 8"),
    (lambda p: p.update(padding={"dim": "batch", "real_size": 8,
                                 "padded_size": 4}), PlanFormatError,
     r"pipeline.padding: padding batch=8 to 4"),
    (lambda p: p.pop("split"), PlanFormatError,
     r"missing field 'decisions.pipeline.split'"),
])
def test_a_tampered_pipeline_field_is_named(saved, tmp_path, fn, error,
                                            needle):
  with pytest.raises(error, match=needle):
    load_plan(_tampered(saved, tmp_path, fn))


def test_cli_readers_refuse_a_tampered_plan_in_two_lines(saved, tmp_path,
                                                        capsys):
  bad = _tampered(saved, tmp_path, lambda p: p.update(idle_chips=5))
  for argv in (["report", "-l", f"@{bad}"], ["diff", bad, bad],
               ["export", bad, "--to", "jax"], ["solve", "--hint", bad]):
    code, _, err = _run(capsys, *argv)
    assert code == 2, argv
    assert "decisions.pipeline.idle_chips=5" in err and "hint:" in err


def test_a_newer_family_is_still_refused_by_name(saved, tmp_path):
  path, _ = saved
  data = json.load(open(path, encoding="utf-8"))
  data["decisions"]["expert_parallel"] = 4
  bad = tmp_path / "n.json"
  bad.write_text(json.dumps(data))
  with pytest.raises(PlanFormatError, match="decision family "
                     "'expert_parallel', which this mesh-tf does not know"):
    load_plan(str(bad))


def test_a_one_stage_answer_saves_as_an_unpipelined_training_plan(
    saved, tmp_path, capsys):
  # The tiny Transformer's pipelined-space answer on one node is one stage
  # of data parallelism (no pipeline): --save writes the unpipelined
  # training plan of that layout, which every reader takes.
  path = str(tmp_path / "one.json")
  code, out, _ = _run(capsys, "solve", "-m", "transformer_tiny", "-t",
                      "dgx-h100", "--pipeline", "--save", path)
  assert code == 0
  assert "one stage, so an unpipelined training plan" in " ".join(out.split())
  plan = load_plan(path)
  assert not pipelined.is_pipelined(plan) and plan.training is not None
  assert "stage" not in plan.mesh_shape.dimension_names
  code, out, _ = _run(capsys, "report", "-l", f"@{path}", "-f", "json")
  assert code == 0
  assert json.loads(out)["result"]["step_time_s"] == pytest.approx(
      plan.costs.step_time_s, rel=1e-9)
  # diff across the two cost models: each side repriced, the pipeline row
  # says why it is not priced alone.
  code, out, _ = _run(capsys, "diff", path, saved[0], "-f", "json")
  assert code == 0
  d = json.loads(out)
  row = next(r for r in d["rows"] if r["name"] == "pipeline")
  assert row["a"] == "none" and row["delta"] is None
  assert "A has no pipeline" in row["note"]
  assert d["b"]["step_time_s"] == load_plan(saved[0]).costs.step_time_s
