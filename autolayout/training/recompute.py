"""Recompute, as one training-decision family: how many of the L blocks
recompute their activations in the backward pass instead of keeping them
(:mod:`mesh_tf.models`' ``recompute``), and the counts the search offers."""

import dataclasses
import numbers

from autolayout.training.family import DecisionFamily

__all__ = ["FAMILY", "Recompute", "choices"]


class Recompute(DecisionFamily):
  """``recompute``: a count of blocks, 0 for the step as built."""
  name = "recompute"
  default = 0
  flag = "--recompute"
  description = "how many blocks recompute their activations (0..layers)"
  example = "0"

  def check(self, value):
    if (isinstance(value, bool) or not isinstance(value, numbers.Integral)
        or value < 0):
      raise self._not_a_count(value, 0)
    return int(value)

  def rank(self, value):
    return value

  def configure(self, config, value):
    return dataclasses.replace(config, recompute=value)


FAMILY = Recompute()


def choices(layers, count=5):
  """The recompute counts the search offers: ``count`` evenly spaced counts
  from 0 to ``layers`` (for 96 layers and 5: 0, 24, 48, 72, 96)."""
  if count < 2 or layers == 0:
    return (0, layers) if layers else (0,)
  return tuple(sorted({layers * i // (count - 1) for i in range(count)}))


def add_choice_vars(model, decisions, chosen):
  """The CP-SAT indicators :math:`v_r = \\sum_{c = (\\cdot, r)} z_c` of each
  recompute count ``r`` among the candidates' ``decisions`` (``chosen``:
  their :math:`z_c`, in the same order); returns ``{r: v_r}``."""
  counts = sorted({d.recompute for d in decisions})
  w = {r: model.new_bool_var(f"recompute[{r}]") for r in counts}
  for r, var in w.items():
    model.add(var == sum(z for d, z in zip(decisions, chosen)
                         if d.recompute == r))
  return w
