"""Checks of the arguments the cost model's public functions take, done once
at the edge (:func:`costmodels.evaluate`, ``mtf.auto_layout`` and the CLI
share them): the graph, its outputs, the mesh shape, the layout rules and
per-device sizes such as a memory budget (``16GB``, ``12GiB``, ``90%``,
``hbm``, ``none``).

Every problem raises :class:`mesh_tf.InvalidArgumentError`, naming the
argument and a valid value.
"""

import math
import numbers

from mesh_tf.core import dims as dims_lib
from mesh_tf.core import dtypes as dtypes_lib
from mesh_tf.core.errors import InvalidArgumentError, MtfError
from mesh_tf.core.layout import LayoutRules, convert_to_layout_rules
from mesh_tf.core.mesh_shape import MeshShape, convert_to_mesh_shape

__all__ = ["MAX_BYTES", "MAX_ECHO", "check_graph", "check_mesh_shape",
           "check_outputs", "check_rules", "echo", "parse_size",
           "resolve_memory_budget"]

# The largest per-device byte count the cost model and the solver handle
# (1 EiB).  CP-SAT coefficients are 64-bit integers and a step's memory is a
# sum of many of them, so sizes must stay well below 2**63.
MAX_BYTES = 2**60
# Echoed inputs in messages are cut to this many characters.
MAX_ECHO = 200
# A mesh of more processors than this is not enumerated or priced.
MAX_MESH_SIZE = 2**20

_UNITS = (("kib", 2**10), ("mib", 2**20), ("gib", 2**30), ("tib", 2**40),
          ("pib", 2**50), ("kb", 10**3), ("mb", 10**6), ("gb", 10**9),
          ("tb", 10**12), ("pb", 10**15), ("b", 1))


def echo(value, limit=MAX_ECHO):
  """``repr(value)``, cut to about ``limit`` characters for a message."""
  text = repr(value)
  if len(text) <= limit:
    return text
  return text[:limit - 20] + f"...<{len(text)} chars>"


def parse_size(value, hbm_bytes=None, name="memory_budget"):
  """A per-device size in bytes, from what a user writes.

  Args:
    value: an int (bytes), a float with an integral value (``1e9``), or a
      string: ``"16GB"``, ``"12GiB"``, ``"512MiB"``, ``"1e9"``, ``"90%"``
      (of ``hbm_bytes``), ``"hbm"`` (``hbm_bytes``) or ``"none"``.
    hbm_bytes: the chip's memory, for ``"hbm"`` and percentages.
    name: the argument's name, for the message.

  Returns:
    The bytes (an int), or None for ``None`` / ``"none"`` (no limit).

  Raises:
    InvalidArgumentError: for anything else, a size that is not positive, or
      one over :data:`MAX_BYTES`.

  Example:
    >>> parse_size("1.5GiB")
    1610612736
    >>> parse_size("50%", hbm_bytes=16 * 10**9)
    8000000000
  """
  hint = ("e.g. 16GB, 12GiB, 512MiB, 90% (of HBM), hbm, or none (no "
          "limit)")
  if value is None:
    return None
  if isinstance(value, bool) or not isinstance(value, (numbers.Real, str)):
    raise InvalidArgumentError(
        f"{name}={echo(value)} is not a size; give bytes or a string, {hint}")
  if isinstance(value, str):
    s = value.strip().lower().replace(" ", "").replace("_", "")
    if s in ("none", "unlimited"):
      return None
    if s == "hbm" or s.endswith("%"):
      if hbm_bytes is None:
        raise InvalidArgumentError(
            f"{name}={echo(value)} is relative to the chip's HBM, but no "
            "topology is known here; give bytes, e.g. 16GB")
      if s == "hbm":
        return int(hbm_bytes)
      try:
        pct = float(s[:-1])
      except ValueError:
        pct = math.nan
      if not (math.isfinite(pct) and 0 < pct <= 10**4):
        raise InvalidArgumentError(
            f"{name}={echo(value)} is not a percentage of HBM in (0, "
            f"10000]; {hint}")
      number = pct / 100 * hbm_bytes
    else:
      for suffix, scale in _UNITS:
        if s.endswith(suffix):
          s, unit = s[:-len(suffix)], scale
          break
      else:
        unit = 1
      try:
        number = float(s) * unit
      except ValueError:
        raise InvalidArgumentError(
            f"cannot read {name}={echo(value)} as a size; {hint}") from None
  else:
    number = value
  if isinstance(number, float) and not math.isfinite(number):
    raise InvalidArgumentError(
        f"{name}={echo(value)} is not a finite size; {hint}")
  if number > MAX_BYTES:
    raise InvalidArgumentError(
        f"{name}={echo(value)} is over 1 EiB ({MAX_BYTES} bytes), the "
        "largest size the cost model takes; give a real budget such as 16GB, "
        "or none for no limit")
  number = int(number)
  if number < 1:
    raise InvalidArgumentError(
        f"{name}={echo(value)} is not a positive size; {hint}")
  return number


