"""The price of a pipelined training step, from the work of one stage.

A pipelined step splits the ``L`` repeated layers of a model into ``p``
contiguous groups, one per *stage* (the coordinate of a mesh axis that
carries stages), optionally ``v`` *chunks* per stage (interleaving: stage
``i`` holds groups ``i, i + p, i + 2p, ...``), and runs ``m`` microbatches
through them.  This module prices such a step from :class:`StageWork`: the
per-device seconds and bytes of one layer, of the embedding (first stage)
and of the output layer and loss (last stage) for one microbatch, and of
the once-per-step work (optimizer update, data-parallel gradient
reduction).  :mod:`costmodels.stage_work` measures that work from the
ShapeMeshImpl trace of the stage's layers: the same trace the lowering
records, priced record by record as :func:`costmodels.evaluate` does.

**Step time.**  Each stage's time per microbatch is the sum of its layers'
work plus its extras (the first stage's embedding, the last stage's output
layer: *stage imbalance*) plus the point-to-point sends of its boundary
(an activation forward, its gradient back, once per chunk, priced on the
link of the stage axis).  The slowest stage sets the pace:

    ``steady = m * max_i t_i``
    ``bubble = steady * (p - 1) / (v * m)``       (fill and drain)
    ``step   = steady + bubble + step_work``

``step_work`` is the per-step work of the stage that has the most of it
(its layers' optimizer update and their exposed gradient reduction).
Costs that repeat per microbatch -- the gathers of ZeRO-3-sharded weights
before each microbatch's forward and backward, the tensor-parallel
all-reduces -- are in the per-microbatch work and so counted ``m`` times.

**Memory.**  A stage holds its layers' weights, gradients and optimizer
state, and the stashed activations of the microbatches in flight: GPipe
keeps all ``m``; 1F1B keeps up to ``p - i`` on stage ``i`` (``p`` on the
first); interleaved 1F1B keeps ``(p - i - 1) * 2 + (v - 1) * p + 1``
chunk-microbatches, each a ``1/v`` of the stage's layers (Narayanan et
al., 2021, section 2.2, and Megatron-LM's warm-up count), at most ``v * m``.

Example:
  >>> s = PipelineSchedule(stages=4, chunks=1, microbatches=8)
  >>> bubble_fraction(s)
  0.375
  >>> [inflight_microbatches(s, i) for i in range(4)]
  [4.0, 3.0, 2.0, 1.0]
"""

import math
from typing import NamedTuple, Tuple

from mesh_tf.core.errors import MtfError

SCHEDULES = ("gpipe", "1f1b", "interleaved")


class PipelineError(MtfError):
  """A pipeline configuration that cannot run (named, with the fix)."""


class PipelineSchedule(NamedTuple):
  """``stages`` (p), ``chunks`` per stage (v), ``microbatches`` (m) and
  the ``schedule`` (``"gpipe"``, ``"1f1b"`` or ``"interleaved"``)."""
  stages: int = 1
  chunks: int = 1
  microbatches: int = 1
  schedule: str = "1f1b"

  def check(self, layers=None):
    """``self`` if it can run (on ``layers`` repeated layers), else
    :class:`PipelineError` naming the value and the fix."""
    p, v, m = self.stages, self.chunks, self.microbatches
    for name, x in (("stages", p), ("chunks", v), ("microbatches", m)):
      if not isinstance(x, int) or x < 1:
        raise PipelineError(f"pipeline {name}={x!r} must be a positive "
                            "integer")
    if self.schedule not in SCHEDULES:
      raise PipelineError(f"pipeline schedule={self.schedule!r} is not one "
                          f"of {SCHEDULES}")
    if v > 1 and self.schedule != "interleaved":
      raise PipelineError(
          f"chunks={v} needs schedule='interleaved' (got "
          f"{self.schedule!r}); use chunks=1 for GPipe and 1F1B")
    if self.schedule == "interleaved" and p > 1 and m % p:
      raise PipelineError(
          f"the interleaved schedule runs microbatches in groups of "
          f"stages={p}, and microbatches={m} is not a multiple; use a "
          f"multiple of {p}")
    if layers is not None and layers < p * v:
      raise PipelineError(
          f"layers={layers} cannot fill stages={p} x chunks={v} groups; "
          f"use at most {layers} groups")
    return self


def bubble_fraction(schedule):
  """``(p - 1) / (v * m)``: the fill and drain, as a fraction of the
  steady time."""
  p, v, m = schedule.stages, schedule.chunks, schedule.microbatches
  return (p - 1) / (v * m)


