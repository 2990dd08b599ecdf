"""The one record of predicted costs: what a plan stores, what a diff
compares and subtracts."""

import dataclasses
from typing import Any, Tuple

__all__ = ["PIPELINE_TERMS", "PredictedCosts"]

#: A pipelined plan's terms (costmodels.pipeline.PipelineCost): seconds of
#: the bubble (fill and drain), the steady microbatches, the once-per-step
#: work and one microbatch's boundary sends on the slowest stage; the
#: bubble as a fraction of the steady time; the microbatches; and per stage
#: its time per microbatch, the bytes it sends per microbatch, the
#: microbatches it holds in flight and its peak bytes.
PIPELINE_TERMS = ("bubble_s", "bubble_fraction", "steady_s", "step_work_s",
                  "boundary_send_s", "microbatches", "stage_times_s",
                  "sent_bytes", "in_flight", "stage_memory_bytes")
_SCALAR_TERMS = PIPELINE_TERMS[:5]


@dataclasses.dataclass(frozen=True)
class PredictedCosts:
  """What the cost model predicted for the plan (per device, per step).

  ``memory_by_category``, ``comm_time_by_axis`` and ``collectives`` are
  tuples of pairs / records so that the value stays hashable; see
  :meth:`as_dict`.  ``collectives`` holds ``(kind, mesh axes, count,
  bytes per device)`` summed per kind and axes.  ``pipeline`` holds a
  pipelined plan's time decomposition and per-stage figures as ``(name,
  value)`` pairs (lists as tuples; see :data:`PIPELINE_TERMS`), empty for
  any other plan: then the step is ``compute + comm + bubble``.
  """
  step_time_s: float
  compute_time_s: float
  comm_time_s: float
  peak_memory_bytes: int
  memory_by_category: Tuple[Tuple[str, int], ...]
  comm_time_by_axis: Tuple[Tuple[str, float], ...]
  collectives: Tuple[Tuple[str, Tuple[str, ...], int, int], ...] = ()
  pipeline: Tuple[Tuple[str, Any], ...] = ()

  @classmethod
  def of(cls, report_or_costs):
    """The headline costs of a CostReport or another PredictedCosts, with
    the categories and axes sorted by name and no collectives (what a diff
    compares)."""
    r = report_or_costs
    mem, comm = r.memory_by_category, r.comm_time_by_axis
    return cls(float(r.step_time_s), float(r.compute_time_s),
               float(r.comm_time_s), int(r.peak_memory_bytes),
               tuple(sorted(dict(mem).items())),
               tuple(sorted(dict(comm).items())),
               pipeline=tuple(getattr(r, "pipeline", ())))

  def minus(self, other):
    """``self - other``, field by field (missing categories and axes count
    as 0; a difference carries no collectives)."""
    def sub(a, b):
      a, b = dict(a), dict(b)
      return tuple((k, a.get(k, 0) - b.get(k, 0))
                   for k in sorted(set(a) | set(b)))
    return PredictedCosts(
        self.step_time_s - other.step_time_s,
        self.compute_time_s - other.compute_time_s,
        self.comm_time_s - other.comm_time_s,
        self.peak_memory_bytes - other.peak_memory_bytes,
        sub(self.memory_by_category, other.memory_by_category),
        sub(self.comm_time_by_axis, other.comm_time_by_axis),
        pipeline=_pipeline_minus(self.pipeline, other.pipeline))

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
                            for k, a, n, b in self.collectives],
            **({"pipeline": {k: list(v) if isinstance(v, tuple) else v
                             for k, v in self.pipeline}}
               if self.pipeline else {})}

  @property
  def pipeline_terms(self):
    """``{term: value}`` of :attr:`pipeline` (empty for an unpipelined
    plan)."""
    return dict(self.pipeline)


def _pipeline_minus(a, b):
  """The scalar pipeline terms of ``a - b`` (a plan without a pipeline
  has none of them: 0); empty when neither plan is pipelined."""
  if not a and not b:
    return ()
  a, b = dict(a), dict(b)
  return tuple((k, a.get(k, 0.0) - b.get(k, 0.0)) for k in _SCALAR_TERMS)
