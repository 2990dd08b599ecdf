"""The ``mtf-layout`` program: its subcommands, its parser and ``main``.

Adding a subcommand is one module that defines ``COMMAND =
Command(name, help, description, add_arguments, run)`` and one line in
:data:`COMMANDS`; the parser, the output formats, the plot, the timing
line and the error handling then come from here and from
:func:`~autolayout.cli.context.emit`.
"""

# OR-Tools first: it must be loaded before TensorFlow in any process.
from ortools.sat.python import cp_model  # noqa: F401  isort:skip

import argparse
import sys
import time

from mesh_tf.core.errors import MtfError
from autolayout.errors import InfeasibleLayoutError, SolverError
from autolayout.cli import (compare, explain, mesh, pareto, report, solve,
                            topologies)
from autolayout.cli.arguments import Parser, ParserExit
from autolayout.cli.context import Context, emit
from autolayout.cli.errors import (EXIT_INFEASIBLE, EXIT_INPUT,
                                   EXIT_INTERNAL, EXIT_OK, EXIT_SOLVER, PROG,
                                   CliInputError, fail, hint_for,
                                   infeasible_message)

# The subcommands, in the order ``--help`` lists them.
COMMANDS = (
    solve.COMMAND,
    compare.COMMAND,
    report.COMMAND,
    mesh.COMMAND,
    pareto.COMMAND,
    topologies.COMMAND,
    explain.COMMAND,
)
_BY_NAME = {c.name: c for c in COMMANDS}


def build_parser():
  """The argparse parser of ``mtf-layout``."""
  p = Parser(prog=PROG, description=(
      "mtf-layout: how should I shard this model on this hardware, and what "
      "will it cost per device?"),
             epilog=(
                 "example:\n  mtf-layout solve --model transformer "
                 "--topology tpu-v5e-16x16\n\nRun `mtf-layout COMMAND "
                 "--help` for a command's options; docs/cli.md\nhas "
                 "them all, the exit codes and the JSON schema."),
             formatter_class=argparse.RawDescriptionHelpFormatter)
  from mesh_tf import __version__  # pylint: disable=g-import-not-at-top
  p.add_argument("--version", action="version",
                 version=f"{PROG} {__version__}")
  sub = p.add_subparsers(dest="command", metavar="COMMAND",
                         parser_class=Parser)
  sub.required = True
  for command in COMMANDS:
    command.add_arguments(sub.add_parser(command.name, help=command.help,
                                         description=command.description))
  return p


def run(args, stream=None):
  """Runs the subcommand ``args.command``; returns the exit code."""
  command = _BY_NAME[args.command]
  ctx = Context(args.format, stream)
  t0 = time.perf_counter()
  emit(ctx, command.name, command.run(args, ctx), args)
  if ctx.fmt == "table" and command.timed:
    ctx.err.print(f"[dim]done in {time.perf_counter() - t0:.1f} s[/]")
  return EXIT_OK


def main(argv=None):
  """Runs ``mtf-layout`` with ``argv`` (default ``sys.argv[1:]``).

  Returns:
    The exit code (0 on success; see :mod:`autolayout.cli`).
  """
  debug = "--debug" in (sys.argv[1:] if argv is None else argv)
  try:
    args = build_parser().parse_args(argv)
  except ParserExit as e:
    return e.code
  except SystemExit as e:  # --help
    return int(e.code or 0)
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use("Agg")  # before any plot imports pyplot; no display
  try:
    return run(args)
  except CliInputError as e:
    if debug:
      raise
    return fail(e, e.hint, EXIT_INPUT)
  except InfeasibleLayoutError as e:
    if debug:
      raise
    return fail(*infeasible_message(e, args), EXIT_INFEASIBLE)
  except SolverError as e:
    if debug:
      raise
    return fail(e, hint_for(e), EXIT_SOLVER)
  except MtfError as e:
    if debug:
      raise
    return fail(e, hint_for(e), EXIT_INPUT)
  except BrokenPipeError:
    return EXIT_OK
  except KeyboardInterrupt:
    return fail("interrupted", None, 130)
  except Exception as e:  # pylint: disable=broad-except
    if debug:
      raise
    return fail(f"internal error: {type(e).__name__}: {e}",
                "rerun with --debug for the traceback and report it",
                EXIT_INTERNAL)
