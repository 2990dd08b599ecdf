"""diff(plan_a, plan_b) and the warm re-solve from a previous plan."""

import math

import pytest

import costmodels
import mesh_tf as mtf
from mesh_tf import models
from mesh_tf.core.layout import LayoutRules
from autolayout.plans import diff as plan_diff
from tests.autolayout.plans.export import plans


def _eval(graph, outputs, mesh, rules, topo="dgx-h100"):
  return costmodels.evaluate(graph, mesh, rules, topo, outputs=outputs)


def test_each_rule_is_priced_alone_with_evaluate():
  m, outputs = plans.tiny_model()
  outs = list(outputs.values())
  a, b = plans.make("megatron"), plans.make("2d")
  d = plan_diff.diff(a, b, m.graph, outs)
  rows = {r.name: r for r in d.rows}
  assert set(rows) == {"batch", "d_model"}
  assert (rows["batch"].a, rows["batch"].b) == ("data", None)
  # batch alone: A's rules without batch:data, minus A.
  base = _eval(m.graph, outs, "data:2;model:4", a.rules)
  alone = _eval(m.graph, outs, "data:2;model:4",
                "d_ff:model;heads:model")
  assert rows["batch"].delta.step_time_s == pytest.approx(
      alone.step_time_s - base.step_time_s, rel=1e-12)
  assert rows["batch"].delta.peak_memory_bytes == (
      alone.peak_memory_bytes - base.peak_memory_bytes)
  assert dict(rows["batch"].delta.comm_time_by_axis)["data"] == \
      pytest.approx(alone.comm_time_by_axis["data"]
                    - base.comm_time_by_axis["data"])
  # d_model:data alone clashes with batch:data on A's rules, so it is
  # priced on B's other rules, and says so.
  assert "priced on B's other rules" in rows["d_model"].note
  assert rows["d_model"].delta is not None
  final = _eval(m.graph, outs, "data:2;model:4", b.rules)
  assert d.total.step_time_s == pytest.approx(
      final.step_time_s - base.step_time_s)
  assert any("rules interact" in n for n in d.notes)
  text = str(d)
  assert "rule batch: data -> (not split)" in text and "comm data" in text
  df = d.to_dataframe()
  assert list(df["name"]) == ["batch", "d_model", "(all)"]
  assert "comm_model_delta_s" in df.columns


def test_without_a_graph_only_stored_costs_and_decisions():
  a, b = plans.make("megatron"), plans.make("vocab")
  d = plan_diff.diff(a, b)
  assert not d.priced and all(r.delta is None for r in d.rows)
  assert d.total.step_time_s == pytest.approx(
      b.costs.step_time_s - a.costs.step_time_s)
  import dataclasses
  from autolayout.training.families import TrainingDecisions
  c = dataclasses.replace(b, training=TrainingDecisions(microbatches=4))
  rows = plan_diff.diff(a, c).rows
  # A plan without decisions is the step as built (one microbatch).
  assert [(r.kind, r.name, r.a, r.b) for r in rows if r.kind == "decision"
          ] == [("decision", "microbatches", 1, 4)]


def test_a_on_another_mesh_drops_rules_and_says_why():
  m, outputs = plans.tiny_model()
  a, b = plans.make("megatron"), plans.make("small")
  d = plan_diff.diff(a, b, m.graph, list(outputs.values()))
  kinds = {(r.kind, r.name) for r in d.rows}
  assert ("mesh", "mesh") in kinds and ("topology", "topology") in kinds
  assert "A is priced on B's mesh and topology" in d.notes
  kept, dropped = plan_diff.project_rules(
      LayoutRules([("d_ff", "model"), ("batch", "rows"), ("nope", "model")]),
      m.graph, b.mesh_shape)
  assert kept == LayoutRules([("d_ff", "model")])
  assert [x[:2] for x in dropped] == [("batch", "rows"), ("nope", "model")]
  _, dropped = plan_diff.project_rules(LayoutRules([("heads", "x")]),
                                       m.graph, mtf.convert_to_shape("x:8"))
  assert "x=8 does not divide heads=4" in dropped[0][2]


