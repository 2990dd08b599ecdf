"""Topologies as versioned JSON objects, and back: the one serialiser.

Topology files (``mtf-layout calibrate``, ``-t FILE.json``) and the
topologies plan files embed (:mod:`autolayout.plans.plan`) use this one schema,
documented in ``docs/topology_files.md``::

    {"schema": "mesh-tf-topology", "version": 9, "name": "...",
     "chip": {...ChipSpec fields..., "link": {...}, "compute_fits": [...]},
     "dims": [{"name", "size", "structure", "wraparound", "link": {...}}],
     "calibration": {...what was measured, fit residuals...}}

Every number keeps its unit in its key; JSON has no infinity, so ``null``
stands for an infinite bandwidth.  Version 9 added
``chip.devices_in_lockstep`` (whether a gradient sync finds its group's
devices together, or each device holds its gradients until the end of its
backward pass); version 8 files read with False for a ``"cpu"`` chip
(logical CPU devices, the only ones calibrated so) and True otherwise.
Version 8 added ``chip.step_overhead_s``
(the fixed cost of one call of a step); version 7 files read with 0.
Version 7 added ``compute_fits[].tile``
(the blocks a convolution kernel computes its output in); version 6
files read without it.  Version 6 added ``link.barrier_s``
(the fixed cost of each collective over the link in a step); version 5
files read with 0.  Version 5 added
``chip.batch_matrix_s`` (what each matrix of a batched product costs
beyond the first) and made ``chip.inline_kernel_max`` ``[batch, rows,
cols]``; version 4 files read with 0 and their ``[rows, cols]`` as a batch
of one.  Version 4 added
``chip.threaded_kernel_s`` and ``chip.inline_kernel_max`` (the fixed cost
of a matrix product handed to a thread pool, and the largest product that
is not); version 3 files read without it (0: those calibrations priced it
inside each pattern's fixed cost).  Version 3 added
``chip.matmul_efficiency_by_dtype`` (the achievable fraction of the matmul
peak); version 2 files, and version 1 files (no compute fits, no overlap
efficiency either), still read, with no fraction (1: their peaks were
measured by calibration, which is what the fraction stands for).  So does
the schema-less form plan files embedded before (``{"name", "chip",
"dims"}`` with every NamedTuple field by name).

Example:
  >>> from costmodels import get_topology
  >>> t = get_topology("dgx-h100")
  >>> topology_from_dict(topology_to_dict(t)) == t
  True
"""

import math

from costmodels.collective_fits import CollectiveFit, check_fit
from costmodels.compute_fits import ComputeClassFit, check_compute_fit
from costmodels.errors import TopologyError
from costmodels.hardware import ChipSpec, LinkSpec
from costmodels.topology.types import PhysicalDim, Topology

SCHEMA = "mesh-tf-topology"
VERSION = 9
#: Versions this mesh-tf reads (1: before compute fits and overlap; 2:
#: before the achievable matmul fraction; 3: before the threaded-kernel
#: cost; 4: before the cost per matrix of a batch; 5: before the cost per
#: collective in a step; 6: before convolution tiles; 7: before the fixed
#: cost per step; 8: before devices_in_lockstep).  The version was bumped
#: each time, rather than the field added silently, so that an older mesh-tf refuses a file whose new term it would
#: ignore instead of pricing matmuls too fast.
READ_VERSIONS = (1, 2, 3, 4, 5, 6, 7, 8, 9)


class TopologyFileError(TopologyError):
  """A topology file (or embedded topology) is missing, unreadable, or does
  not follow the schema."""


# --- to JSON ----------------------------------------------------------------
def _num(x):
  return None if x is not None and math.isinf(x) else x


def _fit_json(f):
  return {"kind": f.kind, "algorithm": f.algorithm,
          "latency_s": f.latency_s,
          "bandwidth_bytes_per_s": _num(f.bandwidth_bytes_per_s),
          "steps": f.steps, "volume": f.volume, "min_bytes": f.min_bytes,
          "rel_residual": f.rel_residual, "samples": f.samples}


def _compute_fit_json(f):
  return {"pattern": f.pattern, "latency_s": f.latency_s,
          "flops_per_s": _num(f.flops_per_s),
          "bandwidth_bytes_per_s": _num(f.bandwidth_bytes_per_s),
          "rel_residual": f.rel_residual, "samples": f.samples,
          "input_bandwidth_bytes_per_s": _num(
              f.input_bandwidth_bytes_per_s), "tile": list(f.tile)}


def _link_json(link):
  return {"name": link.name, "kind": link.kind,
          "bandwidth_bytes_per_s": _num(link.bandwidth_bytes_per_s),
          "latency_s": link.latency_s,
          "overlap_efficiency": link.overlap_efficiency,
          "barrier_s": link.barrier_s,
          "collectives": [_fit_json(f) for f in link.collectives]}


