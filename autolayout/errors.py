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
    floor_bytes: where no search ran because the variables alone cannot
      fit, the least bytes per device they need (spread evenly over every
      device), else None.
    num_devices, min_devices: with ``floor_bytes``, the devices it was
      spread over, and the fewest devices of this budget that could hold
      the variables.
  """

  def __init__(self, message, memory_budget=None, min_peak_bytes=None,
               dominating=(), floor_bytes=None, num_devices=None,
               min_devices=None):
    super().__init__(message)
    self.memory_budget = memory_budget
    self.min_peak_bytes = min_peak_bytes
    self.dominating = tuple(dominating)
    self.floor_bytes = floor_bytes
    self.num_devices = num_devices
    self.min_devices = min_devices


class ImportOrderError(AutoLayoutError):
  """TensorFlow was imported before OR-Tools' CP-SAT in this process."""


def tensorflow_loaded_first():
  """True if this process imported TensorFlow before CP-SAT (the rule
  lives in :mod:`mesh_tf.startup.import_order`)."""
  from mesh_tf.startup import import_order  # pylint: disable=g-import-not-at-top
  return import_order.tensorflow_loaded_first()


def check_import_order():
  """Raises ImportOrderError instead of letting CP-SAT crash the process.

  With TensorFlow imported first, CP-SAT objects crash the interpreter
  (in ``solve`` or when garbage-collected): the two libraries' protobuf
  runtimes clash.
  """
  if tensorflow_loaded_first():
    raise ImportOrderError(
        "TensorFlow was imported before OR-Tools' CP-SAT in this process, "
        "and CP-SAT crashes in that order (a protobuf clash between the "
        "two); import mesh_tf (or ortools.sat.python.cp_model) before "
        "tensorflow, or run the search in its own process (mtf-layout)")


class SolverError(AutoLayoutError):
  """CP-SAT returned an invalid model or no solution within the time limit."""


class PlanError(AutoLayoutError):
  """A plan file or :class:`~autolayout.plans.plan.Plan` cannot be used."""


class PlanFormatError(PlanError):
  """A plan file is not valid JSON, or not of a schema this version reads."""


class PlanMismatchError(PlanError):
  """A plan does not match the graph (or mesh) it is applied to.

  Attributes:
    changes: one short line per difference, e.g. ``"dim d_ff=2048 -> 4096"``
      or ``"missing variable layer_0/w"``.
  """

  def __init__(self, message, changes=()):
    super().__init__(message)
    self.changes = tuple(changes)


class ExportError(PlanError):
  """A plan cannot be expressed in another framework's sharding terms."""


class TimeLimitError(SolverError):
  """The time limit ran out before any layout was found (while building the
  program, or before CP-SAT's first solution)."""
