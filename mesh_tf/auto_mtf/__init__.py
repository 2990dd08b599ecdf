"""Mesh TensorFlow's ``auto_mtf`` package, answered by mesh-tf's layout
optimizer.

* :mod:`~mesh_tf.auto_mtf.api`: the original's ``layout`` and
  ``layout_and_mesh_shape``.
* :mod:`~mesh_tf.auto_mtf.valid_layouts`, :mod:`~mesh_tf.auto_mtf.
  graph_interface`, :mod:`~mesh_tf.auto_mtf.memory_estimator`: the
  original's classes, as thin adapters over the mtf graph (their docstrings
  say how mesh-tf differs).
* :mod:`~mesh_tf.auto_mtf.layout_optimizer`: the original's
  ``LayoutOptimizer``, a thin adapter over mesh-tf's CP-SAT program
  (:mod:`autolayout`) and memory cost model, not a second optimizer;
  :mod:`~mesh_tf.auto_mtf.scheduler`: the original's
  ``minimize_peak_memory`` over the graph view.
* :mod:`~mesh_tf.auto_mtf.door`: ``mtf.auto_layout`` and
  ``mtf.auto_mesh_and_layout``, mesh-tf's own door to :mod:`autolayout`.

OR-Tools is imported only when a function is called.
"""

from mesh_tf.auto_mtf import (api, graph_interface, layout_optimizer,
                              memory_estimator, scheduler, valid_layouts)
from mesh_tf.auto_mtf.api import layout, layout_and_mesh_shape

__all__ = ["layout", "layout_and_mesh_shape"]
