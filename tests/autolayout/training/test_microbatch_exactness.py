"""With microbatches, the program's own value of a layout (its tables and
overlap terms) equals costmodels.evaluate's step and communication time:
per-microbatch work counts k times in the overlap placements (the segments
of compute, the buckets of gradient syncs and the exposed collectives) as
it does in the factor counts and in the evaluated trace."""

import math

import pytest

import mesh_tf as mtf
import costmodels
from autolayout.training import decisions
from autolayout.search.solve import LayoutSearch, table_values
from mesh_tf import models

TOPOLOGY = "dgx-h100"
CONFIG = models.get_config("transformer_tiny", layers=1, batch=16)
RULES = ["", "batch:x", "batch:x;d_ff:y", "heads:y;d_ff:y", "batch:y;heads:x"]


@pytest.fixture(scope="module", params=[("float32", 0), ("bfloat16", 0),
                                        ("float32", 2)])
def training(request):
  # ZeRO 0: the microbatches' summed gradients are reduced once per step,
  # after the last microbatch, on the critical path (float32: straight
  # from the lazy sums; bfloat16: through the deferred casts); ZeRO 2:
  # each microbatch's gradients are reduce-scattered onto the shard, as
  # gradient syncs that overlap.
  dtype, zero = request.param
  return decisions.build_training(
      CONFIG, decisions.TrainingDecisions(dtype, zero, 0, 2))


@pytest.mark.parametrize("overlap", [False, True])
def test_program_value_equals_evaluate_with_two_microbatches(training,
                                                             overlap):
  mesh = "x:2;y:4"
  assert training.plan.repeats(training.update.micro[0].name) == 2
  search = LayoutSearch(training.graph, microbatches=training.plan)
  problem = search.problem(mesh, TOPOLOGY, overlap=overlap)
  hidden = 0.0
  for rules in RULES:
    r = costmodels.evaluate(training.graph, mesh, rules, TOPOLOGY,
                            outputs=list(search.outputs),
                            microbatches=training.plan, overlap=overlap)
    t, c = table_values(problem, mtf.convert_to_layout_rules(rules))
    assert math.isclose(t, r.step_time_s, rel_tol=1e-9), (rules, t, r)
    assert math.isclose(c, r.comm_time_s, rel_tol=1e-9, abs_tol=1e-18), (
        rules, c, r.comm_time_s)
    assert r.comm_time_s > 0 or not rules
    hidden += r.overlap.hidden_comm_s
  if overlap and training.decisions.zero_stage:
    assert hidden > 0  # the overlap terms are exercised, not only plain comm
  if not training.decisions.zero_stage:
    assert hidden == 0   # reduced once per step, after the microbatches


def test_solve_validates_with_two_microbatches(training):
  # LayoutSearch.solve re-checks its answer against costmodels.evaluate.
  search = LayoutSearch(training.graph, microbatches=training.plan)
  for overlap in (False, True):
    res = search.solve("x:2;y:4", TOPOLOGY, time_limit_s=30, overlap=overlap)
    assert res.status == "optimal"
    assert math.isclose(res.objective_value, res.report.step_time_s,
                        rel_tol=1e-9)


@pytest.mark.parametrize("overlap", [False, True])
def test_training_search_passes_overlap_on(overlap):
  # --no-overlap of `mtf-layout solve --train` reaches the layout program
  # and the report it is checked against.
  plan = decisions.search_training(
      CONFIG, "x:8", TOPOLOGY, param_dtype="float32", time_limit_s=30,
      fixed={"zero_stage": 0, "recompute": 0, "microbatches": 2},
      overlap=overlap)
  assert plan.result.report.overlap.enabled is overlap
