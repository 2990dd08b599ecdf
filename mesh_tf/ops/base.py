"""Helpers shared by the op modules (broadcasting by name, slice kernels),
the slicewise :class:`GenericOperation` and its fused gradient op.

Elementwise gradients are fused: the gradient of each input of a slicewise
op is ONE mtf op (:class:`ElementwiseGradOperation`) whose slice kernel
computes the derivative (with TF's own gradient kernels where TF has one,
else by differentiating the op's slice kernel with ``tf.GradientTape``),
sums locally over broadcast dims, and leaves a lazy SUM all-reduce when a
broadcast dim is split.  This keeps the lowered step small: one TF kernel
per device per gradient, where a naive composition would emit three to five.
"""

import math

from mesh_tf.core import dims as dims_lib
from mesh_tf.core import dtypes as dtypes_lib
from mesh_tf.core.errors import MtfError, ShapeError, UnknownNameError
from mesh_tf.graph import Operation, Tensor
from mesh_tf.lowering.lazy_tf import tf
from mesh_tf.lowering.mesh_impl import LazyAllreduceSum


def is_tensor(x):
  return isinstance(x, Tensor)


def is_float(t):
  """Whether tensor ``t`` has a floating dtype (only those get gradients)."""
  return dtypes_lib.is_floating(t.dtype)


def dim_name(d):
  """The name of a Dimension, or the string itself."""
  return d if isinstance(d, str) else d.name


def permutation(from_names, to_names):
  """The permutation that reorders dims ``from_names`` into ``to_names``."""
  return [from_names.index(n) for n in to_names]


def transpose_slice(t, perm):
  """``tf.transpose(t, perm)``, or ``t`` itself for the identity."""
  return t if perm == list(range(len(perm))) else tf.transpose(t, perm)


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


def _is_pending(laid_out):
  return isinstance(laid_out, LazyAllreduceSum)


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

  def cost_params(self):
    return (self._flops_per_element, tuple(sorted(self._unsplittable)),
            self.fusion())

  def fusion(self):
    """Where this kernel sits in an elementwise chain: ``(one bool per
    input: its producer is elementwise too, bool: every reader of the
    output is elementwise)``.

    A chain of elementwise kernels runs as one fused kernel (XLA's loop
    fusion; the same runs that :class:`PlacementMeshImpl` traces as one
    function between collectives), so it costs one memory pass: an input
    made by an elementwise producer is not read from HBM (unless a pending
    all-reduce sits between them, see :meth:`lower`), and an output read
    only by elementwise kernels is never written.  An output nobody reads
    is a result and is written.
    """
    fused_in = tuple(isinstance(t.operation, GenericOperation)
                     for t in self.inputs)
    readers = self.graph.consumers_of(self.outputs[0])
    keep = bool(readers) and all(isinstance(r, GenericOperation)
                                 for r in readers)
    return fused_in, keep

  def gradient(self, grad_ys):
    """Any slicewise op whose inputs' dims are all in its output: the
    derivative of its kernel by GradientTape, one fused op per input."""
    g = grad_ys[0]
    out = self.outputs[0]
    for x in self.inputs:
      if not all(d in out.shape for d in x.shape):
        raise MtfError(
            f"operation {self.name} ({type(self).__name__}) has input "
            f"{x.name} {x.shape!r} with dims its output {out.shape!r} lacks, "
            "so it is not elementwise; give it a gradient method")
    return [elementwise_grad(self, g, i, flops=8) if g is not None else None
            for i in range(len(self.inputs))]

  def lower(self, lowering):
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
    fused_in, keep = self.fusion()
    # A pending sum is all-reduced first: that input comes from memory.
    fused_in = tuple(f and not _is_pending(lowering.tensors.get(t))
                     for f, t in zip(fused_in, self.inputs))
    laid = impl.slicewise(kernel, *[lowering.laid_out(t) for t in self.inputs],
                          shape=out.shape, dtype=out.dtype,
                          flops=size * self._flops_per_element,
                          fused=(fused_in, keep))
    lowering.set_tensor_lowering(out, laid)


def as_dtype(d):
  return dtypes_lib.as_dtype(d)


