"""Named model configs: tiny ones for tests and well-known real sizes.

Real sizes (parameters as computed by ``config.num_parameters()``):

* ``gpt2_small``: 12 layers, d_model 768, 12 heads -- about 124M, like
  GPT-2 small (vocab 50257 padded to 50304, a multiple of 128, so that it
  splits over any power-of-two mesh axis up to 128).
* ``mtf_5b``: a ~5B-parameter LM shaped like the largest language models of
  the Mesh-TensorFlow paper (Shazeer et al., 2018): few, very wide layers
  (d_ff 262144, 256 heads of 128) that only fit with model parallelism.
* ``gpt3_175b``: 96 layers, d_model 12288, 96 heads of 128, d_ff 49152,
  2048 tokens, batch 1536 -- about 175B, like GPT-3 (Brown et al., 2020).
* ``palm_540b``: PaLM 540B's published sizes (118 layers, d_model 18432, 48
  heads of 256, d_ff 73728) in the zoo block (multi-head, GELU, serial):
  about 432B parameters.
* ``moe_gpt2_small_64e``: GPT-2-small-sized with a 64-expert top-2 MoE FFN
  in every other layer.
* ``conv3d_large``: 8 full-resolution 3-D conv layers on 256^3 volumes, with
  about 8.6 GB (float32) per layer activation.
"""

import dataclasses

from mesh_tf.core.errors import MtfError
from mesh_tf.models.conv3d import Conv3DConfig
from mesh_tf.models.mlp import MLPConfig
from mesh_tf.models.moe import MoETransformerConfig
from mesh_tf.models.transformer import TransformerConfig

FLOAT_DTYPES = ("float32", "bfloat16", "float16")
MAX_LAYERS = 1024  # 10x the deepest preset (gpt3_175b: 96)

PRESETS = {
    # Tiny configs, for tests.
    "transformer_tiny": TransformerConfig(),
    "mlp_tiny": MLPConfig(),
    "moe_tiny": MoETransformerConfig(),
    "conv3d_tiny": Conv3DConfig(),
    # Real sizes.
    "gpt2_small": TransformerConfig(
        layers=12, d_model=768, heads=12, d_kv=64, d_ff=3072, vocab=50304,
        length=1024, batch=512, activation="gelu"),
    "mtf_5b": TransformerConfig(
        layers=7, d_model=1024, heads=256, d_kv=128, d_ff=262144,
        vocab=32768, length=256, batch=256),
    "gpt3_175b": TransformerConfig(
        layers=96, d_model=12288, heads=96, d_kv=128, d_ff=49152,
        vocab=50304, length=2048, batch=1536, activation="gelu"),
    # PaLM 540B's published sizes (Chowdhery et al., 2022, table 1): 118
    # layers, d_model 18432, 48 heads of 256, d_ff 73728, a 256k vocabulary
    # (256000, padded to 256512 = 12 x 21376 = 2^9 x 501 so that it splits
    # over PaLM's 12-way model axis), 2048 tokens, batch 2048.  The zoo
    # block differs: full multi-head
    # attention (PaLM: multi-query), a two-matrix GELU FFN (PaLM: SwiGLU,
    # three matrices), serial attention then FFN (PaLM: parallel), with
    # biases-free layer norms either way: about 432B parameters, not 540B.
    "palm_540b": TransformerConfig(
        layers=118, d_model=18432, heads=48, d_kv=256, d_ff=73728,
        vocab=256512, length=2048, batch=2048, activation="gelu"),
    "moe_gpt2_small_64e": MoETransformerConfig(
        layers=12, d_model=768, heads=12, d_kv=64, d_ff=3072, vocab=50304,
        length=1024, batch=512, activation="gelu", experts=64, moe_every=2,
        capacity_factor=2.0),
    "mlp_large": MLPConfig(layers=8, batch=1024, d_model=8192, d_ff=32768,
                           classes=1024),
    "conv3d_large": Conv3DConfig(layers=8, batch=4, depth=256, height=256,
                                 width=256, image_channels=1, channels=32,
                                 classes=4),
}


def list_models():
  """Names of the presets."""
  return sorted(PRESETS)


def get_config(name, **overrides):
  """The preset ``name`` with fields replaced by ``overrides``.

  Raises:
    MtfError: for an unknown name or field.
  """
  if name not in PRESETS:
    raise MtfError(f"unknown model {name!r}; use one of {list_models()}")
  config = PRESETS[name]
  fields = {f.name for f in dataclasses.fields(config)}
  bad = sorted(set(overrides) - fields)
  if bad:
    raise MtfError(f"model {name!r} has no parameter(s) {bad}; its "
                   f"parameters are {sorted(fields)}")
  for key, value in overrides.items():
    default = getattr(config, key)
    # Sizes (ints) must be positive ints (ids such as pad_id may be 0).
    if isinstance(default, int) and not isinstance(default, bool):
      low = 1 if default >= 1 else 0
      if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise MtfError(f"model {name!r}: {key}={value!r} is not an integer "
                       f">= {low}; give e.g. {key}={default}")
      if key in ("layers", "moe_every") and value > MAX_LAYERS:
        # Each layer is tens of ops in Python: 10^5 layers take minutes to
        # build before any search starts.
        raise MtfError(f"model {name!r}: {key}={value} is over "
                       f"{MAX_LAYERS} layers; give e.g. {key}={default}")
    elif isinstance(default, float) and (
        isinstance(value, bool) or not isinstance(value, (int, float))):
      raise MtfError(f"model {name!r}: {key}={value!r} is not a number; "
                     f"give e.g. {key}={default}")
    elif isinstance(default, str) and not isinstance(value, str):
      raise MtfError(f"model {name!r}: {key}={value!r} is not a name; "
                     f"give e.g. {key}={default}")
    elif (key == "dtype" or key.endswith("_dtype")) and not (
        value is None and default is None):  # None: the default dtype
      # The zoo's activations and weights are floating point: an integer
      # dtype would build a graph that cannot be trained or even run.
      if value not in FLOAT_DTYPES:
        raise MtfError(f"model {name!r}: {key}={value!r} is not a floating "
                       f"point dtype; use one of {', '.join(FLOAT_DTYPES)}, "
                       f"e.g. {key}={default}")
  return dataclasses.replace(config, **overrides)


def build_model(name, mesh_name="mesh", **overrides):
  """Builds the preset ``name`` with ``overrides``.

  Example:
    >>> model = build_model("gpt3_175b", layers=2)
    >>> model.loss.shape
    Shape[]
  """
  return get_config(name, **overrides).build(mesh_name=mesh_name)
