"""Topologies as JSON-ready dicts, and back.

A :class:`~costmodels.Topology` is plain data (a chip, its links and the
physical dims), so it round-trips through JSON exactly: floats are written
with ``repr`` precision by :mod:`json`, and every field of the NamedTuples
is kept by name.  Plan files (:mod:`autolayout.plan`) embed a topology this
way when it is not a preset.

Example:
  >>> from costmodels import get_topology
  >>> t = get_topology("dgx-h100")
  >>> topology_from_dict(topology_to_dict(t)) == t
  True
"""

from costmodels.errors import TopologyError
from costmodels.hardware import ChipSpec, LinkSpec
from costmodels.topology.types import PhysicalDim, Topology


def _record(value):
  """A NamedTuple as a dict of its fields (nested NamedTuples too)."""
  out = {}
  for field in value._fields:
    v = getattr(value, field)
    out[field] = _record(v) if hasattr(v, "_fields") else v
  return out


def topology_to_dict(topology):
  """``{"name", "chip": {...}, "dims": [{...}, ...]}`` of a Topology."""
  return {"name": topology.name, "chip": _record(topology.chip),
          "dims": [_record(d) for d in topology.dims]}


def _tuples(value):
  if isinstance(value, list):
    return tuple(_tuples(v) for v in value)
  return value


def _build(cls, data, what, nested=None):
  """``cls(**data)`` with clear errors for missing or unknown fields."""
  if not isinstance(data, dict):
    raise TopologyError(f"embedded topology: {what} must be a JSON object, "
                        f"got {type(data).__name__}")
  unknown = sorted(set(data) - set(cls._fields))
  if unknown:
    raise TopologyError(
        f"embedded topology: {what} has unknown field(s) {unknown}; "
        f"{cls.__name__} has {list(cls._fields)}")
  required = [f for f in cls._fields if f not in cls._field_defaults]
  missing = [f for f in required if f not in data]
  if missing:
    raise TopologyError(f"embedded topology: {what} lacks field(s) "
                        f"{missing}")
  # JSON arrays come back as lists; the specs hold tuples (hashable), e.g.
  # a chip's ``((dtype, FLOP/s), ...)`` table.
  kwargs = {k: _tuples(v) for k, v in data.items()}
  for field, sub in (nested or {}).items():
    if field in kwargs:
      kwargs[field] = _build(sub, kwargs[field], f"{what}.{field}")
  return cls(**kwargs)


def topology_from_dict(data):
  """The :class:`Topology` written by :func:`topology_to_dict`.

  Raises:
    costmodels.TopologyError: for a missing or unknown field, or a dim with
      a non-positive size.
  """
  if not isinstance(data, dict) or set(data) != {"name", "chip", "dims"}:
    keys = sorted(data) if isinstance(data, dict) else type(data).__name__
    raise TopologyError(f"embedded topology must have exactly the keys "
                        f"['chip', 'dims', 'name'], got {keys}")
  chip = _build(ChipSpec, data["chip"], "chip", {"link": LinkSpec})
  if not isinstance(data["dims"], list) or not data["dims"]:
    raise TopologyError("embedded topology: dims must be a non-empty list")
  dims = tuple(_build(PhysicalDim, d, f"dims[{i}]", {"link": LinkSpec})
               for i, d in enumerate(data["dims"]))
  for d in dims:
    if isinstance(d.size, bool) or not isinstance(d.size, int) or d.size < 1:
      raise TopologyError(f"embedded topology: dim {d.name!r} has size "
                          f"{d.size!r}; sizes are positive integers")
  return Topology(str(data["name"]), chip, dims)
