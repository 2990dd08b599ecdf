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

An equation that is one matrix product once adjacent letters are merged
(``abc,cd->abd``, ``abcd,abe->ecd``: no batch letter, each operand's free
and contracted letters in two blocks, the output one operand's free block
then the other's) runs as ``tf.matmul`` on reshaped slices, which needs no
copy, and a one-operand sum as ``tf.reduce_sum``, whenever ops are built
into a graph (a ``tf.compat.v1`` Session graph or a ``tf.function``).  On
the Session benchmark (benchmarks/mtf_port.py, 1 layer) the matmuls cut
the step's CPU time by a quarter against ``tf.einsum``'s oneDNN kernel on
the same slices; in ``TrainStep`` the matmuls and sums together made the
steady step 1.23x (1 layer) and 1.27x (8 layers) faster than with
``tf.einsum``, all variants stepped in turn in one process.
A product with batch letters whose slices are one batched product as they
lie (``abcd,abde->abce``) runs as one batched ``tf.matmul`` in either
graph.  Any other product of two operands (operands whose letters need
reordering, as attention's ``abcd,aecd->abce``) runs in a Session graph as
explicit transposes around one batched ``tf.matmul`` (:func:`batched_plan`):
3% less CPU per Session step of that benchmark at 1 and 8 layers, both
lowerings stepped in turn in one process.  In a ``tf.function`` such a
product stays ``tf.einsum`` (see :func:`_graph_kind`).
"""

import math
import sys

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


def swapped(eq):
  """The two-operand ``eq`` with its operands in the other order."""
  (x, y), out = _parse(eq)
  return f"{y},{x}->{out}"


def swaps_operands(eq):
  """Whether the two-operand ``eq`` runs as one (batched) matrix product
  only with its operands in the other order: its output lists the second
  operand's free letters first (a weight gradient ``ac,ab->bc``: the
  incoming gradient, then the input), so ``tf.einsum`` computes the product
  transposed and transposes it back; with the operands swapped it writes
  the output as it is.  Measured on 8 logical CPU devices of a 2-core
  machine, ``[64, 1024] x [64, 256]`` contracted over 64: 1.82 against 1.20
  ms a device all computing at once (475 against 284 us at an eighth of
  ``1024``).  :func:`einsum_kernel` swaps them, and :func:`einsum_pattern`
  names the pattern that then runs.

  Example:
    >>> swaps_operands("ac,ab->bc"), swaps_operands("ab,ac->bc")
    (True, False)
  """
  ins, _ = _parse(eq)
  return (len(ins) == 2 and _pattern(eq) == "transposed"
          and _pattern(swapped(eq)) != "transposed")


def product_matrix(eq, shapes):
  """``(batch, rows, cols)`` of the matrix product :func:`einsum_kernel`
  runs for the two-operand ``eq`` on slices of ``shapes``: the size of its
  batch letters (in both operands and the output), and those of the free
  letters (in the output, not in the other operand) of its first operand
  and of its second, in the order it runs them (see
  :func:`swaps_operands`); ``()`` for a broadcast product or any other
  number of operands.

  Example:
    >>> product_matrix("abc,cd->abd", [(2, 3, 4), (4, 5)])
    (1, 6, 5)
    >>> product_matrix("ac,ab->bc", [(8, 7), (8, 3)])   # run as ab,ac->bc
    (1, 3, 7)
    >>> product_matrix("abc,acd->abd", [(4, 2, 3), (4, 3, 5)])
    (4, 2, 5)
  """
  ins, out = _parse(eq)
  if len(ins) != 2 or is_broadcast_product(eq):
    return ()
  (x, y), (sx, sy) = ins, shapes
  if swaps_operands(eq):
    x, y, sx, sy = y, x, sy, sx
  size = dict(zip(x, sx))
  size.update(zip(y, sy))
  return (math.prod(size[c] for c in x if c in out and c in y),
          math.prod(size[c] for c in x if c in out and c not in y),
          math.prod(size[c] for c in y if c in out and c not in x))


def einsum_pattern(eq):
  """How :func:`einsum_kernel` runs the equation ``eq`` (see
  :func:`swaps_operands`: the pattern of the operand order it runs).

  Example:
    >>> einsum_pattern("ac,ab->bc")   # run as ab,ac->bc
    'matmul'
  """
  return _pattern(swapped(eq) if swaps_operands(eq) else eq)


def _pattern(eq):
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
    >>> _pattern("abc,cd->abd"), _pattern("abcd,abde->abce")
    ('matmul', 'batched')
    >>> _pattern("abcd,bed->abce"), _pattern("ab,ab->ab")
    ('transposed', 'product')
    >>> _pattern("ac,ab->bc")   # the product transposed, then back
    'transposed'
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


def matmul_plan(eq):
  """How ``eq`` is one ``tf.matmul``, or None.

  Returns:
    ``(swap, a_contracted_first, b_contracted_first, a_free, b_free)``:
    ``swap`` if the output lists the second operand's free letters first;
    whether each operand lists its contracted letters before its free ones;
    and the number of free letters of each (they are its first or last
    letters).
  """
  ins, out = _parse(eq)
  if len(ins) != 2:
    return None
  x, y = ins
  if any(len(set(w)) != len(w) for w in (x, y, out)):
    return None  # a repeated letter (a diagonal) is not a product
  if any(c in x and c in y for c in out):
    return None  # a batch letter
  contracted = "".join(c for c in x if c in y)
  if not contracted or "".join(c for c in y if c in x) != contracted:
    return None
  free_x = "".join(c for c in x if c not in y)
  free_y = "".join(c for c in y if c not in x)
  if set(free_x + free_y) != set(out):
    return None  # a letter summed over inside one operand

  def contracted_first(word, free):
    if word == free + contracted:
      return False
    return True if word == contracted + free else None
  a_first = contracted_first(x, free_x)
  b_first = contracted_first(y, free_y)
  if a_first is None or b_first is None:
    return None
  if out == free_x + free_y:
    return False, a_first, b_first, len(free_x), len(free_y)
  if out == free_y + free_x:
    return True, a_first, b_first, len(free_x), len(free_y)
  return None


def reduction_plan(eq):
  """How the one-operand ``eq`` is a sum over some letters, or None.

  Returns:
    ``(axes, perm)``: the input axes summed out, and the permutation of the
    kept axes into the output's order (None if they are in order already).
  """
  ins, out = _parse(eq)
  if len(ins) != 1:
    return None
  (x,) = ins
  if len(set(x)) != len(x) or len(set(out)) != len(out) or not set(
      out) <= set(x):
    return None
  axes = tuple(i for i, c in enumerate(x) if c not in out)
  kept = [c for c in x if c in out]
  perm = tuple(kept.index(c) for c in out)
  return axes, (None if perm == tuple(range(len(perm))) else perm)


def _reduction_kernel(plan):
  axes, perm = plan

  def kernel(t):
    if axes:
      t = tf.reduce_sum(t, axes)
    return tf.transpose(t, perm) if perm is not None else t
  return kernel


def _matrix(shape, n_free, contracted_first):
  """The 2-D shape of a slice whose free letters are its first or last
  ``n_free`` ones, and those letters' sizes."""
  if contracted_first:
    free = shape[len(shape) - n_free:]
    return (math.prod(shape[:len(shape) - n_free]), math.prod(free)), free
  free = shape[:n_free]
  return (math.prod(free), math.prod(shape[n_free:])), free


def _matmul_kernel(eq, plan, shapes):
  swap, a_first, b_first, nx, ny = plan
  (a2, free_a), (b2, free_b) = (_matrix(tuple(shapes[0]), nx, a_first),
                                _matrix(tuple(shapes[1]), ny, b_first))

  def kernel(a, b):
    if not (a.dtype.is_floating and b.dtype.is_floating):
      return tf.einsum(eq, a, b)
    a, b = tf.reshape(a, a2), tf.reshape(b, b2)
    if swap:  # (free_b, contracted) @ (contracted, free_a)
      r = tf.matmul(b, a, transpose_a=b_first, transpose_b=not a_first)
      return tf.reshape(r, free_b + free_a)
    r = tf.matmul(a, b, transpose_a=a_first, transpose_b=not b_first)
    return tf.reshape(r, free_a + free_b)
  return kernel


def batched_plan(eq, shapes):
  """How the two-operand ``eq`` is one ``tf.matmul`` of (batched) matrices
  after transposes, or None.

  ``tf.einsum`` does the same internally for such equations (attention's
  ``abcd,aecd->abce`` and its gradients), but its oneDNN kernel took up to
  1.6x the CPU time of explicit transposes around a batched ``tf.matmul`` on
  the Session benchmark's attention slices (``abce,abcd->aecd``: 94 against
  60 us).  The transposes are plain ops, so TF can share those of one
  tensor between the products that read it.

  Returns:
    ``(perm_a, shape_a, trans_a, perm_b, shape_b, trans_b, mid_shape,
    perm_out)``: each operand's permutation (None: as is), its reshape
    (None: none needed) and whether it enters the product transposed; the
    product's reshape to ``batch + free_a + free_b`` (None: none) and that
    result's permutation into ``out`` (None: as is).
  """
  ins, out = _parse(eq)
  if len(ins) != 2:
    return None
  x, y = ins
  if any(len(set(w)) != len(w) for w in (x, y, out)):
    return None
  if (set(x) | set(y)) - (set(x) & set(y)) - set(out) or set(out) - set(
      x) - set(y):
    return None  # a letter summed inside one operand, or a new letter
  size = dict(zip(x, shapes[0]))
  size.update(zip(y, shapes[1]))
  batch = [c for c in out if c in x and c in y]
  contracted = [c for c in x if c in y and c not in out]
  free_x = [c for c in x if c not in y]
  free_y = [c for c in y if c not in x]
  if not contracted:
    return None

  def operand(word, free, free_first):
    # The operand in [batch, free, contracted] or [batch, contracted, free]
    # order (transposed as the product needs): the one that keeps the word's
    # other letters in their order, so that the products reading one
    # tensor share its transpose, else the first.
    orders = [(batch + free + contracted, not free_first),
              (batch + contracted + free, free_first)]
    rest = [c for c in word if c not in batch]
    order, trans = next(((o, t) for o, t in orders
                         if o[len(batch):] == rest), orders[0])
    perm = None if order == list(word) else [word.index(c) for c in order]
    groups = ((free, contracted) if order == orders[0][0]
              else (contracted, free))
    if all(len(g) == 1 for g in groups):
      return perm, None, trans
    return perm, [size[c] for c in batch] + [
        math.prod(size[c] for c in g) for g in groups], trans

  perm_a, shape_a, trans_a = operand(x, free_x, True)
  perm_b, shape_b, trans_b = operand(y, free_y, False)
  mid = batch + free_x + free_y
  mid_shape = (None if len(free_x) == 1 and len(free_y) == 1
               else [size[c] for c in mid])
  perm_out = None if mid == list(out) else [mid.index(c) for c in out]
  return (perm_a, shape_a, trans_a, perm_b, shape_b, trans_b, mid_shape,
          perm_out)


def _batched_kernel(eq, plan):
  (perm_a, shape_a, trans_a, perm_b, shape_b, trans_b, mid_shape,
   perm_out) = plan

  def operand(t, perm, shape):
    if perm is not None:
      t = tf.transpose(t, perm)
    return t if shape is None else tf.reshape(t, shape)

  def kernel(a, b):
    if not (a.dtype.is_floating and b.dtype.is_floating):
      return tf.einsum(eq, a, b)
    r = tf.matmul(operand(a, perm_a, shape_a), operand(b, perm_b, shape_b),
                  transpose_a=trans_a, transpose_b=trans_b)
    if mid_shape is not None:
      r = tf.reshape(r, mid_shape)
    return r if perm_out is None else tf.transpose(r, perm_out)
  return kernel


def _graph_kind():
  """Where ops are being built: ``"session"`` (a plain ``tf.compat.v1``
  graph), ``"function"`` (a ``tf.function``), or None (eagerly, or the
  shape-only lowering of the cost model, which never loads TF).

  In both graphs a plain matrix product runs as ``tf.matmul``, a batched
  one whose slices need no transpose as a batched ``tf.matmul``, and a sum
  as ``tf.reduce_sum``.  Only a Session graph runs the other batched
  products as transposes around a batched ``tf.matmul``: in ``TrainStep``
  those made the step slower than ``tf.einsum`` (1.05x at 8 layers of
  benchmarks/mtf_port.py, stepped in turn in one process), and with them
  quick calibration files ranked the truth benchmark's layouts worse, their
  probes running the same kernels (docs/porting.md, issue 43 item 7).
  """
  if "tensorflow" not in sys.modules:
    return None  # shape-only lowering (the cost model) never loads TF
  if tf.executing_eagerly():
    return None
  if tf.compat.v1.get_default_graph().building_function:
    return "function"
  return "session"


def _batched_kernel_for(eq, shapes, transposes):
  """The kernel of a two-operand product that is not a plain matrix
  product: one batched ``tf.matmul``, with transposes around it only if
  ``transposes``; None if it needs transposes and may not have them, or
  is no such product."""
  def plain(plan):
    return transposes or (plan[0] is None and plan[3] is None
                          and plan[7] is None)
  if swaps_operands(eq):
    # As tf.einsum: the other order writes the output as it is (no
    # transpose of the product), the pattern einsum_pattern names.
    plan = batched_plan(swapped(eq), list(shapes)[::-1])
    if plan is not None:
      if not plain(plan):
        return None
      kernel = _batched_kernel(swapped(eq), plan)
      return lambda a, b: kernel(b, a)
  plan = batched_plan(eq, shapes)
  return None if plan is None or not plain(plan) else _batched_kernel(
      eq, plan)


def einsum_kernel(eq, slice_shapes=None):
  """A function of the input slices computing ``tf.einsum(eq, ...)``.

  Args:
    eq: the slice-level equation.
    slice_shapes: the inputs' static slice shapes; with them, in a graph
      (``tf.compat.v1`` or ``tf.function``), an equation that is one
      (batched) matrix product of the slices as they lie runs as
      ``tf.matmul``, and in a ``tf.compat.v1`` graph any other two-operand
      product as transposes around a batched ``tf.matmul``.  In a graph a one-operand sum runs as
      ``tf.reduce_sum`` (shapes or not).  Any other product (eagerly,
      always) runs as ``tf.einsum``.  Either way its operands are swapped
      where that makes it a plain or batched product
      (:func:`swaps_operands`), so that :func:`einsum_pattern` and
      :func:`product_matrix` name what runs.

  Example:
    >>> f = einsum_kernel("ab,b->ab")   # a broadcast multiply  # doctest: +SKIP
  """
  kind = _graph_kind()
  if kind is not None:
    plan = matmul_plan(eq) if slice_shapes is not None else None
    if plan is not None:
      return _matmul_kernel(eq, plan, slice_shapes)
    if slice_shapes is not None:
      kernel = _batched_kernel_for(eq, slice_shapes,
                                   transposes=kind == "session")
      if kernel is not None:
        return kernel
    plan = reduction_plan(eq)
    if plan is not None:
      return _reduction_kernel(plan)
  if not is_broadcast_product(eq):
    if swaps_operands(eq):
      other = swapped(eq)
      return lambda a, b: tf.einsum(other, b, a)
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
