"""Shape and layout ops: reshape, transpose, rename, broadcast.

A reshape keeps the row-major order of the elements and changes the dims.
Under global layout rules it may also change how the data is spread over
the mesh; the lowering then moves data with all-to-alls where it can,
all-concats where it must, and free all-splits.

The relayout reasons about *digits* of the row-major flat index ``f`` of an
element of a tensor with ``N`` elements.  A dim ``d`` split ``m`` ways over
mesh axis ``a``, with ``P`` the product of the sizes of the dims before
``d``, puts element ``f`` on the processor whose coordinate on ``a`` is
``floor(f / (N / (P*m))) mod m``.  So the split is the triple ``(P, m, a)``,
whatever the shape.  A slice enumerates its elements in increasing flat
order, so a local ``tf.reshape`` of each input slice gives the output slices
exactly when the input and the output are split by the same set of triples.
:func:`reshape_plan` moves the input towards that state (all-to-all or
all-concat in the input space), reshapes locally, and finishes in the output
space (all-to-all or free all-split).

A dim split over several mesh axes ``(a1, a2, ...)`` of sizes ``m1, m2...``
(major first) is the triples ``(P, m1, a1), (P*m1, m2, a2), ...``.  When an
output dim at the same ``P`` carries the same tuple, those triples are equal
and the dim keeps its split through the local reshape (:func:`relayout`
reserves it from the planner); otherwise it is all-concatenated before the
reshape, or all-split after it.
"""

from typing import NamedTuple, Optional, Tuple

from mesh_tf.core import dims as dims_lib
from mesh_tf.core.errors import ShapeError, UnknownNameError
from mesh_tf.core.layout import TensorLayout
from mesh_tf.graph import Operation, Tensor
from mesh_tf.lowering.lazy_tf import tf
# Broadcasting is einsum's inverse and lives with it (each is the other's
# gradient); it is exported here too, with the other shape ops.
from mesh_tf.ops.einsum import BroadcastOperation, broadcast

__all__ = ["reshape", "transpose", "rename_dimension", "replace_dimensions",
           "broadcast", "reshape_plan", "RelayoutStep", "ReshapePlan",
           "ReshapeOperation", "TransposeOperation", "BroadcastOperation"]


# --- the relayout plan of a reshape ------------------------------------------
class RelayoutStep(NamedTuple):
  """One collective of a reshape's relayout.

  ``kind`` is ``alltoall``, ``allconcat`` or ``allsplit``; ``mesh_axis`` is a
  mesh-axis index; ``tensor_axis`` is the dim (position) that ends up split
  (``alltoall``, ``allsplit``) or gathered (``allconcat``); ``concat_axis``
  is the dim an all-to-all gathers.  Positions refer to the input shape for
  steps before the local reshape and to the output shape after it.
  """
  kind: str
  mesh_axis: int
  tensor_axis: int
  concat_axis: Optional[int] = None


class ReshapePlan(NamedTuple):
  """How to lower a reshape: ``before`` (on the input), a local reshape to
  ``middle_layout`` (mesh axis index or None per output dim), ``after``."""
  before: Tuple[RelayoutStep, ...]
  middle_layout: Tuple[Optional[int], ...]
  after: Tuple[RelayoutStep, ...]


def _split_positions(shape):
  """The ``P`` of each dim: the product of the sizes of the dims before it."""
  return shape.cumprod()


def _block_dim(shape, positions, p, m, exclude=()):
  """A dim of ``shape`` whose leading m-way block split is digit ``(p, m)``."""
  for i, d in enumerate(shape):
    if (positions[i] == p and d.size >= m and d.size % m == 0
        and i not in exclude):
      return i
  return None


