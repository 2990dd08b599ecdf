"""What running a plan measured (:class:`RunReport`), how its steps are
timed (:func:`timed_steps`), and the topology of the devices a
(scaled-down) plan runs on (:func:`scale_topology`): shared
by :mod:`autolayout.plans.run` and :mod:`autolayout.plans.run_pipelined`."""

import dataclasses
import statistics
import time
from typing import Optional, Tuple

__all__ = ["RunReport", "scale_topology", "timed_steps"]


def timed_steps(step, batch, warmup, steps, allocator_peak=None):
  """Runs ``step(**batch)`` ``warmup`` times (the first one timed alone:
  it traces and builds), then ``steps`` timed times.

  ``allocator_peak`` is None or ``(reset, read)``: the peak is reset after
  the warm-up and read after the timed steps.

  Returns:
    ``(losses, first step s, timed step s, peaks or None)``.
  """
  losses = []
  t0 = time.perf_counter()
  losses.append(float(step(**batch)))
  first = time.perf_counter() - t0
  for _ in range(max(warmup - 1, 0)):
    losses.append(float(step(**batch)))
  if allocator_peak is not None:
    allocator_peak[0]()
  times = []
  for _ in range(steps):
    t0 = time.perf_counter()
    losses.append(float(step(**batch)))
    times.append(time.perf_counter() - t0)
  peaks = tuple(allocator_peak[1]()) if allocator_peak is not None else None
  return losses, first, times, peaks


@dataclasses.dataclass(frozen=True)
class RunReport:
  """What :func:`run_plan` measured, next to what the plan predicted.

  Times are seconds, memory bytes per device.  ``repriced_step_time_s`` is
  the plan priced on ``repriced_on`` (the topology of the devices at hand,
  e.g. a calibrated file), or None.  ``measured_peak_bytes`` is None where
  the devices keep no allocator statistics (logical CPU devices).
  """
  plan_name: str
  mesh: str
  devices: Tuple[str, ...]
  warmup: int
  step_times_s: Tuple[float, ...]
  losses: Tuple[float, ...]
  predicted_step_time_s: float
  predicted_on: str
  repriced_step_time_s: Optional[float]
  repriced_on: Optional[str]
  predicted_state_bytes: int
  measured_state_bytes: Tuple[int, ...]
  predicted_peak_bytes: int
  measured_peak_bytes: Optional[Tuple[int, ...]]
  decisions: Optional[dict]
  first_step_s: float
  pipeline: Optional[dict] = None

  @property
  def measured_step_time_s(self):
    """The median of the timed steps."""
    return statistics.median(self.step_times_s)

  @property
  def loss_went_down(self):
    return self.losses[-1] < self.losses[0]

  def as_dict(self):
    d = dataclasses.asdict(self)
    d["measured_step_time_s"] = self.measured_step_time_s
    d["loss_went_down"] = self.loss_went_down
    for k in ("devices", "step_times_s", "losses", "measured_state_bytes"):
      d[k] = list(d[k])
    if d["measured_peak_bytes"] is not None:
      d["measured_peak_bytes"] = list(d["measured_peak_bytes"])
    return d


def scale_topology(topology, chips):
  """``topology`` cut to ``chips`` chips, keeping its innermost (fastest)
  physical dims first: e.g. h100x8-nodes2 (node:2, gpu:8) cut to 8 chips is
  one node of 8 GPUs.  None if no cut of its dims has that many chips."""
  if topology.num_chips == chips:
    return topology
  left, dims = chips, []
  for d in reversed(topology.dims):
    q = max(x for x in range(1, d.size + 1) if d.size % x == 0
            and left % x == 0)
    left //= q
    dims.append(d._replace(size=q))
  if left != 1:
    return None
  return topology._replace(name=f"{topology.name} cut to {chips} chips",
                           dims=tuple(reversed(dims)))
