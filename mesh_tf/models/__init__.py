"""The model zoo: builders with explicit sizes, and named presets.

Each builder returns a :class:`ModelGraph` (graph, mesh, inputs, outputs,
loss, config).  Building is pure Python: no TensorFlow, no weights.

Example:
  >>> from mesh_tf import models
  >>> m = models.build_model("transformer_tiny", layers=1)
  >>> sorted(m.inputs)
  ['inputs', 'targets']
"""

from mesh_tf.models.base import InputSpec, ModelGraph
from mesh_tf.models.configs import (PRESETS, build_model, get_config,
                                    list_models)
from mesh_tf.models.conv3d import Conv3DConfig, conv3d_net
from mesh_tf.models.mlp import MLPConfig, mlp, mlp_parts
from mesh_tf.models.moe import MoETransformerConfig, moe_transformer_lm
from mesh_tf.models.repeated import RepeatedLayers, compose
from mesh_tf.models.transformer import (TransformerConfig, transformer_lm,
                                        transformer_parts)
