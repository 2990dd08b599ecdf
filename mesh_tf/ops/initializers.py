"""Initializers: a variable's initial value, one slice at a time.

Every initializer computes a slice from ``(full_shape, begin, slice_shape,
dtype, seed)``, so the assembled value never depends on the layout.
"""

import numpy as np

from mesh_tf.lowering import random_kernels
from mesh_tf.lowering.lazy_tf import tf


# --- initializers: fn(full_shape, slice_begin, slice_shape, dtype, seed) ----
class Initializer:
  """Base class: computes one slice of a variable's initial value."""

  def __call__(self, full_shape, begin, slice_shape, dtype, seed):
    raise NotImplementedError

  def numpy(self, full_shape, dtype, seed):
    """The full initial value, for references and checkpoints."""
    raise NotImplementedError


class constant_initializer(Initializer):  # pylint: disable=invalid-name
  """Every element equals ``value``."""

  def __init__(self, value=0.0):
    self.value = value

  def __call__(self, full_shape, begin, slice_shape, dtype, seed):
    return tf.fill(slice_shape, tf.constant(self.value, dtype))

  def numpy(self, full_shape, dtype, seed):
    return np.full(full_shape, self.value, dtype=dtype)


def zeros_initializer():
  return constant_initializer(0.0)


def ones_initializer():
  return constant_initializer(1.0)


class _RandomInitializer(Initializer):
  """Random values from the layout-invariant counter-based RNG.

  Slices are computed on the host with NumPy (one TF op per slice instead of
  dozens of eager hash ops), from the same hash as ``MeshImpl.random``.
  """
  kind = None

  def __init__(self, seed=None, **params):
    self.seed, self.params = seed, params

  def _seed(self, seed):
    return self.seed if self.seed is not None else seed

  def __call__(self, full_shape, begin, slice_shape, dtype, seed):
    value = random_kernels.numpy_random(
        full_shape, self._seed(seed), self.kind, begin=begin,
        slice_shape=slice_shape, **self.params)
    return tf.cast(tf.constant(value), dtype)

  def numpy(self, full_shape, dtype, seed):
    return random_kernels.numpy_random(full_shape, self._seed(seed),
                                       self.kind, dtype=dtype, **self.params)


class random_normal_initializer(_RandomInitializer):  # pylint: disable=invalid-name
  """Normal(mean, stddev), the same for every layout."""
  kind = "normal"

  def __init__(self, mean=0.0, stddev=1.0, seed=None):
    super().__init__(seed, mean=mean, stddev=stddev)
    self.mean, self.stddev = mean, stddev


class random_uniform_initializer(_RandomInitializer):  # pylint: disable=invalid-name
  """Uniform[minval, maxval), the same for every layout."""
  kind = "uniform"

  def __init__(self, minval=-0.05, maxval=0.05, seed=None):
    super().__init__(seed, minval=minval, maxval=maxval)
    self.minval, self.maxval = minval, maxval


class truncated_normal_initializer(_RandomInitializer):  # pylint: disable=invalid-name
  """Normal(mean, stddev) cut at two standard deviations (TensorFlow's
  truncated normal, without its rescaling), the same for every layout."""
  kind = "truncated_normal"

  def __init__(self, mean=0.0, stddev=1.0, seed=None):
    super().__init__(seed, mean=mean, stddev=stddev)
    self.mean, self.stddev = mean, stddev


class tf_truncated_normal_initializer(Initializer):  # pylint: disable=invalid-name
  """The kernels Mesh TF drew from ``tf.truncated_normal_initializer``.

  The original's layers ask TensorFlow's v1 ``truncated_normal_initializer``
  for their normal kernels.  These do too, when a slice is first made:
  while that name is TensorFlow's own initializer, the values come from the
  layout-invariant :class:`truncated_normal_initializer` (the same
  distribution, reproducible per variable); when a program or a test has
  put another callable under that name, it is called for the whole kernel,
  ``fn(stddev=...)(shape, dtype=...)``, and sliced.
  """

  def __init__(self, stddev=1.0):
    self.stddev = stddev
    self._own = truncated_normal_initializer(stddev=stddev)
    self._resolved = (None, None)   # (the factory seen, its initializer)

  def _delegate(self):
    factory = tf.compat.v1.truncated_normal_initializer
    if factory is tf.compat.v1.initializers.truncated_normal:
      return self._own
    if self._resolved[0] is not factory:
      self._resolved = (factory,
                        _ValueInitializer(factory(stddev=self.stddev)))
    return self._resolved[1]

  def __call__(self, full_shape, begin, slice_shape, dtype, seed):
    return self._delegate()(full_shape, begin, slice_shape, dtype, seed)

  def numpy(self, full_shape, dtype, seed):
    return self._delegate().numpy(full_shape, dtype, seed)


class _ValueInitializer(Initializer):
  """A full NumPy value, or a callable ``(shape, dtype) -> value`` (e.g. a
  Keras initializer), computed once on the host and sliced."""

  def __init__(self, value):
    self.value = value
    self._last = (None, None)  # (key, full TF value) of the latest call

  def _full(self, full_shape, dtype):
    v = self.value
    if callable(v):
      v = v(list(full_shape), dtype=dtype)
    return v

  def _full_tf(self, full_shape, dtype):
    # A random callable (a TF initializer without a seed) must be called
    # once per variable, not once per slice, or replicas would differ.  The
    # value is kept for the next slice of the same graph (or of eager mode).
    graph = None if tf.executing_eagerly() else id(
        tf.compat.v1.get_default_graph())
    key = (graph, tuple(full_shape), dtype)
    if self._last[0] != key:
      self._last = (key, tf.cast(self._full(full_shape, dtype), dtype))
    return self._last[1]

  def __call__(self, full_shape, begin, slice_shape, dtype, seed):
    full = self._full_tf(full_shape, dtype)
    if tuple(slice_shape) == tuple(full_shape):
      return full
    return tf.slice(full, begin, slice_shape)

  def numpy(self, full_shape, dtype, seed):
    return np.asarray(self._full(full_shape, dtype)).astype(dtype)


def _as_initializer(init):
  if init is None:
    return random_normal_initializer(stddev=1.0)
  if isinstance(init, Initializer):
    return init
  if np.ndim(init) == 0 and not callable(init):
    return constant_initializer(init)
  return _ValueInitializer(init)
