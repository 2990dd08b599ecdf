"""A decoder-only Transformer language model (GPT-style, pre-norm).

Dim names: ``batch``, ``length``, ``memory_length`` (keys/values),
``d_model``, ``heads``, ``d_kv``, ``d_ff``, ``vocab``, so layouts such as
``batch:rows;d_ff:cols;heads:cols;vocab:cols`` give data parallelism over
``rows`` and Megatron-style model parallelism over ``cols``.
"""

import dataclasses

from mesh_tf.core.dims import Dimension, Shape
from mesh_tf.core.dtypes import VariableDType
from mesh_tf.core.errors import ShapeError
from mesh_tf import layers
from mesh_tf.models.base import InputSpec, ModelGraph, new_graph
from mesh_tf.models.repeated import RepeatedLayers
from mesh_tf.ops import creation
from mesh_tf.ops import einsum as einsum_lib
from mesh_tf.ops import reduce as reduce_lib
from mesh_tf.ops import variables as var_lib


@dataclasses.dataclass(frozen=True)
class TransformerConfig:
  """Sizes and options of :func:`transformer_lm`."""
  layers: int = 2
  d_model: int = 16
  heads: int = 4
  d_kv: int = 4
  d_ff: int = 32
  vocab: int = 64
  length: int = 8
  batch: int = 8
  activation: str = "relu"
  norm: str = "layer_norm"
  dropout: float = 0.0
  z_loss: float = 0.0
  pad_id: int = None
  dtype: str = "float32"
  param_dtype: str = None
  master_dtype: str = "float32"
  recompute: int = 0

  def variable_dtype(self):
    """The :class:`mesh_tf.VariableDType` of the weights: stored in
    ``master_dtype``; read through a ``param_dtype`` compute copy; the
    activations run in ``param_dtype`` too (else in ``dtype``)."""
    act = self.param_dtype or self.dtype
    return VariableDType(self.master_dtype, act, act)

  def num_parameters(self):
    """Trainable parameters, computed without building the graph."""
    norm = 2 * self.d_model if self.norm == "layer_norm" else self.d_model
    per_layer = (4 * self.d_model * self.heads * self.d_kv
                 + 2 * self.d_model * self.d_ff + 2 * norm)
    return (self.layers * per_layer + self.vocab * self.d_model
            + self.length * self.d_model + norm)

  def build(self, mesh_name="mesh"):
    return transformer_lm(**dataclasses.asdict(self), mesh_name=mesh_name)

  def parts(self):
    """The model as :func:`transformer_parts`, for pipelining."""
    return transformer_parts(self)


def _norm_fn(norm):
  if norm == "layer_norm":
    return layers.layer_norm
  if norm == "rms_norm":
    return layers.rms_norm
  raise ShapeError(f"unknown norm {norm!r}; use 'layer_norm' or 'rms_norm'")


def lm_inputs(mesh, batch, length, vocab):
  """``inputs`` and ``targets``: int32 token ids ``[batch, length]``."""
  shape = Shape([batch, length])
  inputs = creation.import_tf_tensor(mesh, None, shape, name="inputs",
                                     dtype="int32")
  targets = creation.import_tf_tensor(mesh, None, shape, name="targets",
                                      dtype="int32")
  return inputs, targets


def lm_bias(mesh, inputs, length, pad_id):
  """Causal attention bias, plus padding bias when ``pad_id`` is set."""
  pos = creation.range(mesh, length, dtype="int32", name="positions")
  bias = layers.attention_mask_autoregressive(pos)
  if pad_id is not None:
    bias = bias + layers.attention_mask_ignore_padding(inputs, pad_id=pad_id)
  return bias


def embed(mesh, inputs, vocab, d_model, length, dtype, master_dtype="float32"):
  """Token embedding (its table, tied with the softmax) + positions."""
  table = layers.embedding_weights(mesh, vocab, d_model,
                                   variable_dtype=master_dtype,
                                   name="embedding")
  x = layers.embedding(inputs, vocab, d_model, weights=table, dtype=dtype)
  pos = var_lib.get_variable(
      mesh, "positional_embedding", Shape([length, d_model]), master_dtype,
      var_lib.random_normal_initializer(stddev=0.02))
  return x + layers.core._maybe_cast(pos, dtype), table


