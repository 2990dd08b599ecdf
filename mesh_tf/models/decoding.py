"""The one-token decoding graph of the zoo Transformer LM (inference).

:func:`decoding_graph` builds the forward-only graph of ONE decoding step of
:func:`~mesh_tf.models.transformer_lm`: it reads one token per sequence,
appends that token's keys and values to a key/value cache, attends over the
cache and returns the next-token choice.  It is built from the same variables
as the training graph -- same names, shapes, dtypes and initializers -- so
the randomly initialised weights are the same and a training checkpoint
restores into it (only the caches are new).

Dims follow the training graph, so one set of layout rules serves both:

* tokens ``[batch]``, activations ``[batch, d_model]``;
* each layer's cache ``[batch, heads, memory_length, d_kv]`` (two of them,
  keys and values), a non-trainable variable updated in place; with
  ``heads:model`` it is split over ``model`` like the attention weights;
* logits ``[batch, vocab]``.

The position ``t`` of each row's token is fed (int32 ``[batch]``); the
token's keys and values are written at ``memory_length`` index ``t`` and
positions after ``t`` are masked out, so a stale cache never needs clearing.

Modes (what the step returns besides ``logits``):

* ``"greedy"``: ``next_ids [batch]``, the argmax of the logits (lowest id
  among equal maxima, on every layout).
* ``"sample"``: ``next_ids``, the argmax of ``logits / temperature + g``
  (Gumbel-max sampling), over the ``top_k`` largest logits when ``top_k`` is
  set.  ``g`` (``gumbel [batch, vocab]``) is fed by the caller, drawn on the
  host from :mod:`mesh_tf.lowering.random_kernels` keyed by (seed, step),
  so the sample is the same on every layout.
* ``"beam"``: ``beam_log_probs`` and ``beam_ids`` ``[batch, beam]``, the
  ``beam`` best next tokens of every row (the rows are ``batch = number of
  sequences * beam``); the fed ``parents [batch]`` reorders the cache rows
  (each row continues the hypothesis of row ``parents[row]``) before the
  token is written.

Building is pure Python (no TensorFlow); :mod:`mesh_tf.decoding` runs it.

Example:
  >>> from mesh_tf import models
  >>> from mesh_tf.models import decoding
  >>> d = decoding.decoding_graph(models.TransformerConfig(), batch=1)
  >>> sorted(d.inputs), sorted(d.outputs)
  (['ids', 'position'], ['logits', 'next_ids'])
  >>> str(d.caches[0].shape)
  'batch:1,heads:4,memory_length:8,d_kv:4'
"""

import dataclasses
import math
from typing import Any, Dict, Tuple

from mesh_tf import layers
from mesh_tf.core import dtypes as dtypes_lib
from mesh_tf.core.dims import Dimension, Shape
from mesh_tf.core.errors import MtfError
from mesh_tf.graph import Graph, Mesh, Tensor
from mesh_tf.lowering.lazy_tf import tf
from mesh_tf.models.base import InputSpec, feeds_for
from mesh_tf.models.transformer import TransformerConfig, _norm_fn
from mesh_tf.ops import base as base_ops
from mesh_tf.ops import creation
from mesh_tf.ops import einsum as einsum_lib
from mesh_tf.ops import elementwise as ew
from mesh_tf.ops import gather as gather_lib
from mesh_tf.ops import reduce as reduce_lib
from mesh_tf.ops import reshape as reshape_lib
from mesh_tf.ops import topk as topk_lib
from mesh_tf.ops import variables as var_lib

__all__ = ["MODES", "DecodingError", "DecodingGraph", "decoding_graph",
           "decoding_model", "check_same_weights", "for_cli", "BEAM_DIM",
           "CACHE_SCOPE"]

MODES = ("greedy", "sample", "beam")
# The dim of the per-row candidates in beam mode.
BEAM_DIM = "beam"
# Cache variables live under this scope, apart from the model's weights.
CACHE_SCOPE = "decode_cache"