def resolve_memory_budget(value, topology):
  """``parse_size(value)`` against the usable HBM of ``topology``'s chip
  (``"hbm"``, ``"90%"``: the HBM less the default runtime reserve, as in the
  CLI)."""
  from costmodels import hardware  # pylint: disable=g-import-not-at-top
  return parse_size(value, hardware.usable_memory_bytes(topology.chip))


def check_graph(graph, name="graph"):
  """Checks that ``graph`` is a non-empty mtf Graph whose tensors all have
  sizes the cost model can count.

  Raises:
    InvalidArgumentError: for something else than a Graph (a ModelGraph:
      pass its ``.graph``), an empty graph, or a tensor whose full size is
      over :data:`MAX_BYTES` (named, with its dims).
  """
  from mesh_tf.graph import Graph  # pylint: disable=g-import-not-at-top
  if not isinstance(graph, Graph):
    inner = getattr(graph, "graph", None)
    fix = (f"pass {name}.graph" if isinstance(inner, Graph) else
           "build one with mtf.Graph() or mesh_tf.models.build_model(...)"
           ".graph")
    raise InvalidArgumentError(
        f"{name} must be an mtf Graph, got {type(graph).__name__} "
        f"{echo(graph, 80)}; {fix}")
  if not graph.operations:
    raise InvalidArgumentError(
        f"{name} has no operations; build the model into it first")
  for t in graph.tensors:
    for d in t.shape.dims:
      # One name may have several sizes (pad, slice, halo exchanges): a
      # rule splits each of them, and each tensor is priced at its own.
      if d.size < 1:
        raise InvalidArgumentError(
            f"tensor {t.name} has dim {d.name}={d.size}, an empty tensor; "
            "give every dim a size of at least 1")
    try:
      nbytes = t.shape.size * dtypes_lib.size_of(t.dtype)
    except MtfError:
      continue  # an unusual dtype: the cost model reports it itself
    if nbytes > MAX_BYTES:
      dims = ", ".join(f"{d.name}={d.size}" for d in t.shape.dims)
      raise InvalidArgumentError(
          f"tensor {t.name} [{dims}] holds {nbytes:.3g} bytes, over the 1 "
          f"EiB ({MAX_BYTES} bytes) the cost model counts; use smaller "
          "sizes (e.g. --set batch=... of at most a few thousand)")
  return graph


