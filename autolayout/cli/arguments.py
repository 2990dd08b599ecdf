"""The options of ``mtf-layout`` that several subcommands share, and the
argparse parser that fails with one line and a hint."""

import argparse
import re

from autolayout.arguments import DEFAULTS
from autolayout.cli.errors import EXIT_INPUT

# A valid value of each option, for the hint of a parse error.
EXAMPLES = {
    "--model": "--model transformer", "-m": "--model transformer",
    "--set": "--set layers=2,d_model=512", "-s": "--set layers=2",
    "--topology": f"--topology {DEFAULTS.topology}",
    "-t": f"--topology {DEFAULTS.topology}",
    "--mesh": "--mesh 'data:4;model:4'",
    "--memory-budget": "--memory-budget 16GB",
    "--objective": "--objective time",
    "--time-limit": f"--time-limit {DEFAULTS.time_limit_s:g}",
    "--workers": f"--workers {DEFAULTS.num_workers}",
    "--seed": f"--seed {DEFAULTS.seed}",
    "--format": "--format json", "-f": "--format json",
    "--plot": "--plot layout.png", "--devices": "--devices 256",
    "-n": "--devices 256", "--max-axes": f"--max-axes {DEFAULTS.max_axes}",
    "--max-points": f"--max-points {DEFAULTS.max_points}",
    "--layout": "--layout 'batch:data;d_ff:model'",
    "-l": "--layout 'batch:data;d_ff:model'", "--top": "--top 12",
    "--view": "--view ops",
}


class ParserExit(Exception):
  """Raised by :class:`Parser` on bad arguments: the one-line ``message``,
  its ``hint`` and the exit ``code``."""

  def __init__(self, code, message="", hint=None):
    super().__init__(message)
    self.code, self.message, self.hint = code, message, hint


class Parser(argparse.ArgumentParser):
  """argparse with a one-line error and a hint (naming the option and a
  valid value) instead of the usage text; ``main`` writes them."""

  def error(self, message):
    options = re.findall(r"(?<![\w-])(--?[a-z][a-z-]*)", message)
    known = [o for o in options if o in EXAMPLES]
    if known:
      hint = (f"e.g. {EXAMPLES[known[0]]}; `{self.prog} --help` lists the "
              "options")
    else:
      hint = (f"run `{self.prog} --help` for the options, e.g. `mtf-layout "
              "solve --model transformer`")
    raise ParserExit(EXIT_INPUT, message, hint)


def add_model_args(p, mesh=True, budget=True, solver=True, plot=True):
  """The model, hardware, solver and output options most commands take."""
  g = p.add_argument_group("model and hardware")
  g.add_argument("--model", "-m",
                 help="(required unless -l @PLAN.json gives it) zoo family or preset (transformer, mlp, moe, conv3d, "
                 "gpt2_small, gpt3_175b, ...) or path/to/file.py:function")
  g.add_argument("--set", "-s", action="append", default=[],
                 metavar="K=V[,K=V]",
                 help="override preset fields (or pass keyword arguments "
                 "to a model function), e.g. layers=2,d_model=512")
  q = g.add_mutually_exclusive_group()
  q.add_argument("--train", dest="train", action="store_const", const=True,
                 default=None,
                 help="lay out the training step: forward, backward and "
                 "Adam update (the default, except for decode: models)")
  q.add_argument("--forward", dest="train", action="store_const",
                 const=False,
                 help="lay out the forward pass only (inference)")
  g.add_argument("--no-overlap", dest="overlap", action="store_false",
                 help="expose every collective (the conservative figure); "
                 "by default gradient syncs run under the rest of the "
                 "backward pass")
  g.add_argument("--topology", "-t", default=None,
                 help="preset topology (see `mtf-layout topologies`) or a "
                 "topology file (FILE.json, from `mtf-layout calibrate`); "
                 f"default: a plan's own, else {DEFAULTS.topology}")
  if mesh:
    g.add_argument("--mesh",
                   help="mesh shape, e.g. 'data:4;model:4' (default: the "
                   "topology's own shape as data x model)")
  if budget:
    g.add_argument("--memory-budget", default=None, metavar="SIZE",
                   help="per-device budget: 16GB, 12GiB, 90%% (of usable "
                   "HBM), hbm (default: a plan's own, else the usable "
                   "HBM) or none")
    g.add_argument("--memory-reserve", default=None, metavar="FRAC",
                   help="part of the chip's HBM kept free for the runtime "
                   "and fragmentation, e.g. 5%% (default) or 0.1")
  if solver:
    s = p.add_argument_group("solver")
    s.add_argument("--objective", default=None,
                   choices=("time", "latency", "comm", "memory"),
                   help="minimise step time (default: a plan's own, else "
                   "time), the latency of a "
                   "one-token decoding step, communication time or peak "
                   "memory")
    s.add_argument("--max-axes-per-dim", type=int, default=1, metavar="N",
                   help="let one dim split over up to N mesh axes, written "
                   "batch:x+y (data parallelism over a whole 2-D slice on "
                   "its own mesh); default 1: one axis per dim")
    s.add_argument("--time-limit", type=float, default=60.0, metavar="S",
                   help="CP-SAT time limit in seconds (default 60)")
    s.add_argument("--workers", type=int, default=2,
                   help="CP-SAT worker threads (default 2)")
    s.add_argument("--seed", type=int, default=0, help="CP-SAT seed")
  add_output_args(p, plot)


def add_output_args(p, plot=True):
  """``--format``, ``--plot`` and ``--debug``."""
  o = p.add_argument_group("output")
  o.add_argument("--format", "-f", default="table",
                 choices=("table", "json", "csv"),
                 help="table (default), json (docs/cli.md) or csv")
  if plot:
    o.add_argument("--plot", metavar="OUT.png",
                   help="also write the plots to this image file")
  o.add_argument("--debug", action="store_true",
                 help="show the traceback of an error")
