"""Plans as values and as files: :class:`Plan`, :func:`save_plan`,
:func:`load_plan`.

A plan is what the layout search decided, plus the evidence needed to trust
it later and elsewhere: the model it is for (named dims with sizes, every
variable, the named activations and a structural fingerprint, see
:mod:`autolayout.plan_identity`), the mesh and topology, the layout rules and
every other decision, the predicted costs, and the solver's status, bound and
gap.  The file format is versioned JSON, documented in ``docs/plan_files.md``.

Loading against a graph checks that the graph is still the one the plan was
made for and names what changed; a stale plan is never applied silently.

Example:
  >>> r = autolayout.auto_layout(graph, "data:2;model:4")  # doctest: +SKIP
  >>> r.save("plan.json", name="my_model")                 # doctest: +SKIP
  >>> plan = mtf.load_plan("plan.json", graph)             # doctest: +SKIP
  >>> plan.rules                                           # doctest: +SKIP
  LayoutRules[batch:data, d_ff:model]
"""

import dataclasses
import json
import math
import os
import re
import tempfile
from typing import Any, Optional, Tuple

import costmodels
from costmodels import topology_json
from mesh_tf.core import dims as dims_lib
from mesh_tf.core.errors import MtfError
from mesh_tf.core.layout import LayoutRules
from autolayout import plan_identity
from autolayout.errors import PlanFormatError, PlanMismatchError

SCHEMA = "mesh-tf-plan"
SCHEMA_VERSION = 1

# Decision families other than the layout rules that this version can apply,
# name -> what it means.  A plan holding any other decision is refused on
# load: applying only part of a plan would silently change its costs.
KNOWN_DECISIONS = {}


@dataclasses.dataclass(frozen=True)
class PredictedCosts:
  """What the cost model predicted for the plan (per device, per step).

  ``memory_by_category``, ``comm_time_by_axis`` and ``collectives`` are
  tuples of pairs / records so that the value stays hashable; see
  :meth:`as_dict`.  ``collectives`` holds ``(kind, mesh axes, count,
  bytes per device)`` summed per kind and axes.
  """
  step_time_s: float
  compute_time_s: float
  comm_time_s: float
  peak_memory_bytes: int
  memory_by_category: Tuple[Tuple[str, int], ...]
  comm_time_by_axis: Tuple[Tuple[str, float], ...]
  collectives: Tuple[Tuple[str, Tuple[str, ...], int, int], ...] = ()

  @classmethod
  def from_report(cls, report):
    """The costs of a :class:`costmodels.CostReport`."""
    agg = {}
    for c in report.collectives:
      key = (c.kind, tuple(c.mesh_axes))
      n, b = agg.get(key, (0, 0))
      agg[key] = (n + 1, b + int(c.bytes_per_device))
    return cls(float(report.step_time_s), float(report.compute_time_s),
               float(report.comm_time_s), int(report.peak_memory_bytes),
               tuple((k, int(v)) for k, v in
                     report.memory_by_category.items()),
               tuple((k, float(v)) for k, v in
                     report.comm_time_by_axis.items()),
               tuple((k, a, n, b) for (k, a), (n, b) in sorted(agg.items())))

  def as_dict(self):
    """The JSON form (``docs/plan_files.md``)."""
    return {"step_time_s": self.step_time_s,
            "compute_time_s": self.compute_time_s,
            "comm_time_s": self.comm_time_s,
            "peak_memory_bytes": self.peak_memory_bytes,
            "memory_by_category": dict(self.memory_by_category),
            "comm_time_by_axis": dict(self.comm_time_by_axis),
            "collectives": [{"kind": k, "mesh_axes": list(a), "count": n,
                             "bytes_per_device": b}
                            for k, a, n, b in self.collectives]}


