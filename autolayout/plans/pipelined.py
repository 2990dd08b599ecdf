"""Pipelined plans: a plan whose training decisions hold a pipeline
(:mod:`autolayout.training.pipeline`), made, priced and checked.

A pipelined step is not one graph: it is the program of stage graphs
:func:`mesh_tf.pipeline.build_program` builds (one per virtual stage, one
update per stage), which :class:`mesh_tf.pipeline.PipelineTrainStep`
lowers, and it is priced by :func:`autolayout.training.pipeline_price.
price_layout` (the bubble, the boundary sends, the activations in flight).
So such a plan's

* **model identity** is that of its program (:func:`program_identity`:
  every stage graph's dims, variables and named activations, and one
  fingerprint over the pipeline and every stage graph's fingerprint);
* **layout** is a :class:`~autolayout.training.pipeline_price.
  PipelineLayout` read back from its mesh and decisions (:func:`layout_of`:
  the tensor and data axes, the microbatch rows, the placement);
* **costs** are the pipelined price (:func:`costs_of`), with the bubble,
  the steady time, the boundary sends and, per stage, the microbatches in
  flight.

:func:`plan_of_price` makes the plan of a search's answer; :func:`check`
holds a loaded plan against its model rebuilt for its decisions (every
pipeline field against the mesh, the topology and the batch, and the
program's fingerprint), naming the field that disagrees.

Example:
  >>> from mesh_tf import models
  >>> from autolayout.training.pipeline_price import (PipelineLayout,
  ...                                                 price_layout)
  >>> cfg = models.get_config("transformer_tiny", layers=4)
  >>> price = price_layout(cfg, "dgx-h100", PipelineLayout(2, 2, 2))
  >>> plan = plan_of_price(price, cfg, "dgx-h100", "transformer_tiny")
  >>> plan.training.pipeline.pipeline.split, plan.mesh_shape.text
  ((2, 2), 'stage:2;data:2;model:2')
  >>> check(plan, cfg).step_time_s == plan.costs.step_time_s
  True
"""

import hashlib
import json

from costmodels.topology import get_topology
from mesh_tf.core import mesh_shape as mesh_lib
from mesh_tf.core.errors import MtfError
from mesh_tf.core.layout import convert_to_layout_rules
from mesh_tf.pipeline.spec import PipelineError
from autolayout.errors import PlanFormatError, PlanMismatchError
from autolayout.plans import identity as plan_identity
from autolayout.plans.costs import PredictedCosts
from autolayout.plans.plan import (Plan, SolverInfo, _preset_name,
                                   training_decisions, version)
from autolayout.training import pipeline_price as pp
from autolayout.training import zero
from autolayout.training.families import FAMILIES, TrainingDecisions
from autolayout.training.pipeline import PipelineDecision

__all__ = ["build_program", "check", "check_model", "costs_of", "padding_of",
           "one_stage_plan",
           "decisions_of_price",
           "is_pipelined", "layout_of", "plan_of_price", "price",
           "program_identity", "step_config"]

FIELD = "decisions.pipeline"


def is_pipelined(plan):
  """Whether ``plan``'s decisions hold a pipeline."""
  return plan.training is not None and plan.training.pipeline is not None


def _fail(plan, message):
  raise PlanFormatError(f"plan of {plan.model.name!r}: {message}")


# --- the decisions of a priced layout, and back ------------------------------
def storage_rules(config, layout):
  """The plan's rules: the stage's tensor rules, and with ZeRO 1-2 over
  data replicas the storage dim over the data axis (what the lowering
  shards the optimizer state and gradients with)."""
  rules = pp.tensor_rules(config, layout.data, layout.model)
  if layout.zero and layout.data > 1 and config.d_model % layout.data == 0:
    rules = ";".join(r for r in (rules, f"d_model_storage:{pp.DATA_AXIS}")
                     if r)
  return rules


