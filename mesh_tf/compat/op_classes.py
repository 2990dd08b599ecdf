"""Mesh TensorFlow's op class names, with its constructors.

Most of the original's op classes have a mesh-tf class of the same name and
constructor (``EinsumOperation``, ``ReduceOperation``, ``ConcatOperation``,
...); ``mtf`` exports those directly.  The classes here are the others:

- thin subclasses that only rename one of ours and adapt its constructor to
  the original's argument order (each docstring says "alias of X"); their
  lowering, gradient and cost are those of X;
- :class:`SlicewiseOperation`, a real op: a TF function applied to each
  processor's raw slices, with user-declared splittable dims.
"""

from mesh_tf.core import dims as dims_lib
from mesh_tf.core import dtypes as dtypes_lib
from mesh_tf.core.errors import MtfError, ShapeError
from mesh_tf.graph import Operation, Tensor
from mesh_tf.lowering.lazy_tf import tf
from mesh_tf.ops import control as control_ops
from mesh_tf.ops import creation as creation_ops
from mesh_tf.ops import elementwise as ew
from mesh_tf.ops import variables as variable_ops

__all__ = ["AddOperation", "Assign", "BinaryOpWithBroadcasting", "Constant",
           "Depend", "MinMaxOperation", "ScalarAddOperation",
           "ScalarMultiplyOperation", "SlicewiseOperation", "StopGradient",
           "binary_op_with_broadcasting", "cwise", "slicewise"]


class Constant(creation_ops.ConstantOperation):
  """Alias of :class:`~mesh_tf.ops.creation.ConstantOperation`:
  ``Constant(mesh, initializer, shape, dtype, name=None)``."""


class StopGradient(control_ops.StopGradientOperation):
  """Alias of :class:`~mesh_tf.ops.control.StopGradientOperation`."""


class Depend(control_ops.DependOperation):
  """Alias of :class:`~mesh_tf.ops.control.DependOperation`:
  ``Depend(x, dependencies, name=None)``."""


class Assign(variable_ops.AssignOperation):
  """Alias of :class:`~mesh_tf.ops.variables.AssignOperation` with Mesh TF's
  constructor ``Assign(variables, new_values, assign_fn=assign_slice,
  name=None)``."""

  def __init__(self, variables, new_values, assign_fn=None, name=None):
    mode = "assign"
    if assign_fn in variable_ops.MODE_OF_ASSIGN_FN:
      mode, assign_fn = variable_ops.MODE_OF_ASSIGN_FN[assign_fn], None
    super().__init__(variables, new_values, mode, name=name,
                     assign_fn=assign_fn)


class _ScalarKernel:
  """``x op scalar`` as a value (its behaviour is named by its fields, so
  fused kernels are shared between equal ones)."""
  __slots__ = ("kind", "scalar")

  def __init__(self, kind, scalar):
    self.kind, self.scalar = kind, scalar

  def __call__(self, x):
    s = tf.constant(self.scalar, x.dtype)
    return x * s if self.kind == "multiply" else x + s

  def mtf_kernel_key(self):
    return (type(self), self.kind, repr(self.scalar))


def _check_scalar(what, scalar):
  if isinstance(scalar, Tensor) or not isinstance(scalar, (int, float)):
    raise ShapeError(f"{what} takes a Python number, got {scalar!r}; use "
                     "mtf.multiply / mtf.add for tensors")


class ScalarMultiplyOperation(ew.UnaryOperation):
  """Alias of an elementwise multiply by a Python number (Mesh TF's
  ``ScalarMultiplyOperation(x, scalar, name=None)``); differentiated as a
  unary elementwise op."""

  def __init__(self, x, scalar, name=None):
    _check_scalar("ScalarMultiplyOperation", scalar)
    super().__init__("scalar_multiply", _ScalarKernel("multiply", scalar), x,
                     name=name or "scalar_mul")
    self.scalar = scalar


class ScalarAddOperation(ew.UnaryOperation):
  """Alias of an elementwise add of a Python number (Mesh TF's
  ``ScalarAddOperation(x, scalar, name=None)``)."""

  def __init__(self, x, scalar, name=None):
    _check_scalar("ScalarAddOperation", scalar)
    super().__init__("scalar_add", _ScalarKernel("add", scalar), x,
                     name=name or "scalar_add")
    self.scalar = scalar


def _with_output_shape(op, output_shape):
  if output_shape is None:
    return
  output_shape = dims_lib.convert_to_shape(output_shape)
  if set(output_shape.dimension_names) != set(
      op.outputs[0].shape.dimension_names):
    raise ShapeError(
        f"{op.name}: output_shape {output_shape!r} must hold exactly the dims "
        f"of the broadcast inputs {op.outputs[0].shape!r}; broadcast to more "
        "dims with mtf.broadcast")
  op.outputs[0].shape = output_shape  # a permutation: the kernel aligns


