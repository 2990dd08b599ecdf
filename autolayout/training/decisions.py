"""Training decisions beyond the layout rules: precision, sharded storage,
recompute and microbatching, searched with the CP-SAT layout program.

A :class:`TrainingDecisions` value fixes the four families the issue names:

* ``param_dtype``: the compute dtype of weights and activations (float32
  masters, see :class:`mesh_tf.VariableDType`);
* ``zero_stage``: 0-3, how variables are stored (:mod:`mesh_tf.training.storage`),
  for every variable or per variable group (attention, embedding, ffn,
  norm; :mod:`autolayout.training.stage_groups`); *which* axes the storage splits
  is a layout decision of the CP-SAT program itself (the rules for the
  ``*_storage`` dims), shared by all repeated layers;
* ``recompute``: how many of the L blocks recompute their activations;
* ``microbatches``: k, gradient accumulation (:mod:`mesh_tf.training.microbatch`).

Each choice changes the graph (its ops, their repeats), so a candidate is a
graph built by :func:`build_training` and priced by its own
:class:`~autolayout.search.solve.LayoutSearch`.  :func:`search_training` picks
the stage and the recompute count per microbatch count
(:func:`solve_decisions`): the candidates' own programs solved in turn,
each with the incumbent's step time as a cutoff
(:mod:`autolayout.training.candidate_search`; the same optimum as one joint CP-SAT
program with one-hot decision variables, :mod:`autolayout.training.decision_program`,
at a fraction of its time), and walks k outside as phases: from 1 (or
``min_microbatches``) until one fits and on while the step gets faster.  ``exhaustive=True`` instead solves every candidate alone (stages
0-3, recompute 0..L, k up to 4), the reference the tests compare with.
Without a mesh, :mod:`autolayout.meshes.training_meshes` searches mesh shapes
too.

Example:
  >>> from mesh_tf import models
  >>> cfg = models.get_config("transformer_tiny")
  >>> plan = search_training(cfg, "data:2;model:4", "dgx-h100")
  ...                                                # doctest: +SKIP
  >>> plan.decisions.as_dict()                       # doctest: +SKIP
  {'param_dtype': 'bfloat16', 'zero_stage': 0, 'recompute': 0, ...}
"""

import dataclasses
import itertools
import time
from typing import Any, NamedTuple, Optional, Tuple

from costmodels import arguments as cm_args
from mesh_tf.core.errors import MtfError
from mesh_tf.core.mesh_shape import convert_to_mesh_shape
from autolayout import arguments
from autolayout.search import infeasible
from autolayout.training import stage_groups
from autolayout.errors import InfeasibleLayoutError, TimeLimitError

__all__ = ["TrainingDecisions", "TrainingGraph", "TrainingPlan",
           "build_training", "search_training"]


class TrainingDecisions(NamedTuple):
  """One choice of the non-layout decisions (a hashable value).
  ``zero_stage`` is an int (every variable) or a sorted tuple of
  ``(group, stage)`` (:func:`autolayout.training.stage_groups.normalize`)."""
  param_dtype: str = "float32"
  zero_stage: Any = 0
  recompute: int = 0
  microbatches: int = 1

  def as_dict(self):
    """The decisions as a plain mapping (for plan files and JSON); a
    per-group stage is ``{group: stage}``."""
    out = dict(self._asdict())
    out["zero_stage"] = stage_groups.as_json(self.zero_stage)
    return out


