"""Solving training candidates one at a time (autolayout.training.
candidate_search): the memory screen skips programs that cannot fit, and
what one call proved (``known``) is reused by the next without changing
the answer (the README plan example's mesh and budget)."""

import math

import pytest

import costmodels
from autolayout.errors import InfeasibleLayoutError
from autolayout.search.solve import DEFAULT_NUM_WORKERS, DEFAULT_SEED
from autolayout.training import candidate_search, decisions
from mesh_tf import models

MESH, BUDGET = "data:2;model:4", 20000
TOPOLOGY = costmodels.get_topology("dgx-h100")
CONFIG = models.get_config("transformer_tiny")


def _pairs(k, stages=(0, 1, 2, 3)):
  return [decisions.TrainingDecisions("bfloat16", s, r, k)
          for s in stages for r in decisions.recompute_choices(2)]


class _Solver:
  """Real candidates' programs and memory screen, counting the builds."""

  def __init__(self):
    self.candidates = decisions.Candidates(CONFIG)
    self.built = []

  def problem_of(self, d):
    self.built.append(d)
    return self.candidates.get(d)[1].problem(MESH, TOPOLOGY, BUDGET)

  def may_fit(self, d):
    return self.candidates.get(d)[1].may_fit(MESH, TOPOLOGY, BUDGET)

  def solve(self, pairs, screen=True, known=None):
    return candidate_search.solve_in_turn(
        pairs, self.problem_of, BUDGET, math.inf, DEFAULT_NUM_WORKERS,
        DEFAULT_SEED, may_fit=self.may_fit if screen else None, known=known)


def test_screen_skips_every_program_when_no_layout_fits_memory():
  s = _Solver()
  known = {}
  with pytest.raises(InfeasibleLayoutError):
    s.solve(_pairs(1), known=known)
  assert s.built == []
  assert set(known) == set(_pairs(1))
  assert all(hit.above == math.inf for hit in known.values())


def test_screen_and_known_answers_leave_the_answer_as_it_was():
  pairs = _pairs(2, stages=(2, 3))   # 3 fits with 1 or 2 recomputed
  plain = _Solver()
  i, want = plain.solve(pairs, screen=False)
  assert len(plain.built) == len(pairs)
  s = _Solver()
  known = {}
  j, got = s.solve(pairs, known=known)
  assert (j, got.rules, got.report.step_time_s) == (
      i, want.rules, want.report.step_time_s)
  assert got.status == want.status == "optimal"
  assert 0 < len(s.built) < len(pairs)
  # Asked again (as the descent asks for its starting plan), nothing is
  # built and the answer is the same.
  s.built.clear()
  k, again = s.solve(pairs, known=known)
  assert s.built == []
  assert (k, again.rules, again.report.step_time_s, again.status) == (
      i, want.rules, want.report.step_time_s, "optimal")
