"""The fixed cost of a compute record inside a lowered training step, per
pricing class, fitted on whole steps of small models.

Why: the micro-benchmarks (:mod:`costmodels.calibrate.probes`) time one
kernel repeated in a chain, so after its first repetition the kernel runs
with warm caches, a warm executor and one TF op per record.  A lowered step
is different: one record of a layer norm, a softmax or an SGD update is
several TF ops (about 2.4 per record in the zoo's Transformer and MLP, 1.2
in the reference MLP of :func:`~costmodels.calibrate.probes.reference_step`),
and every op of a step of hundreds of different ops starts cold.  Measured
on 8 logical CPU devices of a 2-core machine, a training step of the zoo's
models at sizes where compute is negligible costs 60-180 us per record
(450 us per record of a 3-D conv net), against the 15-30 us per record of
the reference MLP and 6-20 us per chained kernel; priced at the latter, every
prediction of ``benchmarks/cost_model_truth.py`` came out about 2x too fast.

The fit: each ``model_step`` :class:`~costmodels.calibrate.timings.Sample` is
one training step of a small model with its compute records counted per
pricing class ``c`` (the record's contraction pattern, or ``elementwise``:
the key :func:`costmodels.compute.compute_time` prices it by), replicated,
data parallel or mixed
(:func:`~costmodels.calibrate.model_steps.model_step_layouts`).  Its
time, less the FLOP and byte terms the class fits already price, is

    ``T - work = sum_c n_c * F_c + m * F_msg + k * F_coll + B * beta``

with ``B`` the bytes its records read and write per device and ``beta``
the seconds a byte costs in a step beyond what the class fits charge.
The chains time each kernel on the same few buffers, warm in cache; in a
step every record reads what another wrote among megabytes of others, and
the devices' records share one memory bus.  Measured on 8 logical CPU
devices of a 2-core machine (``benchmarks/cost_model_truth.py``, 49
layouts of four models): the steps cost about 100 us a record plus 0.35-0.5
ms per MB a device moves, against the chains' 9 GB/s (0.1 ms per MB); only
the wide MLP of :data:`~costmodels.calibrate.model_steps.MODEL_STEPS` moves
enough bytes to show it.  ``m`` is the messages of its collectives (``sum(group_size - 1)``: the
slices each device receives; 0 replicated).  The same holds for the
collectives as for the records: a chained all-reduce probe repeats one
collective hot, while each slice a device receives in a step is a
send/receive pair among hundreds of other ops (about 50-120 us a message
in steps, against 2-30 us in the chains, measured as above).  ``k`` is
the number of its collectives, whatever their groups: at each one the
group's members wait for each other before the step goes on, which a
chain, where one collective follows another with nothing between, never
shows.  Measured in ``benchmarks/cost_model_truth.py`` (49 layouts of four
models on 8 logical CPU devices), a blocking all-reduce over 2 devices
costs 0.1-0.2 ms in a step against the 0.02 ms its messages are priced at,
and every layout with activation collectives came out 15-18% fast without
it.  ``k`` counts only the collectives the step waits for: a gradient
sync's members wait for each other too, but no compute waits for them
(:mod:`costmodels.overlap`), and in steps of a tiny MLP interleaved in
shuffled rounds a sync over 8 devices cost 55 us against 102-151 us for an
all-reduce of activations over 2-8 devices.  ``F_msg`` and ``F_coll`` are
told apart only by steps whose waited collectives per message differ
(data parallel on ``x:n``, none, beside a mixed layout on
``a:2;b:n/2``): else only ``F_msg`` is fitted.

``F_coll`` is fitted only for devices that each have their own engine
(GPUs, TPUs: ``waits``).  Logical CPU devices share the host's cores, and a
member that waits at a collective leaves its core to the members still
computing: the machine's work is the same, so the wait costs step time only
where every core would idle, which the per-message cost and the shared
compute factor already price.  Fitted there anyway, ``F_coll`` was
decided by the one or two steps that wait (the quick plan's mixed and
split Transformer steps) and took their noise: six quick calibration
files on 8 logical CPU devices of a 2-core machine put it at 0-716 us, and
the files with it above 150 us ranked the truth benchmark's MLP and MoE
layouts at Spearman 0.42-0.66, against 0.81-0.97 refitted from the same
timings without it (``docs/calibration_terms.md``).

with ``F_c >= 0`` the fixed seconds of one record of class ``c``: non-
negative least squares on relative residuals, with a weak ridge that pulls
each ``F_c`` towards the common ``F = sum(T - work) / sum(n)``, so that a
class the steps cannot tell apart from another (a convolution and its
filter gradient always come together) shares their cost instead of taking
all or none of it.  The intercept (a fixed cost per step: the call and its
arguments) is not fitted here: the reference steps price it
(:func:`costmodels.calibrate.step_costs.fit_step_overhead`, the chip's
``step_overhead_s``), and it is taken off each step's time first
(``step_s``).  Each collective's bytes are priced by its chained fit and,
where the steps vary them apart from their messages, by ``gamma`` more a
byte of volume (``collective_volume``; see
:mod:`costmodels.calibrate.step_costs`).

In the topology, ``chip.launch_overhead_s`` becomes ``F_elementwise``
(at least what one kernel costs to launch alone, which noisy steps
cannot undercut),
each class fit's ``latency_s`` becomes ``max(F_c - F_elementwise, 0)`` and
its ``bandwidth_bytes_per_s`` ``1 / (1 / bandwidth + beta)``;
on one process, each collective fit's ``latency_s`` (seconds per step of
its law) becomes at least ``F_msg``, and the link's ``barrier_s``
(:attr:`costmodels.hardware.LinkSpec.barrier_s`) ``F_coll``: data, as
before, with the same pricing formulas.

Example:
  >>> from costmodels.calibrate.timings import Sample
  >>> steps = [Sample("model_step", "", 8, 0, 0.0, 10 * 1e-4 + 2 * 5e-4,
  ...                 records=(("elementwise", 10, 0, 0), ("conv", 2, 0, 0))),
  ...          Sample("model_step", "", 8, 0, 0.0, 30 * 1e-4,
  ...                 records=(("elementwise", 30, 0, 0),))]
  >>> got = fit_record_costs(steps, lambda c: None, ridge=0.0)
  >>> {c: round(f * 1e6, 3) for c, f in got.costs.items()}
  {'conv': 500.0, 'elementwise': 100.0}
"""

