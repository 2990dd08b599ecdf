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
from autolayout.plans.export import common


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
  :func:`autolayout.plans.export.common.renamed`)."""
  names = plan.mesh_shape.dimension_names
  params = {}
  for n, e in common.entries(plan, rename):
    params[n] = {"shape": list(e.shape), "dims": list(e.dim_names),
                 "placements": placements(common.dim_axes(plan, e), names)}
  return {"mesh": common.mesh_dict(plan), "params": params}
