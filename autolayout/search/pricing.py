"""Prices of trace records on a topology, from :mod:`costmodels`.

The cost model's step time is the sum, over the records of a lowering, of
each compute record's roofline time and each collective's time on the links
its mesh axes map to.  The search prices the records of each op's stand-in
lowering with the same functions, so its objective is the cost model's.
"""

import costmodels
from costmodels import compute as cm_compute


class Pricer:
  """Seconds of compute and collective records on one mesh and topology.

  Args:
    topology: a resolved :class:`costmodels.Topology` (names are resolved
      once, by the caller's entry point).
    mesh_shape: a :class:`mesh_tf.MeshShape`.

  Raises:
    costmodels.TopologyError: if the mesh does not embed in the topology.
  """

  def __init__(self, topology, mesh_shape):
    self.topology = topology
    self.mesh_shape = mesh_shape
    self.mapping = costmodels.map_mesh(topology, mesh_shape)
    self._cache = {}

  def compute_s(self, record):
    key = ("c",) + tuple(record[1:])  # all but the op's name
    v = self._cache.get(key)
    if v is None:
      v = self._cache[key] = cm_compute.compute_time(record,
                                                     self.topology.chip)
    return v

  def _collective(self, record):
    """``costmodels.collective_price`` of ``record``, priced once."""
    key = record.key()
    v = self._cache.get(key)
    if v is None:
      v = self._cache[key] = costmodels.collective_price(record,
                                                         self.mapping)
    return v

  def collective_s(self, record):
    return self._collective(record)[0]

  def collective_by_axis(self, record):
    """``{mesh axis: seconds}`` of a collective (sums to
    :meth:`collective_s`)."""
    return self._collective(record)[1]

  def collective_wait_by_axis(self, record):
    """``{mesh axis: seconds}`` of the barrier part of
    :meth:`collective_by_axis` (``costmodels.collective_wait_by_axis``)."""
    return self._collective(record)[2]