def test_a_plan_for_an_older_graph_is_priced_on_the_new_one():
  m, outputs = plans.tiny_model()
  old = plans.make("megatron")
  big = models.build_model("transformer_tiny", d_ff=64)
  new = mtf.auto_layout(big.graph, "data:2;model:4",
                        [big.outputs["logits"], big.loss], "dgx-h100",
                        memory_budget=40000).to_plan("transformer_tiny")
  d = plan_diff.diff(old, new, big.graph, [big.outputs["logits"], big.loss])
  assert any("A was made for another graph (dim d_ff=32 -> 64)" in n
             for n in d.notes)
  assert d.a_costs.step_time_s == pytest.approx(_eval(
      big.graph, [big.outputs["logits"], big.loss], "data:2;model:4",
      old.rules).step_time_s)


def test_warm_resolve_uses_the_hint_and_reports_changes(tmp_path):
  m, outputs = plans.tiny_model()
  outs = list(outputs.values())
  old = mtf.auto_layout(m.graph, "data:2;model:4", outs, "dgx-h100",
                        memory_budget=20000, time_limit_s=30)
  old.save(tmp_path / "old.json", name="transformer_tiny")
  # Same problem: the hint is the optimum, nothing changes.
  same = mtf.auto_layout(m.graph, "data:2;model:4", outs, "dgx-h100",
                         memory_budget=20000, hint=tmp_path / "old.json")
  assert same.rules == old.rules
  rep = same.hint_report
  assert rep.kept == old.rules and not rep.skipped and not rep.why
  # A bigger model on a mesh with other axis names: every rule is skipped.
  big = models.build_model("transformer_tiny", d_ff=64, batch=16)
  bouts = [big.outputs["logits"], big.loss]
  r = mtf.auto_layout(big.graph, "x:8", bouts, "dgx-h100",
                      memory_budget=60000, hint=old.to_plan())
  assert len(r.hint_report.skipped) == len(old.rules)
  assert all("is not in the mesh" in why for _, _, why in
             r.hint_report.skipped)
  # The same mesh, a tighter budget for the bigger model: the answer moves,
  # the report names each moved rule and the cost terms that moved.
  cold = mtf.auto_layout(big.graph, "data:2;model:4", bouts, "dgx-h100",
                         memory_budget=24000)
  warm = mtf.auto_layout(big.graph, "data:2;model:4", bouts, "dgx-h100",
                         memory_budget=24000, hint=old.to_plan())
  assert warm.rules == cold.rules  # a hint never changes the optimum
  assert math.isclose(warm.step_time_s, cold.step_time_s)
  rep = warm.hint_report
  assert rep.hinted == old.rules
  assert rep.changes is not None and rep.changes.rows
  text = str(rep)
  assert "together: step" in text and "comm data" in text
  assert "over the memory budget of 24000 bytes" in text


def test_changes_valid_only_together_are_priced_as_one():
  m, outputs = plans.tiny_model()
  outs = list(outputs.values())
  a, b = plans.make("megatron"), plans.make("vocab")
  d = plan_diff.diff(a, b, m.graph, outs)
  alone = [r.name for r in d.rows if r.kind == "rule" and r.delta is None]
  assert alone == ["batch", "d_ff", "heads"]
  group = [r for r in d.rows if r.kind == "rules"]
  assert [r.name for r in group] == ["batch+d_ff+heads"]
  moved = _eval(m.graph, outs, "data:2;model:4",
                "batch:model;d_ff:data;heads:data")
  base = _eval(m.graph, outs, "data:2;model:4", a.rules)
  assert group[0].delta.step_time_s == pytest.approx(
      moved.step_time_s - base.step_time_s)
  assert group[0].a == "batch:data;d_ff:model;heads:model"
