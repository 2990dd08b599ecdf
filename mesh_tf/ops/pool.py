"""Max and average pooling over named spatial dims (1-d, 2-d and 3-d).

Windows equal strides (VALID padding), so a split spatial dim whose blocks
are multiples of the window needs no communication at all.  Gradients use
TF's pooling gradient kernels locally, for the same reason.
"""

import math

from mesh_tf.core import dims as dims_lib
from mesh_tf.core.errors import MtfError, ShapeError
from mesh_tf.graph import Operation, Tensor
from mesh_tf.lowering.lazy_tf import tf
from mesh_tf.ops.base import dim_name as _as_name
from mesh_tf.ops.base import permutation as _perm
from mesh_tf.ops.base import transpose_slice as _transpose

__all__ = ["PoolBackPropOperation", "PoolOperation", "PoolGradOperation",
           "max_pool1d", "max_pool2d",
           "max_pool3d", "avg_pool1d", "avg_pool2d", "avg_pool3d"]


def _pool_kind(kind, n):
  """"max"/"avg", also from Mesh TF's names "MAX_2D", "AVG_3D"..."""
  k = str(kind).lower()
  if "_" in k:  # Mesh TF's pool_fn_string: the suffix gives the rank
    k, _, rank = k.partition("_")
    if rank != f"{n}d":
      raise MtfError(f"pooling {kind!r} is {rank.upper()} but pools {n} "
                     f"spatial dims; use {k.upper()}_{n}D")
  if k not in ("max", "avg"):
    raise MtfError(f"unknown pooling {kind!r}; use 'max' or 'avg' (or Mesh "
                   f"TF's MAX_{n}D / AVG_{n}D)")
  return k


def _original_signature(x, ksize, strides):
  """``(spatial dims, window sizes)`` of Mesh TF's ``(ksize, strides)``."""
  if list(ksize) != list(strides):
    raise MtfError(f"pooling {x.name}: ksize {list(ksize)} differs from "
                   f"strides {list(strides)}; windows must equal strides")
  n = len(ksize)
  if x.shape.ndims < n + 1:
    raise ShapeError(f"pooling {x.name} {x.shape!r}: {n} spatial dims and a "
                     "channel dim need more dims")
  return x.shape.dims[-n - 1:-1], list(ksize)


