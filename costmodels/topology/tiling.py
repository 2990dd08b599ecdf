"""Mesh mappings as tilings, and the mapping of any tiling.

:func:`~costmodels.topology.mapping.map_mesh` prices the *row-major*
placement: logical processor ``p`` on chip ``p``.  The
:class:`mesh_tf.core.tiling.HierarchicalTiling` whose boxes are the axes'
segments (:func:`tiling_of`) splits the chips into the same groups along
every axis, so it has the same price; it differs only in the order inside
a box over two physical dims, where it walks a ring of neighbours instead
of row-major (for axes on one physical dim each, it is the identity).  Use its
``logical_to_physical`` as the device order of the mapping priced.

:func:`map_coordinates` goes the other way: given the physical coordinates
of every logical processor from *any* tiling (such as
:func:`mesh_tf.core.tiling.auto_logical_to_physical_tpu`), it finds each axis's
segments (per physical dim: how many chips at what stride) and prices them
with the same link rules.  For the row-major tiling it returns exactly
``map_mesh``'s mapping (a test holds that on TPU and GPU presets).

Where the two models differ: inside a box over two physical dims a tiling
orders an axis as a ring of neighbouring chips; the cost model prices such
an axis as a torus, one collective per physical dim (its ``torus``
structure), which uses the links of both dims and is never slower.  Both
use the same chips and links; only the collective algorithm differs.
"""

import math

from mesh_tf.core.tiling import HierarchicalTiling
from costmodels.errors import TopologyError
from costmodels.topology.mapping import (MeshMapping, _axis_link, _segment,
                                         map_mesh)
from costmodels.topology.presets import get_topology
from mesh_tf.core.mesh_shape import convert_to_mesh_shape

__all__ = ["map_coordinates", "tiling_of"]


def tiling_of(mapping):
  """The placement ``mapping`` prices, as a HierarchicalTiling.

  Args:
    mapping: a :class:`MeshMapping` (from :func:`map_mesh`).

  Returns:
    A HierarchicalTiling over the topology's dims (sizes major first) whose
    boxes are the axes' segments: along every axis the chips fall into the
    groups they form in ``mapping``, each in ring order.

  Example:
    >>> t = tiling_of(map_mesh("tpu-v4-4x4x4", "data:16;model:4"))
    >>> [s for s, _ in t.sizes_and_strides[0]]
    [4, 4, 1]
  """
  dims = mapping.topology.dims
  spec = []
  for axis in mapping.axes:
    box = [1] * len(dims)
    for seg in axis.segments:
      box[seg.phys_index] *= seg.size
    spec.append((axis.axis, box))
  return HierarchicalTiling(spec, [d.size for d in dims])


def _box_of(points, axis_name, pdims):
  """``[(phys_index, size, stride)]`` of a group's chips, minor dim first,
  checking that they fill a strided box."""
  out = []
  for k in reversed(range(len(pdims))):
    values = sorted({p[k] for p in points})
    if len(values) == 1:
      continue
    stride = values[1] - values[0]
    if values != list(range(values[0], values[0] + stride * len(values),
                            stride)):
      raise TopologyError(
          f"mesh axis {axis_name!r}: its chips along physical dim "
          f"{pdims[k].name} are at {values}, not evenly spaced; the cost "
          "model prices groups that fill a strided box")
    out.append((k, len(values), stride))
  if math.prod(n for _, n, _ in out) != len(points):
    raise TopologyError(f"mesh axis {axis_name!r}: its {len(points)} chips "
                        "do not fill a box of the physical dims")
  return out


def map_coordinates(topology, mesh_shape, physical_coordinates):
  """Prices a placement: logical processor ``p`` sits at
  ``physical_coordinates[p]``.

  Args:
    topology: a Topology or preset name.
    mesh_shape: the logical mesh (MeshShape, Shape or string).
    physical_coordinates: one coordinate tuple per logical processor
      (row-major logical numbering), over the topology's dims.  A trailing
      core coordinate of a TPU tiling may be dropped by the caller.

  Returns:
    A :class:`MeshMapping` whose axes have the segments the placement gives.

  Raises:
    TopologyError: if the counts differ, a coordinate has the wrong rank,
      the placement is not a bijection, or an axis's groups are not
      translates of one strided box (the link rules need that).
  """
  topology = get_topology(topology)
  mesh_shape = convert_to_mesh_shape(mesh_shape)
  coords = [tuple(int(v) for v in c) for c in physical_coordinates]
  pdims = topology.dims
  if len(coords) != topology.num_chips or mesh_shape.size != len(coords):
    raise TopologyError(
        f"{len(coords)} coordinates for mesh {mesh_shape} on topology "
        f"{topology.name!r} ({topology.num_chips} chips); give one per chip")
  if any(len(c) != len(pdims) for c in coords) or len(set(coords)) != len(
      coords) or any(not 0 <= v < d.size for c in coords
                     for v, d in zip(c, pdims)):
    raise TopologyError(
        f"physical_coordinates must be distinct {len(pdims)}-tuples inside "
        f"{topology.shape!r}, one per chip")
  links, stride = [], 1
  for axis_index in reversed(range(len(mesh_shape.dims))):
    axis = mesh_shape.dims[axis_index]
    boxes = set()
    for base in range(len(coords)):
      if (base // stride) % axis.size:
        continue  # one group per start on this axis
      group = [coords[base + i * stride] for i in range(axis.size)]
      boxes.add(tuple(_box_of(group, axis.name, pdims)))
    if len(boxes) != 1:
      raise TopologyError(f"mesh axis {axis.name!r}: its groups cover "
                          "boxes of different shapes; the cost model needs "
                          "one box per axis")
    segs = [_segment(pdims[k], k, n, st, (axis.name,))
            for k, n, st in boxes.pop()]
    links.append(_axis_link(axis.name, axis.size, segs))
    stride *= axis.size
  return MeshMapping(topology, mesh_shape, list(reversed(links)))


def row_major_agrees(topology, mesh_shape):
  """Whether :func:`map_coordinates` of :func:`tiling_of` equals
  :func:`map_mesh` (it should, always; tests call this)."""
  mapping = map_mesh(topology, mesh_shape)
  again = map_coordinates(mapping.topology, mapping.mesh_shape,
                          tiling_of(mapping).physical_coordinates)
  return again.axes == mapping.axes
