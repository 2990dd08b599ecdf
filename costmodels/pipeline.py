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
state, the compute copies of its weights it keeps all step
(:func:`held_copy_bytes`), and the stashed activations of the
microbatches in flight: GPipe
keeps all ``m``; 1F1B keeps up to ``p - i`` on stage ``i`` (``p`` on the
first); interleaved 1F1B keeps ``(p - i - 1) * 2 + (v - 1) * p + 1``
chunk-microbatches, each a ``1/v`` of the stage's layers (Narayanan et
al., 2021, section 2.2, and Megatron-LM's warm-up count), at most ``v * m``.

The pipeline itself is :class:`mesh_tf.pipeline.Pipeline`, the value the
lowering runs (stages, microbatches, layers, chunks, schedule, split), and
the bytes each stage sends are :func:`mesh_tf.pipeline.
expected_boundary_bytes`, which the tests hold equal to the send and
receive records of the lowering.  :func:`inflight_microbatches` is the
closed form of :func:`mesh_tf.pipeline.max_in_flight` (which simulates the
schedule, ``O(p m v)``, too slow to run for every point of a search); a
test holds the two equal.

Example:
  >>> from mesh_tf.pipeline import Pipeline
  >>> s = Pipeline("stage", stages=4, microbatches=8, layers=8)
  >>> bubble_fraction(s)
  0.375
  >>> [inflight_microbatches(s, i) for i in range(4)]
  [4, 3, 2, 1]
