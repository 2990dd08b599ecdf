"""A lazy handle on TensorFlow, so that ``import mesh_tf`` does not load it.

Kernel code writes ``tf.exp(x)``; TensorFlow is imported on first use.
OR-Tools' CP-SAT is imported first when available: importing TensorFlow
before ``ortools.sat.python.cp_model`` in one process makes CP-SAT segfault
(a protobuf clash), so whoever triggers TensorFlow through mesh-tf gets the
safe order.
"""

import importlib


class _LazyModule:
  __slots__ = ("_module",)

  def __init__(self):
    object.__setattr__(self, "_module", None)

  def _load(self):
    m = object.__getattribute__(self, "_module")
    if m is None:
      try:
        importlib.import_module("ortools.sat.python.cp_model")
      except ImportError:  # OR-Tools is optional for lowering.
        pass
      m = importlib.import_module("tensorflow")
      _skip_autograph()
      object.__setattr__(self, "_module", m)
    return m

  def __getattr__(self, name):
    return getattr(self._load(), name)


def _skip_autograph():
  """Tells AutoGraph not to convert mesh-tf's own code.

  Lowering is plain Python that builds TF ops; converting it inside a user's
  ``tf.function`` only costs tracing time (seconds for a deep model).
  """
  try:
    from tensorflow.python.autograph.core import config  # pylint: disable=g-import-not-at-top
    rule = config.DoNotConvert("mesh_tf")
    if rule not in config.CONVERSION_RULES:
      config.CONVERSION_RULES = (rule,) + tuple(config.CONVERSION_RULES)
  except (ImportError, AttributeError):  # Private API moved: only slower.
    pass


tf = _LazyModule()
