"""The ``tf.compat.v1`` variable scope that names mtf variables.

Mesh TensorFlow created each variable's TF master with ``tf.get_variable``,
so a program's ``with tf.variable_scope("layer_0"):`` prefixed its mtf
variable names.  Ported programs depend on those names (checkpoints are keyed
by them), so mtf variables made while such a scope is open get the same
prefix.  TensorFlow is never imported here: if the program has not imported
it, no scope can be open.
"""

import sys


def variable_scope_prefix():
  """The open ``tf.compat.v1`` variable scope's name ("" if none)."""
  tf = sys.modules.get("tensorflow")
  if tf is None:
    return ""
  try:
    return tf.compat.v1.get_variable_scope().name
  except AttributeError:  # TensorFlow only partly imported
    return ""


def scoped_name(name):
  """``name`` under the open variable scope, unless it is already there."""
  prefix = variable_scope_prefix()
  if not prefix or name == prefix or name.startswith(prefix + "/"):
    return name
  return f"{prefix}/{name}"
