"""Layout-invariant random tensors and dropout.

A random tensor is a function of its seed and each element's global index
only (``MeshImpl.random``, a counter-based hash in
``mesh_tf.lowering.random_kernels``), so every processor generates just its
own slice and yet the full tensor is the same on every mesh and layout.
``random_kernels.numpy_random`` computes the same values in NumPy.

Seeds are explicit integers.  ``seed=None`` derives one from the op's
unique (deterministic) name, so that two dropouts built with ``seed=None``
draw different masks.  The same seed always gives the same tensor: a
training loop that wants fresh noise each step builds it with new seeds.
"""

import zlib

from mesh_tf.core import dims as dims_lib
from mesh_tf.core import dtypes as dtypes_lib
from mesh_tf.core.errors import DTypeError, MtfError, ShapeError
from mesh_tf.graph import Operation, Tensor
from mesh_tf.lowering.lazy_tf import tf

__all__ = ["RandomOperation", "random_uniform", "random_normal", "dropout"]


class RandomOperation(Operation):
  """A tensor of ``shape`` drawn from ``kind`` ("uniform" or "normal").

  No inputs and no gradient.  Attributes: ``kind``, ``seed`` (the integer
  actually used), ``params`` (``minval``/``maxval`` or ``mean``/``stddev``).
  Integer uniform tensors are ``floor`` of a float64 uniform on
  ``[minval, maxval)``.
  """

  def __init__(self, mesh, shape, dtype, kind=None, seed=None, params=None,
               name=None, **tf_kwargs):
    if callable(dtype):
      # Mesh TF's RandomOperation(mesh, shape, tf_fn, **kwargs), e.g.
      # tf_fn=tf.random.uniform with minval=, maxval=, dtype=, seed=.
      dtype, kind, seed, params = _from_tf_fn(dtype, tf_kwargs)
    elif tf_kwargs or kind is None:
      raise MtfError(
          f"RandomOperation takes (mesh, shape, dtype, kind, seed, params) or "
          f"Mesh TF's (mesh, shape, tf_fn, **kwargs); got dtype={dtype!r}, "
          f"kind={kind!r}, keywords {sorted(tf_kwargs)}")
    super().__init__([], mesh=mesh, name=name or f"random_{kind}")
    if seed is None:
      seed = zlib.crc32(self.name.encode("utf-8"))
    self.kind = kind
    self.seed = int(seed)
    self.params = dict(params or {})
    self._outputs = [Tensor(self, shape, dtype)]

  no_gradient_reason = "a random draw has no inputs"

  def cost_params(self):
    return (self.kind, tuple(sorted(self.params.items())))

  def lower(self, lowering):
    impl = lowering.mesh_impl(self)
    out = self.outputs[0]
    if dtypes_lib.is_floating(out.dtype):
      y = impl.random(out.shape, out.dtype, self.kind, self.seed,
                      **self.params)
    else:
      u = impl.random(out.shape, "float64", self.kind, self.seed,
                      **self.params)
      dtype = out.dtype
      y = impl.slicewise(lambda t: tf.cast(tf.floor(t), dtype), u,
                         shape=out.shape, dtype=dtype)
    lowering.set_tensor_lowering(out, y)


_TF_PARAMS = {"uniform": ("minval", "maxval"), "normal": ("mean", "stddev")}


def _from_tf_fn(tf_fn, kwargs):
  """``(dtype, kind, seed, params)`` of Mesh TF's ``tf_fn(shape, **kwargs)``:
  TF's uniform or normal draws (``tf.random.uniform``, ``tf.random_normal``
  ...), known by the function's name."""
  fn_name = getattr(tf_fn, "__name__", repr(tf_fn))
  kinds = [k for k in _TF_PARAMS if k in fn_name and "truncated" not in fn_name]
  if not kinds:
    raise MtfError(f"RandomOperation: tf_fn {fn_name} is not a uniform or "
                   "normal draw; use tf.random.uniform or tf.random.normal")
  kind = kinds[0]
  kwargs = dict(kwargs)
  dtype = kwargs.pop("dtype", "float32")
  dtype = getattr(dtype, "name", dtype)
  seed = kwargs.pop("seed", None)
  unknown = sorted(set(kwargs) - set(_TF_PARAMS[kind]))
  if unknown:
    raise MtfError(f"RandomOperation: {fn_name} got keywords {unknown}; use "
                   f"{list(_TF_PARAMS[kind])}, dtype and seed")
  defaults = {"minval": 0.0, "maxval": None, "mean": 0.0, "stddev": 1.0}
  params = {k: kwargs.get(k, defaults[k]) for k in _TF_PARAMS[kind]}
  if kind == "uniform" and params["maxval"] is None:
    params["maxval"] = 1.0
  return dtype, kind, seed, params


def _check_seed(seed, what):
  if seed is not None and (isinstance(seed, bool) or not isinstance(seed,
                                                                   int)):
    raise MtfError(f"{what}: seed must be a Python int or None, got "
                   f"{seed!r}")