@dataclasses.dataclass(frozen=True)
class SolverInfo:
  """How the plan was found.

  ``status`` is "optimal", "feasible" (time limit reached; see ``gap``) or
  "given" (rules chosen by hand, not by the solver: value, bound and gap are
  then None).
  """
  status: str
  objective: Optional[str] = None
  objective_value: Optional[float] = None
  best_bound: Optional[float] = None
  gap: Optional[float] = None
  memory_budget_bytes: Optional[int] = None
  solve_time_s: Optional[float] = None

  def as_dict(self):
    return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class Plan:
  """A layout plan, immutable and hashable.

  Attributes:
    model: the :class:`~autolayout.plan_identity.ModelIdentity` it is for.
    mesh_shape: the mesh (an mtf Shape of axis names and sizes).
    topology: the :class:`costmodels.Topology` it was priced on.
    topology_preset: the preset name if ``topology`` is one, else None (the
      file then embeds the topology).
    rules: the layout rules.
    decision_items: ``((family, canonical JSON text), ...)`` of the other
      decisions (see :attr:`decisions`).
    costs: the :class:`PredictedCosts`.
    solver: the :class:`SolverInfo`.
    mesh_tf_version: the mesh-tf version that wrote it.
  """
  model: plan_identity.ModelIdentity
  mesh_shape: dims_lib.Shape
  topology: Any
  topology_preset: Optional[str]
  rules: LayoutRules
  decision_items: Tuple[Tuple[str, str], ...]
  costs: PredictedCosts
  solver: SolverInfo
  mesh_tf_version: str

  @property
  def decisions(self):
    """``{family: JSON value}`` of every decision besides the rules (a new
    dict each time; the plan itself is immutable)."""
    return {k: json.loads(v) for k, v in self.decision_items}

  def __str__(self):
    return (f"Plan[{self.model.name} on {_mesh_str(self.mesh_shape)} "
            f"({self.topology.name}): {self.rules or '(replicated)'}; step "
            f"{self.costs.step_time_s * 1e3:.4g} ms, peak "
            f"{self.costs.peak_memory_bytes / 2**20:.4g} MiB/device, "
            f"{self.solver.status}]")

  def check(self, graph, outputs=()):
    """Raises :class:`PlanMismatchError` if ``graph`` is not the graph this
    plan was made for, naming each difference (``dim d_ff=2048 -> 4096``,
    ``missing variable layer_0/w``)."""
    mine = plan_identity.model_identity(graph, "the graph", outputs)
    plan_identity.check(self.model, mine)

  def evaluate(self, graph, outputs=None):
    """:func:`costmodels.evaluate` of this plan on ``graph`` (checked
    first with :meth:`check`)."""
    self.check(graph)
    return costmodels.evaluate(graph, self.mesh_shape, self.rules,
                               self.topology, outputs=outputs)

  def to_json_dict(self):
    """The plan as the JSON object of ``docs/plan_files.md``."""
    m = self.model
    topo = ({"preset": self.topology_preset} if self.topology_preset else
            {"embedded": topology_json.topology_to_dict(self.topology)})
    return {
        "format": SCHEMA,
        "schema_version": SCHEMA_VERSION,
        "mesh_tf_version": self.mesh_tf_version,
        "model": {
            "name": m.name,
            "fingerprint": m.fingerprint,
            "num_ops": m.num_ops,
            "dims": {n: (list(s) if isinstance(s, tuple) else s)
                     for n, s in m.dim_sizes().items()},
            "variables": {v.name: {"dims": list(v.dim_names),
                                   "shape": list(v.shape), "dtype": v.dtype,
                                   "trainable": v.trainable}
                          for v in m.variables},
            "activations": {a.name: {"dims": list(a.dim_names),
                                     "shape": list(a.shape),
                                     "dtype": a.dtype}
                            for a in m.activations},
            "source": None if m.source is None else json.loads(m.source),
        },
        "mesh": {"axis_names": self.mesh_shape.dimension_names,
                 "shape": self.mesh_shape.to_integer_list()},
        "topology": topo,
        "rules": dict(self.rules.pairs),
        "decisions": self.decisions,
        "costs": self.costs.as_dict(),
        "solver": self.solver.as_dict(),
    }

  def save(self, path):
    """Writes the plan to ``path`` as JSON, atomically (a temporary file in
    the same folder, then ``os.replace``), and returns ``path``."""
    return save_plan(self, path)


def _mesh_str(mesh):
  return ";".join(f"{d.name}:{d.size}" for d in mesh.dims)


def _version():
  import mesh_tf  # pylint: disable=g-import-not-at-top
  return mesh_tf.__version__


def _preset_name(topology):
  try:
    preset = costmodels.get_topology(topology.name)
  except costmodels.TopologyError:
    return None
  return topology.name if preset == topology else None


def _freeze_decisions(decisions):
  items = []
  for k, v in sorted((decisions or {}).items()):
    if not isinstance(k, str) or not k:
      raise MtfError(f"decision names are non-empty strings, got {k!r}")
    try:
      items.append((k, json.dumps(v, sort_keys=True, allow_nan=False)))
    except (TypeError, ValueError) as e:
      raise MtfError(f"decision {k!r} is not JSON data: {e}") from None
  return tuple(items)


def make_plan(graph, mesh_shape, rules, topology, report=None, outputs=None,
              name="model", solver=None, decisions=None, source=None):
  """A :class:`Plan` for ``rules`` on ``graph`` (priced with
  :func:`costmodels.evaluate` unless ``report`` is given).

  Args:
    graph, mesh_shape, rules, topology: the layout (strings are parsed).
    report: its CostReport, if already computed.
    outputs: the step's outputs (default: tensors no op reads); a dict
      ``{name: tensor}`` also names them among the activations.
    name: the model's name.
    solver: a :class:`SolverInfo` (default: status "given").
    decisions: ``{family: JSON value}`` of other decisions.
    source: a JSON-able dict saying how to rebuild the model (the CLI
      records the zoo model, ``--set`` overrides and ``--train``).
  """
  mesh_shape = dims_lib.convert_to_shape(mesh_shape)
  topology = costmodels.get_topology(topology)
  if not isinstance(rules, LayoutRules):
    from mesh_tf.core.layout import convert_to_layout_rules
    rules = convert_to_layout_rules(rules)
  tensors = list(outputs.values()) if isinstance(outputs, dict) else outputs
  if report is None:
    report = costmodels.evaluate(graph, mesh_shape, rules, topology,
                                 outputs=tensors)
  if outputs is None:
    from costmodels import memory  # pylint: disable=g-import-not-at-top
    outputs = memory.default_outputs(graph)
  ident = plan_identity.model_identity(graph, name, outputs, source)
  return Plan(ident, mesh_shape, topology, _preset_name(topology), rules,
              _freeze_decisions(decisions), PredictedCosts.from_report(report),
              solver or SolverInfo("given"), _version())


