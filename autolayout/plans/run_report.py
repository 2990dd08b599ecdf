"""What running a plan measured (:class:`RunReport`), and the topology of
the devices a (scaled-down) plan runs on (:func:`scale_topology`): shared
by :mod:`autolayout.plans.run` and :mod:`autolayout.plans.run_pipelined`."""

import dataclasses
import statistics
from typing import Optional, Tuple

__all__ = ["RunReport", "scale_topology"]


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
