"""Mesh TensorFlow's ``auto_mtf`` package, answered by mesh-tf's layout
optimizer.

* :mod:`~mesh_tf.auto_mtf.api`: the original's ``layout`` and
  ``layout_and_mesh_shape``.
* :mod:`~mesh_tf.auto_mtf.valid_layouts`, :mod:`~mesh_tf.auto_mtf.
  graph_interface`, :mod:`~mesh_tf.auto_mtf.memory_estimator`: the
  original's classes, as thin adapters over the mtf graph (their docstrings
  say how mesh-tf differs).  The original's ``layout_optimizer`` and
  ``scheduler`` (its own CP-SAT program and memory schedule) have no
  counterpart module: mesh-tf's CP-SAT program is :mod:`autolayout`.
* :mod:`~mesh_tf.auto_mtf.door`: ``mtf.auto_layout`` and
  ``mtf.auto_mesh_and_layout``, mesh-tf's own door to :mod:`autolayout`.

OR-Tools is imported only when a function is called.
"""

from mesh_tf.auto_mtf import (api, graph_interface, memory_estimator,
                              valid_layouts)
from mesh_tf.auto_mtf.api import layout, layout_and_mesh_shape

__all__ = ["layout", "layout_and_mesh_shape"]
