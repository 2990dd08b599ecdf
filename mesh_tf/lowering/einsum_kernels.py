"""The TF kernel of an einsum slice: ``tf.einsum``, except where it is slow.

``tf.einsum`` lowers an equation that contracts nothing (every input letter
is in the output, e.g. ``abc,abc->abc``) to a ``BatchMatMul`` of 1x1
matrices, one per element.  On CPU that took 14 ms for 262k elements in the
cross entropy of a small Transformer step, half of the step (the cost model,
which prices it as the elementwise product it is, said 20 us).  Such an
equation is a broadcast multiply, so it runs as one: each input transposed
to the output's letter order, with size-1 axes for the letters it lacks.
"""

from mesh_tf.lowering.lazy_tf import tf


def _parse(eq):
  ins, out = eq.split("->")
  return ins.split(","), out


def is_broadcast_product(eq):
  """True if ``eq`` has two or more inputs and contracts no letter."""
  ins, out = _parse(eq)
  return len(ins) >= 2 and all(c in out for word in ins for c in word)


def einsum_kernel(eq):
  """A function of the input slices computing ``tf.einsum(eq, ...)``.

  Example:
    >>> f = einsum_kernel("ab,b->ab")   # a broadcast multiply  # doctest: +SKIP
  """
  if not is_broadcast_product(eq):
    return lambda *ts: tf.einsum(eq, *ts)
  ins, out = _parse(eq)
  # Per input: the permutation into output order, and the broadcast shape
  # pattern (index into the permuted slice's shape, or None for a 1).
  plans = []
  for word in ins:
    order = tuple(sorted(range(len(word)), key=lambda i: out.index(word[i])))
    present = {word[i]: k for k, i in enumerate(order)}
    plans.append((order, tuple(present.get(c) for c in out)))

  def kernel(*ts):
    y = None
    for t, (order, pattern) in zip(ts, plans):
      if order != tuple(range(len(order))):
        t = tf.transpose(t, order)
      if len(pattern) != len(order):
        dims = tf.shape(t)
        t = tf.reshape(t, [1 if k is None else dims[k] for k in pattern])
      y = t if y is None else y * t
    return y
  return kernel