class DecodingError(MtfError):
  """A decoding graph or decoding run was asked for something it cannot do."""


@dataclasses.dataclass(frozen=True)
class DecodingGraph:
  """A built one-token decoding step.

  Attributes:
    graph, mesh: the mtf Graph and its Mesh.
    config: the :class:`~mesh_tf.models.TransformerConfig` of the model.
    batch: rows decoded together (sequences times beams).
    memory_length: cache length, i.e. the most positions a sequence can have.
    mode: "greedy", "sample" or "beam".
    inputs: name -> fed import: ``ids`` (int32 ``[batch]``), ``position``
      (int32 ``[batch]``, each row's position), ``gumbel`` (sample mode),
      ``parents`` (beam mode).
    outputs: name -> Tensor: ``logits`` and ``next_ids`` or
      ``beam_log_probs``/``beam_ids``.
    caches: the cache variables' values, keys then values of each layer.
    cache_updates: the assign ops writing the new caches.
    weights: the model's variables (the training graph's trainable ones).
    temperature, top_k, beam_size: the sampling/beam options.
    input_specs: name -> InputSpec, for synthetic feeds.
  """
  graph: Graph
  mesh: Mesh
  config: TransformerConfig
  batch: int
  memory_length: int
  mode: str
  inputs: Dict[str, Tensor]
  outputs: Dict[str, Tensor]
  caches: Tuple[Tensor, ...]
  cache_updates: Tuple[Any, ...]
  weights: Tuple[Any, ...]
  temperature: float = 1.0
  top_k: Any = None
  beam_size: Any = None
  input_specs: Dict[str, InputSpec] = dataclasses.field(default_factory=dict)

  def cost_outputs(self):
    """The tensors a decoding step exports, for ``costmodels.evaluate`` and
    ``auto_layout`` (the logits stay on the devices)."""
    if self.mode == "beam":
      return [self.outputs["beam_log_probs"], self.outputs["beam_ids"]]
    return [self.outputs["next_ids"]]

  def feeds(self, **values):
    """``{input tensor: value}`` for ``Lowering(feeds=...)``.

    Raises:
      KeyError: for a name that is not an input.
    """
    return feeds_for(self.inputs, values, "decoding")

  @property
  def cache_bytes(self):
    """Bytes of all caches together (unsplit)."""
    return sum(c.shape.size * dtypes_lib.size_of(c.dtype)
               for c in self.caches)


def _cache_write(cache, new, at, name):
  """``cache`` with ``new`` written where the bool ``at`` is true.

  One slicewise ``tf.where`` in the cache's own dim order (no transposes),
  exact: every element is copied, none is computed.
  """
  return base_ops.GenericOperation(
      lambda c, n, a: tf.where(a, n, c), [cache, new, at], cache.shape,
      cache.dtype, name=name).outputs[0]


