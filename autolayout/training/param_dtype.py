"""The parameter dtype, as one training-decision family: the compute dtype
of weights and activations (float32 masters stay, see
:class:`mesh_tf.VariableDType`).  Not searched: bf16 changes the numbers, so
it is the caller's choice, and the fallback that must fit takes bf16."""

import dataclasses

from autolayout.training.family import DecisionFamily, DecisionValueError

__all__ = ["FAMILY", "ParamDType"]

DTYPES = ("float32", "bfloat16", "float16")


class ParamDType(DecisionFamily):
  """``param_dtype``: a dtype name, ``"float32"`` for the step as built."""
  name = "param_dtype"
  default = "float32"
  flag = "--set param_dtype"
  description = ("the compute dtype of weights and activations (\"float32\" "
                 "or \"bfloat16\"; masters stay float32)")
  example = "bfloat16"

  def check(self, value):
    if value not in DTYPES:
      raise DecisionValueError(
          f"param_dtype is {value!r}", 'use "float32" or "bfloat16"')
    return value

  def parse(self, text):
    return str(text).strip()

  def configure(self, config, value):
    return dataclasses.replace(
        config, param_dtype=None if value == config.master_dtype else value)


FAMILY = ParamDType()
