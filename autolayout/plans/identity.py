"""What a plan knows about the graph it was made for, and how to check it.

:func:`model_identity` reads a graph's named dims, variables, named
activations and a structural fingerprint.  :func:`compare` lists, in words,
how another graph differs (``dim d_ff=2048 -> 4096``, ``missing variable
layer_0/w``), so that a stale plan is never applied silently.

The fingerprint is a SHA-256 of the graph's structure only: per op in build
order, its class (and ``kind``, e.g. ``relu``), which earlier outputs it reads, and its output shapes and
dtypes; plus every variable's name, and for a while loop its condition's
and body's ops (their signatures).  Other op names are left out, so that
renaming a scope that holds no variable keeps the fingerprint.
"""

import dataclasses
import hashlib
import json
from typing import Optional, Tuple

from mesh_tf.ops.creation import ImportOperation
from autolayout.errors import PlanMismatchError

@dataclasses.dataclass(frozen=True)
class TensorEntry:
  """A named tensor of the model: its dims (names and sizes) and dtype.

  ``trainable`` is None for activations.
  """
  name: str
  dims: Tuple[Tuple[str, int], ...]
  dtype: str
  trainable: Optional[bool] = None

  @property
  def dim_names(self):
    return tuple(n for n, _ in self.dims)

  @property
  def shape(self):
    return tuple(s for _, s in self.dims)


@dataclasses.dataclass(frozen=True)
class ModelIdentity:
  """A model as a plan records it.

  Attributes:
    name: the model's name (a zoo preset name, or what the caller gave).
    dims: ``((dim name, size), ...)`` of every dim of every tensor, sorted
      by name; a name used with several sizes appears once per size.
    variables: :class:`TensorEntry` per variable, in build order.
    activations: :class:`TensorEntry` per named activation (see
      :func:`named_activations`), in build order.
    fingerprint: ``"sha256:<hex>"`` of the structure (module docstring).
    num_ops: the graph's operation count.
    source: how to rebuild it, as canonical JSON text (e.g. the zoo model and
      overrides the CLI used), or None.
  """
  name: str
  dims: Tuple[Tuple[str, int], ...]
  variables: Tuple[TensorEntry, ...]
  activations: Tuple[TensorEntry, ...]
  fingerprint: str
  num_ops: int
  source: Optional[str] = None

  def dim_sizes(self):
    """``{dim name: size}``; a name with several sizes maps to a tuple."""
    out = {}
    for n, s in self.dims:
      out.setdefault(n, []).append(s)
    return {n: (v[0] if len(v) == 1 else tuple(v)) for n, v in out.items()}

  def variable(self, name):
    for v in self.variables:
      if v.name == name:
        return v
    raise KeyError(name)


def _entry(tensor, name, trainable=None):
  return TensorEntry(name, tuple((d.name, d.size) for d in tensor.shape.dims),
                     str(tensor.dtype), trainable)


def _variable_ids(graph):
  return {id(v) for v in graph.all_variables}


def named_activations(graph, outputs=()):
  """The activations a user would pin with a sharding constraint.

  These are the model's inputs (``import_tf_tensor``, e.g. ``inputs`` and
  ``targets``), the outputs of every forward op whose name the model code
  scoped (it contains ``/``, e.g. ``layer_0/ffn/wi/einsum``,
  ``layer_0/attention/o_proj``, ``final_norm/norm``), plus ``outputs``
  (e.g. ``logits`` and ``loss``), keyed by op name.  Variables and the ops
  autodiff and the optimizer add (their last name part holds ``grad`` or
  ``adam``) are left out: frameworks place their own gradients.

  ``outputs`` may be a dict ``{name: tensor}`` (e.g. ``{"logits": ...,
  "loss": model.loss}``) to give them their own names.

  Returns:
    ``[(name, tensor), ...]`` in build order.
  """
  given = dict(outputs) if isinstance(outputs, dict) else {}
  given_names = {id(t): n for n, t in given.items()}
  outputs = list(given.values()) if given else list(outputs)
  out_ids = {id(t) for t in outputs}
  found, variables = [], _variable_ids(graph)
  for op in graph.operations:
    if id(op) in variables:
      continue
    last = op.name.split("/")[-1]
    named = isinstance(op, ImportOperation) or (
        "/" in op.name and "grad" not in last and "adam" not in last)
    for t in op.outputs:
      if id(t) in out_ids or (named and t.shape.ndims > 0):
        found.append((given_names.get(id(t)) or (
            op.name if len(op.outputs) == 1 else t.name), t))
  seen, result = set(), []
  for name, t in found:
    if name not in seen:
      seen.add(name)
      result.append((name, t))
  return result