class PoolOperation(Operation):
  """Max or average pooling with window = stride over ``spatial_dims``.

  ``PoolOperation(x, spatial_dims, ksizes, kind)``, or Mesh TF's
  ``PoolOperation(x, ksize, strides, pool_fn_string)`` (integer window and
  strides, equal, over the dims just before ``x``'s last (channel) dim).
  As Mesh TF defines it, the spatial dims are unsplittable
  (``unsplittable_dims``); mesh-tf's lowering splits them where each block
  holds whole windows (``lowering_unsplittable_dims`` is empty).
  """

  def __init__(self, x, spatial_dims, ksizes, kind, name=None):
    spatial_dims = list(spatial_dims)
    if spatial_dims and all(isinstance(k, int) for k in spatial_dims):
      spatial_dims, ksizes = _original_signature(x, spatial_dims, ksizes)
    kind = _pool_kind(kind, len(spatial_dims))
    super().__init__([x], name=name or f"{kind}_pool")
    self.kind = kind
    self.spatial_names = [_as_name(d) for d in spatial_dims]
    self.ksizes = list(ksizes)
    if len(self.ksizes) != len(self.spatial_names):
      raise ShapeError(f"{self.name}: {len(self.ksizes)} window sizes for "
                       f"{len(self.spatial_names)} spatial dims")
    dims = []
    for d in x.shape:
      if d.name in self.spatial_names:
        k = self.ksizes[self.spatial_names.index(d.name)]
        if d.size % k:
          raise ShapeError(f"{self.name}: spatial dim {d} of {x.name} is not "
                           f"a multiple of the pooling window {k}")
        d = dims_lib.Dimension(d.name, d.size // k)
      dims.append(d)
    for n in self.spatial_names:
      if n not in x.shape:
        raise ShapeError(f"{self.name}: {x.name} {x.shape!r} has no dim "
                         f"{n!r}")
    self._outputs = [Tensor(self, dims_lib.Shape(dims), x.dtype)]

  @property
  def unsplittable_dims(self):
    """The spatial dims, as Mesh TF defines it."""
    return frozenset(self.spatial_names)

  @property
  def lowering_unsplittable_dims(self):
    """None: blocks of a split spatial dim hold whole windows."""
    return frozenset()

  def cost_params(self):
    return (self.kind, tuple(self.spatial_names), tuple(self.ksizes))

  def _layout(self, shape):
    others = [n for n in shape.dimension_names
              if n not in self.spatial_names]
    order = others + self.spatial_names
    return others, _perm(shape.dimension_names, order), order

  def _pool(self, t, others_shape):
    """Pools TF tensor ``t`` laid out as [others..., spatial...]."""
    n = math.prod(others_shape)
    sp = [int(s) for s in t.shape[len(others_shape):]]
    t = tf.reshape(t, [n] + sp + [1])
    fn = tf.nn.max_pool if self.kind == "max" else tf.nn.avg_pool
    # An explicit data_format: TF's 3-d pooling gradient reads the attr.
    fmt = {1: "NWC", 2: "NHWC", 3: "NDHWC"}[len(sp)]
    y = fn(t, self.ksizes, self.ksizes, "VALID", data_format=fmt)
    return tf.reshape(y, list(others_shape) + [int(s) for s in y.shape[1:-1]])

  def lower(self, lowering):
    impl = lowering.mesh_impl(self)
    x, out = self.inputs[0], self.outputs[0]
    laid = lowering.laid_out(x)
    others, perm, order = self._layout(x.shape)
    back = _perm(order, out.shape.dimension_names)
    n_oth = len(others)

    def kernel(t):
      t = _transpose(t, perm)
      y = self._pool(t, [int(s) for s in t.shape[:n_oth]])
      return _transpose(y, back)
    # Blocks of a split spatial dim are whole windows: the output dim
    # (n / k) is divisible by the mesh axis, so (n / axis) % k == 0.
    lowering.set_tensor_lowering(out, impl.slicewise(
        kernel, laid, shape=out.shape, flops=laid.slice_size))

  def gradient(self, grad_ys):
    (dy,) = grad_ys
    if dy is None:
      return [None]
    return [PoolGradOperation(self, dy).outputs[0]]


class PoolGradOperation(Operation):
  """The gradient of a :class:`PoolOperation` (local: windows never cross
  block boundaries)."""

  no_gradient_reason = "second derivatives of pooling are not built"

  def __init__(self, pool_op, dy, name=None):
    x = pool_op.inputs[0]
    super().__init__([x, dy], name=name or f"{pool_op.name}/grad")
    self.pool_op = pool_op
    self._outputs = [Tensor(self, x.shape, x.dtype)]

  def cost_params(self):
    return (self.pool_op.signature,)

  def lower(self, lowering):
    x, dy = self.inputs
    _lower_pool_grad(lowering, self, self.pool_op, x, dy)


def _lower_pool_grad(lowering, op, pool, x, dy):
  """Sets ``op``'s output to the gradient of the pooling ``pool`` (a
  PoolOperation or a _PoolSpec) of ``x`` against ``dy``, slice by slice
  (windows never cross slices, so it is local)."""
  impl = lowering.mesh_impl(op)
  others, perm, order = pool._layout(x.shape)  # pylint: disable=protected-access
  dy_perm = _perm(dy.shape.dimension_names, order)
  back = _perm(order, x.shape.dimension_names)
  n_oth = len(others)

  def kernel(xs, dys):
    xs = _transpose(xs, perm)
    dys = _transpose(dys, dy_perm)
    oth = [int(s) for s in xs.shape[:n_oth]]
    with tf.GradientTape() as tape:
      tape.watch(xs)
      y = pool._pool(xs, oth)  # pylint: disable=protected-access
    return _transpose(tape.gradient(y, xs, output_gradients=dys), back)
  laid_x = lowering.laid_out(x)
  lowering.set_tensor_lowering(op.outputs[0], impl.slicewise(
      kernel, laid_x, lowering.laid_out(dy), shape=x.shape,
      flops=2 * laid_x.slice_size))


class _PoolSpec:
  """The geometry of a pooling, without an op in the graph (for
  :class:`PoolBackPropOperation`)."""

  def __init__(self, kind, spatial_names, ksizes):
    self.kind, self.spatial_names, self.ksizes = kind, spatial_names, ksizes

  _layout = PoolOperation._layout  # pylint: disable=protected-access
  _pool = PoolOperation._pool  # pylint: disable=protected-access


class PoolBackPropOperation(Operation):
  """The input gradient of a pooling, with Mesh TF's constructor
  ``PoolBackPropOperation(x, y, dy, ksize, strides, pool_fn_string,
  name=None)``; lowered as :class:`PoolGradOperation`.

  ``x`` is ``[batch..., spatial x n, channels]``, ``y`` the pooled ``x``,
  ``pool_fn_string`` one of ``"MAX_2D"``, ``"AVG_2D"``, ``"MAX_3D"``,
  ``"AVG_3D"``; as in Mesh TF, ``ksize`` must equal ``strides``.

  Raises:
    ShapeError: if ``ksize != strides`` or the shapes do not fit.
  """

  no_gradient_reason = "second derivatives of pooling are not built"

  def __init__(self, x, y, dy, ksize, strides, pool_fn_string, name=None):
    super().__init__([x, y, dy], name=name or "pool_backprop")
    ksize, strides = list(ksize), list(strides)
    if ksize != strides:
      raise ShapeError(f"{self.name}: ksize {ksize} must equal strides "
                       f"{strides} (non-overlapping windows)")
    n = len(ksize)
    kind = _pool_kind(pool_fn_string, n)
    if x.shape.ndims < n + 1:
      raise ShapeError(f"{self.name}: x {x.shape!r} needs {n} spatial dims "
                       "before its channel dim")
    names = x.shape.dimension_names[-1 - n:-1]
    self.spec = _PoolSpec(kind, names, ksize)
    want = [dims_lib.Dimension(d.name, d.size // ksize[names.index(d.name)])
            if d.name in names else d for d in x.shape]
    if dy.shape != dims_lib.Shape(want) or y.shape != dy.shape:
      raise ShapeError(f"{self.name}: y {y.shape!r} and dy {dy.shape!r} "
                       f"must be x {x.shape!r} pooled by {ksize}")
    self._outputs = [Tensor(self, x.shape, dy.dtype)]

  def cost_params(self):
    return (self.spec.kind, tuple(self.spec.spatial_names),
            tuple(self.spec.ksizes))

  def lower(self, lowering):
    x, _, dy = self.inputs
    _lower_pool_grad(lowering, self, self.spec, x, dy)


def _poolnd(n, kind):
  def op(x, ksize=None, spatial_dims=None, name=None):
    if spatial_dims is None:
      spatial_dims = x.shape.dimension_names[-1 - n:-1]
    if ksize is None:
      ksize = [2] * n
    if isinstance(ksize, int):
      ksize = [ksize] * n
    return PoolOperation(x, spatial_dims, ksize, kind,
                         name=name or f"{kind}_pool{n}d").outputs[0]
  op.__name__ = op.__qualname__ = f"{kind}_pool{n}d"
  op.__doc__ = (f"{'Max' if kind == 'max' else 'Average'} pooling over "
                f"{n} spatial dims (default: the {n} before the last dim) "
                "with window = stride = ``ksize`` (default 2) and VALID "
                "padding; each spatial dim must be a multiple of its window.")
  return op


max_pool1d, max_pool2d, max_pool3d = (_poolnd(1, "max"), _poolnd(2, "max"),
                                      _poolnd(3, "max"))
avg_pool1d, avg_pool2d, avg_pool3d = (_poolnd(1, "avg"), _poolnd(2, "avg"),
                                      _poolnd(3, "avg"))
