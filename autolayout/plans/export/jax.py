"""A plan as JAX shardings: a ``Mesh`` and a ``PartitionSpec`` per tensor.

``to_jax(plan)`` gives::

  {"mesh": {"axis_names": [...], "shape": [...]},
   "params": {NAME: {"shape": [...], "dims": [...], "partition_spec": [...]}},
   "activations": {NAME: {"shape": [...], "dims": [...],
                          "partition_spec": [...]}}}

``partition_spec`` has one entry per positional dim: a mesh axis name, a list
of names for a dim split over several axes (major first, as
``PartitionSpec(("a", "b"))``), or None.  Use it as
``NamedSharding(mesh, PartitionSpec(*spec))`` with
``Mesh(devices.reshape(shape), axis_names)``.

A training plan adds ``"training"``: per variable the PartitionSpecs of its
stored parameter, optimizer state, compute copy and gradient by its ZeRO
stage, a ``jax.checkpoint`` policy per recomputed block, the microbatch
count, the dtypes and what JAX cannot express (see
:func:`training_section`).

``activations`` are the named activations of the plan's model (see
:func:`autolayout.plans.identity.named_activations`: the outputs of the
layer-scoped ops such as ``layer_0/ffn/wi/einsum`` and ``final_norm/norm``,
and the step's outputs), for ``jax.lax.with_sharding_constraint``.  The same
``rename`` hook applies to them.
"""

from autolayout.plans.export import common, pipeline, training


def partition_spec(axes_per_dim):
  """``[None | axis | [axes...]]`` from per-dim tuples of mesh axis names.

  Example:
    >>> partition_spec([(), ("model",), ("data", "model")])
    [None, 'model', ['data', 'model']]
  """
  return [None if not a else a[0] if len(a) == 1 else list(a)
          for a in axes_per_dim]


def _record(plan, entry):
  return {"shape": list(entry.shape), "dims": list(entry.dim_names),
          "partition_spec": partition_spec(common.dim_axes(plan, entry))}


def to_jax(plan, rename=None):
  """The JAX form of ``plan`` (module docstring); ``rename`` maps mtf names
  to the JAX model's (see :func:`autolayout.plans.export.common.renamed`).

  A training plan also gets ``"training"`` (:func:`training_section`), and
  its ``params`` are then the trainable variables only (their optimizer
  state and accumulators are in ``training``)."""
  train = training.training_record(plan, rename)
  params = {n: _record(plan, e) for n, e in common.entries(plan, rename)
            if train is None or n in train["variables"]}
  out = {"mesh": common.mesh_dict(plan), "params": params,
         "activations": {n: _record(plan, e) for n, e in
                         common.entries(plan, rename, "activations")}}
  if train is not None:
    out["training"] = training_section(train)
  piped = pipeline.pipeline_record(plan, rename)
  if piped is not None:
    out["pipeline"] = pipeline.to_jax(piped)
  return out


def training_section(train):
  """A training record (:func:`autolayout.plans.export.training.
  training_record`) in JAX's terms: per variable the ``PartitionSpec`` of
  the stored parameter (and of its Adam ``m``/``v``, which take its
  layout), of the compute copy the step uses, and of its reduced gradient;
  a ``jax.checkpoint`` policy for the recomputed blocks; the microbatch
  count and the dtypes; and ``not_expressible``."""
  def spec(rec):
    return partition_spec([tuple(a) for a in rec["axes"]])
  variables = {}
  for n, v in train["variables"].items():
    variables[n] = {"stage": v["stage"], "param": spec(v["param"]),
                    "optimizer_state": spec(v["param"]),
                    "compute": spec(v["compute"]),
                    "gradient": spec(v["gradient"])}
  missing = []
  if any(v["regather"] for v in train["variables"].values()):
    missing.append(
        "zero_stage 3's gather before each use (and free after): XLA "
        "schedules the all-gather of a sharded parameter itself; the "
        "shardings say where parameters live, not when they are gathered")
  if train["microbatches"] > 1:
    missing.append(
        "gradient accumulators as persistent state: the JAX step sums the "
        "microbatch gradients in its loop carry (a temporary), shaped and "
        "sharded as 'gradient'")
  return {
      "zero_stage": train["zero_stage"],
      "variables": variables,
      "checkpoint": {"blocks": train["recompute_blocks"],
                     "policy": "nothing_saveable",
                     "how": "wrap each listed block in jax.checkpoint("
                            "block, policy=jax.checkpoint_policies."
                            "nothing_saveable)"},
      "microbatches": train["microbatches"],
      "compute_dtype": train["compute_dtype"],
      "master_dtype": train["master_dtype"],
      "not_expressible": missing,
  }