def plan_from_result(result, name="model", source=None, output_names=None):
  """The :class:`Plan` of a :class:`~autolayout.LayoutResult`.

  ``output_names`` names ``result.outputs`` in order (e.g. ``["logits",
  "loss"]``) among the plan's activations; by default they keep their op
  names.
  """
  if result.graph is None:
    raise MtfError("this LayoutResult holds no graph (it was built by hand);"
                   " use autolayout.plan.make_plan(graph, mesh, rules, ...)")
  solver = SolverInfo(result.status, result.objective,
                      float(result.objective_value), float(result.best_bound),
                      float(result.gap), result.memory_budget,
                      float(result.solve_time_s))
  outputs = list(result.outputs) or None
  if output_names is not None and outputs:
    if len(output_names) != len(outputs):
      raise MtfError(f"output_names {list(output_names)} must name each of "
                     f"the result's {len(outputs)} outputs")
    outputs = dict(zip(output_names, outputs))
  return make_plan(result.graph, result.mesh_shape, result.rules,
                   result.topology, result.report, outputs, name, solver,
                   None, source)


# Only structural brackets are followed by a raw newline (JSON strings never
# hold one), so this cannot touch the text of a string.
_SCALAR_LIST = re.compile(r"\[\n\s+([^\[\]{}]*?)\n\s+\]")


def dumps(data):
  """JSON text with two-space indents and short lists of scalars kept on
  one line (``"dims": ["batch", "d_model"]``), ending in a newline."""
  text = json.dumps(data, indent=2, allow_nan=False)
  return _SCALAR_LIST.sub(
      lambda m: "[" + ", ".join(p.strip() for p in m.group(1).split(",\n"))
      + "]", text) + "\n"


def save_plan(plan, path):
  """Writes ``plan`` to ``path`` atomically; returns ``path``.

  Raises:
    PlanFormatError: if the folder cannot be written.
  """
  path = os.fspath(path)
  text = dumps(plan.to_json_dict())
  folder = os.path.dirname(os.path.abspath(path))
  try:
    fd, tmp = tempfile.mkstemp(prefix=".plan-", suffix=".tmp", dir=folder)
  except OSError as e:
    raise PlanFormatError(f"cannot write plan file {path!r}: {e}") from None
  try:
    with os.fdopen(fd, "w", encoding="utf-8") as f:
      f.write(text)
    os.replace(tmp, path)
  except BaseException:
    if os.path.exists(tmp):
      os.unlink(tmp)
    raise
  return path


# --- reading -----------------------------------------------------------------
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
  version = rd.get(data, "schema_version", int, "")
  if version != SCHEMA_VERSION:
    rd.fail(f"schema_version {version} is not {SCHEMA_VERSION}, the one "
            f"mesh-tf {_version()} reads; "
            + ("upgrade mesh-tf" if version > SCHEMA_VERSION else
               "solve the model again to write a current plan"))
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
    mesh_shape = dims_lib.Shape(list(zip(axis_names, sizes)))
  except MtfError as e:
    rd.fail(f"bad mesh: {e}")
  topology, preset = _read_topology(rd, rd.get(data, "topology", dict, ""))
  rules = rd.get(data, "rules", dict, "")
  for dim, axis in rules.items():
    if not isinstance(axis, str):
      rd.fail(f"rule {dim!r} must map to a mesh axis name, got {axis!r}")
    if axis not in axis_names:
      rd.fail(f"rule {dim}:{axis} names mesh axis {axis!r}, which the plan's"
              f" mesh {_mesh_str(mesh_shape)} does not have; use one of "
              f"{axis_names}")
    if dim not in dims:
      rd.fail(f"rule {dim}:{axis} names dim {dim!r}, which model "
              f"{ident.name!r} does not have (its dims: {sorted(dims)})")
  decisions = rd.get(data, "decisions", dict, "")
  unknown = sorted(set(decisions) - set(KNOWN_DECISIONS))
  if unknown:
    rd.fail(f"it holds decision(s) {unknown}, which mesh-tf {_version()} "
            "cannot apply (applying the rest would change its costs); use "
            "the mesh-tf version that wrote it, "
            f"{data.get('mesh_tf_version')!r}, or a newer one")
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
              LayoutRules(rules.items()), _freeze_decisions(decisions),
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
  return PredictedCosts(
      float(rd.get(c, "step_time_s", _NUM, "costs")),
      float(rd.get(c, "compute_time_s", _NUM, "costs")),
      float(rd.get(c, "comm_time_s", _NUM, "costs")),
      rd.get(c, "peak_memory_bytes", int, "costs"),
      tuple((k, int(v)) for k, v in mem.items()),
      tuple((k, float(v)) for k, v in comm.items()), tuple(colls))


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
