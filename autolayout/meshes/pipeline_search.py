"""The fastest pipelined layout of a zoo Transformer on any chip count.

:func:`search_pipelines` enumerates the :class:`PipelineLayout` space
exactly -- tensor parallelism (each divisor of the node size that the
heads divide, placed on the node's fast link or across nodes), pipeline
stages (any count up to the layers: a count that does not divide them
gets an uneven, balanced layer split), chunks per stage (interleaving),
data parallelism, microbatch size, recompute, the ZeRO stage over the
data axis (0; 1: optimizer state sharded; 2: gradients too) -- under the
per-device memory budget, and keeps the layout with the smallest predicted step time
(ties: fewer chips, then the earlier layout in enumeration order).

**TPU slices.**  On a torus (a TPU slice, or pods of them joined by the
data-centre network) the mesh is laid row-major on a box of the torus:
the tensor axis on its minor ICI dims (any size whose chips fill a box of
them, :func:`tensor_degrees`), the data axis on the next, the stages
along the major dims (a whole dim, or a sub-block of it), so that a
stage boundary is a send to the neighbouring chips of the next stage,
priced on the ICI link (or the data-centre network where the stages span
pods).  The tensor axis is not placed across the data axis (across the
torus's dims the link is the same), but the data axis may be outermost
instead of the stages (``data-outer``: the stages on the middle dims, the
data axis on the major ones and across pods), and the search compares
both.

**Any chip count.**  A layout uses ``model * stages * data`` chips in
whole nodes (or part of one node; on a torus, a box of it: whole minor
dims and part of the next); the rest are *idle* and reported.  For
each (tensor, stages) pair it tries the largest data-parallel size that
fits in the chips, whose microbatches the batch need not divide (the
last microbatch is *padded*, and the padding priced as work; the plan's
:attr:`~autolayout.training.pipeline_price.PipelinedPrice.padding` is the
:class:`mesh_tf.training.padding.Padding` that
:class:`mesh_tf.pipeline.PipelineTrainStep` lowers), and the
largest one that divides the batch (no padding, more idle chips): the
predicted step time picks between them.  When no layout fits on the
chips, :class:`PipelineInfeasibleError` names the smallest chip count
that would hold the model.

**Exact.**  Every point is priced by :func:`autolayout.training.pipeline_price.
price_layout` from one stage measurement per (tensor, placement,
microbatch, recompute) (the ShapeMeshImpl trace, shared by every stage,
chunk and data-parallel count), and the search's only pruning is a lower
bound: a point whose memory lower bound (its stage's weights and
optimizer state, without activations) is over the budget is skipped
without pricing.  So the answer is the brute-force optimum of the space
(the tests compare it with pricing every point), and the report says
``optimal`` unless the time limit cut the enumeration (``feasible``).
"""

import math
import time
from typing import Any, NamedTuple, Tuple

from costmodels import hardware
from costmodels import shared_cores
from costmodels.topology import get_topology
from mesh_tf.core.errors import MtfError
from autolayout.errors import InfeasibleLayoutError, TimeLimitError
from autolayout.training.pipeline_price import (
    PLACEMENTS, RECOMPUTE, PipelineLayout, aligned, box_sizes, is_torus,
    measure_stage, measuring_data, price_layout)

DEFAULT_MICROBATCH_SIZES = (1, 2)
DEFAULT_MAX_CHUNKS = 4
#: ZeRO stages over the data axis (1: optimizer state sharded; 2: and the
#: gradients, reduce-scattered per microbatch; 3: and the weights,
#: gathered before each microbatch's forward and backward).
DEFAULT_ZERO = (0, 1, 2, 3)


class PipelineInfeasibleError(InfeasibleLayoutError):
  """No pipelined layout fits; ``min_chips`` is the smallest chip count
  that would hold the model (None if none up to the search's limit)."""

  def __init__(self, message, min_chips=None):
    super().__init__(message)
    self.min_chips = min_chips


