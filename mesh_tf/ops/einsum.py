"""Einsum, the workhorse: contraction over named dims, and its inverse,
broadcast.

Lowering: each processor contracts its slices; a reduced dim that is split
leaves partial sums, which become a lazy SUM all-reduce over that dim's mesh
axis.  FLOPs per device are ``2 * prod(slice sizes of all dims)``.

Gradients: the gradient of each einsum input is an einsum of the output
gradient with the other inputs, broadcast over the dims only that input has;
the gradient of a broadcast is a one-operand einsum that sums the new dims
out.  The two live in one module because each is the other's gradient.
"""

import math

from mesh_tf.core import dims as dims_lib
from mesh_tf.core.errors import ShapeError
from mesh_tf.graph import Operation, Tensor
from mesh_tf.lowering import einsum_kernels, kernel_copies
from mesh_tf.lowering.lazy_tf import tf
from mesh_tf.lowering.mesh_impl import LazyAllreduceSum
from mesh_tf.ops.base import align_slice, einsum_letters, is_float


def _infer_output_shape(xs, reduced_dims):
  if reduced_dims is not None:
    reduced = {d.name for d in dims_lib.convert_to_shape(reduced_dims)}
    dims, seen = [], set()
    for x in xs:
      for d in x.shape:
        if d.name not in reduced and d.name not in seen:
          seen.add(d.name)
          dims.append(d)
    return dims_lib.Shape(dims)
  counts = {}
  for x in xs:
    for d in x.shape:
      counts[d.name] = counts.get(d.name, 0) + 1
  dims, seen = [], set()
  for x in xs:
    for d in x.shape:
      if counts[d.name] == 1 and d.name not in seen:
        seen.add(d.name)
        dims.append(d)
  return dims_lib.Shape(dims)


class EinsumOperation(Operation):
  """Contraction of ``xs`` onto ``output_shape``."""

  def __init__(self, xs, output_shape, name=None):
    super().__init__(xs, name=name or "einsum")
    sizes = {}
    for x in xs:
      for d in x.shape:
        if sizes.setdefault(d.name, d.size) != d.size:
          raise ShapeError(
              f"einsum {self.name}: dim {d.name!r} has sizes "
              f"{sizes[d.name]} and {d.size} in its inputs "
              f"{[x.name for x in xs]}")
    for d in output_shape:
      if sizes.get(d.name) != d.size:
        raise ShapeError(
            f"einsum {self.name}: output dim {d} is not a dim of any input "
            f"({[str(x.shape) for x in xs]})")
    dtype = xs[0].dtype
    self._outputs = [Tensor(self, output_shape, dtype)]

  def kernel_copy_shapes(self, known=None):
    """The shapes of the buffers this op's slice kernel makes besides its
    output, live while it runs: operands it transposes or reorders and a
    product it transposes into the output
    (:func:`mesh_tf.lowering.kernel_copies.einsum_copies`; ``known``: a
    dict the caller owns, of the equations' copies worked out already)."""
    if len(self.inputs) != 2:
      return ()
    out = self.outputs[0]
    eq = einsum_letters([x.shape for x in self.inputs], out.shape)
    roles = None if known is None else known.get(eq)
    if roles is None:
      roles = kernel_copies.einsum_copies(eq)
      if known is not None:
        known[eq] = roles
    shapes = {"a": self.inputs[0].shape, "b": self.inputs[1].shape,
              "out": out.shape}
    return tuple(shapes[r] for r in roles)

  def lower(self, lowering):
    impl = lowering.mesh_impl(self)
    out = self.outputs[0]
    out_names = set(out.shape.dimension_names)
    all_dims = {}
    for x in self.inputs:
      for d in x.shape:
        all_dims[d.name] = d
    # Two reduced dims of different inputs split on one axis: each device
    # would only see matching blocks of the two (the cross terms would be
    # lost), so gather all but the first of them before contracting (a dim
    # over several axes is gathered if any of its axes is taken).
    reduced_axes, gather = set(), set()
    for d in all_dims.values():
      axes = impl.tensor_dimension_to_mesh_axes(d)
      if axes and d.name not in out_names:
        if reduced_axes.isdisjoint(axes):
          reduced_axes.update(axes)
        else:
          gather.add(d.name)
    # An output dim split on an axis of a split reduced dim: gather it in
    # the inputs, reduce over the axes, then split the output again.
    resplit = [(i, d, axes) for i, d in enumerate(out.shape)
               for axes in [impl.tensor_dimension_to_mesh_axes(d)]
               if not reduced_axes.isdisjoint(axes)]
    resplit_names = {d.name for _, d, _ in resplit} | gather
    slices, in_shapes = [], []
    for x in self.inputs:
      laid = lowering.laid_out(x)
      for j, d in enumerate(x.shape):
        if d.name in resplit_names:
          laid = impl.allconcat(laid, impl.tensor_dimension_to_mesh_axes(d),
                                j)
      slices.append(laid)
      in_shapes.append(x.shape)
    sizes = {}
    for laid, x in zip(slices, self.inputs):
      for s, d in zip(laid.slice_shape, x.shape):
        sizes[d.name] = s
    out_slice = tuple(sizes[d.name] for d in out.shape)
    flops = math.prod(sizes.values()) * (2 if len(self.inputs) > 1 else 1)
    eq = einsum_letters(in_shapes, out.shape)
    shapes = [tuple(laid.slice_shape) for laid in slices]
    kernel = einsum_kernels.einsum_kernel(eq, shapes)
    y = impl.slicewise(kernel, *slices,
                       slice_shape=out_slice, dtype=out.dtype, flops=flops,
                       matmul=(einsum_kernels.einsum_pattern(eq)
                               if len(self.inputs) > 1 else False),
                       matrix=einsum_kernels.product_matrix(eq, shapes))
    if resplit:
      y = impl.allreduce(y, sorted(reduced_axes), "SUM")
      for i, _, a in resplit:
        y = impl.allsplit(y, a, i)
      lowering.set_tensor_lowering(out, y)
    elif reduced_axes:
      lowering.set_tensor_lowering(
          out, LazyAllreduceSum(impl, y, reduced_axes))
    else:
      lowering.set_tensor_lowering(out, y)

  def gradient(self, grad_ys):
    g = grad_ys[0]
    if g is None:
      return [None] * len(self.inputs)
    out = []
    for i, x in enumerate(self.inputs):
      if not is_float(x):
        out.append(None)
        continue
      others = [t for j, t in enumerate(self.inputs) if j != i]
      have = set(g.shape.dimension_names)
      for t in others:
        have.update(t.shape.dimension_names)
      target = dims_lib.Shape([d for d in x.shape if d.name in have])
      if not others and g.shape == target:
        gx = g
      else:
        gx = einsum([g] + others, output_shape=target,
                    name=f"{self.name}_grad{i}")
      out.append(broadcast(gx, x.shape, name=f"{gx.operation.name}_broadcast"))
    return out


