"""The values the HTML report draws (autolayout.render.views): from real
cost reports of the tiny Transformer (its forward step), no browser."""

import doctest

import numpy as np
import pytest

import costmodels
from autolayout import render
from autolayout.cli import output as out
from autolayout.render import views
from mesh_tf.core.layout import LayoutRules
from mesh_tf.models.configs import build_model

MESH, TOPO = "data:2;model:4", "dgx-h100"
RULES = "batch:data;d_ff:model;vocab:model"


@pytest.fixture(scope="module")
def model():
  return build_model("transformer_tiny")


@pytest.fixture(scope="module")
def report(model):
  return costmodels.evaluate(model.graph, MESH, RULES, TOPO,
                             outputs=model.outputs)


def test_doctests():
  for mod in (render, views):
    assert doctest.testmod(mod).failed == 0


def test_time_terms_are_the_json_decomposition(report):
  rec = out.layout_record(report)
  terms = views.time_terms(rec)
  in_step = [t.seconds for t in terms if t.in_step]
  assert sum(in_step) == pytest.approx(rec["step_time_s"], rel=1e-9)
  assert [t.name for t in terms if not t.in_step] == ["hidden comm"]
  assert {t.name for t in terms} >= {"exposed comm data",
                                     "exposed comm model", "compute"}


def test_memory_curve_sums_to_the_profile_and_keeps_the_peak(report):
  curve = views.memory_curve(report)
  total = np.sum([v for _, v in curve.by_category], axis=0)
  np.testing.assert_array_equal(
      total, np.asarray(report.memory_by_step)[list(curve.steps)])
  assert curve.peak_bytes == report.peak_memory_bytes
  assert dict(curve.most)["params"] >= report.memory_by_category["params"]
  # Downsampled to 50 points, the peak step is still drawn at its height.
  small = views.memory_curve(report, most=50)
  assert len(small.steps) <= 51 and report.peak_step in small.steps
  i = small.steps.index(report.peak_step)
  assert sum(v[i] for _, v in small.by_category) == report.peak_memory_bytes


def test_rule_counterfactuals_equal_pricing_without_the_rule(model, report):
  cf = views.rule_counterfactuals(report, model.outputs)
  assert [c.what for c in cf] == ["batch:data", "d_ff:model", "vocab:model"]
  pairs = list(report.layout_rules.pairs)
  for i, c in enumerate(cf):
    want = costmodels.evaluate(model.graph, MESH,
                               LayoutRules(pairs[:i] + pairs[i + 1:]), TOPO,
                               outputs=model.outputs)
    assert c.step_time_s == want.step_time_s
    assert c.peak_memory_bytes == want.peak_memory_bytes


def test_decision_counterfactuals_pick_the_fastest_other_value():
  training = {"decisions": {"zero_stage": 3, "recompute": 1},
              "candidates": [
                  {"decisions": {"zero_stage": 3, "recompute": 1},
                   "step_time_s": 1.0},
                  {"decisions": {"zero_stage": 2, "recompute": 1},
                   "step_time_s": 1.5},
                  {"decisions": {"zero_stage": 1, "recompute": 1},
                   "step_time_s": 1.2},
                  {"decisions": {"zero_stage": 0, "recompute": 1},
                   "step_time_s": None}]}
  cf = {c.what: c for c in views.decision_counterfactuals(training)}
  assert cf["zero_stage=3"].otherwise == "zero_stage=1"
  assert cf["zero_stage=3"].step_time_s == 1.2
  assert cf["recompute=1"].step_time_s is None   # never priced otherwise
  assert views.decision_counterfactuals(None) == ()
