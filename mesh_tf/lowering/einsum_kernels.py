"""The TF kernel of an einsum slice: ``tf.einsum``, except where it is slow.

``tf.einsum`` lowers an equation that contracts nothing (every input letter
is in the output, e.g. ``abc,abc->abc``) to a ``BatchMatMul`` of 1x1
matrices, one per element.  On CPU that took 14 ms for 262k elements in the
cross entropy of a small Transformer step, half of the step (the cost model,
which prices it as the elementwise product it is, said 20 us).  Such an
equation is a broadcast multiply, so it runs as one: each input transposed
to the output's letter order, with size-1 axes for the letters it lacks.

:func:`einsum_pattern` names how TF runs the other equations, because their
speed per FLOP differs by an order of magnitude on CPU (measured by
``costmodels.calibrate``: about 145 GFLOP/s for a plain matmul, about 10 for
forms whose operands must be transposed first at the same sizes), so the
cost model prices each pattern by its own calibrated throughput.
"""

from mesh_tf.lowering.lazy_tf import tf


def _parse(eq):
  ins, out = eq.split("->")
  return ins.split(","), out


def is_broadcast_product(eq):
  """True if ``eq`` has two or more inputs and contracts no letter."""
  ins, out = _parse(eq)
  return len(ins) >= 2 and all(c in out for word in ins for c in word)


#: The contraction patterns of :func:`einsum_pattern`, plus the two
#: convolution kernels (``conv``: forward and input gradient,
#: ``conv_filter``: the filter gradient), as a ComputeRecord's ``pattern``.
PATTERNS = ("matmul", "batched", "transposed", "product", "conv",
            "conv_filter")


def _in_order(word, letters):
  """The letters of ``word`` that are in ``letters``, in word order."""
  return [c for c in word if c in letters]


def _blocks(word, kinds):
  """The run-length sequence of ``kinds[c]`` along ``word``."""
  out = []
  for c in word:
    if not out or out[-1] != kinds[c]:
      out.append(kinds[c])
  return out


def einsum_pattern(eq):
  """How ``tf.einsum`` runs the two-input-or-more equation ``eq``.

  * ``"product"``: nothing is contracted (a broadcast multiply, see
    :func:`einsum_kernel`);
  * ``"matmul"``: one matrix product of the operands as they are laid out
    (no batch letters, each operand ``free... contract...`` or ``contract...
    free...``, the output ``lhs free... rhs free...``);
  * ``"batched"``: the same with leading batch letters (in both inputs and
    the output), in the same order everywhere: one BatchMatMul;
  * ``"transposed"``: anything else -- TF transposes an operand or the
    result (or sums a letter out first) around the BatchMatMul.

  Example:
    >>> einsum_pattern("abc,cd->abd"), einsum_pattern("abcd,abde->abce")
    ('matmul', 'batched')
    >>> einsum_pattern("abcd,bed->abce"), einsum_pattern("ab,ab->ab")
    ('transposed', 'product')
  """
  ins, out = _parse(eq)
  if is_broadcast_product(eq):
    return "product"
  if len(ins) != 2:
    return "transposed"
  lhs, rhs = ins
  both = set(lhs) & set(rhs)
  batch = both & set(out)
  contract = both - set(out)
  if (set(lhs) | set(rhs)) - both - set(out):
    return "transposed"  # a letter summed out of one operand first
  kinds = {c: ("B" if c in batch else "C" if c in contract else "F")
           for c in set(lhs) | set(rhs)}
  for word in (lhs, rhs):
    if _blocks(word, kinds) not in (["B", "F", "C"], ["B", "C", "F"],
                                    ["F", "C"], ["C", "F"], ["B", "C"],
                                    ["C"], ["B", "F"], ["F"], ["B"]):
      return "transposed"
  if not (_in_order(lhs, batch) == _in_order(rhs, batch)
          == _in_order(out, batch)
          and _in_order(lhs, contract) == _in_order(rhs, contract)):
    return "transposed"
  expect = (_in_order(lhs, batch) + [c for c in lhs if kinds[c] == "F"]
            + [c for c in rhs if kinds[c] == "F"])
  if list(out) != expect:
    return "transposed"
  return "batched" if batch else "matmul"


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
