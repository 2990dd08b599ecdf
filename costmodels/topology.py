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
"""

import math
import re
from typing import NamedTuple, Tuple

from mesh_tf.core import dims as dims_lib
from mesh_tf.core.errors import MtfError
from costmodels import hardware
from costmodels.collectives import LinkParams
from costmodels.hardware import ChipSpec, LinkSpec


class TopologyError(MtfError):
  """A topology name is unknown, or a mesh does not fit a topology."""


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


# --- constructors ------------------------------------------------------------
_TPU_FULL_POD_SIDE = {"tpu-v3": 32, "tpu-v5e": 16}


def _default_wraparound(chip, sizes):
  # v4 / v5p: slices of whole 4x4x4 cubes are wired as tori (Cloud TPU docs,
  # "TPU v4": "3D torus on slices ... where each dimension is a multiple of
  # 4"); smaller slices are meshes.  v3 / v5e: only the full pod side wraps
  # (a simplification of their 2D-torus pods).
  if chip.name in ("tpu-v4", "tpu-v5p"):
    cube = len(sizes) == 3 and all(s % 4 == 0 for s in sizes)
    return tuple(cube for _ in sizes)
  side = _TPU_FULL_POD_SIDE.get(chip.name)
  return tuple(side is not None and s == side for s in sizes)


def torus(chip, sizes, wraparound=True, link=None, names=None, name=None):
  """A torus (or mesh, without wraparound) of ``chip`` over ``sizes``.

  Args:
    chip: a ChipSpec or chip name.
    sizes: physical dimension sizes, major first.
    wraparound: a bool, or one bool per dimension.
    link: the LinkSpec of every dimension (default: the chip's own link).
    names: dimension names (default ``x, y, z, w...``).
    name: the topology's name.
  """
  chip = hardware.get_chip(chip)
  sizes = tuple(int(s) for s in sizes)
  if not sizes or any(s < 1 for s in sizes):
    raise TopologyError(f"torus sizes must be positive integers, got {sizes}")
  if isinstance(wraparound, bool):
    wraparound = (wraparound,) * len(sizes)
  wraparound = tuple(bool(w) for w in wraparound)
  if len(wraparound) != len(sizes):
    raise TopologyError(f"torus {sizes} needs one wraparound flag per "
                        f"dimension, got {wraparound}")
  names = tuple(names or "xyzwuv"[:len(sizes)])
  link = link or chip.link
  dims = tuple(PhysicalDim(n, s, link, "torus", w)
               for n, s, w in zip(names, sizes, wraparound))
  name = name or (f"{chip.name}-" + "x".join(map(str, sizes)))
  return Topology(name, chip, dims)


def tpu_slice(chip, sizes, wraparound=None, name=None):
  """A TPU slice of ``chip`` (``"v4"``, ``"tpu-v5p"``...) of shape ``sizes``.

  ``wraparound=None`` picks each generation's wiring (see the module docs).

  Example:
    >>> tpu_slice("v4", (4, 4, 4)).dims[0].wraparound
    True
  """
  chip = hardware.get_chip(chip)
  if chip.kind != "tpu":
    raise TopologyError(f"tpu_slice needs a TPU chip, got {chip.name}")
  sizes = tuple(int(s) for s in sizes)
  if wraparound is None:
    wraparound = _default_wraparound(chip, sizes)
  return torus(chip, sizes, wraparound,
               name=name or f"{chip.name}-" + "x".join(map(str, sizes)))


def gpu_cluster(chip, nodes=1, gpus_per_node=8, network=None,
                intra_node=None, name=None):
  """``nodes`` GPU servers of ``gpus_per_node`` GPUs.

  Args:
    chip: a GPU ChipSpec or name (``"h100"``...).
    nodes: number of servers.
    gpus_per_node: GPUs per server, on one NVSwitch.
    network: InfiniBand generation between nodes (``"hdr"``, ``"ndr"``,
      ``"xdr"``) or a LinkSpec; default: the chip's usual DGX network.
    intra_node: the link inside a node; default NVLink; ``"pcie-gen4"`` or
      ``"pcie-gen5"`` for PCIe-only servers.
    name: the topology's name.
  """
  chip = hardware.get_chip(chip)
  if chip.kind != "gpu":
    raise TopologyError(f"gpu_cluster needs a GPU chip, got {chip.name}")
  inter = hardware.get_network(network or chip.default_network)
  intra = chip.link if intra_node in (None, "nvlink") else (
      hardware.get_network(intra_node))
  dims = (PhysicalDim("node", int(nodes), inter, "switch"),
          PhysicalDim("gpu", int(gpus_per_node), intra, "switch"))
  if name is None:
    name = (f"dgx-{chip.name}" if nodes == 1 and gpus_per_node == 8
            else f"{chip.name}x{gpus_per_node}-nodes{nodes}")
  return Topology(name, chip, dims)


_PRESETS = (
    "tpu-v3-4x4", "tpu-v3-32x32",
    "tpu-v4-2x2x1", "tpu-v4-2x2x2", "tpu-v4-4x4x4", "tpu-v4-4x4x8",
    "tpu-v5e-2x4", "tpu-v5e-4x4", "tpu-v5e-16x16",
    "tpu-v5p-2x2x2", "tpu-v5p-4x4x4", "tpu-v5p-8x8x16",
    "dgx-a100", "dgx-h100", "dgx-h200", "dgx-b200",
    "a100x8-nodes2", "h100x8-nodes2", "h100x8-nodes4", "h200x8-nodes16",
    "b200x8-nodes4",
)

_TPU_RE = re.compile(r"^tpu-(v3|v4|v5e|v5p)-(\d+(?:x\d+)*)$")
_DGX_RE = re.compile(r"^dgx-(a100|h100|h200|b200)$")
_CLUSTER_RE = re.compile(
    r"^(a100|h100|h200|b200)x(\d+)-nodes(\d+)(?:-(hdr|ndr|xdr))?$")


def list_topologies():
  """Names of the preset topologies.  Other sizes of the same families
  (``tpu-v4-8x8x8``, ``h100x8-nodes32``, ``h100x8-nodes4-xdr``) also work."""
  return list(_PRESETS)


def get_topology(name_or_topology):
  """The :class:`Topology` for a preset name, a family name, a topology file
  (a path ending in ``.json``, as ``mtf-layout calibrate`` writes), or a
  Topology.

  Raises:
    TopologyError: for a name that is neither a preset nor of a known
      family, or a topology file that is missing or has the wrong schema.

  Example:
    >>> get_topology("tpu-v5e-16x16").num_chips
    256
  """
  if isinstance(name_or_topology, Topology):
    return name_or_topology
  if str(name_or_topology).strip().lower().endswith(".json"):
    # A topology file written by calibration (docs/topology_files.md).
    from costmodels.calibrate import topology_file
    return topology_file.read_topology(str(name_or_topology).strip())
  name = str(name_or_topology).strip().lower()
  m = _TPU_RE.match(name)
  if m:
    return tpu_slice(f"tpu-{m.group(1)}",
                     [int(s) for s in m.group(2).split("x")], name=name)
  m = _DGX_RE.match(name)
  if m:
    return gpu_cluster(m.group(1), nodes=1, gpus_per_node=8, name=name)
  m = _CLUSTER_RE.match(name)
  if m:
    return gpu_cluster(m.group(1), nodes=int(m.group(3)),
                       gpus_per_node=int(m.group(2)), network=m.group(4),
                       name=name)
  raise TopologyError(
      f"unknown topology {name_or_topology!r}; use a preset "
      f"({', '.join(_PRESETS)}), a name of the form tpu-v4-AxBxC, "
      "dgx-h100 or h100x8-nodesN[-ndr], a calibrated topology file "
      "(path ending in .json), or build one with tpu_slice(), "
      "gpu_cluster() or torus()")


# --- mapping a logical mesh --------------------------------------------------
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
                      self.link.collectives)


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
          f"mesh axis {axis!r} is not in mesh {self.mesh_shape!r}; use one "
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
  phys = ";".join(f"{d.name}:{d.size}" for d in topology.dims if d.size > 1)
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
    mesh_shape: an mtf Shape or string such as ``"data:16;model:8"``.

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
  mesh_shape = dims_lib.convert_to_shape(mesh_shape)
  if mesh_shape.size != topology.num_chips:
    raise TopologyError(
        f"mesh {mesh_shape!r} has {mesh_shape.size} processors but topology "
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
            f"mesh axis {axis} of mesh {mesh_shape!r} cannot be embedded in "
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
