"""Why a pipelined plan's decisions: each one moved to its neighbours and
the step priced again, as ``explain`` does for an unpipelined plan's
rules.

A pipelined plan (:mod:`autolayout.plans.pipelined`) is one point of the
pipelined layout space (:class:`~autolayout.training.pipeline_price.
PipelineLayout`).  Its counterfactuals are the points next to it on the
same chips: half or twice the stages (the data-parallel size moving the
other way), half or twice the tensor-parallel size (likewise), one chunk
per stage or two, half or twice the sequences per microbatch, the other
schedule, the other recompute choice, every other ZeRO stage, and the
other placements of the tensor axis.  Each is priced by the pipelined cost
model (:func:`~autolayout.training.pipeline_price.price_layout`) with a
balanced layer split; one that does not exist on these chips or does not
price says why, in words, instead of a number.
"""

from typing import NamedTuple

from mesh_tf.core.errors import MtfError
from autolayout.training import pipeline_price as pp


class Alternative(NamedTuple):
  """One decision of the plan moved to one other value, priced."""
  decision: str          # "stages", "tensor", "chunks", ...
  chosen: str            # the plan's value, in words
  alternative: str       # the other value, in words
  layout: object         # its PipelineLayout, or None (no such layout)
  step_time_s: float     # None when it does not price
  peak_memory_bytes: int  # None when it does not price
  fits: bool             # in the usable memory (None: not priced)
  why: str = ""          # why it has no price, or ""


def _sizes(lay, decision, factor):
  """``lay`` with ``decision`` ("stages" or "tensor") times ``factor`` and
  the data-parallel size divided by it (the same chips), or the reason
  that cannot be."""
  field = "stages" if decision == "stages" else "model"
  new = getattr(lay, field) * factor
  data = lay.data / factor
  if new < 1 or new != int(new):
    return None, f"{decision}={getattr(lay, field)} has no half"
  if data != int(data):
    return None, (f"data={lay.data} does not divide by {factor:g}: the "
                  f"other {decision} count would leave chips over")
  return lay._replace(**{field: int(new), "data": int(data)}), ""


def _moves(lay):
  """``[(decision, chosen, alternative, layout or None, why), ...]``."""
  out = []
  for decision, field in (("stages", "stages"), ("tensor", "model")):
    now = getattr(lay, field)
    for factor in (0.5, 2) if now > 1 else (2,):
      moved, why = _sizes(lay, decision, factor)
      target = now * factor
      label = (f"{int(target)}" if target == int(target)
               else f"{target:g}")
      if moved is not None and moved.stages == 1 and decision == "stages":
        why, moved = ("one stage is no pipeline: `explain` without the "
                      "plan, or `solve --no-pipeline`, prices that"), None
      out.append((decision, str(now), label, moved, why))
  if lay.stages > 1:
    other = 1 if lay.chunks > 1 else 2
    moved = lay._replace(chunks=other, schedule=None)
    out.append(("chunks", str(lay.chunks), str(other), moved, ""))
    schedules = ("gpipe", "1f1b") if lay.chunks == 1 else ()
    for s in schedules:
      if s != lay.schedule_name():
        out.append(("schedule", lay.schedule_name(), s,
                    lay._replace(schedule=s), ""))
  for rows in (lay.microbatch // 2, lay.microbatch * 2):
    if rows >= 1 and rows != lay.microbatch:
      out.append(("microbatch rows", str(lay.microbatch), str(rows),
                  lay._replace(microbatch=rows), ""))
  other = "none" if lay.recompute == "full" else "full"
  out.append(("recompute", lay.recompute, other,
              lay._replace(recompute=other), ""))
  for z in range(4):
    if z != lay.zero:
      out.append(("ZeRO stage", str(lay.zero), str(z),
                  lay._replace(zero=z), ""))
  if lay.model > 1:
    for place in pp.PLACEMENTS:
      if place != lay.placement:
        out.append(("tensor placement", lay.placement, place,
                    lay._replace(placement=place), ""))
  return out


def alternatives(config, topology, lay, usable_bytes):
  """``[Alternative, ...]`` of pipelined layout ``lay`` of zoo ``config``
  on ``topology`` (module docstring); ``usable_bytes``: the memory a device
  may use (whether each alternative fits)."""
  memo = {}
  out = []
  for decision, chosen, alt, moved, why in _moves(lay):
    if moved is None:
      out.append(Alternative(decision, chosen, alt, None, None, None, None,
                             why))
      continue
    try:
      priced = pp.price_layout(config, topology, moved, memo=memo)
    except MtfError as e:
      out.append(Alternative(decision, chosen, alt, moved, None, None, None,
                             str(e).split(";")[0]))
      continue
    peak = int(priced.peak_memory_bytes)
    out.append(Alternative(decision, chosen, alt, moved,
                           float(priced.step_time_s), peak,
                           peak <= usable_bytes))
  return out
