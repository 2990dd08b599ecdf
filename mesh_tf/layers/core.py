"""Basic layers: dense, normalisation, embedding, feed-forward, dropout, loss.

Layers are plain functions of mtf Tensors.  They create their variables with
:func:`mesh_tf.get_variable` under a unique name scope (``dense``,
``dense_1``, ... or ``name/...``) with layout-invariant initializers, so a
model gives the same values under every layout and mesh.
"""

import math

from mesh_tf.core import dims as dims_lib
from mesh_tf.core import dtypes as dtypes_lib
from mesh_tf.core.errors import ShapeError
from mesh_tf.ops import einsum as einsum_lib
from mesh_tf.ops import elementwise as ew
from mesh_tf.ops import reduce as reduce_lib
from mesh_tf.ops import variables as var_lib


def _unique_scope(graph, name):
  # Scopes share the graph's name table with ops, so "dense" and "dense_1"
  # never collide with each other or with op names.  An open tf.compat.v1
  # variable scope prefixes them, as in Mesh TensorFlow.
  from mesh_tf.compat.tf_scope import scoped_name  # pylint: disable=g-import-not-at-top
  return graph.unique_name(scoped_name(name))


def _dims_list(x):
  if x is None:
    return []
  if isinstance(x, (dims_lib.Dimension, str)):
    x = [x]
  if isinstance(x, dims_lib.Shape):
    return x.dims
  return [dims_lib.convert_to_dimension(d) for d in x]


def _resolve(x, dims, what):
  """Dims of ``x`` given as Dimensions or names."""
  out = []
  for d in dims:
    name = d if isinstance(d, str) else d.name
    if name not in x.shape:
      raise ShapeError(f"{what}: dim {d} is not a dim of {x.name} "
                       f"{x.shape!r}")
    out.append(x.shape.get_dim_by_name(name))
  return out


def _maybe_cast(t, dtype):
  return ew.cast(t, dtype) if t.dtype != dtype else t


ACTIVATIONS = {
    None: None, "linear": None, "relu": ew.relu, "gelu": ew.gelu,
    "swish": ew.swish, "silu": ew.swish, "tanh": ew.tanh,
    "sigmoid": ew.sigmoid, "elu": ew.elu, "selu": ew.selu,
}


class DenseInitializer:
  """Base class of initializers that see a dense kernel's dims (Mesh TF's):
  ``initializer(reduced_dims, new_dims)`` returns a variable initializer.
  :func:`dense` calls it with its reduced and new dims."""

  def __call__(self, reduced_dims, new_dims):
    raise NotImplementedError


def get_activation(activation):
  """An activation function given by name ("relu", "gelu"...) or callable."""
  if callable(activation):
    return activation
  if activation not in ACTIVATIONS:
    raise ShapeError(f"unknown activation {activation!r}; use one of "
                     f"{sorted(k for k in ACTIVATIONS if k)} or a function")
  return ACTIVATIONS[activation]


def variable_dtype_of(variable_dtype, master_dtype, slice_dtype):
  """The :class:`mesh_tf.VariableDType` of a layer's variables from Mesh
  TF's three spellings: ``variable_dtype`` wins; a VariableDType given as
  ``master_dtype`` is taken whole; else ``master_dtype`` with a
  ``slice_dtype`` compute copy (None: the master dtype, no copy).  The
  value the layer computes with is then cast to the input's dtype."""
  if variable_dtype is None and isinstance(master_dtype,
                                           dtypes_lib.VariableDType):
    variable_dtype = master_dtype
  if variable_dtype is not None:
    if not isinstance(variable_dtype, dtypes_lib.VariableDType):
      variable_dtype = dtypes_lib.VariableDType(variable_dtype)
    return variable_dtype
  master = dtypes_lib.as_dtype(master_dtype or "float32")
  sl = master if slice_dtype is None else dtypes_lib.as_dtype(slice_dtype)
  return dtypes_lib.VariableDType(master, sl, sl)


