"""Physical topologies, and how a logical mesh is laid onto one.

A :class:`Topology` is a chip spec plus physical dimensions, major first:

* TPU slices are 2D/3D tori of ICI links, each dimension with or without
  wraparound (``tpu-v4-4x4x4``, ``tpu-v5e-16x16``, ``tpu-v5p-8x8x16``);
* GPU clusters are ``node x gpu``: GPUs inside a node share an NVSwitch (or
  PCIe), nodes are joined by InfiniBand with one port per GPU (``dgx-h100``,
  ``h100x8-nodes4``, ``h200x8-nodes16``).

:func:`map_mesh` lays a logical mesh such as ``data:16;model:8`` onto the
topology *row-major on both sides*: processor ``pnum`` of the mesh (the
numbering :class:`mesh_tf.MeshImpl` uses) is chip ``pnum`` of the topology,
numbered row-major over the physical dimensions.  So the minor-most mesh axis
takes the minor-most physical dimension (or a contiguous part of it), and so
on outwards.  Each mesh axis learns the *segments* it occupies: which
physical dimension, how many chips, at what stride, and whether they form a
ring (a whole wraparound dimension), a line, or hang off a switch.

Sharing links: a mesh axis that takes the *outer* part of a physical
dimension (stride ``s > 1``) has ``s`` concurrent groups whose messages
travel over the same links, so each group gets ``1/s`` of the link
bandwidth.  A collective over several mesh axes that split one physical
dimension between them runs over that dimension as a whole (the segments are
merged), as real hardware would.

Example:
  >>> m = map_mesh("h100x8-nodes2", "data:4;model:4")
  >>> m["model"].link_kind, m["data"].link_kind
  ('nvlink', 'nvlink+infiniband')

Modules: :mod:`~costmodels.topology.types` (:class:`PhysicalDim`,
:class:`Topology`), :mod:`~costmodels.topology.presets` (constructors and
named presets), :mod:`~costmodels.topology.mapping` (:func:`map_mesh`) and
:mod:`~costmodels.topology.tiling` (:func:`tiling_of`, the device order of
a mapping as a :class:`mesh_tf.core.tiling.HierarchicalTiling`, and
:func:`map_coordinates`, the mapping of any placement, such as
:func:`mesh_tf.core.tiling.auto_logical_to_physical_tpu`'s).
The error type lives in :mod:`costmodels.errors`.
"""

from costmodels.errors import TopologyError
from costmodels.topology.types import PhysicalDim, Topology
from costmodels.topology.presets import (get_topology, gpu_cluster,
                                         list_topologies, torus, tpu_slice)
from costmodels.topology.mapping import (AxisLink, MeshMapping, Segment,
                                         map_mesh)
from costmodels.topology.tiling import map_coordinates, tiling_of

__all__ = ["AxisLink", "MeshMapping", "PhysicalDim", "Segment", "Topology",
           "TopologyError", "get_topology", "gpu_cluster", "list_topologies",
           "map_coordinates", "map_mesh", "tiling_of", "torus", "tpu_slice"]
