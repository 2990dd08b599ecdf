"""Topology files: a calibrated :class:`~costmodels.Topology` as versioned JSON.

The schema is documented in ``docs/topology_files.md``.  In short::

    {"schema": "mesh-tf-topology", "version": 1, "name": "...",
     "chip": {...ChipSpec fields..., "link": {...}},
     "dims": [{"name", "size", "structure", "wraparound", "link": {...}}],
     "calibration": {...what was measured, fit residuals...}}

Every number keeps its unit in its key.  :func:`write_topology` writes
atomically (a temporary file in the same folder, then ``os.replace``), so a
crash or an error never leaves a half-written file.  :func:`read_topology`
checks the schema name, the version and every field, and raises
:class:`TopologyFileError` naming the field and what to change.

Example:
  >>> import os, tempfile, costmodels
  >>> path = os.path.join(tempfile.mkdtemp(), "h100.json")
  >>> write_topology(path, costmodels.get_topology("dgx-h100"))
  >>> read_topology(path) == costmodels.get_topology("dgx-h100")
  True
"""

import json
import math
import os
import tempfile

from costmodels.collective_fits import CollectiveFit, check_fit
from costmodels.hardware import ChipSpec, LinkSpec
from costmodels.errors import TopologyError
from costmodels.topology.types import PhysicalDim, Topology

SCHEMA = "mesh-tf-topology"
VERSION = 1


class TopologyFileError(TopologyError):
  """A topology file is missing, unreadable, or does not follow the schema."""


# --- to JSON ----------------------------------------------------------------
def _fit_json(f):
  return {"kind": f.kind, "algorithm": f.algorithm,
          "latency_s": f.latency_s,
          "bandwidth_bytes_per_s": _num(f.bandwidth_bytes_per_s),
          "steps": f.steps, "volume": f.volume, "min_bytes": f.min_bytes,
          "rel_residual": f.rel_residual, "samples": f.samples}


def _link_json(link):
  return {"name": link.name, "kind": link.kind,
          "bandwidth_bytes_per_s": _num(link.bandwidth_bytes_per_s),
          "latency_s": link.latency_s,
          "collectives": [_fit_json(f) for f in link.collectives]}


def _num(x):
  # JSON has no infinity: null stands for it (a link never used, or a
  # collective whose time did not grow with size).
  return None if math.isinf(x) else x


def topology_json(topology, calibration=None):
  """The JSON-ready dict of ``topology`` (see the module docstring)."""
  c = topology.chip
  chip = {"name": c.name, "kind": c.kind,
          "peak_flops_per_s": c.peak_bf16_flops_per_s,
          "hbm_bytes": c.hbm_bytes,
          "hbm_bandwidth_bytes_per_s": c.hbm_bandwidth_bytes_per_s,
          "launch_overhead_s": c.launch_overhead_s,
          "shared_compute_factor": c.shared_compute_factor,
          "matmul_flops_by_dtype": dict(c.matmul_flops_by_dtype),
          "vector_flops_per_s": c.vector_flops_per_s,
          "ici_links_per_chip": c.ici_links_per_chip,
          "default_network": c.default_network,
          "link": _link_json(c.link)}
  dims = [{"name": d.name, "size": d.size, "structure": d.structure,
           "wraparound": d.wraparound, "link": _link_json(d.link)}
          for d in topology.dims]
  return {"schema": SCHEMA, "version": VERSION, "name": topology.name,
          "chip": chip, "dims": dims, "calibration": calibration or {}}


def write_topology(path, topology, calibration=None):
  """Writes ``topology`` (and ``calibration`` metadata) to ``path``
  atomically.

  Raises:
    TopologyFileError: if the path does not end in ``.json`` or its folder
      cannot be written.
  """
  path = os.fspath(path)
  if not path.lower().endswith(".json"):
    raise TopologyFileError(f"topology file {path!r} must end in .json, so "
                            "that -t/--topology recognises it as a file")
  text = json.dumps(topology_json(topology, calibration), indent=2,
                    allow_nan=False) + "\n"
  folder = os.path.dirname(os.path.abspath(path))
  try:
    fd, tmp = tempfile.mkstemp(prefix=".topology-", suffix=".tmp",
                               dir=folder)
  except OSError as e:
    raise TopologyFileError(f"cannot write topology file {path!r}: {e}; "
                            "choose a folder you can write") from e
  try:
    with os.fdopen(fd, "w") as f:
      f.write(text)
    os.replace(tmp, path)
  except BaseException:
    if os.path.exists(tmp):
      os.unlink(tmp)
    raise


# --- from JSON --------------------------------------------------------------
def _get(obj, key, kind, where, default=...):
  if not isinstance(obj, dict):
    raise TopologyFileError(f"{where} must be a JSON object")
  if key not in obj:
    if default is not ...:
      return default
    raise TopologyFileError(f"{where} lacks the field {key!r}")
  v = obj[key]
  if kind is float:
    ok = isinstance(v, (int, float)) and not isinstance(v, bool)
    v = float(v) if ok else v
  elif kind is int:
    ok = isinstance(v, int) and not isinstance(v, bool)
  else:
    ok = isinstance(v, kind)
  if not ok:
    raise TopologyFileError(f"{where}.{key} is {v!r}; it must be a "
                            f"{getattr(kind, '__name__', kind)}")
  return v


