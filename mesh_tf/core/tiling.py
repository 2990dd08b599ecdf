"""Laying a logical mesh onto a physical torus: which chip is which processor.

A logical mesh (``rows:4;cols:8``) numbers its processors row-major; a TPU
slice numbers its chips by physical coordinates ``(x, y, ...)``.  A *tiling*
says which physical coordinate each logical processor gets, chosen so that
the processors of one logical axis (the group a collective over that axis
runs in) sit on neighbouring chips.

:class:`HierarchicalTiling` is the explicit form: each logical axis covers a
box of the physical mesh (its *projected shape*, one size per physical
dim); the last axis gets the finest box (stride 1), earlier axes coarser,
strided ones, so every group of an axis is a translate of one strided box.
Within its box an axis walks a ring: a cycle through neighbouring chips over
its first two physical dims of size > 1 (:func:`ring_order`), so a
collective along it needs no wraparound link.  :func:`auto_logical_to_physical_tpu`
picks the boxes itself for a TPU slice, making the later logical axes' tiles
compact.  Both are Mesh TensorFlow's (``mtf.simd_mesh_impl``), written anew;
the differences are listed on each.

Pure logic: no TensorFlow, no devices.  Physical processor numbers are the
row-major numbers of the physical coordinates (last coordinate fastest).

Example:
  >>> t = HierarchicalTiling([("rows", [2, 1]), ("cols", [2, 4])], [4, 4])
  >>> t.mesh_shape
  Shape[rows=2, cols=8]
  >>> t.physical_coordinates[:4]
  [(0, 0), (0, 1), (0, 2), (0, 3)]
"""

import math
from typing import List, Sequence, Tuple

from mesh_tf.core import dims as dims_lib
from mesh_tf.core.errors import MtfError

__all__ = ["HierarchicalTiling", "auto_logical_to_physical_tpu",
           "physical_shape_3d_from_topology_proto_4d", "ring_order"]


class TilingError(MtfError):
  """A tiling spec or shape that cannot tile the physical mesh."""


def _coordinates(shape, pnum):
  """Row-major coordinates of ``pnum`` in ``shape`` (last fastest)."""
  out = []
  for size in reversed(shape):
    pnum, c = divmod(pnum, size)
    out.append(c)
  return tuple(reversed(out))


def _pnum(shape, coordinates):
  pnum = 0
  for size, c in zip(shape, coordinates):
    pnum = pnum * size + c
  return pnum


def ring_order(m, n):
  """The cells of an ``m x n`` grid in an order where neighbours follow.

  With ``m`` or ``n`` even (and both > 1) it is a cycle: each cell is next to
  the one before, and the last is next to the first, without wraparound
  links (down one column, snaking over the others, back up the first).
  With one side 1 it is that line.  With both odd no such cycle exists (the
  grid is bipartite with an odd number of cells), so it is a snake path.

  Mesh TensorFlow's ``_ring_2d`` is this cycle for even ``m``; for odd ``m``
  it fell back to column-major order (its neighbours do not follow), where
  this transposes the cycle for even ``n``, or snakes.

  Example:
    >>> ring_order(2, 3)
    [(0, 0), (0, 1), (0, 2), (1, 2), (1, 1), (1, 0)]
  """
  if m < 1 or n < 1:
    raise TilingError(f"ring_order needs a grid of positive sides, got "
                      f"{m}x{n}")
  if m == 1:
    return [(0, j) for j in range(n)]
  if n == 1:
    return [(i, 0) for i in range(m)]
  if m % 2 == 0:
    order = [(0, 0)]
    for i in range(0, m, 2):  # two rows at a time: out along i, back along i+1
      order += [(i, j) for j in range(1, n)]
      order += [(i + 1, j) for j in range(n - 1, 0, -1)]
    order += [(i, 0) for i in range(m - 1, 0, -1)]  # home up column 0
    return order
  if n % 2 == 0:
    return [(i, j) for j, i in ring_order(n, m)]
  return [(i, j if i % 2 == 0 else n - 1 - j)
          for i in range(m) for j in range(n)]


