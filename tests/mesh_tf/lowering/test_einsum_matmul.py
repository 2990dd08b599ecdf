"""Einsum slices that are one matrix product run as tf.matmul, and give
what tf.einsum gives."""

import itertools

import numpy as np
import pytest
import tensorflow as tf

from mesh_tf.lowering import einsum_kernels

SIZES = {"a": 3, "b": 4, "c": 5, "d": 2, "e": 6}

PRODUCTS = ["abc,cd->abd", "abc,cde->abde", "abcd,ecd->abe", "abcd,abe->ecd",
            "abc,abd->cd", "abc,dc->abd", "abc,abd->dc", "abcd,cde->abe",
            "abc,dec->abde", "abc,abde->dec", "ab,ab->", "ab,b->a",
            "b,ab->a", "ab,bc->ac", "ab,bc->ca"]
NOT_PRODUCTS = ["abcd,aecd->abce", "abc->c", "abc,abc->abc", "ab,cd->abcd",
                "abc,acd->abd", "abc,cbd->ad", "abc,cd->adb", "aab,bc->ac",
                "abc,bd->ad", "abc,acb->a"]


def _session_kernel(eq, shapes):
  """The kernel as made while lowering into a tf.compat.v1 graph."""
  with tf.Graph().as_default():
    return einsum_kernels.einsum_kernel(eq, shapes)


def _value(word, rng, dtype=np.float32):
  return rng.normal(size=[SIZES[c] for c in word]).astype(dtype)


@pytest.mark.parametrize("eq", PRODUCTS)
def test_matrix_products_run_as_matmul_and_match_einsum(eq):
  assert einsum_kernels.matmul_plan(eq) is not None
  ins = eq.split("->")[0].split(",")
  rng = np.random.default_rng(1)
  ts = [tf.constant(_value(w, rng)) for w in ins]
  kernel = _session_kernel(eq, [t.shape.as_list() for t in ts])
  graph = tf.function(kernel).get_concrete_function(*ts).graph
  types_ = {op.type for op in graph.get_operations()}
  assert "MatMul" in types_ and "Einsum" not in types_
  np.testing.assert_allclose(kernel(*ts), np.einsum(eq, *[t.numpy()
                                                        for t in ts]),
                             rtol=1e-5, atol=1e-5)


# Products with batch letters, or whose operands need their letters
# reordered: transposes around one batched matmul in Session graphs.
BATCHED = ["abcd,aecd->abce", "abce,aecd->abcd", "abce,abcd->aecd",
           "abcd,abde->abce", "abc,acd->abd", "abc,cbd->ad", "abc,cd->adb",
           "ab,abc->ac", "abcd,adce->ebc", "abcd,cdbe->eab"]


@pytest.mark.parametrize("eq", BATCHED)
def test_other_products_run_as_one_batched_matmul_and_match_einsum(eq):
  assert einsum_kernels.matmul_plan(eq) is None
  ins = eq.split("->")[0].split(",")
  rng = np.random.default_rng(7)
  ts = [tf.constant(_value(w, rng)) for w in ins]
  shapes = [t.shape.as_list() for t in ts]
  assert einsum_kernels.batched_plan(eq, shapes) is not None
  kernel = _session_kernel(eq, shapes)
  graph = tf.function(kernel).get_concrete_function(*ts).graph
  types_ = [op.type for op in graph.get_operations()]
  assert (types_.count("BatchMatMulV2") + types_.count("MatMul") == 1
          and "Einsum" not in types_)
  np.testing.assert_allclose(kernel(*ts), np.einsum(eq, *[t.numpy()
                                                        for t in ts]),
                             rtol=1e-5, atol=1e-5)


def test_operands_reading_one_tensor_share_its_transpose():
  # Attention's forward product and a gradient product both read k
  # (abcd / aecd): each moves only the batch letters to the front, so both
  # ask for the same permutation of it.
  shapes = {"abcd": [3, 4, 5, 2], "aecd": [3, 6, 5, 2], "abce": [3, 4, 5, 6]}
  logits = einsum_kernels.batched_plan(
      "abcd,aecd->abce", [shapes["abcd"], shapes["aecd"]])
  grad_q = einsum_kernels.batched_plan(
      "abce,aecd->abcd", [shapes["abce"], shapes["aecd"]])
  assert logits[3] == grad_q[3] == [0, 2, 1, 3]


