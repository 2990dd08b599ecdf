"""Plan files: round trips, atomic writes, and clear errors for stale or
malformed plans."""

import json
import os

import pytest

import costmodels
import mesh_tf as mtf
from mesh_tf import models
from autolayout.plans import plan as plan_lib
from autolayout.errors import PlanFormatError, PlanMismatchError
from costmodels import topology_json
from tests.autolayout.plans.export import plans


@pytest.fixture(scope="module")
def solved():
  m, outputs = plans.tiny_model()
  r = mtf.auto_layout(m.graph, "data:2;model:4", list(outputs.values()),
                      "dgx-h100", memory_budget=20000, time_limit_s=30)
  return m, r


def test_save_and_load_round_trip(solved, tmp_path):
  m, r = solved
  path = tmp_path / "plan.json"
  p = r.save(path, name="transformer_tiny", output_names=["logits", "loss"])
  q = mtf.load_plan(path, m.graph)
  assert q == p and hash(q) == hash(p)
  assert q.rules == r.rules and q.mesh_shape == r.mesh_shape
  assert q.topology == costmodels.get_topology("dgx-h100")
  assert q.solver.status == "optimal" and q.solver.gap == 0.0
  assert q.solver.memory_budget_bytes == 20000
  assert q.costs.step_time_s == r.step_time_s
  assert dict(q.costs.memory_by_category) == r.report.memory_by_category
  assert dict(q.costs.comm_time_by_axis) == pytest.approx(
      r.report.comm_time_by_axis)
  assert q.mesh_tf_version == mtf.__version__
  assert q.model.dim_sizes()["d_ff"] == 32
  assert q.model.variable("layer_0/ffn/wi/kernel").dims == (
      ("d_model", 16), ("d_ff", 32))
  assert {"logits", "loss", "inputs"} <= {a.name for a in q.model.activations}
  data = json.loads(path.read_text())
  assert data["format"] == "mesh-tf-plan" and data["schema_version"] == 1
  assert data["topology"] == {"preset": "dgx-h100"}
  assert data["decisions"] == {}
  assert data["model"]["fingerprint"].startswith("sha256:")
  # The costs re-evaluate to what the plan predicted.
  assert q.evaluate(m.graph, list(r.outputs)).step_time_s == pytest.approx(
      q.costs.step_time_s, rel=1e-12)


def test_plan_is_frozen(solved):
  p = solved[1].to_plan()
  with pytest.raises(AttributeError):
    p.rules = None


def test_writes_are_atomic(solved, tmp_path):
  path = tmp_path / "plan.json"
  path.write_text("old contents")
  solved[1].save(path)
  assert json.loads(path.read_text())["format"] == "mesh-tf-plan"
  assert os.listdir(tmp_path) == ["plan.json"]  # no temporary file left
  with pytest.raises(PlanFormatError, match="cannot write plan file"):
    solved[1].save(tmp_path / "missing" / "plan.json")


def test_embedded_topology_round_trips(tmp_path):
  m, outputs = plans.tiny_model()
  topo = costmodels.gpu_cluster("h100", nodes=1, gpus_per_node=4,
                                name="my-box")
  p = plan_lib.make_plan(m.graph, "data:2;model:2", "batch:data", topo,
                         outputs=outputs, name="transformer_tiny")
  p.save(tmp_path / "p.json")
  data = json.loads((tmp_path / "p.json").read_text())
  assert set(data["topology"]) == {"embedded"}
  q = mtf.load_plan(tmp_path / "p.json", m.graph)
  assert q.topology == topo and q.topology_preset is None
  assert topology_json.topology_from_dict(
      topology_json.topology_to_dict(topo)) == topo


def test_changed_dim_size_is_named(solved, tmp_path):
  solved[1].save(tmp_path / "p.json", name="transformer_tiny")
  bigger = models.build_model("transformer_tiny", d_ff=64)
  with pytest.raises(PlanMismatchError, match=r"dim d_ff=32 -> 64") as e:
    mtf.load_plan(tmp_path / "p.json", bigger.graph)
  assert e.value.changes == ("dim d_ff=32 -> 64",)


def test_missing_variable_is_named(solved, tmp_path):
  solved[1].save(tmp_path / "p.json", name="transformer_tiny")
  shallower = models.build_model("transformer_tiny", layers=1)
  with pytest.raises(PlanMismatchError,
                     match=r"missing variable layer_1/attention/q") as e:
    mtf.load_plan(tmp_path / "p.json", shallower.graph)
  assert "missing variable layer_1/ffn/wo/kernel" in e.value.changes


