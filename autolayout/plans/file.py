"""Reading plan files: :func:`load_plan` and :func:`plan_from_json_dict`.

Every field is checked for presence and type, and every error names the file
and the field (``plan file 'p.json': missing field 'model.fingerprint'``).
With a graph, the plan is also checked against it (see
:mod:`autolayout.plans.identity`), so a stale plan is never applied silently.
The schema is in ``docs/plan_files.md``.
"""

import json
import math
import os

import costmodels
from costmodels import topology_json
from mesh_tf.core import mesh_shape as mesh_lib
from mesh_tf.core.errors import MtfError
from mesh_tf.core.layout import LayoutRules
from autolayout.plans import decision_codec
from autolayout.plans import identity as plan_identity
from autolayout.errors import PlanFormatError, PlanMismatchError
from autolayout.plans.plan import (SCHEMA, SCHEMA_VERSION, Plan,
                                   PredictedCosts, SolverInfo,
                                   training_decisions, version)


class _Reader:
  """Typed access to a parsed plan file, with errors naming the field."""

  def __init__(self, where):
    self.where = where

  def fail(self, message):
    raise PlanFormatError(f"plan file {self.where}: {message}")

  def get(self, obj, key, types, path, optional=False):
    if not isinstance(obj, dict):
      self.fail(f"{path or 'the top level'} must be a JSON object")
    if key not in obj:
      if optional:
        return None
      self.fail(f"missing field {(path + '.' if path else '') + key!r}")
    value = obj[key]
    if optional and value is None:
      return None
    ok = isinstance(value, types) and not (
        isinstance(value, bool) and bool not in _as_tuple(types))
    if not ok:
      names = "/".join(t.__name__ for t in _as_tuple(types))
      self.fail(f"field {(path + '.' if path else '') + key!r} must be "
                f"{names}, got {value!r}"[:300])
    return value


def _as_tuple(types):
  return types if isinstance(types, tuple) else (types,)


_NUM = (int, float)


def _entries(rd, obj, path, dims, with_trainable):
  out = []
  for name, e in obj.items():
    p = f"{path}.{name}"
    names = rd.get(e, "dims", list, p)
    shape = rd.get(e, "shape", list, p)
    if len(names) != len(shape) or not all(
        isinstance(n, str) for n in names) or not all(
            isinstance(s, int) and not isinstance(s, bool) for s in shape):
      rd.fail(f"{p} needs 'dims' (names) and 'shape' (integers) of the same "
              "length")
    for n, s in zip(names, shape):
      known = dims.get(n)
      sizes = known if isinstance(known, list) else [known]
      if s not in sizes:
        rd.fail(f"{p} has dim {n}={s}, but model.dims gives {n}={known}")
    trainable = (rd.get(e, "trainable", bool, p) if with_trainable else None)
    out.append(plan_identity.TensorEntry(
        name, tuple(zip(names, shape)), rd.get(e, "dtype", str, p),
        trainable))
  return tuple(out)


SCHEMA_FILE = os.path.join(os.path.dirname(__file__), "plan_file.schema.json")


def json_schema():
  """The published JSON Schema of plan files (``docs/plan_file.schema.json``
  is the same file), as a dict (read afresh: no module cache)."""
  with open(SCHEMA_FILE, encoding="utf-8") as f:
    return json.load(f)


def schema_errors(data):
  """The plan file ``data``'s JSON Schema violations as messages naming the
  field and the fix, most relevant first (empty when it conforms)."""
  import jsonschema  # pylint: disable=g-import-not-at-top
  validator = jsonschema.Draft202012Validator(json_schema())
  errors = list(validator.iter_errors(data))
  if not errors:
    return []
  best = jsonschema.exceptions.best_match(errors)
  return [_schema_message(best)] + [_schema_message(e) for e in errors
                                    if e is not best]


def _schema_message(err):
  path = ".".join(str(p) for p in err.absolute_path)
  if err.validator == "required":
    missing = err.message.split("'")[1]
    return (f"missing field {(path + '.' if path else '') + missing!r}; add "
            "it (docs/plan_file.schema.json lists every field)")
  if err.validator == "type":
    want = err.validator_value
    want = "/".join(want) if isinstance(want, list) else want
    return (f"field {path!r} must be {want}, got {err.instance!r}"[:300]
            + "; write it as the schema says (docs/plan_file.schema.json)")
  if err.validator in ("minimum", "maximum"):
    return (f"field {path!r} is {err.instance!r}; it must be "
            f"{'>=' if err.validator == 'minimum' else '<='} "
            f"{err.validator_value}")
  if err.validator == "enum":
    return (f"field {path!r} is {err.instance!r}; use one of "
            f"{err.validator_value}")
  if err.validator == "additionalProperties":
    return (f"{path or 'the top level'} has a field the schema does not "
            f"know: {err.message}; remove it")
  return (f"field {path or 'the top level'!r} does not match the schema: "
          f"{err.message}"[:300] + " (docs/plan_file.schema.json)")


