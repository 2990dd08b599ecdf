"""The ZeRO stage, as one training-decision family: its value (one stage,
or one per variable group), its JSON and command-line forms, the storage
rewrite that lowers it, the choices the search offers and the CP-SAT
indicators of the decision program.

A training decision's ``zero_stage`` is either one stage for every variable
(an int, 0-3; every sharded variable shares the storage dims
``d_model_storage``) or a stage per variable group: a sorted tuple
``(("attention", 3), ("embedding", 1), ("ffn", 3), ("norm", 0))`` over the
groups of :func:`mesh_tf.training.storage.variable_group`.  Then each group has its
own storage dims (``d_model_storage_ffn``), so the search decides storage
and stage per group, and every repeated layer of a group shares the group's
one decision.  A tuple that gives every group the same stage is that int
(:func:`normalize`), so one choice has one spelling.

Example:
  >>> normalize({"attention": 3, "embedding": 1, "ffn": 3, "norm": 0})
  (('attention', 3), ('embedding', 1), ('ffn', 3), ('norm', 0))
  >>> normalize({"attention": 2, "embedding": 2, "ffn": 2, "norm": 2})
  2
  >>> describe(normalize({"attention": 3, "embedding": 1, "ffn": 3,
  ...                     "norm": 0}))
  'attention=3 embedding=1 ffn=3 norm=0'
"""

import itertools
from typing import Tuple, Union

from costmodels.arguments import echo
from mesh_tf.training import storage
from mesh_tf.core.errors import InvalidArgumentError
from autolayout.training.family import DecisionFamily, DecisionValueError

__all__ = ["FAMILY", "ZeroStage", "ZeroStageFamily", "add_choice_vars",
           "as_json", "describe", "groups_of", "neighbours", "normalize",
           "parse", "rank", "stage_of", "storage_plan", "vectors"]

# The typed value: one stage for every variable, or sorted (group, stage)
# pairs (normalize gives every choice one spelling).
ZeroStage = Union[int, Tuple[Tuple[str, int], ...]]


def normalize(zero_stage):
  """The one spelling of ``zero_stage``: an int, or a sorted tuple of
  ``(group, stage)`` pairs (from a mapping or pairs).

  Raises:
    InvalidArgumentError: for an unknown group or stage.
  """
  if isinstance(zero_stage, int) and not isinstance(zero_stage, bool):
    if zero_stage not in storage.STAGES:
      raise InvalidArgumentError(
          f"zero_stage={zero_stage!r} is not a ZeRO stage; use one of "
          f"{storage.STAGES}")
    return zero_stage
  pairs = (zero_stage.items() if isinstance(zero_stage, dict)
           else zero_stage)
  try:
    pairs = dict(pairs)
  except (TypeError, ValueError):
    raise InvalidArgumentError(
        f"zero_stage={zero_stage!r} is neither a stage (0-3) nor a "
        "mapping of variable group to stage, e.g. {'ffn': 3, 'norm': 0}"
    ) from None
  for group, stage in pairs.items():
    if group not in storage.GROUPS:
      raise InvalidArgumentError(
          f"zero_stage names variable group {group!r}; use groups of "
          f"{storage.GROUPS}")
    if stage not in storage.STAGES or isinstance(stage, bool):
      raise InvalidArgumentError(
          f"zero_stage gives group {group!r} stage {stage!r}; use one of "
          f"{storage.STAGES}")
  if set(pairs) == set(storage.GROUPS) and len(set(pairs.values())) == 1:
    return next(iter(pairs.values()))
  return tuple(sorted(pairs.items()))


def stage_of(zero_stage, group):
  """The stage of ``group`` (groups a per-group choice omits: 0), as the
  storage plan that lowers ``zero_stage`` has it."""
  return storage_plan(zero_stage).stage_of(group)


def storage_plan(zero_stage):
  """The :class:`mesh_tf.training.storage.StoragePlan` that lowers ``zero_stage``."""
  if isinstance(zero_stage, int):
    return storage.StoragePlan(zero_stage)
  return storage.StoragePlan(0, stages=tuple(zero_stage))


def rank(zero_stage):
  """How much a choice shards (the sum of its groups' stages): among equal
  step times the search prefers the lower rank."""
  return sum(stage_of(zero_stage, g) for g in storage.GROUPS)


def describe(zero_stage):
  """``"3"``, or the stage per group: ``"attention=3 ffn=1 ..."``."""
  if isinstance(zero_stage, int):
    return str(zero_stage)
  return " ".join(f"{g}={s}" for g, s in zero_stage)


def as_json(zero_stage):
  """An int, or ``{group: stage}``, for plan files and JSON reports."""
  if isinstance(zero_stage, int):
    return zero_stage
  return dict(zero_stage)


def groups_of(graph):
  """The variable groups (:data:`mesh_tf.training.storage.GROUPS`) of ``graph``'s
  trainable variables, sorted."""
  return tuple(sorted({storage.variable_group(v)
                       for v in graph.trainable_variables}))


