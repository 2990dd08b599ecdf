"""Microbatches, as one training-decision family: k, gradient accumulation
(:mod:`mesh_tf.training.microbatch`).  The step is built at the microbatch
size (the batch over k) and its update accumulates k of them; the search
walks k outside the program, as phases (each k builds every graph at
another batch size)."""

import dataclasses
import numbers

from mesh_tf.core.errors import MtfError
from autolayout.training.family import DecisionFamily

__all__ = ["FAMILY", "Microbatches", "divisors"]


class Microbatches(DecisionFamily):
  """``microbatches``: k >= 1, 1 for the step as built."""
  name = "microbatches"
  default = 1
  flag = "--microbatches"
  description = "gradient-accumulation steps k (a divisor of the batch)"
  example = "2"

  def check(self, value):
    if (isinstance(value, bool) or not isinstance(value, numbers.Integral)
        or value < 1):
      raise self._not_a_count(value, 1)
    return int(value)

  def rank(self, value):
    return value

  def configure(self, config, value):
    """The config at the microbatch size.

    Raises:
      MtfError: if the batch does not split into ``value`` microbatches.
    """
    if config.batch % value:
      raise MtfError(f"batch={config.batch} does not split into "
                     f"microbatches={value}; use a divisor of the batch")
    return dataclasses.replace(config, batch=config.batch // value)


FAMILY = Microbatches()


def divisors(n, most):
  """The microbatch counts up to ``most`` that divide a batch of ``n``."""
  return [k for k in range(1, min(n, most) + 1) if n % k == 0]