class BinaryOpWithBroadcasting(ew.BinaryOperation):
  """Alias of :class:`~mesh_tf.ops.elementwise.BinaryOperation` with Mesh TF's
  constructor ``(tf_fn, x1, x2, output_shape, output_dtype, name=None)``.

  ``tf_fn`` must be elementwise (it is differentiated as one).
  """

  def __init__(self, tf_fn, x1, x2, output_shape=None, output_dtype=None,
               name=None):
    super().__init__(getattr(tf_fn, "__name__", "binary_op"), tf_fn, x1, x2,
                     output_dtype=output_dtype, name=name or "binary_op")
    _with_output_shape(self, output_shape)


class AddOperation(ew.BinaryOperation):
  """Alias of the elementwise ``add`` (``AddOperation(x1, x2, output_shape,
  name=None)``)."""

  def __init__(self, x1, x2, output_shape=None, name=None):
    super().__init__("add", lambda a, b: tf.add(a, b), x1, x2,
                     name=name or "add")
    _with_output_shape(self, output_shape)


class MinMaxOperation(ew.BinaryOperation):
  """Alias of the elementwise ``minimum``/``maximum``
  (``MinMaxOperation(tf_fn, x1, x2, output_shape, name=None)`` with
  ``tf_fn`` one of ``tf.minimum``, ``tf.maximum``)."""

  def __init__(self, tf_fn, x1, x2, output_shape=None, name=None):
    kind = getattr(tf_fn, "__name__", "")
    if kind not in ("minimum", "maximum"):
      raise MtfError(f"MinMaxOperation takes tf.minimum or tf.maximum, got "
                     f"{tf_fn!r}")
    fn = ((lambda a, b: tf.minimum(a, b)) if kind == "minimum"
          else (lambda a, b: tf.maximum(a, b)))
    super().__init__(kind, fn, x1, x2, name=name or kind)
    _with_output_shape(self, output_shape)


def binary_op_with_broadcasting(tf_fn, x1, x2, output_shape=None,
                                output_dtype=None):
  """``tf_fn(x1, x2)`` elementwise, broadcasting by dim name."""
  return BinaryOpWithBroadcasting(tf_fn, x1, x2, output_shape,
                                  output_dtype).outputs[0]


def cwise(tf_fn, xs, output_dtype=None, grad_function=None, name=None):
  """Component-wise ``tf_fn(*xs)``: Mesh TF's ``cwise``.

  Every dim is splittable; the inputs are broadcast by dim name to the union
  of their dims.  Without ``grad_function`` the gradient comes from TF's
  autodiff of ``tf_fn`` on each slice.
  """
  xs = list(xs)
  return slicewise(tf_fn, xs, output_dtype=output_dtype,
                   splittable_dims=None, grad_function=grad_function,
                   name=name or "cwise", broadcast=True)


def _one_output(name, output_shape, output_dtype):
  """The output's shape and dtype, also from Mesh TF's one-element lists
  (``output_shapes=[shape], output_dtypes=[dtype]``)."""
  if isinstance(output_shape, (list, tuple)) and output_shape and all(
      isinstance(s, dims_lib.Shape) for s in output_shape):
    if len(output_shape) != 1:
      raise ShapeError(
          f"slicewise {name}: {len(output_shape)} output shapes; mesh-tf's "
          "SlicewiseOperation makes one output, so use one op per output")
    output_shape = output_shape[0]
    if isinstance(output_dtype, (list, tuple)):
      if len(output_dtype) != 1:
        raise ShapeError(f"slicewise {name}: {len(output_dtype)} output "
                         "dtypes for one output; give one")
      output_dtype = output_dtype[0]
  return output_shape, output_dtype


