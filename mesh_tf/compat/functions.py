"""Functions of Mesh TensorFlow's ``ops.py`` that mesh-tf lacked, composed
from mesh-tf's own ops (so their lowering, gradients and cost come from
those ops), plus its pure helpers on mesh shapes and processor numbers.
"""

import logging
import math

from mesh_tf.core import dims as dims_lib
from mesh_tf.core.errors import MtfError, ShapeError
from mesh_tf.core.layout import convert_to_layout_rules
from mesh_tf.lowering.lazy_tf import tf
from mesh_tf.ops import creation as creation_ops
from mesh_tf.ops import elementwise as ew
from mesh_tf.ops import random as random_ops
from mesh_tf.ops import reduce as reduce_ops
from mesh_tf.ops import reshape as reshape_ops
from mesh_tf.ops import shift as shift_ops
from mesh_tf.ops import slicing
from mesh_tf.ops import topk as topk_ops

__all__ = ["anonymize", "anonymous_shape", "combined_dimension",
           "left_halo_exchange", "list_product", "log_variable_sizes",
           "parallel", "nth_largest_element",
           "nth_smallest_element", "pnum_to_group",
           "pnum_to_processor_coordinates", "pool_tensor_1d",
           "processor_coordinates_to_pnum", "processor_groups",
           "reduce_first", "sample_with_temperature", "stride_tensor_1d",
           "tensor_dim_to_mesh_dim_size", "tensor_dim_to_size_per_split"]


# --- pure helpers -------------------------------------------------------------
def list_product(xs):
  """The product of a list of numbers (1 for an empty list)."""
  return math.prod(xs)


def combined_dimension(dims, name=None):
  """One Dimension as large as ``dims`` together, named ``name`` (default:
  their names joined by ``_``)."""
  dims = [dims_lib.convert_to_dimension(d) for d in dims]
  if not dims:
    raise ShapeError("combined_dimension needs at least one dimension")
  return dims_lib.Dimension(name or "_".join(d.name for d in dims),
                            math.prod(d.size for d in dims))


def anonymous_shape(shape):
  """``shape`` with each dim renamed ``_<name>``: names no layout rule
  mentions, so a tensor of that shape is replicated."""
  shape = dims_lib.convert_to_shape(shape)
  return dims_lib.Shape([dims_lib.Dimension("_" + d.name, d.size)
                         for d in shape])


def anonymize(x):
  """``x`` moved to its :func:`anonymous_shape` (fully replicated)."""
  return reshape_ops.reshape(x, anonymous_shape(x.shape))


def tensor_dim_to_mesh_dim_size(layout, mesh_shape, tensor_dim):
  """The size of the mesh axis that ``tensor_dim`` is split over (1 if
  none; the product of the sizes for a dim over several axes)."""
  mesh_shape = dims_lib.convert_to_shape(mesh_shape)
  axes = convert_to_layout_rules(layout).tensor_dimension_to_mesh_axes(
      dims_lib.convert_to_dimension(tensor_dim), mesh_shape)
  return math.prod(mesh_shape[a].size for a in axes)


def tensor_dim_to_size_per_split(layout, mesh_shape, tensor_dim):
  """How much of ``tensor_dim`` one processor holds.

  Raises:
    ShapeError: if the dim is not divisible by its mesh axis.
  """
  tensor_dim = dims_lib.convert_to_dimension(tensor_dim)
  n = tensor_dim_to_mesh_dim_size(layout, mesh_shape, tensor_dim)
  if tensor_dim.size % n:
    raise ShapeError(f"dim {tensor_dim} is not divisible by its mesh axis of "
                     f"size {n}; change the layout rule for "
                     f"{tensor_dim.name!r}")
  return tensor_dim.size // n


def _strides(mesh_shape):
  sizes = dims_lib.convert_to_shape(mesh_shape).to_integer_list()
  return [math.prod(sizes[i + 1:]) for i in range(len(sizes))], sizes


