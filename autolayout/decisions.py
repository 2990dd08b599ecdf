"""Training decisions beyond the layout rules: precision, sharded storage,
recompute and microbatching, searched around the CP-SAT layout program.

A :class:`TrainingDecisions` value fixes the four families the issue names:

* ``param_dtype``: the compute dtype of weights and activations (float32
  masters, see :class:`mesh_tf.VariableDType`);
* ``zero_stage``: 0-3, how variables are stored (:mod:`mesh_tf.storage`);
  *which* axes the storage splits is a layout decision of the CP-SAT
  program itself (the rules for the ``*_storage`` dims), shared by all
  repeated layers;
* ``recompute``: how many of the L blocks recompute their activations;
* ``microbatches``: k, gradient accumulation (:mod:`mesh_tf.microbatch`).

Each choice changes the graph (its ops, their repeats), so a candidate is a
graph built by :func:`build_training`, and the CP-SAT program of that graph
chooses the layout rules under the memory budget.  :func:`search_training`
compares candidates by the program's optimum (which equals
``costmodels.evaluate`` of its answer): all of them (``exhaustive``, for
small graphs, where it equals brute force over decisions and rules), or a
greedy walk for large models: the most memory-saving candidate first
(stage 3, every block recomputed), doubling k until it fits and on while
the step gets faster (fewer rows per device can free a better layout),
then relaxing recompute and the stage at the best k while it gets faster.

Example:
  >>> from mesh_tf import models
  >>> cfg = models.get_config("transformer_tiny")
  >>> plan = search_training(cfg, "data:2;model:4", "dgx-h100",
  ...                        exhaustive=True)        # doctest: +SKIP
  >>> plan.decisions.as_dict()                       # doctest: +SKIP
  {'param_dtype': 'bfloat16', 'zero_stage': 0, 'recompute': 0, ...}
"""

import dataclasses
import itertools
import time
from typing import Any, NamedTuple, Optional, Tuple

from mesh_tf.core.errors import MtfError
from autolayout.errors import InfeasibleLayoutError

__all__ = ["TrainingDecisions", "TrainingGraph", "TrainingPlan",
           "build_training", "search_training"]


class TrainingDecisions(NamedTuple):
  """One choice of the non-layout decisions (a hashable value)."""
  param_dtype: str = "float32"
  zero_stage: int = 0
  recompute: int = 0
  microbatches: int = 1

  def as_dict(self):
    """The decisions as a plain mapping (for plan files and JSON)."""
    return dict(self._asdict())


class TrainingGraph(NamedTuple):
  """A training step built for one :class:`TrainingDecisions`."""
  decisions: TrainingDecisions
  model: Any            # the ModelGraph (built at the microbatch size)
  plan: Any             # mesh_tf.microbatch.MicrobatchPlan
  update: Any           # mesh_tf.microbatch.MicrobatchedUpdate

  @property
  def graph(self):
    return self.model.graph


class TrainingPlan(NamedTuple):
  """What :func:`search_training` chose, and every candidate it solved:
  ``tried`` holds ``(decisions, step time s or None if infeasible,
  build + solve seconds)``."""
  decisions: TrainingDecisions
  result: Any           # the LayoutResult of the chosen candidate
  training: TrainingGraph
  tried: Tuple[Tuple[TrainingDecisions, Optional[float], float], ...]


def build_training(config, decisions, learning_rate=1e-4):
  """The training step of zoo ``config`` under ``decisions`` (Adam with
  weight decay).

  Raises:
    MtfError: if the batch does not split into the microbatches, or
      ``recompute`` exceeds the layers.
  """
  from mesh_tf import optimize, storage
  from mesh_tf.microbatch import microbatched_update
  k = decisions.microbatches
  if config.batch % k:
    raise MtfError(f"batch={config.batch} does not split into "
                   f"microbatches={k}; use a divisor of the batch")
  cfg = dataclasses.replace(
      config, batch=config.batch // k, recompute=decisions.recompute,
      param_dtype=(None if decisions.param_dtype == config.master_dtype
                   else decisions.param_dtype))
  model = cfg.build()
  storage.shard_storage(model.graph, decisions.zero_stage)
  update = microbatched_update(
      model.graph, model.loss, model.graph.trainable_variables,
      optimize.AdamWeightDecayOptimizer(learning_rate), k)
  return TrainingGraph(decisions, model, update.plan, update)


def _solve(config, decisions, mesh_shape, topology, memory_budget,
           time_limit_s, forbid, memory_reserve_fraction):
  from autolayout.solve import LayoutSearch
  training = build_training(config, decisions)
  search = LayoutSearch(training.graph, microbatches=training.plan,
                        memory_reserve_fraction=memory_reserve_fraction)
  result = search.solve(mesh_shape, topology, memory_budget,
                        time_limit_s=time_limit_s, forbid=forbid)
  return training, dataclasses.replace(result, decisions=decisions)


