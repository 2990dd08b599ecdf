"""``mtf-layout``: how should I shard this model on this hardware, and what
will it cost per device?

Subcommands (``mtf-layout <cmd> --help`` for each):

* ``solve``: the optimal layout of a model on a mesh (or device count) and
  topology, under an objective and a per-device memory budget;
* ``compare``: several layouts (rules strings and ``auto``) side by side;
* ``report``: the full cost report of one layout (per op, axis, category);
* ``mesh``: every mesh shape of N devices that embeds in the topology,
  ranked, each with its optimal layout;
* ``pareto``: the memory-versus-step-time front;
* ``topologies``: the preset topologies and their numbers;
* ``explain``: why each rule was chosen, and the cost of dropping it.

Models are zoo presets with overrides (``--model transformer --set
layers=96,d_model=12288,heads=96,batch=1536``) or ``path/to/file.py:fn``
returning ``(graph, outputs)``.  ``--format table|json|csv`` (JSON schema:
``docs/cli.md``); ``--plot out.png``.

Exit codes: 0 success, 2 bad input, 3 no layout fits the memory budget,
4 the solver found no layout in time, 1 an internal error.  Every error is
one ``error:`` line and one ``hint:`` line on stderr, never a traceback
(``--debug`` shows it).

Solving never imports TensorFlow.

Example:
  $ mtf-layout solve --model transformer --topology tpu-v5e-16x16
"""

# OR-Tools first: it must be loaded before TensorFlow in any process.
from ortools.sat.python import cp_model  # noqa: F401  isort:skip

import argparse
import sys

from mesh_tf.core.errors import LayoutError, MtfError, ParseError

PROG = "mtf-layout"
EXIT_OK, EXIT_INTERNAL, EXIT_INPUT, EXIT_INFEASIBLE, EXIT_SOLVER = (
    0, 1, 2, 3, 4)


class _Exit(Exception):
  def __init__(self, code):
    super().__init__(code)
    self.code = code


class _Parser(argparse.ArgumentParser):
  """argparse with a one-line error and a hint instead of the usage text."""

  def error(self, message):
    sys.stderr.write(f"{PROG}: error: {message}\n"
                     f"hint: run `{self.prog} --help` for the options\n")
    raise _Exit(EXIT_INPUT)


def _add_model_args(p, mesh=True, budget=True, solver=True, plot=True):
  g = p.add_argument_group("model and hardware")
  g.add_argument("--model", "-m", required=True,
                 help="zoo family or preset (transformer, mlp, moe, conv3d, "
                 "gpt2_small, gpt3_175b, ...) or path/to/file.py:function")
  g.add_argument("--set", "-s", action="append", default=[],
                 metavar="K=V[,K=V]",
                 help="override preset fields (or pass keyword arguments "
                 "to a model function), e.g. layers=2,d_model=512")
  g.add_argument("--train", action="store_true",
                 help="lay out a training step (backward pass and Adam "
                 "update) instead of the forward pass")
  g.add_argument("--topology", "-t", default="tpu-v5e-16x16",
                 help="preset topology (see `mtf-layout topologies`); "
                 "default %(default)s")
  if mesh:
    g.add_argument("--mesh",
                   help="mesh shape, e.g. 'data:4;model:4' (default: the "
                   "topology's own shape as data x model)")
  if budget:
    g.add_argument("--memory-budget", default="hbm", metavar="SIZE",
                   help="per-device budget: 16GB, 12GiB, 90%% (of HBM), "
                   "hbm (default) or none")
  if solver:
    s = p.add_argument_group("solver")
    s.add_argument("--objective", default="time",
                   choices=("time", "latency", "comm", "memory"),
                   help="minimise step time (default), the latency of a "
                   "one-token decoding step, communication time or peak "
                   "memory")
    s.add_argument("--time-limit", type=float, default=60.0, metavar="S",
                   help="CP-SAT time limit in seconds (default 60)")
    s.add_argument("--workers", type=int, default=2,
                   help="CP-SAT worker threads (default 2)")
    s.add_argument("--seed", type=int, default=0, help="CP-SAT seed")
  _add_output_args(p, plot)


def _add_output_args(p, plot=True):
  o = p.add_argument_group("output")
  o.add_argument("--format", "-f", default="table",
                 choices=("table", "json", "csv"),
                 help="table (default), json (docs/cli.md) or csv")
  if plot:
    o.add_argument("--plot", metavar="OUT.png",
                   help="also write the plots to this image file")
  o.add_argument("--debug", action="store_true",
                 help="show the traceback of an error")