class PipelineSearchResult(NamedTuple):
  """What :func:`search_pipelines` found.

  Attributes:
    best: the :class:`~autolayout.training.pipeline_price.PipelinedPrice` chosen.
    status: ``"optimal"`` (the whole space enumerated) or ``"feasible"``
      (cut by the time limit; the gap is then unknown).
    priced: points priced; ``skipped``: pruned by the memory bound;
      ``over_budget``: priced but over the budget.
    by_placement: ``{placement: best step time s or None}``: the fastest
      layout with the tensor axis on the node's fast link (``inner``) and
      across nodes (``outer``), so the answer shows it compared both.
    solve_time_s: wall seconds of the search.
    table: ``((layout, step s, peak bytes, fits), ...)`` of the best
      point per (tensor, stages, placement), fastest first.
    hint: the hint's PipelinedPrice (None without a hint).
  """
  best: Any
  status: str
  priced: int
  skipped: int
  over_budget: int
  by_placement: Any
  solve_time_s: float
  table: Tuple[Any, ...]
  hint: Any = None

  @property
  def gap(self):
    return 0.0 if self.status == "optimal" else None


#: The largest tensor-parallel size tried on a torus.
MAX_TORUS_TENSOR = 64


def tensor_degrees(config, topology):
  """Tensor-parallel sizes that divide the heads: on a two-level cluster
  the divisors of the node size (the innermost physical dim); on a torus
  the sizes whose chips fill a box of its minor dims (a divisor of the
  minor-most dim, or that dim times a divisor of the next...), up to
  :data:`MAX_TORUS_TENSOR` and to half the slice (a stage's work is
  measured on two replicas, and a torus cannot grow)."""
  if is_torus(topology):
    return tuple(t for t in range(1, min(MAX_TORUS_TENSOR,
                                         topology.num_chips // 2) + 1)
                 if config.heads % t == 0 and _divides_dims(topology, t)
                 and aligned(topology, 2 * t))
  node = topology.dims[-1].size
  return tuple(t for t in range(1, node + 1)
               if node % t == 0 and config.heads % t == 0)


def _divides_dims(topology, chips):
  """Whether ``chips`` fill a box of the torus's minor dims whose part of
  its major-most dim divides that dim (so that the rest of it holds whole
  data-parallel groups)."""
  box = box_sizes(topology, chips)
  if box is None:
    return False
  k = next(i for i, n in enumerate(box) if n > 1 or i == len(box) - 1)
  return topology.dims[k].size % box[k] == 0


def placements_of(topology, placements=PLACEMENTS):
  """The placements searched on ``topology``: the tensor axis inside a
  node or across nodes on a two-level cluster; on a torus the tensor axis
  on the minor ICI dims (across them is the same kind of link) with the
  stages outermost (``inner``) or the data axis outermost
  (``data-outer``)."""
  keep = ("inner", "data-outer") if is_torus(topology) else (
      "inner", "outer")
  return tuple(p for p in placements if p in keep)


def measured_placement(placement):
  """The placement whose stage measurement serves ``placement``'s (the
  tensor axis lies alike in ``inner`` and ``data-outer``)."""
  return "inner" if placement == "data-outer" else placement


def box_counts(topology):
  """The chip counts that fill a box of a torus (:func:`autolayout.
  training.pipeline_price.box_sizes`), largest first: a part of one dim
  times the whole dims minor to it."""
  counts, minor = set(), 1
  for d in reversed(topology.dims):
    counts.update(a * minor for a in range(1, d.size + 1))
    minor *= d.size
  return tuple(sorted(counts, reverse=True))


def _data_sizes(config, topology, model, stages, microbatch, counts=None):
  """The data-parallel sizes tried for (model, stages): the largest that
  fits in the chips (padding the batch if needed) and the largest that
  divides the batch into whole microbatches, both on whole nodes (on a
  torus, boxes of it: ``counts``, :func:`box_counts`)."""
  per = model * stages
  most = topology.num_chips // per
  if is_torus(topology):
    sizes = [c // per for c in counts or box_counts(topology)
             if c % per == 0]
  else:
    sizes = [d for d in range(most, 0, -1) if aligned(topology, d * per)]
  fit = next(iter(sizes), None)
  exact = next((d for d in sizes if config.batch % (d * microbatch) == 0),
               None)
  return tuple(sorted({d for d in (fit, exact) if d is not None},
                      reverse=True))


def _time_bound(work, layers, lay, batch, shared_compute_factor=1.0):
  """A lower bound on the step time of ``lay``: the slowest stage takes at
  least the mean of the work, and the bubble adds its fraction; on
  devices that share a host's cores (``shared_compute_factor`` above 1)
  the bubble's cores go to the other stages, and the bound is the mean
  work alone (the total over the cores, :mod:`costmodels.shared_cores`)."""
  m = lay.microbatches(batch)
  mean = (layers * work.layer_s + work.first_s + work.last_s) / lay.stages
  if shared_cores.shares_cores(shared_compute_factor):
    return m * mean
  return m * mean * (1 + (lay.stages - 1) / (lay.chunks * m))


def _state_bound(work, layers, stages, data=1, zero=0):
  """A lower bound on the busiest stage's memory: its share of the
  layers' state (no activations), less what ZeRO ``zero`` shards over
  ``data`` replicas (the variables whose storage dim ``data`` divides,
  :meth:`costmodels.pipeline.StageWork.sharded_part`, as the price
  shards them)."""
  def shard(nbytes):
    part = work.sharded_part(nbytes, data)
    return part - part // data
  state = work.layer_state_bytes
  if data > 1 and zero >= 1:
    state -= shard(work.layer_optimizer_bytes)
  if data > 1 and zero >= 2:
    state -= shard(work.layer_gradient_bytes)
  if data > 1 and zero >= 1:
    # The master weights: sharded from ZeRO 1, as the lowering stores them.
    state -= shard(work.layer_state_bytes - work.layer_optimizer_bytes
                   - work.layer_gradient_bytes)
  return math.ceil(layers / stages) * state


def layouts(config, topology, tensor=None, stages=None, chunks=None,
            microbatch=DEFAULT_MICROBATCH_SIZES, recompute=RECOMPUTE,
            placements=PLACEMENTS, *, zero=DEFAULT_ZERO):
  """Every :class:`PipelineLayout` of the space, in enumeration order
  (ZeRO stages above 0 only with data parallelism)."""
  topology = get_topology(topology)
  tensor = tensor or tensor_degrees(config, topology)
  counts = box_counts(topology) if is_torus(topology) else None
  out = []
  for t in tensor:
    for place in placements_of(topology, placements):
      if place == "outer" and t == 1:
        continue
      for b in microbatch:
        for rec in recompute:
          most_p = min(config.layers, topology.num_chips // t)
          for p in (stages or range(1, most_p + 1)):
            if t * p > topology.num_chips or p > config.layers:
              continue
            for v in (chunks or range(1, DEFAULT_MAX_CHUNKS + 1)):
              if (p == 1 and v > 1) or p * v > config.layers:
                continue
              for d in _data_sizes(config, topology, t, p, b, counts):
                if place == "outer" and d % topology.dims[-1].size:
                  continue
                if place == "data-outer" and (d == 1 or p == 1):
                  continue   # the same mesh as inner
                for z in zero:
                  if z == 0 or d > 1:
                    out.append(PipelineLayout(t, p, d, v, b, rec, place,
                                              zero=z))
  return out


def search_pipelines(config, topology, memory_budget=None, tensor=None,
                     stages=None, chunks=None,
                     microbatch=DEFAULT_MICROBATCH_SIZES,
                     recompute=RECOMPUTE, *, placements=PLACEMENTS,
                     time_limit_s=30.0, hint=None, zero=DEFAULT_ZERO):
  """The fastest pipelined layout of ``config`` on ``topology`` that fits
  ``memory_budget`` bytes per device (default: the chip's usable memory);
  see the module docstring.  ``tensor``, ``stages``, ``chunks``,
  ``microbatch``, ``recompute``, ``placements`` and ``zero`` (ZeRO
  stages) restrict the space;
  ``hint`` is a :class:`PipelineLayout` priced first (see the module
  docstring; it need not be in the space).

  Raises:
    PipelineInfeasibleError: if no layout fits (with the smallest chip
      count that would).
    TimeLimitError: if the time limit ran out before a layout that fits
      was found.
  """
  t0 = time.perf_counter()
  topology = get_topology(topology)
  if memory_budget is None:
    memory_budget = hardware.usable_memory_bytes(topology.chip)
  deadline = t0 + time_limit_s
  works, traces, memo, best, best_key = {}, {}, {}, None, None
  priced = skipped = over = 0
  by_place = {p: None for p in placements_of(topology, placements)}
  table = {}
  cut = False
  smallest_state = None
  hint_price = None
  order = layouts(config, topology, tensor, stages, chunks, microbatch,
                  recompute, placements, zero=zero)
  if hint is not None:
    order = [PipelineLayout(*hint)] + order
  for n_lay, lay in enumerate(order):
    if time.perf_counter() > deadline:
      cut = True
      break
    md = measuring_data(lay, topology)
    measured = measured_placement(lay.placement)
    key = (lay.model, measured, lay.microbatch, lay.recompute, md)
    work = works.get(key)
    if work is None:
      work = works[key] = measure_stage(config, topology, lay.model, md,
                                        lay.microbatch, lay.recompute,
                                        measured, traces)
    bound = _state_bound(work, config.layers, lay.stages, lay.data, lay.zero)
    smallest_state = min(bound, smallest_state or bound)
    # The time bound prunes against the incumbent of the layout's own
    # placement, so that the best of each placement is exact too.
    incumbent = by_place.get(lay.placement)
    # The hint is priced whatever the bounds say (the answer shows it).
    if (hint is None or n_lay > 0) and (bound > memory_budget or (
        incumbent is not None
        and _time_bound(work, config.layers, lay, config.batch,
                        topology.chip.shared_compute_factor)
        > incumbent * (1 + 1e-9))):
      skipped += 1
      continue
    try:
      r = price_layout(config, topology, lay, work, memo=memo)
    except MtfError:
      if hint is not None and n_lay == 0:
        raise
      skipped += 1
      continue
    if hint is not None and n_lay == 0:
      hint_price = r
    priced += 1
    fits = r.peak_memory_bytes <= memory_budget
    row = (lay.model, lay.stages, lay.placement)
    if fits and (row not in table or r.step_time_s < table[row][1]):
      table[row] = (lay, r.step_time_s, r.peak_memory_bytes, fits)
    if not fits:
      over += 1
      continue
    k = (r.step_time_s, lay.chips)
    prev = by_place.get(lay.placement)
    if prev is None or r.step_time_s < prev:
      by_place[lay.placement] = r.step_time_s
    if best_key is None or k < best_key:
      best, best_key = r, k
  elapsed = time.perf_counter() - t0
  if best is None:
    if cut:
      raise TimeLimitError(
          f"the time limit of {time_limit_s:g} s ran out before any "
          "pipelined layout that fits was found; raise the time limit")
    need = min_chips(config, topology, memory_budget, works, zero=zero)
    where = (f"the smallest chip count that would hold it is {need}"
             if need else
             f"no box of the torus's {topology.num_chips} chips holds it; "
             "use a larger slice" if is_torus(topology) else
             "no chip count up to "
             f"{config.layers * max(tensor_degrees(config, topology))} "
             "chips holds it")
    raise PipelineInfeasibleError(
        f"no pipelined layout of the model ({config.layers} layers, "
        f"d_model={config.d_model}) on {topology.num_chips} chips of "
        f"{topology.name} fits the memory budget of "
        f"{memory_budget / 2**30:.1f} GiB per device; {where}",
        min_chips=need)
  rows = tuple(sorted(table.values(), key=lambda r: r[1]))
  return PipelineSearchResult(best, "feasible" if cut else "optimal",
                              priced, skipped, over, by_place, elapsed,
                              rows, hint_price)


def min_chips(config, topology, memory_budget, works=None, *,
              zero=DEFAULT_ZERO):
  """The smallest ``model * stages * data`` (tensor parallelism within a
  node, microbatch 1, full recompute, 1F1B; ZeRO 3 over the ``data``
  replicas, which shards the whole training state) whose busiest stage
  fits ``memory_budget``, on a cluster like ``topology`` grown as needed;
  None if none up to a stage per layer (and as many replicas) does.
  Without 3 in ``zero`` (the ZeRO stages of the space), one replica."""
  topology = get_topology(topology)
  node = topology.dims[-1].size
  limit = config.layers * max(tensor_degrees(config, topology))
  points = sorted((t * p * d, t, p, d)
                  for t in tensor_degrees(config, topology)
                  for p in range(1, config.layers + 1)
                  for d in range(1, (limit // (t * p) if 3 in zero else 1)
                                 + 1))
  for chips, t, p, d in points:
    grown = _grown(topology, chips)
    if grown is None:
      continue
    lay = PipelineLayout(t, p, d, 1, 1, "full", "inner", zero=3 if d > 1
                         else 0)
    work = None if works is None else works.get(
        (t, "inner", 1, "full", 2))
    if work is None:
      work = measure_stage(config, grown, t, 2, 1, "full", "inner")
      if works is not None:
        works[(t, "inner", 1, "full", 2)] = work
    if _state_bound(work, config.layers, p, d, lay.zero) > memory_budget:
      continue
    try:
      r = price_layout(config, grown, lay, work)
    except MtfError:
      continue   # a mesh the cluster's dims (or the torus's box) cannot take
    if r.peak_memory_bytes <= memory_budget:
      return chips if (is_torus(topology) or chips % node == 0
                       or node % chips == 0) else -(-chips // node) * node
  return None


def _grown(topology, chips):
  """``topology``'s kind of cluster with at least ``chips`` chips (whole
  nodes), or None for a topology that cannot grow (a TPU torus: then
  ``topology`` itself where ``chips`` fill a box of it)."""
  dims = topology.dims
  node = dims[-1].size
  if is_torus(topology):
    return topology if aligned(topology, chips) else None
  if len(dims) != 2:
    return topology if chips <= topology.num_chips else None
  if chips % node and node % chips:
    return None
  nodes = max(1, -(-chips // node))
  return topology._replace(name=f"{topology.name}+", dims=(
      dims[0]._replace(size=max(nodes, dims[0].size)), dims[1]))


#: The smallest TPU slice whose training questions consider pipelined
#: layouts by default (a 4x4x4 cube of v4 / v5p).
MIN_TORUS_CHIPS = 64


#: The share of one chip's usable memory a model's training state takes
#: from which :func:`pipelining_applies` (a sixteenth: below it one chip
#: holds the state many times over, and data parallelism over the
#: layout search's rules is the plan).
LARGE_STATE_SHARE = 1 / 16


def pipelining_applies(config, topology, num_devices=None):
  """Whether a training question of zoo ``config`` on ``topology`` should
  also consider pipelined layouts by default: a Transformer
  (``heads``, ``layers``) on a GPU cluster of several nodes or a TPU
  slice of at least :data:`MIN_TORUS_CHIPS` chips, using all of its
  chips, whose training state at ZeRO 0 (about 16 bytes per parameter:
  bf16 weights and gradients, fp32 master and two Adam moments) takes at
  least :data:`LARGE_STATE_SHARE` of one chip's usable memory.  The
  pipelined space holds the layouts practitioners hand-write at that
  scale, one stage included (Megatron's tensor x data parallelism with
  microbatches and ZeRO 1): a 1.7B model on 32 A100s, whose state fits one
  chip, is predicted 17% faster so than with the layout search alone.
  Small models, one node and small TPU slices keep the layout search
  alone."""
  topology = get_topology(topology)
  if not (hasattr(config, "heads") and hasattr(config, "layers")
          and hasattr(config, "num_parameters")):
    return False
  if topology.kind == "tpu":
    if topology.num_chips < MIN_TORUS_CHIPS:
      return False
  elif (topology.kind != "gpu" or len(topology.dims) != 2
        or topology.dims[0].size < 2):
    return False
  if num_devices is not None and num_devices != topology.num_chips:
    return False
  state = 16 * config.num_parameters()
  return state >= LARGE_STATE_SHARE * hardware.usable_memory_bytes(
      topology.chip)