def lm_head(x, table, vocab, d_model, targets, z_loss):
  """Logits through the tied embedding table, and the mean loss."""
  x = x * (d_model.size ** -0.5)
  logits = einsum_lib.einsum(
      [x, layers.core._maybe_cast(table, x.dtype)],
      output_shape=x.shape - [d_model] + Shape([vocab]), name="logits")
  loss = layers.softmax_cross_entropy_with_logits(
      logits, targets, vocab, z_loss=z_loss)
  return logits, reduce_lib.reduce_mean(loss, name="loss")


def transformer_layer(config, i, x, bias, ffn_fn=None, aux_losses=None):
  """Layer ``i`` of :func:`transformer_lm`: ``x += attention(norm(x)); x +=
  ffn(norm(x))``, recomputed in backward if ``i < config.recompute``.

  The one definition of the repeated layer, used by :func:`transformer_lm`
  and by the pipeline's stage programs (:func:`transformer_parts`).
  ``ffn_fn(i, y) -> (y, aux or None)`` replaces the FFN; its auxiliary
  losses are appended to ``aux_losses``.
  """
  from mesh_tf import layers as L
  m = x.shape.get_dim_by_name("d_model")
  h, k = Dimension("heads", config.heads), Dimension("d_kv", config.d_kv)
  f = Dimension("d_ff", config.d_ff)
  normalize = _norm_fn(config.norm)

  def block(x):
    y = normalize(x, m, name=f"layer_{i}/attention_norm")
    x = x + L.multihead_attention(y, None, bias, k, h,
                                  dropout=config.dropout,
                                  master_dtype=config.master_dtype,
                                  name=f"layer_{i}/attention")
    y = normalize(x, m, name=f"layer_{i}/ffn_norm")
    if ffn_fn is not None:
      y, aux = ffn_fn(i, y)
      if aux is not None:
        aux_losses.append(aux)
    else:
      y = L.dense_relu_dense(y, f, dropout_rate=config.dropout,
                             activation=config.activation,
                             master_dtype=config.master_dtype,
                             name=f"layer_{i}/ffn")
    return x + y
  if i < config.recompute:
    from mesh_tf.gradients import recompute_grad
    return recompute_grad(block, [x], name=f"layer_{i}/recompute")
  return block(x)


