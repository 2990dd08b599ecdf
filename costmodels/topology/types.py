"""Topology value types: physical dimensions and the :class:`Topology`."""

import math
from typing import NamedTuple, Tuple

from mesh_tf.core import dims as dims_lib
from costmodels.hardware import ChipSpec, LinkSpec


class PhysicalDim(NamedTuple):
  """One physical dimension of a topology.

  Attributes:
    name: e.g. ``"x"``, ``"node"``, ``"gpu"``.
    size: chips along it.
    link: the :class:`LinkSpec` its chips talk over.
    structure: ``"torus"`` (nearest-neighbour links) or ``"switch"``.
    wraparound: for ``torus`` dims, whether the last chip links to the first.
  """
  name: str
  size: int
  link: LinkSpec
  structure: str = "torus"
  wraparound: bool = False

  def __repr__(self):
    extra = ("switch" if self.structure == "switch" else
             "ring" if self.wraparound else "line")
    return f"{self.name}={self.size}({self.link.kind} {extra})"


class Topology(NamedTuple):
  """A named chip topology (immutable).

  Build your own with :func:`tpu_slice`, :func:`gpu_cluster` or
  :func:`torus`, or pass a preset name to :func:`get_topology`.
  """
  name: str
  chip: ChipSpec
  dims: Tuple[PhysicalDim, ...]

  @property
  def num_chips(self):
    return math.prod(d.size for d in self.dims)

  @property
  def kind(self):
    return self.chip.kind

  @property
  def shape(self):
    """The physical dims as an mtf Shape, e.g. ``Shape[x=4, y=4, z=4]``."""
    return dims_lib.Shape([(d.name, d.size) for d in self.dims])

  def describe(self):
    dims = " x ".join(repr(d) for d in self.dims)
    return f"{self.name}: {self.num_chips} x {self.chip.name}, {dims}"

  def __repr__(self):
    return f"Topology({self.describe()})"