def _attention_step(x, position, at, masked, cache_dims, scope, beam_parents,
                    dims, dtype, weight_dtype="float32"):
  """One token of multi-head self-attention with a key/value cache.

  Uses the variables ``{scope}/{q,k,v,o}`` of
  :func:`mesh_tf.layers.multihead_attention` (same shapes and initializers).

  Returns ``(output [batch, d_model], (k_cache, v_cache), (new_k, new_v))``.
  """
  b, m, h, k = dims["batch"], dims["d_model"], dims["heads"], dims["d_kv"]
  mesh = x.mesh
  in_shape = Shape([m, h, k])
  std = 1.0 / math.sqrt(m.size)

  def weight(n, stddev, shape):
    w = var_lib.get_variable(mesh, f"{scope}/{n}", shape,
                             weight_dtype,
                             var_lib.random_normal_initializer(stddev=stddev))
    return layers.core._maybe_cast(w, dtype)
  wq = weight("q", std / math.sqrt(k.size), in_shape)
  wk = weight("k", std, in_shape)
  wv = weight("v", std, in_shape)
  wo = weight("o", 1.0 / math.sqrt(h.size * k.size), Shape([h, k, m]))
  token_shape = Shape([b, h, k])
  q = einsum_lib.einsum([x, wq], output_shape=token_shape,
                        name=f"{scope}/q_proj")
  k_new = einsum_lib.einsum([x, wk], output_shape=token_shape,
                            name=f"{scope}/k_proj")
  v_new = einsum_lib.einsum([x, wv], output_shape=token_shape,
                            name=f"{scope}/v_proj")
  caches = []
  for which in ("k", "v"):
    caches.append(var_lib.get_variable(
        mesh, f"{CACHE_SCOPE}/{scope}/{which}", cache_dims, dtype,
        var_lib.zeros_initializer(), trainable=False,
        memory_category="kv_cache"))
  k_all, v_all = caches
  if beam_parents is not None:
    # Row r continues row parents[r]'s hypothesis: gather its cache row.
    src = f"{b.name}_source"
    k_all, v_all = [
        gather_lib.gather(reshape_lib.rename_dimension(c, b.name, src),
                          beam_parents, src, output_shape=cache_dims,
                          name=f"{scope}/reorder_{w}")
        for c, w in ((k_all, "k"), (v_all, "v"))]
  k_all = _cache_write(k_all, k_new, at, f"{scope}/write_k")
  v_all = _cache_write(v_all, v_new, at, f"{scope}/write_v")
  logits = einsum_lib.einsum(
      [q, k_all], output_shape=Shape([b, h, dims["memory_length"]]),
      name=f"{scope}/logits")
  logits = logits + layers.core._maybe_cast(masked, logits.dtype)
  weights = layers.softmax(logits, dims["memory_length"])
  o = einsum_lib.einsum([weights, v_all], output_shape=token_shape,
                        name=f"{scope}/weighted_values")
  y = einsum_lib.einsum([o, wo], output_shape=x.shape,
                        name=f"{scope}/o_proj")
  return y, tuple(caches), (k_all, v_all)