def _link(obj, where):
  bw = obj.get("bandwidth_bytes_per_s") if isinstance(obj, dict) else None
  fits = []
  for i, f in enumerate(_get(obj, "collectives", list, where, [])):
    w = f"{where}.collectives[{i}]"
    fbw = f.get("bandwidth_bytes_per_s", 0.0) if isinstance(f, dict) else 0
    fit = CollectiveFit(
        _get(f, "kind", str, w), _get(f, "algorithm", str, w),
        _get(f, "latency_s", float, w),
        math.inf if fbw is None else
        _get(f, "bandwidth_bytes_per_s", float, w),
        _get(f, "steps", str, w, "1"), _get(f, "volume", str, w, "n"),
        _get(f, "min_bytes", int, w, 0),
        _get(f, "rel_residual", float, w, 0.0),
        _get(f, "samples", int, w, 0))
    try:
      fits.append(check_fit(fit))
    except TopologyError:
      raise
    except Exception as e:  # MtfError with the law named
      raise TopologyFileError(f"{w}: {e}") from None
  return LinkSpec(_get(obj, "name", str, where), _get(obj, "kind", str, where),
                  math.inf if bw is None else
                  _get(obj, "bandwidth_bytes_per_s", float, where),
                  _get(obj, "latency_s", float, where),
                  collectives=tuple(fits))


def topology_from_json(obj, source="<json>"):
  """The Topology a JSON dict describes; see :func:`read_topology`."""
  where = source
  schema = _get(obj, "schema", str, where)
  if schema != SCHEMA:
    raise TopologyFileError(f"{source} has schema {schema!r}, not {SCHEMA!r};"
                            " it is not a mesh-tf topology file")
  version = _get(obj, "version", int, where)
  if version != VERSION:
    raise TopologyFileError(
        f"{source} has schema version {version}, but this mesh-tf reads "
        f"version {VERSION}; recalibrate with `mtf-layout calibrate`")
  c = _get(obj, "chip", dict, where)
  w = f"{where}.chip"
  by_dtype = _get(c, "matmul_flops_by_dtype", dict, w, {})
  vector = c.get("vector_flops_per_s")
  if vector is not None:
    vector = _get(c, "vector_flops_per_s", float, w)
  chip = ChipSpec(
      _get(c, "name", str, w), _get(c, "kind", str, w),
      _get(c, "peak_flops_per_s", float, w), _get(c, "hbm_bytes", int, w),
      _get(c, "hbm_bandwidth_bytes_per_s", float, w),
      _link(_get(c, "link", dict, w), f"{w}.link"),
      _get(c, "ici_links_per_chip", int, w, 0),
      c.get("default_network"),
      # In file order: the presets' tables are ordered, and equality keeps it.
      tuple((str(k), float(v)) for k, v in by_dtype.items()), vector,
      _get(c, "launch_overhead_s", float, w, 0.0),
      _get(c, "shared_compute_factor", float, w, 1.0))
  if not (chip.peak_bf16_flops_per_s > 0 and
          chip.hbm_bandwidth_bytes_per_s > 0):
    raise TopologyFileError(f"{w} needs positive peak_flops_per_s and "
                            "hbm_bandwidth_bytes_per_s")
  dims = []
  for i, d in enumerate(_get(obj, "dims", list, where)):
    wd = f"{where}.dims[{i}]"
    size = _get(d, "size", int, wd)
    structure = _get(d, "structure", str, wd)
    if size < 1 or structure not in ("torus", "switch"):
      raise TopologyFileError(f"{wd} needs a size >= 1 and a structure of "
                              f"'torus' or 'switch', got {size}, "
                              f"{structure!r}")
    dims.append(PhysicalDim(_get(d, "name", str, wd), size,
                            _link(_get(d, "link", dict, wd), f"{wd}.link"),
                            structure, _get(d, "wraparound", bool, wd, False)))
  if not dims:
    raise TopologyFileError(f"{where}.dims is empty; a topology needs at "
                            "least one physical dimension")
  return Topology(_get(obj, "name", str, where), chip, tuple(dims))


def read_topology_file(path):
  """``(Topology, calibration dict)`` from a topology file.

  Raises:
    TopologyFileError: if the file is missing, not JSON, or off-schema.
  """
  path = os.fspath(path)
  try:
    with open(path) as f:
      obj = json.load(f)
  except FileNotFoundError:
    raise TopologyFileError(
        f"topology file {path!r} does not exist; write one with "
        "`mtf-layout calibrate -o FILE.json` or give a preset name") from None
  except (OSError, ValueError) as e:
    raise TopologyFileError(f"cannot read topology file {path!r}: {e}") \
        from None
  topology = topology_from_json(obj, source=path)
  return topology, obj.get("calibration") or {}


def read_topology(path):
  """The :class:`~costmodels.Topology` stored in ``path``.

  Raises:
    TopologyFileError: if the file is missing, not JSON, or off-schema.
  """
  return read_topology_file(path)[0]
