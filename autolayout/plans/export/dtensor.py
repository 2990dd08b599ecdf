"""A plan as TF DTensor layouts.

``to_dtensor(plan)`` gives::

  {"mesh": {"axis_names": [...], "shape": [...]},
   "params": {NAME: {"shape": [...], "dims": [...],
                     "sharding_specs": [...]}}}

``sharding_specs`` has one entry per tensor dim: the mesh dim name that
splits it, or ``"unsharded"`` (``tf.experimental.dtensor.UNSHARDED``).  Use
it as ``dtensor.Layout(sharding_specs, dtensor.create_mesh(
list(zip(axis_names, shape)), devices=...))``.
"""

from autolayout.errors import ExportError
from autolayout.plans.export import common, pipeline, training

UNSHARDED = "unsharded"


def sharding_specs(name, axes_per_dim):
  """One mesh dim name or ``"unsharded"`` per tensor dim.

  Raises:
    ExportError: for a dim split over several mesh axes (a DTensor Layout
      gives each tensor dim at most one mesh dim).
  """
  out = []
  for i, axes in enumerate(axes_per_dim):
    if len(axes) > 1:
      raise ExportError(f"{name!r} splits dim {i} over mesh axes "
                        f"{list(axes)}; a TF DTensor Layout splits a dim over"
                        " one mesh dim, so merge those axes into one")
    out.append(axes[0] if axes else UNSHARDED)
  return out


def to_dtensor(plan, rename=None):
  """The TF DTensor form of ``plan`` (module docstring); ``rename`` maps
  mtf names (see :func:`autolayout.plans.export.common.renamed`).

  A training plan also gets ``"training"``: its decisions as data (the
  stored and compute sharding specs of each variable, its stage, the
  recomputed blocks, the microbatch count, the dtypes) and, under
  ``not_expressible``, what TF DTensor has no API for."""
  params = {}
  train = training.training_record(plan, rename)
  for n, e in common.entries(plan, rename):
    if train is not None and n not in train["variables"]:
      continue
    params[n] = {"shape": list(e.shape), "dims": list(e.dim_names),
                 "sharding_specs": sharding_specs(
                     n, common.dim_axes(plan, e))}
  out = {"mesh": common.mesh_dict(plan), "params": params}
  if train is not None:
    variables = {n: {"stage": v["stage"],
                     "stored": sharding_specs(n, [tuple(a) for a in
                                                  v["param"]["axes"]]),
                     "compute": sharding_specs(n, [tuple(a) for a in
                                                   v["compute"]["axes"]])}
                 for n, v in train["variables"].items()}
    out["training"] = {
        **{k: train[k] for k in ("zero_stage", "recompute",
                                 "recompute_blocks", "microbatches",
                                 "compute_dtype", "master_dtype")},
        "variables": variables,
        "not_expressible": [
            "TF DTensor has no ZeRO stage, recompute or microbatch API: "
            "store each variable under 'stored', relayout it to 'compute' "
            "(dtensor.relayout) for the step, wrap the listed blocks in "
            "tf.recompute_grad and accumulate k microbatch gradients by "
            "hand"]}
  piped = pipeline.pipeline_record(plan, rename)
  if piped is not None:
    out["pipeline"] = pipeline.to_dtensor(piped)
  return out