class TrainingGraph(NamedTuple):
  """A training step built for one :class:`TrainingDecisions`."""
  decisions: TrainingDecisions
  model: Any            # the ModelGraph (built at the microbatch size)
  plan: Any             # mesh_tf.training.microbatch.MicrobatchPlan
  update: Any           # mesh_tf.training.microbatch.MicrobatchedUpdate

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
  from mesh_tf.training import optimize, storage
  from mesh_tf.training.microbatch import microbatched_update
  k = decisions.microbatches
  if config.batch % k:
    raise MtfError(f"batch={config.batch} does not split into "
                   f"microbatches={k}; use a divisor of the batch")
  cfg = dataclasses.replace(
      config, batch=config.batch // k, recompute=decisions.recompute,
      param_dtype=(None if decisions.param_dtype == config.master_dtype
                   else decisions.param_dtype))
  model = cfg.build()
  storage.shard_storage(model.graph,
                        stage_groups.storage_plan(decisions.zero_stage))
  update = microbatched_update(
      model.graph, model.loss, model.graph.trainable_variables,
      optimize.AdamWeightDecayOptimizer(learning_rate), k)
  return TrainingGraph(decisions, model, update.plan, update)


class Candidates:
  """The candidate training graphs of one zoo config, built on first use
  and kept for this object's lifetime (the caller owns it): each
  :class:`TrainingDecisions` maps to its :class:`TrainingGraph` and a
  :class:`~autolayout.search.solve.LayoutSearch`, whose tables serve every mesh
  it is asked on.  :meth:`trim` forgets those of another microbatch count
  (their graphs are built at another batch size)."""

  def __init__(self, config, memory_reserve_fraction=None):
    self.config = config
    self.memory_reserve_fraction = memory_reserve_fraction
    self._built = {}
    # Op outcomes per (mesh, topology), shared by every candidate's tables:
    # the candidates repeat most of each other's ops.
    self._outcomes = {}

  def get(self, decisions):
    """``(TrainingGraph, LayoutSearch)`` of ``decisions``."""
    from autolayout.search.solve import LayoutSearch
    hit = self._built.get(decisions)
    if hit is None:
      training = build_training(self.config, decisions)
      hit = self._built[decisions] = (training, LayoutSearch(
          training.graph, microbatches=training.plan,
          memory_reserve_fraction=self.memory_reserve_fraction,
          outcomes=self._outcomes))
    return hit

  def trim(self, keep_microbatches, most=24):
    """Forgets the candidates whose k is not ``keep_microbatches`` once more
    than ``most`` graphs are kept (a GPT-3 step graph is tens of MiB)."""
    if len(self._built) > most:
      for d in [d for d in self._built
                if d.microbatches != keep_microbatches]:
        del self._built[d]


def _solve(config, decisions, mesh_shape, topology, memory_budget,
           time_limit_s, forbid, memory_reserve_fraction, overlap,
           candidates=None):
  candidates = candidates or Candidates(config, memory_reserve_fraction)
  training, search = candidates.get(decisions)
  result = search.solve(mesh_shape, topology, memory_budget,
                        time_limit_s=time_limit_s, forbid=forbid,
                        overlap=overlap)
  return training, dataclasses.replace(result, decisions=decisions)


