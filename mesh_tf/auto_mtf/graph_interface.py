"""Mesh TensorFlow's ``auto_mtf.graph_interface``: a by-name view of an
mtf graph's operations and tensors.

The original's ``GraphInterface`` wrapped a TF or an mtf graph for its
layout optimizer and scheduler.  mesh-tf's optimizer reads the mtf graph
directly (:mod:`autolayout`), so this is a thin adapter over an mtf
:class:`~mesh_tf.Graph` only: names, shapes, dtypes, mtf dims, and which
tensors are final (kept to the end).  Memory is estimated by mesh-tf's cost
model (:mod:`costmodels.memory`), not by a schedule of this view.
"""

import math

from mesh_tf.core import dtypes as dtypes_lib
from mesh_tf.core.errors import InvalidArgumentError, UnknownNameError
from mesh_tf.graph import Graph
from mesh_tf.lowering.lazy_tf import tf

__all__ = ["GraphInterface"]


class NotAnMtfGraphError(InvalidArgumentError, TypeError):
  """GraphInterface was given something other than an mtf Graph (a
  TypeError, as the original raised)."""


class GraphInterface:
  """Names of an mtf graph's operations and tensors, and their properties.

  Args:
    graph: an mtf Graph.
    canonical_device: unused (the original placed TF graphs' ops by it).
    mtf_outputs: tensors whose values are kept to the end (final).

  Raises:
    NotAnMtfGraphError: if ``graph`` is not an mtf Graph (the original also
      read TF graphs; mesh-tf's optimizer reads mtf graphs only).
  """

  def __init__(self, graph, canonical_device=None, mtf_outputs=()):
    del canonical_device
    if not isinstance(graph, Graph):
      raise NotAnMtfGraphError(
          f"GraphInterface reads mtf Graphs only, got {type(graph).__name__};"
          " build the model with mesh_tf")
    self._graph = graph
    self._ops = {op.name: op for op in graph.operations}
    self._tensors = {t.name: t for op in graph.operations for t in op.outputs}
    self._final = {t.name for t in mtf_outputs}
    self._op_index = {op.name: i for i, op in enumerate(graph.operations)}

  def _op(self, name):
    if name not in self._ops:
      raise UnknownNameError(f"no operation named {name!r} in the graph")
    return self._ops[name]

  def _tensor(self, name):
    if name not in self._tensors:
      raise UnknownNameError(f"no tensor named {name!r} in the graph")
    return self._tensors[name]

  def get_all_operation_names(self):
    return [op.name for op in self._graph.operations]

  def get_operation_input_names(self, operation_name):
    return [t.name for t in self._op(operation_name).inputs]

  def get_operation_output_names(self, operation_name):
    return [t.name for t in self._op(operation_name).outputs]

  def get_all_tensor_names(self):
    return list(self._tensors)

  def get_tensor_dtype(self, tensor_name):
    return tf.as_dtype(self._tensor(tensor_name).dtype)

  def get_tensor_shape(self, tensor_name):
    return tf.TensorShape(self._tensor(tensor_name).shape.to_integer_list())

  def get_tensor_num_entries(self, tensor_name, partial_layout=None,
                             mesh_dimension_to_size=None):
    """Elements of the tensor, per processor when a layout
    (``{dim name: mesh axis name}``) and the axes' sizes are given."""
    t = self._tensor(tensor_name)
    n = math.prod(t.shape.to_integer_list())
    for d in t.shape:
      axis = (partial_layout or {}).get(d.name)
      if axis is not None:
        n //= mesh_dimension_to_size[axis]
    return n

  def get_tensor_size(self, tensor_name, partial_layout=None,
                      mesh_dimension_to_size=None):
    """Bytes of the tensor (per processor, as :meth:`get_tensor_num_entries`)."""
    t = self._tensor(tensor_name)
    return self.get_tensor_num_entries(
        tensor_name, partial_layout,
        mesh_dimension_to_size) * dtypes_lib.size_of(t.dtype)

  def get_operation_mtf_dimension_names(self, operation_name):
    op = self._op(operation_name)
    return {d.name for t in list(op.inputs) + list(op.outputs)
            for d in t.shape}

  def get_tensor_mtf_dimension_names(self, tensor_name):
    return [d.name for d in self._tensor(tensor_name).shape]

  def is_tensor_final(self, tensor_name):
    """Whether the tensor is kept to the end: an output, or read by no op."""
    t = self._tensor(tensor_name)
    return tensor_name in self._final or (
        not self._final and not self._graph.consumers_of(t))

  def marked_final(self, tensor_name):
    """Whether ``set_tensor_final`` (or ``mtf_outputs``) marked the tensor
    (the original's ``is_tensor_final``; ours also counts unread tensors
    when nothing is marked)."""
    self._tensor(tensor_name)
    return tensor_name in self._final

  def set_tensor_final(self, tensor_name):
    """Marks the tensor as kept to the end (an output)."""
    self._tensor(tensor_name)
    self._final.add(tensor_name)

  def get_tensor_device(self, tensor_name):
    """None: an mtf tensor has no TF device."""
    self._tensor(tensor_name)
    return None

  def is_tensor_on_canonical_device(self, tensor_name):
    """True: an mtf tensor has no TF device to differ from."""
    self._tensor(tensor_name)
    return True

  def compute_memory_contents_under_schedule(self, schedule):
    """The names of the tensors in memory as each op of ``schedule`` (op
    indices, in graph order) runs: the live ones and the op's outputs.
    After the op, a tensor is freed once every reader ran, unless final."""
    ops = self._graph.operations
    readers_left = {name: len(self._graph.consumers_of(t))
                    for name, t in self._tensors.items()}
    live, out = set(), []
    for i in schedule:
      op = ops[i]
      live |= {t.name for t in op.outputs}
      out.append(frozenset(live))
      for t in op.inputs:
        readers_left[t.name] -= 1
      for name in list(live):
        if readers_left[name] <= 0 and name not in self._final:
          live.discard(name)
    return out

  def compute_cost_graph(self, devices=None):
    """The graph as TF's ``CostGraphDef``: per op its inputs (producer and
    port) and outputs (bytes, dtype, shape), and whether it is final.  An
    mtf graph has no devices, so ``devices`` changes nothing."""
    del devices
    tf.compat  # pylint: disable=pointless-statement  (TF via import_order)
    from tensorflow.core.framework import cost_graph_pb2  # pylint: disable=g-import-not-at-top,g-direct-tensorflow-import
    nodes = []
    for i, op in enumerate(self._graph.operations):
      node = cost_graph_pb2.CostGraphDef.Node(name=op.name, id=i)
      for t in op.inputs:
        producer = t.operation
        node.input_info.add(preceding_node=self._op_index[producer.name],
                            preceding_port=producer.outputs.index(t))
      for t in op.outputs:
        info = node.output_info.add(
            size=self.get_tensor_size(t.name), alias_input_port=-1,
            dtype=tf.as_dtype(t.dtype).as_datatype_enum)
        for size in t.shape.to_integer_list():
          info.shape.dim.add(size=size)
      if any(t.name in self._final for t in op.outputs):
        node.is_final = True
      nodes.append(node)
    return cost_graph_pb2.CostGraphDef(node=nodes)