def test_plan_for_another_model(solved, tmp_path):
  solved[1].save(tmp_path / "p.json", name="transformer_tiny")
  with pytest.raises(PlanMismatchError, match="shares no variable"):
    mtf.load_plan(tmp_path / "p.json", models.build_model("mlp_tiny").graph)
  with pytest.raises(PlanMismatchError,
                     match="is for model 'transformer_tiny', not 'mlp_tiny'"):
    mtf.load_plan(tmp_path / "p.json", name="mlp_tiny")


def _write(tmp_path, solved, edit):
  data = solved[1].to_plan("transformer_tiny").to_json_dict()
  edit(data)
  path = tmp_path / "p.json"
  path.write_text(json.dumps(data))
  return path


@pytest.mark.parametrize("edit, match", [
    (lambda d: d.update(schema_version=2), "schema_version 2 is not 1.*"
     "upgrade mesh-tf"),
    (lambda d: d.update(format="other"), "not a mesh-tf plan"),
    (lambda d: d["rules"].update(batch="rows"),
     "rule batch:rows names mesh axis 'rows'.*use one of"),
    (lambda d: d["rules"].update(nope="data"), "names dim 'nope'"),
    (lambda d: d.update(decisions={"microbatches": 4,
                                   "pipeline_stages": 2}),
     "decision family 'pipeline_stages', which this mesh-tf does not "
     "know.*newer"),
    (lambda d: d.update(decisions={"microbatches": 0}),
     "decisions.microbatches is 0; use an integer >= 1"),
    (lambda d: d.update(decisions={"zero_stage": {"ffn": 5}}),
     "decisions.zero_stage .*stage 5"),
    (lambda d: d["mesh"].update(shape=[2]), "one positive integer size"),
    (lambda d: d["model"].pop("fingerprint"), "missing field "
     "'model.fingerprint'"),
    (lambda d: d["costs"].update(step_time_s="fast"),
     "'costs.step_time_s' must be"),
    (lambda d: d.update(topology={"preset": "tpu-v9-1"}),
     "unknown topology"),
    (lambda d: d.update(topology={"embedded": {"name": "x"}}),
     "embedded topology must have exactly the keys"),
])
def test_malformed_files_raise_plan_format_errors(solved, tmp_path, edit,
                                                  match):
  path = _write(tmp_path, solved, edit)
  with pytest.raises(PlanFormatError, match=match):
    mtf.load_plan(path)


def test_bad_json_and_missing_file(tmp_path):
  path = tmp_path / "p.json"
  path.write_text("{not json")
  with pytest.raises(PlanFormatError, match="is not valid JSON.*line 1"):
    mtf.load_plan(path)
  with pytest.raises(PlanFormatError, match="cannot read plan file"):
    mtf.load_plan(tmp_path / "absent.json")


def test_fingerprint_is_structural():
  a = models.build_model("transformer_tiny").graph
  b = models.build_model("transformer_tiny").graph
  c = models.build_model("transformer_tiny", activation="gelu").graph
  from autolayout.plans import identity as plan_identity
  assert plan_identity.fingerprint(a) == plan_identity.fingerprint(b)
  assert plan_identity.fingerprint(a) != plan_identity.fingerprint(c)
  with pytest.raises(PlanMismatchError, match="the ops changed"):
    plan_identity.check(plan_identity.model_identity(a, "t"),
                        plan_identity.model_identity(c, "t"))


def test_the_published_schema_is_the_one_files_are_validated_with(solved):
  import jsonschema
  from autolayout.plans import file as plan_file
  root = os.path.dirname(os.path.dirname(os.path.dirname(
      os.path.dirname(os.path.abspath(__file__)))))
  with open(os.path.join(root, "docs", "plan_file.schema.json"),
            encoding="utf-8") as f:
    published = json.load(f)
  assert published == plan_file.json_schema()
  jsonschema.Draft202012Validator.check_schema(published)
  data = solved[1].to_plan("transformer_tiny").to_json_dict()
  jsonschema.validate(data, published)
  assert plan_file.schema_errors(data) == []


@pytest.mark.parametrize("edit, match", [
    (lambda d: d["solver"].update(gap="small"),
     "field 'solver.gap' must be number/null, got 'small'"),
    (lambda d: d["model"]["variables"]["embedding/weights"].pop("dtype"),
     "missing field 'model.variables.embedding/weights.dtype'"),
    (lambda d: d["mesh"].update(shape=[2, 0]),
     "field 'mesh.shape.1' is 0; it must be >= 1"),
    (lambda d: d.update(topology={"preset": "dgx-h100", "x": 1}),
     "field 'topology' does not match the schema.*plan_file.schema.json"),
])
def test_schema_errors_name_the_field_and_the_fix(solved, tmp_path, edit,
                                                   match):
  path = _write(tmp_path, solved, edit)
  with pytest.raises(PlanFormatError, match=match):
    mtf.load_plan(path)
