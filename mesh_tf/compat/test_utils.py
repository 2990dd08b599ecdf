"""Mesh TensorFlow's ``mtf.test_utils``: :class:`NumpyConverter`, which
turns numpy arrays into mtf Tensors and lowered mtf Tensors back into numpy
arrays, on one processor.

TensorFlow is imported when a converter is made, not when this module is.
"""

from mesh_tf.core import dims as dims_lib
from mesh_tf.graph import Graph, Mesh
from mesh_tf.lowering.lazy_tf import tf

__all__ = ["NumpyConverter"]


class NumpyConverter:
  """Converts between numpy arrays, mtf Tensors and TF tensors.

  It owns an mtf Graph with one mesh (``mtf_mesh``) and a
  ``tf.compat.v1.Session`` for graph mode; an mtf Tensor is lowered on one
  processor (a :class:`~mesh_tf.PlacementMeshImpl` of shape ``[]``).

  Example:
    >>> converter = NumpyConverter()                        # doctest: +SKIP
    >>> x = converter.convert_np_array_to_mtf_tensor(np.ones([2, 3]))
    >>> converter.convert_mtf_tensor_to_np_array(x * 2)     # all twos
  """

  def __init__(self):
    self._graph = Graph()
    self._mesh = Mesh(self._graph, "mtf_mesh")
    self._session = tf.compat.v1.Session()

  @property
  def graph(self):
    return self._graph

  @property
  def mesh(self):
    return self._mesh

  @property
  def session(self):
    return self._session

  def convert_np_array_to_mtf_tensor(self, x, dim_names=None, dtype="int32"):
    """An mtf constant with ``x``'s value; its dims are ``dim_names`` (by
    default ``dim0``, ``dim1``, ...) sized as ``x``'s axes."""
    from mesh_tf.ops import creation  # pylint: disable=g-import-not-at-top
    names = list(dim_names or [f"dim{i}" for i in range(x.ndim)])
    shape = dims_lib.Shape([dims_lib.Dimension(n, s)
                            for n, s in zip(names, x.shape)])
    return creation.constant(self._mesh, x, shape=shape, dtype=dtype)

  def convert_mtf_tensor_to_tf_tensor(self, mtf_tensor):
    """``(lowering, tf_tensor)``: the graph lowered on one processor, and
    ``mtf_tensor``'s value in it."""
    from mesh_tf.lowering.lowering import Lowering  # pylint: disable=g-import-not-at-top
    from mesh_tf.lowering.placement import PlacementMeshImpl  # pylint: disable=g-import-not-at-top
    impl = PlacementMeshImpl(shape=[], layout={}, devices=[""])
    lowering = Lowering(self._graph, {self._mesh: impl})
    return lowering, lowering.export_to_tf_tensor(mtf_tensor)

  def convert_mtf_tensor_to_np_array(self, x_mtf):
    """``x_mtf``'s value as a numpy array; in graph mode the variables are
    initialized first (their masters, then their slices)."""
    lowering, x_tf = self.convert_mtf_tensor_to_tf_tensor(x_mtf)
    if tf.executing_eagerly():
      return x_tf.numpy()
    self._session.run(tf.compat.v1.global_variables_initializer())
    self._session.run(lowering.copy_masters_to_slices())
    return self._session.run(x_tf)
