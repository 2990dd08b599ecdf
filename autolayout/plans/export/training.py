"""A plan's training decisions in every exporter's output.

A training plan also decides how the state is stored (the ZeRO stage, per
variable group), which blocks recompute, the microbatch count and the
compute dtype.  :func:`training_record` gives, per trainable variable:

* ``stage``: its ZeRO stage;
* ``param``: the dims and mesh axes it is *stored* under (its storage dim,
  e.g. ``d_model_storage_ffn``, split as the rules say; this is also where
  its optimizer slots ``adam_m``/``adam_v`` and, with microbatches, its
  gradient accumulator live);
* ``compute``: the dims and axes the step *uses* it under (the storage dim
  read back as ``d_model``: what the gather produces);
* ``gradient``: where its reduced gradient lands: the compute layout at
  stages 0-1 (an all-reduce), the stored layout at stages 2-3 (a
  reduce-scatter);
* ``regather``: whether the compute copy is gathered before each use and
  freed after (stage 3) rather than once per step (stages 1-2).

plus the step's ``recompute`` count and the names of the blocks that
recompute (the first ``recompute`` layers), ``microbatches``, the
``compute_dtype`` and ``master_dtype``.  Each framework exporter turns
these into its own terms and lists, under ``not_expressible``, what it
cannot say (never dropping it silently).  No framework is imported.
"""

import re
import types

from mesh_tf.training import storage
from autolayout.plans import decision_codec
from autolayout.plans.export import common
from autolayout.plans.identity import TensorEntry
from autolayout.training import zero

_STORAGE = re.compile(r"^(.*)_storage(?:_[a-z]+)?$")


def compute_dim(name):
  """The dim a storage dim is read back as: ``d_model_storage_ffn`` ->
  ``d_model`` (other names stay)."""
  m = _STORAGE.match(name)
  return m.group(1) if m else name


def _group(name):
  """The variable group of an mtf variable name (the storage module's own
  rule, which reads only the name)."""
  return storage.variable_group(types.SimpleNamespace(name=name))


def decisions_of(plan):
  """The plan's typed decisions as a dict (None for a plan without)."""
  return decision_codec.read_decisions(plan.decisions)


def _layers(plan):
  return sorted({int(v.name.split("/")[0][len("layer_"):])
                 for v in plan.model.variables
                 if re.match(r"^layer_\d+/", v.name)})


def training_record(plan, rename=None):
  """The JSON-ready record of the module docstring, or None for a plan
  without training decisions.

  Raises:
    ExportError: if the plan's rules cannot lay a variable out.
  """
  d = decisions_of(plan)
  if d is None:
    return None
  variables = {}
  for new, e in common.entries(plan, rename):
    if not e.trainable:
      continue
    stage = zero.stage_of(d["zero_stage"], _group(e.name))
    stored = common.dim_axes(plan, e)
    compute = TensorEntry(e.name, tuple((compute_dim(n), s)
                                        for n, s in e.dims), e.dtype)
    used = common.dim_axes(plan, compute)
    variables[new] = {
        "stage": stage, "shape": list(e.shape),
        "param": {"dims": list(e.dim_names), "axes": _axes(stored)},
        "compute": {"dims": list(compute.dim_names), "axes": _axes(used)},
        "gradient": {"dims": list(e.dim_names if stage >= 2
                                  else compute.dim_names),
                     "axes": _axes(stored if stage >= 2 else used)},
        "regather": stage == 3 and stored != used,
    }
  layers = _layers(plan)
  return {
      "zero_stage": zero.as_json(d["zero_stage"]),
      "recompute": d["recompute"],
      "recompute_blocks": [f"layer_{i}" for i in layers[:d["recompute"]]],
      "microbatches": d["microbatches"],
      "compute_dtype": d["param_dtype"],
      "master_dtype": "float32",
      "variables": variables,
  }


def _axes(per_dim):
  return [list(a) for a in per_dim]


def optimizer_slots(plan, rename=None):
  """``{slot variable: variable it belongs to}`` of the plan's optimizer
  state (``.../adam_m``, ``.../adam_v``) and gradient accumulators."""
  names = {e.name for _, e in common.entries(plan, rename)}
  out = {}
  for n in names:
    base, _, last = n.rpartition("/")
    if base in names and last in ("adam_m", "adam_v", "grad_accumulator"):
      out[n] = base
  return out
