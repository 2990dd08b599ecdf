"""The ZeRO stage per variable group, as one training decision.

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

from mesh_tf.training import storage
from mesh_tf.core.errors import InvalidArgumentError

__all__ = ["as_json", "describe", "groups_of", "neighbours", "normalize",
           "rank", "stage_of", "storage_plan", "vectors"]


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
  """The stage of ``group`` (groups a per-group choice omits: 0)."""
  if isinstance(zero_stage, int):
    return zero_stage
  return dict(zero_stage).get(group, 0)


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
