"""Ops that create tensors: constants, ranges, and imports of TF values."""

import numpy as np

from mesh_tf.core import dims as dims_lib
from mesh_tf.core import dtypes as dtypes_lib
from mesh_tf.core.errors import ShapeError
from mesh_tf.graph import Operation, Tensor
from mesh_tf.lowering.lazy_tf import tf


class ConstantOperation(Operation):
  """A tensor filled with a scalar, or a NumPy array of the full shape."""

  def __init__(self, mesh, value, shape, dtype, name=None):
    super().__init__([], mesh=mesh, name=name or "constant")
    self.value = value
    self._outputs = [Tensor(self, shape, dtype)]

  no_gradient_reason = "a constant has no inputs"

  def cost_params(self):
    # A scalar is filled on every processor, an array imported: the value
    # itself does not change the cost.
    return ("fill" if np.ndim(self.value) == 0 else "import",)

  def lower(self, lowering):
    impl = lowering.mesh_impl(self)
    out = self.outputs[0]
    if np.ndim(self.value) == 0:
      v, sl, dtype = self.value, impl.slice_shape(out), out.dtype
      laid = impl.slicewise(lambda: tf.fill(sl, tf.constant(v, dtype)),
                            shape=out.shape, dtype=out.dtype, flops=0)
    else:
      laid = impl.import_laid_out(np.asarray(self.value), out.shape, out.dtype)
    lowering.set_tensor_lowering(out, laid)


def constant(mesh, value, shape=None, dtype="float32", name=None):
  """A constant: a scalar broadcast to ``shape``, or a full NumPy array."""
  shape = dims_lib.convert_to_shape(shape) or dims_lib.Shape([])
  dtype = dtypes_lib.as_dtype(dtype)
  if np.ndim(value) != 0 and tuple(np.shape(value)) != tuple(
      shape.to_integer_list()):
    raise ShapeError(f"constant {name!r}: value of shape {np.shape(value)} "
                     f"does not match {shape!r}")
  return ConstantOperation(mesh, value, shape, dtype, name=name).outputs[0]


def zeros(mesh, shape, dtype="float32", name=None):
  return constant(mesh, 0, shape, dtype, name=name or "zeros")


def ones(mesh, shape, dtype="float32", name=None):
  return constant(mesh, 1, shape, dtype, name=name or "ones")


def zeros_like(x, name=None):
  return zeros(x.mesh, x.shape, x.dtype, name=name)


def ones_like(x, name=None):
  return ones(x.mesh, x.shape, x.dtype, name=name)


class RangeOperation(Operation):
  """``start + step * i`` along one dim; each processor makes its part."""

  def __init__(self, mesh, dim, dtype, start=0, step=1, name=None):
    super().__init__([], mesh=mesh, name=name or "range")
    self.dim, self.start, self.step = dim, start, step
    self._outputs = [Tensor(self, dims_lib.Shape([dim]), dtype)]

  no_gradient_reason = "a range has no inputs"

  def lower(self, lowering):
    impl = lowering.mesh_impl(self)
    out = self.outputs[0]
    (n,) = impl.slice_shape(out)

    def fn(pnum):
      (b,) = impl.slice_begin(out, pnum)
      r = tf.range(b, b + n, dtype=tf.int64)
      return tf.cast(self.start + self.step * r, out.dtype)
    lowering.set_tensor_lowering(
        out, impl.slicewise_pnum(fn, shape=out.shape, dtype=out.dtype))


def range(mesh, dim, dtype="int32", start=0, step=1, name=None):  # pylint: disable=redefined-builtin
  """A 1-d tensor over ``dim`` with values ``start, start+step, ...``."""
  dim = dims_lib.convert_to_dimension(dim)
  return RangeOperation(mesh, dim, dtypes_lib.as_dtype(dtype), start, step,
                        name=name).outputs[0]


mtf_range = range


class ImportOperation(Operation):
  """Brings a full TF (or NumPy) value into the mesh, sliced by the layout.

  The value may be replaced at lowering time through ``Lowering(feeds=...)``,
  e.g. by the arguments of a ``tf.function``.
  """

  def __init__(self, mesh, value, shape, dtype=None, name=None):
    super().__init__([], mesh=mesh, name=name or "import")
    if dtype is None:  # Mesh TF's ImportOperation(mesh, tf_tensor, shape)
      dtype = getattr(value, "dtype", None)
      dtype = dtypes_lib.as_dtype(np.asarray(value).dtype if dtype is None
                                  else dtype)
    self.value = value
    self._outputs = [Tensor(self, shape, dtype)]

  no_gradient_reason = "an imported TF value has no mtf inputs"

  def lower(self, lowering):
    impl = lowering.mesh_impl(self)
    out = self.outputs[0]
    value = lowering.feeds.get(out, self.value)
    lowering.set_tensor_lowering(out, impl.import_laid_out(value, out.shape,
                                                           out.dtype))


def import_tf_tensor(mesh, tf_tensor, shape=None, name=None, dtype=None):
  """Imports a TF tensor (or NumPy array, or None to feed later) of ``shape``.

  Raises:
    ShapeError: if the value's shape does not match ``shape``.
  """
  shape = dims_lib.convert_to_shape(shape)
  if tf_tensor is not None:
    vshape = tuple(int(s) for s in getattr(tf_tensor, "shape",
                                           np.shape(tf_tensor)))
    if shape is None:
      raise ShapeError("import_tf_tensor needs the mtf shape of the value")
    if vshape != tuple(shape.to_integer_list()):
      raise ShapeError(f"import_tf_tensor {name!r}: value of shape {vshape} "
                       f"does not match {shape!r}")
    if dtype is None:
      dtype = getattr(tf_tensor, "dtype", None)
      if dtype is None:
        dtype = np.asarray(tf_tensor).dtype
  return ImportOperation(mesh, tf_tensor, shape, dtypes_lib.as_dtype(dtype),
                         name=name).outputs[0]


def import_fully_replicated(mesh, tf_tensor, shape, name=None):
  """Imports a value that every processor already holds whole.

  Each processor cuts its own slice (by the layout rules) from the full
  value, so no collective runs; this is the same as :func:`import_tf_tensor`
  here, kept for Mesh TF compatibility.
  """
  t = import_tf_tensor(mesh, tf_tensor, shape, name=name)
  return t
