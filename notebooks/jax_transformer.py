"""The zoo's Transformer LM forward (``mesh_tf.models.transformer_lm``),
written in JAX with the same shapes and the same parameter names, so that a
plan exported with ``autolayout.plans.export.to_jax`` shards it directly.

Used by ``export_to_jax.ipynb`` and by the export tests.  Every array keeps
mtf's dim order (e.g. ``layer_0/attention/q`` is ``[d_model, heads, d_kv]``
and the ``q_proj`` activation ``[batch, heads, length, d_kv]``), so the
exported ``partition_spec`` of each name applies as it is.
"""

import numpy as np

import jax
import jax.numpy as jnp


def init_params(params_spec, seed=0):
  """numpy values for every param of a JAX export (``spec["params"]``):
  norm scales 1, norm biases 0, the rest normal with stddev 0.02."""
  rng = np.random.RandomState(seed)
  out = {}
  for name, p in params_spec.items():
    shape = tuple(p["shape"])
    if name.endswith(("/scale", "/layer_norm_scale")):
      out[name] = np.ones(shape, np.float32)
    elif name.endswith(("/bias", "/layer_norm_bias")):
      out[name] = np.zeros(shape, np.float32)
    else:
      out[name] = (0.02 * rng.randn(*shape)).astype(np.float32)
  return out


def num_layers(params):
  """How many ``layer_i/`` blocks the params hold."""
  return len({n.split("/")[0] for n in params if n.startswith("layer_")})


def _norm(x, p, name):
  mean = jnp.mean(x, axis=-1, keepdims=True)
  var = jnp.mean(jnp.square(x - mean), axis=-1, keepdims=True)
  scope = f"{name}/layer_norm/layer_norm"  # Mesh TF's variable names
  return ((x - mean) * jax.lax.rsqrt(var + 1e-6) * p[f"{scope}_scale"]
          + p[f"{scope}_bias"])


def block(p, s, x, bias, c):
  """Layer ``s`` (``"layer_0"``) of the LM on ``x [batch, length,
  d_model]``: attention then the feed-forward, each with a residual."""
  y = c(f"{s}/attention_norm/norm", _norm(x, p, f"{s}/attention_norm"))
  q = c(f"{s}/attention/q_proj",
        jnp.einsum("bld,dhk->bhlk", y, p[f"{s}/attention/q"]))
  k = c(f"{s}/attention/k_proj",
        jnp.einsum("bmd,dhk->bhmk", y, p[f"{s}/attention/k"]))
  v = c(f"{s}/attention/v_proj",
        jnp.einsum("bmd,dhk->bhmk", y, p[f"{s}/attention/v"]))
  w = jax.nn.softmax(jnp.einsum("bhlk,bhmk->bhlm", q, k) + bias, axis=-1)
  o = jnp.einsum("bhlm,bhmk->bhlk", w, v)
  x = x + c(f"{s}/attention/o_proj",
            jnp.einsum("bhlk,hkd->bld", o, p[f"{s}/attention/o"]))
  y = c(f"{s}/ffn_norm/norm", _norm(x, p, f"{s}/ffn_norm"))
  h = c(f"{s}/ffn/wi/einsum",
        jnp.einsum("bld,df->blf", y, p[f"{s}/ffn/wi/kernel"]))
  return x + c(f"{s}/ffn/wo/einsum",
               jnp.einsum("blf,fd->bld", jax.nn.relu(h),
                          p[f"{s}/ffn/wo/kernel"]))


def forward(params, inputs, targets, constrain=None, recompute=()):
  """``(logits [batch, length, vocab], mean loss)`` of the LM.

  Args:
    params: name -> array, the mtf variable names.
    inputs, targets: int32 ``[batch, length]``.
    constrain: optional ``fn(activation name, array) -> array`` applied to
      each named activation (e.g. ``jax.lax.with_sharding_constraint`` with
      the exported specs); identity by default.
    recompute: names of the blocks (``"layer_0"``) to wrap in
      ``jax.checkpoint`` with the ``nothing_saveable`` policy: their
      activations are recomputed in the backward pass (a training export's
      ``checkpoint`` blocks).
  """
  c = constrain or (lambda name, x: x)
  p = params
  inputs, targets = c("inputs", inputs), c("targets", targets)
  table = p["embedding/weights"]
  d_model = table.shape[1]
  x = jnp.take(table, inputs, axis=0) + p["positional_embedding"]
  length = inputs.shape[1]
  causal = jnp.arange(length)[None, :] <= jnp.arange(length)[:, None]
  bias = jnp.where(causal, 0.0, -1e9).astype(x.dtype)
  for i in range(num_layers(p)):
    s = f"layer_{i}"
    if s in recompute:
      fn = jax.checkpoint(lambda p, x, s=s: block(p, s, x, bias, c),
                          policy=jax.checkpoint_policies.nothing_saveable)
      x = fn(p, x)
    else:
      x = block(p, s, x, bias, c)
  x = c("final_norm/norm", _norm(x, p, "final_norm"))
  logits = c("logits", jnp.einsum("bld,vd->blv", x * d_model ** -0.5, table))
  logz = jax.nn.logsumexp(logits.astype(jnp.float32), axis=-1)
  gold = jnp.take_along_axis(logits, targets[..., None], axis=-1)[..., 0]
  return logits, c("loss", jnp.mean(logz - gold.astype(jnp.float32)))