def decisions_of_price(price, config):
  """The :class:`TrainingDecisions` of a
  :class:`~autolayout.training.pipeline_price.PipelinedPrice` (bf16, as
  the pipelined space prices; its ZeRO stage; every layer or none
  recomputed; the pipeline with its idle chips and padded rows).

  Raises:
    PlanFormatError: for a layout of one stage (no pipeline: an
      unpipelined plan).
  """
  lay, pipe = price.layout, price.cost.pipeline
  if pipe is None:
    raise PlanFormatError(
        f"the layout {lay.describe()} has one stage: it is no pipeline; "
        "save it as an unpipelined plan (solve --no-pipeline)")
  return TrainingDecisions(
      "bfloat16", lay.zero, config.layers if lay.recompute == "full" else 0,
      1, PipelineDecision(pipe, price.padding, price.idle_chips,
                          lay.scatter_gather))


def layout_of(plan, config):
  """The :class:`~autolayout.training.pipeline_price.PipelineLayout` of a
  pipelined plan on zoo ``config`` (the microbatch rows from the batch,
  its padding and the data axis; the placement from the mesh's order).

  Raises:
    PlanFormatError: naming the field of ``decisions.pipeline`` (or the
      mesh) that disagrees with the model, the mesh or the topology.
  """
  d = plan.training
  value = d.pipeline
  pipe = value.pipeline
  mesh = plan.mesh_shape
  names = mesh.dimension_names
  sizes = dict(zip(names, mesh.to_integer_list()))
  if pipe.layers != config.layers:
    _fail(plan, f"{FIELD}.layers={pipe.layers}, but the model has "
          f"layers={config.layers}; solve it again for this model")
  try:
    pipe.check_mesh(mesh, plan.rules)
  except PipelineError as e:
    _fail(plan, f"{FIELD}.axis/stages: {e}")
  if pipe.axis != pp.STAGE_AXIS or set(names) - {
      pp.STAGE_AXIS, pp.DATA_AXIS, pp.MODEL_AXIS}:
    _fail(plan, f"mesh {mesh.text} is not a pipelined layout's "
          f"({pp.STAGE_AXIS}, {pp.DATA_AXIS}, {pp.MODEL_AXIS} axes, the "
          f"stages on {pp.STAGE_AXIS}); {FIELD}.axis is {pipe.axis!r}")
  model = sizes.get(pp.MODEL_AXIS, 1)
  data = sizes.get(pp.DATA_AXIS, 1)
  def before(a, b):
    return a in names and b in names and names.index(a) < names.index(b)
  placement = ("data-outer" if before(pp.DATA_AXIS, pp.STAGE_AXIS) else
               "outer" if before(pp.MODEL_AXIS, pp.DATA_AXIS) else "inner")
  if value.padding is not None and value.padding.real_size != config.batch:
    _fail(plan, f"{FIELD}.padding pads batch={value.padding.real_size}, "
          f"but the model's batch is {config.batch}; solve it again for "
          "this batch")
  rows = config.batch + value.padded_rows
  if rows % (pipe.microbatches * data):
    _fail(plan, f"{FIELD}.padding adds {value.padded_rows} rows: the batch of "
          f"{config.batch} rows and its padding do not make "
          f"microbatches={pipe.microbatches} of {data} replicas; write the "
          f"padded rows of whole microbatches")
  if not isinstance(d.zero_stage, int):
    _fail(plan, f"decisions.zero_stage={zero.describe(d.zero_stage)} with "
          f"a pipeline: the pipelined step shards one ZeRO stage (0-3) "
          "over the data axis; use one stage for every variable")
  lay = pp.PipelineLayout(
      model, pipe.stages, data, pipe.chunks,
      rows // (pipe.microbatches * data),
      "full" if d.recompute == pipe.layers else "none", placement,
      pipe.schedule.value, value.scatter_gather, d.zero_stage)
  if lay.microbatches(config.batch) != pipe.microbatches or (
      lay.padded_sequences(config.batch) != value.padded_rows):
    _fail(plan, f"{FIELD}.microbatches={pipe.microbatches} and "
          f"padding of {value.padded_rows} rows are not the whole "
          "microbatches "
          f"of batch={config.batch} on {data} replicas "
          f"({lay.microbatches(config.batch)} microbatches, "
          f"{lay.padded_sequences(config.batch)} padded rows); write those")
  idle = plan.topology.num_chips - mesh.size
  if value.idle_chips != idle:
    _fail(plan, f"{FIELD}.idle_chips={value.idle_chips}, but mesh "
          f"{mesh.text} leaves {idle} of the {plan.topology.num_chips} "
          f"chips of {plan.topology.name} idle; write idle_chips={idle}")
  return lay