def inflight_microbatches(schedule, stage=0):
  """Microbatches whose stashed activations stage ``stage`` holds at its
  peak, in units of one microbatch through all its layers (a float for
  interleaving: a chunk is ``1/v`` of them)."""
  p, v, m = schedule.stages, schedule.chunks, schedule.microbatches
  if not 0 <= stage < p:
    raise PipelineError(f"stage={stage} is not in [0, stages={p})")
  if schedule.schedule == "gpipe":
    return float(m)
  if schedule.schedule == "1f1b" or v == 1:
    return float(min(m, p - stage))
  warmup = (p - stage - 1) * 2 + (v - 1) * p + 1
  return min(v * m, warmup) / v


def split_layers(layers, groups, first_extra=0.0, last_extra=0.0,
                 layer_cost=1.0):
  """Layers per group (``groups`` contiguous groups of ``layers``) that
  minimise the slowest group's cost, when the first group also costs
  ``first_extra`` and the last ``last_extra`` (in units of
  ``layer_cost``); ties go to the most even split.

  Example:
    >>> split_layers(10, 4)
    (3, 3, 2, 2)
    >>> split_layers(10, 4, last_extra=2.0)
    (3, 3, 3, 1)
  """
  if groups < 1 or layers < groups:
    raise PipelineError(f"layers={layers} cannot fill {groups} groups; use "
                        f"at most {layers} groups")
  e0 = first_extra / layer_cost
  e1 = last_extra / layer_cost
  if groups == 1:
    return (layers,)

  def counts(bound):
    # Layers each group takes under ``bound`` (at least one).
    return (max(1, math.floor(bound - e0 + 1e-9)),
            max(0, math.floor(bound + 1e-9)),
            max(1, math.floor(bound - e1 + 1e-9)))

  def total(bound):
    a, mid, b = counts(bound)
    return a + b + (groups - 2) * max(1, mid)
  # Bisection on the slowest group's cost: the smallest bound whose fill
  # covers every layer.
  lo, hi = 0.0, layers + max(e0, e1) + 1
  for _ in range(60):
    bound = (lo + hi) / 2
    if total(bound) >= layers:
      hi = bound
    else:
      lo = bound
  a, mid, b = counts(hi)
  out = [a] + [max(1, mid)] * (groups - 2) + [b]
  # Take the surplus off the groups with the most cost, last first.
  extras = [e0] + [0.0] * (groups - 2) + [e1]
  surplus = sum(out) - layers
  while surplus > 0:
    order = sorted((i for i in range(groups) if out[i] > 1),
                   key=lambda i: (out[i] + extras[i], i), reverse=True)
    for i in order[:surplus]:
      out[i] -= 1
    surplus = sum(out) - layers
  return tuple(out)


class StageWork(NamedTuple):
  """Per-device work of one microbatch, and once per step, of one
  layer and of the model's ends (seconds and bytes).

  Attributes:
    layer_s: one layer, one microbatch: forward, recompute, backward and
      its exposed per-microbatch collectives (tensor-parallel all-reduces,
      gathers of sharded weights).
    first_s: the first stage's extra work per microbatch (embedding).
    last_s: the last stage's extra work per microbatch (output layer,
      loss).
    layer_step_s: one layer's once-per-step work (optimizer update).
    base_step_s: the ends' once-per-step work.
    layer_sync_s: one layer's exposed data-parallel gradient reduction.
    base_sync_s: the ends'.
    boundary_bytes: bytes one device sends across a stage boundary per
      microbatch and direction (the activation, or its gradient).
    layer_state_bytes: one layer's weights, gradients and optimizer state
      per device.
    base_state_bytes: the ends' (on a single stage).
    first_state_bytes: of those, what the first stage holds (the
      embedding's); None: half.
    last_state_bytes: what the last stage holds (the output layer's; a
      tied embedding is on both ends); None: half.
    layer_stash_bytes: activations one layer keeps per microbatch in
      flight (its input under full recompute).
    working_bytes: the peak working set of one microbatch's layer beyond
      the stash (its activations while it runs).
    flops: FLOPs per device of one layer and microbatch (for reports).
    layer_sync_bytes: gradient bytes per device one layer reduces over the
      data-parallel axes per step (:func:`costmodels.stage_work.price_sync`
      prices them for any data-parallel size).
    base_sync_bytes: the ends'.
  """
  layer_s: float
  first_s: float = 0.0
  last_s: float = 0.0
  layer_step_s: float = 0.0
  base_step_s: float = 0.0
  layer_sync_s: float = 0.0
  base_sync_s: float = 0.0
  boundary_bytes: int = 0
  layer_state_bytes: int = 0
  base_state_bytes: int = 0
  layer_stash_bytes: int = 0
  working_bytes: int = 0
  first_state_bytes: int = None
  last_state_bytes: int = None
  flops: float = 0.0
  layer_sync_bytes: int = 0
  base_sync_bytes: int = 0

  def end_share(self, stage, stages):
    """The part of the ends' per-step work and state on ``stage`` of
    ``stages``."""
    if stages == 1:
      return 1.0
    if stage not in (0, stages - 1) or not self.base_state_bytes:
      return 0.0 if stage not in (0, stages - 1) else 0.5
    held = self.first_state_bytes if stage == 0 else self.last_state_bytes
    return 0.5 if held is None else held / self.base_state_bytes


