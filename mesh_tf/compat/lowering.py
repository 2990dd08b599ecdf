"""Mesh TensorFlow's ``mtf.Lowering``, with its ``autostack`` option.

Stacking variables (:mod:`mesh_tf.ops.stacked_variables`) rewrites the mtf
graph with ops, before anything is lowered; it lives here, above both the
ops and :mod:`mesh_tf.lowering`, so that lowering never imports the ops.
"""

from mesh_tf.lowering import lowering as lowering_lib
from mesh_tf.ops import stacked_variables

__all__ = ["Lowering"]


class Lowering(lowering_lib.Lowering):
  """``Lowering(graph, mesh_to_impl, feeds=None, autostack=False)``: the
  lowering of the whole graph (:class:`mesh_tf.lowering.Lowering`).

  Args:
    graph, mesh_to_impl, feeds: as :class:`mesh_tf.lowering.Lowering`.
    autostack: first stack like variables into
      :class:`~mesh_tf.StackedVariable` ops, rewriting ``graph`` in place
      (Mesh TF's autostack), unless the graph is stacked already (lowered
      before).  Mesh TF's default was True; here it is False, because
      stacking renames what checkpoints hold and rewrites the graph that the
      cost model and the layout search read; results are the same either
      way.
  """

  def __init__(self, graph, mesh_to_impl, feeds=None, autostack=False):
    if autostack and not stacked_variables.is_stacked(graph):
      stacked_variables.rewrite_stack_variables(graph, mesh_to_impl)
    super().__init__(graph, mesh_to_impl, feeds)