"""

import math
from typing import NamedTuple, Tuple

from costmodels import shared_cores
from mesh_tf.pipeline.costs import expected_boundary_bytes
from mesh_tf.pipeline.spec import PipelineSplitError, Schedule


def bubble_fraction(pipeline):
  """``(p - 1) / (v * m)``: the fill and drain, as a fraction of the
  steady time (0 without a pipeline)."""
  if pipeline is None:
    return 0.0
  p, v, m = pipeline.stages, pipeline.chunks, pipeline.microbatches
  return (p - 1) / (v * m)


def inflight_microbatches(pipeline, stage=0):
  """The most (chunk, microbatch) forwards stage ``stage`` holds whose
  backward has not run: GPipe ``v * m``; 1F1B ``min(p - s, m)``;
  interleaved ``min(v m, 2 (p - s - 1) + (v - 1) p + 1)`` (Megatron-LM's
  warm-up plus one).  Equal to :func:`mesh_tf.pipeline.max_in_flight`."""
  p, v, m = pipeline.stages, pipeline.chunks, pipeline.microbatches
  if pipeline.schedule == Schedule.GPIPE:
    return v * m
  if pipeline.schedule == Schedule.ONE_F_ONE_B:
    return min(m, p - stage)
  return min(v * m, 2 * (p - stage - 1) + (v - 1) * p + 1)


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
    raise PipelineSplitError(f"layers={layers} cannot fill {groups} groups;"
                             f" use at most {layers} groups")
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
    boundary_shape: that activation's shape (a string) at the microbatch
      size, and ``boundary_dtype`` its dtype: what
      :func:`mesh_tf.pipeline.expected_boundary_bytes` prices.
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
    layer_optimizer_bytes, base_optimizer_bytes: of the state, the
      optimizer's (what ZeRO 1 shards over the data axis;
      :func:`costmodels.stage_work.price_sync`).
    layer_gradient_bytes, base_gradient_bytes: the gradients' (what ZeRO 2
      shards too).
    layer_gather_bytes, base_gather_bytes: under ZeRO 3, the bytes each
      device contributes to the all-gathers of one layer's (the first and
      the last stage's together) sharded weights per microbatch (forward
      and backward); 0 otherwise.
    layer_storage, base_storage: one layer's (the ends') trainable
      variables by the size of their storage dim (the dim ZeRO's lowering
      shards over the data axis, :mod:`mesh_tf.training.storage`; 0 for a
      variable without one): sorted ``(size, elements per device)``
      pairs.  A data-parallel size that divides no variable's storage dim
      leaves the variable whole (:meth:`sharded_part`); empty: every
      variable shards.
    layer_copies: one layer's trainable variables' compute copies, as
      sorted ``(storage size, casts' bytes, cast bytes, compute bytes)``
      per device: ``compute`` is a variable's bytes in the compute dtype,
      ``cast`` the same where the compute dtype is not the master's (a
      cast copy is made; 0 otherwise), ``casts`` that of all its cast
      copies (two when the layer is recomputed); what
      :func:`held_copy_bytes` prices.
    end_copies: the same for each of the ends' variables, ``(where,
      storage size, casts' bytes, cast bytes, compute bytes, first uses,
      last uses)`` (the uses: the passes that read it on the first and
      the last stage, its ZeRO-3 gathers per microbatch there) with
      ``where`` one of ``"first"``, ``"last"``, ``"both"`` (a tied
      embedding): the stage that holds it.
    layer_step_fixed_s, base_step_fixed_s: of :attr:`layer_step_s` and
      :attr:`base_step_s`, the records' fixed costs (a calibrated launch
      and thread-pool hand-off, whatever a record's size; 0 on every
      preset), which a ZeRO shard's update pays whole
      (:func:`costmodels.stage_work.price_sync`).
    layer_forward_s, first_forward_s, last_forward_s: of
      :attr:`layer_s`, :attr:`first_s` and :attr:`last_s`, the seconds of
      the forward pass (the records of the traced step before its first
      gradient; :meth:`forward_parts`), which the schedule runs apart from
      the backward; None: not measured.
    layer_copy_bytes: the compute copies one layer holds all step per
      device (:func:`held_copy_bytes` of ``layer_copies`` at the priced
      ZeRO stage and data size).
    first_copy_bytes, last_copy_bytes, base_copy_bytes: the ends' held
      copies on the first stage, the last stage, and a single stage.
  """
  layer_s: float
  first_s: float = 0.0
  last_s: float = 0.0
  layer_step_s: float = 0.0
  base_step_s: float = 0.0
  layer_sync_s: float = 0.0
  base_sync_s: float = 0.0
  boundary_bytes: int = 0
  boundary_shape: str = ""
  boundary_dtype: str = "bfloat16"
  layer_state_bytes: int = 0
  base_state_bytes: int = 0
  layer_stash_bytes: int = 0
  working_bytes: int = 0
  first_state_bytes: int = None
  last_state_bytes: int = None
  flops: float = 0.0
  layer_sync_bytes: int = 0
  base_sync_bytes: int = 0
  layer_optimizer_bytes: int = 0
  base_optimizer_bytes: int = 0
  layer_gradient_bytes: int = 0
  base_gradient_bytes: int = 0
  layer_gather_bytes: int = 0
  base_gather_bytes: int = 0
  layer_storage: Tuple[Tuple[int, int], ...] = ()
  base_storage: Tuple[Tuple[int, int], ...] = ()
  layer_copies: Tuple[Tuple[int, int, int, int], ...] = ()
  end_copies: Tuple[Tuple[str, int, int, int, int, int, int], ...] = ()
  layer_copy_bytes: int = 0
  first_copy_bytes: int = 0
  last_copy_bytes: int = 0
  base_copy_bytes: int = 0
  layer_step_fixed_s: float = 0.0
  base_step_fixed_s: float = 0.0
  layer_forward_s: float = None
  first_forward_s: float = None
  last_forward_s: float = None

  def forward_parts(self):
    """``(layer, first, last)``: the forward pass's part of
    :attr:`layer_s`, :attr:`first_s` and :attr:`last_s` (the rest runs in
    the backward step of the schedule, a recomputation included); a third
    of each where not measured (a backward pass computes two products per
    forward product)."""
    return tuple(s / 3.0 if f is None else f for s, f in (
        (self.layer_s, self.layer_forward_s),
        (self.first_s, self.first_forward_s),
        (self.last_s, self.last_forward_s)))

  def with_copies(self, zero=0, data=1):
    """This work with its held compute copies
    (:attr:`layer_copy_bytes` and the ends') priced for ZeRO ``zero``
    over ``data`` replicas."""
    ends = {w: held_copy_bytes([c[1:5] for c in self.end_copies
                                if c[0] == w], zero, data)
            for w in ("first", "last", "both")}
    return self._replace(
        layer_copy_bytes=held_copy_bytes(self.layer_copies, zero, data),
        first_copy_bytes=ends["first"] + ends["both"],
        last_copy_bytes=ends["last"] + ends["both"],
        base_copy_bytes=sum(ends.values()))

  def end_copy_bytes(self, stage, stages):
    """The ends' held compute copies on ``stage`` of ``stages``."""
    if stages == 1:
      return self.base_copy_bytes
    if stage == 0:
      return self.first_copy_bytes
    return self.last_copy_bytes if stage == stages - 1 else 0

  def sharded_fraction(self, data, base=False):
    """The part of one layer's (``base``: the ends') variable elements
    per device that ZeRO shards over ``data`` replicas: those whose
    storage dim ``data`` divides (the others stay whole, as the lowering
    stores them)."""
    storage = self.base_storage if base else self.layer_storage
    total = sum(n for _, n in storage)
    if not total:
      return 1.0
    return sum(n for size, n in storage
               if size and size % data == 0) / total

  def sharded_part(self, nbytes, data, base=False):
    """Of ``nbytes`` of one layer's (``base``: the ends') state, a
    category whose bytes are proportional to its variables' elements
    (optimizer slots, gradients, master weights, the gradient
    reduction), the bytes on variables that ZeRO shards over ``data``
    replicas (:meth:`sharded_fraction`), exactly."""
    storage = self.base_storage if base else self.layer_storage
    total = sum(n for _, n in storage)
    if not total:
      return nbytes
    part = sum(n for size, n in storage if size and size % data == 0)
    return nbytes * part // total

  def end_share(self, stage, stages):
    """The part of the ends' per-step work and state on ``stage`` of
    ``stages``."""
    if stages == 1:
      return 1.0
    if stage not in (0, stages - 1) or not self.base_state_bytes:
      return 0.0 if stage not in (0, stages - 1) else 0.5
    held = self.first_state_bytes if stage == 0 else self.last_state_bytes
    return 0.5 if held is None else held / self.base_state_bytes


