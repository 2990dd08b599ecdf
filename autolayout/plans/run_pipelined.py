"""Running a pipelined plan on the devices at hand
(:func:`autolayout.plans.run.run_plan` hands pipelined plans here).

:func:`run_pipelined` checks the plan against its model (the program of
stage graphs rebuilt for its decisions has the plan's fingerprint, so the
step that runs is the step that was priced), builds a
:class:`mesh_tf.pipeline.PipelineTrainStep` of the plan's pipeline, mesh
and rules on the devices (the ZeRO stage as storage, Adam with weight
decay), runs warm-up steps and then timed steps on one fixed batch, and
returns a :class:`~autolayout.plans.run.RunReport` with the pipelined
prediction on the devices' own share of the topology.

:func:`scale_down` fits the plan's mesh to fewer devices keeping at least
two stages: the other axes shrink first; when the stage axis shrinks, the
layers are split again over the fewer stages (evenly where they divide,
else balanced by :func:`costmodels.pipeline.split_layers`).
"""

import dataclasses
import itertools
import math

import numpy as np

from costmodels import pipeline as cm_pipeline
from mesh_tf.core import mesh_shape as mesh_lib
from mesh_tf.pipeline.spec import Pipeline
from autolayout.errors import PlanError
from autolayout.plans import decisions as plan_decisions
from autolayout.plans import pipelined
from autolayout.plans.run_report import (RunReport, scale_topology,
                                         timed_steps)
from autolayout.training import zero

__all__ = ["batch_for", "build_step", "run_pipelined", "scale_down",
           "scaled_plan"]


def scale_down(plan, devices):
  """The mesh of ``plan`` (pipelined) that fits ``devices``: each axis a
  divisor of its size, the stage axis at least 2, the most devices, then
  the most stages, then the least shrunk axis, then the inner axes kept
  (tensor parallelism stays on the node's fast link).

  Raises:
    PlanError: if fewer than 2 devices are at hand (no pipeline fits).
  """
  mesh = plan.mesh_shape
  axis = plan.training.pipeline.pipeline.axis
  old = [d.size for d in mesh.dims]
  choices = [[q for q in range(2 if d.name == axis else 1, s + 1)
              if s % q == 0] for d, s in zip(mesh.dims, old)]
  fits = [c for c in itertools.product(*choices) if math.prod(c) <= devices]
  if not fits:
    raise PlanError(f"pipelined plan of {plan.model.name!r} needs at least "
                    f"2 devices (2 stages on mesh axis {axis!r}); "
                    f"{devices} are at hand")
  stage = mesh.dimension_names.index(axis)
  best = max(fits, key=lambda c: (math.prod(c), c[stage],
                                  min(q / s for q, s in zip(c, old)),
                                  tuple(reversed(c))))
  return mesh_lib.MeshShape([(d.name, q) for d, q in zip(mesh.dims, best)])


def scaled_plan(plan, mesh_shape, topology):
  """``plan`` on ``mesh_shape`` (a :func:`scale_down`) of ``topology``:
  its pipeline over the stage axis's new size (the layers split again if
  it shrank) and no idle chips."""
  value = plan.training.pipeline
  pipe = value.pipeline
  q = dict(zip(mesh_shape.dimension_names,
               mesh_shape.to_integer_list()))[pipe.axis]
  if q != pipe.stages:
    groups = q * pipe.chunks
    split = (None if pipe.layers % groups == 0 else
             cm_pipeline.split_layers(pipe.layers, groups))
    pipe = Pipeline(pipe.axis, q, pipe.microbatches, pipe.layers,
                    pipe.chunks, pipe.schedule, split)
  value = dataclasses.replace(value, pipeline=pipe,
                              idle_chips=topology.num_chips - mesh_shape.size)
  return dataclasses.replace(
      plan, mesh_shape=mesh_shape, topology=topology,
      training=plan.training._replace(pipeline=value))


