"""``mtf-layout export plan.json --to jax|torch|dtensor [-o FILE]``."""

import json
import os
import sys
import tempfile

from autolayout.plans import export as export_lib
from autolayout.plans import plan as plan_lib
from autolayout.errors import ExportError
from autolayout.cli import plans
from autolayout.cli.context import Answer, Command
from autolayout.cli.errors import CliInputError


def _arguments(p):
  p.add_argument("plan", metavar="PLAN.json", help="a plan file")
  p.add_argument("--to", required=True, choices=export_lib.FORMATS,
                 help="jax (PartitionSpecs), torch (DTensor placements) or "
                 "dtensor (TF DTensor layouts); docs/plan_files.md")
  p.add_argument("--output", "-o", metavar="FILE",
                 help="write the JSON here (default: stdout)")
  p.add_argument("--rename", metavar="MAP.json",
                 help="a JSON object {mtf name: framework name} (null drops "
                 "a tensor)")
  p.add_argument("--debug", action="store_true",
                 help="show the traceback of an error")
  p.set_defaults(format="table")


def _rename(path):
  if path is None:
    return None
  try:
    with open(path, encoding="utf-8") as f:
      mapping = json.load(f)
  except (OSError, json.JSONDecodeError) as e:
    raise CliInputError(f"cannot read --rename {path!r}: {e}",
                        hint="give a JSON object such as "
                        '{"embedding/weights": "wte"}') from None
  if not isinstance(mapping, dict):
    raise CliInputError(f"--rename {path!r} holds a "
                        f"{type(mapping).__name__}, not a JSON object",
                        hint='write {"mtf name": "framework name", ...}')
  return mapping


def _write(path, text):
  folder = os.path.dirname(os.path.abspath(path))
  try:
    fd, tmp = tempfile.mkstemp(prefix=".export-", dir=folder)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
      f.write(text)
    os.replace(tmp, path)
  except OSError as e:
    raise CliInputError(f"cannot write {path!r}: {e}",
                        hint="give -o a writable path") from None


def _run(args, ctx):
  plan = plans.read(args.plan)
  try:
    spec = export_lib.export(plan, args.to, rename=_rename(args.rename))
  except ExportError as e:
    raise CliInputError(str(e), hint="export another format, or change the "
                        "plan's rules") from None
  text = plan_lib.dumps(spec)

  def table(ctx):
    if args.output:
      _write(args.output, text)
      print(f"wrote {args.output}: {args.to} shardings of "
            f"{len(spec['params'])} params of {plan.model.name}",
            file=sys.stderr)
    else:
      ctx.stream.write(text)

  return Answer(json=lambda: spec, csv=lambda: None, table=table)


COMMAND = Command(
    "export", help="a plan file as JAX, PyTorch or TF DTensor shardings",
    description="Write a plan's shardings in another framework's terms: "
    "JAX PartitionSpecs (params and named activations), PyTorch DTensor "
    "placements (one per mesh dim) or TF DTensor layouts, as JSON.",
    add_arguments=_arguments, run=_run, timed=False)
