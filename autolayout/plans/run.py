"""Running a plan on the devices at hand, and holding it to its prediction.

:func:`run_plan` builds the step the plan priced -- the zoo model of its
source, with its training decisions applied (parameter dtype, recompute,
ZeRO storage, microbatches) -- as a :class:`mesh_tf.training.TrainStep` on
real devices with the plan's mesh and rules, checks that the step's graph
has the plan's fingerprint (so the step that runs is the step that was
priced), runs warm-up steps and then timed steps on one fixed batch (so the
loss must go down), and returns a :class:`RunReport`: predicted against
measured step time, the per-device bytes of the step's variables (weights,
optimizer state, gradient accumulators: what the cost model's trace
records per variable), and the device allocator's
peak where the devices keep one (GPUs; TensorFlow's CPU allocator keeps no
statistics).

:func:`scale_down` turns a plan's mesh into one that fits fewer devices
with the same axis names, so the same rules apply.

TensorFlow is reached through :mod:`mesh_tf` (the step and the devices),
never imported here.
"""

import itertools
import math

import numpy as np

import costmodels
from mesh_tf.core import mesh_shape as mesh_lib
from mesh_tf.core.errors import MtfError
from autolayout.errors import PlanError, PlanMismatchError
from autolayout.plans import decisions as plan_decisions
from autolayout.plans import identity as plan_identity
from autolayout.plans import pipelined, run_pipelined
from autolayout.plans.run_report import (RunReport, scale_topology,
                                         timed_steps)

__all__ = ["RunReport", "build_step", "check_devices", "run_plan",
           "scale_down", "scale_topology"]


def scale_down(mesh_shape, devices):
  """The mesh with the same axis names that fits ``devices``: each axis's
  new size divides its old one (so every dim the rules split still splits
  evenly), the most devices that fit, and among those the one that shrinks
  its most-shrunk axis least.

  Raises:
    PlanError: if ``devices`` < 1.
  """
  if devices < 1:
    raise PlanError(f"cannot scale a mesh down to {devices} devices")
  old = [d.size for d in mesh_shape.dims]
  choices = [[q for q in range(1, s + 1) if s % q == 0] for s in old]
  best = max((c for c in itertools.product(*choices)
              if math.prod(c) <= devices),
             key=lambda c: (math.prod(c), min(q / s for q, s in zip(c, old)),
                            c))
  return mesh_lib.MeshShape([(d.name, q)
                             for d, q in zip(mesh_shape.dims, best)])


def _mesh_text(mesh):
  return ";".join(f"{d.name}:{d.size}" for d in mesh.dims)


def build_step(plan, devices, mesh_shape=None, learning_rate=1e-3):
  """``(TrainStep, ModelGraph, k)`` of the step ``plan`` priced, on
  ``devices`` (``mesh_shape``: default the plan's).

  Raises:
    PlanError: for a plan that names no zoo model, or whose source is not
      a training step.
    PlanMismatchError: if the step built is not the graph the plan priced.
  """
  import dataclasses as dc  # pylint: disable=g-import-not-at-top
  from mesh_tf.lowering.placement import PlacementMeshImpl
  from mesh_tf.training import TrainStep, optimize, storage
  from autolayout.training import zero
  config = plan_decisions.config_of(plan)
  src = plan_decisions.source_of(plan) or {}
  if config is None:
    raise PlanError(f"plan of {plan.model.name!r} names no zoo model to "
                    "build (its model.source is missing or a user file); "
                    "run it with mesh_tf.training.TrainStep yourself")
  decisions = plan_decisions.decisions_of(plan.decisions)
  k = 1
  if decisions is not None:
    k = decisions.microbatches
    config = dc.replace(
        config, batch=config.batch // k, recompute=decisions.recompute,
        param_dtype=(None if decisions.param_dtype == config.master_dtype
                     else decisions.param_dtype))
  elif not src.get("train", True):
    raise PlanError(f"plan of {plan.model.name!r} is a forward pass's; "
                    "`run` runs training steps (solve it with --train)")
  model = config.build()
  if decisions is not None:
    storage.shard_storage(model.graph,
                          zero.storage_plan(decisions.zero_stage))
  mesh_shape = mesh_shape or plan.mesh_shape
  impl = PlacementMeshImpl(mesh_shape, plan.rules, list(devices))
  step = TrainStep(model.graph, model.mesh, model.loss, dict(model.inputs),
                   impl, optimize.AdamWeightDecayOptimizer(learning_rate),
                   microbatches=k)
  fp = plan_identity.fingerprint(model.graph)
  if fp != plan.model.fingerprint:
    mine = plan_identity.model_identity(model.graph, plan.model.name)
    raise PlanMismatchError(
        f"the step built to run plan {plan.model.name!r} is not the graph "
        "it priced: " + "; ".join(plan_identity.differences(plan.model,
                                                            mine)[:4]),
        plan_identity.differences(plan.model, mine))
  return step, model, k