def _box_walk(sizes):
  """The offsets, in box units, of the processors of one logical axis.

  A ring over the first two dims of size > 1 is the major part; any
  further dims of size > 1 vary fastest (as the original orders them).
  """
  big = [k for k, s in enumerate(sizes) if s > 1]
  total = math.prod(sizes)
  if len(big) < 2:
    return [_coordinates(sizes, p) for p in range(total)]
  a, b = big[:2]
  ring = ring_order(sizes[a], sizes[b])
  rest = [k for k in range(len(sizes)) if k not in (a, b)]
  rest_shape = [sizes[k] for k in rest]
  rest_total = math.prod(rest_shape)
  out = []
  for p in range(total):
    r, q = divmod(p, rest_total)
    c = [0] * len(sizes)
    c[a], c[b] = ring[r]
    for k, v in zip(rest, _coordinates(rest_shape, q)):
      c[k] = v
    out.append(tuple(c))
  return out


def _check_shape(values, what):
  values = [int(v) for v in values]
  if not values or any(v < 1 for v in values):
    raise TilingError(f"{what} must be a non-empty list of positive "
                      f"integers, got {values}")
  return values


class HierarchicalTiling:
  """A logical mesh laid onto ``physical_shape`` by nested boxes.

  Args:
    spec: one ``(name, projected_shape)`` pair per logical axis, major
      first.  ``projected_shape`` has one size per physical dim: the box of
      the physical mesh that one group of the axis covers (its chips are
      ``stride`` apart, ``stride`` being the product of the later axes'
      sizes on that dim).  The first may be None: the physical mesh divided
      by the others.
    physical_shape: the physical mesh's sizes, e.g. ``[4, 4, 4]``.

  Attributes:
    mesh_shape: the logical mesh as a Shape (axis sizes are the products of
      the projected shapes).
    logical_to_physical: the physical processor number of each logical one
      (a permutation of ``range(n)``).
    physical_coordinates: the physical coordinates of each logical one.
    sizes_and_strides: per logical axis, per physical dim, ``(size,
      stride)`` of its box.

  Raises:
    TilingError: if a projected shape has the wrong rank, or they do not
      multiply to ``physical_shape`` dim by dim.

  Mesh TensorFlow's walk inside a box rings only when its first two
  physical dims are both > 1; this one rings over the first two of size
  > 1 (``[1, 4, 4]`` too) and is otherwise the same.
  """

  __slots__ = ("_names", "_physical_shape", "_sizes_and_strides", "_coords",
               "_pnums", "_mesh_shape")

  def __init__(self, spec, physical_shape):
    physical = _check_shape(physical_shape, "physical_shape")
    names = [str(name) for name, _ in spec]
    projected = [None if s is None else _check_shape(s, f"spec {name!r}")
                 for name, s in spec]
    for name, shape in zip(names, projected):
      if shape is not None and len(shape) != len(physical):
        raise TilingError(
            f"spec {name!r}: projected shape {shape} has {len(shape)} sizes "
            f"but the physical mesh {physical} has {len(physical)} dims; "
            "give one size per physical dim")
    if any(s is None for s in projected[1:]):
      raise TilingError("only the first spec entry may be None (filled in "
                        "as what the others leave)")
    if projected and projected[0] is None:
      rest = [math.prod(s[k] for s in projected[1:])
              for k in range(len(physical))]
      if any(p % r for p, r in zip(physical, rest)):
        raise TilingError(f"spec {names[1:]} projects to {rest} chips per "
                          f"dim, which do not divide the physical mesh "
                          f"{physical}")
      projected[0] = [p // r for p, r in zip(physical, rest)]
    strides, layout = [1] * len(physical), []
    for shape in reversed(projected):
      layout.append(tuple(zip(shape, strides)))
      strides = [st * s for st, s in zip(strides, shape)]
    if strides != physical:
      raise TilingError(
          f"tiling spec {list(zip(names, projected))} multiplies to "
          f"{strides} per physical dim, not the physical mesh {physical}; "
          "make the projected shapes' products equal it dim by dim")
    layout.reverse()
    walks = []
    for boxes in layout:
      sizes = [s for s, _ in boxes]
      walks.append([tuple(c * st for c, (_, st) in zip(w, boxes))
                    for w in _box_walk(sizes)])
    logical = [math.prod(shape) for shape in projected]
    coords = []
    for p in range(math.prod(logical)):
      c = [0] * len(physical)
      for axis, index in enumerate(_coordinates(logical, p)):
        for k, off in enumerate(walks[axis][index]):
          c[k] += off
      coords.append(tuple(c))
    object.__setattr__(self, "_names", tuple(names))
    object.__setattr__(self, "_physical_shape", tuple(physical))
    object.__setattr__(self, "_sizes_and_strides", tuple(layout))
    object.__setattr__(self, "_coords", tuple(coords))
    object.__setattr__(self, "_pnums",
                       tuple(_pnum(physical, c) for c in coords))
    object.__setattr__(self, "_mesh_shape", dims_lib.Shape(
        [dims_lib.Dimension(n, s) for n, s in zip(names, logical)]))

  def __setattr__(self, name, value):
    raise AttributeError("HierarchicalTiling is immutable")

  @property
  def mesh_shape(self):
    return self._mesh_shape

  @property
  def physical_shape(self):
    return list(self._physical_shape)

  @property
  def logical_to_physical(self) -> List[int]:
    return list(self._pnums)

  @property
  def physical_coordinates(self) -> List[Tuple[int, ...]]:
    return list(self._coords)

  @property
  def sizes_and_strides(self):
    return self._sizes_and_strides

  def __eq__(self, other):
    return (isinstance(other, HierarchicalTiling)
            and self._names == other._names
            and self._sizes_and_strides == other._sizes_and_strides)

  def __hash__(self):
    return hash((self._names, self._sizes_and_strides))

  def __repr__(self):
    spec = ", ".join(f"{n}={[s for s, _ in b]}"
                     for n, b in zip(self._names, self._sizes_and_strides))
    return f"HierarchicalTiling({spec} on {list(self._physical_shape)})"

  @classmethod
  def spec_to_mesh_shape(cls, spec, num_processors):
    """The logical mesh of ``spec`` without knowing the physical shape.

    Raises:
      TilingError: if the sizes do not multiply to ``num_processors``.
    """
    names = [str(n) for n, _ in spec]
    sizes = [None if s is None else math.prod(s) for _, s in spec]
    if sizes and sizes[0] is None:
      sizes[0] = num_processors // max(1, math.prod(sizes[1:]))
    if math.prod(sizes) != num_processors:
      raise TilingError(f"tiling spec {list(spec)} has {math.prod(sizes)} "
                        f"processors, not {num_processors}")
    return dims_lib.Shape([dims_lib.Dimension(n, s)
                           for n, s in zip(names, sizes)])


def physical_shape_3d_from_topology_proto_4d(mesh_shape, fold_xy=False):
  """A TPU topology's ``[x, y, z, cores]`` as the 3-d ``[rows, cols,
  cores]`` the tiling works on: ``[x*y, z, cores]`` with ``fold_xy``, else
  ``[y*z, x, cores]`` (Mesh TF's ``--fold_xy`` flag, here an argument).

  Raises:
    TilingError: for another length.
  """
  if len(mesh_shape) != 4:
    raise TilingError(f"expected a 4-d topology shape [x, y, z, cores], got "
                      f"{list(mesh_shape)}")
  x, y, z, cores = (int(v) for v in mesh_shape)
  return [x * y, z, cores] if fold_xy else [y * z, x, cores]


def _tile_shape(tile_chips, rows, cols, num_logical_axes):
  """Chips ``(t0, t1)`` of one tile of ``tile_chips`` chips: a whole row or
  column when the tile is one logical axis that fits it, else about
  square (and inside the ``rows x cols`` grid)."""
  if num_logical_axes == 2 and tile_chips == rows:
    return rows, 1
  if num_logical_axes == 2 and tile_chips == cols:
    return 1, cols
  t0 = 2 ** (int(math.log2(tile_chips)) // 2)
  t0 = max(min(t0, rows), tile_chips // cols)
  return t0, tile_chips // t0


def _auto_coordinates(logical, rows, cols, cores):
  """Physical ``(row, col, core)`` of each logical processor."""
  n = math.prod(logical)
  if len(logical) == 1:
    ring = ring_order(rows, cols)
    return [ring[p // cores] + (p % cores,) for p in range(n)]
  tile_chips = n // logical[0] // cores
  t0, t1 = _tile_shape(tile_chips, rows, cols, len(logical))
  inner = _auto_coordinates(logical[1:], t0, t1, cores)
  tiles = ring_order(rows // t0, cols // t1)
  per_tile = t0 * t1 * cores
  out = []
  for p in range(n):
    tile, pos = divmod(p, per_tile)
    r, c, core = inner[pos]
    out.append((tiles[tile][0] * t0 + r, tiles[tile][1] * t1 + c, core))
  return out


def auto_logical_to_physical_tpu(logical_shape, physical_shape,
                                 return_coordinates=False,
                                 device_assignment=None,
                                 logical_cores_per_chip=2, fold_xy=False):
  """A logical-to-physical map for a TPU slice, favouring the later axes.

  The chips form a ``rows x cols`` grid with ``cores`` per chip.  One
  logical axis walks :func:`ring_order` over the chips (cores fastest).
  With more, the first logical axis numbers tiles, which themselves walk a
  ring, and the other axes are laid inside one tile the same way,
  recursively; a tile is a whole row or column when it is one axis that
  fits, else about square.  So the last axes' groups are the most compact.

  Args:
    logical_shape: the logical mesh's sizes (size-1 axes are dropped).
    physical_shape: ``[rows, cols, cores]``, or a 4-d topology
      ``[x, y, z, cores]`` (folded by
      :func:`physical_shape_3d_from_topology_proto_4d`).
    return_coordinates: return ``(row, col, core)`` tuples instead of
      physical processor numbers.
    device_assignment: with one core per chip and numbers wanted, an object
      like ``tf.tpu.experimental.DeviceAssignment`` (``num_replicas``,
      ``coordinates(replica, 0)``, ``topology.mesh_shape``) that gives the
      replica of each chip; without it the numbers are the row-major
      numbers of the coordinates.
    logical_cores_per_chip: Mesh TF's ``--logical_cores_per_chip`` flag
      (default 2, as there); v4, v5e and v5p expose 1.
    fold_xy: Mesh TF's ``--fold_xy`` flag, for 4-d shapes.

  Returns:
    A permutation of ``range(n)`` (or the coordinates).  A shape this
    heuristic does not handle (not 3-d after folding, ``cores`` other than
    ``logical_cores_per_chip``, or a side that is not a power of two) gets
    the identity, as in the original.

  Raises:
    TilingError: if the logical and physical sizes differ.

  Differences from Mesh TF: its fallback returned a function by mistake
  for a core count other than the flag, and failed to build coordinates;
  it also needed a device assignment for one core per chip.  Here these
  give the documented answers.
  """
  physical = _check_shape(physical_shape, "physical_shape")
  if len(physical) == 4:
    physical = physical_shape_3d_from_topology_proto_4d(physical, fold_xy)
  logical = [int(s) for s in logical_shape]
  if math.prod(logical) != math.prod(physical):
    raise TilingError(f"logical mesh {logical} has {math.prod(logical)} "
                      f"processors but the physical mesh {physical} has "
                      f"{math.prod(physical)}; make their products equal")
  logical = [s for s in logical if s != 1]
  n = math.prod(physical)
  handled = (len(physical) == 3 and physical[2] == logical_cores_per_chip
             and all(s & (s - 1) == 0 for s in physical[:2]) and logical)
  if not handled:
    if return_coordinates:
      return [_coordinates(physical, p) for p in range(n)]
    return list(range(n))
  rows, cols, cores = physical
  coords = _auto_coordinates(logical, rows, cols, cores)
  if return_coordinates:
    return coords
  if sorted(_pnum(physical, c) for c in coords) != list(range(n)):
    raise TilingError(f"auto_logical_to_physical_tpu cannot tile logical "
                      f"mesh {logical} onto {physical}: its tiles overlap; "
                      "pass a HierarchicalTiling spec instead")
  if cores == 1 and device_assignment is not None:
    return _replicas(coords, rows, device_assignment)
  return [_pnum(physical, c) for c in coords]


def _replicas(coords, rows, device_assignment):
  """The replica ids of chips at ``(row, col, 0)``, from a device assignment
  that numbers chips by its topology's ``(x, y, z)``, x fastest."""
  hw = [int(s) for s in device_assignment.topology.mesh_shape]
  replica_at = {}
  for replica in range(device_assignment.num_replicas):
    x, y, z = list(device_assignment.coordinates(replica, 0))[:3]
    replica_at[x + y * hw[0] + z * hw[0] * hw[1]] = replica
  try:
    return [replica_at[r + c * rows] for r, c, _ in coords]
  except KeyError as e:
    raise TilingError(f"device_assignment has no replica for chip {e}; it "
                      "does not cover the physical shape") from None


def group_members(logical_shape: Sequence[int], axis: int, pnum: int):
  """The logical processors in ``pnum``'s group along ``axis``, in order."""
  c = list(_coordinates(logical_shape, pnum))
  out = []
  for i in range(logical_shape[axis]):
    c[axis] = i
    out.append(_pnum(logical_shape, c))
  return out
