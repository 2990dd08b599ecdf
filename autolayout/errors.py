"""Errors raised by the layout search (all subclasses of ``mtf.MtfError``)."""

from mesh_tf.core.errors import MtfError


class AutoLayoutError(MtfError):
  """The layout search could not run or did not produce a layout."""


class InfeasibleLayoutError(AutoLayoutError):
  """No valid layout keeps per-device memory within the budget.

  Attributes:
    memory_budget: the budget asked for, in bytes per device.
    min_peak_bytes: the smallest peak memory per device that any valid
      layout reaches on this mesh (None if it could not be computed).
    dominating: ``(tensor name, bytes per device)`` pairs of the largest
      tensors live at the peak of the memory-minimal layout.
  """

  def __init__(self, message, memory_budget=None, min_peak_bytes=None,
               dominating=()):
    super().__init__(message)
    self.memory_budget = memory_budget
    self.min_peak_bytes = min_peak_bytes
    self.dominating = tuple(dominating)


class SolverError(AutoLayoutError):
  """CP-SAT returned an invalid model or no solution within the time limit."""