def plan_from_json_dict(data, where="<dict>"):
  """The :class:`Plan` of a parsed plan file.

  Raises:
    PlanFormatError: for a wrong format or schema version, a missing or
      mistyped field, rules naming a dim the model lacks or a mesh axis the
      mesh lacks, or a decision this version cannot apply.
  """
  rd = _Reader(where)
  if not isinstance(data, dict) or data.get("format") != SCHEMA:
    rd.fail(f"not a mesh-tf plan (its 'format' is not {SCHEMA!r}); write "
            "one with `mtf-layout solve --save` or LayoutResult.save")
  found = rd.get(data, "schema_version", int, "")
  if found != SCHEMA_VERSION:
    rd.fail(f"schema_version {found} is not {SCHEMA_VERSION}, the one "
            f"mesh-tf {version()} reads; "
            + ("upgrade mesh-tf" if found > SCHEMA_VERSION else
               "solve the model again to write a current plan"))
  decisions = data.get("decisions")
  if isinstance(decisions, dict):
    # A family from a newer mesh-tf is named as such, before the schema
    # (which knows this version's families only) calls it unknown.
    decision_codec.read_decisions(decisions, f"plan file {rd.where}")
  errors = schema_errors(data)
  if errors:
    rd.fail(errors[0])
  m = rd.get(data, "model", dict, "")
  dims = rd.get(m, "dims", dict, "model")
  dim_pairs = []
  for n, s in dims.items():
    for size in (s if isinstance(s, list) else [s]):
      if isinstance(size, bool) or not isinstance(size, int) or size < 0:
        rd.fail(f"model.dims.{n} must be a non-negative integer, got {s!r}")
      dim_pairs.append((n, size))
  source = rd.get(m, "source", dict, "model", optional=True)
  ident = plan_identity.ModelIdentity(
      rd.get(m, "name", str, "model"), tuple(sorted(dim_pairs)),
      _entries(rd, rd.get(m, "variables", dict, "model"), "model.variables",
               dims, True),
      _entries(rd, rd.get(m, "activations", dict, "model"),
               "model.activations", dims, False),
      rd.get(m, "fingerprint", str, "model"), rd.get(m, "num_ops", int,
                                                     "model"),
      None if source is None else json.dumps(source, sort_keys=True))
  mesh = rd.get(data, "mesh", dict, "")
  axis_names = rd.get(mesh, "axis_names", list, "mesh")
  sizes = rd.get(mesh, "shape", list, "mesh")
  if len(axis_names) != len(sizes) or not all(
      isinstance(s, int) and not isinstance(s, bool) and s >= 1
      for s in sizes):
    rd.fail("mesh needs one positive integer size per axis name, got "
            f"axis_names {axis_names} and shape {sizes}")
  try:
    mesh_shape = mesh_lib.MeshShape(list(zip(axis_names, sizes)))
  except MtfError as e:
    rd.fail(f"bad mesh: {e}")
  topology, preset = _read_topology(rd, rd.get(data, "topology", dict, ""))
  rules = rd.get(data, "rules", dict, "")
  for dim, axis in rules.items():
    # A dim over several mesh axes is a list of names, major first.
    names = axis if isinstance(axis, list) else [axis]
    if not names or not all(isinstance(a, str) for a in names):
      rd.fail(f"rule {dim!r} must map to a mesh axis name or a list of "
              f"them, got {axis!r}")
    for a in names:
      if a not in axis_names:
        rd.fail(f"rule {dim}:{'+'.join(names)} names mesh axis {a!r}, which "
                f"the plan's mesh {mesh_shape.text} does not have; use "
                f"one of {axis_names}")
    if len(set(names)) != len(names):
      rd.fail(f"rule {dim}:{'+'.join(names)} lists a mesh axis twice; list "
              "each axis once")
    if dim not in dims:
      rd.fail(f"rule {dim}:{axis} names dim {dim!r}, which model "
              f"{ident.name!r} does not have (its dims: {sorted(dims)})")
  decisions = rd.get(data, "decisions", dict, "")
  decision_codec.read_decisions(decisions, f"plan file {rd.where}")
  costs = _read_costs(rd, rd.get(data, "costs", dict, ""))
  s = rd.get(data, "solver", dict, "")
  solver = SolverInfo(
      rd.get(s, "status", str, "solver"),
      rd.get(s, "objective", str, "solver", True),
      rd.get(s, "objective_value", _NUM, "solver", True),
      rd.get(s, "best_bound", _NUM, "solver", True),
      rd.get(s, "gap", _NUM, "solver", True),
      rd.get(s, "memory_budget_bytes", int, "solver", True),
      rd.get(s, "solve_time_s", _NUM, "solver", True))
  return Plan(ident, mesh_shape, topology, preset,
              LayoutRules(rules.items()), training_decisions(decisions),
              costs, solver, rd.get(data, "mesh_tf_version", str, ""))


