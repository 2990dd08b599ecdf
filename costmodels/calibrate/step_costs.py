"""The fixed cost of one call of a lowered step, and what a collective's
bytes cost inside a step: two terms of ``docs/calibration_terms.md``.

**Per step** (:func:`fit_step_overhead`).  Calling a lowered training step
costs something whatever its records: Python hands the call and its
arguments to the TF runtime, the runtime starts one executor per device and
the caller waits for the last device's result.  The probe: reference
training steps (:func:`costmodels.calibrate.probes.step_probes`) of several
depths, the same graph with more layers, replicated.  Their times lie on a
line over their record counts, ``T = S + n * r``: the slope ``r`` is what
each record adds, the intercept ``S`` (at no records) the step's own cost,
:attr:`costmodels.hardware.ChipSpec.step_overhead_s`.

**Collective bytes in a step** (:func:`collective_volumes`, fitted in
:mod:`costmodels.calibrate.record_costs`).  The chained collective probes
time one collective after another, nothing else running; in a step the
collective's copies run on the same cores as the other devices' records
and share their memory bus, so each byte costs more, and the more bytes,
the more of the step's compute it meets.  The model steps with collectives
of different sizes (the wide MLP's megabyte gradients beside the small
models' kilobytes) price the extra seconds per byte of each collective's
volume (its fit's law), ``gamma``; calibration lowers each of the link's
collective fits' bandwidth by it: ``1 / (1 / bandwidth + gamma)``.

Example:
  >>> from costmodels.calibrate.timings import Sample
  >>> steps = [Sample("step", "", 8, 0, float(n), 2e-3 + n * 3e-5)
  ...          for n in (20, 80, 160)]
  >>> got = fit_step_overhead(steps)
  >>> round(got.seconds * 1e3, 6), round(got.record_s * 1e6, 6)
  (2.0, 30.0)
"""

from typing import NamedTuple

from costmodels.calibrate.least_squares import nonneg_lstsq
from costmodels.collective_fits import VOLUME_LAWS, find_fit


class StepOverhead(NamedTuple):
  """The line of the reference steps' times over their records.

  Attributes:
    seconds: its intercept: the fixed cost of one call of a step.
    record_s: its slope: seconds per record of the reference graph.
    rel_residual: RMS relative residual of the line.
    samples: reference steps it was fitted on.
  """
  seconds: float
  record_s: float
  rel_residual: float
  samples: int


def fit_step_overhead(samples):
  """The :class:`StepOverhead` of the ``step`` timings (``flops``: the
  step's record count; module docstring), non-negative least squares on
  relative residuals; None with fewer than two record counts."""
  steps = [s for s in samples if s.what == "step" and s.seconds > 0]
  if len({s.flops for s in steps}) < 2:
    return None
  (fixed, per), res = nonneg_lstsq([[1.0, s.flops] for s in steps],
                                   [s.seconds for s in steps])
  return StepOverhead(float(fixed), float(per), float(res), len(steps))


def collective_volumes(fits):
  """``(kind, group, nbytes) -> (volume bytes, seconds)``: the bytes a
  collective moves by the volume law of its chained fit among ``fits``
  (:class:`~costmodels.collective_fits.CollectiveFit` s) and the seconds
  its bandwidth prices them at; ``(0, 0)`` for a kind without a fit or a
  group of one.

  Example:
    >>> from costmodels.collective_fits import CollectiveFit
    >>> f = CollectiveFit("allreduce", "reduce_broadcast", 1e-5, 1e9,
    ...                   "1", "(p-1)n")
    >>> collective_volumes([f])("allreduce", 4, 1000)
    (3000.0, 3e-06)
  """
  def volume(kind, group, nbytes):
    fit = find_fit(fits, kind, nbytes)
    if fit is None or group <= 1:
      return 0.0, 0.0
    v = float(VOLUME_LAWS[fit.volume](group, nbytes))
    return v, v / fit.bandwidth_bytes_per_s
  return volume