class ElementwiseGradOperation(Operation):
  """The gradient of one input of an elementwise op, as one fused op.

  ``kernel(g, *xs, y)`` gets the output gradient, the op's inputs and its
  output, each slice aligned (transposed, size-1 dims inserted) to the output
  shape, and returns the gradient with respect to input ``index``, either of
  the output's slice shape or already summed to the aligned input's shape.
  The lowering sums over the input's broadcast dims locally, orders the
  result like the input, and leaves a lazy SUM all-reduce over the mesh axes
  of split broadcast dims.
  """

  no_gradient_reason = "second derivatives of elementwise ops are not built"

  def __init__(self, op, grad_y, index, kernel, uses_output=False,
               flops_per_element=2):
    inputs = [grad_y] + list(op.inputs)
    if uses_output:
      inputs.append(op.outputs[0])
    super().__init__(inputs, name=f"{op.name}_grad{index}")
    self.forward_name = op.name
    self.index = index
    self.kernel = kernel
    self.uses_output = uses_output
    self.flops_per_element = flops_per_element
    self.n_forward_inputs = len(op.inputs)
    x = op.inputs[index]
    self._outputs = [Tensor(self, x.shape, x.dtype)]

  def cost_params(self):
    return (self.index, self.uses_output, self.flops_per_element,
            self.n_forward_inputs)

  def lower(self, lowering):
    impl = lowering.mesh_impl(self)
    g = self.inputs[0]
    xs = self.inputs[1:1 + self.n_forward_inputs]
    x = xs[self.index]
    out = self.outputs[0]
    full = g.shape  # the forward output's shape
    sources = self.inputs[1:]
    names = full.dimension_names
    reduce_axes = [i for i, n in enumerate(names) if n not in x.shape]
    kept = [n for n in names if n in x.shape]
    perm = [kept.index(n) for n in x.shape.dimension_names]
    out_slice = impl.slice_shape(out)
    # The kernel closes over values only, so that it can be fused.
    kernel, source_shapes, out_dtype = self.kernel, [s.shape for s in
                                                      sources], out.dtype

    def fn(gs, *ts):
      aligned = [align_slice(tf, t, s, full)
                 for t, s in zip(ts, source_shapes)]
      r = kernel(gs, *aligned)
      if any(r.shape[a] != 1 for a in reduce_axes):
        r = tf.reduce_sum(r, reduce_axes)
      elif reduce_axes:  # already summed (e.g. by GradientTape): drop them
        r = tf.squeeze(r, reduce_axes)
      if perm != list(range(len(perm))):
        r = tf.transpose(r, perm)
      if r.dtype != out_dtype:
        r = tf.cast(r, out_dtype)
      return r
    laid = [lowering.laid_out(t) for t in self.inputs]
    n_out = math.prod(impl.slice_shape(g))
    y = impl.slicewise(fn, *laid, slice_shape=out_slice, dtype=out.dtype,
                       flops=n_out * self.flops_per_element)
    axes = list(impl.split_axes([d for d in full if d.name not in x.shape]))
    if axes:
      lowering.set_tensor_lowering(out, LazyAllreduceSum(impl, y, axes))
    else:
      lowering.set_tensor_lowering(out, y)


def _tape_kernel(forward_fn, index, n_inputs):
  """A kernel that differentiates ``forward_fn`` with tf.GradientTape."""
  def kernel(g, *ts):
    xs = list(ts[:n_inputs])
    with tf.GradientTape() as tape:
      tape.watch(xs[index])
      y = forward_fn(*xs)
    r = tape.gradient(y, xs[index], output_gradients=g)
    if r is None:
      r = tf.zeros_like(xs[index])
    return r
  return kernel


def elementwise_grad(op, g, index, kernel=None, uses_output=False, flops=2):
  """The gradient of input ``index`` of slicewise ``op`` given its output
  gradient ``g``, as one :class:`ElementwiseGradOperation` (None when ``g``
  is None or the input is not float).  Without ``kernel``, the derivative
  of the op's own slice kernel by GradientTape."""
  if g is None or not is_float(op.inputs[index]):
    return None
  if kernel is None:
    kernel = _tape_kernel(op._fn, index, len(op.inputs))  # pylint: disable=protected-access
  return ElementwiseGradOperation(op, g, index, kernel, uses_output,
                                  flops).outputs[0]
