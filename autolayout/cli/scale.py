"""The default training plan at scale: pipelined and unpipelined compared.

On a GPU cluster of several nodes or a TPU slice of at least 64 chips, a
model whose training state takes at least a sixteenth of one chip
(:func:`autolayout.meshes.pipeline_search.pipelining_applies`) is planned
by two searches, within :data:`SCALE_TIME_S` seconds together, whether
the question is ``solve --train`` or a bare ``solve`` (whose default
question is the training step; its plan is compared when, the step as
built fitting no layout, it searched the training decisions too):

1. the exact pipelined search (:mod:`autolayout.meshes.pipeline_search`:
   tensor x pipeline x data parallelism, chunks, microbatches, recompute,
   ZeRO stage, idle chips or padding), bounded by :data:`PIPELINE_TIME_S`;
2. the unpipelined mesh-shape and training-decision search
   (:mod:`autolayout.meshes.training_meshes`, CP-SAT) with the time left.

The answer is the plan with the smaller predicted step time, and it says
which spaces were compared and what each found.  When the unpipelined
search finds nothing (no mesh shape fits, or its time ran out) the
pipelined plan is the answer; when neither has a plan, the pipelined
search's error names the smallest chip count that would hold the model.
``--no-pipeline`` keeps the unpipelined search alone, with its whole
``--time-limit``.  ``--save`` writes whichever plan is the answer (a
pipelined plan holds its pipeline as a training decision,
:mod:`autolayout.plans.pipelined`).
"""

import time
from typing import Any, NamedTuple, Tuple

from costmodels import hardware
from autolayout.errors import InfeasibleLayoutError, TimeLimitError
from autolayout.meshes.pipeline_search import (PipelineInfeasibleError,
                                               pipelining_applies,
                                               search_pipelines)
from autolayout.cli.pipeline import pipeline_answer

#: Seconds for both searches together (the CLI's start-up comes on top).
SCALE_TIME_S = 16.0
#: At most this much of it for the pipelined search.
PIPELINE_TIME_S = 11.0
#: The unpipelined search is not started with less than this left.
MIN_CPSAT_S = 3.0


class ScaleChoice(NamedTuple):
  """What :func:`compare` chose.

  Attributes:
    answer: the pipelined plan's Answer, or None when the unpipelined
      plan won.
    unpipelined: ``(result, decisions_tried, meshes_tried)`` of the
      unpipelined search (None if it found no plan).
    compared: lines saying which spaces were compared and what each found.
  """
  answer: Any
  unpipelined: Any
  compared: Tuple[str, ...]


def applies(args, model, topology, num_devices):
  """Whether ``solve`` plans ``model`` on ``topology`` with both searches
  (no ``--no-pipeline``, ``--hint`` plan file or fixed training
  decisions, the time objective)."""
  if getattr(args, "no_pipeline", False) or args.hint:
    return False
  if dict(getattr(args, "fixed_decisions", None) or {}):
    return False
  if getattr(args, "objective", "time") != "time":
    return False
  return model.config is not None and pipelining_applies(
      model.config, topology, num_devices)


def compare(ctx, args, model, topology, budget, unpipelined_search,
            not_comparable=None):
  """Both searches, the faster plan (see the module docstring).

  ``unpipelined_search(time_limit_s)`` runs the unpipelined search and
  returns ``(result, decisions_tried, meshes_tried)``.
  ``not_comparable()``, called after it, says why its plan answers
  another question than the pipelined one (a bare ``solve`` whose step
  as built fits: no training decisions were searched), or returns None;
  the pipelined plan is then left out, and the lines say why.

  Raises:
    PipelineInfeasibleError: if neither space has a plan that fits
      (TimeLimitError if the pipelined search ran out of time first).
  """
  t0 = time.perf_counter()
  limit = min(args.time_limit, SCALE_TIME_S)
  budget_bytes = budget or hardware.usable_memory_bytes(topology.chip)
  piped, piped_error = None, None
  with ctx.progress(f"searching pipelined layouts of {model.name} on "
                    f"{topology.name}"):
    try:
      piped = search_pipelines(model.config, topology, budget_bytes,
                               time_limit_s=min(limit, PIPELINE_TIME_S))
    except (PipelineInfeasibleError, TimeLimitError) as e:
      piped_error = e
  left = limit - (time.perf_counter() - t0)
  flat, flat_note = None, None
  if left >= MIN_CPSAT_S:
    try:
      flat = unpipelined_search(left)
    except (InfeasibleLayoutError, TimeLimitError) as e:
      flat_note = f"no plan ({str(e).splitlines()[0]})"
  else:
    flat_note = (f"not run: {max(0.0, left):.1f} s of the {limit:g} s "
                 "left after the pipelined search")
  why_not = None if flat is None or not_comparable is None else (
      not_comparable())
  if piped is None and flat is None:
    raise piped_error
  lines = [f"{'searched' if why_not else 'compared'} the pipelined and "
           f"the unpipelined plan spaces within {limit:g} s:"]
  if why_not:
    lines.append(f"  pipelined: not compared ({why_not})")
    piped = None
  elif piped is not None:
    b = piped.best
    lines.append(f"  pipelined ({piped.status}, {piped.solve_time_s:.1f} "
                 f"s): step {b.step_time_s:.3f} s, {b.layout.describe()},"
                 f" idle chips {b.idle_chips}, padded sequences "
                 f"{b.padded_sequences}")
  else:
    lines.append(f"  pipelined: no plan ({piped_error})")
  if flat is not None:
    r = flat[0]
    lines.append(f"  unpipelined ({r.status}): step {r.step_time_s:.3f} s,"
                 f" mesh {r.report.mesh_shape.text}")
  else:
    lines.append(f"  unpipelined: {flat_note}")
  use_piped = piped is not None and (
      flat is None or piped.best.step_time_s < flat[0].step_time_s)
  lines.append("  chosen: " + ("pipelined" if use_piped else "unpipelined"))
  lines = tuple(lines)
  if use_piped:
    return ScaleChoice(pipeline_answer(args, topology, budget_bytes, piped,
                                       lines, config=model.config), flat,
                       lines)
  return ScaleChoice(None, flat, lines)