def dense(x, new_dims, reduced_dims=None, expert_dims=None, use_bias=True,
          activation=None, master_dtype="float32", slice_dtype=None,
          variable_dtype=None, kernel_initializer=None, kernel_weights=None,
          name=None, *, bias_initializer=None):
  """A dense (fully connected) layer: ``activation(x . W + b)``.

  The parameters are Mesh TF 0.1.21's, in its order.

  Args:
    x: an mtf Tensor.
    new_dims: the output dim(s) that replace ``reduced_dims``; one named
      like a reduced dim replaces it (the kernel then has the reduced dim
      as ``_<name>``).
    reduced_dims: dims of ``x`` to contract (default: its last dim).
    expert_dims: dims of ``x`` that get separate weights (e.g. experts).
    use_bias: add a bias over ``expert_dims + new_dims``.
    activation: None, a name such as "relu"/"gelu", or a function.
    master_dtype: dtype the variables are stored and updated in.
    slice_dtype: dtype of the compute copy read from them (default: the
      master dtype, no copy); see :class:`mesh_tf.VariableDType`.
    variable_dtype: a :class:`mesh_tf.VariableDType`, instead of the two.
    kernel_initializer: an initializer, or a :class:`DenseInitializer`
      (called with the reduced and new dims); default Normal(0,
      1/sqrt(fan_in)), layout-invariant.
    kernel_weights: an existing kernel Tensor ``[expert_dims..., reduced
      dims..., new dims...]`` (any order) to use instead of a variable.
    name: scope of the variables ``name/kernel`` and ``name/bias``.
    bias_initializer: default zeros (keyword only; not in Mesh TF).

  Returns:
    Tensor of shape ``x.shape - reduced_dims + new_dims``.

  Raises:
    ShapeError: for a reduced or expert dim ``x`` lacks, a new dim ``x``
      already has, or ``kernel_weights`` without the kernel's dims.

  Example:
    >>> y = dense(x, mtf.Dimension("d_ff", 2048), name="wi")   # doctest: +SKIP
  """
  new_dims = _dims_list(new_dims)
  if reduced_dims is None:
    reduced_dims = [x.shape.dims[-1]]
  reduced_dims = _resolve(x, _dims_list(reduced_dims),
                          "dense")
  expert_dims = _resolve(x, _dims_list(expert_dims), "dense")
  # As in Mesh TF, an output dim named like a reduced dim replaces it: the
  # input's dim is renamed "_<name>" so that the kernel has both.
  new_names = {d.name for d in new_dims}
  for i, d in enumerate(reduced_dims):
    if d.name in new_names:
      from mesh_tf.ops.reshape import rename_dimension  # pylint: disable=g-import-not-at-top
      x = rename_dimension(x, d.name, "_" + d.name)
      reduced_dims[i] = dims_lib.Dimension("_" + d.name, d.size)
  for d in new_dims:
    if d.name in x.shape and d not in reduced_dims:
      raise ShapeError(f"dense: new dim {d} is already a dim of {x.name} "
                       f"{x.shape!r}; give the output dim another name")
  scope = _unique_scope(x.graph, name or "dense")
  var_dtype = variable_dtype_of(variable_dtype, master_dtype, slice_dtype)
  if kernel_weights is None:
    w = _dense_kernel(x, scope, expert_dims, reduced_dims, new_dims,
                      kernel_initializer, var_dtype)
  else:
    w = kernel_weights
    wanted = set(expert_dims + reduced_dims + new_dims)
    if set(w.shape.dims) != wanted:
      raise ShapeError(
          f"dense: kernel_weights {w.name} {w.shape!r} needs the dims "
          f"{dims_lib.Shape(expert_dims + reduced_dims + new_dims)!r} "
          "(expert, reduced and new dims)")
  w = _maybe_cast(w, x.dtype)
  out_shape = (x.shape - reduced_dims) + dims_lib.Shape(
      [d for d in new_dims])
  y = einsum_lib.einsum([x, w], output_shape=out_shape, name=f"{scope}/einsum")
  if use_bias:
    b = var_lib.get_variable(
        x.mesh, f"{scope}/bias", dims_lib.Shape(expert_dims + new_dims),
        var_dtype, var_lib.zeros_initializer() if bias_initializer is None
        else bias_initializer)
    y = ew.add(y, _maybe_cast(b, x.dtype), name=f"{scope}/bias_add")
  act = get_activation(activation)
  return act(y) if act is not None else y


