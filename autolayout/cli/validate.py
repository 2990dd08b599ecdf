"""Every option of ``mtf-layout``, checked once, right after parsing and
before any work: counts, sizes, time limits and worker counts for range and
overflow, options that do not apply to the chosen command or model, and
output paths.

The ranges are the API's (:mod:`autolayout.arguments`), so a value the CLI
accepts is one the library accepts; the messages use the CLI's option names
and each hint gives a valid value.
"""

import math
import os

from autolayout import arguments as api
from autolayout.cli.errors import CliInputError
from costmodels import arguments as cm_args

PLOT_SUFFIXES = (".png", ".svg", ".pdf")
MAX_TOP = 100_000


def _in_range(value, option, low, high, hint):
  if not low <= value <= high:
    raise CliInputError(
        f"{option} {value} is out of range: it takes {low} to {high}",
        hint=hint)


def _int_range(args, attr, option, low, high, example):
  value = getattr(args, attr, None)
  if value is not None:
    _in_range(value, option, low, high, f"use e.g. {option} {example}")


def check_time_limit(args):
  value = getattr(args, "time_limit", None)
  if value is None:
    return
  if not (math.isfinite(value) and 0 < value <= api.MAX_TIME_LIMIT_S):
    raise CliInputError(
        f"--time-limit {value:g} is out of range: it takes more than 0 and "
        f"at most {api.MAX_TIME_LIMIT_S:g} seconds",
        hint=f"use e.g. --time-limit {api.DEFAULTS.time_limit_s:g}")


def check_plot_path(args):
  """``--plot``: a file name with a known suffix in an existing, writable
  directory (checked before any work, so a bad path fails at once)."""
  path = getattr(args, "plot", None)
  if path is None:
    return
  hint = "give --plot a writable file ending in .png, .svg or .pdf, e.g. " \
         "--plot layout.png"
  if not path or os.path.isdir(path):
    raise CliInputError(f"--plot {cm_args.echo(path)} is a directory, not "
                        "an image file", hint=hint)
  if os.path.splitext(path)[1].lower() not in PLOT_SUFFIXES:
    raise CliInputError(
        f"--plot {cm_args.echo(path)} does not end in .png, .svg or .pdf",
        hint=hint)
  directory = os.path.dirname(os.path.abspath(path))
  if not os.path.isdir(directory):
    raise CliInputError(
        f"cannot write the plot to {cm_args.echo(path)}: directory "
        f"{cm_args.echo(directory)} does not exist", hint=hint)
  if not os.access(directory, os.W_OK):
    raise CliInputError(
        f"cannot write the plot to {cm_args.echo(path)}: directory "
        f"{cm_args.echo(directory)} is not writable", hint=hint)


def check_output_file(args, attr, option, example):
  """An output file (``--save``, ``--output``): not a directory, in an
  existing, writable directory; checked before any work."""
  path = getattr(args, attr, None)
  if path is None:
    return
  hint = f"give {option} a writable file, e.g. {option} {example}"
  if not path or os.path.isdir(path):
    raise CliInputError(f"{option} {cm_args.echo(path)} is a directory, not "
                        "a file", hint=hint)
  directory = os.path.dirname(os.path.abspath(path))
  if not os.path.isdir(directory):
    raise CliInputError(
        f"cannot write {option} {cm_args.echo(path)}: directory "
        f"{cm_args.echo(directory)} does not exist", hint=hint)
  if not os.access(directory, os.W_OK):
    raise CliInputError(
        f"cannot write {option} {cm_args.echo(path)}: directory "
        f"{cm_args.echo(directory)} is not writable", hint=hint)


