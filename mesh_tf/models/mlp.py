"""A residual MLP classifier.

Dims: ``batch``, ``d_model`` (features), ``d_ff`` (hidden), ``classes``.
Each block is ``x += dense_relu_dense(layer_norm(x))``, so ``d_ff:cols`` is
Megatron-style model parallelism and ``batch:rows`` data parallelism.
"""

import dataclasses

from mesh_tf.core.dims import Dimension, Shape
from mesh_tf.models.base import InputSpec, ModelGraph, new_graph
from mesh_tf.models.repeated import RepeatedLayers
from mesh_tf.ops import creation
from mesh_tf.ops import reduce as reduce_lib


@dataclasses.dataclass(frozen=True)
class MLPConfig:
  """Sizes and options of :func:`mlp`."""
  layers: int = 2
  batch: int = 8
  d_model: int = 8
  d_ff: int = 16
  classes: int = 4
  activation: str = "relu"
  dtype: str = "float32"

  def num_parameters(self):
    block = 2 * self.d_model * self.d_ff + 2 * self.d_model
    return (self.layers * block + self.d_model * self.classes
            + self.classes)

  def build(self, mesh_name="mesh"):
    return mlp(**dataclasses.asdict(self), mesh_name=mesh_name)

  def parts(self):
    """The model as :func:`mlp_parts`, for pipelining."""
    return mlp_parts(self)


def mlp(layers=2, batch=8, d_model=8, d_ff=16, classes=4, activation="relu",
        dtype="float32", mesh_name="mesh"):
  """Builds a residual MLP classifier graph.

  Inputs: ``inputs`` (float ``[batch, d_model]``) and ``targets`` (int32
  class ids ``[batch]``).  Output ``logits`` ``[batch, classes]``; the loss
  is the mean softmax cross entropy.

  Returns:
    :class:`~mesh_tf.models.base.ModelGraph`.
  """
  from mesh_tf import layers as L
  config = MLPConfig(layers=layers, batch=batch, d_model=d_model, d_ff=d_ff,
                     classes=classes, activation=activation, dtype=dtype)
  graph, mesh = new_graph(mesh_name)
  b, m = Dimension("batch", batch), Dimension("d_model", d_model)
  f, c = Dimension("d_ff", d_ff), Dimension("classes", classes)
  inputs = creation.import_tf_tensor(mesh, None, Shape([b, m]),
                                     name="inputs", dtype=dtype)
  targets = creation.import_tf_tensor(mesh, None, Shape([b]),
                                      name="targets", dtype="int32")
  x = inputs
  for i in range(layers):
    y = L.layer_norm(x, m, name=f"block_{i}/norm")
    x = x + L.dense_relu_dense(y, f, activation=activation,
                               name=f"block_{i}/ffn")
  logits = L.dense(x, c, name="classifier")
  loss = reduce_lib.reduce_mean(
      L.softmax_cross_entropy_with_logits(logits, targets, c), name="loss")
  return ModelGraph(graph, mesh, {"inputs": inputs, "targets": targets},
                    {"logits": logits}, loss, config,
                    {"inputs": InputSpec(inputs, None),
                     "targets": InputSpec(targets, classes)})


def mlp_parts(config):
  """The MLP of ``config`` as repeated blocks and classifier, for pipeline
  parallelism (same variable names as :func:`mlp`); the inputs feed block
  0 directly.  ``config.batch`` is the whole batch.

  Returns:
    A :class:`~mesh_tf.models.repeated.RepeatedLayers`.
  """
  from mesh_tf import layers as L
  c = config
  m, f = Dimension("d_model", c.d_model), Dimension("d_ff", c.d_ff)
  k = Dimension("classes", c.classes)

  def inputs(mesh, batch):
    b = Dimension("batch", batch)
    return {"inputs": creation.import_tf_tensor(
                mesh, None, Shape([b, m]), name="inputs", dtype=c.dtype),
            "targets": creation.import_tf_tensor(
                mesh, None, Shape([b]), name="targets", dtype="int32")}

  def layer(i, x, ctx):
    y = L.layer_norm(x, m, name=f"block_{i}/norm")
    return x + L.dense_relu_dense(y, f, activation=c.activation,
                                  name=f"block_{i}/ffn")

  def last(mesh, x, feeds):
    logits = L.dense(x, k, name="classifier")
    return reduce_lib.reduce_mean(L.softmax_cross_entropy_with_logits(
        logits, feeds["targets"], k), name="loss")

  return RepeatedLayers(c.layers, c.batch, inputs,
                        lambda mesh, feeds: feeds["inputs"],
                        lambda mesh, feeds: None, layer, last,
                        {"targets": c.classes})