def topology_to_dict(topology, calibration=None):
  """The JSON-ready dict of ``topology`` (see the module docstring);
  ``calibration`` (metadata) is kept under its own key when given."""
  c = topology.chip
  chip = {"name": c.name, "kind": c.kind,
          "peak_flops_per_s": c.peak_bf16_flops_per_s,
          "hbm_bytes": c.hbm_bytes,
          "hbm_bandwidth_bytes_per_s": c.hbm_bandwidth_bytes_per_s,
          "launch_overhead_s": c.launch_overhead_s,
          "shared_compute_factor": c.shared_compute_factor,
          "matmul_flops_by_dtype": dict(c.matmul_flops_by_dtype),
          "matmul_efficiency_by_dtype": dict(c.matmul_efficiency_by_dtype),
          "vector_flops_per_s": c.vector_flops_per_s,
          "ici_links_per_chip": c.ici_links_per_chip,
          "default_network": c.default_network,
          "compute_fits": [_compute_fit_json(f) for f in c.compute_fits],
          "threaded_kernel_s": c.threaded_kernel_s,
          "inline_kernel_max": list(c.inline_kernel_max),
          "batch_matrix_s": c.batch_matrix_s,
          "step_overhead_s": c.step_overhead_s,
          "devices_in_lockstep": c.devices_in_lockstep,
          "link": _link_json(c.link)}
  dims = [{"name": d.name, "size": d.size, "structure": d.structure,
           "wraparound": d.wraparound, "link": _link_json(d.link)}
          for d in topology.dims]
  out = {"schema": SCHEMA, "version": VERSION, "name": topology.name,
         "chip": chip, "dims": dims}
  if calibration is not None:
    out["calibration"] = calibration
  return out


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


def _rate(obj, key, where, default=...):
  """A bandwidth: a positive number, or null for infinity."""
  if isinstance(obj, dict) and obj.get(key, 0) is None:
    return math.inf
  return _get(obj, key, float, where, default)


def _optional_float(obj, key, where):
  if not isinstance(obj, dict) or obj.get(key) is None:
    return None
  return _get(obj, key, float, where)


