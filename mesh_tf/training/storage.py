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

**Stage per variable group.**  ``StoragePlan(stages=(("attention", 3),
("embedding", 1)))`` gives each named group its own stage (groups it does
not name take ``stage``); the groups are :func:`variable_group`'s unless
``group_of`` says otherwise, and each group then has its own storage dims
(``d_model_storage_ffn``), so storage and stage are both per group while
every repeated layer of a group shares one decision.

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

__all__ = ["GROUPS", "StoragePlan", "layer_role", "shard_storage",
           "storage_dim_name", "variable_group", "STAGES"]

STAGES = (0, 1, 2, 3)
STORAGE_SUFFIX = "_storage"
# The variable groups of a layered model (see variable_group).
GROUPS = ("attention", "embedding", "ffn", "norm")


class StoragePlan(NamedTuple):
  """How variables are stored: the ZeRO ``stage`` (0: as they are), the
  dims that become storage dims (the first one a variable has), and
  ``stages``: ``((group, stage), ...)`` for groups with a stage of their
  own (the others take ``stage``)."""
  stage: int = 0
  dims: Tuple[str, ...] = ("d_model",)
  stages: Tuple[Tuple[str, int], ...] = ()

  def stage_of(self, group):
    """The stage of variable group ``group``."""
    return dict(self.stages).get(group, self.stage)

  @property
  def all_stages(self):
    """Every stage the plan uses."""
    return {self.stage} | {s for _, s in self.stages}


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


def variable_group(variable):
  """The group of a variable whose storage the search decides as one: one
  of :data:`GROUPS`, the same in every repeated layer.  Layer norms
  (scales, biases) are ``"norm"``; token and position embeddings and the
  softmax weights ``"embedding"``; attention weights ``"attention"``;
  everything else, feed-forward and expert weights, ``"ffn"``."""
  role = layer_role(variable)
  if "norm" in role:
    return "norm"
  if "embedding" in role or "softmax" in role:
    return "embedding"
  if "attention" in role:
    return "attention"
  return "ffn"


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
      storage dims (and so one layout decision) and the plan's stage for
      that group; default one group, or :func:`variable_group` when the
      plan has per-group ``stages``.

  Returns:
    The list of StorageGatherOperations inserted (empty for stage 0).

  Raises:
    MtfError: for an unknown stage, or a graph that already has gradients.
  """
  if not isinstance(plan, StoragePlan):
    plan = StoragePlan(stage=plan)
  for group, stage in (("", plan.stage),) + tuple(plan.stages):
    if stage not in STAGES:
      where = f" of variable group {group!r}" if group else ""
      raise MtfError(f"unknown ZeRO stage {stage!r}{where}; use one of "
                     f"{STAGES}")
  if plan.stages and group_of is None:
    group_of = variable_group
  if plan.all_stages == {0}:
    return []
  if any(t.gradient_of is not None for op in graph.operations
         for t in op.outputs):
    raise MtfError("shard_storage rewrites a forward graph, but this one "
                   "already has gradients; call it before mtf.gradients or "
                   "building the optimizer")
  consumers = graph.consumers()
  inserted = []
  for v in list(graph.trainable_variables):
    group = group_of(v) if group_of else None
    stage = plan.stage_of(group)
    dim = next((d for d in v.shape if d.name in plan.dims), None)
    if dim is None or stage == 0:
      continue
    chain = _compute_head(v, consumers)
    last = chain[-1]
    readers = consumers.get(last, [])
    if not readers:
      continue
    compute_shape = last.shape
    name = storage_dim_name(dim.name, group)
    storage_shape = Shape([Dimension(name, d.size) if d.name == dim.name
                           else d for d in compute_shape])
    for t in chain:
      t.shape = storage_shape
    gather = StorageGatherOperation(
        last, compute_shape, regather=stage == 3,
        reduce_scatter=stage >= 2, name=f"{v.name}/gather")
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