def random_uniform(mesh, shape, minval=0.0, maxval=1.0, dtype="float32",
                   seed=0, name=None):
  """Uniform random values on ``[minval, maxval)``, the same on every layout.

  Args:
    mesh: the mtf Mesh.
    shape: the Shape (or ``"a:2,b:3"``).
    minval, maxval: the range; for integer dtypes the values are integers in
      ``[minval, maxval)``.
    dtype: a float or integer dtype.
    seed: a Python int; None derives one from the op's name.
    name: op name.

  Raises:
    ShapeError: if ``maxval <= minval``.
    DTypeError: for a bool or complex dtype.
    MtfError: for a seed that is not an int.

  Example:
    >>> u = random_uniform(mesh, "batch:8,d:16", seed=3)  # doctest: +SKIP
  """
  what = name or "random_uniform"
  shape = dims_lib.convert_to_shape(shape)
  dtype = dtypes_lib.as_dtype(dtype)
  if not (dtypes_lib.is_floating(dtype) or dtypes_lib.is_integer(dtype)):
    raise DTypeError(f"{what}: dtype {dtype} is not a float or integer type")
  if not maxval > minval:
    raise ShapeError(f"{what}: maxval={maxval!r} must be greater than "
                     f"minval={minval!r}")
  _check_seed(seed, what)
  return RandomOperation(mesh, shape, dtype, "uniform", seed,
                         {"minval": float(minval), "maxval": float(maxval)},
                         name=name).outputs[0]


def random_normal(mesh, shape, mean=0.0, stddev=1.0, dtype="float32", seed=0,
                  name=None):
  """Normal(``mean``, ``stddev``) random values, the same on every layout.

  Args:
    mesh: the mtf Mesh.
    shape: the Shape (or ``"a:2,b:3"``).
    mean, stddev: the distribution's parameters (``stddev >= 0``).
    dtype: a float dtype.
    seed: a Python int; None derives one from the op's name.
    name: op name.

  Raises:
    ShapeError: if ``stddev < 0``.
    DTypeError: for a non-float dtype.
    MtfError: for a seed that is not an int.
  """
  what = name or "random_normal"
  shape = dims_lib.convert_to_shape(shape)
  dtype = dtypes_lib.as_dtype(dtype)
  if not dtypes_lib.is_floating(dtype):
    raise DTypeError(f"{what}: dtype {dtype} is not a float type; normal "
                     "samples need float16, bfloat16, float32 or float64")
  if stddev < 0:
    raise ShapeError(f"{what}: stddev={stddev!r} must be non-negative")
  _check_seed(seed, what)
  return RandomOperation(mesh, shape, dtype, "normal", seed,
                         {"mean": float(mean), "stddev": float(stddev)},
                         name=name).outputs[0]


def dropout(x, keep_prob=None, rate=None, noise_shape=None, seed=0,
            name=None):
  """Zeroes each entry with probability ``rate`` and scales the rest by
  ``1 / keep_prob``.

  The mask is ``random_uniform(noise_shape, seed) < keep_prob``, broadcast by
  dim name to ``x``'s shape, so it is the same on every layout.  It is built
  from ordinary ops (random_uniform, less, cast, multiply), so its gradient
  is ``dy * mask / keep_prob`` with no extra registration.

  Args:
    x: a float mtf Tensor.
    keep_prob: probability of keeping an entry, in ``(0, 1]``.  A bool here
      is Mesh TF's newer ``is_training`` argument: False returns ``x``.
    rate: probability of dropping an entry, in ``[0, 1)``; give exactly one
      of ``keep_prob`` and ``rate``.
    noise_shape: dims of ``x`` that get independent noise (the mask is
      shared along the others); default ``x.shape``.
    seed: a Python int; None derives one from the op's name.
    name: op name.

  Returns:
    A Tensor of ``x``'s shape and dtype (``x`` itself when nothing drops).

  Raises:
    MtfError: if both or neither of ``keep_prob`` and ``rate`` are given, or
      the seed is not an int.
    ShapeError: if the probability is out of range, or ``noise_shape`` has a
      dim that ``x`` does not have.

  Example:
    >>> h = dropout(h, rate=0.1, seed=7)  # doctest: +SKIP
  """
  what = name or "dropout"
  if isinstance(keep_prob, bool):
    # Mesh TF's newer signature: dropout(x, is_training, keep_prob=, rate=).
    if not keep_prob:
      return x
    keep_prob = None
  if (keep_prob is None) == (rate is None):
    raise MtfError(f"{what}: give exactly one of keep_prob and rate (got "
                   f"keep_prob={keep_prob!r}, rate={rate!r})")
  if keep_prob is None:
    if not 0.0 <= rate < 1.0:
      raise ShapeError(f"{what}: rate={rate!r} must be in [0, 1)")
    keep_prob = 1.0 - rate
  elif not 0.0 < keep_prob <= 1.0:
    raise ShapeError(f"{what}: keep_prob={keep_prob!r} must be in (0, 1]")
  if not isinstance(x, Tensor):
    raise ShapeError(f"{what}: expected an mtf Tensor, got {x!r}")
  if not dtypes_lib.is_floating(x.dtype):
    raise DTypeError(f"{what}: {x.name} has dtype {x.dtype}; dropout needs a "
                     "float tensor")
  _check_seed(seed, what)
  noise_shape = (x.shape if noise_shape is None
                 else dims_lib.convert_to_shape(noise_shape))
  for d in noise_shape:
    if d not in x.shape:
      raise ShapeError(f"{what}: noise_shape dim {d} is not a dim of "
                       f"{x.name} {x.shape!r}; noise_shape must be a subset "
                       "of x's dims")
  if keep_prob == 1.0:
    return x
  from mesh_tf.ops import elementwise as ew
  u = RandomOperation(x.mesh, noise_shape, "float32", "uniform", seed,
                      {"minval": 0.0, "maxval": 1.0},
                      name=f"{what}/noise").outputs[0]
  keep = ew.cast(ew.less(u, keep_prob), x.dtype)
  return ew.multiply(x, ew.multiply(keep, 1.0 / keep_prob), name=what)