def fingerprint(graph):
  """``"sha256:<hex>"`` of the graph's structure (see the module docs)."""
  where, records, variables = {}, [], _variable_ids(graph)
  for i, op in enumerate(graph.operations):
    for j, t in enumerate(op.outputs):
      where[id(t)] = (i, j)
    kind = getattr(op, "kind", None)
    record = [
        type(op).__name__ + (f":{kind}" if isinstance(kind, str) else ""),
        [list(where.get(id(t), (-1, -1))) for t in op.inputs],
        [[[d.name, d.size] for d in t.shape.dims] + [str(t.dtype)]
         for t in op.outputs],
        op.name if id(op) in variables else None]
    if hasattr(op, "body_operations"):
      # A while loop: another body is another model (its signature names no
      # op, only the sub-graphs' op kinds, shapes and parameters).
      record.append(repr(op.signature))
    records.append(record)
  text = json.dumps(records, separators=(",", ":"), sort_keys=True)
  return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()


def model_identity(graph, name, outputs=(), source=None):
  """The :class:`ModelIdentity` of ``graph``.

  Args:
    graph: an mtf Graph.
    name: the model's name.
    outputs: the step's outputs (they are among the named activations).
    source: optional JSON-able dict saying how to rebuild the model.
  """
  # A while loop's body and condition dims are the model's too (a plan may
  # split them).
  dims = sorted({(d.name, d.size) for op in graph.operations
                 for t in list(op.outputs) + list(
                     getattr(op, "inner_tensors", ()))
                 for d in t.shape.dims})
  variables = tuple(_entry(v.outputs[0], v.name, bool(v.trainable))
                    for v in graph.all_variables)
  acts = tuple(_entry(t, n) for n, t in named_activations(graph, outputs))
  src = None if source is None else json.dumps(source, sort_keys=True)
  return ModelIdentity(str(name), tuple(dims), variables, acts,
                       fingerprint(graph), len(graph.operations), src)


def _fmt_dims(entry):
  return "[" + ", ".join(f"{n}={s}" for n, s in entry.dims) + "]"


def differences(plan_model, graph_model):
  """How ``graph_model`` differs from ``plan_model``: a list of short lines
  (empty when the fingerprints are equal)."""
  if plan_model.fingerprint == graph_model.fingerprint:
    return []
  changes = []
  old, new = plan_model.dim_sizes(), graph_model.dim_sizes()
  for d in sorted(old):
    if d not in new:
      changes.append(f"dim {d}={old[d]} is gone")
    elif old[d] != new[d]:
      changes.append(f"dim {d}={old[d]} -> {new[d]}")
  for d in sorted(set(new) - set(old)):
    changes.append(f"new dim {d}={new[d]}")
  old_v = {v.name: v for v in plan_model.variables}
  new_v = {v.name: v for v in graph_model.variables}
  resized = {d for d in old if d in new and old[d] != new[d]}
  for n, v in old_v.items():
    if n not in new_v:
      changes.append(f"missing variable {n}")
    elif v.dims != new_v[n].dims and v.dim_names == new_v[n].dim_names and (
        {d for (d, a), (_, b) in zip(v.dims, new_v[n].dims) if a != b}
        <= resized) and v.dtype == new_v[n].dtype:
      continue  # Said by the dim lines above.
    elif v.dims != new_v[n].dims or v.dtype != new_v[n].dtype:
      changes.append(f"variable {n} was {_fmt_dims(v)} {v.dtype}, is "
                     f"{_fmt_dims(new_v[n])} {new_v[n].dtype}")
  for n in new_v:
    if n not in old_v:
      changes.append(f"new variable {n}")
  if not changes:
    changes.append(f"the ops changed ({graph_model.num_ops} ops, the plan's "
                   f"graph had {plan_model.num_ops}) though every dim and "
                   "variable is the same")
  return changes


def check(plan_model, graph_model, what="the graph"):
  """Raises :class:`PlanMismatchError` if ``graph_model`` is not the model
  the plan was made for, naming every difference."""
  changes = differences(plan_model, graph_model)
  if not changes:
    return
  shared = set(v.name for v in plan_model.variables) & set(
      v.name for v in graph_model.variables)
  if plan_model.variables and not shared:
    raise PlanMismatchError(
        f"the plan is for model {plan_model.name!r}, which shares no "
        f"variable with {what} ({graph_model.name!r}); use a plan made for "
        "this model, or solve it anew", changes)
  shown = "; ".join(changes[:8])
  more = f" (and {len(changes) - 8} more)" if len(changes) > 8 else ""
  raise PlanMismatchError(
      f"the plan for model {plan_model.name!r} is stale: {what} changed: "
      f"{shown}{more}; solve again (the old plan can seed the solver as a "
      "hint)", changes)