def held_copy_bytes(copies, zero=0, data=1):
  """Bytes per device of the compute copies a step holds from its start
  to its last backward, as :func:`mesh_tf.training.storage.shard_storage`
  lowers them, for ``copies`` (``(storage size, all casts' bytes, one
  cast's bytes, compute bytes)`` each, :attr:`StageWork.layer_copies`)
  under ZeRO ``zero`` over ``data`` replicas.

  * ZeRO 0, or a variable without a storage dim: every cast copy of the
    variable (a recomputed layer casts it again, from the variable);
  * a variable stored whole (ZeRO 1-3 where ``data`` does not divide its
    storage dim): its one cast copy (the recomputation reads it);
  * a sharded one: the cast of its shard (``1/data``), and under ZeRO 1
    and 2 also the compute copy gathered once per step, whole; ZeRO 3
    gathers it per use (working memory, not held).

  Example:
    >>> held_copy_bytes([(32, 400, 200, 200)], 0, 2)  # bf16, recomputed
    400
    >>> held_copy_bytes([(32, 400, 200, 200)], 1, 2)  # shard + gather
    300
    >>> held_copy_bytes([(32, 0, 0, 400)], 1, 2)      # fp32: the gather
    400
    >>> held_copy_bytes([(32, 400, 200, 200)], 3, 2), held_copy_bytes(
    ...     [(33, 400, 200, 200)], 3, 2)
    (100, 200)
  """
  total = 0
  for size, casts, cast, compute in copies:
    if zero == 0 or not size:
      total += casts
    elif data == 1 or size % data:
      total += cast
    elif zero < 3:
      total += cast // data + compute
    else:
      total += cast // data
  return total


