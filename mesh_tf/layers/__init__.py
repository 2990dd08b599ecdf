"""Neural-network layers on named-dim tensors (``mtf.layers``).

Mesh TensorFlow's names and signatures where they exist: ``dense``,
``layer_norm``, ``rms_norm``, ``embedding``, ``dense_relu_dense``,
``dropout``, ``softmax_cross_entropy_with_logits``, ``multihead_attention``,
a top-2 mixture-of-experts layer (``moe``), and ``conv1d/2d/3d`` with
max/avg pooling whose spatial dims may be split across the mesh; and the
rest of Mesh TF 0.1.21's ``layers.py``: local and incremental attention,
memory-compressed attention, convolutions over blocked images, the
reversible block, unit scaling and activation-gradient clipping (see
``docs/porting.md``).
"""

from mesh_tf.layers.attention import (MASK_BIAS, attention,
                                      attention_mask_autoregressive,
                                      attention_mask_ignore_padding,
                                      multihead_attention)
from mesh_tf.layers.compat_layers import (DenseInitializer,
                                          VarianceScalingInitializer,
                                          attention_mask_same_segment,
                                          batch_norm, dense_product,
                                          dot_product_attention,
                                          multiplicative_jitter,
                                          rename_length_to_memory_length,
                                          weights_nonzero)
from mesh_tf.layers.conv_transpose import conv2d_transpose, conv3d_transpose
from mesh_tf.layers.conv import (avg_pool1d, avg_pool2d, avg_pool3d, conv1d,
                                 conv2d, conv3d, max_pool1d, max_pool2d,
                                 max_pool3d)
from mesh_tf.layers.core import (dense, dense_relu_dense, dropout,
                                 embedding, embedding_weights,
                                 get_activation, layer_norm, one_hot,
                                 rms_norm, sigmoid_cross_entropy_with_logits,
                                 softmax_cross_entropy_with_logits)
from mesh_tf.layers.moe import expert_capacity, moe, top2_gating
from mesh_tf.layers.norm import NormGradOperation, NormOperation
# The one softmax lives with the reductions; ``mtf.layers.softmax`` is it.
from mesh_tf.ops.reduce import SoftmaxGradOperation, SoftmaxOperation, softmax
# Mesh TF's other public layers (issue 16): attention variants, local
# attention, convolutions with blocks, and training helpers.
from mesh_tf.layers.attention_params import (multihead_attention_params,
                                             multihead_attention_vars)
from mesh_tf.layers.attention_incremental import (
    compress_mean, masked_local_attention_1d_incremental,
    multihead_encdec_attention_incremental,
    multihead_self_attention_incremental,
    multihead_self_attention_memory_compressed)
from mesh_tf.layers.local_attention import (
    attention_bias_local_2d_block, attention_bias_local_block,
    local_1d_halo_exchange, local_2d_halo_exchange,
    local_2d_self_attention_spatial_blocks,
    local_self_attention_spatial_blocks, masked_local_attention_1d)
from mesh_tf.layers.compat_layers import (annealed_dropout, corr,
                                          get_dense_kernel_weights)
from mesh_tf.layers.gradient_clipping import (
    clip_activation_gradient, summary_for_clip_activation_gradient)
from mesh_tf.layers.reversible import reversible_half_residual_and_swap
from mesh_tf.layers.unit_scaling import unit_scaling_convention, us_einsum
from mesh_tf.layers.conv_blocks import (conv2d_transpose_with_blocks,
                                       conv2d_with_blocks,
                                       conv3d_transpose_with_blocks,
                                       conv3d_with_blocks, separable_conv1d)
