"""Building topologies: tori, TPU slices, GPU clusters, and the named presets.

Example:
  >>> get_topology("dgx-h100").dims[1]
  gpu=8(nvlink switch)
"""

import re

from costmodels import hardware
from costmodels.errors import TopologyError
from costmodels.topology.types import PhysicalDim, Topology


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


# The data-centre network between TPU v4 pods, per chip: PaLM's cross-pod
# gradient transfer ran at 81 Tbit/s over 3,072 chips per pod (Chowdhery et
# al., 2022, section 4), i.e. 81e12 / 8 / 3072 = 3.3 GB/s per chip each
# way.  Latency and overlap efficiency: assumed like InfiniBand's (the
# hosts' NICs move the data asynchronously).
TPU_DCN = hardware.LinkSpec("tpu-dcn", "dcn", 81e12 / 8 / 3072, 10e-6,
                            overlap_efficiency=0.85)


def tpu_pods(chip, pods, sizes, dcn=TPU_DCN, name=None):
  """``pods`` TPU pods (slices of shape ``sizes``) joined by the
  data-centre network ``dcn``: a ``pod`` dim over DCN, then the slice's own
  ICI torus dims.  PaLM 540B trained on ``tpu_pods("v4", 2, (12, 16,
  16))`` (``tpu-v4-2pods-12x16x16``).

  Example:
    >>> get_topology("tpu-v4-2pods-12x16x16").num_chips
    6144
  """
  pod = tpu_slice(chip, sizes)
  dims = (PhysicalDim("pod", int(pods), dcn, "switch"),) + tuple(pod.dims)
  return Topology(name or f"{pod.chip.name}-{int(pods)}pods-"
                  + "x".join(str(int(s)) for s in sizes), pod.chip, dims)


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
_PODS_RE = re.compile(r"^tpu-(v4|v5p)-(\d+)pods-(\d+(?:x\d+)*)$")
_DGX_RE = re.compile(r"^dgx-(a100|h100|h200|b200)$")
_CLUSTER_RE = re.compile(
    r"^(a100|h100|h200|b200)x(\d+)-nodes(\d+)(?:-(hdr|ndr|xdr))?$")


def list_topologies():
  """Names of the preset topologies.  Other sizes of the same families
  (``tpu-v4-8x8x8``, ``h100x8-nodes32``, ``h100x8-nodes4-xdr``, and pods
  joined by the data-centre network, ``tpu-v4-2pods-12x16x16``) also
  work."""
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
  return topology_from_name(name_or_topology)


def topology_from_name(name_or_topology):
  """The Topology a name or topology file stands for: the one place a name
  is resolved (:func:`get_topology` passes a Topology through and calls
  this for anything else).  The layout search's edges call it once per
  query (issue 38).

  Raises:
    TopologyError: as :func:`get_topology`.
  """
  if str(name_or_topology).strip().lower().endswith(".json"):
    # A topology file written by calibration (docs/topology_files.md).
    from costmodels.calibrate import topology_file  # pylint: disable=import-outside-toplevel
    return topology_file.read_topology(str(name_or_topology).strip())
  name = str(name_or_topology).strip().lower()
  m = _TPU_RE.match(name)
  if m:
    return tpu_slice(f"tpu-{m.group(1)}",
                     [int(s) for s in m.group(2).split("x")], name=name)
  m = _PODS_RE.match(name)
  if m:
    return tpu_pods(f"tpu-{m.group(1)}", int(m.group(2)),
                    [int(s) for s in m.group(3).split("x")], name=name)
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
      f"({', '.join(_PRESETS)}), a name of the form tpu-v4-AxBxC "
      "(or tpu-v4-NpodsAxBxC's form tpu-v4-2pods-12x16x16), "
      "dgx-h100 or h100x8-nodesN[-ndr], a calibrated topology file "
      "(path ending in .json), or build one with tpu_slice(), "
      "gpu_cluster() or torus()")
