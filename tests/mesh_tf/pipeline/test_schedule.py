"""Schedules as data: each stage's order, a deadlock-free global order,
and the activations in flight."""

import itertools

import pytest

from mesh_tf.pipeline import (Pipeline, max_in_flight, schedule_order,
                              simulate, stage_steps)

CASES = [(p, m, s, v) for p, m in itertools.product((2, 4), (2, 4, 8))
         for s, v in (("gpipe", 1), ("1f1b", 1), ("interleaved_1f1b", 2))
         if s != "interleaved_1f1b" or m % p == 0]


def _pipe(p, m, schedule, v):
  return Pipeline("stage", p, m, p * v, chunks=v, schedule=schedule)


@pytest.mark.parametrize("p,m,schedule,v", CASES)
def test_every_step_runs_once_after_its_inputs(p, m, schedule, v):
  pipe = _pipe(p, m, schedule, v)
  order = schedule_order(pipe)
  assert len(order) == len(set(order)) == 2 * p * v * m
  pos = {s: i for i, s in enumerate(order)}
  for step in order:
    j = pipe.virtual_stage(step.stage, step.chunk)
    if step.phase == "F" and j > 0:
      s, c = pipe.location(j - 1)
      assert pos[(s, c, step.microbatch, "F")] < pos[step]
    if step.phase == "B":
      assert pos[(step.stage, step.chunk, step.microbatch, "F")] < pos[step]
      if j < p * v - 1:
        s, c = pipe.location(j + 1)
        assert pos[(s, c, step.microbatch, "B")] < pos[step]
  # Each stage's steps keep the stage's own order.
  for s, steps in enumerate(stage_steps(pipe)):
    assert [x for x in order if x.stage == s] == list(steps)


@pytest.mark.parametrize("p,m,schedule,v", CASES)
def test_unit_time_makespan_shows_the_bubble(p, m, schedule, v):
  # With equal step times a step takes 2 (m v + p - 1) ticks: the bubble
  # is (p - 1) / (v m) of the steady time.
  ticks = simulate(_pipe(p, m, schedule, v))[-1][0] + 1
  assert ticks == 2 * (m * v + p - 1)


def test_in_flight_gpipe_holds_every_microbatch():
  assert max_in_flight(_pipe(4, 8, "gpipe", 1)) == (8, 8, 8, 8)


def test_in_flight_1f1b_holds_at_most_p_minus_s():
  assert max_in_flight(_pipe(4, 8, "1f1b", 1)) == (4, 3, 2, 1)
  assert max_in_flight(_pipe(4, 2, "1f1b", 1)) == (2, 2, 2, 1)


def test_in_flight_interleaved_counts_chunks():
  # Megatron's warmup (p - s - 1) * 2 + (v - 1) * p, plus the steady one.
  assert max_in_flight(_pipe(4, 8, "interleaved_1f1b", 2)) == (11, 9, 7, 5)
  # ... at most every chunk of every microbatch.
  assert max_in_flight(_pipe(4, 4, "interleaved_1f1b", 2)) == (8, 8, 7, 5)


def test_1f1b_order_of_the_first_stage():
  steps = stage_steps(_pipe(2, 3, "1f1b", 1))[0]
  assert [f"{s.phase}{s.microbatch}" for s in steps] == [
      "F0", "F1", "B0", "F2", "B1", "B2"]
