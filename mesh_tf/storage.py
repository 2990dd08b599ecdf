"""Sharded storage of weights, gradients and optimizer state (ZeRO / FSDP).

:func:`shard_storage` rewrites a *forward* graph so that each trainable
variable is stored under a **storage dim** (one of its dims renamed, e.g.
``d_model`` -> ``d_model_storage``) and read through a
:class:`~mesh_tf.ops.storage.StorageGatherOperation` that gives the
computation its usual dims.  The layout rules then decide the storage
layout like any other: ``d_model_storage:data`` keeps ``1/|data|`` of every
such variable, and of its optimizer slots (which take the variable's
shape), on each device, while ``d_model`` stays replicated over ``data``
for the computation.  Without a rule for the storage dim the variable is
stored as before and the gather moves nothing.

Stages (Rajbhandari et al., "ZeRO", 2020), as lowered here:

* **1** -- master weights and optimizer state sharded.  The compute copy is
  gathered once per step and kept until the backward pass has used it;
  gradients are all-reduced whole and each device keeps its shard.
* **2** -- as 1, but gradients are *reduce-scattered* onto the shard (half
  an all-reduce's traffic, and no full gradient once it is reduced).
* **3** -- as 2, and the compute copy is gathered before each use: once in
  forward and again in backward, and freed after each use (parameters
  sharded too).

Under mixed precision the gather moves the compute (``slice_dtype``) copy,
so a float32 master sharded over ``data`` is gathered as bfloat16.
Repeated layers share their storage dims, so one layout rule (one decision
of the search) covers every layer; ``group_of`` gives groups of variables
their own storage dims.

Call it on a graph that has no gradients yet (before ``mtf.gradients``, an
optimizer or a ``TrainStep``).

Example:
  >>> import mesh_tf as mtf
  >>> from mesh_tf import models
  >>> model = models.build_model("transformer_tiny")
  >>> gathers = shard_storage(model.graph, StoragePlan(stage=3))
  >>> model.graph.trainable_variables[0].shape
  Shape[vocab=64, d_model_storage=16]
"""

import re
from typing import Callable, NamedTuple, Optional, Tuple

from mesh_tf.core.dims import Dimension, Shape
from mesh_tf.core.errors import MtfError
from mesh_tf.ops.storage import StorageGatherOperation

__all__ = ["StoragePlan", "layer_role", "shard_storage", "storage_dim_name",
           "STAGES"]

STAGES = (0, 1, 2, 3)
STORAGE_SUFFIX = "_storage"


class StoragePlan(NamedTuple):
  """How variables are stored: the ZeRO ``stage`` (0: as they are) and the
  dims that become storage dims (the first one a variable has)."""
  stage: int = 0
  dims: Tuple[str, ...] = ("d_model",)


def storage_dim_name(dim_name, group=None):
  """``"d_model"`` -> ``"d_model_storage"`` (``..._storage_GROUP`` for a
  group of variables with its own decision)."""
  return dim_name + STORAGE_SUFFIX + (f"_{group}" if group else "")


def layer_role(variable):
  """The role of a variable in a layered model, the same in every layer:
  ``"layer_3/attention/q"`` -> ``"attention"``, ``"embedding/weights"`` ->
  ``"embedding"``.  A ``group_of`` for :func:`shard_storage`."""
  name = re.sub(r"^layer_\d+/", "", variable.name)
  return re.sub(r"\W", "_", name.split("/")[0])


def _routes_gradients(op, tensor):
  """Whether ``op`` only lists ``tensor`` to route its gradient (a
  recompute block's custom-gradient op), rather than computing with it."""
  return tensor in getattr(op, "forward_inputs", ())


def _compute_head(variable, consumers):
  """The tensor to gather: the variable's value, or its single cast copy
  (mixed precision gathers the compute dtype)."""
  head = variable.outputs[0]
  readers = [op for op in consumers.get(head, [])
             if not _routes_gradients(op, head)]
  if (len(readers) == 1 and getattr(readers[0], "kind", None) == "cast"
      and len(readers[0].inputs) == 1):
    return [head, readers[0].outputs[0]]
  return [head]


def shard_storage(graph, plan, group_of: Optional[Callable] = None):
  """Rewrites ``graph`` in place for sharded storage (see the module
  docstring).

  Args:
    graph: a forward mtf Graph (no gradients or optimizer yet).
    plan: a :class:`StoragePlan` (or a stage number).
    group_of: ``fn(variable) -> str or None``: variables of one group share
      storage dims (and so one layout decision); default one group.

  Returns:
    The list of StorageGatherOperations inserted (empty for stage 0).

  Raises:
    MtfError: for an unknown stage, or a graph that already has gradients.
  """
  if not isinstance(plan, StoragePlan):
    plan = StoragePlan(stage=plan)
  if plan.stage not in STAGES:
    raise MtfError(f"unknown ZeRO stage {plan.stage!r}; use one of {STAGES}")
  if plan.stage == 0:
    return []
  if any(t.gradient_of is not None for op in graph.operations
         for t in op.outputs):
    raise MtfError("shard_storage rewrites a forward graph, but this one "
                   "already has gradients; call it before mtf.gradients or "
                   "building the optimizer")
  consumers = graph.consumers()
  inserted = []
  for v in list(graph.trainable_variables):
    dim = next((d for d in v.shape if d.name in plan.dims), None)
    if dim is None:
      continue
    chain = _compute_head(v, consumers)
    last = chain[-1]
    readers = consumers.get(last, [])
    if not readers:
      continue
    compute_shape = last.shape
    name = storage_dim_name(dim.name, group_of(v) if group_of else None)
    storage_shape = Shape([Dimension(name, d.size) if d.name == dim.name
                           else d for d in compute_shape])
    for t in chain:
      t.shape = storage_shape
    gather = StorageGatherOperation(
        last, compute_shape, regather=plan.stage == 3,
        reduce_scatter=plan.stage >= 2, name=f"{v.name}/gather")
    # Place it right after the copy it reads, as if built there.
    graph.operations.remove(gather)
    graph.operations.insert(graph.operations.index(last.operation) + 1,
                            gather)
    out = gather.outputs[0]
    for op in readers:
      if _routes_gradients(op, last):
        # A recompute block lists the weights it reads to route their
        # gradients; it keeps the stored value (its copies of the block's
        # ops read the gather, or rebuild it under stage 3).
        continue
      op._inputs = [out if t is last else t  # pylint: disable=protected-access
                    for t in op.inputs]
    inserted.append(gather)
  return inserted
