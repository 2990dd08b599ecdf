"""The JSON codec of a plan file's training decisions.

:func:`read_decisions` turns the ``decisions`` object of a plan file into
typed values, one per family (see :data:`FAMILIES`), and refuses a family
this version does not know (a file from a newer mesh-tf), naming it:
applying the rest of such a plan would silently change its costs.  It needs
no graph and no solver, so the file reader uses it on every load;
:mod:`autolayout.plans.decisions` builds the training step from its values.

Example:
  >>> read_decisions({"zero_stage": {"ffn": 3}, "microbatches": 2})
  {'param_dtype': 'float32', 'zero_stage': (('ffn', 3),), 'recompute': 0, 'microbatches': 2}
"""

from mesh_tf.core.errors import MtfError
from autolayout.training import stage_groups
from autolayout.errors import PlanFormatError

# Each family a plan file may hold, with the JSON form of its value.
FAMILIES = {
    "param_dtype": "the compute dtype of weights and activations "
                   "(\"float32\" or \"bfloat16\"; masters stay float32)",
    "zero_stage": "the ZeRO stage 0-3, or {group: stage} per variable group",
    "recompute": "how many blocks recompute their activations (0..layers)",
    "microbatches": "gradient-accumulation steps k (a divisor of the batch)",
}


# The value of a family a file omits.
DEFAULTS = {"param_dtype": "float32", "zero_stage": 0, "recompute": 0,
            "microbatches": 1}

def read_decisions(data, where="plan file"):
  """``{family: typed value}`` of a plan's ``decisions`` object (None
  when it is empty: a plan of the step as built); a ZeRO stage per group
  is a sorted tuple of pairs (:func:`autolayout.stage_groups.normalize`).

  Families the file omits keep their defaults (float32, stage 0, no
  recompute, one microbatch).

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
  dtype = data.get("param_dtype", DEFAULTS["param_dtype"])
  if dtype not in ("float32", "bfloat16", "float16"):
    raise PlanFormatError(f"{where}: decisions.param_dtype is {dtype!r}; "
                          "use \"float32\" or \"bfloat16\"")
  try:
    stage = stage_groups.normalize(data.get("zero_stage", DEFAULTS["zero_stage"]))
  except MtfError as e:
    raise PlanFormatError(f"{where}: decisions.zero_stage: {e}") from None
  counts = {}
  for name, least in (("recompute", 0), ("microbatches", 1)):
    v = data.get(name, DEFAULTS[name])
    if isinstance(v, bool) or not isinstance(v, int) or v < least:
      raise PlanFormatError(f"{where}: decisions.{name} is {v!r}; use an "
                            f"integer >= {least}")
    counts[name] = v
  return {"param_dtype": dtype, "zero_stage": stage, **counts}