def recompute_choices(layers, count=5):
  """The recompute counts the decision program offers: ``count`` evenly
  spaced counts from 0 to ``layers`` (for 96 layers and 5: 0, 24, 48, 72,
  96)."""
  if count < 2 or layers == 0:
    return (0, layers) if layers else (0,)
  return tuple(sorted({layers * i // (count - 1) for i in range(count)}))


def solve_decisions(candidates, decision_list, mesh_shape, topology,
                    memory_budget, time_limit_s=60.0, forbid=(),
                    overlap=True, joint=False, first=None, explain=True):
  """The fastest of ``decision_list`` (stage and recompute choices at one
  microbatch count and dtype) and its layout.

  By default the candidates' own programs are solved one at a time,
  simplest first, each after the first with the incumbent's step time as
  a cutoff (:mod:`autolayout.training.candidate_search`): the same answer as one
  CP-SAT program in which the stage and the recompute count are decision
  variables (``joint=True``, :mod:`autolayout.training.decision_program`; it needs
  every (stage, recompute) pair), in a fraction of the time.  ``first``:
  a likely winner's decisions, tried first (only the order changes).

  Returns ``(TrainingGraph, LayoutResult)``.

  Raises:
    InfeasibleLayoutError: if no pair fits the budget (with the smallest
      peak of the most memory-saving pair; with ``explain=False``, without
      it: :func:`explain_infeasible` finds it when a caller needs it).
  """
  from autolayout.training import candidate_search
  from autolayout.training import decision_program as dp
  from autolayout.search.solve import DEFAULT_NUM_WORKERS, DEFAULT_SEED
  # The time limit bounds building every candidate's graph and tables as
  # well as the programs' solves.
  deadline = time.perf_counter() + time_limit_s

  def problem_of(d):
    arguments.deadline_left(deadline, f"the training graph {d.as_dict()}")
    _, search = candidates.get(d)
    return search.problem(mesh_shape, topology, memory_budget,
                          overlap=overlap, deadline=deadline)

  try:
    if joint:
      cands = [dp.Candidate(d, problem_of(d)) for d in decision_list]
      program = dp.build_program(cands, memory_budget)
      left = arguments.deadline_left(deadline, "the decision program")
      index, result = dp.solve_program(program, memory_budget, left,
                                       DEFAULT_NUM_WORKERS, DEFAULT_SEED,
                                       forbid)
    else:
      index, result = candidate_search.solve_in_turn(
          decision_list, problem_of, memory_budget, deadline,
          DEFAULT_NUM_WORKERS, DEFAULT_SEED, forbid, first)
  except InfeasibleLayoutError:
    if explain:
      explain_infeasible(candidates, decision_list, mesh_shape, topology,
                         memory_budget, deadline - time.perf_counter(),
                         forbid, overlap)
    raise
  return candidates.get(decision_list[index])[0], result


def explain_infeasible(candidates, decision_list, mesh_shape, topology,
                       memory_budget, time_limit_s, forbid=(), overlap=True):
  """Raises the InfeasibleLayoutError of the most memory-saving of
  ``decision_list`` (every one of them over budget): its own search states
  the smallest peak and what dominates it.  A search and its build take
  seconds (transformer_tiny: 3.4 s of the README plan's 27.7), so the
  microbatch walk asks for it only when no k fits at all."""
  lean = max(decision_list, key=lambda d: (
      stage_groups.rank(d.zero_stage), d.recompute))
  _solve(candidates.config, lean, mesh_shape, topology, memory_budget,
         max(time_limit_s, 1e-3), forbid,
         candidates.memory_reserve_fraction, overlap, candidates)


def _better(step, d, best_step, best_d):
  """Faster wins; equal times (to 1e-9) go to the simpler decisions (lower
  stage, fewer recomputed blocks, fewer microbatches)."""
  if abs(step - best_step) > 1e-9 * max(step, best_step):
    return step < best_step
  rank = stage_groups.rank
  return (rank(d.zero_stage), d.recompute, d.microbatches) < (
      rank(best_d.zero_stage), best_d.recompute, best_d.microbatches)


GROUP_STAGE_SEARCHES = ("descent", "uniform", "all")
# Rounds of the descent over per-group stages (each moves one group's
# stage one step).
DESCENT_ROUNDS = 2
# The share of the time left that the microbatch walk may use when a
# descent follows it (GPT-3 on 1,024 A100s: the walk alone can use the
# whole default limit, and the descent would never run).
WALK_SHARE = 0.6


def _descend(training, recs, make, keep, left, cut, candidates, mesh_shape,
             topology, memory_budget, forbid, overlap):
  """Per-group stages by descent: from the best plan's decisions, a program
  over the stage choices that move one group's stage one step (and the
  current one), at the plan's k and its recompute count or the next lower one (a
  group sharded further can free the memory of fewer recomputed blocks);
  again from its answer while it changes, at most DESCENT_ROUNDS times."""
  d = training.decisions
  groups = stage_groups.groups_of(training.graph)
  if len(groups) < 2:
    return
  current, best = d.zero_stage, d
  lower = [r for r in recs if r < d.recompute]
  near = ([lower[-1]] if lower else []) + [d.recompute]
  for _ in range(DESCENT_ROUNDS):
    choices = [current] + stage_groups.neighbours(current, groups)
    pairs = [make(zero_stage=s, recompute=r, microbatches=d.microbatches)
             for s in choices for r in near]
    first = best if best in pairs else pairs[0]
    t0 = time.perf_counter()
    budget_s = left()
    if budget_s is None:
      return
    try:
      candidates.trim(d.microbatches, len(pairs) + 4)
      tg, result = solve_decisions(candidates, pairs, mesh_shape, topology,
                                   memory_budget, budget_s, forbid, overlap,
                                   first=first)
    except TimeLimitError:
      cut[0] = True
      return
    except InfeasibleLayoutError:
      return   # cannot happen: the current plan is among the choices
    keep(tg, result, time.perf_counter() - t0)
    if result.status != "optimal":
      cut[0] = True   # the time ran out within the round
      return
    if tg.decisions.zero_stage == current:
      return
    current, best = tg.decisions.zero_stage, tg.decisions


def _check_state(candidates, decisions, mesh_shape, memory_budget):
  """Raises InfeasibleLayoutError (with ``floor_bytes``) before any search
  when the variables of ``decisions``' graph cannot fit ``mesh_shape``
  even spread evenly (:func:`autolayout.search.infeasible.check_state_fits`).
  No candidate of the search does better: stages, recompute counts and
  dtypes leave the variables' bytes as they are, and more microbatches
  add gradient accumulators.  (GPT-3 175B on 8 chips: the walk over every
  k and shape took 60-140 s to find the smallest peak; this takes one
  graph.)"""
  if memory_budget is None:
    return
  training, _ = candidates.get(decisions)
  infeasible.check_state_fits(training.graph,
                              convert_to_mesh_shape(mesh_shape),
                              memory_budget, "the training step")


def _divisors(n, most):
  return [k for k in range(1, min(n, most) + 1) if n % k == 0]


def search_training(config, mesh_shape, topology, memory_budget=None,
                    fixed=None, exhaustive=False, param_dtype="bfloat16",
                    max_microbatches=64, time_limit_s=60.0, forbid=(),
                    progress=None, memory_reserve_fraction=None,
                    overlap=True, recompute_count=5, microbatch_choices=None,
                    candidates=None, min_microbatches=1, deadline=None,
                    group_stages="descent", stage_choices=None,
                    first_fit=False, start=None):
  """The fastest training plan of zoo ``config`` that fits the budget.

  By default, for each microbatch count k (a phase: powers of two dividing
  the batch, up to ``max_microbatches``, from 1 until one fits and on while
  the step gets faster) :func:`solve_decisions` chooses the ZeRO stage
  (0-3), the recompute count (``recompute_count`` even steps from 0 to L)
  and the layout rules together.

  Args:
    config: a Transformer-family zoo config (``mesh_tf.models``).
    mesh_shape, topology, memory_budget: as :func:`autolayout.auto_layout`.
    fixed: ``{decision name: value}`` the caller fixes (e.g.
      ``{"zero_stage": 3}``); the others are searched.
    exhaustive: solve every candidate alone (stages 0-3, recompute 0..L,
      every k up to 4 dividing the batch) instead of the decision program.
    param_dtype: the compute dtype unless fixed.
    max_microbatches: the largest k tried.
    time_limit_s: bounds the whole search: every candidate's graph and
      tables and every program.  When it runs out, the best plan found so
      far is returned with status "feasible" (TimeLimitError if none).
    deadline: a ``time.perf_counter()`` value that replaces
      ``time_limit_s`` (a caller's whole-search deadline).
    forbid: ``(dim, axis)`` rules no candidate may use.
    progress: optional ``fn(decisions, step_time_s or None)`` per program
      (per candidate if exhaustive).
    memory_reserve_fraction: the reserve the reports show (default: the
      costmodels default).
    overlap: hide gradient syncs under compute (False: every collective
      exposed), as :func:`autolayout.auto_layout`'s ``overlap``.
    recompute_count: how many recompute counts the program offers.
    microbatch_choices: the k to try, every one of them (default: the
      doubling walk above).
    candidates: a :class:`Candidates` of ``config`` to reuse (e.g. over
      several meshes); None: a new one.
    min_microbatches: the walk's first k (e.g. the smallest k at which the
      most memory-saving decisions fit: no smaller k can fit).
    group_stages: how the stage per variable group is searched
      (:mod:`autolayout.training.stage_groups`): ``"uniform"``, one stage for every
      variable; ``"all"``, every stage of every group in each program
      (``4 ** groups`` choices: small models); ``"descent"`` (default),
      the walk with uniform stages, then on the best k and recompute count
      programs over the choices that move one group's stage one step,
      while they find a faster plan.
    stage_choices: the ``zero_stage`` choices to offer, every one of them
      (ints or per-group mappings); overrides ``group_stages``.
    first_fit: stop the walk at the first k with a plan (a screen that
      ranks mesh shapes), instead of walking on while the step gets
      faster.
    start: the decisions of a plan in hand (e.g. a screen's), tried first
      in each program (at its k); only the order changes, so only a search
      that runs out of time can answer differently.

  Returns:
    A :class:`TrainingPlan`; ``tried`` has one row per k (the program's
    choice) or per candidate (exhaustive).

  Raises:
    InfeasibleLayoutError: if no candidate fits ``memory_budget`` (the last
      one's error, which states its smallest peak).
    MtfError: for an unknown decision name in ``fixed``, or an unknown
      ``group_stages``.
  """
  from mesh_tf.training.storage import STAGES
  fixed = dict(fixed or {})
  bad = sorted(set(fixed) - set(TrainingDecisions._fields))
  if bad:
    raise MtfError(f"unknown training decisions {bad}; use "
                   f"{list(TrainingDecisions._fields)}")
  if group_stages not in GROUP_STAGE_SEARCHES:
    raise MtfError(f"group_stages={group_stages!r} is not one of "
                   f"{GROUP_STAGE_SEARCHES}")
  if "zero_stage" in fixed:
    fixed["zero_stage"] = stage_groups.normalize(fixed["zero_stage"])
  fixed.setdefault("param_dtype", param_dtype)
  topology = arguments.resolve_topology(topology)
  memory_budget = cm_args.resolve_memory_budget(memory_budget, topology)
  layers = config.layers
  if candidates is None:
    candidates = Candidates(config, memory_reserve_fraction)
  if deadline is None:
    deadline = time.perf_counter() + time_limit_s
  tried, best = [], None
  over = None   # the walk's last k whose every pair is over budget
  last_error = [None]
  cut = [False]   # the time limit stopped the search before its end

  def left():
    """Seconds left, or None once the time is up (with a plan in hand;
    without one, TimeLimitError)."""
    now = deadline - time.perf_counter()
    if now > 0:
      return now
    if best is None:
      raise TimeLimitError(
          f"the time limit of {time_limit_s:g} s ran out before any "
          "training plan was found; raise the time limit")
    cut[0] = True
    return None

  def keep(training, result, elapsed):
    nonlocal best
    step = result.report.step_time_s
    tried.append((training.decisions, step, elapsed))
    if progress:
      progress(training.decisions, step)
    if best is None or _better(step, training.decisions,
                               best[1].report.step_time_s,
                               best[0].decisions):
      best = (training, result)
    return step

  def failed(d, e, elapsed):
    last_error[0] = e
    tried.append((d, None, elapsed))
    if progress:
      progress(d, None)

  def make(**kw):
    values = dict(kw)
    values.update(fixed)
    return TrainingDecisions(**values)

  stages = [fixed["zero_stage"]] if "zero_stage" in fixed else list(STAGES)
  if stage_choices is not None and "zero_stage" not in fixed:
    stages = list(dict.fromkeys(stage_groups.normalize(s)
                                for s in stage_choices))
  elif group_stages == "all" and "zero_stage" not in fixed:
    probe = candidates.get(make(zero_stage=0, recompute=0,
                                microbatches=1))[0]
    stages = stage_groups.vectors(stage_groups.groups_of(probe.graph))
  if exhaustive:
    recs = ([fixed["recompute"]] if "recompute" in fixed
            else list(range(layers + 1)))
    ks = ([fixed["microbatches"]] if "microbatches" in fixed
          else microbatch_choices or _divisors(config.batch, 4))
    _check_state(candidates, make(zero_stage=stages[0], recompute=recs[0],
                                  microbatches=min(ks)),
                 mesh_shape, memory_budget)
    for s, r, k in itertools.product(stages, recs, ks):
      d = make(zero_stage=s, recompute=r, microbatches=k)
      t0 = time.perf_counter()
      budget_s = left()
      if budget_s is None:
        break
      try:
        keep(*_solve(config, d, mesh_shape, topology, memory_budget,
                     budget_s, forbid, memory_reserve_fraction, overlap,
                     candidates), time.perf_counter() - t0)
      except InfeasibleLayoutError as e:
        failed(d, e, time.perf_counter() - t0)
      except TimeLimitError:
        if best is None:
          raise
        cut[0] = True
        break
  else:
    recs = ([fixed["recompute"]] if "recompute" in fixed
            else list(recompute_choices(layers, recompute_count)))
    walk = "microbatches" not in fixed and microbatch_choices is None
    ks = ([fixed["microbatches"]] if "microbatches" in fixed else
          microbatch_choices or
          [k for k in _divisors(config.batch, max_microbatches)
           if k & (k - 1) == 0 and k >= min_microbatches])
    found = None
    descend = (group_stages == "descent" and stage_choices is None
               and "zero_stage" not in fixed)
    # With a descent to come, the walk leaves it a share of the time
    # limit (a search that ends early is unaffected).
    walk_end = (time.perf_counter() + WALK_SHARE * (deadline
                                                    - time.perf_counter())
                if descend else deadline)
    walk_cut = False
    if ks:
      _check_state(candidates, make(zero_stage=stages[0], recompute=recs[0],
                                    microbatches=min(ks)),
                   mesh_shape, memory_budget)
    for k in ks:
      pairs = [make(zero_stage=s, recompute=r, microbatches=k)
               for s in stages for r in recs]
      first = None if start is None else make(
          zero_stage=start.zero_stage, recompute=start.recompute,
          microbatches=k)
      t0 = time.perf_counter()
      budget_s = left()
      if budget_s is None:
        break
      try:
        candidates.trim(k, len(pairs) + 4)
        tg, result = solve_decisions(
            candidates, pairs, mesh_shape, topology, memory_budget,
            # Without a plan yet, the walk may use all the time.
            budget_s if best is None else
            max(1e-3, min(budget_s, walk_end - time.perf_counter())),
            forbid, overlap, first=first if first in pairs else None,
            explain=False)
        t = keep(tg, result, time.perf_counter() - t0)
        if result.status != "optimal":
          walk_cut = True   # the walk's time ran out within this k
          break
      except TimeLimitError:
        if best is None:
          raise
        walk_cut = True
        break
      except InfeasibleLayoutError as e:
        failed(pairs[-1], e, time.perf_counter() - t0)
        over = pairs   # explained only if no k fits
        if found is None or not walk:
          continue
        break
      if walk and (first_fit or (found is not None and t >= found)):
        break   # more microbatches stopped paying (repeated gathers)
      found = t if found is None else min(found, t)
    if descend and best is not None and not cut[0]:
      _descend(best[0], recs, make, keep, left, cut, candidates,
               mesh_shape, topology, memory_budget, forbid, overlap)
    cut[0] = cut[0] or walk_cut
  if best is None and over is not None:
    explain_infeasible(candidates, over, mesh_shape, topology,
                       memory_budget, deadline - time.perf_counter(), forbid,
                       overlap)
  if best is None:
    raise last_error[0] or InfeasibleLayoutError(
        "no training plan candidate was solved")
  training, result = best
  if cut[0]:
    result = dataclasses.replace(result, status="feasible")
  return TrainingPlan(training.decisions, result, training, tuple(tried))
