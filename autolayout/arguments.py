"""The defaults and argument checks of the layout search's public entry
points (``mtf.auto_layout``, :func:`autolayout.auto_layout`,
:func:`~autolayout.auto_mesh_and_layout`, :func:`~autolayout.pareto`).

The defaults are the ``mtf-layout`` CLI's, so that the same question gets
the same answer from Python and from the shell: topology
``tpu-v5e-16x16``, the chip's HBM as the memory budget, the topology's own
shape as a ``data x model`` mesh, a 60 s time limit, 2 CP-SAT workers and
seed 0.  (``tests/autolayout/test_api_arguments.py`` holds the CLI's parser
to them.)

Every check raises :class:`mesh_tf.InvalidArgumentError` naming the
argument and a valid value; the sizes a user writes (``"16GB"``,
``"90%"``, ``"hbm"``) are parsed here, once.
"""

import math
import numbers
import time
from typing import Any, NamedTuple

import costmodels
from autolayout.errors import TimeLimitError
from costmodels import arguments as cm_args
from mesh_tf.core.errors import InvalidArgumentError

__all__ = ["DEFAULTS", "MAX_DEVICES", "MAX_NUM_WORKERS", "MAX_TIME_LIMIT_S",
           "OBJECTIVES", "check_count",
           "default_mesh", "is_training_graph"]

OBJECTIVES = ("time", "comm", "memory", "latency")
TIE_BREAKS = ("time", "comm", "memory")
MAX_TIME_LIMIT_S = 7 * 24 * 3600.0
MAX_NUM_WORKERS = 256
MAX_SEED = 2**31 - 1
MAX_AXES = 4
MAX_POINTS = 1000
MAX_DEVICES = cm_args.MAX_MESH_SIZE

# Model family names a user may type, mapped to a real-sized zoo preset
# (``transformer`` is GPT-2-small sized); plan files record what was typed.
MODEL_FAMILIES = {
    "transformer": "gpt2_small",
    "mlp": "mlp_large",
    "moe": "moe_gpt2_small_64e",
    "conv3d": "conv3d_large",
}


class _Defaults(NamedTuple):
  topology: str = "tpu-v5e-16x16"
  memory_budget: Any = "hbm"
  objective: str = "time"
  time_limit_s: float = 60.0
  num_workers: int = 2
  seed: int = 0
  max_axes: int = 2
  max_points: int = 12


DEFAULTS = _Defaults()


def default_mesh(topology):
  """The topology's own shape as a ``data x model`` mesh string:
  ``tpu-v5e-16x16`` -> ``data:16;model:16``, ``tpu-v5p-4x4x4`` ->
  ``data:16;model:4``, ``dgx-h100`` -> ``data:8``."""
  sizes = [d.size for d in topology.dims if d.size > 1]
  if len(sizes) <= 1:
    return f"data:{topology.num_chips}"
  return f"data:{math.prod(sizes[:-1])};model:{sizes[-1]}"


def _is_int(x):
  return isinstance(x, numbers.Integral) and not isinstance(x, bool)


def check_count(value, name, low, high, example):
  """An int in ``[low, high]`` (floats with an integral value accepted).

  Raises:
    InvalidArgumentError: naming ``name`` and ``example``.
  """
  if isinstance(value, float) and value.is_integer():
    value = int(value)
  if not _is_int(value):
    raise InvalidArgumentError(
        f"{name}={cm_args.echo(value, 80)} is not an integer; use e.g. "
        f"{name}={example}")
  if not low <= value <= high:
    raise InvalidArgumentError(
        f"{name}={value} is out of range: it takes {low} to {high}; use e.g. "
        f"{name}={example}")
  return int(value)


def check_time_limit(value, name="time_limit_s"):
  """A positive, finite number of seconds up to :data:`MAX_TIME_LIMIT_S`."""
  if isinstance(value, bool) or not isinstance(value, numbers.Real):
    raise InvalidArgumentError(
        f"{name}={cm_args.echo(value, 80)} is not a number of seconds; use "
        f"e.g. {name}={DEFAULTS.time_limit_s:g}")
  value = float(value)
  if not (math.isfinite(value) and 0 < value <= MAX_TIME_LIMIT_S):
    raise InvalidArgumentError(
        f"{name}={value!r} is out of range: it takes more than 0 and at most "
        f"{MAX_TIME_LIMIT_S:g} seconds; use e.g. {name}="
        f"{DEFAULTS.time_limit_s:g}")
  return value


