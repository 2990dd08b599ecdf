"""Exporters: a :class:`~autolayout.plans.plan.Plan` in other frameworks' terms.

Each exporter is a small module of pure functions from a Plan to a JSON-ready
dict (no framework is imported):

* :mod:`~autolayout.plans.export.jax`: ``Mesh`` axes and a ``PartitionSpec`` per
  param and named activation;
* :mod:`~autolayout.plans.export.torch`: DTensor ``placements`` per param (one per
  mesh dim);
* :mod:`~autolayout.plans.export.dtensor`: TF DTensor ``Layout`` sharding specs.

Variable names are mtf's; ``rename`` (a mapping or a function, see
:func:`autolayout.plans.export.common.renamed`) turns them into a framework
model's parameter names.  The formats are in ``docs/plan_files.md``.

Example:
  >>> from autolayout.plans import export
  >>> spec = export.to_jax(plan)                   # doctest: +SKIP
  >>> spec["params"]["layer_0/ffn/wi/kernel"]["partition_spec"]  # doctest: +SKIP
  [None, 'model']
"""

from autolayout.plans.export.common import renamed
from autolayout.plans.export.dtensor import to_dtensor
from autolayout.plans.export.jax import to_jax
from autolayout.plans.export.torch import to_torch

FORMATS = ("jax", "torch", "dtensor")


def export(plan, to, rename=None):
  """``to_jax``, ``to_torch`` or ``to_dtensor`` of ``plan`` by name.

  Raises:
    ExportError: for an unknown ``to``, or a plan the framework cannot
      express.
  """
  from autolayout.errors import ExportError
  fns = {"jax": to_jax, "torch": to_torch, "dtensor": to_dtensor}
  if to not in fns:
    raise ExportError(f"unknown export format {to!r}; use one of {FORMATS}")
  return fns[to](plan, rename=rename)


__all__ = ["FORMATS", "export", "renamed", "to_dtensor", "to_jax",
           "to_torch"]