def price(plan, config):
  """The :class:`~autolayout.training.pipeline_price.PipelinedPrice` of a
  pipelined plan on ``config``, with the plan's own layer split."""
  lay = layout_of(plan, config)
  try:
    return pp.price_layout(config, plan.topology, lay,
                           split=plan.training.pipeline.pipeline.split)
  except MtfError as e:
    _fail(plan, f"its layout {lay.describe()} does not price: {e}")


def costs_of(priced):
  """The :class:`PredictedCosts` of a PipelinedPrice: compute is the
  steady work less the boundary sends plus the once-per-step work, comm
  the sends (on the stage axis), and the bubble the rest of the step; the
  memory is the busiest stage's: its weights and optimizer state (what
  the step keeps in variables), the compute copies of its weights it
  holds all step (:func:`costmodels.pipeline.held_copy_bytes`), its
  gradients, the activations of the microbatches in flight and the
  working set."""
  cost, work = priced.cost, priced.work
  pipe, m = cost.pipeline, cost.microbatches
  p = pipe.stages if pipe is not None else 1
  v = pipe.chunks if pipe is not None else 1
  groups = len(cost.layers_per_group)
  per_stage = [sum(cost.layers_per_group[g] for g in range(i, groups, p))
               for i in range(p)]
  from costmodels import pipeline as cm_pipe
  in_flight = [1 if pipe is None else cm_pipe.inflight_microbatches(pipe, i)
               for i in range(p)]
  busiest = max(range(p), key=lambda i: cost.stage_memory_bytes[i])
  n = per_stage[busiest]
  state = int(n * work.layer_state_bytes
              + work.base_state_bytes * work.end_share(busiest, p))
  stash = int(in_flight[busiest] * (n / v) * work.layer_stash_bytes)
  lay = priced.layout
  sharded = lay.zero >= 2 and lay.data > 1

  def held(nbytes, base=False):
    # The gradient bytes a device holds: ZeRO 2-3 shard those of the
    # variables whose storage dim the data size divides.
    if not sharded:
      return nbytes
    part = work.sharded_part(nbytes, lay.data, base)
    return nbytes - part + part // lay.data
  copies = int(n * work.layer_copy_bytes
               + work.end_copy_bytes(busiest, p))
  grads = int(n * held(work.layer_gradient_bytes)
              + held(work.base_gradient_bytes, True)
              * work.end_share(busiest, p))
  comm = m * cost.boundary_s
  terms = (("bubble_s", cost.bubble_s),
           ("bubble_fraction", cost.bubble_fraction),
           ("steady_s", cost.steady_s), ("step_work_s", cost.step_work_s),
           ("boundary_send_s", cost.boundary_s), ("microbatches", m),
           ("stage_times_s", tuple(cost.stage_times_s)),
           ("sent_bytes", tuple(int(b) for b in cost.sent_bytes)),
           ("in_flight", tuple(in_flight)),
           ("stage_memory_bytes", tuple(cost.stage_memory_bytes)))
  if cost.core_sharing_s:
    # Devices that share a host's cores: what the step gains over the
    # terms above (costmodels.shared_cores); absent where it is 0.
    terms += (("core_sharing_s", float(cost.core_sharing_s)),)
  return PredictedCosts(
      float(cost.step_time_s), float(cost.steady_s - comm
                                     + cost.step_work_s),
      float(comm), int(cost.peak_memory_bytes),
      (("activations_in_flight", stash), ("gradients", grads),
       ("weights_and_optimizer", state - grads),
       ("weight_copies", copies),
       ("working", int(work.working_bytes))),
      ((pp.STAGE_AXIS, float(comm)),), (), terms)