def pnum_to_processor_coordinates(mesh_shape, pnum):
  """Row-major coordinates of processor ``pnum`` on ``mesh_shape``."""
  strides, sizes = _strides(mesh_shape)
  return [(pnum // st) % n for st, n in zip(strides, sizes)]


def processor_coordinates_to_pnum(mesh_shape, coord):
  """The processor number of row-major coordinates ``coord``."""
  strides, _ = _strides(mesh_shape)
  return sum(c * st for c, st in zip(coord, strides))


def _axis_indices(mesh_shape, mesh_axes):
  mesh_shape = dims_lib.convert_to_shape(mesh_shape)
  out = []
  for a in mesh_axes:
    out.append(a if isinstance(a, int) else mesh_shape.index(a))
  return out


def processor_groups(mesh_shape, group_dims):
  """Lists of pnums that differ only along ``group_dims`` (mesh-axis
  indices or names), each in row-major order, groups ordered by their
  first pnum."""
  mesh_shape = dims_lib.convert_to_shape(mesh_shape)
  axes = set(_axis_indices(mesh_shape, group_dims))
  groups = {}
  for p in range(mesh_shape.size):
    c = pnum_to_processor_coordinates(mesh_shape, p)
    key = tuple(x for i, x in enumerate(c) if i not in axes)
    groups.setdefault(key, []).append(p)
  return list(groups.values())


def pnum_to_group(mesh_shape, group_dims, pnum):
  """The index, in :func:`processor_groups` order, of ``pnum``'s group."""
  for i, g in enumerate(processor_groups(mesh_shape, group_dims)):
    if pnum in g:
      return i
  raise MtfError(f"pnum {pnum} is not a processor of mesh {mesh_shape!r}")


# --- ops composed from mesh-tf's ---------------------------------------------
def _dim(x, dim, what):
  name = dim if isinstance(dim, str) else dim.name
  if name not in x.shape:
    raise ShapeError(f"{what}: {x.name} {x.shape!r} has no dim {name!r}")
  return x.shape.get_dim_by_name(name)


def _pick(x, dim, index, name=None):
  """``x`` at ``index`` along ``dim``, as a masked sum (the dim may stay
  split, unlike a size-1 slice of it)."""
  at = ew.equal(creation_ops.range(x.mesh, dim, "int32"), index)
  return reduce_ops.reduce_sum(ew.where(at, x, creation_ops.zeros_like(x)),
                               reduced_dim=dim, name=name)


def reduce_first(x, reduced_dim, name=None):
  """The entries of ``x`` at index 0 of ``reduced_dim`` (shape
  ``x.shape - reduced_dim``)."""
  return _pick(x, _dim(x, reduced_dim, "reduce_first"), 0, name=name)


def nth_largest_element(x, n, reduced_dim, name=None):
  """The ``n``-th largest entry along ``reduced_dim`` (``n = 0``: the
  largest)."""
  reduced_dim = _dim(x, reduced_dim, "nth_largest_element")
  if not 0 <= n < reduced_dim.size:
    raise ShapeError(f"nth_largest_element: n={n} is outside [0, "
                     f"{reduced_dim.size}) for dim {reduced_dim}")
  k = dims_lib.Dimension("_nth_k", n + 1)
  values, _ = topk_ops.top_k(x, reduced_dim, k)
  return _pick(values, k, n, name=name)


def nth_smallest_element(x, n, reduced_dim, name=None):
  """The ``n``-th smallest entry along ``reduced_dim`` (``n = 0``: the
  smallest)."""
  return ew.negative(nth_largest_element(ew.negative(x), n, reduced_dim,
                                         name=name))


def _pool_split(x, pool_dim, pool_size, what):
  pool_dim = _dim(x, pool_dim, what)
  if pool_size < 1 or pool_dim.size % pool_size:
    raise ShapeError(f"{what}: dim {pool_dim} is not a multiple of "
                     f"pool_size={pool_size}")
  outer = dims_lib.Dimension(pool_dim.name, pool_dim.size // pool_size)
  inner = dims_lib.Dimension("_pool_" + pool_dim.name, pool_size)
  new = []
  for d in x.shape:
    new.extend([outer, inner] if d.name == pool_dim.name else [d])
  return reshape_ops.reshape(x, dims_lib.Shape(new)), inner


def pool_tensor_1d(tensor, pool_dim, reduce_fn=None, pool_size=2):
  """Pools ``tensor`` along ``pool_dim`` in windows of ``pool_size``
  (window = stride) with ``reduce_fn(x, reduced_dim=...)`` (default
  ``mtf.reduce_max``)."""
  reduce_fn = reduce_fn or reduce_ops.reduce_max
  split, inner = _pool_split(tensor, pool_dim, pool_size, "pool_tensor_1d")
  return reduce_fn(split, reduced_dim=inner)


def stride_tensor_1d(tensor, pool_dim, pool_size=2):
  """Every ``pool_size``-th entry of ``tensor`` along ``pool_dim``."""
  split, inner = _pool_split(tensor, pool_dim, pool_size, "stride_tensor_1d")
  return reduce_first(split, inner)


def left_halo_exchange(x, blocks_dim, block_size_dim, halo_size, wrap=False):
  """Prepends to each block the ``halo_size`` entries before it (Mesh TF's
  one-sided :func:`~mesh_tf.ops.shift.halo_exchange`)."""
  within = _dim(x, block_size_dim, "left_halo_exchange")
  both = shift_ops.halo_exchange(x, blocks_dim, block_size_dim, halo_size,
                                 wrap)
  return slicing.slice(both, 0, within.size + halo_size, within.name)


def sample_with_temperature(logits, dim, temperature=1.0, seed=0, name=None):
  """An int32 sample of the softmax of ``logits / temperature`` over
  ``dim`` (Gumbel-max); ``temperature=0`` gives the argmax.

  The noise is mesh-tf's layout-invariant random stream, so every layout
  draws the same sample for a given ``seed``.
  """
  dim = _dim(logits, dim, "sample_with_temperature")
  if temperature == 0.0:
    return topk_ops.argmax(logits, dim, name=name)
  u = random_ops.random_uniform(logits.mesh, logits.shape, minval=1e-9,
                                maxval=1.0, dtype=logits.dtype, seed=seed)
  gumbel = ew.negative(ew.log(ew.negative(ew.log(u))))
  return topk_ops.argmax(logits + gumbel * float(temperature), dim,
                         name=name)



# --- host-side helpers --------------------------------------------------------
def parallel(devices, fn, *args, **kwargs):
  """Calls ``fn`` once per device, under ``tf.device``, with the i-th entry
  of each argument list (Mesh TF's ``parallel``).

  Args:
    devices: list of n device strings.
    fn: a function, or a list of n functions.
    *args, **kwargs: lists of n values each.

  Returns:
    The list of the n results.

  Raises:
    MtfError: if ``devices`` is not a list or an argument is not a list of
      ``len(devices)`` values.
  """
  if not isinstance(devices, list):
    raise MtfError(f"parallel: devices must be a list, got {devices!r}")
  n = len(devices)
  fns = fn if isinstance(fn, list) else [fn] * n
  for what, x in [("fn", fns)] + [(f"argument {i}", a)
                                  for i, a in enumerate(args)] + [
                                      (f"argument {k!r}", v)
                                      for k, v in kwargs.items()]:
    if not isinstance(x, list) or len(x) != n:
      raise MtfError(f"parallel: {what} must be a list of {n} values (one "
                     f"per device), got {x!r}")
  out = []
  for i, device in enumerate(devices):
    with tf.device(device):
      out.append(fns[i](*[a[i] for a in args],
                        **{k: v[i] for k, v in kwargs.items()}))
  return out


def log_variable_sizes(var_list=None, tag=None, verbose=True,
                       mesh_to_impl=None, log_file=None):
  """Logs each variable's name, shape and size, and the total.

  Args:
    var_list: mtf Variables (default: none logged, total 0).
    tag: a prefix for the summary line.
    verbose: log one line per variable too.
    mesh_to_impl: optional ``{mesh: MeshImpl}``; adds each variable's
      per-processor slice size.
    log_file: optional file object that also gets the lines.

  Returns:
    The total number of elements.
  """
  lines, total = [], 0
  for v in sorted(var_list or [], key=lambda v: v.name):
    size = v.shape.size
    total += size
    if verbose:
      line = f"Variable {v.name:<60} size {size:<12} shape {v.shape}"
      if mesh_to_impl and v.mesh in mesh_to_impl:
        line += (" slice size "
                 f"{math.prod(mesh_to_impl[v.mesh].slice_shape(v.shape))}")
      lines.append(line)
  lines.append(f"{tag or 'Variables'} total size: {total}")
  for line in lines:
    logging.info(line)
    if log_file is not None:
      log_file.write(line + "\n")
  return total