class PipelineCost(NamedTuple):
  """The priced pipelined step (seconds, bytes per device)."""
  schedule: PipelineSchedule
  layers_per_group: Tuple[int, ...]
  stage_times_s: Tuple[float, ...]
  boundary_s: float
  steady_s: float
  bubble_s: float
  step_work_s: float
  step_time_s: float
  stage_memory_bytes: Tuple[int, ...]

  @property
  def peak_memory_bytes(self):
    return max(self.stage_memory_bytes)

  @property
  def bubble_fraction(self):
    return self.bubble_s / self.steady_s if self.steady_s else 0.0


def boundary_time(nbytes, link):
  """Seconds of one point-to-point send of ``nbytes`` per device over
  ``link`` (a :class:`costmodels.LinkParams`-like value with
  ``bandwidth_bytes_per_s`` and ``latency_s``); 0 for no bytes."""
  if not nbytes:
    return 0.0
  return link.latency_s + nbytes / link.bandwidth_bytes_per_s


def price_pipeline(work, schedule, layers, link=None, split=None,
                   gather_s=0.0):
  """The :class:`PipelineCost` of ``layers`` repeated layers of ``work``
  under ``schedule``, the stage boundary on ``link`` (None: no stage
  axis, one stage).  ``gather_s`` is added to each send: where the
  boundary activation is replicated over a tensor-parallel group, each
  member sends a ``1/t`` slice (``work.boundary_bytes`` is that slice) and
  the receivers all-gather it on their own link (Narayanan et al., 2021,
  section 4.1, the scatter/gather optimization).

  ``split`` is the layers per group (``p * v`` groups, stage ``i`` holding
  groups ``i, i + p, ...``); default: :func:`split_layers`, which balances
  the ends' extra work.

  Example:
    >>> w = StageWork(layer_s=1.0, first_s=0.5, last_s=1.0)
    >>> c = price_pipeline(w, PipelineSchedule(2, 1, 4), 4)
    >>> c.layers_per_group, c.stage_times_s, c.step_time_s
    ((2, 2), (2.5, 3.0), 15.0)
  """
  schedule = PipelineSchedule(*schedule).check(layers)
  p, v, m = schedule.stages, schedule.chunks, schedule.microbatches
  groups = p * v
  if split is None:
    split = split_layers(layers, groups, work.first_s, work.last_s,
                         work.layer_s or 1.0)
  split = tuple(int(n) for n in split)
  if len(split) != groups or sum(split) != layers or min(split) < 1:
    raise PipelineError(
        f"layer split {split} must give each of stages={p} x chunks={v} "
        f"groups at least one layer and add up to layers={layers}")
  per_stage = [sum(split[g] for g in range(i, groups, p)) for i in range(p)]
  hop = boundary_time(work.boundary_bytes, link) + gather_s if p > 1 else 0.0
  # Each chunk of a microbatch receives its input and sends its output
  # forward, and the gradients back: 2 sends per boundary crossed.
  sends = 2 * v if p > 1 else 0
  times = []
  for i, n in enumerate(per_stage):
    t = n * work.layer_s + sends * hop
    if i == 0:
      t += work.first_s
    if i == p - 1:
      t += work.last_s
    times.append(t)
  steady = m * max(times)
  bubble = steady * bubble_fraction(schedule)
  step_work = max(
      n * (work.layer_step_s + work.layer_sync_s)
      + (work.base_step_s + work.base_sync_s) * work.end_share(i, p)
      for i, n in enumerate(per_stage))
  memory = []
  for i, n in enumerate(per_stage):
    base = int(work.base_state_bytes * work.end_share(i, p))
    stash = inflight_microbatches(schedule, i) * n * work.layer_stash_bytes
    memory.append(int(n * work.layer_state_bytes + base + stash
                      + work.working_bytes))
  return PipelineCost(schedule, split, tuple(times), sends * hop, steady,
                      bubble, step_work, steady + bubble + step_work,
                      tuple(memory))
