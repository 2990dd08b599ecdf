"""How ``mtf-layout`` fails: exit codes, the CLI's input error, and the
one-line message and hint each library error becomes."""

import json
import math
import re
import sys

import costmodels
from mesh_tf.core.errors import LayoutError, MtfError, ParseError
from autolayout.errors import SolverError
from autolayout.cli.output import fmt_bytes

PROG = "mtf-layout"
EXIT_OK, EXIT_INTERNAL, EXIT_INPUT, EXIT_INFEASIBLE, EXIT_SOLVER = (
    0, 1, 2, 3, 4)


class CliInputError(MtfError):
  """Bad input given to the CLI.

  Attributes:
    hint: one line saying what to do instead.
  """

  def __init__(self, message, hint=None):
    super().__init__(message)
    self.hint = hint


def hint_for(err):
  """A hint line for a library error that has none of its own."""
  if isinstance(err, costmodels.TopologyError):
    return ("list the presets with `mtf-layout topologies`; a mesh must "
            "multiply to the topology's chip count and embed row-major")
  if isinstance(err, ParseError):
    return "write a mesh as 'data:4;model:4' and rules as 'batch:data'"
  if isinstance(err, LayoutError):
    return ("change the layout rules (or `--layout auto`), or the mesh axis"
            " sizes")
  if isinstance(err, SolverError):
    return "raise --time-limit, or use a smaller model or mesh"
  return "see `mtf-layout <command> --help` for the options and their values"


# The library's argument names, as the CLI's options (a message from the
# API that reaches the CLI is translated, so users see what they typed).
_OPTION_NAMES = (
    ("time_limit_s", "--time-limit"), ("num_workers", "--workers"),
    ("memory_budget", "--memory-budget"), ("max_points", "--max-points"),
    ("max_axes", "--max-axes"), ("num_devices", "--devices"),
    ("mesh_shape", "--mesh"), ("layout_rules", "--layout"),
    ("objective", "--objective"), ("seed", "--seed"))
_OPTION_RE = re.compile(r"\b(" + "|".join(a for a, _ in _OPTION_NAMES)
                        + r")=")
_CLI_NAME = dict(_OPTION_NAMES)
MAX_ECHO = 200       # longest run of non-blanks echoed in a message
MAX_LINE = 1200      # longest error or hint line


def _as_options(text):
  return _OPTION_RE.sub(lambda m: _CLI_NAME[m.group(1)] + " ", text)


def _cut(text):
  """One line, API names as CLI options, long echoed inputs cut."""
  text = " ".join(_as_options(str(text)).split())
  text = re.sub(r"\S{%d,}" % (MAX_ECHO + 1),
                lambda m: m.group(0)[:MAX_ECHO - 20]
                + f"...<{len(m.group(0))} chars>", text)
  if len(text) > MAX_LINE:
    text = text[:MAX_LINE - 3] + "..."
  return text


def fail(message, hint, code, json_stream=None):
  """The one way ``mtf-layout`` fails: exactly one ``error:`` line and one
  ``hint:`` line on stderr (and, for ``--format json``, the JSON error
  object ``{"schema", "error", "hint", "exit_code"}`` on ``json_stream``).

  Returns:
    ``code``.
  """
  message = _cut(message) or "failed"
  hint = _cut(hint or "run `mtf-layout <command> --help` for the options")
  sys.stderr.write(f"{PROG}: error: {message}\n")
  sys.stderr.write(f"hint: {hint}\n")
  if json_stream is not None:
    json.dump({"schema": "mtf-layout/1", "error": message, "hint": hint,
               "exit_code": code}, json_stream)
    json_stream.write("\n")
    json_stream.flush()
  return code


def infeasible_message(err, args):
  """``(message, hint)`` for an InfeasibleLayoutError."""
  if err.floor_bytes is not None:
    return _state_message(err, args)
  peak, budget = err.min_peak_bytes, err.memory_budget
  mesh = getattr(args, "resolved_mesh", None) or (
      f"{getattr(args, 'devices', None) or 'any number of'} devices")
  if peak is None:
    return str(err), "raise --memory-budget or use more devices"
  big = ", ".join(f"{n} {fmt_bytes(b)}" for n, b in err.dominating[:3])
  msg = (f"no layout of {args.model} on {mesh} ({args.topology}) fits the "
         f"memory budget of {fmt_bytes(budget)} per device; the "
         f"smallest feasible peak memory is {fmt_bytes(peak)} "
         f"({peak} bytes)")
  need = _budget_text(peak)
  hint = (f"use --memory-budget {need} or more (or "
          f"none), more devices, or a smaller model; largest tensors at "
          f"the peak: {big}")
  return msg, hint


def _budget_text(nbytes):
  """A ``--memory-budget`` value of at least ``nbytes``."""
  if nbytes >= 2**30:
    return f"{math.ceil(nbytes / 2**30 * 10) / 10:g}GiB"
  if nbytes >= 2**20:
    return f"{math.ceil(nbytes / 2**20)}MiB"
  return f"{math.ceil(nbytes / 2**10)}KiB"


def _state_message(err, args):
  """``(message, hint)`` when the variables alone exceed the budget (no
  layout search ran: see autolayout.search.infeasible.check_state_fits)."""
  floor, n = err.floor_bytes, err.num_devices
  where = getattr(args, "resolved_mesh", None) or f"{n} devices"
  msg = (f"no layout of {args.model} on {where} ({args.topology}) fits the "
         f"memory budget of {fmt_bytes(err.memory_budget)} per device: its "
         "variables (parameters and optimizer state) alone need at least "
         f"{fmt_bytes(floor)} ({floor} bytes) per device, spread evenly "
         f"over all {n} devices")
  hint = (f"use --memory-budget {_budget_text(floor)} or more (or none), "
          f"at least {err.min_devices} devices, or a smaller model")
  return msg, hint
