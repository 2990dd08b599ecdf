"""Mesh TensorFlow's ``auto_mtf`` package, answered by mesh-tf's layout
optimizer.

* :mod:`~mesh_tf.auto_mtf.api`: the original's ``layout`` and
  ``layout_and_mesh_shape``.
* :mod:`~mesh_tf.auto_mtf.door`: ``mtf.auto_layout`` and
  ``mtf.auto_mesh_and_layout``, mesh-tf's own door to :mod:`autolayout`.

OR-Tools is imported only when a function is called.
"""

from mesh_tf.auto_mtf.api import layout, layout_and_mesh_shape

__all__ = ["layout", "layout_and_mesh_shape"]