def reshape_plan(in_shape, out_shape, mesh_shape, in_layout, out_layout,
                 reserved_in=(), reserved_out=()):
  """Plans the collectives that reshape ``in_shape`` to ``out_shape``.

  Args:
    in_shape, out_shape: mtf Shapes with the same number of elements.
    mesh_shape: the mesh Shape.
    in_layout, out_layout: TensorLayouts (mesh axis index or None per dim).
    reserved_in, reserved_out: positions of input / output dims the plan
      must not split (dims over several axes that :func:`relayout` handles).

  Returns:
    A :class:`ReshapePlan`.  Each mesh axis whose split digit differs
    between input and output costs at most one collective: an all-to-all
    when the output's digit is a block split of a free input dim (or the
    input's digit is a block split of a free output dim), otherwise an
    all-concat before the local reshape and a free all-split (before it when
    the output's digit is a block split of a free input dim, else after).

  Example:
    >>> s = dims_lib.convert_to_shape
    >>> reshape_plan(s("a:4,b:4"), s("c:4,d:4"), s("x:2"), (0, None),
    ...              (None, 0)).before
    (RelayoutStep(kind='alltoall', mesh_axis=0, tensor_axis=1, concat_axis=0),)
  """
  in_pos, out_pos = _split_positions(in_shape), _split_positions(out_shape)
  ins, outs = {}, {}  # mesh axis -> tensor dim position
  for i, a in enumerate(in_layout):
    if a is not None and mesh_shape[a].size > 1:
      ins[a] = i
  for j, a in enumerate(out_layout):
    if a is not None and mesh_shape[a].size > 1:
      outs[a] = j
  size = {a: mesh_shape[a].size for a in set(ins) | set(outs)}
  held = {a for a in ins if a in outs and in_pos[ins[a]] == out_pos[outs[a]]}
  final_out_dims = set(outs.values()) | set(reserved_out)
  reserved_in = set(reserved_in)
  before = []
  cur = {ins[a]: a for a in ins}  # input dim -> mesh axis, as it evolves
  middle = {outs[a]: a for a in held}  # output dim -> axis at the reshape
  carried = {}  # mesh axis -> output dim it holds at the reshape

  def gather(a):
    before.append(RelayoutStep("allconcat", a, ins[a]))
    del cur[ins[a]]

  for a in sorted(ins):
    if a not in outs:
      gather(a)
  pending = sorted(a for a in ins if a in outs and a not in held)
  target = {a: _block_dim(in_shape, in_pos, out_pos[outs[a]], size[a],
                         exclude=reserved_in)
            for a in pending}
  while pending:
    ready = [a for a in pending
             if target[a] is not None and target[a] not in cur]
    if ready:
      a = ready[0]
      before.append(RelayoutStep("alltoall", a, target[a], ins[a]))
      del cur[ins[a]]
      cur[target[a]] = a
      middle[outs[a]] = a
      pending.remove(a)
      continue
    # Stuck: prefer an axis whose target can never free up (no target, or
    # one held by an axis that stays), else break a cycle.
    stuck = [a for a in pending
             if target[a] is None or cur[target[a]] not in pending]
    a = (stuck or pending)[0]
    pending.remove(a)
    spare = _block_dim(out_shape, out_pos, in_pos[ins[a]], size[a],
                       exclude=final_out_dims | set(carried.values()))
    if spare is not None:
      carried[a] = spare  # Keep the split through the reshape, move after.
      middle[spare] = a
    else:
      gather(a)
  # A new split that is a block split of a free input dim is made before the
  # local reshape (free either way, but the reshape then works on less).
  for a in sorted(outs):
    if a not in carried and outs[a] not in middle:
      k = _block_dim(in_shape, in_pos, out_pos[outs[a]], size[a],
                     exclude=set(cur) | reserved_in)
      if k is not None:
        before.append(RelayoutStep("allsplit", a, k))
        cur[k] = a
        middle[outs[a]] = a
  after = [RelayoutStep("alltoall", a, outs[a], carried[a])
           for a in sorted(carried)]
  after += [RelayoutStep("allsplit", a, outs[a])
            for a in sorted(outs) if outs[a] not in middle
            and a not in carried]
  middle_layout = tuple(middle.get(j) for j in range(out_shape.ndims))
  return ReshapePlan(tuple(before), middle_layout, tuple(after))


