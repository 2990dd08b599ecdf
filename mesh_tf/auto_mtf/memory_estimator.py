"""Mesh TensorFlow's ``auto_mtf.memory_estimator``.

The original's ``MemoryEstimator`` bundled the graph view and the layout
validator its optimizer's memory model read.  mesh-tf estimates memory with
its own cost model (:mod:`costmodels.memory`: weights, gradients, optimizer
state and the peak of live activations under mesh-tf's lowering), which
``mtf.auto_mtf.layout`` minimises through :func:`mesh_tf.auto_layout`; this
class keeps the original's two accessors over that same graph.
"""

from mesh_tf.auto_mtf.graph_interface import GraphInterface
from mesh_tf.auto_mtf.valid_layouts import LayoutValidator
from mesh_tf.core import dims as dims_lib

__all__ = ["MemoryEstimator"]


class MemoryEstimator:
  """The graph view and layout validator of ``mtf_graph`` on
  ``mesh_shape``, with ``mtf_outputs`` kept to the end."""

  def __init__(self, mtf_graph, mesh_shape, mtf_outputs=()):
    self.mtf_graph = mtf_graph
    self.mesh_shape = dims_lib.convert_to_shape(mesh_shape)
    self.mtf_outputs = list(mtf_outputs)
    self._validator = LayoutValidator(mtf_graph, self.mesh_shape)
    self._graph = GraphInterface(mtf_graph, mtf_outputs=self.mtf_outputs)

  def get_layout_validator(self):
    return self._validator

  def get_graph_interface(self):
    return self._graph
