"""A Transformer LM written by hand, the way a user writes one: its own dim
and variable names, ``mtf.layers`` and raw einsums under per-layer name
scopes, and an SGD step.  The zoo's ``transformer_lm`` of the same sizes is
the reference the layout search's speed is measured against
(``benchmarks/solve.py``, ``tests/autolayout/test_search_speed.py``).
"""

import mesh_tf as mtf
from mesh_tf.training import optimize


def build(layers=2, d_model=1024, heads=16, d_kv=64, d_ff=4096, vocab=32768,
          length=1024, batch=64):
  """``(graph, [loss])`` of the hand-written LM's training step."""
  g = mtf.Graph()
  mesh = mtf.Mesh(g, "devices")
  B, T = mtf.Dimension("examples", batch), mtf.Dimension("seq", length)
  S = mtf.Dimension("keys", length)
  E, H = mtf.Dimension("embed", d_model), mtf.Dimension("n_heads", heads)
  K, F = mtf.Dimension("head_dim", d_kv), mtf.Dimension("hidden", d_ff)
  V = mtf.Dimension("tokens", vocab)
  ids = mtf.import_tf_tensor(mesh, None, mtf.Shape([B, T]), name="ids",
                             dtype="int32")
  labels = mtf.import_tf_tensor(mesh, None, mtf.Shape([B, T]),
                                name="labels", dtype="int32")
  wte = mtf.get_variable(mesh, "model/wte", mtf.Shape([V, E]),
                         initializer=mtf.random_normal_initializer(
                             stddev=0.02))
  x = mtf.einsum([mtf.one_hot(ids, V), wte], reduced_dims=[V],
                 name="model/embed")
  pos = mtf.range(mesh, T, dtype="int32")
  keypos = mtf.rename_dimension(pos, "seq", "keys")
  causal = mtf.cast(mtf.less(pos, keypos), "float32") * -1e9
  for i in range(layers):
    scope = f"model/h{i}"
    y = mtf.layers.layer_norm(x, E, name=f"{scope}/ln_1")
    wq = mtf.get_variable(mesh, f"{scope}/attn/q", mtf.Shape([E, H, K]))
    wk = mtf.get_variable(mesh, f"{scope}/attn/k", mtf.Shape([E, H, K]))
    wv = mtf.get_variable(mesh, f"{scope}/attn/v", mtf.Shape([E, H, K]))
    wo = mtf.get_variable(mesh, f"{scope}/attn/o", mtf.Shape([H, K, E]))
    q = mtf.einsum([y, wq], reduced_dims=[E], name=f"{scope}/attn/q_proj")
    kv_in = mtf.rename_dimension(y, "seq", "keys")
    k = mtf.einsum([kv_in, wk], reduced_dims=[E], name=f"{scope}/attn/k_proj")
    v = mtf.einsum([kv_in, wv], reduced_dims=[E], name=f"{scope}/attn/v_proj")
    logits = mtf.einsum([q, k], reduced_dims=[K],
                        name=f"{scope}/attn/scores") * (d_kv ** -0.5)
    probs = mtf.softmax(logits + causal, S)
    ctx = mtf.einsum([probs, v], reduced_dims=[S], name=f"{scope}/attn/ctx")
    x = x + mtf.einsum([ctx, wo], reduced_dims=[H, K],
                       name=f"{scope}/attn/out")
    y = mtf.layers.layer_norm(x, E, name=f"{scope}/ln_2")
    h = mtf.layers.dense(y, F, activation="gelu", name=f"{scope}/mlp/fc")
    x = x + mtf.layers.dense(h, E, reduced_dims=[F], name=f"{scope}/mlp/proj")
  x = mtf.layers.layer_norm(x, E, name="model/ln_f")
  out = mtf.einsum([x, wte], reduced_dims=[E], name="model/unembed")
  loss = mtf.reduce_mean(mtf.layers.softmax_cross_entropy_with_logits(
      out, labels, V), name="loss")
  variables = list(g.trainable_variables)
  grads = mtf.gradients([loss], [v.outputs[0] for v in variables])
  optimize.SgdOptimizer(1e-3).apply_grads(grads, variables)
  return g, [loss]