# --- the program and its identity ------------------------------------------
def step_config(config, decisions):
  """The zoo config the pipelined step is built from: each family but the
  pipeline configures it (the compute dtype, recompute); the batch stays
  the real one (:func:`padding_of` pads it)."""
  cfg = config
  for family, value in zip(FAMILIES, decisions):
    if family.name != "pipeline":
      cfg = family.configure(cfg, value)
  return cfg


def padding_of(config, decisions):
  """The :class:`mesh_tf.training.padding.Padding` of the batch that the
  pipelined step runs (its padded rows masked out of the
  loss), or None for an unpadded batch."""
  del config  # the padding's real size is the model's batch (layout_of)
  return decisions.pipeline.padding


def build_program(config, decisions, learning_rate=1e-4):
  """The :class:`mesh_tf.pipeline.PipelineProgram` of zoo ``config``
  under pipelined ``decisions`` (Adam with weight decay, as
  :func:`~autolayout.training.build.build_training`; the ZeRO stage as
  storage)."""
  from mesh_tf import models
  from mesh_tf.pipeline import build_program as build
  from mesh_tf.training import optimize
  cfg = step_config(config, decisions)
  storage = (zero.storage_plan(decisions.zero_stage)
             if decisions.zero_stage else None)
  return build(models.transformer_parts(cfg), decisions.pipeline.pipeline,
               optimize.AdamWeightDecayOptimizer(learning_rate), storage,
               padding=padding_of(config, decisions))


def program_identity(program, name, source=None):
  """The :class:`~autolayout.plans.identity.ModelIdentity` of a pipelined
  program: the dims, variables (each once, from its first holder) and
  named activations of every stage graph, and a fingerprint over the
  pipeline and every stage graph's fingerprint."""
  graphs = [c.graph for c in program.chunks] + [u.graph
                                                for u in program.updates]
  outputs = [[c.output] for c in program.chunks] + [[]] * len(
      program.updates)
  parts = [plan_identity.model_identity(g, name, o)
           for g, o in zip(graphs, outputs)]
  dims, variables, acts = set(), {}, {}
  for ident in parts:
    dims.update(ident.dims)
    for v in ident.variables:
      variables.setdefault(v.name, v)
    for a in ident.activations:
      acts.setdefault(a.name, a)
  text = json.dumps([program.pipeline.to_dict(),
                     [i.fingerprint for i in parts]], sort_keys=True)
  return plan_identity.ModelIdentity(
      str(name), tuple(sorted(dims)), tuple(variables.values()),
      tuple(acts.values()),
      "sha256:" + hashlib.sha256(text.encode()).hexdigest(),
      sum(i.num_ops for i in parts),
      None if source is None else json.dumps(source, sort_keys=True))


def plan_of_price(priced, config, topology, name="model", source=None,
                  solver=None):
  """The :class:`~autolayout.plans.plan.Plan` of a pipelined layout's
  price on ``topology`` (the one it was priced on)."""
  topo = get_topology(topology)
  decisions = decisions_of_price(priced, config)
  ident = program_identity(build_program(config, decisions), name, source)
  lay = priced.layout
  rules = convert_to_layout_rules(storage_rules(config, lay))
  return Plan(ident, mesh_lib.convert_to_mesh_shape(lay.mesh()), topo,
              _preset_name(topo), rules, training_decisions(decisions),
              costs_of(priced), solver or SolverInfo("given"), version())