def transformer_lm(layers=2, d_model=16, heads=4, d_kv=4, d_ff=32, vocab=64,
                   length=8, batch=8, activation="relu", norm="layer_norm",
                   dropout=0.0, z_loss=0.0, pad_id=None, dtype="float32",
                   param_dtype=None, master_dtype="float32", recompute=0,
                   mesh_name="mesh", ffn_fn=None):
  """Builds a decoder-only Transformer LM graph.

  Each layer is ``x += attention(norm(x)); x += ffn(norm(x))`` with causal
  self-attention; the output softmax shares the embedding table.  The loss
  is the mean next-token cross entropy of ``targets`` (int32 ``[batch,
  length]``) given ``inputs`` (same shape).

  Args:
    layers, d_model, heads, d_kv, d_ff, vocab, length, batch: sizes.
    activation: the FFN activation ("relu", "gelu"...).
    norm: "layer_norm" or "rms_norm".
    dropout: dropout rate (attention weights and FFN hidden layer).
    z_loss: z-loss coefficient of the softmax.
    pad_id: token id of padding, masked out of attention (None: no mask).
    dtype: activation dtype.
    param_dtype: mixed precision: the compute dtype of the weights (each
      is read through a cast copy, counted as parameter memory) and of the
      activations; None: ``dtype``.
    master_dtype: the dtype the variables are stored and updated in.
    recompute: activation recompute: the first ``recompute`` layers keep
      only their input for the backward pass and run their forward again
      there (``mesh_tf.recompute_grad``); the others keep every activation.
    mesh_name: name of the mesh.
    ffn_fn: optional ``fn(i, x) -> (y, aux_loss or None)`` replacing the
      FFN of layer ``i`` (the MoE Transformer uses it).

  Returns:
    :class:`~mesh_tf.models.base.ModelGraph` with inputs ``inputs`` and
    ``targets``, output ``logits`` and the scalar ``loss``.  Building
    allocates no weights: variables hold initializers only.
  """
  config = TransformerConfig(
      layers=layers, d_model=d_model, heads=heads, d_kv=d_kv, d_ff=d_ff,
      vocab=vocab, length=length, batch=batch, activation=activation,
      norm=norm, dropout=dropout, z_loss=z_loss, pad_id=pad_id, dtype=dtype,
      param_dtype=param_dtype, master_dtype=master_dtype,
      recompute=recompute)
  if not 0 <= recompute <= layers:
    raise ShapeError(f"recompute={recompute} must be in [0, layers="
                     f"{layers}]: it is how many layers recompute")
  dtype = config.variable_dtype().activation_dtype
  num_layers = layers
  graph, mesh = new_graph(mesh_name)
  b, n = Dimension("batch", batch), Dimension("length", length)
  m, v = Dimension("d_model", d_model), Dimension("vocab", vocab)
  inputs, targets = lm_inputs(mesh, b, n, v)
  x, table = embed(mesh, inputs, v, m, n, dtype, master_dtype)
  bias = lm_bias(mesh, inputs, n, pad_id)
  normalize = _norm_fn(norm)
  aux_losses = []
  for i in range(num_layers):
    x = transformer_layer(config, i, x, bias, ffn_fn, aux_losses)
  x = normalize(x, m, name="final_norm")
  logits, loss = lm_head(x, table, v, m, targets, z_loss)
  outputs = {"logits": logits}
  if aux_losses:
    aux = aux_losses[0]
    for a in aux_losses[1:]:
      aux = aux + a
    outputs["lm_loss"] = loss
    outputs["aux_loss"] = aux
    loss = loss + aux
  return ModelGraph(
      graph, mesh, {"inputs": inputs, "targets": targets}, outputs, loss,
      config, {"inputs": InputSpec(inputs, vocab),
               "targets": InputSpec(targets, vocab)})


def transformer_parts(config):
  """The Transformer of ``config`` as embedding, repeated layers and head,
  for pipeline parallelism (:mod:`mesh_tf.pipeline`).

  The parts build exactly what :func:`transformer_lm` builds, with the
  same variable names: the embedding and positions first, then
  :func:`transformer_layer` ``config.layers`` times, then the final norm
  and the softmax through the tied embedding table (which the last stage
  holds a copy of).  ``config.batch`` is the whole batch.

  Returns:
    A :class:`~mesh_tf.models.repeated.RepeatedLayers`.

  Raises:
    ShapeError: for a config of another model (a subclass, e.g. the MoE
      Transformer's, whose layers these parts do not build).

  Example:
    >>> parts = transformer_parts(TransformerConfig(layers=4))
    >>> parts.layers, parts.batch
    (4, 8)
  """
  if type(config) is not TransformerConfig:
    raise ShapeError(
        f"transformer_parts builds the dense TransformerConfig's layers, "
        f"not a {type(config).__name__}'s; that model declares no repeated "
        "layers for pipelining yet")
  c = config
  dtype = c.variable_dtype().activation_dtype
  n, m = Dimension("length", c.length), Dimension("d_model", c.d_model)
  v = Dimension("vocab", c.vocab)

  def inputs(mesh, batch):
    ids, targets = lm_inputs(mesh, Dimension("batch", batch), n, v)
    return {"inputs": ids, "targets": targets}

  def first(mesh, feeds):
    return embed(mesh, feeds["inputs"], v, m, n, dtype, c.master_dtype)[0]

  def context(mesh, feeds):
    return lm_bias(mesh, feeds["inputs"], n, c.pad_id)

  def layer(i, x, bias):
    return transformer_layer(c, i, x, bias)

  def last(mesh, x, feeds):
    from mesh_tf import layers as L
    table = L.embedding_weights(mesh, v, m, variable_dtype=c.master_dtype,
                                name="embedding")
    x = _norm_fn(c.norm)(x, m, name="final_norm")
    return lm_head(x, table, v, m, feeds["targets"], c.z_loss)[1]

  return RepeatedLayers(c.layers, c.batch, inputs, first, context, layer,
                        last, {"inputs": c.vocab, "targets": c.vocab})
