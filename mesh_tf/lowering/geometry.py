"""Processor geometry of a mesh: pnums, coordinates and processor groups.

Processors are numbered in row-major order of their mesh coordinates.
"""

import itertools
import math

import numpy as np

__all__ = ["ProcessorGroups", "processor_groups"]


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
  __slots__ = ("_groups",)

  def __init__(self, sizes):
    n = len(sizes)
    self._groups = {
        axes: processor_groups(sizes, axes)
        for k in range(n + 1) for axes in itertools.combinations(range(n), k)}

  def __getitem__(self, mesh_axes):
    """The groups of ``mesh_axes`` (a tuple of indices), as a new list."""
    key = tuple(mesh_axes)
    groups = self._groups.get(key)
    if groups is None:  # unsorted or repeated indices
      groups = self._groups[tuple(sorted(set(key)))]
    return list(groups)