def check(plan, config, what=None):
  """Holds pipelined ``plan`` against zoo ``config``: every pipeline field
  against the model, mesh and topology (:func:`layout_of`), and the
  program rebuilt for its decisions against its fingerprint; returns the
  plan's repriced :class:`PredictedCosts`.

  Raises:
    PlanFormatError: naming the ``decisions.pipeline`` field that
      disagrees.
    PlanMismatchError: if the program rebuilt is not the plan's (the
      model or ``decisions.pipeline`` changed since it was saved).
  """
  priced = price(plan, config)
  try:
    program = build_program(config, plan.training)
  except MtfError as e:
    _fail(plan, f"its {FIELD} does not build on its model: {e}")
  mine = program_identity(program, plan.model.name)
  if mine.fingerprint != plan.model.fingerprint:
    changes = plan_identity.differences(plan.model, mine)
    if plan.model.dims == mine.dims and plan.model.variables == (
        mine.variables):
      # The same dims and variables: the stage graphs or the pipeline
      # itself (its schedule, split, chunks) are another.
      changes = [f"{FIELD} (its schedule, split or chunks) is not the "
                 "pipeline the plan was made and priced for"]
    pipe = plan.training.pipeline.pipeline
    raise PlanMismatchError(
        f"the pipelined step of plan {plan.model.name!r} rebuilt for its "
        f"{FIELD} (stages={pipe.stages}, chunks={pipe.chunks}, "
        f"microbatches={pipe.microbatches}, schedule={pipe.schedule.value}"
        f", split="
        f"{'/'.join(map(str, pipe.split))}) is not "
        f"{what or 'the step it was made for'}: "
        + "; ".join(changes[:4]) + f"; {FIELD} or the model changed since "
        "it was saved: solve again (the old plan can seed the solver as a "
        "hint)", changes)
  return costs_of(priced)


def check_model(plan, config, graph, what):
  """Raises :class:`PlanMismatchError` unless ``graph`` is the forward
  graph of ``config`` (the zoo model the pipelined plan's stages split),
  or one of the plan's stage graphs."""
  mine = plan_identity.model_identity(graph, "the graph")
  base = plan_identity.model_identity(config.build().graph, "the model")
  if mine.fingerprint == base.fingerprint:
    return
  have = {v.name for v in plan.model.variables}
  missing = sorted({v.name for v in mine.variables} - have)
  raise PlanMismatchError(
      f"{what} is neither the model of pipelined plan "
      f"{plan.model.name!r} nor built from it"
      + (f" (variables the plan lacks: {missing[:4]})" if missing else "")
      + "; give the zoo model the plan names, or solve again",
      missing or ["the graph differs from the plan's model"])


def one_stage_plan(priced, config, topology, name="model", source=None,
                   solver=None):
  """The plan of a one-stage answer of the pipelined space (no pipeline):
  an unpipelined training plan of the same tensor and data sizes, ZeRO
  stage, recompute and microbatches (gradient accumulation), priced by
  :func:`costmodels.evaluate` on the chips it uses (its costs are the
  layout cost model's, which the plan's readers reprice with).

  Raises:
    PlanFormatError: for a padded batch (the step as built takes whole
      microbatches only) or a layout with more than one stage.
  """
  import costmodels
  from autolayout.plans.plan import make_plan
  from autolayout.training.build import build_training
  lay = priced.layout
  if priced.cost.pipeline is not None:
    raise PlanFormatError(f"the layout {lay.describe()} has "
                          f"{lay.stages} stages; use plan_of_price")
  if priced.padded_sequences:
    raise PlanFormatError(
        f"the one-stage layout {lay.describe()} pads the batch with "
        f"{priced.padded_sequences} rows, which an unpipelined step cannot "
        "run; give a batch of whole microbatches or save a pipelined plan")
  d = TrainingDecisions("bfloat16", lay.zero,
                        config.layers if lay.recompute == "full" else 0,
                        priced.microbatches)
  t = build_training(config, d)
  axes = [(pp.DATA_AXIS, lay.data), (pp.MODEL_AXIS, lay.model)]
  mesh = mesh_lib.MeshShape(axes[::-1] if lay.placement == "outer"
                            else axes)
  topo = pp.sub_topology(get_topology(topology), lay.chips)
  rules = storage_rules(config, lay)
  report = costmodels.evaluate(t.graph, mesh, rules, topo,
                               microbatches=t.plan)
  return make_plan(t.graph, mesh, rules, topo, report, name=name,
                   solver=solver, decisions=d, source=source)