def decoding_graph(config, batch=1, memory_length=None, mode="greedy",
                   temperature=1.0, top_k=None, beam_size=None,
                   mesh_name="mesh"):
  """Builds the one-token decoding step of a Transformer LM.

  Args:
    config: a :class:`~mesh_tf.models.TransformerConfig` (``batch`` and
      ``dropout`` of it are ignored: this graph decodes ``batch`` rows
      without dropout).
    batch: rows decoded together; in beam mode, sequences times
      ``beam_size``.
    memory_length: cache length (default and maximum: ``config.length``,
      the number of positional embeddings).
    mode: "greedy", "sample" or "beam" (see the module docstring).
    temperature: sample mode: logits are divided by it (> 0).
    top_k: sample mode: sample among the ``top_k`` largest logits only
      (ties with the k-th largest are kept too); None for all.
    beam_size: beam mode: candidates per row (also the beam width).
    mesh_name: name of the mesh.

  Returns:
    A :class:`DecodingGraph`.

  Raises:
    DecodingError: for an unknown mode, a bad option or a cache longer than
      the model's positions.
  """
  if not isinstance(config, TransformerConfig):
    raise DecodingError(f"decoding_graph needs a TransformerConfig, got "
                        f"{type(config).__name__}")
  if mode not in MODES:
    raise DecodingError(f"unknown decoding mode {mode!r}; use one of "
                        f"{MODES}")
  memory_length = config.length if memory_length is None else memory_length
  if not 1 <= memory_length <= config.length:
    raise DecodingError(
        f"memory_length={memory_length} must be in [1, length={config.length}]"
        ": the model has positional embeddings for length="
        f"{config.length} positions; build the model with a larger length")
  if batch < 1:
    raise DecodingError(f"batch={batch} must be at least 1")
  if mode == "sample":
    if not temperature > 0:
      raise DecodingError(f"temperature={temperature!r} must be > 0")
    if top_k is not None and not 1 <= top_k <= config.vocab:
      raise DecodingError(f"top_k={top_k} must be in [1, vocab="
                          f"{config.vocab}]")
  if mode == "beam":
    if beam_size is None or not 1 <= beam_size <= config.vocab:
      raise DecodingError(f"beam mode needs beam_size in [1, vocab="
                          f"{config.vocab}], got {beam_size!r}")
    if batch % beam_size:
      raise DecodingError(f"batch={batch} must be a multiple of beam_size="
                          f"{beam_size} (sequences times beams)")
  graph = Graph()
  mesh = Mesh(graph, mesh_name)
  dims = {n: Dimension(n, s) for n, s in (
      ("batch", batch), ("length", config.length),
      ("memory_length", memory_length), ("d_model", config.d_model),
      ("heads", config.heads), ("d_kv", config.d_kv), ("d_ff", config.d_ff),
      ("vocab", config.vocab))}
  b, n, m, v = dims["batch"], dims["length"], dims["d_model"], dims["vocab"]
  mem = dims["memory_length"]
  # Weights are stored in their compute dtype: a decoding step has no
  # optimizer, so a float32 master would only be re-cast at every token
  # (reading 4 + writing 2 + reading 2 bytes per weight instead of 2).
  var_dtype = config.variable_dtype()
  dtype = var_dtype.activation_dtype
  weight_dtype = var_dtype.slice_dtype
  ids = creation.import_tf_tensor(mesh, None, Shape([b]), name="ids",
                                  dtype="int32")
  position = creation.import_tf_tensor(mesh, None, Shape([b]),
                                       name="position", dtype="int32")
  inputs = {"ids": ids, "position": position}
  specs = {"ids": InputSpec(ids, config.vocab),
           "position": InputSpec(position, memory_length)}
  parents = None
  if mode == "beam":
    parents = creation.import_tf_tensor(mesh, None, Shape([b]),
                                        name="parents", dtype="int32")
    inputs["parents"], specs["parents"] = parents, InputSpec(parents, batch)
  # The same variables, in the same order and scopes, as transformer_lm.
  table = layers.embedding_weights(mesh, v, m, variable_dtype=weight_dtype,
                                   name="embedding")
  x = layers.embedding(ids, v, m, weights=table, dtype=dtype)
  pos_table = var_lib.get_variable(
      mesh, "positional_embedding", Shape([n, m]), weight_dtype,
      var_lib.random_normal_initializer(stddev=0.02))
  pos = gather_lib.gather(pos_table, position, n, name="position_embedding")
  x = x + layers.core._maybe_cast(pos, dtype)
  mem_pos = creation.range(mesh, mem, dtype="int32", name="memory_positions")
  at = ew.equal(mem_pos, position, name="write_position")
  masked = ew.cast(ew.greater(mem_pos, position), "float32") * \
      layers.MASK_BIAS
  cache_dims = Shape([b, dims["heads"], mem, dims["d_kv"]])
  normalize = _norm_fn(config.norm)
  caches, updates = [], []
  for i in range(config.layers):
    y = normalize(x, m, name=f"layer_{i}/attention_norm")
    scope = graph.unique_name(f"layer_{i}/attention")
    y, layer_caches, new = _attention_step(
        y, position, at, masked, cache_dims, scope, parents, dims, dtype,
        weight_dtype)
    x = x + y
    for c, nv in zip(layer_caches, new):
      caches.append(c)
      updates.append(var_lib.assign(c, nv, name=f"{c.name}/update"))
    y = normalize(x, m, name=f"layer_{i}/ffn_norm")
    y = layers.dense_relu_dense(y, dims["d_ff"],
                                activation=config.activation,
                                master_dtype=weight_dtype,
                                name=f"layer_{i}/ffn")
    x = x + y
  x = normalize(x, m, name="final_norm")
  x = x * (m.size ** -0.5)
  logits = einsum_lib.einsum(
      [x, layers.core._maybe_cast(table, x.dtype)],
      output_shape=Shape([b, v]), name="logits")
  outputs = {"logits": logits}
  if mode == "greedy":
    outputs["next_ids"] = topk_lib.argmax(logits, v, name="next_ids")
  elif mode == "sample":
    gumbel = creation.import_tf_tensor(mesh, None, Shape([b, v]),
                                       name="gumbel", dtype="float32")
    inputs["gumbel"], specs["gumbel"] = gumbel, InputSpec(gumbel)
    scores = ew.cast(logits, "float32")
    if temperature != 1.0:
      scores = scores * (1.0 / temperature)
    if top_k is not None and top_k < config.vocab:
      kth_values, _ = topk_lib.top_k(scores, v, Dimension("top_k", top_k),
                                     name="top_k")
      kth = reduce_lib.reduce_min(kth_values, reduced_dim=kth_values.shape[-1])
      scores = ew.where(ew.less(scores, kth), layers.MASK_BIAS, scores,
                        name="top_k_mask")
    outputs["next_ids"] = topk_lib.argmax(scores + gumbel, v,
                                          name="next_ids")
  else:
    log_probs = reduce_lib.log_softmax(ew.cast(logits, "float32"), v)
    values, indices = topk_lib.top_k(log_probs, v,
                                     Dimension(BEAM_DIM, beam_size),
                                     name="beam_top_k")
    outputs["beam_log_probs"], outputs["beam_ids"] = values, indices
  weights = tuple(graph.trainable_variables)
  return DecodingGraph(graph, mesh, config, batch, memory_length, mode,
                       inputs, outputs, tuple(caches), tuple(updates),
                       weights, temperature, top_k, beam_size, specs)