def build_parser():
  """The argparse parser of ``mtf-layout``."""
  p = _Parser(prog=PROG, description=(
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
                         parser_class=_Parser)
  sub.required = True

  s = sub.add_parser("solve", help="the optimal layout and its costs",
                     description="Find the layout rules that minimise the "
                     "objective under the memory budget, and show its "
                     "per-device memory and communication per mesh axis.")
  _add_model_args(s)
  s.add_argument("--devices", "-n", type=int,
                 help="instead of --mesh: search every mesh shape of this "
                 "many devices and keep the best")
  s.add_argument("--max-axes", type=int, default=2,
                 help="with --devices: most mesh axes (default 2)")

  c = sub.add_parser("compare", help="several layouts side by side",
                     description="Cost several layouts on one model and "
                     "topology; the best value of each column is marked *.")
  _add_model_args(c)
  c.add_argument("--layout", "-l", action="append", required=True,
                 metavar="[NAME=]RULES[@MESH]",
                 help="a layout: rules such as 'batch:data;d_ff:model', "
                 "'auto' (the solver's), or '' (replicated); optionally "
                 "named and on its own mesh: dp=batch:data@data:16. Repeat.")

  r = sub.add_parser("report", help="the full cost report of one layout",
                     description="Per-op, per-axis and per-category costs "
                     "of one layout.")
  _add_model_args(r)
  r.add_argument("--layout", "-l", required=True, metavar="RULES",
                 help="layout rules, or 'auto'")
  r.add_argument("--top", type=int, default=12,
                 help="ops shown in the table (default 12; JSON and CSV "
                 "have all)")
  r.add_argument("--view", default="ops",
                 choices=("ops", "axes", "memory", "collectives",
                          "variables"),
                 help="the table --format csv writes (default ops)")

  m = sub.add_parser("mesh", help="rank every mesh shape of N devices",
                     description="Solve every mesh shape of N devices that "
                     "embeds in the topology and rank them.")
  _add_model_args(m, mesh=False)
  m.add_argument("--devices", "-n", type=int,
                 help="number of devices (default: the topology's chips)")
  m.add_argument("--max-axes", type=int, default=2,
                 help="most mesh axes (default 2)")

  pa = sub.add_parser("pareto", help="the memory-vs-step-time front",
                      description="Every layout that is fastest for some "
                      "memory budget, from fastest to leanest.")
  _add_model_args(pa, budget=False)
  pa.add_argument("--max-points", type=int, default=12,
                  help="most points (default 12)")

  t = sub.add_parser("topologies", help="list the preset topologies",
                     description="The preset topologies: chips, links and "
                     "their numbers.")
  _add_output_args(t, plot=False)

  e = sub.add_parser("explain", help="why each rule was chosen",
                     description="For each rule of a layout (default: the "
                     "solver's), the step time and memory without it and "
                     "with the dim on its runner-up axis.")
  _add_model_args(e)
  e.add_argument("--layout", "-l", default="auto", metavar="RULES",
                 help="layout rules to explain (default auto)")
  return p


def _hint_for(err):
  """A hint line for a library error that has none of its own."""
  import costmodels
  from autolayout.errors import SolverError
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


def _fail(message, hint, code):
  message = " ".join(str(message).split())
  sys.stderr.write(f"{PROG}: error: {message}\n")
  if hint:
    sys.stderr.write(f"hint: {' '.join(str(hint).split())}\n")
  return code


def main(argv=None):
  """Runs ``mtf-layout`` with ``argv`` (default ``sys.argv[1:]``).

  Returns:
    The exit code (0 on success; see the module docstring).
  """
  debug = "--debug" in (sys.argv[1:] if argv is None else argv)
  try:
    args = build_parser().parse_args(argv)
  except _Exit as e:
    return e.code
  except SystemExit as e:  # --help
    return int(e.code or 0)
  import matplotlib
  matplotlib.use("Agg")
  from autolayout import cli_commands
  from autolayout.cli_models import CliInputError
  from autolayout.errors import InfeasibleLayoutError, SolverError
  try:
    return cli_commands.run(args)
  except CliInputError as e:
    if debug:
      raise
    return _fail(e, e.hint, EXIT_INPUT)
  except InfeasibleLayoutError as e:
    if debug:
      raise
    return _fail(*cli_commands.infeasible_message(e, args), EXIT_INFEASIBLE)
  except SolverError as e:
    if debug:
      raise
    return _fail(e, _hint_for(e), EXIT_SOLVER)
  except MtfError as e:
    if debug:
      raise
    return _fail(e, _hint_for(e), EXIT_INPUT)
  except BrokenPipeError:
    return EXIT_OK
  except KeyboardInterrupt:
    return _fail("interrupted", None, 130)
  except Exception as e:  # pylint: disable=broad-except
    if debug:
      raise
    return _fail(f"internal error: {type(e).__name__}: {e}",
                 "rerun with --debug for the traceback and report it",
                 EXIT_INTERNAL)


if __name__ == "__main__":
  sys.exit(main())
