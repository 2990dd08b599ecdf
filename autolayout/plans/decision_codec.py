"""The JSON codec of a plan file's training decisions.

:func:`read_decisions` turns the ``decisions`` object of a plan file into
typed values, one per family (see :data:`FAMILIES`), and refuses a family
this version does not know (a file from a newer mesh-tf), naming it:
applying the rest of such a plan would silently change its costs.  It needs
no graph and no solver, so the file reader uses it on every load;
:mod:`autolayout.plans.decisions` builds the training step from its values.

Example:
  >>> read_decisions({"zero_stage": {"ffn": 3}, "microbatches": 2})
  {'param_dtype': 'float32', 'zero_stage': (('ffn', 3),), 'recompute': 0, 'microbatches': 2, 'pipeline': None}
"""

from autolayout.errors import PlanFormatError
from autolayout.training import families
from autolayout.training.family import DecisionValueError

# Each family a plan file may hold, with the JSON form of its value: the
# registry's (autolayout.training.families), one codec for every reader.
FAMILIES = {f.name: f.description for f in families.FAMILIES}

# The value of a family a file omits.
DEFAULTS = {f.name: f.to_json(f.default) for f in families.FAMILIES}


def read_decisions(data, where="plan file"):
  """``{family: typed value}`` of a plan's ``decisions`` object (None
  when it is empty: a plan of the step as built), each value decoded by
  its family's codec (:meth:`TrainingDecisions.from_json
  <autolayout.training.families.TrainingDecisions.from_json>`); a ZeRO
  stage per group is a sorted tuple of pairs.

  Families the file omits keep their defaults (float32, stage 0, no
  recompute, one microbatch, no pipeline).

  Raises:
    PlanFormatError: naming a family this version does not know (a file
      from a newer mesh-tf), or a family whose value is malformed.
  """
  if not data:
    return None
  unknown = sorted(set(data) - set(FAMILIES))
  if unknown:
    raise PlanFormatError(
        f"{where}: it holds decision famil{'ies' if len(unknown) > 1 else 'y'}"
        f" {', '.join(map(repr, unknown))}, which this mesh-tf does not know "
        "(applying the rest would change its costs); read it with the "
        "mesh-tf version that wrote it or a newer one (known families: "
        f"{', '.join(FAMILIES)})")
  try:
    return families.TrainingDecisions.from_json(data)._asdict()
  except DecisionValueError as e:
    raise PlanFormatError(f"{where}: decisions.{e}") from None
