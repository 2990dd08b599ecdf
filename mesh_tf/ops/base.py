"""Helpers shared by the op modules: broadcasting by name and slice kernels."""

from mesh_tf.core import dims as dims_lib
from mesh_tf.core import dtypes as dtypes_lib
from mesh_tf.core.errors import ShapeError, UnknownNameError
from mesh_tf.graph import Operation, Tensor


def is_tensor(x):
  return isinstance(x, Tensor)


def resolve_dim(x, dim, op_name, what="dim"):
  """The Dimension of ``x`` named by ``dim`` (a Dimension, ``"name"`` or
  ``"name:size"``).

  Raises:
    UnknownNameError: if ``x`` has no such dim (the message lists its dims).
  """
  if isinstance(dim, str) and ":" not in dim:
    if dim not in x.shape:
      raise UnknownNameError(f"{op_name}: {what} {dim!r} is not a dim of "
                             f"{x.name} {x.shape!r}; use one of "
                             f"{x.shape.dimension_names}")
    return x.shape.get_dim_by_name(dim)
  dim = dims_lib.convert_to_dimension(dim)
  if dim not in x.shape:
    raise UnknownNameError(f"{op_name}: {what} {dim} is not a dim of {x.name}"
                           f" {x.shape!r}; use one of "
                           f"{list(map(str, x.shape))}")
  return dim


def broadcast_shapes(*shapes):
  """The union of dims, in order of first appearance; sizes must agree."""
  dims, seen = [], {}
  for s in shapes:
    for d in s:
      if d.name in seen:
        if seen[d.name] != d.size:
          raise ShapeError(f"cannot broadcast {list(shapes)}: dim "
                           f"{d.name!r} has sizes {seen[d.name]} and {d.size}")
      else:
        seen[d.name] = d.size
        dims.append(d)
  return dims_lib.Shape(dims)


def align_slice(tf, t, from_shape, to_shape):
  """Transposes/expands a slice of ``from_shape`` so that it broadcasts
  against a slice of ``to_shape`` (names of ``from_shape`` ⊆ ``to_shape``)."""
  from_names = from_shape.dimension_names
  to_names = [n for n in to_shape.dimension_names]
  order = [from_names.index(n) for n in to_names if n in from_names]
  if order != list(range(len(order))):
    t = tf.transpose(t, order)
  if len(from_names) != len(to_names) and from_names:
    new_shape = [s for s in t.shape]
    full, k = [], 0
    for n in to_names:
      if n in from_names:
        full.append(new_shape[k])
        k += 1
      else:
        full.append(1)
    t = tf.reshape(t, full)
  return t


def einsum_letters(shapes_in, shape_out):
  """An einsum equation string for named-dim shapes."""
  letters = {}
  alphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"

  def word(s):
    out = ""
    for d in s:
      if d.name not in letters:
        letters[d.name] = alphabet[len(letters)]
      out += letters[d.name]
    return out
  ins = [word(s) for s in shapes_in]
  return ",".join(ins) + "->" + word(shape_out)


class GenericOperation(Operation):
  """An op with one output computed slicewise by a TF function of its inputs.

  The inputs are broadcast by dim name to the output shape.  Used for the
  elementwise families; ``fn`` receives aligned TF slices.
  """

  def __init__(self, fn, inputs, output_shape, output_dtype, name=None,
               flops_per_element=1, mesh=None, unsplittable=()):
    super().__init__(inputs, mesh=mesh, name=name)
    self._fn = fn
    self._flops_per_element = flops_per_element
    self._unsplittable = frozenset(unsplittable)
    self._outputs = [Tensor(self, output_shape, output_dtype)]

  @property
  def unsplittable_dims(self):
    return self._unsplittable

  def lower(self, lowering):
    from mesh_tf.lowering.lazy_tf import tf
    out = self.outputs[0]
    impl = lowering.mesh_impl(self)
    in_shapes = [t.shape for t in self.inputs]
    fn, out_shape = self._fn, out.shape  # values only: kernels get fused

    def kernel(*slices):
      aligned = [align_slice(tf, s, sh, out_shape)
                 for s, sh in zip(slices, in_shapes)]
      return fn(*aligned)
    size = 1
    for s in impl.slice_shape(out):
      size *= s
    laid = impl.slicewise(kernel, *[lowering.laid_out(t) for t in self.inputs],
                          shape=out.shape, dtype=out.dtype,
                          flops=size * self._flops_per_element)
    lowering.set_tensor_lowering(out, laid)


def as_dtype(d):
  return dtypes_lib.as_dtype(d)
