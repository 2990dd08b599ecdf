"""How ``mtf-layout`` fails: exit codes, the CLI's input error, and the
one-line message and hint each library error becomes."""

import math
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
  return "check the arguments with `mtf-layout <command> --help`"


def fail(message, hint, code):
  """Writes the ``error:`` and ``hint:`` lines; returns ``code``."""
  message = " ".join(str(message).split())
  sys.stderr.write(f"{PROG}: error: {message}\n")
  if hint:
    sys.stderr.write(f"hint: {' '.join(str(hint).split())}\n")
  return code


def infeasible_message(err, args):
  """``(message, hint)`` for an InfeasibleLayoutError."""
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
  if peak >= 2**30:
    need = f"{math.ceil(peak / 2**30 * 10) / 10:g}GiB"
  else:
    need = f"{math.ceil(peak / 2**20)}MiB"
  hint = (f"use --memory-budget {need} or more (or "
          f"none), more devices, or a smaller model; largest tensors at "
          f"the peak: {big}")
  return msg, hint
