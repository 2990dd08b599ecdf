"""LayoutResult: the answer of the layout search, with its evidence."""

import dataclasses
from typing import Any, Optional, Tuple

import pandas as pd

from mesh_tf.core import dims as dims_lib
from mesh_tf.core.layout import LayoutRules


@dataclasses.dataclass(frozen=True)
class ModelSize:
  """The size of one CP-SAT program.

  Attributes:
    variables: CP-SAT variables.
    constraints: CP-SAT constraints.
    tables: cost tables (one per group of dims used together).
    table_choices: local assignments over all tables.
    memory_steps: memory steps constrained (0 without a budget).

  ``size["variables"]`` reads a field by name, as for the dict it replaces.
  """
  variables: int
  constraints: int
  tables: int
  table_choices: int
  memory_steps: int

  def __getitem__(self, name):
    if name not in self.as_dict():
      raise KeyError(name)
    return getattr(self, name)

  def as_dict(self):
    """``{field: count}`` in field order."""
    return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True, kw_only=True)
class LayoutResult:
  """What :func:`autolayout.auto_layout` found.

  Attributes:
    rules: the chosen :class:`mtf.LayoutRules` (usable by PlacementMeshImpl).
    mesh_shape: the mesh Shape it is for.
    report: the cost model's :class:`CostReport` of ``rules``.
    objective: ``"time"``, ``"comm"`` or ``"memory"``.
    objective_value: the program's optimum in seconds (time, comm) or bytes
      (memory), equal to the report's value.
    status: ``"optimal"`` (proven) or ``"feasible"`` (time limit reached).
    best_bound: the solver's lower bound on the objective, same unit.
    gap: ``(value - bound) / value`` (0.0 when optimal).
    solve_time_s: wall time in CP-SAT, all phases.
    build_time_s: wall time to build the cost tables and the model.
    model_size: the program's :class:`ModelSize`.
    memory_budget: the per-device budget in bytes, or None.
    topology: the topology it was priced on.
    decisions: the :class:`autolayout.training.decisions.TrainingDecisions`
      (precision, ZeRO stage, recompute, microbatches) the graph was built
      with, when a training-plan search chose them; ``decisions.as_dict()``
      is their mapping.  None for a plain layout search.
    graph, outputs: what was laid out (not part of equality or the hash).
    hint_report: for a solve given ``hint=plan``, the
      :class:`~autolayout.plans.hint.HintReport` (which rules changed and
      why); else None (not part of equality or the hash).
    meshes_tried: when the mesh was searched (no mesh given), every mesh
      shape tried, best first: ``(mesh, status, step_time_s or None)``.

  A frozen value built from named fields only (keyword arguments): equal
  results hash equal, and ``dataclasses.replace`` makes a changed copy.  Why a rule was chosen: :func:`autolayout.explain`.
  """
  rules: LayoutRules
  mesh_shape: dims_lib.Shape
  report: Any
  objective: str
  objective_value: float
  status: str
  best_bound: float
  gap: float
  solve_time_s: float
  build_time_s: float
  model_size: ModelSize
  memory_budget: Optional[int]
  topology: Any
  decisions: Any = None
  graph: Any = dataclasses.field(repr=False, compare=False, default=None)
  outputs: Tuple[Any, ...] = dataclasses.field(repr=False, compare=False,
                                               default=())
  hint_report: Any = dataclasses.field(repr=False, compare=False,
                                       default=None)
  meshes_tried: Tuple[Tuple[str, str, Optional[float]], ...] = (
      dataclasses.field(repr=False, compare=False, default=()))

  @property
  def step_time_s(self):
    return self.report.step_time_s

  @property
  def peak_memory_bytes(self):
    return self.report.peak_memory_bytes

  @property
  def is_optimal(self):
    return self.status == "optimal"

  def __str__(self):
    return (f"LayoutResult[{self.rules}] on {self.mesh_shape}: step "
            f"{self.step_time_s * 1e3:.4g} ms, peak "
            f"{self.peak_memory_bytes / 2**20:.4g} MiB/device, {self.status}"
            f" (gap {self.gap:.2%}), solved in {self.solve_time_s:.2f} s")

  def to_plan(self, name="model", source=None, output_names=None):
    """This result as a :class:`~autolayout.plans.plan.Plan` (a durable value:
    model identity, mesh, topology, rules, predicted costs, solver status).
    ``name`` names the model; ``source`` (a JSON-able dict) says how to
    rebuild it; ``output_names`` names the outputs, in order."""
    from autolayout.plans import plan  # pylint: disable=g-import-not-at-top
    return plan.plan_from_result(self, name, source, output_names)

  def save(self, path, name="model", source=None, output_names=None):
    """Writes :meth:`to_plan` to ``path`` as a plan file
    (``docs/plan_files.md``), atomically; returns the Plan.  Load it with
    ``mtf.load_plan(path, graph)``."""
    p = self.to_plan(name, source, output_names)
    p.save(path)
    return p

  def summary(self):
    """One-row DataFrame of the headline numbers."""
    return pd.DataFrame([{
        "mesh": str(self.mesh_shape), "rules": str(self.rules),
        "step_time_s": self.step_time_s,
        "compute_time_s": self.report.compute_time_s,
        "comm_time_s": self.report.comm_time_s,
        "peak_memory_bytes": self.peak_memory_bytes,
        "status": self.status, "gap": self.gap,
        "solve_time_s": self.solve_time_s,
        **{f"model_{k}": v for k, v in self.model_size.as_dict().items()}}])
