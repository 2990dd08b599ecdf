"""Plan files on the ``mtf-layout`` command line: ``solve --save`` and
``--hint``, ``-l @plan.json`` wherever layouts are taken, and plan errors as
the CLI's two lines (``error:`` and ``hint:``)."""

import costmodels
from autolayout.plans import decisions as plan_decisions
from autolayout.plans import file as plan_file
from autolayout.errors import PlanError, PlanFormatError, PlanMismatchError
from autolayout.cli import inputs
from autolayout.cli.errors import CliInputError
from autolayout.cli.models import LoadedModel, load_model, parse_overrides

FORMAT_HINT = ("write plans with `mtf-layout solve ... --save plan.json`; "
               "docs/plan_files.md has the format")


def read(path, model=None):
  """The plan in ``path``, checked against ``model``'s graph if given (a
  training plan is checked against ``model``'s step rebuilt for the plan's
  decisions).

  Raises:
    CliInputError: for a malformed file, or a plan for another model or a
      graph that changed (the message names what changed).
  """
  try:
    plan = plan_decisions.load_plan(path)
    if model is not None and plan.decisions and model.decisions is None:
      plan_decisions.check_rebuilt(plan, plan_decisions.rebuild(
          plan, model.config), f"-m {model.name} built for its decisions")
    elif model is not None:
      plan_file.load_plan(path, model.graph)
    return plan
  except PlanFormatError as e:
    raise CliInputError(str(e), hint=FORMAT_HINT) from None
  except PlanMismatchError as e:
    what = f"-m {model.name}" if model is not None else "the model"
    raise CliInputError(
        str(e), hint=f"solve {what} again; `mtf-layout solve ... --hint "
        f"{path}` starts from the old plan") from None


def ref_path(text):
  """The file of a ``@plan.json`` layout argument."""
  path = text.strip()[1:]
  if not path:
    raise CliInputError("'@' needs a plan file after it",
                        hint="write -l @plan.json")
  return path


def model_for(plan, path, args):
  """The model whose layout ``plan`` is, as a :class:`LoadedModel`: the
  plan's own question (its zoo model, overrides and training or forward
  pass) unless ``--model``, ``--set``, ``--train`` or ``--forward`` say
  otherwise; a training plan's step is rebuilt for its decisions.

  Raises:
    CliInputError: if the plan names no model and ``--model`` is not given,
      or the model given (or its step for the plan's decisions) is not the
      plan's (naming what changed).
  """
  src = plan_decisions.source_of(plan) or {}
  name = args.model or src.get("model")
  if name is None:
    raise CliInputError(f"plan {path!r} does not say which model it is for "
                        "(it has no model.source)",
                        hint="give --model (e.g. --model transformer_tiny)")
  overrides = (parse_overrides(args.set) if args.set or args.model
               else dict(src.get("overrides") or {}))
  if not plan.decisions:
    train = args.train if args.train is not None else src.get("train")
    model = load_model(name, overrides, train)
    read(path, model)
    return model
  if args.train is False:
    raise CliInputError(f"plan {path!r} is a training step's (it holds "
                        "training decisions), not a forward pass's",
                        hint="drop --forward")
  base = load_model(name, overrides, False)
  if base.config is None:
    raise CliInputError(f"plan {path!r} holds training decisions, which "
                        "rebuild a zoo model's step; {name!r} is not one",
                        hint="give --model the zoo model the plan is for")
  try:
    built = plan_decisions.rebuild(plan, base.config)
    plan_decisions.check_rebuilt(plan, built, f"-m {name} built for its "
                                 "decisions")
  except PlanFormatError as e:
    raise CliInputError(str(e), hint=FORMAT_HINT) from None
  except PlanMismatchError as e:
    raise CliInputError(
        str(e), hint=f"solve -m {name} again; `mtf-layout solve ... --hint "
        f"{path}` starts from the old plan") from None
  from autolayout.training import zero  # pylint: disable=g-import-not-at-top
  d = built.decisions
  desc = (f"{name}: {len(built.graph.operations)} ops, training step (Adam) for the plan's decisions: "
          f"{d.param_dtype}, ZeRO {zero.describe(d.zero_stage)}, "
          f"recompute {d.recompute}, microbatches {d.microbatches}")
  return LoadedModel(built.graph, None, name, desc, base.config, overrides,
                     True, built.microbatches, d)


def take_plans_model(args, plan, example="transformer_tiny"):
  """Sets ``--model`` and ``--set`` to ``plan``'s zoo model and overrides;
  returns the plan's model source.

  Raises:
    CliInputError: if the plan does not say which model it is for.
  """
  src = plan_decisions.source_of(plan) or {}
  if not src.get("model"):
    raise CliInputError("the hint plan does not say which model it is for "
                        "(it has no model.source)",
                        hint=f"give --model (e.g. --model {example})")
  args.model = src["model"]
  args.set = [f"{k}={v}" for k, v in (src.get("overrides") or {}).items()]
  return src


def ask_plans_question(args, plan):
  """Fills the options the user left out from ``plan``'s own question: its
  model and overrides, training or forward pass, topology and mesh (for
  ``solve --hint plan.json`` given without ``--model``).

  Raises:
    CliInputError: if the plan does not say which model it is for.
  """
  src = take_plans_model(args, plan)
  if args.train is None:
    # A forward plan's question is the forward pass; a plan with training
    # decisions searched them (--train); any other, the step as built.
    args.train = (False if not src.get("train", True) else
                  True if plan.decisions else None)
  if args.topology is None and plan.topology_preset:
    args.topology = plan.topology_preset
  if not getattr(args, "mesh", None) and getattr(args, "devices",
                                                 None) is None:
    args.mesh = plan.mesh_shape.text


def budget_and_objective(args, plan=None):
  """Resolves ``--memory-budget`` and ``--objective`` left out: ``plan``'s
  own (the budget and objective it was solved with), else ``hbm`` and
  ``time``."""
  solved = plan is not None and plan.solver.status != "given"
  if hasattr(args, "memory_budget") and args.memory_budget is None:
    b = plan.solver.memory_budget_bytes if solved else None
    args.memory_budget = "hbm" if not solved else (
        "none" if b is None else str(b))
  if hasattr(args, "objective") and args.objective is None:
    mine = plan.solver.objective if solved else None
    args.objective = mine if mine in ("time", "latency", "comm",
                                      "memory") else "time"


def is_ref(text):
  """Whether a layout argument names a plan file (``@plan.json``)."""
  return text.strip().startswith("@")


def layout(text, model, topology):
  """``(rules, mesh, plan)`` of a ``@plan.json`` layout argument, checked
  against the model and the topology."""
  path = ref_path(text)
  plan = read(path, model)
  try:
    costmodels.map_mesh(topology, plan.mesh_shape)
  except costmodels.TopologyError:
    raise CliInputError(
        f"plan {path!r} is for mesh {plan.mesh_shape.text} on "
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
  """The model a plan's ``source`` names, rebuilt for the plan's question
  and decisions (None if it has no source)."""
  if plan.model.source is None:
    return None
  import argparse  # pylint: disable=g-import-not-at-top
  return model_for(plan, path, argparse.Namespace(model=None, set=[],
                                                  train=None))


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
        f"{mesh.text} of plan {text.strip()[1:]!r}",
        hint="drop --mesh to use the plan's mesh")
  args.resolved_mesh = mesh.text
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