class PipelineCost(NamedTuple):
  """The priced pipelined step (seconds, bytes per device).
  ``sent_bytes``: per stage, the bytes each device sends across stage
  boundaries per microbatch (:func:`mesh_tf.pipeline.
  expected_boundary_bytes`; before a scatter/gather split).
  ``core_sharing_s``: on devices that share a host's cores, the seconds
  the step gains because stages that wait leave the cores to the stages
  that compute (:mod:`costmodels.shared_cores`): ``step_time_s`` is
  ``steady_s + bubble_s + step_work_s - core_sharing_s``; 0 where each
  device has its own compute (every preset).  It is the formula's terms
  less the schedule's own time, so it also holds what the formula's
  ideal bubble leaves out (an interleaved schedule whose first and last
  chunks carry the model's ends waits a few percent more), and can be
  slightly negative where the factor is barely above 1."""
  pipeline: object
  microbatches: int
  layers_per_group: Tuple[int, ...]
  stage_times_s: Tuple[float, ...]
  boundary_s: float
  steady_s: float
  bubble_s: float
  step_work_s: float
  step_time_s: float
  stage_memory_bytes: Tuple[int, ...]
  sent_bytes: Tuple[int, ...] = ()
  core_sharing_s: float = 0.0

  @property
  def peak_memory_bytes(self):
    return max(self.stage_memory_bytes)

  @property
  def bubble_fraction(self):
    return self.bubble_s / self.steady_s if self.steady_s else 0.0


def boundary_time(nbytes, link):
  """Seconds of one point-to-point send of ``nbytes`` per device over
  ``link`` (a :class:`costmodels.LinkParams`-like value with
  ``bandwidth_bytes_per_s`` and ``latency_s``); 0 for no bytes or no
  link (sends not priced)."""
  if not nbytes or link is None:
    return 0.0
  return link.latency_s + nbytes / link.bandwidth_bytes_per_s