class SlicewiseOperation(Operation):
  """``tf_fn`` applied to each processor's slices (Mesh TF's op).

  Args:
    tf_fn: a function of TF slices returning one TF tensor (the output
      slice).
    inputs: mtf Tensors.
    output_shape, output_dtype: of the result.
    splittable_dims: the dims (of inputs and output) that the layout may
      split; every other dim must stay whole on each processor.
    grad_function: ``grad_function(op, dy)`` returning one gradient (or
      None) per input; without it, ``tf_fn`` is differentiated per slice by
      TF, which is right when every split output dim is a dim of every
      input (the function is then truly per-slice).
    broadcast: align each input's slice to the output's dims first (as
      ``cwise`` does).

  Raises:
    ShapeError: if ``splittable_dims`` names a dim no input or output has.
  """

  def __init__(self, tf_fn, inputs, output_shape, output_dtype,
               splittable_dims, grad_function=None, name=None,
               broadcast=False):
    inputs = list(inputs)
    super().__init__(inputs, name=name or "slicewise")
    self._tf_fn = tf_fn
    self._grad_function = grad_function
    self._broadcast = broadcast
    output_shape, output_dtype = _one_output(self.name, output_shape,
                                             output_dtype)
    out_shape = dims_lib.convert_to_shape(output_shape)
    self._outputs = [Tensor(self, out_shape,
                            dtypes_lib.as_dtype(output_dtype))]
    names = {d.name for t in inputs + self._outputs for d in t.shape}
    if splittable_dims is None:
      split = set(names)
    else:
      split = {d if isinstance(d, str) else d.name for d in splittable_dims}
      unknown = split - names
      if unknown:
        raise ShapeError(
            f"slicewise {self.name}: splittable dims {sorted(unknown)} are "
            f"dims of neither its inputs nor its output {out_shape!r}")
    self._unsplittable = frozenset(names - split)

  @property
  def unsplittable_dims(self):
    return self._unsplittable

  def lower(self, lowering):
    from mesh_tf.ops.base import align_slice  # pylint: disable=g-import-not-at-top
    impl = lowering.mesh_impl(self)
    out = self.outputs[0]
    fn, in_shapes, out_shape = self._tf_fn, [t.shape for t in self.inputs], \
        out.shape
    if self._broadcast:
      def kernel(*slices):
        return fn(*[align_slice(tf, s, sh, out_shape)
                    for s, sh in zip(slices, in_shapes)])
    else:
      kernel = fn
    lowering.set_tensor_lowering(out, impl.slicewise(
        kernel, *[lowering.laid_out(t) for t in self.inputs], shape=out_shape,
        dtype=out.dtype))

  def gradient(self, grad_ys):
    dy = grad_ys[0]
    if dy is None:
      return [None] * len(self.inputs)
    if self._grad_function is not None:
      return list(self._grad_function(self, dy))
    return [None if not dtypes_lib.is_floating(x.dtype) else
            _SlicewiseGradOperation(self, dy, i).outputs[0]
            for i, x in enumerate(self.inputs)]


class _SlicewiseGradOperation(Operation):
  """The gradient of one input of a :class:`SlicewiseOperation`, by TF's
  autodiff of its function on each slice; summed (lazily) over the mesh
  axes of output dims the input lacks."""

  def __init__(self, fwd, dy, index):
    super().__init__(list(fwd.inputs) + [dy], name=f"{fwd.name}/grad_{index}")
    self._fwd, self._index = fwd, index
    x = fwd.inputs[index]
    self._outputs = [Tensor(self, x.shape, x.dtype)]

  @property
  def unsplittable_dims(self):
    return self._fwd.unsplittable_dims

  @property
  def lowering_unsplittable_dims(self):
    return self._fwd.lowering_unsplittable_dims

  def lower(self, lowering):
    from mesh_tf.lowering.mesh_impl import LazyAllreduceSum  # pylint: disable=g-import-not-at-top
    from mesh_tf.ops.base import align_slice  # pylint: disable=g-import-not-at-top
    impl = lowering.mesh_impl(self)
    fwd, i = self._fwd, self._index
    fn, broadcast = fwd._tf_fn, fwd._broadcast  # pylint: disable=protected-access
    in_shapes = [t.shape for t in fwd.inputs]
    out_shape = fwd.outputs[0].shape

    def kernel(*slices):
      xs, dy = list(slices[:-1]), slices[-1]
      with tf.GradientTape() as tape:
        tape.watch(xs[i])
        args = ([align_slice(tf, s, sh, out_shape)
                 for s, sh in zip(xs, in_shapes)] if broadcast else xs)
        y = fn(*args)
      g = tape.gradient(y, xs[i], output_gradients=dy)
      return tf.zeros_like(xs[i]) if g is None else g
    x = fwd.inputs[i]
    laid = impl.slicewise(kernel, *[lowering.laid_out(t)
                                    for t in list(fwd.inputs) + [self.inputs[-1]]],
                          shape=x.shape, dtype=x.dtype)
    axes = list(impl.split_axes([d for d in out_shape
                                 if d.name not in x.shape]))
    lowering.set_tensor_lowering(
        self.outputs[0], LazyAllreduceSum(impl, laid, axes) if axes else laid)


def slicewise(tf_fn, xs, output_shape=None, output_dtype=None,
              splittable_dims=None, grad_function=None, name=None,
              broadcast=False):
  """Mesh TF's ``slicewise``: ``tf_fn`` on each processor's slices.

  ``output_shape`` and ``output_dtype`` default to the first input's.  With
  ``splittable_dims=None`` every dim may be split.  See
  :class:`SlicewiseOperation`.

  Example:
    >>> y = slicewise(tf.nn.relu, [x], splittable_dims=x.shape.dims)  # doctest: +SKIP
  """
  xs = list(xs)
  if not xs:
    raise MtfError("slicewise needs at least one input Tensor")
  if output_shape is None:
    if broadcast:
      from mesh_tf.ops.base import broadcast_shapes  # pylint: disable=g-import-not-at-top
      output_shape = broadcast_shapes(*[x.shape for x in xs])
    else:
      output_shape = xs[0].shape
  return SlicewiseOperation(tf_fn, xs, output_shape,
                            output_dtype or xs[0].dtype, splittable_dims,
                            grad_function, name, broadcast).outputs[0]
