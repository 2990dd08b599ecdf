"""A zoo Transformer's pipelined training step under a given layout, priced.

A layout here is a :class:`PipelineLayout`: tensor parallelism ``model``
(Megatron's rules: heads, d_ff and the vocabulary split over the model
axis), ``stages`` pipeline stages of ``chunks`` chunks each, ``data``
replicas, ``microbatch`` sequences per replica and microbatch, the
recompute choice, and where the tensor axis lies (``"inner"``: innermost,
on NVLink inside a GPU node when it divides the node; ``"outer"``: across
the data axis, on the network).  The mesh is ``stage:P;data:D;model:T``
(inner) or ``stage:P;model:T;data:D`` (outer), and the pipeline a
:class:`mesh_tf.pipeline.Pipeline` over the stage axis (the value the
lowering runs), laid onto the first
``P * D * T`` chips of the topology row-major (on a torus, a box of it:
:func:`box_sizes`); the other chips are idle.
A batch that ``data * microbatch`` does not divide is padded up to whole
microbatches (the padding is priced: it is computed like real data), as
:class:`mesh_tf.training.padding.Padding` lowers it (:meth:`PipelinedPrice.
padding` is the value the lowering takes: its padded rows carry a zero
mask, the same collectives and sends as real rows).

:func:`measure_stage` measures one stage's work from the ShapeMeshImpl
trace of the training step with one and two layers
(:func:`costmodels.stage_work.stage_work`); :func:`price_layout` prices the
whole step from it (:func:`costmodels.pipeline.price_pipeline`), with the
gradient reduction re-priced for the layout's data-parallel size.  One
measurement serves every stage count, chunk count, microbatch count and
data-parallel size (per-device work does not depend on them).
"""

import dataclasses
from typing import Any, NamedTuple

import costmodels
from costmodels import pipeline as pipe
from costmodels.stage_work import price_collective, price_sync, stage_work
from costmodels.topology import get_topology, map_mesh
from mesh_tf.core.errors import MtfError
from mesh_tf.pipeline.spec import Pipeline, Schedule
from mesh_tf.training.padding import Padding
from autolayout.training import decisions as dec

STAGE_AXIS, DATA_AXIS, MODEL_AXIS = "stage", "data", "model"
#: Megatron-style tensor parallelism: heads and d_ff split, the vocabulary
#: split in the output layer.
TENSOR_RULES = ("heads", "d_ff", "vocab")
#: Where the tensor axis lies: ``inner`` (innermost, the data axis next,
#: the stages outermost), ``outer`` (across the data axis: across nodes on
#: a GPU cluster), ``data-outer`` (innermost, the stages next, the data axis
#: outermost: on a torus the stages then take the middle dims and the data
#: axis the major ones, across pods where there are several).
PLACEMENTS = ("inner", "outer", "data-outer")
RECOMPUTE = ("full", "none")