import math
from typing import Dict, NamedTuple

import numpy as np

from costmodels.calibrate import least_squares
from costmodels.calibrate.timings import CalibrationError

#: How strongly each class's cost is pulled towards the common cost per
#: record (a relative deviation of 1 costs as much as ``sqrt(RIDGE)`` of
#: one step's relative residual).  Weak: the steps decide where they can.
RIDGE = 1e-4


class RecordCosts(NamedTuple):
  """Fixed seconds per compute record in a lowered step, per class.

  Attributes:
    costs: ``{class: seconds}`` for every class the steps contain.
    common_s: the common cost per record (every class alike).
    rel_residual: RMS relative residual of the steps' times.
    samples: steps it was fitted on.
    message_s: fixed seconds per message of a collective in a step (each
      slice a device receives), where steps with collectives were timed;
      else 0.
    byte_s: seconds per byte a record moves in a step beyond its class
      fit's byte term (``beta``; 0 where the steps show none).
    collective_s: fixed seconds per collective in a step, whatever its
      group (``F_coll``; 0 where the steps cannot tell it from
      ``message_s``).
    collective_byte_s: seconds per byte of a collective's volume in a step
      beyond its chained fit's bandwidth (``gamma``; 0 where the steps'
      collective bytes do not vary apart from their messages, see
      :mod:`costmodels.calibrate.step_costs`).
  """
  costs: Dict[str, float]
  common_s: float
  rel_residual: float
  samples: int
  message_s: float = 0.0
  byte_s: float = 0.0
  collective_s: float = 0.0
  collective_byte_s: float = 0.0


def _work_s(cls, count, flops, nbytes, class_fit):
  """Seconds of the FLOP and byte terms of ``count`` records of ``cls``
  (their fixed costs excluded), by the class's fit if it has one."""
  fit = class_fit(cls)
  if fit is None:
    return 0.0
  return (flops / fit.flops_per_s if math.isfinite(fit.flops_per_s) else 0.0
          ) + (nbytes / fit.bandwidth_bytes_per_s
               if math.isfinite(fit.bandwidth_bytes_per_s) else 0.0)


def _nnls(a, y):
  """``argmin |a @ c - y|`` over ``c >= 0`` (SciPy's NNLS)."""
  return least_squares.nnls(a, y)


