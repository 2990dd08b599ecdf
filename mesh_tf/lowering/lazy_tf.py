"""A lazy handle on TensorFlow, so that ``import mesh_tf`` does not load it.

Kernel code writes ``tf.exp(x)``; TensorFlow is imported on first use,
through :func:`mesh_tf.startup.import_order.import_tensorflow` (CP-SAT first, the
order the two need in one process).
"""

from mesh_tf.startup import import_order


class _LazyModule:
  __slots__ = ("_module",)

  def __init__(self):
    object.__setattr__(self, "_module", None)

  def _load(self):
    m = object.__getattribute__(self, "_module")
    if m is None:
      m = import_order.import_tensorflow()
      object.__setattr__(self, "_module", m)
      from mesh_tf.lowering import tf_private  # pylint: disable=g-import-not-at-top
      tf_private.skip_autograph("mesh_tf")
    return m

  def __getattr__(self, name):
    return getattr(self._load(), name)


def load_tensorflow():
  """Imports TensorFlow now (CP-SAT first) and returns the module."""
  return tf._load()  # pylint: disable=protected-access


tf = _LazyModule()
