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

``activations`` are the named activations of the plan's model (see
:func:`autolayout.plans.identity.named_activations`: the outputs of the
layer-scoped ops such as ``layer_0/ffn/wi/einsum`` and ``final_norm/norm``,
and the step's outputs), for ``jax.lax.with_sharding_constraint``.  The same
``rename`` hook applies to them.
"""

from autolayout.plans.export import common


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
  to the JAX model's (see :func:`autolayout.plans.export.common.renamed`)."""
  return {"mesh": common.mesh_dict(plan),
          "params": {n: _record(plan, e)
                     for n, e in common.entries(plan, rename)},
          "activations": {n: _record(plan, e) for n, e in
                          common.entries(plan, rename, "activations")}}