class PipelineLayout(NamedTuple):
  """One point of the pipelined layout space (see the module docstring)."""
  model: int = 1
  stages: int = 1
  data: int = 1
  chunks: int = 1
  microbatch: int = 1
  recompute: str = "full"
  placement: str = "inner"
  schedule: str = None   # None: interleaved_1f1b if chunks > 1 else 1f1b
  scatter_gather: bool = True
  zero: int = 0          # ZeRO stage over the data axis (0-3)

  @property
  def chips(self):
    return self.model * self.stages * self.data

  def schedule_name(self):
    """The :class:`mesh_tf.pipeline.Schedule` value."""
    if self.schedule is not None:
      return Schedule(self.schedule).value
    return (Schedule.INTERLEAVED_1F1B if self.chunks > 1
            else Schedule.ONE_F_ONE_B).value

  def microbatches(self, batch):
    """Microbatches per replica: the batch rounded up to whole ones (and,
    interleaved, to a multiple of the stages)."""
    m = -(-batch // (self.data * self.microbatch))
    if self.schedule_name() == Schedule.INTERLEAVED_1F1B.value and (
        self.stages > 1):
      m = -(-m // self.stages) * self.stages
    return m

  def padded_sequences(self, batch):
    return self.microbatches(batch) * self.data * self.microbatch - batch

  def padding(self, batch):
    """The :class:`mesh_tf.training.padding.Padding` of the batch that the
    lowering applies (``batch`` real sequences, run as whole microbatches
    of ``data * microbatch``); None when the microbatches divide it."""
    rows = self.padded_sequences(batch)
    return Padding("batch", batch, batch + rows) if rows else None

  def mesh(self):
    dm = f"{DATA_AXIS}:{self.data};{MODEL_AXIS}:{self.model}"
    if self.placement == "data-outer":
      return (f"{DATA_AXIS}:{self.data};{STAGE_AXIS}:{self.stages};"
              f"{MODEL_AXIS}:{self.model}")
    if self.placement == "outer":
      dm = f"{MODEL_AXIS}:{self.model};{DATA_AXIS}:{self.data}"
    return f"{STAGE_AXIS}:{self.stages};{dm}"

  def describe(self):
    return (f"TP {self.model} ({self.placement}) x PP {self.stages}"
            f" (v={self.chunks}, {self.schedule_name()}) x DP {self.data},"
            f" microbatch {self.microbatch}, recompute {self.recompute}"
            + (f", ZeRO {self.zero}" if self.zero else ""))


class PipelinedPrice(NamedTuple):
  """What :func:`price_layout` priced."""
  layout: PipelineLayout
  rules: str
  work: Any              # costmodels.pipeline.StageWork
  cost: Any              # costmodels.pipeline.PipelineCost
  microbatches: int
  padded_sequences: int
  idle_chips: int

  @property
  def step_time_s(self):
    return self.cost.step_time_s

  @property
  def peak_memory_bytes(self):
    return self.cost.peak_memory_bytes

  @property
  def padding(self):
    """The batch's :class:`mesh_tf.training.padding.Padding` the lowering
    applies (``padded_sequences`` rows; None: unpadded)."""
    if not self.padded_sequences:
      return None
    rows = self.microbatches * self.layout.data * self.layout.microbatch
    return Padding("batch", rows - self.padded_sequences, rows)


def tensor_rules(config, data, model):
  """Layout rules of one stage: ``batch`` over the data axis, the tensor
  dims of :data:`TENSOR_RULES` that ``model`` divides over the model
  axis."""
  rules = [f"batch:{DATA_AXIS}"] if data > 1 else []
  if model > 1:
    for d in TENSOR_RULES:
      if getattr(config, d) % model == 0:
        rules.append(f"{d}:{MODEL_AXIS}")
  return ";".join(rules)


def is_torus(topology):
  """Whether ``topology`` has torus dims (a TPU slice, or pods of them):
  its chips are taken as boxes of the torus (:func:`box_sizes`) rather
  than whole nodes of a two-level cluster."""
  return any(d.structure == "torus" for d in topology.dims)


def box_sizes(topology, chips):
  """The sizes (major first) of the box that the first ``chips`` chips of
  a torus fill, row-major: whole minor dims and a part of the next one
  (e.g. 128 chips of 8x8x8 are 2x8x8), or None where they fill no box."""
  sizes = [d.size for d in topology.dims]
  minor = 1
  for k in reversed(range(len(sizes))):
    if chips >= minor and chips % minor == 0 and chips // minor <= sizes[k]:
      return [1] * k + [chips // minor] + sizes[k + 1:]
    minor *= sizes[k]
  return None


def _sub_torus(topology, chips):
  """:func:`sub_topology` of a torus: the box of :func:`box_sizes` (a dim
  taken in part loses its wraparound)."""
  sizes = box_sizes(topology, chips)
  if sizes is None:
    shape = "x".join(str(d.size) for d in topology.dims)
    raise MtfError(f"{chips} chips of topology {topology.name} ({shape}) "
                   "do not fill a box of its torus row-major; use whole "
                   "minor dims times a part of the next one")
  return tuple(d._replace(size=n, wraparound=d.wraparound and n == d.size)
               for d, n in zip(topology.dims, sizes))


def sub_topology(topology, chips):
  """The first ``chips`` chips of a two-level cluster (whole nodes, or
  part of one node), or of a torus (a box of it, :func:`box_sizes`), as a
  topology."""
  dims = topology.dims
  inner = dims[-1].size
  if chips > topology.num_chips:
    raise MtfError(f"{chips} chips is more than topology {topology.name} "
                   f"has ({topology.num_chips})")
  if is_torus(topology):
    new = _sub_torus(topology, chips)
  elif len(dims) == 2 and chips % inner == 0:
    new = (dims[0]._replace(size=chips // inner), dims[1])
  elif len(dims) == 2 and inner % chips == 0:
    new = (dims[0]._replace(size=1), dims[1]._replace(size=chips))
  elif len(dims) == 1 or chips == topology.num_chips:
    new = dims if chips == topology.num_chips else (
        dims[0]._replace(size=chips),)
  else:
    raise MtfError(f"{chips} chips of topology {topology.name} do not make "
                   "whole nodes or part of one; use a multiple or divisor "
                   f"of the node size {inner}")
  return costmodels.Topology(f"{topology.name}[{chips}]", topology.chip,
                             new)


def cluster_of(topology, chips):
  """:func:`sub_topology` of ``chips``, growing a two-level cluster by
  whole nodes where it has fewer (to measure a stage's work on a
  data-parallel size the cluster itself does not reach)."""
  dims = topology.dims
  if chips > topology.num_chips and len(dims) == 2 and not is_torus(
      topology):
    node = dims[-1].size
    topology = topology._replace(dims=(
        dims[0]._replace(size=-(-chips // node)), dims[1]))
  return sub_topology(topology, chips)


def aligned(topology, chips):
  """Whether :func:`sub_topology` can take ``chips``."""
  if not 0 < chips <= topology.num_chips:
    return False
  if is_torus(topology):
    return box_sizes(topology, chips) is not None
  inner = topology.dims[-1].size
  return chips % inner == 0 or inner % chips == 0 or len(topology.dims) == 1


def _decisions(config, recompute, param_dtype="bfloat16"):
  rec = config.layers if recompute == "full" else 0
  return dec.TrainingDecisions(param_dtype, 0, rec, 2)


def measure_stage(config, topology, model, data, microbatch=1,
                  recompute="full", placement="inner", memo=None, *,
                  param_dtype="bfloat16"):
  """The :class:`~costmodels.pipeline.StageWork` of one stage of ``model``
  x ``data`` chips (``data``: the measuring size of
  :func:`measuring_data`).  The step is traced on ``data:2;model:T``
  whatever the placement, and priced on the placement's mesh (``memo``: a
  dict the caller owns, to trace once for both placements).
  ``param_dtype``: the compute dtype (the pipelined space prices
  bfloat16; float32 masters either way)."""
  topology = get_topology(topology)
  decisions = _decisions(config, recompute, param_dtype)

  traced = 2 if data > 1 else 1

  def build_traced(layers):
    cfg = dataclasses.replace(config, layers=layers,
                              batch=2 * traced * microbatch)
    d = decisions._replace(recompute=layers if recompute == "full" else 0)
    training = dec.build_training(cfg, d)
    return training.graph, training.plan

  dm = f"{DATA_AXIS}:{data};{MODEL_AXIS}:{model}"
  if placement == "outer":
    dm = f"{MODEL_AXIS}:{model};{DATA_AXIS}:{data}"
  rules = tensor_rules(config, traced, model)
  return stage_work(build_traced,
                    f"{DATA_AXIS}:{traced};{MODEL_AXIS}:{model}", rules,
                    cluster_of(topology, data * model),
                    data_axes=(DATA_AXIS,) if data > 1 else (),
                    price_mesh=dm, memo=None if memo is None else
                    memo.setdefault((model, microbatch, recompute,
                                     param_dtype), {}))


def measuring_data(layout, topology):
  """The data-parallel size a layout's stage work is measured at: the
  smallest that puts the model axis where the layout does (2 inner and
  data-outer; a node's worth outer).  Per-device work does not depend on it, and the
  gradient reduction is re-priced for the layout's own size
  (:func:`costmodels.stage_work.price_sync`)."""
  if layout.placement != "outer" or len(topology.dims) != 2:
    return 2
  return topology.dims[-1].size


def price_layout(config, topology, layout, work=None, split=None,
                 memo=None):
  """The :class:`PipelinedPrice` of zoo ``config`` under ``layout`` on
  ``topology`` (``work``: a :func:`measure_stage` of the layout's model,
  microbatch, recompute and placement at :func:`measuring_data`; measured
  here if None).  ``memo``: a dict the caller owns, to share the layer
  splits, mesh mappings, re-priced work and boundary bytes that several
  layouts of one search have in common (the prices are the same).

  Raises:
    MtfError: subclasses, for sizes that do not split or fit (named).
  """
  topology = get_topology(topology)
  layout = PipelineLayout(*layout)
  if layout.placement not in PLACEMENTS or layout.recompute not in RECOMPUTE:
    raise MtfError(f"placement={layout.placement!r} must be one of "
                   f"{PLACEMENTS} and recompute={layout.recompute!r} one of "
                   f"{RECOMPUTE}")
  chips = layout.chips
  if not aligned(topology, chips):
    raise MtfError(
        f"model={layout.model} x stages={layout.stages} x data="
        f"{layout.data} = {chips} chips do not make "
        + ("a box of the torus" if is_torus(topology) else "whole nodes")
        + f" of topology {topology.name} ({topology.num_chips} chips); use "
        + ("whole minor dims times a part of the next one" if is_torus(
            topology) else
           f"a multiple of the node size {topology.dims[-1].size}"))
  m = layout.microbatches(config.batch)
  if work is None:
    work = measure_stage(config, topology, layout.model,
                         measuring_data(layout, topology), layout.microbatch,
                         layout.recompute, layout.placement)
  pipeline = None
  if layout.stages > 1:
    if layout.stages * layout.chunks > config.layers:
      raise MtfError(
          f"stages={layout.stages} x chunks={layout.chunks} is more layer "
          f"groups than the model's layers={config.layers}; use fewer")
    if split is None:
      split = _memo(memo, ("split", config.layers, layout.stages
                           * layout.chunks, work.first_s, work.last_s,
                           work.layer_s), lambda: pipe.split_layers(
                               config.layers, layout.stages * layout.chunks,
                               work.first_s, work.last_s,
                               work.layer_s or 1.0))
    pipeline = Pipeline(STAGE_AXIS, layout.stages, m, config.layers,
                        layout.chunks, layout.schedule_name(), tuple(split))
  mesh = layout.mesh()
  rules = tensor_rules(config, layout.data, layout.model)
  mapping = _memo(memo, ("mapping", topology.name, chips, mesh),
                  lambda: map_mesh(sub_topology(topology, chips), mesh))
  work = _memo(memo, ("work", work, chips, mesh, layout.zero),
               lambda: price_sync(work, mapping, (DATA_AXIS,),
                                  layout.zero)._replace(
                   boundary_shape=_with_batch(
                       work.boundary_shape,
                       layout.data * layout.microbatch)))
  link, gather, scatter = None, 0.0, 1
  if pipeline is not None:
    link = min(mapping.link_params((STAGE_AXIS,)),
               key=lambda l: l.bandwidth_bytes_per_s)
    if layout.model > 1 and layout.scatter_gather:
      # Scatter/gather: each tensor-parallel rank sends a slice of the
      # (replicated) boundary activation, the receivers all-gather it.
      scatter = layout.model
      gather = price_collective("allgather", (MODEL_AXIS,), layout.model,
                                work.boundary_bytes // layout.model, mapping)
  cost = pipe.price_pipeline(work, pipeline, config.layers, m, link, mesh,
                             rules, scatter, gather_s=gather,
                             sent_memo=None if memo is None else
                             memo.setdefault("sent", {}),
                             shared_compute_factor=(
                                 topology.chip.shared_compute_factor))
  return PipelinedPrice(layout, rules, work, cost, m,
                        layout.padded_sequences(config.batch),
                        topology.num_chips - chips)


def _memo(memo, key, make):
  """``memo[key]``, made by ``make()`` the first time (no memo: made)."""
  if memo is None:
    return make()
  if key not in memo:
    memo[key] = make()
  return memo[key]


def _with_batch(shape, batch):
  """``shape`` (``"batch:2;length:..."``) with the batch dim at the
  layout's microbatch rows (it was measured at another data size)."""
  return ";".join(f"batch:{batch}" if part.split(":")[0] == "batch"
                  else part for part in shape.split(";") if part)


def hardware_flops(config, recompute=True):
  """FLOPs of one training step as Narayanan et al. (2021, eq. 3) count
  them: ``96 B s l h^2 (1 + s / 6h + V / 16 l h)`` with recompute (the
  forward pass twice), ``72 ...`` without."""
  b, s, l, h, v = (config.batch, config.length, config.layers,
                   config.d_model, config.vocab)
  k = 96 if recompute else 72
  return k * b * s * l * h * h * (1 + s / (6 * h) + v / (16 * l * h))
