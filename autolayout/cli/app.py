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
import contextlib
import gc
import sys
import time

from mesh_tf.core.errors import MtfError
from autolayout.errors import InfeasibleLayoutError, SolverError
from autolayout.cli import (calibrate, compare, diff, explain, export,
                            mesh, pareto, report, run, solve, topologies,
                            validate)
from autolayout.cli.arguments import Parser, ParserExit
from autolayout.cli.context import Context, emit, summary
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
    diff.COMMAND,
    export.COMMAND,
    run.COMMAND,
    calibrate.COMMAND,
)
_BY_NAME = {c.name: c for c in COMMANDS}

# CPython's cyclic collector thresholds while a command runs.  A search
# builds many small graph objects (ops, tensors, shapes) that stay alive
# for the whole command, and with the default (700, 10, 10) the collector
# kept walking them: in the README plan example it ran 1,359 times and
# took 0.93 s of the 6.0 s of CPU, 0.75 s of it in full collections.
# With these it runs 245 times and takes 0.24 s (5.25 s in all; 22 MB more
# at the peak).  Only the frequency changes: every cycle is still freed.
GC_THRESHOLDS = (10_000, 10, 10)


@contextlib.contextmanager
def _collect_less():
  """:data:`GC_THRESHOLDS` while the block runs; the caller's after (a
  test or notebook that calls :func:`main` keeps its own)."""
  before = gc.get_threshold()
  gc.set_threshold(*GC_THRESHOLDS)
  try:
    yield
  finally:
    gc.set_threshold(*before)


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
  answer = command.run(args, ctx)
  with ctx.phase("output"):
    emit(ctx, command.name, answer, args)
  if ctx.fmt == "table" and command.timed:
    ctx.err.print(f"[dim]{summary(ctx, time.perf_counter() - t0)}[/]")
  return EXIT_OK


def _wants_json(argv):
  """Whether ``argv`` asks for ``--format json`` (read before parsing, so
  that a parse error too is answered in JSON)."""
  argv = list(argv)
  for i, a in enumerate(argv):
    if a in ("-f", "--format") and i + 1 < len(argv) and argv[i + 1] == (
        "json"):
      return True
    if a in ("-fjson", "--format=json"):
      return True
  return False


def program():
  """The ``mtf-layout`` process (and ``python -m autolayout.cli``):
  :func:`main` on ``sys.argv``; returns its exit code for ``sys.exit``.

  The process collects cycles at :data:`GC_THRESHOLDS` from start to end
  (:func:`main` alone restores the caller's thresholds when it returns,
  and restoring them would start a full collection here).  A search
  leaves hundreds of thousands of objects behind (every candidate's
  graph, tables and programs, in reference cycles), which the
  interpreter's shutdown would collect one by one just before the
  process ends and the memory goes back anyway: 0.3-0.5 s of CPU after
  the README plan example's answer was written.  They are kept out of
  that last collection (:func:`gc.freeze`); the process exits as usual
  (buffers flushed, exit handlers run)."""
  gc.set_threshold(*GC_THRESHOLDS)
  code = main()
  gc.freeze()
  return code


def main(argv=None):
  """Runs ``mtf-layout`` with ``argv`` (default ``sys.argv[1:]``).

  The one place where every path ends: exit 0, or 2 (bad input), 3 (no
  layout fits the budget), 4 (a limit was reached) with exactly one
  ``error:`` line and one ``hint:`` line on stderr, and with ``--format
  json`` also the JSON error object on stdout.  1 is for bugs in mesh-tf
  only.

  Returns:
    The exit code (see :mod:`autolayout.cli`).
  """
  argv = sys.argv[1:] if argv is None else list(argv)
  debug = "--debug" in argv
  json_out = sys.stdout if _wants_json(argv) else None
  try:
    args = build_parser().parse_args(argv)
  except ParserExit as e:
    return fail(e.message, e.hint, e.code, json_out)
  except SystemExit as e:  # --help, --version
    return int(e.code or 0)
  try:
    validate.check_options(args)
    with _collect_less():
      return run(args)
  except CliInputError as e:
    if debug:
      raise
    return fail(e, e.hint, EXIT_INPUT, json_out)
  except InfeasibleLayoutError as e:
    if debug:
      raise
    return fail(*infeasible_message(e, args), EXIT_INFEASIBLE, json_out)
  except SolverError as e:
    if debug:
      raise
    return fail(e, hint_for(e), EXIT_SOLVER, json_out)
  except MtfError as e:
    if debug:
      raise
    return fail(e, hint_for(e), EXIT_INPUT, json_out)
  except BrokenPipeError:
    return EXIT_OK
  except KeyboardInterrupt:
    return fail("interrupted", "give --time-limit S to stop the search after "
                "S seconds with the best layout found so far", 130, json_out)
  except Exception as e:  # pylint: disable=broad-except
    if debug:
      raise
    return fail(f"internal error: {type(e).__name__}: {e}",
                "this is a bug in mesh-tf: rerun with --debug for the "
                "traceback and report it", EXIT_INTERNAL, json_out)
