"""The cost model's own error type (its own module, so that
:mod:`costmodels.hardware` and :mod:`costmodels.topology` can both raise it
without importing each other)."""

from mesh_tf.core.errors import MtfError


class TopologyError(MtfError):
  """A chip, network or topology name is unknown, or a mesh does not fit a
  topology."""
