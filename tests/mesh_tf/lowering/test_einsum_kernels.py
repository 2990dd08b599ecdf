"""The einsum slice kernel: broadcast products run as multiplies and give
what tf.einsum gives."""

import numpy as np
import pytest
import tensorflow as tf

from mesh_tf.lowering import einsum_kernels

SHAPES = {"a": 3, "b": 4, "c": 5, "d": 2}


@pytest.mark.parametrize("eq", ["abc,abc->abc", "ab,b->ab", "ba,b->ab",
                                "abc,cb->abc", "ab,cd->abcd",
                                "a,b,ab->ab"])
def test_broadcast_products_match_tf_einsum(eq):
  assert einsum_kernels.is_broadcast_product(eq)
  ins = eq.split("->")[0].split(",")
  rng = np.random.default_rng(0)
  ts = [tf.constant(rng.normal(size=[SHAPES[c] for c in w]), tf.float32)
        for w in ins]
  np.testing.assert_allclose(einsum_kernels.einsum_kernel(eq)(*ts),
                             tf.einsum(eq, *ts), rtol=1e-6)


@pytest.mark.parametrize("eq", ["abc,cd->abd", "ab,ab->a", "abc->cba",
                                "ab->a"])
def test_contractions_stay_einsums(eq):
  assert not einsum_kernels.is_broadcast_product(eq)
