"""A pipelined schedule on devices that share a host's cores.

Logical CPU devices are not chips: TensorFlow runs the ready kernels of
every device of a process on one pool of threads over the host's cores.
Calibration measures how much slower each device computes when all ``N``
devices of the topology compute at once than when one computes alone:
the chip's ``shared_compute_factor`` ``f`` (1 for every preset: each GPU
or TPU has its own engine).  The host then delivers the compute of

    ``C = N / f``

devices computing alone (its *effective cores*, in units of one device's
alone speed: about 1 on 8 logical devices of a 2-core machine, where one
device alone already keeps both cores busy with a large kernel).  Every
per-record price of a calibrated topology is the all-devices-at-once
time, so it is right when every device computes.

A pipeline does not keep every device busy: while a stage waits in the
fill or the drain (or behind a slower stage), its devices have no ready
kernel and leave their share of the cores to the stages that compute.  So
when ``a`` of the ``N`` devices compute, each runs at

    ``min(1, C / a)`` of its alone speed = ``min(f, N / a)`` times the
    all-at-once speed the price assumes,

faster than priced, but never faster than alone, and never more work per
second than the host has cores for.  With the pipeline's ``p`` stages of
``N / p`` devices each, ``k`` active stages run ``min(f, p / k)`` times the
priced speed.  :func:`schedule_time` runs the schedule's steps (each
stage's forward and backward passes in its schedule's order, each after
the steps whose results it needs, then the stage's once-per-step work: its
update and gradient reduction) as a fluid: between two step ends the
active stages progress at that speed.  The step then takes between the
schedule's critical path at the speed one stage alone gets and the total
work over the host's cores (``sum of every stage's work / p`` at the
priced speed), whichever binds: where ``f >= p`` (one device alone keeps
the cores as busy as all of them) the stages never leave a core idle, and
the step is its total work over the cores whatever the bubble.

Example (2 stages, 1 microbatch, forward 1 s, backward 2 s on each,
``f = 4``): each step runs alone, twice the priced speed, 3 s in all
where the bubble formula says 6:
  >>> from mesh_tf.pipeline import Pipeline
  >>> schedule_time(Pipeline("stage", 2, 1, 2), (1.0, 1.0), (2.0, 2.0),
  ...               (0.0, 0.0), 4.0)
  3.0
"""

from mesh_tf.core.errors import MtfError
from mesh_tf.pipeline.schedule import FORWARD, inputs_of, stage_steps

__all__ = ["effective_cores", "schedule_time", "shares_cores",
           "stage_speedup"]


def shares_cores(factor):
  """Whether devices with ``shared_compute_factor`` ``factor`` share a
  host's cores (their price then follows :func:`schedule_time`)."""
  return factor > 1.0


def effective_cores(factor, devices):
  """``devices / factor``: the compute of the host, in devices computing
  alone, of ``devices`` devices whose ``shared_compute_factor`` is
  ``factor``.

  Example:
    >>> effective_cores(4.0, 8)
    2.0
  """
  if factor <= 0 or devices < 1:
    raise MtfError(f"shared_compute_factor={factor} over devices={devices}:"
                   " give a positive factor and at least one device")
  return devices / factor


def stage_speedup(active, stages, factor):
  """How many times the all-devices price each of ``active`` computing
  stages (of ``stages``, equal device counts) runs: ``min(factor, stages /
  active)``, and 1 where devices do not share cores.

  Example:
    >>> [stage_speedup(k, 8, 4.0) for k in (1, 2, 4, 8)]
    [4.0, 4.0, 2.0, 1.0]
  """
  if not shares_cores(factor):
    return 1.0
  return min(factor, stages / active)


def schedule_time(pipeline, forward_s, backward_s, finish_s, factor):
  """Seconds of ``pipeline``'s schedule on stages that share a host's
  cores (see the module docstring).

  Args:
    pipeline: a :class:`mesh_tf.pipeline.Pipeline`.
    forward_s, backward_s: per virtual stage ``j = chunk * p + stage``,
      the seconds of one microbatch's forward (backward) pass through it,
      its sends included, at the all-devices price.
    finish_s: per stage, its once-per-step work after its last backward
      (update, gradient reduction), at the same price.
    factor: the chip's ``shared_compute_factor``.

  Returns:
    The time from the first forward to the last stage's finish.

  Example (8 stages, 2 microbatches, ``f = 8``: the host runs any one
  stage 8 times as fast as when all compute, so the stages share the
  cores whatever the bubble: 8 stages x 2 microbatches x 3 s / 8):
    >>> from mesh_tf.pipeline import Pipeline
    >>> schedule_time(Pipeline("stage", 8, 2, 8), (1.0,) * 8, (2.0,) * 8,
    ...               (0.0,) * 8, 8.0)
    6.0
  """
  p = pipeline.stages
  queues = [list(steps) + [None] for steps in stage_steps(pipeline)]

  def work(step, stage):
    if step is None:
      return finish_s[stage]
    j = pipeline.virtual_stage(step.stage, step.chunk)
    return (forward_s if step.phase == FORWARD else backward_s)[j]
  heads = [0] * p
  left = [work(q[0], s) for s, q in enumerate(queues)]
  done, now = set(), 0.0
  while any(h < len(q) for h, q in zip(heads, queues)):
    active = [s for s in range(p) if heads[s] < len(queues[s])
              and (queues[s][heads[s]] is None
                   or all(d in done for d in
                          inputs_of(pipeline, queues[s][heads[s]])))]
    if not active:
      raise MtfError(f"schedule {pipeline.schedule.value} of {p} stages "
                     "deadlocks; use another schedule or microbatch count")
    rate = stage_speedup(len(active), p, factor)
    first = min(left[s] for s in active)
    now += max(0.0, first) / rate
    for s in active:
      if left[s] <= first:
        done.add(queues[s][heads[s]])
        heads[s] += 1
        if heads[s] < len(queues[s]):
          left[s] = work(queues[s][heads[s]], s)
      else:
        left[s] -= first
  return now
