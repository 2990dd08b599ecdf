"""What every model builder returns: :class:`ModelGraph`."""

import dataclasses
from typing import Any, Dict

import numpy as np

from mesh_tf.graph import Graph, Mesh, Tensor


def feeds_for(inputs, values, what):
  """``{input tensor: value}`` from values given by input name.

  Raises:
    KeyError: for a name that is not in ``inputs``.
  """
  unknown = set(values) - set(inputs)
  if unknown:
    raise KeyError(f"unknown {what} inputs {sorted(unknown)}; the inputs "
                   f"are {sorted(inputs)}")
  return {inputs[k]: v for k, v in values.items()}


@dataclasses.dataclass(frozen=True)
class InputSpec:
  """How to make synthetic data for one model input.

  ``high`` is the exclusive upper bound of integer ids (``None`` for float
  inputs, drawn from a standard normal).
  """
  tensor: Tensor
  high: Any = None


@dataclasses.dataclass(frozen=True)
class ModelGraph:
  """A built model: its graph, mesh, inputs, outputs and loss.

  Attributes:
    graph: the mtf Graph (no TensorFlow, no weights allocated).
    mesh: the Mesh every op is on.
    inputs: name -> mtf Tensor made by ``import_tf_tensor`` with no value;
      feed values at lowering time with ``Lowering(..., feeds=model.feeds(
      inputs=..., targets=...))``.
    outputs: name -> mtf Tensor (e.g. ``logits``).
    loss: the scalar training loss.
    config: the config the model was built from.
    input_specs: name -> :class:`InputSpec`, for :meth:`random_feeds`.
  """
  graph: Graph
  mesh: Mesh
  inputs: Dict[str, Tensor]
  outputs: Dict[str, Tensor]
  loss: Tensor
  config: Any
  input_specs: Dict[str, InputSpec] = dataclasses.field(default_factory=dict)

  def feeds(self, **values):
    """``{input tensor: value}`` for ``Lowering(feeds=...)``.

    Raises:
      KeyError: for a name that is not an input.
    """
    return feeds_for(self.inputs, values, "model")

  def random_values(self, seed=0):
    """Synthetic numpy values for every input (ids or normal floats)."""
    rng = np.random.RandomState(seed)
    out = {}
    for name, spec in self.input_specs.items():
      shape = spec.tensor.shape.to_integer_list()
      if spec.high is None:
        out[name] = rng.randn(*shape).astype(spec.tensor.dtype)
      else:
        out[name] = rng.randint(0, spec.high, size=shape).astype(
            spec.tensor.dtype)
    return out

  def random_feeds(self, seed=0):
    """:meth:`feeds` of :meth:`random_values`."""
    return self.feeds(**self.random_values(seed))

  @property
  def num_parameters(self):
    """Total elements of the trainable variables."""
    return sum(v.shape.size for v in self.graph.trainable_variables)


def new_graph(mesh_name="mesh"):
  graph = Graph()
  return graph, Mesh(graph, mesh_name)