def relayout(impl, laid, in_shape, out_shape, in_layout, out_layout):
  """Moves ``laid`` (``in_shape`` under ``in_layout``) to the row-major
  reshape ``out_shape`` under ``out_layout`` (TensorLayouts, or one entry
  per dim: None, an axis index or a tuple of them), as the reshape lowers.

  Single-axis dims follow :func:`reshape_plan`.  A dim over several axes
  keeps its split when an output dim at the same flat-index position has
  the same axes; otherwise it is gathered first (input) or split last
  (output), each as one collective over all its axes.
  """
  in_axes = TensorLayout(in_layout).tensor_axis_to_mesh_axes
  out_axes = TensorLayout(out_layout).tensor_axis_to_mesh_axes

  def live(axes):
    return tuple(a for a in axes if impl.shape[a].size > 1)
  in_axes = [live(a) for a in in_axes]
  out_axes = [live(a) for a in out_axes]
  in_pos, out_pos = _split_positions(in_shape), _split_positions(out_shape)
  held = {}  # input position -> output position of a kept multi-axis split
  for i, axes in enumerate(in_axes):
    if len(axes) > 1:
      for j, o in enumerate(out_axes):
        if o == axes and out_pos[j] == in_pos[i]:
          held[i] = j
  plain_in, plain_out = list(in_axes), list(out_axes)
  for i, axes in enumerate(in_axes):
    if len(axes) > 1:
      if i not in held:
        laid = impl.allconcat(laid, axes, i)
      plain_in[i] = ()
  split_after = [j for j, axes in enumerate(out_axes)
                 if len(axes) > 1 and j not in held.values()]
  for j, axes in enumerate(out_axes):
    if len(axes) > 1:
      plain_out[j] = ()
  plan = reshape_plan(in_shape, out_shape, impl.shape, TensorLayout(plain_in),
                      TensorLayout(plain_out), reserved_in=held,
                      reserved_out=set(held.values()) | set(split_after))
  for step in plan.before:
    laid = _apply_step(impl, laid, step)
  middle = list(TensorLayout(plan.middle_layout).tensor_axis_to_mesh_axes)
  for j in held.values():
    middle[j] = out_axes[j]
  middle = TensorLayout(middle).slice_sizes(out_shape, impl.shape)
  if middle != tuple(laid.slice_shape):
    laid = impl.slicewise(lambda t: tf.reshape(t, middle), laid,
                          slice_shape=middle, flops=0)
  for step in plan.after:
    laid = _apply_step(impl, laid, step)
  for j in split_after:
    laid = impl.allsplit(laid, out_axes[j], j)
  return laid


def _apply_step(impl, laid, step):
  if step.kind == "alltoall":
    return impl.alltoall(laid, step.mesh_axis, step.tensor_axis,
                         step.concat_axis)
  if step.kind == "allconcat":
    return impl.allconcat(laid, step.mesh_axis, step.tensor_axis)
  return impl.allsplit(laid, step.mesh_axis, step.tensor_axis)


# --- ops ----------------------------------------------------------------------
class ReshapeOperation(Operation):
  """Row-major reshape of ``x`` to ``new_shape`` (same number of elements).

  Attributes:
    old_shape: the input's shape (the gradient reshapes back to it).
    new_shape: the output's shape.
  """

  def __init__(self, x, new_shape, name=None):
    super().__init__([x], name=name or "reshape")
    if new_shape.size != x.shape.size:
      raise ShapeError(
          f"{self.name}: cannot reshape {x.name} {x.shape!r} "
          f"({x.shape.size} elements) to {new_shape!r} ({new_shape.size} "
          "elements); the number of elements must not change")
    self.old_shape = x.shape
    self.new_shape = new_shape
    self._outputs = [Tensor(self, new_shape, x.dtype)]

  @property
  def unsplittable_dims(self):
    """None: every layout is lowered, relayouting as needed."""
    return frozenset()

  def plan(self, mesh_impl):
    """The :class:`ReshapePlan` of this reshape under ``mesh_impl``."""
    x, out = self.inputs[0], self.outputs[0]
    return reshape_plan(self.old_shape, self.new_shape, mesh_impl.shape,
                        mesh_impl.tensor_layout(x),
                        mesh_impl.tensor_layout(out))

  def lower(self, lowering):
    impl = lowering.mesh_impl(self)
    x, out = self.inputs[0], self.outputs[0]
    lowering.set_tensor_lowering(out, relayout(
        impl, lowering.laid_out(x), self.old_shape, self.new_shape,
        impl.tensor_layout(x), impl.tensor_layout(out)))

  def gradient(self, grad_ys):
    g = grad_ys[0]
    return [None if g is None else reshape(g, self.old_shape,
                                           name=f"{self.name}_grad")]


def reshape(x, new_shape, name=None):
  """Reshapes ``x`` to ``new_shape``, keeping the row-major element order.

  Works under any layout: when the rules split the input and the output
  differently, the lowering all-to-alls, all-concats and all-splits (see
  :func:`reshape_plan`).

  Args:
    x: an mtf Tensor.
    new_shape: a Shape (or string / list of dims) with as many elements.
    name: op name.

  Returns:
    An mtf Tensor of ``new_shape``.

  Raises:
    ShapeError: if the number of elements differs.

  Example:
    >>> y = reshape(x, "batch:8,heads:4,d_k:16")   # doctest: +SKIP
  """
  return ReshapeOperation(x, dims_lib.convert_to_shape(new_shape),
                          name=name).outputs[0]