def vectors(groups, stages=storage.STAGES, per_group=True):
  """The ``zero_stage`` choices the search offers: every stage for every
  group (``len(stages) ** len(groups)``), normalised, uniform ones first;
  only the uniform ones without ``per_group``."""
  stages = tuple(stages)
  uniform = [normalize(s) for s in stages]
  if not per_group or len(groups) < 2:
    return uniform
  out = list(uniform)
  for combo in itertools.product(stages, repeat=len(groups)):
    if len(set(combo)) > 1:
      out.append(normalize(dict(zip(groups, combo))))
  return out


def neighbours(zero_stage, groups, stages=storage.STAGES):
  """The choices that move one group's stage of ``zero_stage`` one step up
  or down (a step of the search's descent over per-group stages), in a
  fixed order."""
  base = {g: stage_of(zero_stage, g) for g in groups}
  out = []
  for g in groups:
    i = stages.index(base[g]) if base[g] in stages else None
    for j in ((i - 1, i + 1) if i is not None else ()):
      if 0 <= j < len(stages):
        out.append(normalize(dict(base, **{g: stages[j]})))
  return out


def parse(text, flag="--zero-stage"):
  """The ZeRO stage written on the command line: ``N`` (every variable
  group; an int, range-checked by :meth:`ZeroStageFamily.check`) or
  ``GROUP=N,...`` (e.g. ``ffn=3,attention=3,embedding=1,norm=0``; groups
  not named take 0), normalised.

  Raises:
    DecisionValueError: naming the bad group or stage.
  """
  text = str(text).strip()
  if "=" not in text:
    try:
      return int(text)
    except ValueError:
      raise DecisionValueError(
          f"{flag} {echo(text, 40)} is not an integer or auto",
          f"use e.g. {flag} 3, or {flag} auto") from None
  out = {}
  for part in text.split(","):
    group, _, stage = part.partition("=")
    group = group.strip()
    if group not in storage.GROUPS:
      raise DecisionValueError(
          f"{flag} names variable group {echo(group, 40)}, which is not "
          f"one of {', '.join(storage.GROUPS)}",
          f"e.g. {flag} ffn=3,attention=3,embedding=1,norm=0")
    try:
      value = int(stage.strip())
    except ValueError:
      value = None
    if value not in storage.STAGES:
      raise DecisionValueError(
          f"{flag} gives group {group} stage {echo(stage, 40)}, which is not "
          "a ZeRO stage 0-3", f"e.g. {flag} {group}=3")
    out[group] = value
  return normalize(out)


class ZeroStageFamily(DecisionFamily):
  """``zero_stage``: a :data:`ZeroStage`, 0 for the step as built."""
  name = "zero_stage"
  default = 0
  flag = "--zero-stage"
  description = "the ZeRO stage 0-3, or {group: stage} per variable group"
  example = "3"

  def check(self, value):
    try:
      return normalize(value)
    except InvalidArgumentError as e:
      raise DecisionValueError(str(e).split("; ")[0],
                               "e.g. zero_stage=3 or {'ffn': 3, 'norm': 0}"
                               ) from None

  def to_json(self, value):
    return as_json(value)

  def parse(self, text):
    return parse(text, self.flag)

  def describe(self, value):
    return describe(value)

  def rank(self, value):
    return rank(value)

  def rewrite(self, graph, value):
    storage.shard_storage(graph, storage_plan(value))


FAMILY = ZeroStageFamily()


def add_choice_vars(model, decisions, chosen):
  """The CP-SAT indicators of the stage choices among the candidates'
  ``decisions`` (``chosen``: their :math:`z_c`, in the same order):
  :math:`u_s = \\sum_{c = (s, \\cdot)} z_c` per choice ``s`` (an int or a
  per-group vector) and its per-group factorisation
  :math:`u_{g,t} = \\sum_{c:\\, s_g(c) = t} z_c`; both are sums of the
  :math:`z_c`, so exactly one candidate is chosen and every family reads
  it.  Returns ``(choices, {s: u_s}, {(g, t): u_{g,t}})``, the choices
  simplest first."""
  stages = sorted({d.zero_stage for d in decisions},
                  key=lambda s: (rank(s), describe(s)))
  u = {s: model.new_bool_var(f"zero_stage[{describe(s)}]") for s in stages}
  groups = sorted({g for d in decisions for g in _groups(d.zero_stage)})
  per_group = {(g, st): model.new_bool_var(f"zero_stage[{g}={st}]")
               for g in groups
               for st in sorted({stage_of(d.zero_stage, g)
                                 for d in decisions})}
  for s, var in u.items():
    model.add(var == sum(z for d, z in zip(decisions, chosen)
                         if d.zero_stage == s))
  for (g, st), var in per_group.items():
    model.add(var == sum(z for d, z in zip(decisions, chosen)
                         if stage_of(d.zero_stage, g) == st))
  return stages, u, per_group


def _groups(zero_stage):
  """The groups a stage choice names (a uniform stage: every group)."""
  if isinstance(zero_stage, int):
    return storage.GROUPS
  return tuple(g for g, _ in zero_stage)