def _read_topology(rd, topo):
  if set(topo) == {"preset"}:
    name = rd.get(topo, "preset", str, "topology")
    try:
      return costmodels.get_topology(name), name
    except costmodels.TopologyError as e:
      rd.fail(f"topology: {e}")
  if set(topo) == {"embedded"}:
    try:
      return topology_json.topology_from_dict(topo["embedded"]), None
    except (costmodels.TopologyError, TypeError, ValueError) as e:
      rd.fail(f"topology: {e}")
  rd.fail("topology must be {\"preset\": NAME} or {\"embedded\": {...}}")


def _read_costs(rd, c):
  mem = rd.get(c, "memory_by_category", dict, "costs")
  comm = rd.get(c, "comm_time_by_axis", dict, "costs")
  colls = []
  for i, r in enumerate(rd.get(c, "collectives", list, "costs")):
    p = f"costs.collectives[{i}]"
    colls.append((rd.get(r, "kind", str, p),
                  tuple(rd.get(r, "mesh_axes", list, p)),
                  rd.get(r, "count", int, p),
                  rd.get(r, "bytes_per_device", int, p)))
  for k, v in list(mem.items()) + list(comm.items()):
    if isinstance(v, bool) or not isinstance(v, _NUM) or not math.isfinite(v):
      rd.fail(f"costs entry {k!r} must be a number, got {v!r}")
  pipe = rd.get(c, "pipeline", dict, "costs", optional=True) or {}
  return PredictedCosts(
      float(rd.get(c, "step_time_s", _NUM, "costs")),
      float(rd.get(c, "compute_time_s", _NUM, "costs")),
      float(rd.get(c, "comm_time_s", _NUM, "costs")),
      rd.get(c, "peak_memory_bytes", int, "costs"),
      tuple((k, int(v)) for k, v in mem.items()),
      tuple((k, float(v)) for k, v in comm.items()), tuple(colls),
      tuple((k, tuple(v) if isinstance(v, list) else v)
            for k, v in pipe.items()))


def load_plan(path, graph=None, name=None, outputs=()):
  """Reads a plan file; with ``graph``, also checks it is the graph the
  plan was made for.

  Args:
    path: the JSON file written by :meth:`Plan.save` or ``mtf-layout solve
      --save``.
    graph: if given, the mtf Graph the plan will be applied to.
    name: if given, the model name the plan must be for.
    outputs: the step's outputs (only used to name activations).

  Returns:
    The :class:`Plan`.

  Raises:
    PlanFormatError: for a missing file, bad JSON, a wrong schema version,
      unknown axis names or any other malformed field.
    PlanMismatchError: if the plan is for another model (``name``) or the
      graph changed; the message names each change (a dim's size, a missing
      variable).
  """
  path = os.fspath(path)
  try:
    with open(path, encoding="utf-8") as f:
      text = f.read()
  except OSError as e:
    raise PlanFormatError(f"cannot read plan file {path!r}: "
                          f"{e.strerror or e}") from None
  try:
    data = json.loads(text)
  except json.JSONDecodeError as e:
    raise PlanFormatError(f"plan file {path!r} is not valid JSON: {e.msg} "
                          f"at line {e.lineno} column {e.colno}") from None
  plan = plan_from_json_dict(data, repr(path))
  if name is not None and plan.model.name != name:
    raise PlanMismatchError(
        f"plan file {path!r} is for model {plan.model.name!r}, not "
        f"{name!r}; use a plan made for {name!r} or solve it anew",
        [f"model {plan.model.name} -> {name}"])
  if graph is not None:
    mine = plan_identity.model_identity(graph, name or "the graph", outputs)
    plan_identity.check(plan.model, mine, f"the graph given for {path!r}")
  return plan