def _dense_kernel(x, scope, expert_dims, reduced_dims, new_dims, initializer,
                  var_dtype):
  fan_in = math.prod(d.size for d in reduced_dims)
  if isinstance(initializer, DenseInitializer):  # sees the dims
    initializer = initializer(reduced_dims, new_dims)
  if initializer is None:
    initializer = var_lib.random_normal_initializer(
        stddev=1.0 / math.sqrt(max(1, fan_in)))
  return var_lib.get_variable(
      x.mesh, f"{scope}/kernel",
      dims_lib.Shape(expert_dims + reduced_dims + new_dims), var_dtype,
      initializer)


def _norm_dim(x, dim, what):
  if dim is None:
    return x.shape.dims[-1]
  return _resolve(x, [dim], what)[0]


def layer_norm(x, dim=None, epsilon=1e-6, name="layer_prepostprocess", *,
               use_bias=True):
  """Layer normalisation over ``dim`` with learned scale (and bias).

  ``y = (x - mean) * rsqrt(var + epsilon) * scale + bias``, with mean and
  variance over ``dim`` (default: the last dim).  One fused op each way
  (see :mod:`mesh_tf.layers.norm`); ``dim`` may be split across the mesh
  (the statistics are all-reduced).  The parameters and variable names
  are Mesh TF 0.1.21's.

  Args:
    x: a float Tensor.
    dim: the normalised Dimension or its name (default: the last dim).
    epsilon: added to the variance.
    name: scope (made unique in the graph) of the variables
      ``name/layer_norm/layer_norm_scale`` and ``.../layer_norm_bias``
      (shape ``[dim]``, float32) and of the op ``name/norm``.
    use_bias: learn a bias too (keyword only; not in Mesh TF).

  Returns:
    Tensor of the shape of ``x``.
  """
  from mesh_tf.layers.norm import NormOperation
  dim = _norm_dim(x, dim, "layer_norm")
  scope = _unique_scope(x.graph, name or "layer_prepostprocess")
  scale = var_lib.get_variable(
      x.mesh, f"{scope}/layer_norm/layer_norm_scale", [dim], "float32",
      var_lib.ones_initializer())
  bias = None
  if use_bias:
    bias = _maybe_cast(var_lib.get_variable(
        x.mesh, f"{scope}/layer_norm/layer_norm_bias", [dim], "float32",
        var_lib.zeros_initializer()), x.dtype)
  return NormOperation(x, dim, _maybe_cast(scale, x.dtype), bias, epsilon,
                       name=f"{scope}/norm").outputs[0]


def rms_norm(x, dim=None, epsilon=1e-6, name=None):
  """RMS normalisation: ``x * rsqrt(mean(x^2) + epsilon) * scale``.

  Like :func:`layer_norm` without centring and bias.
  """
  from mesh_tf.layers.norm import NormOperation
  dim = _norm_dim(x, dim, "rms_norm")
  scope = _unique_scope(x.graph, name or "rms_norm")
  scale = var_lib.get_variable(x.mesh, f"{scope}/scale", [dim], "float32",
                               var_lib.ones_initializer())
  return NormOperation(x, dim, _maybe_cast(scale, x.dtype), None, epsilon,
                       rms=True, name=f"{scope}/norm").outputs[0]


