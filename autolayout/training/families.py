"""The registry of training-decision families, and
:class:`TrainingDecisions`, the one typed form of a choice of them from the
command line to the plan file.

:data:`FAMILIES` lists every family once, in field order; each is defined
in its own module (:mod:`~autolayout.training.param_dtype`,
:mod:`~autolayout.training.zero`, :mod:`~autolayout.training.recompute`,
:mod:`~autolayout.training.microbatches`,
:mod:`~autolayout.training.pipeline`) with its value type, JSON codec,
command-line syntax, graph rewrite and search choices.  A new family is
one more module and one more entry here: the value gains a field, plan
files its key, and the step builder its rewrite.  A family whose value is
None (no pipeline) is left out of the JSON form.

Example:
  >>> d = TrainingDecisions.from_json({"zero_stage": {"ffn": 3},
  ...                                  "microbatches": 2})
  >>> d
  TrainingDecisions(param_dtype='float32', zero_stage=(('ffn', 3),), recompute=0, microbatches=2, pipeline=None)
  >>> d.as_dict()["zero_stage"]
  {'ffn': 3}
  >>> "pipeline" in d.as_dict()   # no pipeline: the key is left out
  False
"""

import collections

from autolayout.training import (microbatches, param_dtype, pipeline,
                                 recompute, zero)
from autolayout.training.family import DecisionValueError

__all__ = ["FAMILIES", "TrainingDecisions", "family"]

FAMILIES = (param_dtype.FAMILY, zero.FAMILY, recompute.FAMILY,
            microbatches.FAMILY, pipeline.FAMILY)
_BY_NAME = {f.name: f for f in FAMILIES}


def family(name):
  """The family named ``name``.

  Raises:
    DecisionValueError: for a name no family has.
  """
  try:
    return _BY_NAME[name]
  except KeyError:
    raise DecisionValueError(
        f"{name!r} is not a training decision family",
        f"use one of {', '.join(_BY_NAME)}") from None


_Fields = collections.namedtuple(
    "TrainingDecisions", [f.name for f in FAMILIES],
    defaults=[f.default for f in FAMILIES])


class TrainingDecisions(_Fields):
  """One choice of every training-decision family (a hashable value, one
  field per family of :data:`FAMILIES`, each in its family's typed form:
  ``zero_stage`` an int or sorted ``(group, stage)`` pairs,
  :data:`autolayout.training.zero.ZeroStage`).  Build it from typed values
  (checked here), :meth:`from_json` or :meth:`from_texts`."""
  __slots__ = ()

  def __new__(cls, *args, **kwargs):
    values = _Fields(*args, **kwargs)
    self = super().__new__(cls, *(f.check(v) for f, v in zip(FAMILIES,
                                                             values)))
    for f in FAMILIES:
      f.check_with(self)
    return self

  def _replace(self, **kwargs):
    return TrainingDecisions(**dict(self._asdict(), **kwargs))

  def as_dict(self):
    """The decisions as a plain mapping (for plan files and JSON), each
    value in its family's JSON form (a per-group stage is ``{group:
    stage}``; a None value, e.g. no pipeline, is left out)."""
    return {f.name: f.to_json(v) for f, v in zip(FAMILIES, self)
            if v is not None}

  @classmethod
  def from_json(cls, data):
    """The decisions of a JSON mapping (a plan file's ``decisions``); the
    families it omits keep their defaults.

    Raises:
      DecisionValueError: naming a family this version does not know, or
        a value its family does not take.
    """
    for name in data:
      family(name)
    return cls(**{name: family(name).from_json(value)
                  for name, value in data.items()})

  def describe(self):
    """``"param_dtype=bfloat16 zero_stage=3 recompute=0 microbatches=2"``."""
    return " ".join(f"{f.name}={f.describe(v)}"
                    for f, v in zip(FAMILIES, self))

  def rank(self):
    """The families' simplicity ranks, in field order (lower: closer to
    the step as built)."""
    return tuple(f.rank(v) for f, v in zip(FAMILIES, self))


def fixed_from_texts(texts):
  """``{family name: typed value}`` of the decisions given as text (the
  CLI's ``--zero-stage 3``), each parsed by its family once; ``auto`` and
  None are left to the search.

  Raises:
    DecisionValueError: naming the family's flag and a valid value.
  """
  out = {}
  for name, text in texts.items():
    if text is None or str(text).strip().lower() == "auto":
      continue
    out[name] = family(name).parse(text)
  return out