def decoding_model(name, batch=1, memory_length=None, mode="greedy",
                   mesh_name="mesh", temperature=1.0, top_k=None,
                   beam_size=None, **overrides):
  """:func:`decoding_graph` of the zoo preset ``name`` (e.g.
  ``"gpt2_small"``) with config ``overrides``.

  Example:
    >>> d = decoding_model("gpt2_small", batch=1, memory_length=1024)
    >>> str(d.outputs["next_ids"].shape)
    'batch:1'
  """
  from mesh_tf.models.configs import get_config
  config = get_config(name, **overrides)
  if not isinstance(config, TransformerConfig):
    raise DecodingError(f"model {name!r} is a {type(config).__name__}; "
                        "decoding needs a Transformer LM preset")
  return decoding_graph(config, batch=batch, memory_length=memory_length,
                        mode=mode, temperature=temperature, top_k=top_k,
                        beam_size=beam_size, mesh_name=mesh_name)


def check_same_weights(decoding, model):
  """Checks that ``decoding``'s weights are ``model``'s trainable variables:
  same names, shapes, dtypes, in the same order.  Under mixed precision the
  decoding graph stores its weights in the compute dtype and the training
  graph in the master dtype, so floating dtypes may differ then.

  Raises:
    DecodingError: naming the first variable that differs.
  """
  def key(w):
    mixed = dtypes_lib.is_floating(w.dtype) and (
        getattr(model.config, "param_dtype", None) is not None)
    return (w.name, w.shape, "float" if mixed else w.dtype)
  mine = [key(w) for w in decoding.weights]
  theirs = [key(w) for w in model.graph.trainable_variables]
  if mine != theirs:
    for a, b in zip(mine + [None] * len(theirs), theirs + [None] * len(mine)):
      if a != b:
        raise DecodingError(f"decoding variable {a} differs from the "
                            f"model's {b}; build both from one config")
  return True



def for_cli(model="transformer_tiny", batch=1, memory_length=None,
            mode="greedy", beam_size=None, **overrides):
  """``(graph, outputs)`` of a decoding step, for ``mtf-layout``'s
  ``--model mesh_tf/models/decoding.py:for_cli``: its predicted step time is
  the per-token latency.

  Example (shell)::

    mtf-layout solve --model mesh_tf/models/decoding.py:for_cli \\
        --set model=mtf_5b --set batch=1 --topology tpu-v5e-2x4 \\
        --mesh model:8
  """
  d = decoding_model(model, batch=batch, memory_length=memory_length,
                     mode=mode, beam_size=beam_size, **overrides)
  return d.graph, d.cost_outputs()