def embedding_weights(mesh, vocab_dim, output_dim, variable_dtype="float32",
                      name=None, initializer=None):
  """The ``[vocab_dim, output_dim]`` embedding table (Normal(0, 1) init)."""
  scope = _unique_scope(mesh.graph, name or "embedding")
  vocab_dim = dims_lib.convert_to_dimension(vocab_dim)
  output_dim = dims_lib.convert_to_dimension(output_dim)
  return var_lib.get_variable(
      mesh, f"{scope}/weights", dims_lib.Shape([vocab_dim, output_dim]),
      variable_dtype,
      initializer or var_lib.random_normal_initializer(stddev=1.0))


def one_hot(indices, output_dim, on_value=1.0, off_value=0.0,
            dtype="float32", name=None):
  """``indices`` one-hot encoded over ``output_dim`` (see ``mtf.one_hot``)."""
  from mesh_tf.ops.gather import one_hot as one_hot_op
  return one_hot_op(indices, dims_lib.convert_to_dimension(output_dim),
                    on_value=on_value, off_value=off_value, dtype=dtype,
                    name=name)


def embedding(indices, vocab_dim, output_dim, variable_dtype="float32",
              name=None, weights=None, dtype=None):
  """Looks up ``indices`` (int ids) in an embedding table.

  Args:
    indices: integer mtf Tensor of token ids.
    vocab_dim: the vocabulary Dimension.
    output_dim: the embedding Dimension (e.g. ``d_model``).
    variable_dtype: dtype of the table.
    name: scope of the table variable ``name/weights``.
    weights: an existing ``[vocab_dim, output_dim]`` table (e.g. tied with
      the softmax); no variable is created then.
    dtype: activation dtype (default: the table's).

  Returns:
    Tensor of shape ``indices.shape + [output_dim]``.  The lookup is an
    ``mtf.gather``, which handles a vocab dim split across the mesh.
  """
  from mesh_tf.ops.gather import gather
  vocab_dim = dims_lib.convert_to_dimension(vocab_dim)
  if weights is None:
    weights = embedding_weights(indices.mesh, vocab_dim, output_dim,
                                variable_dtype, name)
  if dtype is not None:
    weights = _maybe_cast(weights, dtypes_lib.as_dtype(dtype))
  return gather(weights, indices, vocab_dim)


def dropout(x, rate=0.0, noise_shape=None, is_training=True, seed=None,
            name=None):
  """Zeros each element with probability ``rate`` and scales the rest by
  ``1 / (1 - rate)``; identity when not training or when ``rate`` is 0.

  ``noise_shape`` (a sub-shape of ``x``) shares one draw along the missing
  dims.  The mask is layout-invariant: it depends on ``seed`` and each
  element's global index only.
  """
  if not is_training or rate == 0.0:
    return x
  from mesh_tf.ops import random as random_lib
  return random_lib.dropout(x, rate=rate, noise_shape=noise_shape,
                            seed=seed, name=name)


_dense, _dropout = dense, dropout  # dense_relu_dense's args shadow them.