def check_outputs(graph, outputs, name="outputs"):
  """Checks ``outputs`` (None, a Tensor, or a non-empty list of Tensors of
  ``graph``).

  Returns:
    None or a list of Tensors.

  Raises:
    InvalidArgumentError: naming the first bad entry.
  """
  from mesh_tf.graph import Tensor  # pylint: disable=g-import-not-at-top
  if outputs is None:
    return None
  if isinstance(outputs, Tensor):
    outputs = [outputs]
  elif isinstance(outputs, dict):
    outputs = list(outputs.values())
  elif isinstance(outputs, (list, tuple)):
    outputs = list(outputs)
  else:
    raise InvalidArgumentError(
        f"{name} must be a Tensor, a list of Tensors or None (every tensor "
        f"no op reads), got {type(outputs).__name__} {echo(outputs, 80)}")
  if not outputs:
    raise InvalidArgumentError(
        f"{name} is empty, so the step computes nothing; pass the loss (or "
        "the results) as outputs, or None for every tensor no op reads")
  known = set(graph.tensors)
  for i, t in enumerate(outputs):
    if not isinstance(t, Tensor):
      raise InvalidArgumentError(
          f"{name}[{i}] is {type(t).__name__} {echo(t, 80)}, not an mtf "
          "Tensor; pass the Tensors themselves (e.g. [model.loss])")
    if t not in known:
      raise InvalidArgumentError(
          f"{name}[{i}] {t.name} is a tensor of another graph; pass tensors "
          "of the graph being laid out")
  return outputs


def check_mesh_shape(mesh_shape, name="mesh_shape"):
  """Parses and checks a mesh shape (``"data:4;model:4"``, a Shape or a
  MeshShape) into a MeshShape.

  Raises:
    InvalidArgumentError: for a malformed or empty mesh, an axis of size
      < 1, repeated axis names, or more than :data:`MAX_MESH_SIZE`
      processors.
  """
  example = "e.g. 'data:4;model:4'"
  if isinstance(mesh_shape, MeshShape):
    if mesh_shape.size > MAX_MESH_SIZE:
      raise InvalidArgumentError(
          f"{name}={mesh_shape} has {mesh_shape.size} processors, over the "
          f"{MAX_MESH_SIZE} the cost model prices; use a smaller mesh")
    return mesh_shape
  if not isinstance(mesh_shape, (str, dims_lib.Shape, list, tuple)):
    raise InvalidArgumentError(
        f"{name} must be a mesh string or Shape, got "
        f"{type(mesh_shape).__name__} {echo(mesh_shape, 80)}; {example}")
  try:
    shape = convert_to_mesh_shape(mesh_shape)
  except MtfError as e:  # keep the type (ParseError, ShapeError...)
    raise type(e)(f"{name}={echo(mesh_shape)} is not a mesh: {e}; "
                  f"{example}") from None
  except (TypeError, ValueError) as e:
    raise InvalidArgumentError(
        f"{name}={echo(mesh_shape)} is not a mesh ({e}); {example}") from None
  if not shape.dims:
    raise InvalidArgumentError(f"{name}={echo(mesh_shape)} has no axes; "
                               f"{example}")
  bad = [d for d in shape.dims if d.size < 1]
  if bad:
    raise InvalidArgumentError(
        f"{name}={echo(mesh_shape)}: mesh axis {bad[0].name}={bad[0].size} "
        f"needs a size of at least 1; {example}")
  if shape.size > MAX_MESH_SIZE:
    raise InvalidArgumentError(
        f"{name}={echo(mesh_shape)} has {shape.size} processors, over the "
        f"{MAX_MESH_SIZE} the cost model prices; use a smaller mesh")
  return shape


def check_rules(rules, name="layout_rules"):
  """Parses layout rules (``"batch:data;d_ff:model"``, pairs or
  LayoutRules).

  Raises:
    InvalidArgumentError: for anything that is not rules.
  """
  if isinstance(rules, LayoutRules):
    return rules
  if not isinstance(rules, (str, list, tuple, dict)) and rules is not None:
    raise InvalidArgumentError(
        f"{name} must be a rules string such as 'batch:data;d_ff:model' "
        f"(or '' for replicated), got {type(rules).__name__} "
        f"{echo(rules, 80)}")
  try:
    return convert_to_layout_rules(rules or "")
  except MtfError as e:  # keep the type (ParseError, LayoutError...)
    raise type(e)(f"{name}={echo(rules)} is not layout rules: {e}; write "
                  "dim:axis pairs, e.g. 'batch:data;d_ff:model'") from None
  except (TypeError, ValueError) as e:
    raise InvalidArgumentError(
        f"{name}={echo(rules)} is not layout rules ({e}); write dim:axis "
        "pairs, e.g. 'batch:data;d_ff:model'") from None
