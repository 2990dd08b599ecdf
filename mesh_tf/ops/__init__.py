"""The op library, one module per op family.

Importing it binds :class:`~mesh_tf.graph.Tensor`'s arithmetic operators to
the elementwise ops (broadcasting by dim name), so that ``mesh_tf.graph``
does not import the op library.
"""

from mesh_tf.graph import Tensor as _Tensor
from mesh_tf.ops import elementwise as _ew


def _bind_tensor_operators():
  ops = {"add": _ew.add, "sub": _ew.subtract, "mul": _ew.multiply,
         "truediv": _ew.divide}
  for name, fn in ops.items():
    setattr(_Tensor, f"__{name}__", lambda self, other, fn=fn: fn(self, other))
    setattr(_Tensor, f"__r{name}__",
            lambda self, other, fn=fn: fn(other, self))
  _Tensor.__neg__ = lambda self: _ew.negative(self)


_bind_tensor_operators()