def time_left(t0, time_limit_s, what):
  """Seconds left of ``time_limit_s`` since ``t0`` (a ``perf_counter``
  value); TimeLimitError if none are (building the program used them)."""
  left = time_limit_s - (time.perf_counter() - t0)
  if left <= 0.01:
    raise TimeLimitError(
        f"the time limit of {time_limit_s:g} s ran out while building the "
        f"program, before CP-SAT could look for {what}")
  return left


def deadline_left(deadline, what):
  """Seconds until ``deadline`` (a ``perf_counter`` value, or None for no
  limit); TimeLimitError naming ``what`` was being built once it passed."""
  if deadline is None:
    return math.inf
  left = deadline - time.perf_counter()
  if left <= 0:
    raise TimeLimitError(f"the time limit ran out while building {what}; "
                         "raise the time limit")
  return left


def is_training_graph(graph):
  """True if the graph updates trainable variables (a training step; a
  decoding step only writes its non-trainable caches)."""
  from mesh_tf.ops import variables as var_ops  # pylint: disable=g-import-not-at-top
  for op in graph.operations:
    if isinstance(op, (var_ops.AssignOperation,
                       var_ops.ApplyGradientDescentOperation)):
      if any(v.trainable for v in op.variables):
        return True
  return False


def check_objective(objective, graph):
  if objective not in OBJECTIVES:
    raise InvalidArgumentError(
        f"unknown objective {cm_args.echo(objective, 80)}: objective= takes "
        f"one of {', '.join(OBJECTIVES)} (default {DEFAULTS.objective})")
  if objective == "latency" and graph is not None and is_training_graph(
      graph):
    raise InvalidArgumentError(
        "objective='latency' is the per-token latency of a one-token "
        "decoding step, but this graph is a training step (it updates "
        "variables); use objective='time' (the step time)")
  return objective


def check_tie_break(tie_break):
  if isinstance(tie_break, str):
    tie_break = (tie_break,)
  try:
    tie_break = tuple(tie_break)
  except TypeError:
    tie_break = (tie_break,)
  for t in tie_break:
    if t not in TIE_BREAKS:
      raise InvalidArgumentError(
          f"tie_break entry {cm_args.echo(t, 80)} is not an objective; use "
          f"names from {', '.join(TIE_BREAKS)}, e.g. tie_break=('memory',)")
  return tie_break


def check_forbid(forbid):
  if isinstance(forbid, str):
    return tuple(cm_args.check_rules(forbid, "forbid").pairs)
  try:
    pairs = list(forbid)
  except TypeError:
    pairs = None
  out = []
  for p in pairs if pairs is not None else [forbid]:
    # The axis may be a tuple of names: one multi-axis option (x+y).
    axis = p[1] if isinstance(p, (tuple, list)) and len(p) == 2 else None
    if isinstance(axis, list):
      axis = tuple(axis)
    if (pairs is None or not isinstance(p, (tuple, list)) or len(p) != 2
        or not isinstance(p[0], str)
        or not (isinstance(axis, str) or (
            isinstance(axis, tuple) and axis
            and all(isinstance(s, str) for s in axis)))):
      raise InvalidArgumentError(
          f"forbid={cm_args.echo(forbid, 120)} must be (dim, axis) pairs of "
          "names or a rules string, e.g. forbid=[('batch', 'data')]")
    out.append((p[0], axis))
  return tuple(out)


def check_solver_params(params):
  if params is None:
    return {}
  if not isinstance(params, dict):
    raise InvalidArgumentError(
        f"solver_params={cm_args.echo(params, 80)} must be a dict of CP-SAT "
        "parameters, e.g. {'stop_after_first_solution': True}")
  from ortools.sat.python import cp_model  # pylint: disable=g-import-not-at-top
  probe = cp_model.CpSolver().parameters
  for key, value in params.items():
    if not isinstance(key, str) or not hasattr(probe, key):
      raise InvalidArgumentError(
          f"solver_params has {cm_args.echo(key, 80)}, which is not a CP-SAT "
          "parameter (see ortools' sat_parameters.proto), e.g. "
          "{'stop_after_first_solution': True}")
    try:
      setattr(probe, key, value)
    except (TypeError, ValueError, OverflowError) as e:
      raise InvalidArgumentError(
          f"solver_params[{key!r}]={cm_args.echo(value, 80)} is not a valid "
          f"value for that CP-SAT parameter ({e})") from None
  return dict(params)


def resolve_topology(topology):
  """A Topology from a Topology or a preset/family name."""
  return costmodels.get_topology(topology)