def check_applicable(args):
  """Options that do not apply to the chosen command or model."""
  command = args.command
  model = getattr(args, "model", "") or ""
  if command == "solve" and args.max_axes is not None and (
      args.devices is None):
    raise CliInputError(
        "--max-axes applies only with --devices (the mesh-shape search); "
        "with --mesh or the default mesh there is nothing to search",
        hint="add --devices N, e.g. --devices 256 --max-axes 2, or drop "
        "--max-axes")
  if command == "solve" and args.devices is not None and args.mesh:
    raise CliInputError("give either --mesh or --devices, not both",
                        hint="--devices searches every mesh shape; e.g. "
                        "drop --mesh")
  if getattr(args, "mesh", None) is not None and not args.mesh.strip():
    raise CliInputError("--mesh '' names no mesh axes",
                        hint="give the mesh as name:size pairs, e.g. "
                        "--mesh 'data:4;model:4', or drop --mesh for the "
                        "topology's own shape")
  if getattr(args, "objective", None) == "latency":
    if args.train:
      raise CliInputError(
          "--objective latency is the per-token latency of a decoding step, "
          "but --train lays out a training step",
          hint="use --objective time (the step time) with --train, or drop "
          "--train")
    if not model.startswith("decode:") and ".py" not in model:
      raise CliInputError(
          f"--objective latency applies to decoding steps, and "
          f"{cm_args.echo(model, 80)} is not one",
          hint=f"use --model decode:{model or 'gpt2_small'} for the "
          "per-token latency, or --objective time")


# The training decisions' flags: N|auto, and the range of N.
MAX_DECISION = 1_000_000
DECISION_FLAGS = (("zero_stage", "--zero-stage", 0, 3, 3),
                  ("recompute", "--recompute", 0, MAX_DECISION, 0),
                  ("microbatches", "--microbatches", 1, MAX_DECISION, 2))


def fixed_decisions(args):
  """``--zero-stage``, ``--recompute``, ``--microbatches``: each ``auto``
  or a value of its family (an integer in range; ``--zero-stage`` also a
  stage per variable group), parsed here once, by its family
  (:mod:`autolayout.training.families`), and only where a training plan is
  searched.

  Returns:
    ``{family name: typed value}`` of the decisions given (not ``auto``).

  Raises:
    CliInputError: naming the flag and a valid value.
  """
  from autolayout.training.families import family
  from autolayout.training.family import DecisionValueError
  fixed, given = {}, []
  for attr, option, low, high, example in DECISION_FLAGS:
    text = getattr(args, attr, None)
    if text is None or str(text).strip().lower() == "auto":
      continue
    given.append(option)
    fam = family(attr)
    try:
      value = fam.parse(text)
      if isinstance(value, int):
        _in_range(value, option, low, high,
                  f"use e.g. {option} {example}, or {option} auto")
      fixed[attr] = fam.check(value)
    except DecisionValueError as e:
      raise CliInputError(e.problem, hint=e.hint) from None
  if given and (getattr(args, "layout_only", False)
                or getattr(args, "train", True) is False):
    raise CliInputError(
        f"{given[0]} is a training decision, which --layout-only and "
        "--forward do not search",
        hint=f"drop {given[0]}, or drop --layout-only / --forward")
  return fixed


def check_options(args):
  """Checks every parsed option; raises CliInputError (exit 2) for the
  first problem, naming the option and a valid value."""
  _int_range(args, "workers", "--workers", 1, api.MAX_NUM_WORKERS,
             api.DEFAULTS.num_workers)
  _int_range(args, "seed", "--seed", 0, api.MAX_SEED, api.DEFAULTS.seed)
  _int_range(args, "max_axes", "--max-axes", 1, api.MAX_AXES,
             api.DEFAULTS.max_axes)
  _int_range(args, "max_points", "--max-points", 1, api.MAX_POINTS,
             api.DEFAULTS.max_points)
  _int_range(args, "devices", "--devices", 1, api.MAX_DEVICES, 256)
  _int_range(args, "top", "--top", 1, MAX_TOP, 12)
  check_time_limit(args)
  # The training decisions given, parsed once for the command to use.
  args.fixed_decisions = fixed_decisions(args)
  check_applicable(args)
  check_plot_path(args)
  check_output_file(args, "save", "--save", "plan.json")
  check_output_file(args, "output", "--output", "specs.json")
