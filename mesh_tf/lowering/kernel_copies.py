"""The buffers a slice kernel makes while it runs, besides its output.

The memory model (``costmodels.memory``) counts each op's output from the
step that makes it; a kernel also makes temporaries that live only while it
runs.  Measured with the BFC allocator's events on CPU (TF 2.21, oneDNN on;
``tests/costmodels/test_kernel_copies.py``):

* **An einsum's transposes.**  A product that is not one (batched) matrix
  product of its slices as they are laid out transposes first: each
  operand whose letters are out of the product's order is copied into
  ``[batch, free, contracted]`` order, the product is written in
  ``[batch, free_a, free_b]`` order, and, when the output lists its letters
  otherwise, that product is a temporary transposed into the output.
  ``tf.einsum`` keeps all of them until it returns (``abcd,aecd->abce`` on
  ``[4, 64, 8, 16]`` slices: both operands, the product and the output,
  each allocated by the Einsum op).  The plan is the kernel's own
  (:func:`mesh_tf.lowering.einsum_kernels.batched_plan`), so it follows the
  kernel that runs.
* **A plain matrix product** (:func:`mesh_tf.lowering.einsum_kernels.matmul_plan`)
  runs as ``tf.matmul`` on reshaped slices, its transposes as the
  kernel's flags: no copy (a weight gradient ``x^T dy``, ``[512, 64] x
  [512, 32]``, allocates its output alone; under ``tf.einsum`` oneDNN
  reordered the transposed left operand, a copy of its bytes).
* **A broadcast product** (:func:`einsum_kernels.einsum_kernel`) transposes
  each input whose letters are out of the output's order.

Each copy is named by its role: ``"a"`` or ``"b"`` (a copy of that operand,
in the equation's order) or ``"out"`` (a buffer the size of the output).
"""

from mesh_tf.lowering import einsum_kernels as ek


def _ones(word):
  return (2,) * len(word)


def einsum_copies(eq):
  """The copies the kernel of the two-operand slice equation ``eq`` makes
  besides its output, as roles (see the module docstring); ``()`` for any
  other number of operands or a product it runs without copies.

  Example:
    >>> einsum_copies("abc,cd->abd")
    ()
    >>> einsum_copies("ab,ac->bc")    # tf.matmul(transpose_a=True)
    ()
    >>> einsum_copies("abcd,aecd->abce")
    ('a', 'b', 'out')
  """
  ins, out = eq.split("->")
  ins = ins.split(",")
  if len(ins) != 2:
    return ()
  if ek.is_broadcast_product(eq):
    return tuple(role for role, w in zip("ab", ins)
                 if [c for c in out if c in w] != list(w))
  flip = ek.swaps_operands(eq)
  run = ek.swapped(eq) if flip else eq
  roles = _run_copies(run)
  if flip:
    roles = tuple({"a": "b", "b": "a"}.get(r, r) for r in roles)
  return tuple(sorted(roles, key=("a", "b", "out").index))


def _run_copies(run):
  """:func:`einsum_copies` of the operand order the kernel runs."""
  if ek.matmul_plan(run) is not None:
    return ()   # tf.matmul, transposes as its flags
  x, y = run.split("->")[0].split(",")
  plan = ek.batched_plan(run, [_ones(x), _ones(y)])
  if plan is None:
    return ()
  perm_a, _, _, perm_b, _, _, _, perm_out = plan
  return tuple(r for r, p in (("a", perm_a), ("b", perm_b),
                              ("out", perm_out)) if p is not None)


__all__ = ["einsum_copies"]