def _batch(model, k, seed=0):
  """One fixed batch of ``k`` microbatches (rows stacked on the first
  dim), so that the loss of repeated steps must go down."""
  parts = [model.random_values(seed + i) for i in range(k)]
  return {n: np.concatenate([p[n] for p in parts], axis=0)
          for n in parts[0]}


def _state_bytes(step, devices):
  """Bytes of the step's variables on each device (the real TF variables'
  shapes and dtypes, read from the backend after they are created)."""
  out = [0] * len(devices)
  for v in step.mesh_impl.variables.values():
    for p, s in enumerate(v.slices):
      out[p] += int(s.shape.num_elements()) * s.dtype.size
  return tuple(out)


def run_plan(plan, devices, warmup=2, steps=5, mesh_shape=None,
             topology=None, allocator_peak=None, eager=False):
  """Runs ``plan``'s training step on ``devices`` (TF device names) and
  returns a :class:`RunReport`.

  Args:
    plan: a :class:`~autolayout.plans.plan.Plan` of a zoo model.
    devices: one TF device name per mesh processor.
    warmup, steps: untimed then timed steps (all on one batch).
    mesh_shape: a smaller mesh with the plan's axis names
      (:func:`scale_down`), or None for the plan's.
    topology: a :class:`costmodels.Topology` of the devices at hand (e.g. a
      calibrated file) to price the plan on as well.
    allocator_peak: ``(reset, read)`` callables giving each device's
      allocator peak in bytes (GPUs), or None.
    eager: a pipelined plan's step runs op by op, not traced (see
      :func:`autolayout.plans.run_pipelined.run_pipelined`).

  Raises:
    PlanError, PlanMismatchError: see :func:`build_step`.
  """
  if warmup < 0 or steps < 1:
    raise PlanError(f"warmup={warmup} and steps={steps}: give warmup >= 0 "
                    "and steps >= 1")
  if pipelined.is_pipelined(plan):
    # A program of stage graphs: a PipelineTrainStep.
    return run_pipelined.run_pipelined(plan, devices, warmup, steps,
                                       mesh_shape, topology, allocator_peak,
                                       eager=eager)
  step, model, k = build_step(plan, devices, mesh_shape)
  batch = _batch(model, k)
  losses, first, times, peaks = timed_steps(step, batch, warmup, steps,
                                            allocator_peak)
  built = plan_decisions.BuiltPlan(step.graph, None, step.plan,
                                   plan_decisions.decisions_of(
                                       plan.decisions), None)
  mesh = mesh_shape or plan.mesh_shape
  own = scale_topology(plan.topology, mesh.size)
  if own is None:
    raise PlanError(f"plan's topology {plan.topology.name} cannot be cut to "
                    f"the {mesh.size} chips of mesh {_mesh_text(mesh)}")
  report = costmodels.evaluate(step.graph, mesh, plan.rules, own,
                               microbatches=built.microbatches)
  repriced = None
  if topology is not None:
    repriced = costmodels.evaluate(step.graph, mesh, plan.rules, topology,
                                   microbatches=built.microbatches)
  # Every variable's slice per device, as the lowering's shape backend
  # records it: weights, optimizer state and gradient accumulators.
  state = int(sum(report.variable_bytes_per_device.values()))
  return RunReport(
      plan.model.name, _mesh_text(mesh), tuple(devices), warmup,
      tuple(times), tuple(losses), float(report.step_time_s), own.name,
      None if repriced is None else float(repriced.step_time_s),
      None if topology is None else topology.name, state,
      _state_bytes(step, devices), int(report.peak_memory_bytes), peaks,
      None if built.decisions is None else dict(plan.decisions), first)


def check_devices(plan, available, scale=False):
  """The mesh to run ``plan`` on with ``available`` devices: its own, or
  with ``scale`` a smaller one (:func:`scale_down`).

  Raises:
    PlanError: naming the devices the plan needs when there are fewer.
  """
  need = plan.mesh_shape.size
  if need <= available:
    return plan.mesh_shape
  if not scale:
    raise PlanError(
        f"plan of {plan.model.name!r} is for mesh "
        f"{_mesh_text(plan.mesh_shape)}: it needs {need} devices, and "
        f"{available} are at hand")
  try:
    if pipelined.is_pipelined(plan):
      return run_pipelined.scale_down(plan, available)
    return scale_down(plan.mesh_shape, available)
  except MtfError as e:
    raise PlanError(str(e)) from None