class TransposeOperation(Operation):
  """Reorders the dims of ``x`` to ``new_shape``; each slice transposes.

  Attributes:
    old_shape: the input's shape (the gradient transposes back to it).
    new_shape: the output's shape.
    perm: output dim i is input dim ``perm[i]``.
  """

  def __init__(self, x, new_shape, name=None):
    super().__init__([x], name=name or "transpose")
    if (sorted(new_shape.dims) != sorted(x.shape.dims)):
      raise ShapeError(
          f"{self.name}: {new_shape!r} is not a permutation of the dims of "
          f"{x.name} {x.shape!r}; transpose only reorders dims (use reshape "
          "or rename_dimension to change them)")
    self.old_shape = x.shape
    self.new_shape = new_shape
    self.perm = tuple(x.shape.index(d.name) for d in new_shape)
    self._outputs = [Tensor(self, new_shape, x.dtype)]

  @property
  def unsplittable_dims(self):
    """None: a dim keeps its mesh axis, so each slice transposes locally."""
    return frozenset()

  def lower(self, lowering):
    impl = lowering.mesh_impl(self)
    perm = list(self.perm)
    laid = lowering.laid_out(self.inputs[0])
    if perm != sorted(perm):
      laid = impl.slicewise(lambda t: tf.transpose(t, perm), laid,
                            shape=self.new_shape, flops=0)
    lowering.set_tensor_lowering(self.outputs[0], laid)

  def gradient(self, grad_ys):
    g = grad_ys[0]
    return [None if g is None else transpose(g, self.old_shape,
                                             name=f"{self.name}_grad")]


def transpose(x, new_shape, name=None):
  """Reorders the dims of ``x`` to the order of ``new_shape``.

  Raises:
    ShapeError: if ``new_shape`` is not a permutation of ``x``'s dims.

  Example:
    >>> y = transpose(x, "d_model:512,batch:8")   # doctest: +SKIP
  """
  return TransposeOperation(x, dims_lib.convert_to_shape(new_shape),
                            name=name).outputs[0]


def rename_dimension(x, old_name, new_name):
  """Renames dim ``old_name`` of a Tensor (or Shape) to ``new_name``.

  On a Tensor this is a :func:`reshape`, so a rename that changes which
  layout rule applies moves the data as needed.

  Raises:
    UnknownNameError: if ``x`` has no dim ``old_name``.
  """
  if isinstance(x, Tensor):
    return reshape(x, x.shape.rename_dimension(old_name, new_name),
                   name="rename_dimension")
  return dims_lib.convert_to_shape(x).rename_dimension(old_name, new_name)


def replace_dimensions(tensor_or_shape, old_dim_or_dims, new_dim_or_dims):
  """Replaces a run of consecutive dims by other dims.

  On a Shape, returns the new Shape; on a Tensor, reshapes to it.

  Args:
    tensor_or_shape: an mtf Tensor or Shape.
    old_dim_or_dims: a Dimension or list of consecutive Dimensions.
    new_dim_or_dims: a Dimension or list of Dimensions (possibly empty).

  Raises:
    UnknownNameError: if an old dim is not in the shape.
    ShapeError: if the old dims are not consecutive, in order.

  Example:
    >>> replace_dimensions(dims_lib.convert_to_shape("b:2,h:4,d:8"),
    ...                    dims_lib.convert_to_shape("h:4,d:8").dims,
    ...                    dims_lib.Dimension("hd", 32))
    Shape[b=2, hd=32]
  """
  if isinstance(tensor_or_shape, Tensor):
    new_shape = replace_dimensions(tensor_or_shape.shape, old_dim_or_dims,
                                   new_dim_or_dims)
    return reshape(tensor_or_shape, new_shape, name="replace_dimensions")
  shape = dims_lib.convert_to_shape(tensor_or_shape)
  old = _dim_list(old_dim_or_dims)
  new = _dim_list(new_dim_or_dims)
  if not old:
    raise ShapeError("replace_dimensions needs at least one dim to replace")
  for d in old:
    if d not in shape:
      raise UnknownNameError(f"replace_dimensions: dim {d} is not in "
                             f"{shape!r}")
  positions = [shape.index(d) for d in old]
  start = positions[0]
  if positions != list(range(start, start + len(old))):
    raise ShapeError(
        f"replace_dimensions: dims {[str(d) for d in old]} are not "
        f"consecutive and in order in {shape!r}; pass a run of adjacent "
        "dims, or transpose first")
  dims = shape.dims
  return dims_lib.Shape(dims[:start] + new + dims[start + len(old):])


def _dim_list(x):
  if isinstance(x, (dims_lib.Dimension, str)):
    return [dims_lib.convert_to_dimension(x)]
  return [dims_lib.convert_to_dimension(d) for d in x]
