"""Pipeline schedules as data: the ordered steps of every stage.

A :class:`Step` is one forward (``"F"``) or backward (``"B"``) pass of one
microbatch through one chunk of one stage.  :func:`stage_steps` gives each
stage's steps in the order the schedule runs them; :func:`simulate` runs
them with unit-time steps, each as soon as its stage is free and its input
has arrived, which both checks that the order cannot deadlock and gives one
global order (the one the lowering builds the step in); and
:func:`max_in_flight` says how many microbatch activations each stage holds
at most.

Example:
  >>> from mesh_tf.pipeline.spec import Pipeline
  >>> p = Pipeline("stage", stages=2, microbatches=3, layers=2)
  >>> [f"{s.phase}{s.microbatch}" for s in stage_steps(p)[0]]
  ['F0', 'F1', 'B0', 'F2', 'B1', 'B2']
  >>> max_in_flight(p)
  (2, 1)
"""

from typing import NamedTuple, Tuple

from mesh_tf.pipeline.spec import PipelineScheduleError, Schedule

__all__ = ["Step", "inputs_of", "max_in_flight", "schedule_order", "simulate",
           "stage_steps"]

FORWARD, BACKWARD = "F", "B"


class Step(NamedTuple):
  """One pass of ``microbatch`` through ``chunk`` of ``stage``."""
  stage: int
  chunk: int
  microbatch: int
  phase: str  # "F" or "B"

  def __repr__(self):
    return f"{self.phase}(s{self.stage},c{self.chunk},mb{self.microbatch})"


def _gpipe(pipeline, stage):
  m = pipeline.microbatches
  # Backward in reverse: the last stage starts it on the microbatch whose
  # forward it has just finished.
  return ([Step(stage, 0, i, FORWARD) for i in range(m)]
          + [Step(stage, 0, i, BACKWARD) for i in reversed(range(m))])


def _one_f_one_b(pipeline, stage):
  p, m = pipeline.stages, pipeline.microbatches
  warmup = min(p - stage - 1, m)
  steps = [Step(stage, 0, i, FORWARD) for i in range(warmup)]
  for i in range(m - warmup):
    steps += [Step(stage, 0, warmup + i, FORWARD), Step(stage, 0, i, BACKWARD)]
  steps += [Step(stage, 0, i, BACKWARD) for i in range(m - warmup, m)]
  return steps


def _interleaved(pipeline, stage):
  # Megatron-LM's interleaved 1F1B: virtual microbatch k runs chunk
  # (k // p) % v (reversed in backward) on microbatch (k // pv) * p + k % p.
  p, v, m = pipeline.stages, pipeline.chunks, pipeline.microbatches
  total = m * v

  def step(k, phase):
    chunk = (k % (p * v)) // p
    if phase == BACKWARD:
      chunk = v - 1 - chunk
    return Step(stage, chunk, (k // (p * v)) * p + k % p, phase)
  # Megatron-LM runs every forward first when m == p, for its blocking
  # sends; here sends do not block, and the warm-up formula holds (it
  # keeps fewer microbatches in flight, in the same time).
  warmup = min((p - stage - 1) * 2 + (v - 1) * p, total)
  steps = [step(k, FORWARD) for k in range(warmup)]
  for k in range(total - warmup):
    steps += [step(warmup + k, FORWARD), step(k, BACKWARD)]
  steps += [step(k, BACKWARD) for k in range(total - warmup, total)]
  return steps


_ORDERS = {Schedule.GPIPE: _gpipe, Schedule.ONE_F_ONE_B: _one_f_one_b,
           Schedule.INTERLEAVED_1F1B: _interleaved}


def stage_steps(pipeline):
  """Each stage's steps, in the order its schedule runs them.

  Returns:
    A tuple, one per stage, of tuples of :class:`Step`; every stage runs
    one forward and one backward of every (chunk, microbatch).
  """
  return tuple(tuple(_ORDERS[pipeline.schedule](pipeline, s))
               for s in range(pipeline.stages))


def inputs_of(pipeline, step):
  """The steps whose results ``step`` needs (on any stage)."""
  j = pipeline.virtual_stage(step.stage, step.chunk)
  last = pipeline.virtual_stages - 1
  if step.phase == FORWARD:
    if j == 0:
      return ()
    s, c = pipeline.location(j - 1)
    return (Step(s, c, step.microbatch, FORWARD),)
  own = Step(step.stage, step.chunk, step.microbatch, FORWARD)
  if j == last:
    return (own,)
  s, c = pipeline.location(j + 1)
  return (own, Step(s, c, step.microbatch, BACKWARD))


def simulate(pipeline):
  """Runs the schedule with unit-time steps.

  At each tick every stage runs its next step if the steps it needs ran at
  an earlier tick.

  Returns:
    A tuple of ``(tick, Step)`` in the order they run (by tick, then
    stage): a global order that respects every dependency.

  Raises:
    PipelineScheduleError: if the stages' orders deadlock.
  """
  queues = [list(steps) for steps in stage_steps(pipeline)]
  heads = [0] * pipeline.stages
  done, out, tick = set(), [], 0
  while any(h < len(q) for h, q in zip(heads, queues)):
    ready = []
    for s, q in enumerate(queues):
      if heads[s] < len(q) and all(d in done
                                   for d in inputs_of(pipeline, q[heads[s]])):
        ready.append(q[heads[s]])
        heads[s] += 1
    if not ready:
      waiting = [q[h] for h, q in zip(heads, queues) if h < len(q)]
      raise PipelineScheduleError(
          f"schedule {pipeline.schedule.value} on axis {pipeline.axis}="
          f"{pipeline.stages} deadlocks: {waiting} wait on each other; use "
          "another schedule or microbatch count")
    done.update(ready)
    out.extend((tick, step) for step in ready)
    tick += 1
  return tuple(out)


def schedule_order(pipeline):
  """The steps of all stages in one order that respects every dependency
  (the order of :func:`simulate`)."""
  return tuple(step for _, step in simulate(pipeline))


def max_in_flight(pipeline) -> Tuple[int, ...]:
  """Per stage, the most (chunk, microbatch) forwards whose backward has
  not run yet: the microbatch activations the stage holds at its peak
  (GPipe: ``m``; 1F1B: ``min(p - s, m)``)."""
  out = []
  for steps in stage_steps(pipeline):
    held = peak = 0
    for step in steps:
      held += 1 if step.phase == FORWARD else -1
      peak = max(peak, held)
    out.append(peak)
  return tuple(out)
