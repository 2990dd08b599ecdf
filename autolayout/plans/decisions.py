"""A plan's training decisions: read from its file, and the graph they
rebuild.

A plan made by the training search records, besides the layout rules, the
:class:`~autolayout.decisions.TrainingDecisions` it priced (the parameter
dtype, the ZeRO stage, recompute and microbatches).  Its model fingerprint
is that of the training step *built for those decisions*
(:func:`autolayout.decisions.build_training`), so reading such a plan means
rebuilding that step: :func:`rebuild` does, from the zoo model the plan's
``model.source`` names, and :func:`check_rebuilt` holds the rebuilt graph's
fingerprint against the plan's (a zoo model that changed since is named as
stale, like any other graph).

:func:`decisions_of` reads the ``decisions`` object of a file: every family
this version knows is parsed into its typed value, and a family it does not
know (a file from a newer mesh-tf) is refused, naming the family.

Example:
  >>> plan = load_plan("a.json")                          # doctest: +SKIP
  >>> decisions_of(plan.decisions)                        # doctest: +SKIP
  TrainingDecisions(param_dtype='bfloat16', zero_stage=2, recompute=1, ...)
  >>> built = rebuild(plan)                               # doctest: +SKIP
  >>> built.microbatches.k                                # doctest: +SKIP
  2
"""

import json
import os
from typing import Any, NamedTuple, Optional

from mesh_tf.core.errors import MtfError
from autolayout.plans import decision_codec
from autolayout.plans import file as plan_file
from autolayout.plans import identity as plan_identity
from autolayout.plans import pipelined
from autolayout.training.decisions import TrainingDecisions, build_training
from autolayout.errors import PlanFormatError

assert tuple(decision_codec.FAMILIES) == TrainingDecisions._fields


class BuiltPlan(NamedTuple):
  """The graph a plan is priced on: ``graph``, ``outputs`` (None: every
  tensor no op reads), ``microbatches`` (a
  :class:`mesh_tf.microbatch.MicrobatchPlan`, or None), the typed
  ``decisions`` (None for a plan without) and the zoo ``config``."""
  graph: Any
  outputs: Any
  microbatches: Any
  decisions: Optional[TrainingDecisions]
  config: Any


def decisions_of(data, where="plan file"):
  """The :class:`TrainingDecisions` of a plan's ``decisions`` object, or
  None when it is empty (:func:`autolayout.plans.decision_codec.read_decisions`
  checks it)."""
  values = decision_codec.read_decisions(data, where)
  return None if values is None else TrainingDecisions(**values)


def source_of(plan):
  """The plan's ``model.source`` as a dict (None if it has none)."""
  src = plan.model.source
  return None if src is None else json.loads(src)


def config_of(plan):
  """The zoo config the plan's source names (None for a plan of a user
  graph, or one without a source)."""
  src = source_of(plan)
  if not src or not isinstance(src.get("model"), str):
    return None
  from mesh_tf import models
  from autolayout.arguments import MODEL_FAMILIES
  preset = MODEL_FAMILIES.get(src["model"], src["model"])
  if preset not in models.PRESETS:
    return None
  try:
    return models.get_config(preset, **(src.get("overrides") or {}))
  except (MtfError, TypeError, ValueError) as e:
    raise PlanFormatError(f"plan of {plan.model.name!r}: its model.source "
                          f"{src} does not build: {e}") from None


def rebuild(plan, config=None):
  """The :class:`BuiltPlan` of a plan with training decisions: the
  training step of ``config`` (default: the plan's source) built for
  them.

  Raises:
    PlanFormatError: if the plan holds no decisions, or names no zoo model
      to rebuild.
  """
  decisions = decisions_of(plan.decisions)
  if decisions is None:
    raise PlanFormatError(f"plan of {plan.model.name!r} holds no training "
                          "decisions; it is priced on its graph as built")
  if decisions.pipeline is not None:
    raise PlanFormatError(
        f"plan of {plan.model.name!r} is pipelined: its step is a program "
        "of stage graphs (autolayout.plans.pipelined.build_program), not "
        "one graph")
  config = config or config_of(plan)
  if config is None:
    raise PlanFormatError(
        f"plan of {plan.model.name!r} holds training decisions but no zoo "
        "model in model.source to rebuild its step from; pass the training "
        "graph (autolayout.decisions.build_training) yourself")
  try:
    t = build_training(config, decisions)
  except MtfError as e:
    raise PlanFormatError(f"plan of {plan.model.name!r}: its decisions do "
                          f"not build on its model: {e}") from None
  return BuiltPlan(t.graph, None, t.plan, decisions, config)


def check_rebuilt(plan, built, what="the training step rebuilt for its "
                  "decisions"):
  """Raises :class:`PlanMismatchError` unless ``built`` (a
  :class:`BuiltPlan`) is the graph the plan was made for."""
  mine = plan_identity.model_identity(built.graph, plan.model.name)
  plan_identity.check(plan.model, mine, what)


def evaluate(plan, built=None, overlap=True):
  """The :class:`costmodels.CostReport` of ``plan`` on its own graph
  (``built``, default :func:`rebuild`)."""
  import costmodels
  built = built or rebuild(plan)
  return costmodels.evaluate(built.graph, plan.mesh_shape, plan.rules,
                             plan.topology, outputs=built.outputs,
                             microbatches=built.microbatches,
                             overlap=overlap)


def load_plan(path, graph=None, name=None, outputs=()):
  """:func:`autolayout.plan_file.load_plan`, for every plan: a training
  plan's step is rebuilt for its decisions from the zoo model its source
  names and checked against its fingerprint, and ``graph`` may then be
  that step or the zoo model it was built from (``models.build_model``).

  Raises:
    PlanFormatError: as :func:`autolayout.plan_file.load_plan`, or for a
      decision family this version does not know.
    PlanMismatchError: if ``graph``, or the zoo model rebuilt for the
      plan's decisions, is not the graph the plan was made for.
  """
  plan = plan_file.load_plan(path, None, name)
  path = os.fspath(path)
  config = config_of(plan) if plan.decisions else None
  if config is not None and pipelined.is_pipelined(plan):
    # A pipelined step is a program of stage graphs, priced as a pipeline.
    pipelined.check(plan, config, f"the step plan file {path!r} was made "
                    "for")
  elif config is not None:
    check_rebuilt(plan, rebuild(plan, config), f"the training step of "
                  f"{path!r} rebuilt for its decisions")
  if graph is not None:
    mine = plan_identity.model_identity(graph, name or "the graph", outputs)
    if config is not None and pipelined.is_pipelined(plan):
      pipelined.check_model(plan, config, graph, f"the graph given for "
                            f"{path!r}")
      return plan
    base = config is not None and plan_identity.fingerprint(
        config.build().graph) == mine.fingerprint
    if not base:
      plan_identity.check(plan.model, mine, f"the graph given for {path!r}")
  return plan