def einsum(xs, output_shape=None, reduced_dims=None, name=None):
  """Einstein summation over named dims.

  Args:
    xs: list of mtf Tensors.
    output_shape: the output Shape; by default the dims that appear in exactly
      one input (or, with ``reduced_dims``, all dims but those).
    reduced_dims: dims to sum out, when ``output_shape`` is not given.
    name: op name.

  Example:
    >>> y = einsum([x, w], reduced_dims=[d_model])   # doctest: +SKIP
  """
  xs = list(xs)
  if not xs:
    raise ShapeError("einsum needs at least one input")
  if reduced_dims is not None:
    present = {d.name for x in xs for d in x.shape}
    for d in dims_lib.convert_to_shape(reduced_dims):
      if d.name not in present:
        raise ShapeError(
            f"einsum {name or ''}: reduced dim {d} is not a dim of any input "
            f"({[str(x.shape) for x in xs]}); drop it from reduced_dims")
  if output_shape is None:
    output_shape = _infer_output_shape(xs, reduced_dims)
  return EinsumOperation(xs, dims_lib.convert_to_shape(output_shape),
                         name=name).outputs[0]


def matmul(a, b, output_shape=None, reduced_dims=None, name=None):
  """``einsum([a, b])``: contracts the dims ``a`` and ``b`` share."""
  return einsum([a, b], output_shape=output_shape, reduced_dims=reduced_dims,
                name=name or "matmul")


class BroadcastOperation(Operation):
  """Broadcasts ``x`` to ``new_shape`` (a superset of its dims, any order).

  Each processor broadcasts its slice to its output slice: a dim of ``x``
  keeps its mesh axis, and ``x`` is replicated along the axes of new dims.

  Attributes:
    old_shape: the input's shape (the gradient sums back to it).
    new_shape: the output's shape.
  """

  def __init__(self, x, new_shape, name=None):
    super().__init__([x], name=name or "broadcast")
    for d in x.shape:
      if d not in new_shape:
        raise ShapeError(
            f"{self.name}: cannot broadcast {x.name} {x.shape!r} to "
            f"{new_shape!r}: dim {d} is missing from the new shape; "
            "broadcast only adds dims")
    self.old_shape = x.shape
    self.new_shape = new_shape
    self._outputs = [Tensor(self, new_shape, x.dtype)]

  @property
  def unsplittable_dims(self):
    """None: broadcasting is local under every layout."""
    return frozenset()

  def lower(self, lowering):
    impl = lowering.mesh_impl(self)
    out_slice = impl.slice_shape(self.new_shape)
    old, new = self.old_shape, self.new_shape

    def fn(t):
      return tf.broadcast_to(align_slice(tf, t, old, new), out_slice)
    lowering.set_tensor_lowering(self.outputs[0], impl.slicewise(
        fn, lowering.laid_out(self.inputs[0]), shape=new, flops=0))

  def gradient(self, grad_ys):
    g = grad_ys[0]
    return [None if g is None else sum_to(g, self.old_shape)]


def broadcast(x, new_shape, name=None):
  """Broadcasts ``x`` to ``new_shape``, which holds all of ``x``'s dims.

  Returns ``x`` itself when the shapes are equal.

  Raises:
    ShapeError: if a dim of ``x`` is not in ``new_shape``.

  Example:
    >>> y = broadcast(bias, "batch:8,d_model:512")   # doctest: +SKIP
  """
  new_shape = dims_lib.convert_to_shape(new_shape)
  if x.shape == new_shape:
    return x
  return BroadcastOperation(x, new_shape, name=name).outputs[0]


def sum_to(g, shape):
  """Sums ``g`` over its dims not in ``shape`` and orders it like ``shape``.

  A one-operand einsum: one TF kernel per processor, and a lazy SUM
  all-reduce when a summed dim is split.  Returns ``g`` if already equal.
  """
  shape = dims_lib.convert_to_shape(shape)
  if g.shape == shape:
    return g
  return einsum([g], output_shape=shape, name=f"{g.operation.name}_sum")
