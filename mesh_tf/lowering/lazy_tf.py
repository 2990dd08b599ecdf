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
      object.__setattr__(self, "_module", m)
    return m

  def __getattr__(self, name):
    return getattr(self._load(), name)


tf = _LazyModule()