def build_step(plan, config, devices, *, learning_rate=1e-3, eager=False):
  """The :class:`mesh_tf.pipeline.PipelineTrainStep` that pipelined
  ``plan`` (of zoo ``config``, on a mesh of ``len(devices)``) prices: its
  pipeline, mesh and rules, the ZeRO stage as storage, Adam with weight
  decay, and the batch's padding."""
  from mesh_tf import models
  from mesh_tf.pipeline import PipelineTrainStep
  from mesh_tf.training import optimize
  d = plan.training
  return PipelineTrainStep(
      models.transformer_parts(pipelined.step_config(config, d)),
      d.pipeline.pipeline, plan.mesh_shape, plan.rules, list(devices),
      optimize.AdamWeightDecayOptimizer(learning_rate),
      zero.storage_plan(d.zero_stage) if d.zero_stage else None,
      eager=eager, padding=pipelined.padding_of(config, d))


def batch_for(step, vocab, seed=0):
  """One fixed batch of token ids for every input of ``step`` (its real
  rows: the step pads them), so that the loss of repeated steps must go
  down."""
  rng = np.random.RandomState(seed)
  return {n: rng.randint(0, vocab, size=tuple(s.shape)).astype(
      s.dtype.as_numpy_dtype) for n, s in zip(step.input_names, step._specs)}


def _state_bytes(step, devices):
  """Bytes of every stage's variables on each device (the real TF
  variables, read from the stage backends after they are created)."""
  index = {d: i for i, d in enumerate(devices)}
  out = [0] * len(devices)
  for impl in step.impls:
    for v in impl.variables.values():
      for p, s in enumerate(v.slices):
        out[index[impl.devices[p]]] += (int(s.shape.num_elements())
                                        * s.dtype.size)
  return tuple(out)


def run_pipelined(plan, devices, warmup=2, steps=5, mesh_shape=None,
                  topology=None, allocator_peak=None, *,
                  learning_rate=1e-3, eager=False):
  """Runs pipelined ``plan`` on ``devices``; returns a
  :class:`~autolayout.plans.run.RunReport` (arguments as
  :func:`autolayout.plans.run.run_plan`; ``eager``: run the step's
  lowering op by op instead of one traced ``tf.function``, the same ops
  and results: for a tiny model the trace takes most of the run).

  Raises:
    PlanError: for a plan naming no zoo model, or a mesh the topology
      cannot be cut to.
    PlanMismatchError: if the program rebuilt is not the one priced.
  """
  config = plan_decisions.config_of(plan)
  if config is None:
    raise PlanError(f"pipelined plan of {plan.model.name!r} names no zoo "
                    "model to build")
  pipelined.check(plan, config)
  mesh = mesh_shape or plan.mesh_shape
  own = scale_topology(plan.topology, mesh.size)
  if own is None:
    raise PlanError(f"plan's topology {plan.topology.name} cannot be cut to "
                    f"the {mesh.size} chips of mesh {mesh.text}")
  here = scaled_plan(plan, mesh, own)
  costs = pipelined.costs_of(pipelined.price(here, config))
  step = build_step(here, config, devices, learning_rate=learning_rate,
                    eager=eager)
  batch = batch_for(step, config.vocab)
  losses, first, times, peaks = timed_steps(step, batch, warmup, steps,
                                            allocator_peak)
  repriced = None
  if topology is not None:
    repriced = pipelined.costs_of(pipelined.price(
        scaled_plan(plan, mesh, topology), config)).step_time_s
  return RunReport(
      plan.model.name, mesh.text, tuple(devices), warmup, tuple(times),
      tuple(losses), float(costs.step_time_s), own.name, repriced,
      None if topology is None else topology.name,
      int(dict(costs.memory_by_category)["weights_and_optimizer"]),
      _state_bytes(step, list(devices)), int(costs.peak_memory_bytes), peaks,
      here.decisions, first,
      pipeline={k: list(v) if isinstance(v, tuple) else v
                for k, v in costs.pipeline})