def dense_relu_dense(x, hidden_channels, is_training=True, dropout=0.0,
                     dropout_broadcast_dims=None, master_dtype="float32",
                     slice_dtype=None, name=None, *, activation="relu",
                     dropout_rate=None):
  """The Transformer feed-forward block: ``dense(activation(dense(x)))``.

  The parameters are Mesh TF 0.1.21's, in its order.

  Args:
    x: Tensor whose last dim is the io channel dim (e.g. ``d_model``).
    hidden_channels: the hidden Dimension (e.g. ``d_ff``).
    is_training: dropout applies only when training.
    dropout: dropout rate on the hidden layer.
    dropout_broadcast_dims: dims (or names) along which the dropout mask
      is shared.
    master_dtype, slice_dtype: the variables' dtypes, as in :func:`dense`
      (``master_dtype`` may be a :class:`mesh_tf.VariableDType`).
    name: scope; variables are ``name/wi/kernel`` and ``name/wo/kernel``.
    activation: hidden activation ("relu", "gelu"...; keyword only).
    dropout_rate: the same as ``dropout`` (keyword only; mesh-tf's older
      spelling).

  Returns:
    Tensor of the shape of ``x``.
  """
  if dropout_rate is not None:
    dropout = dropout_rate
  io_channels = x.shape.dims[-1]
  scope = _unique_scope(x.graph, name or "dense_relu_dense")
  h = _dense(x, hidden_channels, use_bias=False,
             activation=activation, master_dtype=master_dtype,
             slice_dtype=slice_dtype, name=f"{scope}/wi")
  if dropout:
    noise = None
    if dropout_broadcast_dims:
      shared = dropout_broadcast_dims
      if isinstance(shared, (str, dims_lib.Dimension)):
        shared = [shared]
      noise = h.shape - _resolve(h, list(shared), "dense_relu_dense")
    h = _dropout(h, dropout, noise_shape=noise, is_training=is_training)
  return _dense(h, io_channels, use_bias=False, master_dtype=master_dtype,
                slice_dtype=slice_dtype, name=f"{scope}/wo")


def softmax_cross_entropy_with_logits(logits, targets, vocab_dim, z_loss=0.0):
  """Per-example softmax cross entropy, with an optional z-loss.

  ``loss = logsumexp(logits) - sum(targets * logits)`` over ``vocab_dim``,
  plus ``z_loss * logsumexp(logits)**2`` (which keeps the softmax normaliser
  near 1, as in Mesh TensorFlow).

  Args:
    logits: float Tensor with ``vocab_dim``.
    targets: a distribution over ``vocab_dim`` with the shape of ``logits``,
      or integer class ids with the shape of ``logits`` minus ``vocab_dim``.
    vocab_dim: the class Dimension (may be split across the mesh).
    z_loss: coefficient of the z-loss.

  Returns:
    Tensor of shape ``logits.shape - vocab_dim``.

  Raises:
    ShapeError: if ``targets`` fits neither form.
  """
  vocab_dim = _resolve(logits, [vocab_dim], "softmax_cross_entropy")[0]
  if vocab_dim.name not in targets.shape:
    if not dtypes_lib.is_integer(targets.dtype):
      raise ShapeError(
          f"softmax_cross_entropy_with_logits: targets {targets.name} "
          f"{targets.shape!r} has no dim {vocab_dim} and is not integer ids; "
          "pass a distribution over the vocab dim or int class ids")
    targets = one_hot(targets, vocab_dim, dtype=logits.dtype)
  elif targets.shape != logits.shape and set(
      targets.shape.dimension_names) != set(logits.shape.dimension_names):
    raise ShapeError(
        f"softmax_cross_entropy_with_logits: targets {targets.name} "
        f"{targets.shape!r} and logits {logits.name} {logits.shape!r} need "
        "the same dims")
  lse = reduce_lib.reduce_logsumexp(logits, vocab_dim)
  picked = reduce_lib.reduce_sum(logits * _maybe_cast(targets, logits.dtype),
                                 output_shape=lse.shape)
  loss = lse - picked
  if z_loss:
    loss = loss + ew.square(lse) * z_loss
  return loss


def sigmoid_cross_entropy_with_logits(logits, targets):
  """Elementwise ``max(x,0) - x*z + log(1+exp(-|x|))``, stable for any
  logit ``x`` and target ``z``.

  Raises:
    ShapeError: unless ``logits`` and ``targets`` have the same dims (in
      any order), as Mesh TF requires.
  """
  if set(logits.shape.dims) != set(targets.shape.dims):
    raise ShapeError(
        f"sigmoid_cross_entropy_with_logits: logits {logits.name} "
        f"{logits.shape!r} and targets {targets.name} {targets.shape!r} "
        "need the same dims")
  return (ew.relu(logits) - logits * targets
          + ew.softplus(ew.negative(ew.abs(logits))))
