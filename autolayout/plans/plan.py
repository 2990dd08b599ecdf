"""Plans as values and as files: :class:`Plan`, :func:`make_plan`,
:func:`save_plan` (reading is :mod:`autolayout.plans.file`).

A plan is what the layout search decided, plus the evidence needed to trust
it later and elsewhere: the model it is for (named dims with sizes, every
variable, the named activations and a structural fingerprint, see
:mod:`autolayout.plans.identity`), the mesh and topology, the layout rules and
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
import importlib.metadata
import json
import os
import re
import tempfile
from typing import Any, Optional

import costmodels
from costmodels import topology_json
from mesh_tf.core import mesh_shape as mesh_lib
from mesh_tf.core.errors import MtfError
from mesh_tf.core.layout import LayoutRules
from autolayout.plans import identity as plan_identity
from autolayout.plans.costs import PredictedCosts
from autolayout.training.families import TrainingDecisions
from autolayout.errors import PlanFormatError

SCHEMA = "mesh-tf-plan"
SCHEMA_VERSION = 1

# The decision families besides the layout rules, and how a file's are read
# and rebuilt, are in autolayout.plans.decisions (FAMILIES).


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
    model: the :class:`~autolayout.plans.identity.ModelIdentity` it is for.
    mesh_shape: the :class:`~mesh_tf.core.mesh_shape.MeshShape`.
    topology: the :class:`costmodels.Topology` it was priced on.
    topology_preset: the preset name if ``topology`` is one, else None (the
      file then embeds the topology).
    rules: the layout rules.
    training: the training decisions (a
      :class:`~autolayout.training.families.TrainingDecisions`) the plan's
      step was built for, or None for the step as built.
    costs: the :class:`PredictedCosts`.
    solver: the :class:`SolverInfo`.
    mesh_tf_version: the mesh-tf version that wrote it.
  """
  model: plan_identity.ModelIdentity
  mesh_shape: mesh_lib.MeshShape
  topology: Any
  topology_preset: Optional[str]
  rules: LayoutRules
  training: Optional[TrainingDecisions]
  costs: PredictedCosts
  solver: SolverInfo
  mesh_tf_version: str

  @property
  def decisions(self):
    """``{family: JSON value}`` of the training decisions (``{}`` for the
    step as built), each in its family's JSON form; a new dict each time
    (the plan holds the typed :attr:`training`)."""
    return {} if self.training is None else self.training.as_dict()

  def __str__(self):
    return (f"Plan[{self.model.name} on {self.mesh_shape.text} "
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


def version():
  """The installed mesh-tf version (from the package metadata, so that
  plans need not import the ``mesh_tf`` package and its optimizer door)."""
  try:
    return importlib.metadata.version("mesh-tf")
  except importlib.metadata.PackageNotFoundError:
    return "unknown"


def _preset_name(topology):
  try:
    preset = costmodels.get_topology(topology.name)
  except costmodels.TopologyError:
    return None
  return topology.name if preset == topology else None


def training_decisions(decisions):
  """The typed :class:`TrainingDecisions` of ``decisions`` (one already,
  or its JSON mapping, decoded by the families' codec), or None for none.

  Raises:
    DecisionValueError: for a family or value the registry does not take.
  """
  if decisions is None or isinstance(decisions, TrainingDecisions):
    return decisions
  if not decisions:
    return None
  return TrainingDecisions.from_json(decisions)


def make_plan(graph, mesh_shape, rules, topology, report=None, outputs=None,
              name="model", solver=None, *, decisions=None, source=None):
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
  mesh_shape = mesh_lib.convert_to_mesh_shape(mesh_shape)
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
              training_decisions(decisions),
              PredictedCosts.from_report(report),
              solver or SolverInfo("given"), version())


def plan_from_result(result, name="model", source=None, output_names=None):
  """The :class:`Plan` of a :class:`~autolayout.LayoutResult`.

  ``output_names`` names ``result.outputs`` in order (e.g. ``["logits",
  "loss"]``) among the plan's activations; by default they keep their op
  names.
  """
  if result.graph is None:
    raise MtfError("this LayoutResult holds no graph (it was built by hand);"
                   " use autolayout.plans.plan.make_plan(graph, mesh, rules, ...)")
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
  # Training decisions (precision, ZeRO stage, recompute, microbatches)
  # travel as the typed value the search chose.
  return make_plan(result.graph, result.mesh_shape, result.rules,
                   result.topology, result.report, outputs, name, solver,
                   decisions=getattr(result, "decisions", None),
                   source=source)


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