def _link(obj, where):
  fits = []
  for i, f in enumerate(_get(obj, "collectives", list, where, [])):
    w = f"{where}.collectives[{i}]"
    fit = CollectiveFit(
        _get(f, "kind", str, w), _get(f, "algorithm", str, w),
        _get(f, "latency_s", float, w),
        _rate(f, "bandwidth_bytes_per_s", w, 0.0),
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
  eta = _optional_float(obj, "overlap_efficiency", where)
  if eta is not None and not 0.0 <= eta <= 1.0:
    raise TopologyFileError(f"{where}.overlap_efficiency is {eta!r}; it is "
                            "a fraction in [0, 1] (or null for the default "
                            "of the link kind)")
  barrier = _get(obj, "barrier_s", float, where, 0.0)
  if not barrier >= 0:
    raise TopologyFileError(f"{where}.barrier_s is {barrier!r}; it must be "
                            ">= 0 (seconds per collective)")
  return LinkSpec(_get(obj, "name", str, where), _get(obj, "kind", str, where),
                  _rate(obj, "bandwidth_bytes_per_s", where),
                  _get(obj, "latency_s", float, where),
                  collectives=tuple(fits), overlap_efficiency=eta,
                  barrier_s=barrier)


def _inline_max(c, where, version):
  """``chip.inline_kernel_max``: ``[]`` or ``[batch, rows, cols]``,
  positive (``[rows, cols]``, a batch of one, in version 4 files)."""
  v = _get(c, "inline_kernel_max", list, where, [])
  if len(v) == 2 and version == 4:
    v = [1] + v
  if v and not (len(v) == 3 and all(isinstance(x, int) and x > 0
                                    for x in v)):
    raise TopologyFileError(f"{where}.inline_kernel_max must be [] or "
                            "[batch, rows, cols] of positive integers, got "
                            f"{v!r}")
  return tuple(v)


def _compute_fits(c, where):
  out = []
  for i, f in enumerate(_get(c, "compute_fits", list, where, [])):
    w = f"{where}.compute_fits[{i}]"
    fit = ComputeClassFit(
        _get(f, "pattern", str, w), _get(f, "latency_s", float, w),
        _rate(f, "flops_per_s", w),
        _rate(f, "bandwidth_bytes_per_s", w, math.inf),
        _get(f, "rel_residual", float, w, 0.0), _get(f, "samples", int, w, 0),
        _rate(f, "input_bandwidth_bytes_per_s", w, math.inf),
        tuple(_get(f, "tile", list, w, [])))
    try:
      out.append(check_compute_fit(fit))
    except TopologyError as e:
      raise TopologyFileError(f"{w}: {e}") from None
  return tuple(out)


def _efficiencies(c, where):
  """``chip.matmul_efficiency_by_dtype``: fractions in (0, 1] by dtype."""
  out = []
  w = f"{where}.matmul_efficiency_by_dtype"
  for k, v in _get(c, "matmul_efficiency_by_dtype", dict, where, {}).items():
    if (isinstance(v, bool) or not isinstance(v, (int, float))
        or not 0 < v <= 1):
      raise TopologyFileError(
          f"{w}[{k!r}] is {v!r}; it is the achievable fraction of the "
          "matmul peak, a number in (0, 1] (leave the dtype out for 1)")
    out.append((str(k), float(v)))
  return tuple(out)


def topology_from_dict(obj, source="<json>"):
  """The :class:`Topology` a JSON dict describes (schema versions
  :data:`READ_VERSIONS`, or the schema-less form old plan files embed).

  Raises:
    TopologyFileError: naming the field that is missing or wrong, and what
      to change.
  """
  if isinstance(obj, dict) and "schema" not in obj:
    if set(obj) == {"name", "chip", "dims"}:
      return _legacy_from_dict(obj, source)
    raise TopologyFileError(
        f"{source} has no 'schema' field: a topology needs \"schema\": "
        f"\"{SCHEMA}\" (in the older form, an embedded topology must have "
        f"exactly the keys ['chip', 'dims', 'name']); got keys {sorted(obj)}")
  where = source
  schema = _get(obj, "schema", str, where)
  if schema != SCHEMA:
    raise TopologyFileError(f"{source} has schema {schema!r}, not {SCHEMA!r};"
                            " it is not a mesh-tf topology file")
  version = _get(obj, "version", int, where)
  if version not in READ_VERSIONS:
    raise TopologyFileError(
        f"{source} has schema version {version}, but this mesh-tf reads "
        f"versions {list(READ_VERSIONS)}; recalibrate with `mtf-layout "
        "calibrate`")
  c = _get(obj, "chip", dict, where)
  w = f"{where}.chip"
  by_dtype = _get(c, "matmul_flops_by_dtype", dict, w, {})
  chip = ChipSpec(
      _get(c, "name", str, w), _get(c, "kind", str, w),
      _get(c, "peak_flops_per_s", float, w), _get(c, "hbm_bytes", int, w),
      _get(c, "hbm_bandwidth_bytes_per_s", float, w),
      _link(_get(c, "link", dict, w), f"{w}.link"),
      _get(c, "ici_links_per_chip", int, w, 0),
      c.get("default_network"),
      # In file order: the presets' tables are ordered, and equality keeps it.
      tuple((str(k), float(v)) for k, v in by_dtype.items()),
      _optional_float(c, "vector_flops_per_s", w),
      _get(c, "launch_overhead_s", float, w, 0.0),
      _get(c, "shared_compute_factor", float, w, 1.0),
      _compute_fits(c, w), _efficiencies(c, w),
      _get(c, "threaded_kernel_s", float, w, 0.0),
      _inline_max(c, w, version), _get(c, "batch_matrix_s", float, w, 0.0),
      _get(c, "step_overhead_s", float, w, 0.0),
      _get(c, "devices_in_lockstep", bool, w,
           _get(c, "kind", str, w) != "cpu"))
  for field in ("threaded_kernel_s", "batch_matrix_s", "step_overhead_s"):
    if getattr(chip, field) < 0:
      raise TopologyFileError(f"{w}.{field} is {getattr(chip, field)!r}; "
                              "it must be >= 0")
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


# --- the schema-less form of plan files written before version 2 ------------
def _tuples(value):
  if isinstance(value, list):
    return tuple(_tuples(v) for v in value)
  return value


def _build(cls, data, what, nested=None):
  """``cls(**data)`` with clear errors for missing or unknown fields."""
  if not isinstance(data, dict):
    raise TopologyFileError(f"embedded topology: {what} must be a JSON "
                            f"object, got {type(data).__name__}")
  unknown = sorted(set(data) - set(cls._fields))
  if unknown:
    raise TopologyFileError(
        f"embedded topology: {what} has unknown field(s) {unknown}; "
        f"{cls.__name__} has {list(cls._fields)}")
  required = [f for f in cls._fields if f not in cls._field_defaults]
  missing = [f for f in required if f not in data]
  if missing:
    raise TopologyFileError(f"embedded topology: {what} lacks field(s) "
                            f"{missing}")
  kwargs = {k: _tuples(v) for k, v in data.items()}
  for field, sub in (nested or {}).items():
    if field in kwargs:
      kwargs[field] = _build(sub, kwargs[field], f"{what}.{field}")
  if "collectives" in kwargs:
    kwargs["collectives"] = tuple(CollectiveFit(*f)
                                  for f in kwargs["collectives"])
  return cls(**kwargs)


def _legacy_from_dict(data, source):
  chip = _build(ChipSpec, data["chip"], "chip", {"link": LinkSpec})
  if not isinstance(data["dims"], list) or not data["dims"]:
    raise TopologyFileError(f"{source}: embedded topology: dims must be a "
                            "non-empty list")
  dims = tuple(_build(PhysicalDim, d, f"dims[{i}]", {"link": LinkSpec})
               for i, d in enumerate(data["dims"]))
  for d in dims:
    if isinstance(d.size, bool) or not isinstance(d.size, int) or d.size < 1:
      raise TopologyFileError(f"embedded topology: dim {d.name!r} has size "
                              f"{d.size!r}; sizes are positive integers")
  return Topology(str(data["name"]), chip, tuple(dims))
