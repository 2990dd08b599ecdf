"""The :class:`CostReport` of one (graph, mesh, layout, topology)."""

import dataclasses
import functools
import math

from costmodels import hardware

VIEWS = ("ops", "axes", "memory", "collectives", "variables")


@dataclasses.dataclass(frozen=True, eq=False, repr=False)
class CostReport:
  """Predicted step time and memory of a graph under one layout (frozen;
  equal and hashed by identity, as it holds the graph and numpy arrays).

  Built by :func:`costmodels.evaluate`.  Times are seconds per step and per
  device; bytes are per device.

  Attributes:
    step_time_s: compute time plus *exposed* communication time: every
      collective on the critical path, and the part of the gradient syncs
      and of the prefetched parameter all-gathers that compute does not
      hide (:mod:`costmodels.overlap`, :mod:`costmodels.prefetch`), plus
      the compute the hidden part slows (``interference_time_s``).  With overlap
      off (or nothing to overlap) it is the ``math.fsum`` of every record.
    wall_step_time_s: ``step_time_s`` plus the chip's fixed cost of one
      call of a step (``step_overhead_s``, 0 for the presets): what a
      measured step takes.
    compute_time_s: roofline time of the slicewise compute.
    comm_time_s: exposed communication time.
    total_comm_time_s: time of every collective; ``comm_time_s +
      hidden_comm_time_s`` equals it up to rounding.
    hidden_comm_time_s: gradient-sync and prefetched-gather time hidden
      under compute.
    interference_time_s: what hiding it costs the compute it overlaps
      (part of ``step_time_s``; see :mod:`costmodels.overlap`).
    comm_time_by_axis: ``{mesh axis: exposed seconds}`` for every mesh axis;
      a collective over several axes is split by the phases of its
      algorithm (see :class:`costmodels.evaluate.OpCost`).  Sums to
      ``comm_time_s`` up to rounding.  ``hidden_comm_time_by_axis`` and
      ``total_comm_time_by_axis`` give the other two figures.
    overlap: the :class:`costmodels.overlap.Overlap` (None: not computed).
    peak_memory_bytes: peak per-device bytes (see :mod:`costmodels.memory`).
    peak_step, peak_op: where the peak is reached (a memory step of
      :func:`costmodels.memory.memory_steps`; inside a while loop, the
      condition or body op).
    memory_by_category: ``{"params", "gradients", "optimizer",
      "activations": bytes}`` at the peak step.
    memory_by_step: per-step totals (numpy array).
    variable_bytes_per_device: ``{variable name: bytes}`` from the trace.
    collectives: the priced collectives (``OpCost`` with category "comm").
    op_costs: every priced record (compute first, then collectives).
    flops_per_device: total FLOPs per device.
    hbm_bytes: the memory the chip exposes (see
      :mod:`costmodels.hardware`).
    memory_reserve_fraction: the part of it kept free for the runtime and
      fragmentation.
    usable_memory_bytes: ``hbm_bytes`` less the reserve;
      ``fits_in_memory`` compares the peak with it.
    mesh_shape, layout_rules, topology, mapping, trace, graph.
  """

  graph: object
  mesh_shape: object
  layout_rules: object
  topology: object
  mapping: object
  trace: object
  op_costs: list
  memory: object
  memory_reserve_fraction: float = hardware.DEFAULT_MEMORY_RESERVE_FRACTION
  overlap: object = None

  def __post_init__(self):
    object.__setattr__(self, "op_costs", list(self.op_costs))

  # The rest is derived from the fields above, once, on first use.
  @functools.cached_property
  def collectives(self):
    return [c for c in self.op_costs if c.category == "comm"]

  @functools.cached_property
  def _compute(self):
    return [c for c in self.op_costs if c.category == "compute"]

  @functools.cached_property
  def step_time_s(self):
    if self.overlap is None:
      return math.fsum(c.time_s for c in self.op_costs)
    return math.fsum([c.time_s for c in self._compute]
                     + list(self.overlap.exposed_parts)
                     + [a.interference_s for a in self.overlap.by_axis])

  @property
  def step_overhead_s(self):
    """The chip's fixed cost of one call of the step
    (:attr:`costmodels.hardware.ChipSpec.step_overhead_s`; 0 for the
    presets): the same for every layout, so it is not in
    ``step_time_s``, which the layout search reproduces exactly."""
    return self.topology.chip.step_overhead_s

  @property
  def wall_step_time_s(self):
    """What one call of the lowered step takes: ``step_time_s`` plus the
    chip's fixed cost per call (``step_overhead_s``); the prediction to
    hold a measured step against."""
    return self.step_time_s + self.step_overhead_s

  @property
  def interference_time_s(self):
    """Compute time lost to the communication hidden under it
    (:math:`\\sum_a I_a` of :mod:`costmodels.overlap`)."""
    return self.overlap.interference_s if self.overlap is not None else 0.0

  @functools.cached_property
  def compute_time_s(self):
    return math.fsum(c.time_s for c in self._compute)

  @functools.cached_property
  def comm_time_s(self):
    """Exposed communication: what the step waits for."""
    if self.overlap is None:
      return self.total_comm_time_s
    return self.overlap.exposed_comm_s

  @functools.cached_property
  def total_comm_time_s(self):
    """Every collective's time, hidden or not."""
    return math.fsum(c.time_s for c in self.collectives)

  @property
  def hidden_comm_time_s(self):
    """Gradient syncs and parameter prefetch hidden under compute (see
    :mod:`costmodels.overlap`)."""
    if self.overlap is None:
      return 0.0
    return self.overlap.hidden_comm_s

  @functools.cached_property
  def total_comm_time_by_axis(self):
    by_axis = {a.name: [] for a in self.mesh_shape.dims}
    for c in self.collectives:
      for a, t in c.time_by_axis:
        by_axis.setdefault(a, []).append(t)
    return {a: math.fsum(ts) for a, ts in by_axis.items()}

  @functools.cached_property
  def comm_time_by_axis(self):
    """Exposed communication per mesh axis; sums to ``comm_time_s``."""
    if self.overlap is None:
      return self.total_comm_time_by_axis
    return {a.axis: a.exposed_s for a in self.overlap.by_axis}

  @functools.cached_property
  def hidden_comm_time_by_axis(self):
    if self.overlap is None:
      return {a: 0.0 for a in self.total_comm_time_by_axis}
    return {a.axis: a.hidden_s for a in self.overlap.by_axis}

  def _overlap_split(self, axis):
    """The overlappable parts of one axis's communication: gradient syncs
    and prefetched gathers, each total and exposed (seconds)."""
    mine = [a for a in (self.overlap.by_axis if self.overlap else ())
            if a.axis == axis]
    a = mine[0] if mine else None
    return {"sync_time_s": a.sync_s if a else 0.0,
            "exposed_sync_time_s": a.exposed_sync_s if a else 0.0,
            "prefetch_time_s": a.prefetch_s if a else 0.0,
            "exposed_prefetch_time_s": a.exposed_prefetch_s if a else 0.0,
            "interference_time_s": a.interference_s if a else 0.0}

  @functools.cached_property
  def flops_per_device(self):
    return sum(c.flops_per_device for c in self._compute)

  @property
  def peak_memory_bytes(self):
    return self.memory.peak_bytes

  @property
  def peak_step(self):
    return self.memory.peak_step

  @property
  def peak_op(self):
    return self.memory.peak_op

  @functools.cached_property
  def memory_by_category(self):
    return dict(self.memory.breakdown)

  @property
  def memory_by_step(self):
    return self.memory.bytes_by_step

  @functools.cached_property
  def variable_bytes_per_device(self):
    return dict(self.trace.variables)

  @property
  def hbm_bytes(self):
    return self.topology.chip.hbm_bytes

  @property
  def usable_memory_bytes(self):
    return hardware.usable_memory_bytes(self.topology.chip,
                                        self.memory_reserve_fraction)

  @property
  def fits_in_memory(self):
    """Whether the peak fits in the usable memory (HBM less the reserve)."""
    return self.peak_memory_bytes <= self.usable_memory_bytes

  def summary(self):
    """A few lines: step time split, memory split, busiest axis."""
    mib = 2**20
    lines = [
        f"{self.graph!r} on {self.mesh_shape} ({self.topology.name}), "
        f"layout {self.layout_rules or '(replicated)'}",
        f"  step {self.step_time_s * 1e3:.4g} ms = compute "
        f"{self.compute_time_s * 1e3:.4g} ms + exposed comm "
        f"{self.comm_time_s * 1e3:.4g} ms "
        + (f"+ overlap interference {self.interference_time_s * 1e3:.4g} ms "
           if self.interference_time_s else "")
        + f"({len(self.collectives)} collectives, "
        f"{self.hidden_comm_time_s * 1e3:.4g} ms hidden)"
        + (f"; a call {self.wall_step_time_s * 1e3:.4g} ms with the chip's "
           f"{self.step_overhead_s * 1e3:.4g} ms per step"
           if self.step_overhead_s else ""),
        "  exposed comm by axis: " + ", ".join(
            f"{a} {t * 1e3:.4g} ms (+{h * 1e3:.4g} hidden)"
            for (a, t), h in zip(self.comm_time_by_axis.items(),
                                 self.hidden_comm_time_by_axis.values())),
        f"  peak memory {self.peak_memory_bytes / mib:.4g} MiB per device "
        f"(params {self.memory_by_category['params'] / mib:.4g}, gradients "
        f"{self.memory_by_category.get('gradients', 0) / mib:.4g}, optimizer "
        f"{self.memory_by_category['optimizer'] / mib:.4g}, activations "
        f"{self.memory_by_category['activations'] / mib:.4g}"
        + "".join(f", {c} {self.memory_by_category[c] / mib:.4g}"
                  for c in self.memory_by_category
                  if c not in ("params", "gradients", "optimizer",
                               "activations"))
        + f") of {self.usable_memory_bytes / mib:.6g} MiB usable ("
        f"{self.hbm_bytes / mib:.6g} MiB HBM less a "
        f"{self.memory_reserve_fraction:.0%} reserve)",
    ]
    return "\n".join(lines)

  def __repr__(self):
    return (f"CostReport(step_time_s={self.step_time_s:.6g}, "
            f"compute_time_s={self.compute_time_s:.6g}, "
            f"comm_time_s={self.comm_time_s:.6g}, "
            f"peak_memory_bytes={self.peak_memory_bytes})")

  def to_dataframe(self, view="ops"):
    """A pandas DataFrame of one view.

    Views:
      ``ops``: one row per op (collectives under the op that caused them,
        ``source_op``): compute and comm seconds, FLOPs, collective count.
      ``axes``: one row per mesh axis: its links and comm seconds.
      ``memory``: one row per category at the peak step, plus ``total``.
      ``collectives``: one row per collective.
      ``variables``: one row per variable: bytes per device, category.
    """
    import pandas as pd
    if view == "ops":
      rows = {}
      for c in self.op_costs:
        name = c.op_name if c.category == "compute" else c.source_op
        r = rows.setdefault(name, {"op": name, "compute_time_s": 0.0,
                                   "comm_time_s": 0.0, "flops_per_device": 0,
                                   "bytes_per_device": 0,
                                   "collectives": 0})
        if c.category == "compute":
          r["compute_time_s"] += c.time_s
          r["flops_per_device"] += c.flops_per_device
          r["bytes_per_device"] += c.bytes_per_device
        else:
          r["comm_time_s"] += c.time_s
          r["collectives"] += 1
      df = pd.DataFrame(list(rows.values()),
                        columns=["op", "compute_time_s", "comm_time_s",
                                 "flops_per_device", "bytes_per_device",
                                 "collectives"])
      df["time_s"] = df["compute_time_s"] + df["comm_time_s"]
      return df.set_index("op")
    if view == "axes":
      rows = []
      for a in self.mapping.axes:
        mine = [c for c in self.collectives if a.axis in c.mesh_axes]
        rows.append({"axis": a.axis, "size": a.size, "link": a.link_kind,
                     "structure": a.structure,
                     "bandwidth_bytes_per_s": a.bandwidth_bytes_per_s,
                     "latency_s": a.latency_s,
                     "collectives": len(mine),
                     "bytes_per_device": sum(c.bytes_per_device for c in mine),
                     "comm_time_s": self.comm_time_by_axis.get(a.axis, 0.0),
                     "hidden_comm_time_s": self.hidden_comm_time_by_axis.get(
                         a.axis, 0.0),
                     "total_comm_time_s": self.total_comm_time_by_axis.get(
                         a.axis, 0.0),
                     **self._overlap_split(a.axis)})
      return pd.DataFrame(rows).set_index("axis")
    if view == "memory":
      rows = [{"category": k, "bytes_per_device": v}
              for k, v in self.memory_by_category.items()]
      rows.append({"category": "total",
                   "bytes_per_device": self.peak_memory_bytes})
      df = pd.DataFrame(rows).set_index("category")
      df["fraction_of_hbm"] = df["bytes_per_device"] / self.hbm_bytes
      df["fraction_of_usable"] = (df["bytes_per_device"]
                                  / self.usable_memory_bytes)
      return df
    if view == "collectives":
      rows = [{"op": c.op_name, "source_op": c.source_op, "kind": c.kind,
               "mesh_axes": ",".join(c.mesh_axes), "group_size": c.group_size,
               "bytes_per_device": c.bytes_per_device,
               "reduction": c.reduction, "time_s": c.time_s}
              for c in self.collectives]
      return pd.DataFrame(rows, columns=["op", "source_op", "kind",
                                         "mesh_axes", "group_size",
                                         "bytes_per_device", "reduction",
                                         "time_s"])
    if view == "variables":
      cats = {v.name: v.memory_category for v in self.graph.all_variables}
      rows = [{"variable": n, "bytes_per_device": b,
               "category": cats.get(n, "params")}
              for n, b in self.variable_bytes_per_device.items()]
      return pd.DataFrame(rows, columns=["variable", "bytes_per_device",
                                         "category"]).set_index("variable")
    from mesh_tf.core.errors import MtfError
    raise MtfError(f"unknown CostReport view {view!r}; use one of {VIEWS}")