def fit_record_costs(samples, class_fit, ridge=RIDGE, threaded=None,
                     step_s=0.0, collective_volume=None, waits=True):
  """Fits the fixed cost of one record of each class (module docstring).

  Args:
    samples: timings; the ``model_step`` ones are used.
    class_fit: ``class -> ComputeClassFit or None`` (e.g.
      ``ChipSpec.compute_fit``): what prices the FLOPs and bytes.
    ridge: the pull towards the common cost (:data:`RIDGE`).
    threaded: ``(batch, rows, cols) -> seconds``: what a matrix product
      of that shape costs for its shape alone (the chip's threaded-kernel
      and per-matrix costs, :func:`costmodels.compute.handoff_time`,
      priced apart from the record's fixed cost; default none).
    step_s: the fixed cost of one call of a step
      (:func:`~costmodels.calibrate.step_costs.fit_step_overhead`), taken
      off each step's time first.
    collective_volume: ``(kind, group, nbytes) -> (volume, seconds)``
      (:func:`~costmodels.calibrate.step_costs.collective_volumes`): each
      collective's volume and what its chained fit prices it at; the
      seconds are taken off each step's time as known work and, where the
      steps' volumes vary apart from their messages, ``gamma`` is fitted
      on the volumes (default none: no such term).
    waits: whether a waited collective can cost the step time of its own
      (``F_coll``): True for devices that each have their own engine; False
      for devices that share the host's cores (logical CPU devices), where
      a member that waits leaves its core to the others (module docstring),
      and ``F_coll`` is 0.

  Returns:
    A :class:`RecordCosts`, or None without ``model_step`` timings.

  Raises:
    CalibrationError: if a step has no records.
  """
  steps = [s for s in samples if s.what == "model_step"]
  if not steps:
    return None
  classes = sorted({r[0] for s in steps for r in s.records if r[1] > 0})
  if not classes:
    raise CalibrationError("the model steps have no compute records; "
                           "measure steps of models with compute")
  xs, ys, moved, volumes = [], [], [], []
  for s in steps:
    counts = {c: 0 for c in classes}
    work = 0.0
    for cls, count, flops, nbytes, *matrices in s.records:
      counts[cls] = counts.get(cls, 0) + count
      work += _work_s(cls, count, flops, nbytes, class_fit)
      if threaded is not None and matrices:
        work += sum(threaded(m) for m in matrices[0])
    moved.append(float(sum(r[3] for r in s.records)))
    vol = 0.0
    if collective_volume is not None:
      for kind, group, nbytes in s.transfers:
        v, t = collective_volume(kind, group, nbytes)
        vol, work = vol + v, work + t
    volumes.append(vol)
    # A step is mostly fixed costs by construction; keep a floor so that
    # a noisy one cannot go negative.
    ys.append(max(s.seconds - step_s - work, 0.1 * s.seconds))
    xs.append([float(counts[c]) for c in classes])
  msgs = [float(s.messages) for s in steps]
  # The common cost per record, from the steps without collectives if any.
  plain = [i for i, m in enumerate(msgs) if not m] or range(len(steps))
  common = sum(ys[i] for i in plain) / sum(sum(xs[i]) for i in plain)
  with_msgs = any(msgs)
  if with_msgs:
    xs = [x + [m] for x, m in zip(xs, msgs)]
  # The cost per collective the step waits for, only where those vary
  # apart from the messages (else it is the cost per message again under
  # another name).
  colls = [float(_waited(s)) for s in steps]
  with_colls = waits and with_msgs and _varies_apart(colls, msgs)
  if with_colls:
    xs = [x + [k] for x, k in zip(xs, colls)]
  # The byte term only where the steps' bytes vary apart from their
  # records (else it is the record costs again under another name).
  with_bytes = _tells_apart(moved, [sum(x[:len(classes)]) for x in xs])
  if with_bytes:
    xs = [x + [b] for x, b in zip(xs, moved)]
  # The collectives' bytes only where their volume per message varies
  # apart (else it is the cost per message again under another name).
  with_vol = with_msgs and _tells_apart(volumes, msgs)
  if with_vol:
    xs = [x + [v] for x, v in zip(xs, volumes)]
  extra = int(with_msgs) + int(with_colls) + int(with_bytes) + int(with_vol)
  x = np.array(xs) / np.array(ys)[:, None]
  y = np.ones(len(ys))
  if ridge > 0 and len(classes) > 1:
    w = math.sqrt(ridge)
    pull = np.hstack([w * np.eye(len(classes)) / common,
                      np.zeros((len(classes), extra))])
    x = np.vstack([x, pull])
    y = np.concatenate([y, w * np.ones(len(classes))])
  coef = _nnls(x, y)
  pred = np.array(xs) @ np.array(coef)
  res = float(np.sqrt(np.mean(np.square((pred - np.array(ys))
                                        / np.array(ys)))))
  return RecordCosts({c: float(f) for c, f in zip(classes, coef)},
                     float(common), res, len(steps),
                     float(coef[len(classes)]) if with_msgs else 0.0,
                     float(coef[len(xs[0]) - 1 - with_vol]) if with_bytes
                     else 0.0,
                     float(coef[len(classes) + 1]) if with_colls else 0.0,
                     float(coef[-1]) if with_vol else 0.0)


def _waited(step):
  """The collectives a ``model_step`` sample's step waits for: its
  ``blocking`` ones; in files written before, every collective (and before
  those were counted, ``messages / (n - 1)``: steps on ``x:n`` alone)."""
  if step.blocking is not None:
    return step.blocking
  return step.collectives or step.messages // max(1, step.group_size - 1)


def _varies_apart(counts, msgs):
  """Whether ``counts`` per message varies by 2x or more across the steps
  with messages (0 included: steps whose collectives are all gradient
  syncs beside steps that wait for some)."""
  per = [k / m for k, m in zip(counts, msgs) if m > 0]
  return bool(per) and max(per) > 0 and (
      min(per) == 0 or max(per) >= 2 * min(per))


def _tells_apart(moved, records):
  """Whether ``moved`` per record (or message) varies by 2x or more
  across the steps that have records (messages)."""
  per = [b / n for b, n in zip(moved, records) if n > 0]
  return bool(per) and min(per) > 0 and max(per) >= 2 * min(per)
