"""What a training-decision family is: one registered thing that owns its
value type, its JSON codec, its command-line text, the rewrite that builds
the training step for a value, and its simplicity rank.

A family (parameter dtype, ZeRO stage, recompute, microbatches, pipeline
stages) is a :class:`DecisionFamily` instance defined in its own
module next to its search choices and CP-SAT builder, and listed once in
:data:`autolayout.training.families.FAMILIES`.  Everything else reads the
families from there: :class:`~autolayout.training.families.TrainingDecisions`
has one field per family, plan files encode and decode each value with its
family's codec, the CLI parses each ``--flag`` with its family's
:meth:`~DecisionFamily.parse`, and
:func:`~autolayout.training.decisions.build_training` applies each value
with its family's :meth:`~DecisionFamily.configure` and
:meth:`~DecisionFamily.rewrite`.  Adding a family is one module and one
entry in that tuple.
"""

from costmodels.arguments import echo
from mesh_tf.core.errors import InvalidArgumentError

__all__ = ["DecisionFamily", "DecisionValueError"]


class DecisionValueError(InvalidArgumentError):
  """A decision value that its family does not take.  ``str()`` says what
  is wrong and how to fix it; :attr:`problem` and :attr:`hint` are the two
  parts, for callers (the CLI) that show them on separate lines."""

  def __init__(self, problem, hint):
    super().__init__(f"{problem}; {hint}")
    self.problem = problem
    self.hint = hint


class DecisionFamily:
  """One family of training decisions (subclass it; see the module
  docstring).

  Attributes:
    name: the field of :class:`TrainingDecisions` and the key in plan files
      and JSON reports (``"zero_stage"``).
    default: the value of a step as built (no decision taken).
    flag: the command-line option that fixes it (``"--zero-stage"``).
    description: what the value means, for messages and the plan-file
      documentation.
    example: a valid value as written on the command line.
  """
  name = ""
  default = None
  flag = ""
  description = ""
  example = ""

  def check(self, value):
    """The family's one typed spelling of ``value``.

    Raises:
      DecisionValueError: naming the family and a valid value.
    """
    raise NotImplementedError(type(self).__name__)

  def to_json(self, value):
    """The JSON value of a (checked) value."""
    return value

  def from_json(self, data):
    """The typed value of a JSON value (from a plan file)."""
    return self.check(data)

  def parse(self, text):
    """The value written on the command line after :attr:`flag` (its
    syntax only: :meth:`check` then checks the value).

    Raises:
      DecisionValueError: for text that is not the family's syntax.
    """
    try:
      return int(str(text).strip())
    except ValueError:
      raise DecisionValueError(
          f"{self.flag} {echo(text, 40)} is not an integer or auto",
          f"use e.g. {self.flag} {self.example}, or {self.flag} auto"
      ) from None

  def check_with(self, decisions):
    """Checks ``decisions`` (a whole TrainingDecisions) across families,
    after each family's own :meth:`check`; none by default.

    Raises:
      DecisionValueError: naming the fields that disagree.
    """
    del decisions

  def describe(self, value):
    """A short text of the value, for tables and messages."""
    return str(value)

  def rank(self, value):
    """How much the value departs from the step as built: among equal step
    times the search prefers the lower rank."""
    del value
    return 0

  def configure(self, config, value):
    """The zoo ``config`` to build the step from under ``value`` (before
    the graph exists)."""
    del value
    return config

  def rewrite(self, graph, value):
    """Applies ``value`` to the built step's ``graph`` in place (after
    it is built, before the update is added)."""
    del graph, value

  def _not_a_count(self, value, least):
    return DecisionValueError(f"{self.name} is {value!r}",
                              f"use an integer >= {least}")

  def __repr__(self):
    return f"DecisionFamily[{self.name}]"
