"""Plan files on the ``mtf-layout`` command line: ``solve --save`` and
``--hint``, ``-l @plan.json`` wherever layouts are taken, and plan errors as
the CLI's two lines (``error:`` and ``hint:``)."""

import costmodels
from autolayout.plans import file as plan_file
from autolayout.errors import PlanError, PlanFormatError, PlanMismatchError
from autolayout.cli import inputs
from autolayout.cli.errors import CliInputError
from autolayout.cli.models import load_model, parse_overrides

FORMAT_HINT = ("write plans with `mtf-layout solve ... --save plan.json`; "
               "docs/plan_files.md has the format")


def read(path, model=None):
  """The plan in ``path``, checked against ``model``'s graph if given.

  Raises:
    CliInputError: for a malformed file, or a plan for another model or a
      graph that changed (the message names what changed).
  """
  try:
    return plan_file.load_plan(path, model.graph if model else None)
  except PlanFormatError as e:
    raise CliInputError(str(e), hint=FORMAT_HINT) from None
  except PlanMismatchError as e:
    what = f"-m {model.name}" if model is not None else "the model"
    raise CliInputError(
        str(e), hint=f"solve {what} again; `mtf-layout solve ... --hint "
        f"{path}` starts from the old plan") from None


def is_ref(text):
  """Whether a layout argument names a plan file (``@plan.json``)."""
  return text.strip().startswith("@")


def layout(text, model, topology):
  """``(rules, mesh, plan)`` of a ``@plan.json`` layout argument, checked
  against the model and the topology."""
  path = text.strip()[1:]
  if not path:
    raise CliInputError("'@' needs a plan file after it",
                        hint="write -l @plan.json")
  plan = read(path, model)
  try:
    costmodels.map_mesh(topology, plan.mesh_shape)
  except costmodels.TopologyError:
    raise CliInputError(
        f"plan {path!r} is for mesh {inputs.mesh_str(plan.mesh_shape)} on "
        f"{plan.topology.name}, which does not fit topology {topology.name}",
        hint=f"add -t {plan.topology_preset or plan.topology.name} (the "
        "plan's topology) or use a plan for this one") from None
  return plan.rules, plan.mesh_shape, plan


def source(args, model=None):
  """How the CLI built the model, recorded in saved plans so that ``diff``
  can rebuild it (``train``: the question it answered, the default's
  included)."""
  train = model.train if model is not None else bool(args.train)
  return {"model": args.model, "overrides": parse_overrides(args.set),
          "train": bool(train)}


def model_of(plan, path):
  """The model a plan's ``source`` names, rebuilt (None if it has none)."""
  src = plan.model.source
  if src is None:
    return None
  import json  # pylint: disable=g-import-not-at-top
  src = json.loads(src)
  try:
    return load_model(src["model"], src.get("overrides") or {},
                      bool(src.get("train")))
  except (KeyError, TypeError) as e:
    raise CliInputError(f"plan file {path!r} has a malformed model.source: "
                        f"{e}", hint=FORMAT_HINT) from None


def save(result, args, model):
  """Writes ``result`` to ``args.save`` as a plan file; returns the Plan."""
  try:
    return result.save(args.save, name=model.name, source=source(args, model))
  except PlanError as e:
    raise CliInputError(str(e), hint="give --save a writable path, e.g. "
                        "--save plan.json") from None


def solve_record(args, result):
  """The JSON keys ``solve`` adds for ``--save`` and ``--hint``."""
  rec = {}
  if getattr(args, "save", None):
    rec["plan_file"] = args.save
  h = result.hint_report
  if h is not None:
    rec["hint"] = {
        "file": args.hint, "hinted": str(h.hinted), "kept": str(h.kept),
        "skipped": [{"dim": d, "axis": a, "why": w} for d, a, w in h.skipped],
        "changes": None if h.changes is None else h.changes.as_dict(),
        "why": list(h.why)}
  return rec


def layout_arg(text, model, topology, args):
  """``(rules, mesh)`` of a ``-l @plan.json`` argument (None for any other
  layout text).  The plan's mesh is used; a ``--mesh`` that differs from it
  is an error rather than silently ignored."""
  if not is_ref(text):
    return None
  rules, mesh, _ = layout(text, model, topology)
  given = getattr(args, "mesh", None)
  if given and inputs.parse_mesh(given, topology) != mesh:
    raise CliInputError(
        f"--mesh {given!r} differs from the mesh "
        f"{inputs.mesh_str(mesh)} of plan {text.strip()[1:]!r}",
        hint="drop --mesh to use the plan's mesh")
  args.resolved_mesh = inputs.mesh_str(mesh)
  return rules, mesh


def layout_ref(spec):
  """``(name or None, path)`` of a ``compare`` layout ``[NAME=]@plan.json``,
  or None for any other spec."""
  name, sep, rest = spec.partition("=")
  if sep and rest.strip().startswith("@") and not name.strip().startswith(
      "@"):
    return name.strip() or None, rest.strip()[1:]
  if spec.strip().startswith("@"):
    return None, spec.strip()[1:]
  return None