def price_pipeline(work, pipeline, layers, microbatches=None, link=None,
                   mesh_shape=None, layout_rules=None, scatter=1,
                   *, gather_s=0.0, sent_memo=None,
                   shared_compute_factor=1.0):
  """The :class:`PipelineCost` of ``layers`` repeated layers of ``work``
  under ``pipeline`` (a :class:`mesh_tf.pipeline.Pipeline`; its split is
  the layers per virtual stage), or as one stage of ``microbatches``
  microbatches when ``pipeline`` is None.

  The stage boundary is on ``link`` (a :class:`costmodels.LinkParams`-like
  value with ``bandwidth_bytes_per_s`` and ``latency_s``); each stage's
  sends per microbatch are :func:`mesh_tf.pipeline.expected_boundary_bytes`
  of the boundary activation on ``mesh_shape`` (the whole mesh, the stage
  axis included) under ``layout_rules``.  With ``scatter`` = t > 1, each
  send carries ``1/t`` of the slice and the receivers all-gather it in
  ``gather_s`` (Narayanan et al., 2021, section 4.1, the scatter/gather
  optimization of an activation replicated over a tensor-parallel group
  of t).  ``sent_memo``: a dict the caller owns, to reuse the boundary
  bytes of one (pipeline, activation, mesh, rules) across calls.

  ``shared_compute_factor``: the chip's (the stages' devices all of the
  topology's, :attr:`costmodels.hardware.ChipSpec.shared_compute_factor`).
  Above 1 the devices share a host's cores, and the step is the
  schedule's time on them (:func:`costmodels.shared_cores.schedule_time`):
  a stage that waits leaves its cores to the others.  At 1 (every preset)
  the step is the bubble formula above.

  Example:
    >>> from mesh_tf.pipeline import Pipeline
    >>> w = StageWork(layer_s=1.0, first_s=0.5, last_s=1.0)
    >>> c = price_pipeline(w, Pipeline("stage", 2, 4, 4), 4)
    >>> c.layers_per_group, c.stage_times_s, c.step_time_s
    ((2, 2), (2.5, 3.0), 15.0)
  """
  if pipeline is None:
    p, v, m = 1, 1, int(microbatches or 1)
    split = (layers,)
  else:
    p, v, m = pipeline.stages, pipeline.chunks, pipeline.microbatches
    split = tuple(pipeline.split)
    if pipeline.layers != layers:
      raise PipelineSplitError(
          f"pipeline of {pipeline.layers} layers priced for a model of "
          f"layers={layers}; build the Pipeline with layers={layers}")
  groups = p * v
  per_stage = [sum(split[g] for g in range(i, groups, p)) for i in range(p)]
  sent = (0,) * p
  hops = [0.0] * p
  if pipeline is not None and work.boundary_bytes:
    if work.boundary_shape and mesh_shape is not None:
      key = (pipeline, work.boundary_shape, work.boundary_dtype,
             str(mesh_shape), str(layout_rules or ""))
      sent = None if sent_memo is None else sent_memo.get(key)
      if sent is None:
        sent = expected_boundary_bytes(pipeline, work.boundary_shape,
                                       work.boundary_dtype, mesh_shape,
                                       layout_rules or "")
        if sent_memo is not None:
          sent_memo[key] = sent
    else:
      sent = tuple(2 * v * work.boundary_bytes for _ in range(p))
    piece = work.boundary_bytes // max(1, scatter)
    for i in range(p):
      sends = round(sent[i] / work.boundary_bytes)
      hops[i] = sends * (boundary_time(piece, link) + gather_s)
  times = []
  for i, n in enumerate(per_stage):
    t = n * work.layer_s + hops[i]
    if i == 0:
      t += work.first_s
    if i == p - 1:
      t += work.last_s
    times.append(t)
  steady = m * max(times)
  bubble = steady * bubble_fraction(pipeline)
  finish = [n * (work.layer_step_s + work.layer_sync_s)
            + (work.base_step_s + work.base_sync_s) * work.end_share(i, p)
            for i, n in enumerate(per_stage)]
  step_work = max(finish)
  sharing = 0.0
  if pipeline is not None and shared_cores.shares_cores(
      shared_compute_factor):
    forward, backward = _pass_times(work, pipeline, hops)
    sharing = steady + bubble + step_work - shared_cores.schedule_time(
        pipeline, forward, backward, finish, shared_compute_factor)
  memory = []
  for i, n in enumerate(per_stage):
    base = int(work.base_state_bytes * work.end_share(i, p))
    held = 1 if pipeline is None else inflight_microbatches(pipeline, i)
    # Each held (chunk, microbatch) keeps its chunk's layers' stash.
    stash = held * (n / v) * work.layer_stash_bytes
    copies = n * work.layer_copy_bytes + work.end_copy_bytes(i, p)
    memory.append(int(n * work.layer_state_bytes + base + stash
                      + work.working_bytes + copies))
  return PipelineCost(pipeline, m, split, tuple(times), max(hops), steady,
                      bubble, step_work,
                      steady + bubble + step_work - sharing,
                      tuple(memory), tuple(sent), sharing)


def _pass_times(work, pipeline, hops):
  """``(forward, backward)``: per virtual stage, the seconds of one
  microbatch's forward (backward) pass through it: its layers' part
  (:meth:`StageWork.forward_parts`), the first virtual stage's embedding,
  the last's output layer and loss, and the stage's sends per microbatch
  (``hops``) spread over the passes that send (a forward sends its
  activation on, a backward its input's gradient back)."""
  p, groups = pipeline.stages, pipeline.virtual_stages
  layer_f, first_f, last_f = work.forward_parts()
  sends = [0] * p
  for j in range(groups):
    sends[j % p] += (j < groups - 1) + (j > 0)
  forward, backward = [], []
  for j, n in enumerate(pipeline.split):
    hop = hops[j % p] / sends[j % p] if sends[j % p] else 0.0
    f = n * layer_f + (j < groups - 1) * hop
    b = n * (work.layer_s - layer_f) + (j > 0) * hop
    if j == 0:
      f, b = f + first_f, b + work.first_s - first_f
    if j == groups - 1:
      f, b = f + last_f, b + work.last_s - last_f
    forward.append(f)
    backward.append(b)
  return tuple(forward), tuple(backward)
