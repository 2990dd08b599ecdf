"""Every public name of Mesh TensorFlow 0.1.21's ``layers.py`` is in
``mtf.layers``, and the layers added for issue 16 take the original's
parameters in the original's order (so positional calls port)."""

import inspect

import numpy as np
import pytest

import mesh_tf as mtf
from mesh_tf import layers as L
from tests.layout_harness import run

ORIGINAL_NAMES = """
summary_for_clip_activation_gradient unit_scaling_convention us_einsum dense
get_dense_kernel_weights dense_product DenseInitializer
VarianceScalingInitializer conv1d separable_conv1d conv2d conv2d_with_blocks
conv2d_transpose conv2d_transpose_with_blocks conv3d conv3d_with_blocks
conv3d_transpose conv3d_transpose_with_blocks corr layer_norm batch_norm
softmax_cross_entropy_with_logits sigmoid_cross_entropy_with_logits
weights_nonzero dense_relu_dense local_1d_halo_exchange
local_self_attention_spatial_blocks masked_local_attention_1d
masked_local_attention_1d_incremental local_2d_halo_exchange
local_2d_self_attention_spatial_blocks rename_length_to_memory_length
multihead_attention_vars multihead_attention_params dot_product_attention
multihead_attention multihead_self_attention_incremental
multihead_encdec_attention_incremental attention_mask_ignore_padding
attention_mask_autoregressive attention_mask_same_segment
attention_bias_local_block attention_bias_local_2d_block
multiplicative_jitter multihead_self_attention_memory_compressed
compress_mean embedding_weights embedding max_pool2d max_pool3d avg_pool2d
avg_pool3d reversible_half_residual_and_swap clip_activation_gradient
annealed_dropout
""".split()

# The original's parameters, in order, of the layers added for issue 16
# (and of the two first-wave attention layers, reordered for it).
ORIGINAL_PARAMETERS = {
    "dot_product_attention": "q k v mask is_training dropout "
                             "dropout_broadcast_dims extra_logit",
    "multihead_attention": "query_antecedent memory_antecedent mask "
                           "kv_channels heads is_training dropout "
                           "dropout_broadcast_dims master_dtype slice_dtype "
                           "name",
    "summary_for_clip_activation_gradient": "t name batch_dims",
    "unit_scaling_convention": "value",
    "us_einsum": "xs",
    "get_dense_kernel_weights": "x new_dims reduced_dims expert_dims "
                                "kernel_initializer name variable_dtype "
                                "master_dtype slice_dtype",
    "separable_conv1d": "x output_dim min_relative_pos max_relative_pos "
                        "depthwise_filter_initializer_scale "
                        "pointwise_filter_initializer_scale name use_bias "
                        "kernel_depth_weights",
    "conv2d_with_blocks": "x output_dim filter_size strides padding "
                          "h_blocks_dim w_blocks_dim filter_initializer "
                          "variable_dtype name",
    "conv2d_transpose_with_blocks": "x output_dim filter_size strides "
                                    "padding h_blocks_dim w_blocks_dim "
                                    "filter_initializer variable_dtype name",
    "conv3d_with_blocks": "x output_dim filter_size strides padding "
                          "d_blocks_dim h_blocks_dim filter_initializer "
                          "variable_dtype name",
    "conv3d_transpose_with_blocks": "x output_dim filter_size strides "
                                    "padding d_blocks_dim h_blocks_dim "
                                    "filter_initializer variable_dtype name",
    "corr": "x dim epsilon name",
    "local_1d_halo_exchange": "k v num_w_blocks w_dim mask_right",
    "local_self_attention_spatial_blocks": "query_antecedent kv_channels "
                                           "heads is_training memory_w_dim "
                                           "mask_right master_dtype "
                                           "slice_dtype name",
    "masked_local_attention_1d": "x kv_channels heads is_training "
                                 "window_size master_dtype slice_dtype "
                                 "length_per_split return_kv params name",
    "masked_local_attention_1d_incremental": "x prev_k prev_v step_num "
                                             "master_dtype slice_dtype "
                                             "params name",
    "local_2d_halo_exchange": "k v num_h_blocks h_dim num_w_blocks w_dim "
                              "mask_right",
    "local_2d_self_attention_spatial_blocks": "query_antecedent kv_channels "
                                              "heads is_training "
                                              "memory_h_dim memory_w_dim "
                                              "mask_right master_dtype "
                                              "slice_dtype name",
    "multihead_attention_vars": "mesh heads io_channels kv_channels "
                                "master_dtype slice_dtype activation_dtype",
    "multihead_attention_params": "mesh heads io_channels kv_channels "
                                  "variable_dtype combine",
    "multihead_self_attention_incremental": "query_antecedent prev_k prev_v "
                                            "step_num master_dtype "
                                            "slice_dtype name",
    "multihead_encdec_attention_incremental": "query_antecedent wq wo k v "
                                              "mask name",
    "attention_bias_local_block": "mesh block_length memory_length dtype",
    "attention_bias_local_2d_block": "mesh h_dim w_dim memory_h_dim "
                                     "memory_w_dim dtype",
    "multihead_self_attention_memory_compressed": "x mask_right "
                                                  "compression_factor "
                                                  "kv_channels heads "
                                                  "is_training dropout "
                                                  "dropout_broadcast_dims "
                                                  "master_dtype slice_dtype "
                                                  "name",
    "compress_mean": "x dim compression_factor",
    "reversible_half_residual_and_swap": "x1 x1_backwards x2 x2_backwards f "
                                         "recompute_grads",
    "clip_activation_gradient": "x clip_rms_norm",
    "annealed_dropout": "x is_training start_step end_step init_rate "
                        "noise_shape name",
}


def test_every_original_layer_name_exists():
  missing = [n for n in ORIGINAL_NAMES if not hasattr(L, n)]
  assert not missing
  assert len(ORIGINAL_NAMES) == 55


@pytest.mark.parametrize("name", sorted(ORIGINAL_PARAMETERS))
def test_new_layers_take_the_original_parameters_in_order(name):
  want = ORIGINAL_PARAMETERS[name].split()
  got = list(inspect.signature(getattr(L, name)).parameters)
  assert got[:len(want)] == want


def test_attention_takes_positional_is_training_and_later_dropout():
  rng = np.random.RandomState(0)
  xv = rng.randn(2, 4, 8).astype(np.float32)
  heads, kv = mtf.Dimension("heads", 2), mtf.Dimension("d_kv", 4)

  def attend(*args):
    def build(mesh):
      x = mtf.import_tf_tensor(mesh, xv, "batch:2;length:4;d_model:8")
      q = mtf.import_tf_tensor(mesh, xv, "batch:2;length:4;d_kv:8")
      k = mtf.rename_dimension(q, "length", "memory_length")
      return [L.multihead_attention(x, None, None, kv, heads, *args,
                                    name="a"),
              L.dot_product_attention(q, k, k, None, *args)]
    return run(build, "x:2", "batch:x")[0]
  plain = attend()
  off = attend(False, 0.5)      # 0.1.21: is_training, dropout
  on = attend(True, 0.5)
  later = attend(0.5)           # later releases: dropout
  for a, b in zip(off, plain):
    np.testing.assert_allclose(a, b, rtol=1e-6)
  for a, b, c in zip(on, later, plain):
    np.testing.assert_allclose(a, b, rtol=1e-6)   # the same seeded dropout
    assert not np.allclose(a, c)
