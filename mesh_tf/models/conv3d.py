"""A 3-D convolutional segmentation net with large activations.

Every layer keeps the full ``depth x height x width`` resolution (as in
3-D medical-image models), so activations dominate memory and splitting the
spatial dims across the mesh (halo exchange) is the way to fit them.

Dims: ``batch``, ``depth``, ``height``, ``width``, ``image_channels`` (the
input), then ``channels`` and ``filters`` alternating between layers (a
conv's input and output channel dims need distinct names), and ``classes``.
"""

import dataclasses

from mesh_tf.core.dims import Dimension, Shape
from mesh_tf.models.base import InputSpec, ModelGraph, new_graph
from mesh_tf.ops import creation
from mesh_tf.ops import reduce as reduce_lib


@dataclasses.dataclass(frozen=True)
class Conv3DConfig:
  """Sizes and options of :func:`conv3d_net`."""
  layers: int = 2
  batch: int = 2
  depth: int = 8
  height: int = 8
  width: int = 8
  image_channels: int = 1
  channels: int = 4
  classes: int = 2
  filter_size: int = 3
  activation: str = "relu"
  dtype: str = "float32"

  def num_parameters(self):
    k3 = self.filter_size ** 3
    total, cin = 0, self.image_channels
    for _ in range(self.layers):
      total += k3 * cin * self.channels + self.channels
      cin = self.channels
    return total + cin * self.classes + self.classes

  def build(self, mesh_name="mesh"):
    return conv3d_net(**dataclasses.asdict(self), mesh_name=mesh_name)


def conv3d_net(layers=2, batch=2, depth=8, height=8, width=8,
               image_channels=1, channels=4, classes=2, filter_size=3,
               activation="relu", dtype="float32", mesh_name="mesh"):
  """Builds a per-voxel classifier: ``layers`` SAME 3-D convolutions with
  ``activation``, then a 1x1x1 convolution (a dense layer over the channels)
  to ``classes``.

  Inputs: ``inputs`` (float ``[batch, depth, height, width,
  image_channels]``) and ``targets`` (int32 labels ``[batch, depth, height,
  width]``).  Output ``logits``; the loss is the mean voxel cross entropy.

  Returns:
    :class:`~mesh_tf.models.base.ModelGraph`.
  """
  from mesh_tf import layers as L
  config = Conv3DConfig(layers=layers, batch=batch, depth=depth,
                        height=height, width=width,
                        image_channels=image_channels, channels=channels,
                        classes=classes, filter_size=filter_size,
                        activation=activation, dtype=dtype)
  graph, mesh = new_graph(mesh_name)
  spatial = [Dimension("batch", batch), Dimension("depth", depth),
             Dimension("height", height), Dimension("width", width)]
  inputs = creation.import_tf_tensor(
      mesh, None, Shape(spatial + [Dimension("image_channels",
                                             image_channels)]),
      name="inputs", dtype=dtype)
  targets = creation.import_tf_tensor(mesh, None, Shape(spatial),
                                      name="targets", dtype="int32")
  x = inputs
  names = ["channels", "filters"]
  for i in range(layers):
    x = L.conv3d(x, Dimension(names[i % 2], channels),
                 filter_size=filter_size, activation=activation,
                 use_bias=True, name=f"conv_{i}")
  c = Dimension("classes", classes)
  # A 1x1x1 conv is a per-voxel dense layer over the channels: written as
  # one, its kernel has no window dims of size 1.
  logits = L.dense(x, c, name="classifier")
  loss = reduce_lib.reduce_mean(
      L.softmax_cross_entropy_with_logits(logits, targets, c), name="loss")
  return ModelGraph(graph, mesh, {"inputs": inputs, "targets": targets},
                    {"logits": logits}, loss, config,
                    {"inputs": InputSpec(inputs, None),
                     "targets": InputSpec(targets, classes)})
