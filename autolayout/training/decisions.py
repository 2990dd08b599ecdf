"""Training decisions beyond the layout rules: precision, sharded storage,
recompute and microbatching, searched with the CP-SAT layout program.

A :class:`TrainingDecisions` value fixes the four families the issue names:

* ``param_dtype``: the compute dtype of weights and activations (float32
  masters, see :class:`mesh_tf.VariableDType`);
* ``zero_stage``: 0-3, how variables are stored (:mod:`mesh_tf.training.storage`),
  for every variable or per variable group (attention, embedding, ffn,
  norm; :mod:`autolayout.training.zero`); *which* axes the storage splits
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
from autolayout.training import microbatches as microbatches_lib
from autolayout.training import recompute as recompute_lib
from autolayout.training import zero
from autolayout.training.build import (Candidates, TrainingGraph,
                                       build_training)
from autolayout.training.families import TrainingDecisions
from autolayout.errors import InfeasibleLayoutError, TimeLimitError

__all__ = ["Candidates", "TrainingDecisions", "TrainingGraph", "TrainingPlan",
           "TrainingSearch", "build_training", "search_training"]


class TrainingPlan(NamedTuple):
  """What :func:`search_training` chose, and every candidate it solved:
  ``tried`` holds ``(decisions, step time s or None if infeasible,
  build + solve seconds)``."""
  decisions: TrainingDecisions
  result: Any           # the LayoutResult of the chosen candidate
  training: TrainingGraph
  tried: Tuple[Tuple[TrainingDecisions, Optional[float], float], ...]


def _solve(config, decisions, mesh_shape, topology, memory_budget,
           time_limit_s, forbid, memory_reserve_fraction, overlap,
           candidates=None):
  candidates = candidates or Candidates(config, memory_reserve_fraction)
  training, search = candidates.get(decisions)
  result = search.solve(mesh_shape, topology, memory_budget,
                        time_limit_s=time_limit_s, forbid=forbid,
                        overlap=overlap)
  return training, dataclasses.replace(result, decisions=decisions)


# The recompute counts the decision program offers (the recompute family's).
recompute_choices = recompute_lib.choices


def solve_decisions(candidates, decision_list, mesh_shape, topology,
                    memory_budget, time_limit_s=60.0, forbid=(),
                    overlap=True, *, joint=False, first=None, explain=True,
                    known=None):
  """The fastest of ``decision_list`` (stage and recompute choices at one
  microbatch count and dtype) and its layout.

  By default the candidates' own programs are solved one at a time,
  simplest first, each after the first with the incumbent's step time as
  a cutoff (:mod:`autolayout.training.candidate_search`): the same answer as one
  CP-SAT program in which the stage and the recompute count are decision
  variables (``joint=True``, :mod:`autolayout.training.decision_program`; it needs
  every (stage, recompute) pair), in a fraction of the time.  ``first``:
  a likely winner's decisions, tried first (only the order changes).
  A candidate whose memory alone fits no layout is skipped before its
  program is built (:meth:`~autolayout.search.state.LayoutSearch.may_fit`).
  ``known``: a dict the caller owns over calls on this mesh, budget,
  ``forbid`` and ``overlap`` (:class:`autolayout.training.candidate_search.
  Known`): the candidates earlier calls decided are not solved again.

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

  def may_fit(d):
    _, search = candidates.get(d)
    return search.may_fit(mesh_shape, topology, memory_budget, deadline)

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
          DEFAULT_NUM_WORKERS, DEFAULT_SEED, forbid, first,
          may_fit=may_fit, known=known)
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
  the smallest peak and what dominates it.  That search and its build take
  seconds (transformer_tiny: 3.4 s of the README plan's 27.7), so the
  microbatch walk asks for it only when no k fits at all."""
  lean = max(decision_list, key=lambda d: (
      zero.rank(d.zero_stage), d.recompute))
  _solve(candidates.config, lean, mesh_shape, topology, memory_budget,
         max(time_limit_s, 1e-3), forbid,
         candidates.memory_reserve_fraction, overlap, candidates)


def _better(step, d, best_step, best_d):
  """Faster wins; equal times (to 1e-9) go to the simpler decisions (lower
  stage, fewer recomputed blocks, fewer microbatches)."""
  if abs(step - best_step) > 1e-9 * max(step, best_step):
    return step < best_step
  rank = zero.rank
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


def search_training(config, mesh_shape, topology, memory_budget=None,
                    **options):
  """The fastest training plan of zoo ``config`` that fits the budget:
  ``TrainingSearch(config, mesh_shape, topology, memory_budget,
  **options).run()`` (see :class:`TrainingSearch` for the options)."""
  return TrainingSearch(config, mesh_shape, topology, memory_budget,
                        **options).run()


class TrainingSearch:
  """The search for the fastest training plan of zoo ``config`` that fits
  the budget, as named steps (:meth:`run` runs them):

  1. :meth:`check_state`: the variables alone must fit the mesh;
  2. :meth:`walk` (or :meth:`exhaustive`): the microbatch counts as
     phases, each a program over the stage and recompute choices;
  3. :meth:`descend`: per-group stages around the best plan;
  4. :meth:`plan`: the best plan, as a :class:`TrainingPlan`.


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
      (:mod:`autolayout.training.zero`): ``"uniform"``, one stage for every
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

  def __init__(self, config, mesh_shape, topology, memory_budget=None, *,
               fixed=None, exhaustive=False, param_dtype="bfloat16",
               max_microbatches=64, time_limit_s=60.0, forbid=(),
               progress=None, memory_reserve_fraction=None, overlap=True,
               recompute_count=5, microbatch_choices=None, candidates=None,
               min_microbatches=1, deadline=None, group_stages="descent",
               stage_choices=None, first_fit=False, start=None):
    fixed = dict(fixed or {})
    bad = sorted(set(fixed) - set(TrainingDecisions._fields))
    if bad:
      raise MtfError(f"unknown training decisions {bad}; use "
                     f"{list(TrainingDecisions._fields)}")
    if group_stages not in GROUP_STAGE_SEARCHES:
      raise MtfError(f"group_stages={group_stages!r} is not one of "
                     f"{GROUP_STAGE_SEARCHES}")
    if "zero_stage" in fixed:
      fixed["zero_stage"] = zero.normalize(fixed["zero_stage"])
    fixed.setdefault("param_dtype", param_dtype)
    self.config, self.mesh_shape, self.fixed = config, mesh_shape, fixed
    # Typed at the caller's edge (a name is resolved here for a direct
    # caller only).
    self.topology = arguments.resolve_topology(topology)
    self.memory_budget = cm_args.resolve_memory_budget(memory_budget,
                                                       self.topology)
    self.exhaustive_search = exhaustive
    self.max_microbatches, self.microbatch_choices = (max_microbatches,
                                                      microbatch_choices)
    self.min_microbatches, self.recompute_count = (min_microbatches,
                                                   recompute_count)
    self.time_limit_s, self.forbid, self.overlap = (time_limit_s, forbid,
                                                    overlap)
    self.progress, self.first_fit, self.start = progress, first_fit, start
    self.group_stages, self.stage_choices = group_stages, stage_choices
    self.candidates = candidates or Candidates(config,
                                               memory_reserve_fraction)
    self.deadline = (time.perf_counter() + time_limit_s if deadline is None
                     else deadline)
    self.tried, self.best, self.last_error = [], None, None
    # What the programs proved per candidate, reused by later phases (the
    # descent asks again for the plan it starts from and its neighbours).
    self.known = {}
    self.over = None   # the walk's last k whose every pair is over budget
    self.cut = False   # the time limit stopped the search before its end

  # --- the search's bookkeeping -------------------------------------------
  def left(self):
    """Seconds left, or None once the time is up (with a plan in hand;
    without one, TimeLimitError)."""
    now = self.deadline - time.perf_counter()
    if now > 0:
      return now
    if self.best is None:
      raise TimeLimitError(
          f"the time limit of {self.time_limit_s:g} s ran out before any "
          "training plan was found; raise the time limit")
    self.cut = True
    return None

  def keep(self, training, result, elapsed):
    """Records a solved candidate; keeps it if it is the best so far."""
    step = result.report.step_time_s
    self.tried.append((training.decisions, step, elapsed))
    if self.progress:
      self.progress(training.decisions, step)
    if self.best is None or _better(step, training.decisions,
                                    self.best[1].report.step_time_s,
                                    self.best[0].decisions):
      self.best = (training, result)
    return step

  def failed(self, d, e, elapsed):
    """Records a candidate that fits no layout."""
    self.last_error = e
    self.tried.append((d, None, elapsed))
    if self.progress:
      self.progress(d, None)

  def make(self, **kw):
    """The decisions ``kw`` with the fixed ones."""
    return TrainingDecisions(**dict(kw, **self.fixed))

  def solve(self, pairs, budget_s, first=None, explain=True):
    """:func:`solve_decisions` of ``pairs`` on this search's mesh."""
    return solve_decisions(self.candidates, pairs, self.mesh_shape,
                           self.topology, self.memory_budget, budget_s,
                           self.forbid, self.overlap, first=first,
                           explain=explain, known=self.known)

  def trim(self, k, most):
    """Forgets the graphs (:meth:`Candidates.trim`) and the solved programs
    of microbatch counts other than ``k`` and the best plan's."""
    self.candidates.trim(k, most)
    keep = {k} | ({self.best[0].decisions.microbatches} if self.best
                  else set())
    for d in [d for d, hit in self.known.items()
              if hit.solved is not None and d.microbatches not in keep]:
      del self.known[d]

  # --- the choices ----------------------------------------------------------
  def stages(self):
    """The ``zero_stage`` choices each program offers."""
    from mesh_tf.training.storage import STAGES
    if "zero_stage" in self.fixed:
      return [self.fixed["zero_stage"]]
    if self.stage_choices is not None:
      return list(dict.fromkeys(zero.normalize(s)
                                for s in self.stage_choices))
    if self.group_stages == "all":
      probe = self.candidates.get(self.make(zero_stage=0, recompute=0,
                                            microbatches=1))[0]
      return zero.vectors(zero.groups_of(probe.graph))
    return list(STAGES)

  def recomputes(self, every=False):
    """The recompute counts each program offers (``every``: 0..L)."""
    if "recompute" in self.fixed:
      return [self.fixed["recompute"]]
    layers = self.config.layers
    return (list(range(layers + 1)) if every else
            list(recompute_lib.choices(layers, self.recompute_count)))

  def microbatch_counts(self, most=None):
    """The k tried: fixed, given, or the powers of two dividing the batch
    from ``min_microbatches`` (``most``: every divisor up to it)."""
    if "microbatches" in self.fixed:
      return [self.fixed["microbatches"]]
    if self.microbatch_choices:
      return list(self.microbatch_choices)
    if most is not None:
      return microbatches_lib.divisors(self.config.batch, most)
    return [k for k in microbatches_lib.divisors(self.config.batch,
                                                 self.max_microbatches)
            if k & (k - 1) == 0 and k >= self.min_microbatches]

  # --- the steps ------------------------------------------------------------
  def check_state(self, stages, recs, ks):
    """Step 1: the most memory-saving candidate's variables must fit
    (:func:`_check_state`), before any program is built."""
    _check_state(self.candidates, self.make(zero_stage=stages[0],
                                            recompute=recs[0],
                                            microbatches=min(ks)),
                 self.mesh_shape, self.memory_budget)

  def exhaustive(self):
    """Step 2, the reference: every candidate solved alone (stages 0-3,
    recompute 0..L, every k up to 4 dividing the batch)."""
    stages, recs = self.stages(), self.recomputes(every=True)
    ks = self.microbatch_counts(most=4)
    self.check_state(stages, recs, ks)
    for s, r, k in itertools.product(stages, recs, ks):
      d = self.make(zero_stage=s, recompute=r, microbatches=k)
      t0 = time.perf_counter()
      budget_s = self.left()
      if budget_s is None:
        break
      try:
        self.keep(*_solve(self.config, d, self.mesh_shape, self.topology,
                          self.memory_budget, budget_s, self.forbid,
                          self.candidates.memory_reserve_fraction,
                          self.overlap, self.candidates),
                  time.perf_counter() - t0)
      except InfeasibleLayoutError as e:
        self.failed(d, e, time.perf_counter() - t0)
      except TimeLimitError:
        if self.best is None:
          raise
        self.cut = True
        break

  def walk(self, stages, recs, walk_end):
    """Step 2: for each microbatch count k (a phase: from the first until
    one fits and on while the step gets faster), one program over the
    stage and recompute choices; returns whether the walk's time ran out
    (``walk_end``, a ``perf_counter`` value)."""
    walk = ("microbatches" not in self.fixed
            and self.microbatch_choices is None)
    ks = self.microbatch_counts()
    found = None
    if ks:
      self.check_state(stages, recs, ks)
    for k in ks:
      pairs = [self.make(zero_stage=s, recompute=r, microbatches=k)
               for s in stages for r in recs]
      first = None if self.start is None else self.make(
          zero_stage=self.start.zero_stage, recompute=self.start.recompute,
          microbatches=k)
      t0 = time.perf_counter()
      budget_s = self.left()
      if budget_s is None:
        break
      try:
        self.trim(k, len(pairs) + 4)
        tg, result = self.solve(
            pairs,
            # Without a plan yet, the walk may use all the time.
            budget_s if self.best is None else
            max(1e-3, min(budget_s, walk_end - time.perf_counter())),
            first=first if first in pairs else None, explain=False)
        t = self.keep(tg, result, time.perf_counter() - t0)
        if result.status != "optimal":
          return True   # the walk's time ran out within this k
      except TimeLimitError:
        if self.best is None:
          raise
        return True
      except InfeasibleLayoutError as e:
        self.failed(pairs[-1], e, time.perf_counter() - t0)
        self.over = pairs   # explained only if no k fits (plan())
        if found is None or not walk:
          continue
        break
      if walk and (self.first_fit or (found is not None and t >= found)):
        break   # more microbatches stopped paying (repeated gathers)
      found = t if found is None else min(found, t)
    return False

  def descend(self, recs):
    """Step 3, per-group stages by descent: from the best plan's decisions,
    a program over the stage choices that move one group's stage one step
    (and the current one), at the plan's k and its recompute count or the
    next lower one (a group sharded further can free the memory of fewer
    recomputed blocks); again from its answer while it changes, at most
    DESCENT_ROUNDS times."""
    training = self.best[0]
    d = training.decisions
    groups = zero.groups_of(training.graph)
    if len(groups) < 2:
      return
    current, best = d.zero_stage, d
    lower = [r for r in recs if r < d.recompute]
    near = ([lower[-1]] if lower else []) + [d.recompute]
    for _ in range(DESCENT_ROUNDS):
      choices = [current] + zero.neighbours(current, groups)
      pairs = [self.make(zero_stage=s, recompute=r,
                         microbatches=d.microbatches)
               for s in choices for r in near]
      first = best if best in pairs else pairs[0]
      t0 = time.perf_counter()
      budget_s = self.left()
      if budget_s is None:
        return
      try:
        self.trim(d.microbatches, len(pairs) + 4)
        tg, result = self.solve(pairs, budget_s, first=first)
      except TimeLimitError:
        self.cut = True
        return
      except InfeasibleLayoutError:
        return   # cannot happen: the current plan is among the choices
      self.keep(tg, result, time.perf_counter() - t0)
      if result.status != "optimal":
        self.cut = True   # the time ran out within the round
        return
      if tg.decisions.zero_stage == current:
        return
      current, best = tg.decisions.zero_stage, tg.decisions

  def plan(self):
    """Step 4: the best plan found (status "feasible" if the time limit
    cut the search short).

    Raises:
      InfeasibleLayoutError: if no candidate fits (the last one's error).
    """
    if self.best is None and self.over is not None:
      explain_infeasible(self.candidates, self.over, self.mesh_shape,
                         self.topology, self.memory_budget,
                         self.deadline - time.perf_counter(), self.forbid,
                         self.overlap)
    if self.best is None:
      raise self.last_error or InfeasibleLayoutError(
          "no training plan candidate was solved")
    training, result = self.best
    if self.cut:
      result = dataclasses.replace(result, status="feasible")
    return TrainingPlan(training.decisions, result, training,
                        tuple(self.tried))

  def run(self):
    """The steps in order; returns :meth:`plan`."""
    if self.exhaustive_search:
      self.exhaustive()
      return self.plan()
    stages, recs = self.stages(), self.recomputes()
    descend = (self.group_stages == "descent"
               and self.stage_choices is None
               and "zero_stage" not in self.fixed)
    # With a descent to come, the walk leaves it a share of the time
    # limit (a search that ends early is unaffected).
    now = time.perf_counter()
    walk_end = (now + WALK_SHARE * (self.deadline - now) if descend
                else self.deadline)
    walk_cut = self.walk(stages, recs, walk_end)
    if descend and self.best is not None and not self.cut:
      self.descend(recs)
    self.cut = self.cut or walk_cut
    return self.plan()
