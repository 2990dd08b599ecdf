"""A plan as PyTorch DTensor placements.

``to_torch(plan)`` gives::

  {"mesh": {"axis_names": [...], "shape": [...]},
   "params": {NAME: {"shape": [...], "dims": [...], "placements": [...]}}}

``placements`` has one entry per **mesh dim** (not per tensor dim, as a JAX
``PartitionSpec`` has): ``{"shard": i}`` when that mesh dim splits tensor dim
``i``, else ``{"replicate": true}``.  This is DTensor's transposed indexing:
``partition_spec [None, "model"]`` on mesh ``(data, model)`` becomes
``[{"replicate": true}, {"shard": 1}]``, i.e. ``[Replicate(), Shard(1)]`` on
``init_device_mesh("cpu", shape, mesh_dim_names=axis_names)``.
"""

from autolayout.errors import ExportError
from autolayout.plans.export import common, pipeline, training


def placements(axes_per_dim, axis_names):
  """One placement per mesh axis from per-dim tuples of axis names.

  A dim split over several axes gets ``{"shard": i}`` on each; DTensor then
  splits it over those mesh dims in mesh order, so they must be listed in
  mesh order (major first) to mean the same split.

  Raises:
    ExportError: for a dim split over axes out of mesh order.

  Example:
    >>> placements([(), ("model",)], ["data", "model"])
    [{'replicate': True}, {'shard': 1}]
  """
  out = [{"replicate": True} for _ in axis_names]
  for i, axes in enumerate(axes_per_dim):
    order = [axis_names.index(a) for a in axes]
    if order != sorted(order):
      raise ExportError(
          f"tensor dim {i} is split over mesh axes {list(axes)} in an order "
          f"other than the mesh's {list(axis_names)}; DTensor placements "
          "split in mesh order, so reorder the mesh axes")
    for m in order:
      out[m] = {"shard": i}
  return out


def to_torch(plan, rename=None):
  """The DTensor form of ``plan`` (module docstring); ``rename`` maps mtf
  names to the torch module's parameter names (see
  :func:`autolayout.plans.export.common.renamed`).  A training plan also
  gets ``"training"`` (:func:`training_section`)."""
  names = plan.mesh_shape.dimension_names
  train = training.training_record(plan, rename)
  params = {}
  for n, e in common.entries(plan, rename):
    if train is not None and n not in train["variables"]:
      continue
    params[n] = {"shape": list(e.shape), "dims": list(e.dim_names),
                 "placements": placements(common.dim_axes(plan, e), names)}
  out = {"mesh": common.mesh_dict(plan), "params": params}
  if train is not None:
    out["training"] = training_section(train, names)
  piped = pipeline.pipeline_record(plan, rename)
  if piped is not None:
    out["pipeline"] = pipeline.to_torch(piped)
  return out


def training_section(train, axis_names):
  """A training record in PyTorch's terms: per variable the DTensor
  placements of its compute copy (tensor parallelism) and of its stored
  shard, and the ``fully_shard`` (FSDP2) settings of its ZeRO stage; the
  blocks to wrap in activation checkpointing; gradient accumulation; the
  ``MixedPrecisionPolicy``; and ``not_expressible``."""
  variables, missing = {}, []
  for n, v in train["variables"].items():
    tp = placements([tuple(a) for a in v["compute"]["axes"]], axis_names)
    stored = [tuple(a) for a in v["param"]["axes"]]
    shard_dims = [i for i, (s, c) in enumerate(zip(stored,
                                                   v["compute"]["axes"]))
                  if tuple(s) != tuple(c)]
    fsdp_axes = sorted({a for i in shard_dims for a in stored[i]})
    rec = {"stage": v["stage"], "tensor_parallel": tp,
           "stored": placements(stored, axis_names),
           "fully_shard": None}
    if v["stage"] >= 1 and fsdp_axes:
      rec["fully_shard"] = {
          "mesh_dims": fsdp_axes,
          "reshard_after_forward": v["stage"] == 3,
          "shard_dim": shard_dims[0]}
      if shard_dims[0] != 0:
        missing.append(
            f"{n}: the plan stores dim {shard_dims[0]} "
            f"({v['param']['dims'][shard_dims[0]]}) sharded; fully_shard "
            "shards dim 0 (FSDP2's Shard(0)), the same bytes per device "
            "but another slice")
      if v["stage"] == 1:
        missing.append(
            f"{n}: zero_stage 1 (gradients all-reduced whole): FSDP2 has "
            "no stage 1; fully_shard with reshard_after_forward=False is "
            "stage 2 (gradients reduce-scattered)")
    variables[n] = rec
  return {
      "zero_stage": train["zero_stage"],
      "variables": variables,
      "activation_checkpointing": {
          "blocks": train["recompute_blocks"],
          "how": "torch.distributed.algorithms._checkpoint."
                 "checkpoint_wrapper.checkpoint_wrapper(block) per listed "
                 "block"},
      "gradient_accumulation": {
          "microbatches": train["microbatches"],
          "how": "run k forward/backward passes per optimizer step; "
                 "module.set_requires_gradient_sync(False) for all but "
                 "the last"},
      "mixed_precision": {"param_dtype": train["compute_dtype"],
                          "reduce_dtype": "float32",
                          "master_dtype": train["master_dtype"]},
      "not_expressible": missing,
  }
