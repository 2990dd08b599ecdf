"""LayoutResult: the answer of the layout search, with its evidence."""

import dataclasses
from typing import Any, Dict, Optional, Tuple

import pandas as pd

from mesh_tf.core import dims as dims_lib
from mesh_tf.core.errors import LayoutError
from mesh_tf.core.layout import LayoutRules


@dataclasses.dataclass(frozen=True)
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
    model_size: counts of variables, constraints, tables, memory steps.
    memory_budget: the per-device budget in bytes, or None.
    topology: the topology it was priced on.
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
  model_size: Dict[str, int]
  memory_budget: Optional[int]
  topology: Any
  graph: Any = dataclasses.field(repr=False, compare=False, default=None)
  outputs: Tuple[Any, ...] = dataclasses.field(repr=False, compare=False,
                                               default=())

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
        **{f"model_{k}": v for k, v in self.model_size.items()}}])

  def explain(self):
    """For each chosen rule, what the step time and peak memory would be
    without it, and with the runner-up axis.

    Returns a DataFrame with one row per rule ``dim:axis``: the chosen
    ``step_time_s`` and ``peak_memory_bytes``; ``without_*``: the same
    layout minus this rule; ``runner_up_*``: the best layout (re-solved
    exactly, same budget and objective) that does not put ``dim`` on
    ``axis``, with ``runner_up_axis`` the axis it gives ``dim`` (None:
    replicated) and ``runner_up_rules`` its rules.  A value is None where
    no such layout exists.
    """
    import costmodels  # pylint: disable=g-import-not-at-top
    from autolayout import errors, solve
    base = dict(self.rules.pairs)
    outputs = list(self.outputs) or None  # none recorded: the default
    rows = []
    for dim, axis in self.rules.pairs:
      rest = LayoutRules([(k, v) for k, v in base.items() if k != dim])
      try:
        r0 = costmodels.evaluate(self.graph, self.mesh_shape, rest,
                                 self.topology, outputs=outputs)
      except LayoutError:
        r0 = None
      try:
        alt = solve.auto_layout(self.graph, self.mesh_shape,
                                outputs, self.topology,
                                self.memory_budget, self.objective,
                                forbid=[(dim, axis)])
      except errors.AutoLayoutError:
        alt = None
      rows.append({
          "dim": dim, "axis": axis,
          "step_time_s": self.report.step_time_s,
          "peak_memory_bytes": self.report.peak_memory_bytes,
          "without_step_time_s": r0.step_time_s if r0 else None,
          "without_peak_memory_bytes": r0.peak_memory_bytes if r0 else None,
          "runner_up_axis": alt.rules.as_dict().get(dim) if alt else None,
          "runner_up_rules": str(alt.rules) if alt else None,
          "runner_up_step_time_s": alt.step_time_s if alt else None,
          "runner_up_peak_memory_bytes": (alt.peak_memory_bytes
                                          if alt else None)})
    return pd.DataFrame(rows, columns=[
        "dim", "axis", "step_time_s", "peak_memory_bytes",
        "without_step_time_s", "without_peak_memory_bytes",
        "runner_up_axis", "runner_up_rules", "runner_up_step_time_s",
        "runner_up_peak_memory_bytes"])
