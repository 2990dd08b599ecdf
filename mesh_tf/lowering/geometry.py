"""Processor geometry of a mesh: pnums, coordinates and processor groups.

Processors are numbered in row-major order of their mesh coordinates.
"""

import itertools
import math

import numpy as np

__all__ = ["ProcessorGroups", "ordered_processor_groups", "processor_groups"]


def processor_groups(sizes, mesh_axes):
  """Groups of pnums that vary only along ``mesh_axes`` (indices).

  Args:
    sizes: the mesh axis sizes, in order.
    mesh_axes: indices of the axes a group spans (any order, repeats
      ignored).

  Returns:
    A list of tuples: each group lists its pnums in row-major order of
    their coordinates on ``mesh_axes``; groups are ordered by first pnum.

  Example:
    >>> processor_groups((2, 4), (0,))
    [(0, 4), (1, 5), (2, 6), (3, 7)]
  """
  sizes = tuple(int(s) for s in sizes)
  span = sorted(set(mesh_axes))
  rest = [i for i in range(len(sizes)) if i not in span]
  grid = np.arange(math.prod(sizes), dtype=np.int64).reshape(sizes)
  width = math.prod(sizes[i] for i in span)
  rows = grid.transpose(rest + span).reshape(-1, width)
  return [tuple(r) for r in rows.tolist()]


def ordered_processor_groups(sizes, mesh_axes):
  """Groups of pnums that vary only along ``mesh_axes``, an *ordered* tuple
  of distinct indices: each group lists its pnums in row-major order of
  their coordinates on ``mesh_axes`` taken in the given order (the first
  axis is the major one), so position ``c`` in a group is the block index
  ``c`` of a dim split over those axes.  Groups are ordered by first pnum.

  Example:
    >>> ordered_processor_groups((2, 4), (1, 0))
    [(0, 4, 1, 5, 2, 6, 3, 7)]
  """
  sizes = tuple(int(s) for s in sizes)
  span = [int(a) for a in mesh_axes]
  rest = [i for i in range(len(sizes)) if i not in span]
  grid = np.arange(math.prod(sizes), dtype=np.int64).reshape(sizes)
  width = math.prod(sizes[i] for i in span)
  rows = grid.transpose(rest + span).reshape(-1, width)
  return [tuple(r) for r in rows.tolist()]


def block_index(coords, sizes, mesh_axes):
  """The block index of processor ``coords`` for a dim split over the
  ordered ``mesh_axes`` (major first).

  Example:
    >>> block_index((1, 2), (2, 4), (0, 1)), block_index((1, 2), (2, 4), (1, 0))
    (6, 5)
  """
  c = 0
  for a in mesh_axes:
    c = c * sizes[a] + coords[a]
  return c


class ProcessorGroups:
  """The processor groups of every set of mesh axes, computed once.

  A backend that issues collectives owns one (built with its mesh), so that
  each collective looks its groups up instead of recomputing them.

  Args:
    sizes: the mesh axis sizes, in order.

  Example:
    >>> ProcessorGroups((2, 4))[(1,)]
    [(0, 1, 2, 3), (4, 5, 6, 7)]
  """
  __slots__ = ("_groups", "_ordered")

  def __init__(self, sizes):
    n = len(sizes)
    self._groups = {
        axes: processor_groups(sizes, axes)
        for k in range(n + 1) for axes in itertools.combinations(range(n), k)}
    # Multi-axis dims in any axis order (at most n! per subset; meshes have
    # few axes).
    self._ordered = {
        axes: ordered_processor_groups(sizes, axes)
        for k in range(2, n + 1) for axes in itertools.permutations(range(n), k)}

  def __getitem__(self, mesh_axes):
    """The groups of ``mesh_axes`` (a tuple of indices), as a new list."""
    key = tuple(mesh_axes)
    groups = self._groups.get(key)
    if groups is None:  # unsorted or repeated indices
      groups = self._groups[tuple(sorted(set(key)))]
    return list(groups)

  def ordered(self, mesh_axes):
    """The groups of the ordered, distinct ``mesh_axes`` (see
    :func:`ordered_processor_groups`), as a new list."""
    key = tuple(mesh_axes)
    return list(self._ordered.get(key) or self._groups[key])
