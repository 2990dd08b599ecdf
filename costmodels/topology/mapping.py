"""Laying a logical mesh onto a topology, row-major (see :func:`map_mesh`)."""

import math
from typing import NamedTuple, Tuple

from mesh_tf.core import dims as dims_lib
from mesh_tf.core.mesh_shape import MeshShape, convert_to_mesh_shape
from costmodels.collectives import LinkParams
from costmodels.errors import TopologyError
from costmodels.hardware import LinkSpec
from costmodels.topology.presets import get_topology


class Segment(NamedTuple):
  """The part of one physical dimension that one mesh axis occupies.

  Attributes:
    phys_dim: the physical dimension's name.
    phys_index: its index in ``Topology.dims``.
    size: chips of the group along it.
    stride: distance (in chips along the dimension) between neighbours of
      the group; ``stride`` concurrent groups share the links between them.
    link: the LinkSpec.
    structure: ``"ring"`` (the whole of a wraparound dimension), ``"line"``
      or ``"switch"``.
    owners: the mesh axes it belongs to (several after merging).
  """
  phys_dim: str
  phys_index: int
  size: int
  stride: int
  link: LinkSpec
  structure: str
  owners: Tuple[str, ...]

  @property
  def bandwidth_bytes_per_s(self):
    """Per-direction bandwidth one participant gets, after sharing."""
    if self.structure == "switch":
      return self.link.bandwidth_bytes_per_s
    return self.link.bandwidth_bytes_per_s / self.stride

  @property
  def params(self):
    """The :class:`LinkParams` the collective formulas take."""
    return LinkParams(self.size, self.bandwidth_bytes_per_s,
                      self.link.latency_s, self.structure, self.owners,
                      self.link.collectives, self.link.barrier_s)


def _segment(pdim, index, size, stride, owners):
  if pdim.structure == "switch":
    structure = "switch"
  elif pdim.wraparound and size * stride == pdim.size:
    # The group goes all the way round (two chips on a wraparound dimension
    # are joined by two links, which works the same way).
    structure = "ring"
  else:
    structure = "line"
  return Segment(pdim.name, index, size, stride, pdim.link, structure,
                 tuple(owners))


class AxisLink(NamedTuple):
  """What one mesh axis runs over.

  Attributes:
    axis: the mesh-axis name.
    size: its size.
    link_kind: ``"ici"``, ``"nvlink"``, ``"infiniband"``, ``"pcie"``,
      several joined by ``+`` (minor first) when the axis spans several
      kinds of link, or ``"none"`` for an axis of size 1.
    structure: ``"ring"``, ``"line"`` or ``"switch"`` for one segment;
      ``"torus"`` for several torus segments; ``"hierarchical"`` for several
      switch segments (e.g. NVLink then InfiniBand); ``"none"``.
    bandwidth_bytes_per_s: the ring-algorithm bandwidth of its slowest
      segment (``2B`` on a ring, else ``B``, after sharing); ``inf`` if none.
    latency_s: the largest per-step latency of its segments.
    segments: the :class:`Segment` tuple, minor-most first.
  """
  axis: str
  size: int
  link_kind: str
  structure: str
  bandwidth_bytes_per_s: float
  latency_s: float
  segments: Tuple[Segment, ...]

  @property
  def spans_nodes(self):
    return any(s.link.kind == "infiniband" for s in self.segments)


def _axis_link(name, size, segments):
  if not segments:
    return AxisLink(name, size, "none", "none", math.inf, 0.0, ())
  kinds = []
  for s in segments:
    if s.link.kind not in kinds:
      kinds.append(s.link.kind)
  if len(segments) == 1:
    structure = segments[0].structure
  elif all(s.structure != "switch" for s in segments):
    structure = "torus"
  else:
    structure = "hierarchical"
  bw = min(s.params.algorithm_bandwidth_bytes_per_s for s in segments)
  lat = max(s.link.latency_s for s in segments)
  return AxisLink(name, size, "+".join(kinds), structure, bw, lat,
                  tuple(segments))


