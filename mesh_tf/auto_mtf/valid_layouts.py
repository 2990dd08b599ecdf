"""Mesh TensorFlow's ``auto_mtf.valid_layouts``: which tensor dim may go on
which mesh axis.

:class:`LayoutValidator` answers from the graph's own ops: a dim is
splittable unless an op marks it unsplittable (``op.unsplittable_dims``,
the original's per-op definition) or its name is anonymous (``_``-prefixed,
see ``mtf.anonymous_shape``); it may go on a mesh axis whose size divides
it.  mesh-tf's layout search (:mod:`autolayout`) applies the same rules,
but from ``op.lowering_unsplittable_dims`` (what mesh-tf's lowering can
split), so it may split a few dims this validator refuses (the concat dim,
for one).
"""

from mesh_tf.core import dims as dims_lib

__all__ = ["LayoutValidator"]


class LayoutValidator:
  """Valid (tensor dim -> mesh axis) assignments of an mtf graph.

  Args:
    mtf_graph: the mtf Graph.
    mesh_shape: the mesh Shape (or a string such as ``"m1:4;m2:2"``).
  """

  def __init__(self, mtf_graph, mesh_shape):
    self._graph = mtf_graph
    self._mesh_shape = dims_lib.convert_to_shape(mesh_shape)
    sizes, unsplittable = {}, set()
    for op in mtf_graph.operations:
      unsplittable |= set(op.unsplittable_dims)
      for t in list(op.inputs) + list(op.outputs):
        for d in t.shape:
          sizes.setdefault(d.name, set()).add(d.size)
    self._sizes = sizes
    self._splittable = {n for n in sizes
                        if n not in unsplittable and not n.startswith("_")}

  @property
  def splittable_mtf_dimension_names(self):
    """Names of the dims that some layout may split (a set)."""
    return set(self._splittable)

  @property
  def mesh_dimension_name_to_size(self):
    """``{mesh axis name: size}``."""
    return {d.name: d.size for d in self._mesh_shape}

  def is_valid_assignment(self, mtf_dimension_name, mesh_dimension_name):
    """Whether dim ``mtf_dimension_name`` may be split over mesh axis
    ``mesh_dimension_name``: it is splittable and every size it has is a
    multiple of the axis's size."""
    axis = self.mesh_dimension_name_to_size.get(mesh_dimension_name)
    if axis is None or mtf_dimension_name not in self._splittable:
      return False
    return all(s % axis == 0 for s in self._sizes[mtf_dimension_name])
