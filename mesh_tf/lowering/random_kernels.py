"""Layout-invariant random numbers: a counter-based hash of each element's
global flat index and the seed.

Every processor generates only its own slice, yet the full tensor is the same
for every layout and mesh, because an element's value depends only on
``(seed, global index)``.  The same hash is written in NumPy for references.

The mixer is Chris Wellons' "lowbias32" integer hash (public-domain
constants from his hash-prospector write-up), applied twice with the seed.
The TF kernel multiplies in 16-bit halves so that int64 never overflows;
NumPy multiplies in uint64, whose wrap-around keeps the low 32 bits.
"""

import numpy as np

_M32 = 0xFFFFFFFF
_C1, _C2 = 0x7FEB352D, 0x846CA68B


def _seed32(seed):
  return (int(seed) * 0x9E3779B1 + 0x632BE5AB) & _M32


def _strides(full_shape):
  strides, s = [], 1
  for n in reversed(full_shape):
    strides.append(s)
    s *= n
  return list(reversed(strides))


# --- NumPy reference --------------------------------------------------------
def _np_mul32(x, c):
  # The low 32 bits of a product survive its wrap-around modulo 2**64.
  with np.errstate(over="ignore"):
    return ((np.asarray(x).astype(np.uint64) * np.uint64(c))
            & np.uint64(_M32)).astype(np.int64)


def _np_hash(x):
  x = x ^ (x >> 16)
  x = _np_mul32(x, _C1)
  x = x ^ (x >> 15)
  x = _np_mul32(x, _C2)
  return x ^ (x >> 16)


def _second_key(s):
  # Not hash(s): hash(0 ^ s) ^ hash(s) == 0 would send element 0 to
  # hash(0) == 0 for every seed (uniform ~3e-8, normal ~5.9 sigma).
  return int(_np_hash(_np_hash(np.int64(s))))


def _np_global_index(full_shape, begin, slice_shape):
  if begin is None:
    return np.arange(int(np.prod(full_shape, dtype=np.int64)),
                     dtype=np.int64).reshape(full_shape)
  idx = np.zeros(slice_shape, np.int64)
  n = len(slice_shape)
  for i, (b, l, st) in enumerate(zip(begin, slice_shape,
                                     _strides(full_shape))):
    r = np.arange(b, b + l, dtype=np.int64) * st
    idx = idx + r.reshape([l if j == i else 1 for j in range(n)])
  return idx


def _np_bits(full_shape, seed, stream, begin=None, slice_shape=None):
  idx = _np_global_index(full_shape, begin, slice_shape)
  idx = idx * 2 + stream
  s = _seed32(seed)
  h = _np_hash((idx & _M32) ^ s)
  return _np_hash(h ^ ((idx >> 32) & _M32) ^ _second_key(s))


def _np_uniform01(full_shape, seed, stream, begin=None, slice_shape=None):
  return ((_np_bits(full_shape, seed, stream, begin, slice_shape) >> 8).astype(np.float64)
          + 0.5) / float(1 << 24)


def numpy_random(full_shape, seed, kind="uniform", minval=0.0, maxval=1.0,
                 mean=0.0, stddev=1.0, dtype="float32", begin=None,
                 slice_shape=None):
  """The full tensor that :func:`tf_random` slices, computed in NumPy.

  With ``begin`` and ``slice_shape``, only that slice of it (the same values).
  """
  full_shape = tuple(full_shape)
  where = (begin, slice_shape)
  if kind == "uniform":
    u = _np_uniform01(full_shape, seed, 0, *where)
    out = minval + (maxval - minval) * u
  elif kind == "normal":
    u1 = _np_uniform01(full_shape, seed, 0, *where)
    u2 = _np_uniform01(full_shape, seed, 1, *where)
    out = mean + stddev * np.sqrt(-2.0 * np.log(u1)) * np.cos(2 * np.pi * u2)
  elif kind == "truncated_normal":
    # TensorFlow's truncated normal: N(mean, stddev) kept within two
    # standard deviations.  Inverting the normal CDF over [-2, 2] draws it
    # from one uniform, with no redraws, so a slice needs no neighbours.
    u = _np_uniform01(full_shape, seed, 0, *where)
    # SciPy when drawn: importing scipy.special is 0.4 s of every process
    # that imports mesh_tf (a layout solve draws nothing).
    from scipy import special  # pylint: disable=import-outside-toplevel
    lo, hi = special.ndtr(-2.0), special.ndtr(2.0)
    out = mean + stddev * special.ndtri(lo + (hi - lo) * u)
  else:
    raise ValueError(f"unknown random kind {kind!r}")
  return out.astype(dtype if dtype != "bfloat16" else "float32")


# --- TensorFlow kernel ------------------------------------------------------
def _tf_mul32(tf, x, c):
  lo = tf.bitwise.bitwise_and(x, 0xFFFF)
  hi = tf.bitwise.right_shift(x, 16)
  hi = tf.bitwise.left_shift(tf.bitwise.bitwise_and(hi * c, 0xFFFF), 16)
  return tf.bitwise.bitwise_and(lo * c + hi, _M32)


def _tf_hash(tf, x):
  x = tf.bitwise.bitwise_xor(x, tf.bitwise.right_shift(x, 16))
  x = _tf_mul32(tf, x, _C1)
  x = tf.bitwise.bitwise_xor(x, tf.bitwise.right_shift(x, 15))
  x = _tf_mul32(tf, x, _C2)
  return tf.bitwise.bitwise_xor(x, tf.bitwise.right_shift(x, 16))


def _tf_global_index(tf, full_shape, begin, slice_shape):
  strides = _strides(full_shape)
  idx = tf.zeros(slice_shape, tf.int64)
  n = len(slice_shape)
  for i, (b, l, st) in enumerate(zip(begin, slice_shape, strides)):
    if full_shape[i] == 1:
      continue
    r = tf.range(b, b + l, dtype=tf.int64) * st
    idx = idx + tf.reshape(r, [l if j == i else 1 for j in range(n)])
  return idx


def _tf_uniform01(tf, idx, seed, stream):
  idx = idx * 2 + stream
  s = _seed32(seed)
  h = _tf_hash(tf, tf.bitwise.bitwise_xor(tf.bitwise.bitwise_and(idx, _M32),
                                          s))
  hi = tf.bitwise.bitwise_and(tf.bitwise.right_shift(idx, 32), _M32)
  s2 = _second_key(s)
  h = _tf_hash(tf, tf.bitwise.bitwise_xor(tf.bitwise.bitwise_xor(h, hi), s2))
  u = tf.cast(tf.bitwise.right_shift(h, 8), tf.float64)
  return (u + 0.5) / float(1 << 24)


def tf_random(full_shape, begin, slice_shape, dtype, kind, seed,
              minval=0.0, maxval=1.0, mean=0.0, stddev=1.0):
  """One processor's slice (at ``begin``) of the full random tensor."""
  from mesh_tf.lowering.lazy_tf import tf
  idx = _tf_global_index(tf, tuple(full_shape), begin, tuple(slice_shape))
  if kind == "uniform":
    out = minval + (maxval - minval) * _tf_uniform01(tf, idx, seed, 0)
  elif kind == "normal":
    u1 = _tf_uniform01(tf, idx, seed, 0)
    u2 = _tf_uniform01(tf, idx, seed, 1)
    out = mean + stddev * tf.sqrt(-2.0 * tf.math.log(u1)) * tf.cos(
        2 * np.pi * u2)
  else:
    raise ValueError(f"unknown random kind {kind!r}")
  return tf.cast(out, dtype)