class MeshMapping:
  """A logical mesh laid onto a topology (see :func:`map_mesh`).

  ``mapping["model"]`` is the :class:`AxisLink` of mesh axis ``model``;
  :meth:`link_params` gives what a collective over several axes runs on.
  """
  __slots__ = ("topology", "mesh_shape", "axes", "_by_name", "_cache")

  def __init__(self, topology, mesh_shape, axes):
    object.__setattr__(self, "topology", topology)
    object.__setattr__(self, "mesh_shape", mesh_shape)
    object.__setattr__(self, "axes", tuple(axes))
    object.__setattr__(self, "_by_name", {a.axis: a for a in axes})
    object.__setattr__(self, "_cache", {})

  def __setattr__(self, name, value):
    raise AttributeError("MeshMapping is immutable")

  def __reduce__(self):
    return (MeshMapping, (self.topology, self.mesh_shape, self.axes))

  def __getitem__(self, axis):
    try:
      return self._by_name[axis]
    except KeyError:
      raise TopologyError(
          f"mesh axis {axis!r} is not in mesh "
          f"{dims_lib.Shape(self.mesh_shape)!r}; use one "
          f"of {self.mesh_shape.dimension_names}") from None

  def __iter__(self):
    return iter(self.axes)

  def __eq__(self, other):
    return (isinstance(other, MeshMapping) and self.topology == other.topology
            and self.mesh_shape == other.mesh_shape)

  def __hash__(self):
    return hash((self.topology, self.mesh_shape))

  def link_params(self, mesh_axes):
    """The :class:`LinkParams` of a collective over ``mesh_axes`` (names).

    Segments of the axes that lie on one physical dimension and chain
    (``stride_{k+1} = stride_k * size_k``) are merged into one segment, so
    that the collective uses that dimension's links once, as a whole.
    """
    if isinstance(mesh_axes, str):
      mesh_axes = (mesh_axes,)
    key = tuple(mesh_axes)
    hit = self._cache.get(key)
    if hit is not None:
      return hit
    segs = [s for a in key for s in self[a].segments]
    by_dim = {}
    for s in segs:
      by_dim.setdefault(s.phys_index, []).append(s)
    out = []
    for index in sorted(by_dim, reverse=True):  # minor-most first
      group = sorted(by_dim[index], key=lambda s: s.stride)
      chained = all(b.stride == a.stride * a.size
                    for a, b in zip(group, group[1:]))
      if len(group) > 1 and chained:
        pdim = self.topology.dims[index]
        owners = tuple(o for s in group for o in s.owners)
        group = [_segment(pdim, index, math.prod(s.size for s in group),
                          group[0].stride, owners)]
      out.extend(s.params for s in group)
    out = tuple(out)
    self._cache[key] = out
    return out

  def describe(self):
    """One line per mesh axis: size, links, structure, bandwidth."""
    lines = [f"{self.mesh_shape} on {self.topology.describe()}"]
    for a in self.axes:
      segs = ", ".join(f"{s.phys_dim}[{s.size} stride {s.stride} "
                       f"{s.structure}]" for s in a.segments) or "-"
      lines.append(f"  {a.axis}={a.size}: {a.link_kind} {a.structure}, "
                   f"{a.bandwidth_bytes_per_s / 1e9:g} GB/s, "
                   f"{a.latency_s * 1e6:g} us ({segs})")
    return "\n".join(lines)

  def __repr__(self):
    return f"MeshMapping({self.mesh_shape} on {self.topology.name})"


def _suggest(topology, mesh_shape):
  """Mesh strings that fit ``topology``, using the user's axis names."""
  sizes = [d.size for d in topology.dims]
  phys = MeshShape([(d.name, d.size) for d in topology.dims
                   if d.size > 1]).text
  out = [phys] if phys else []
  names = mesh_shape.dimension_names if mesh_shape is not None else []
  if len(names) >= 2 and len(sizes) >= 2:
    minor = sizes[-1]
    major = math.prod(sizes[:-1])
    out.append(";".join([f"{n}:1" for n in names[:-2]]
                        + [f"{names[-2]}:{major}", f"{names[-1]}:{minor}"]))
  elif len(names) == 1:
    out.append(f"{names[0]}:{topology.num_chips}")
  return " or ".join(repr(s) for s in out)


def map_mesh(topology, mesh_shape):
  """Lays the logical mesh ``mesh_shape`` onto ``topology`` (row-major).

  Args:
    topology: a Topology or topology name.
    mesh_shape: a :class:`mesh_tf.MeshShape` (or a Shape or string such as
      ``"data:16;model:8"``, parsed here).

  Returns:
    A :class:`MeshMapping` with one :class:`AxisLink` per mesh axis.

  Raises:
    TopologyError: if the mesh size differs from the chip count, or a mesh
      axis cannot be embedded (its size neither divides nor is a multiple of
      what remains of the physical dimension it reaches); the message says
      which meshes would fit.

  Example:
    >>> m = map_mesh("tpu-v4-4x4x4", "data:16;model:4")
    >>> m["model"].structure, m["data"].structure
    ('ring', 'torus')
  """
  topology = get_topology(topology)
  mesh_shape = convert_to_mesh_shape(mesh_shape)
  # Messages show the mesh in the Shape[...] form they have always had.
  mesh_text = repr(dims_lib.Shape(mesh_shape))
  if mesh_shape.size != topology.num_chips:
    raise TopologyError(
        f"mesh {mesh_text} has {mesh_shape.size} processors but topology "
        f"{topology.name!r} has {topology.num_chips} chips "
        f"({topology.shape}); use a mesh whose axis sizes multiply to "
        f"{topology.num_chips}, e.g. {_suggest(topology, mesh_shape)}")
  pdims = topology.dims
  k, used = len(pdims) - 1, 1
  links = []
  for axis in reversed(mesh_shape.dims):
    n, segs = axis.size, []
    while n > 1:
      while pdims[k].size // used == 1:
        k, used = k - 1, 1
      remaining = pdims[k].size // used
      if remaining % n == 0:
        take = n
      elif n % remaining == 0:
        take = remaining
      else:
        raise TopologyError(
            f"mesh axis {axis} of mesh {mesh_text} cannot be embedded in "
            f"topology {topology.name!r} ({topology.shape}): mesh axes are "
            "laid row-major onto the physical dims, minor-most first, and "
            f"at physical dim {pdims[k].name}={pdims[k].size} {remaining} "
            f"chips remain, which neither divides nor is a multiple of the "
            f"{n} still needed by {axis.name!r}; use axis sizes that are "
            "products of divisors of the physical dims taken in order, e.g. "
            f"{_suggest(topology, mesh_shape)}")
      segs.append(_segment(pdims[k], k, take, used, (axis.name,)))
      used *= take
      n //= take
    links.append(_axis_link(axis.name, axis.size, segs))
  return MeshMapping(topology, mesh_shape, list(reversed(links)))