def _better(step, d, best_step, best_d):
  """Faster wins; equal times (to 1e-9) go to the simpler decisions (lower
  stage, fewer recomputed blocks, fewer microbatches)."""
  if abs(step - best_step) > 1e-9 * max(step, best_step):
    return step < best_step
  return (d.zero_stage, d.recompute, d.microbatches) < (
      best_d.zero_stage, best_d.recompute, best_d.microbatches)


def _divisors(n, most):
  return [k for k in range(1, min(n, most) + 1) if n % k == 0]


def search_training(config, mesh_shape, topology, memory_budget=None,
                    fixed=None, exhaustive=False, param_dtype="bfloat16",
                    max_microbatches=64, time_limit_s=60.0, forbid=(),
                    progress=None, memory_reserve_fraction=None):
  """The fastest training plan of zoo ``config`` that fits the budget.

  Args:
    config: a Transformer-family zoo config (``mesh_tf.models``).
    mesh_shape, topology, memory_budget: as :func:`autolayout.auto_layout`.
    fixed: ``{decision name: value}`` the caller fixes (e.g.
      ``{"zero_stage": 3}``); the others are searched.
    exhaustive: solve every candidate (stages 0-3, recompute 0..L, every
      k up to 4 dividing the batch) instead of the greedy walk.
    param_dtype: the compute dtype unless fixed.
    max_microbatches: the largest k the greedy walk tries.
    time_limit_s: CP-SAT limit per candidate.
    forbid: ``(dim, axis)`` rules no candidate may use.
    progress: optional ``fn(decisions, step_time_s or None)`` per candidate.
    memory_reserve_fraction: the reserve the reports show (default: the
      costmodels default).

  Returns:
    A :class:`TrainingPlan`.

  Raises:
    InfeasibleLayoutError: if no candidate fits ``memory_budget`` (the last
      one's error, which states its smallest peak).
    MtfError: for an unknown decision name in ``fixed``.
  """
  fixed = dict(fixed or {})
  bad = sorted(set(fixed) - set(TrainingDecisions._fields))
  if bad:
    raise MtfError(f"unknown training decisions {bad}; use "
                   f"{list(TrainingDecisions._fields)}")
  fixed.setdefault("param_dtype", param_dtype)
  layers = config.layers
  tried, best = [], None
  last_error = [None]

  def attempt(d):
    for done, t, _ in tried:
      if done == d:
        return t
    t0 = time.perf_counter()
    try:
      training, result = _solve(config, d, mesh_shape, topology,
                                memory_budget, time_limit_s, forbid,
                                memory_reserve_fraction)
    except InfeasibleLayoutError as e:
      last_error[0] = e
      tried.append((d, None, time.perf_counter() - t0))
      if progress:
        progress(d, None)
      return None
    step = result.report.step_time_s
    tried.append((d, step, time.perf_counter() - t0))
    if progress:
      progress(d, step)
    nonlocal best
    if best is None or _better(step, d, best[1].report.step_time_s,
                               best[0].decisions):
      best = (training, result)
    return step

  def make(**kw):
    values = dict(kw)
    values.update(fixed)
    return TrainingDecisions(**values)

  if exhaustive:
    stages = [fixed["zero_stage"]] if "zero_stage" in fixed else [0, 1, 2, 3]
    recs = ([fixed["recompute"]] if "recompute" in fixed
            else list(range(layers + 1)))
    ks = ([fixed["microbatches"]] if "microbatches" in fixed
          else _divisors(config.batch, 4))
    for s, r, k in itertools.product(stages, recs, ks):
      attempt(make(zero_stage=s, recompute=r, microbatches=k))
  else:
    d = make(zero_stage=3, recompute=layers, microbatches=1)
    ks = ([fixed["microbatches"]] if "microbatches" in fixed else
          [k for k in _divisors(config.batch, max_microbatches)
           if k & (k - 1) == 0])
    found = None
    for k in ks:
      t = attempt(d._replace(microbatches=k))
      if t is None:
        if found is None:
          continue
        break
      if found is not None and t >= found:
        break   # more microbatches stopped paying (repeated gathers)
      found = t
    if best is not None:
      cur = best[0].decisions
      # Relax recompute (halving) while it fits and gets faster.
      r = cur.recompute
      while "recompute" not in fixed and r > 0:
        r //= 2
        cand = cur._replace(recompute=r)
        t = attempt(cand)
        if t is None or t > best[1].report.step_time_s:
          break
        cur = cand
      for s in (1, 2):
        if "zero_stage" not in fixed:
          attempt(cur._replace(zero_stage=s))
  if best is None:
    raise last_error[0] or InfeasibleLayoutError(
        "no training plan candidate was solved")
  training, result = best
  return TrainingPlan(training.decisions, result, training, tuple(tried))