@pytest.mark.parametrize("eq", ["abc,abd->adc", "abcd,abce->aed"])
def test_batched_products_with_the_other_operand_first_swap_operands(eq):
  # The output lists the second operand's free letters first: run as the
  # swapped product, it needs no transpose, the pattern einsum_pattern
  # names and the matrix product_matrix gives.
  assert einsum_kernels.swaps_operands(eq)
  assert einsum_kernels.einsum_pattern(eq) == "batched"
  ins = eq.split("->")[0].split(",")
  rng = np.random.default_rng(9)
  ts = [tf.constant(_value(w, rng)) for w in ins]
  kernel = _session_kernel(eq, [t.shape.as_list() for t in ts])
  graph = tf.function(kernel).get_concrete_function(*ts).graph
  types_ = [op.type for op in graph.get_operations()]
  assert "Transpose" not in types_ and types_.count("BatchMatMulV2") == 1
  np.testing.assert_allclose(kernel(*ts), np.einsum(eq, *[t.numpy()
                                                        for t in ts]),
                             rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("eq", ["abc,abc->abc", "ab,cd->abcd", "aab,bc->ac",
                                "abc,bd->ad", "abc->c"])
def test_equations_that_are_not_two_operand_products_have_no_batched_plan(
    eq):
  shapes = [[SIZES[c] for c in w] for w in eq.split("->")[0].split(",")]
  assert einsum_kernels.batched_plan(eq, shapes) is None


@pytest.mark.parametrize("eq", NOT_PRODUCTS)
def test_other_equations_are_not_products(eq):
  assert einsum_kernels.matmul_plan(eq) is None


def test_every_two_operand_equation_on_three_letters_matches_einsum():
  # All equations over letters a, b, c with two operands of up to two
  # letters and any output: the kernel (matmul or not) equals np.einsum.
  rng = np.random.default_rng(2)
  words = ["".join(p) for n in (1, 2) for p in itertools.permutations("abc",
                                                                       n)]
  checked = 0
  for x, y in itertools.product(words, repeat=2):
    letters = sorted(set(x + y))
    for n in range(len(letters) + 1):
      for out in itertools.permutations(letters, n):
        eq = f"{x},{y}->{''.join(out)}"
        a, b = _value(x, rng), _value(y, rng)
        kernel = _session_kernel(eq, [a.shape, b.shape])
        np.testing.assert_allclose(
            kernel(tf.constant(a), tf.constant(b)), np.einsum(eq, a, b),
            rtol=1e-5, atol=1e-5, err_msg=eq)
        checked += 1
  assert checked > 300


def test_integer_slices_keep_tf_einsum():
  rng = np.random.default_rng(3)
  a = _value("ab", rng).astype(np.int32)
  b = _value("bc", rng).astype(np.int32)
  kernel = _session_kernel("ab,bc->ac", [a.shape, b.shape])
  np.testing.assert_array_equal(kernel(tf.constant(a), tf.constant(b)),
                                np.einsum("ab,bc->ac", a, b))


def _traced_ops(eq, a, b):
  @tf.function(autograph=False)
  def traced(x, y):
    # As TrainStep lowers: the kernel is made while tracing.
    return einsum_kernels.einsum_kernel(eq, [x.shape, y.shape])(x, y)
  graph = traced.get_concrete_function(a, b).graph
  return {op.type for op in graph.get_operations()}, traced(a, b)


def test_tf_function_runs_products_as_matmul_unless_they_need_transposes():
  rng = np.random.default_rng(4)
  a, b = tf.constant(_value("abc", rng)), tf.constant(_value("cd", rng))
  ops, value = _traced_ops("abc,cd->abd", a, b)
  assert "MatMul" in ops and "Einsum" not in ops
  np.testing.assert_allclose(value, np.einsum("abc,cd->abd", a, b),
                             rtol=1e-5, atol=1e-5)
  # A batched product as laid out runs as one batched tf.matmul.
  a, b = tf.constant(_value("abcd", rng)), tf.constant(_value("abde", rng))
  ops, value = _traced_ops("abcd,abde->abce", a, b)
  assert "BatchMatMulV2" in ops and not {"Einsum", "Transpose"} & ops
  np.testing.assert_allclose(value, np.einsum("abcd,abde->abce", a, b),
                             rtol=1e-5, atol=1e-5)
  # One that needs transposes keeps tf.einsum in a tf.function
  # (TrainStep): the transposes around a batched tf.matmul were slower.
  a, b = tf.constant(_value("abcd", rng)), tf.constant(_value("aecd", rng))
  ops, value = _traced_ops("abcd,aecd->abce", a, b)
  assert "Einsum" in ops and "BatchMatMulV2" not in ops
  np.testing.assert_allclose(value, np.einsum("abcd,aecd->abce", a, b),
                             rtol=1e-5, atol=1e-5)


def test_eager_products_keep_tf_einsum():
  rng = np.random.default_rng(4)
  a, b = tf.constant(_value("abc", rng)), tf.constant(_value("cd", rng))
  eager = einsum_kernels.einsum_kernel("abc,cd->abd", [a.shape, b.shape])
  np.testing.assert_array_equal(eager(a, b), tf.einsum("abc,cd->abd", a, b))


SUMS = ["abc->c", "abc->ac", "abc->", "abc->ca", "abc->cba", "ab->ab",
        "abcd->db"]
NOT_SUMS = ["aab->b", "abc,bc->a", "ab->abc"]


@pytest.mark.parametrize("eq", SUMS)
def test_one_operand_sums_run_as_reduce_sum_and_match_einsum(eq):
  assert einsum_kernels.reduction_plan(eq) is not None
  word = eq.split("->")[0]
  rng = np.random.default_rng(5)
  t = tf.constant(_value(word, rng))
  kernel = _session_kernel(eq, [t.shape.as_list()])
  graph = tf.function(kernel).get_concrete_function(t).graph
  assert "Einsum" not in {op.type for op in graph.get_operations()}
  np.testing.assert_allclose(kernel(t), np.einsum(eq, t.numpy()),
                             rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("eq", NOT_SUMS)
def test_other_equations_are_not_sums(eq):
  assert einsum_kernels.reduction_plan(eq) is None


def test_eager_sums_keep_tf_einsum():
  t = tf.constant(_value("abc", np.random.default_rng(6)))
  np.testing.assert_array_equal(einsum_kernels.einsum_kernel("abc->c")(t),
                                tf.einsum("abc->c", t))
