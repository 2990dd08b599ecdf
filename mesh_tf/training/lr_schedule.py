"""Learning-rate schedules, and one schedule per group of variables.

Mesh TensorFlow's ``optimize.py`` describes a schedule as a list of
*factors*: each is a number or a function ``f(step, total_train_steps)``,
and the learning rate of a step is their product
(:func:`product_learning_rate`).  Its multi-schedule optimizers
(``AdafactorWithMultiLRSchedule``, ``AdamWithMultiLRSchedule`` in
:mod:`mesh_tf.training.optimize`) give every variable whose name matches one of a
list of regexes that regex's schedule; the others keep the optimizer's own
learning rate.

mesh-tf has no TensorFlow global step: ``step`` is a scalar mtf Tensor (the
multi-schedule optimizers keep one, ``<name>/step``, holding the number of
updates already applied, i.e. 0 at the first update, as the original's
global step was) or a Python number.  Factors then build mtf ops, so the
schedule runs on the mesh with the rest of the update.

Example:
  >>> warmup = lambda step, total: mtf.minimum((step + 1.0) / 100.0, 1.0)
  >>> product_learning_rate(49, 1000, factors=[0.01, warmup])  # doctest: +SKIP
"""

import re
from typing import Any, Optional, Sequence, Tuple

from mesh_tf.core.errors import MtfError
from mesh_tf.graph import Tensor
from mesh_tf.ops import elementwise as ew

__all__ = ["DEFAULT_TRAIN_STEPS", "compute_lr_for_step",
           "product_learning_rate"]

# The original's default for ``compute_lr_for_step(train_steps=)``: 2**19.
DEFAULT_TRAIN_STEPS = 524288


def _times(a, b):
  """``a * b`` for numbers and scalar mtf Tensors alike."""
  if isinstance(a, Tensor) or isinstance(b, Tensor):
    return ew.multiply(a, b)
  return a * b


def product_learning_rate(step, total_train_steps, factors, offset=0):
  """The learning rate at ``step``: the product of ``factors``.

  Args:
    step: a scalar mtf Tensor or a number (updates applied so far).
    total_train_steps: a number, passed to every function factor.
    factors: a sequence of numbers and functions
      ``f(step, total_train_steps)`` returning a number or a scalar mtf
      Tensor.
    offset: subtracted from ``step`` and from ``total_train_steps`` before
      the functions see them (e.g. the first step of a fine-tuning phase).

  Returns:
    A number if every factor is a number, else a scalar mtf Tensor.

  Raises:
    MtfError: if ``factors`` is not a sequence.
  """
  if not isinstance(factors, (list, tuple)):
    raise MtfError(f"product_learning_rate(factors=) takes a list of numbers "
                   f"and functions f(step, total_train_steps), got "
                   f"{factors!r}; wrap a single factor as [factor]")
  shifted = step
  if offset:
    shifted = ew.subtract(step, offset) if isinstance(step, Tensor) else (
        step - offset)
  total = total_train_steps - offset
  rate = 1.0
  for factor in factors:
    rate = _times(rate, factor(shifted, total) if callable(factor)
                  else factor)
  return rate


def _as_factors(schedule):
  """A schedule as a tuple of factors; None (the base rate) stays None."""
  if schedule is None:
    return None
  if isinstance(schedule, (list, tuple)):
    return tuple(schedule)
  return (schedule,)  # one number or function, as a one-factor product


def compute_lr_for_step(schedules, learning_rate,
                        train_steps=DEFAULT_TRAIN_STEPS, step=None):
  """The learning rate of each schedule at ``step``.

  Args:
    schedules: a sequence with one entry per variable group: None (use
      ``learning_rate``) or a list of factors for
      :func:`product_learning_rate`.
    learning_rate: the rate for None entries.
    train_steps: ``total_train_steps`` for the factors.
    step: a scalar mtf Tensor or number.  The original read TF's global
      step here; mesh-tf has none, so a schedule with factors needs it.

  Returns:
    A list of rates (numbers or scalar mtf Tensors), one per schedule.  The
    original also wrote each as a TF summary ``alt_learning_rate``; mesh-tf
    does not (add ``mtf.scalar_summary`` of a rate if you want it).

  Raises:
    MtfError: if a schedule has factors and ``step`` is None.
  """
  rates = []
  for index, schedule in enumerate(schedules):
    factors = _as_factors(schedule)
    if factors is None:
      rates.append(learning_rate)
      continue
    if step is None:
      raise MtfError(
          f"compute_lr_for_step: schedule {index} has factors but step is "
          "None; mesh-tf has no global step, pass step= (a scalar mtf Tensor "
          "or a number)")
    rates.append(product_learning_rate(step, train_steps, list(factors)))
  return rates


def check_variable_groups(variable_search, alt_lr_schedules, owner):
  """The validated ``(patterns, schedules)`` of a multi-schedule optimizer.

  Both None means "no groups" (the optimizer behaves as its base class).

  Raises:
    MtfError: naming ``owner``'s option, if only one is given, their lengths
      differ, or a pattern is not a valid regex.
  """
  if variable_search is None and alt_lr_schedules is None:
    return None, None
  if variable_search is None or alt_lr_schedules is None:
    given, missing = (("variable_search", "alt_lr_schedules")
                      if alt_lr_schedules is None
                      else ("alt_lr_schedules", "variable_search"))
    raise MtfError(f"{owner}: {given} is given but {missing} is None; give "
                   "both (one schedule per regex) or neither")
  if isinstance(variable_search, str):
    raise MtfError(f"{owner}: variable_search={variable_search!r} is one "
                   "string; give a list of regexes, e.g. [" +
                   repr(variable_search) + "]")
  patterns = tuple(variable_search)
  schedules = tuple(_as_factors(s) for s in alt_lr_schedules)
  if len(patterns) != len(schedules):
    raise MtfError(f"{owner}: variable_search has {len(patterns)} regexes "
                   f"but alt_lr_schedules has {len(schedules)} schedules; "
                   "give one schedule per regex")
  for pattern in patterns:
    try:
      re.compile(pattern)
    except (re.error, TypeError) as e:
      raise MtfError(f"{owner}: variable_search entry {pattern!r} is not a "
                     f"regex ({e})") from None
  return patterns, schedules


def rate_for_variable(name: str, patterns: Sequence[str],
                      rates: Sequence[Any], default: Any) -> Any:
  """The rate of the first pattern that ``re.search``-matches ``name``.

  The original looped over all patterns and kept the last iteration's
  update, so only its last regex took effect; here the first match wins,
  which is what its docstring describes, and equals the original whenever
  at most one regex matches a variable.
  """
  for pattern, rate in zip(patterns, rates):
    if re.search(pattern, name) is not None:
      return rate
  return default


def group_rates(patterns: Optional[Tuple[str, ...]], schedules, default,
                train_steps, step):
  """A function ``name -> rate`` for one update, the schedules evaluated
  once (not once per variable) at ``step``."""
  if patterns is None:
    return lambda name: default
  rates = compute_lr_for_step(schedules, default, train_steps, step=step)
  return lambda name: rate_for_variable(name, patterns, rates, default)
