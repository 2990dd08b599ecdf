"""Mesh TensorFlow's ``auto_mtf.graph_interface``: a by-name view of an
mtf or a TF graph's operations and tensors.

The original's ``GraphInterface`` wrapped a TF or an mtf graph for its
layout optimizer and scheduler.  mesh-tf's optimizer reads the mtf graph
directly (:mod:`autolayout`), so this is a thin adapter: names, shapes,
dtypes, mtf dims (none for a TF graph), devices (none for an mtf graph),
and which tensors are final (kept to the end).  Memory is estimated by
mesh-tf's cost model (:mod:`costmodels.memory`), not by a schedule of this
view; :mod:`~mesh_tf.auto_mtf.scheduler` orders it for the original's API.
"""

import collections
import math

from mesh_tf.core import dtypes as dtypes_lib
from mesh_tf.core.errors import InvalidArgumentError, UnknownNameError
from mesh_tf.graph import Graph
from mesh_tf.lowering.lazy_tf import tf

__all__ = ["GraphInterface"]

# One tensor of the view: its TF dtype, integer shape, mtf dim names and
# device (None for mtf tensors).
_TensorInfo = collections.namedtuple("_TensorInfo",
                                     "dtype shape dims device")
# One operation: its name, input and output tensor names, device.
_OpInfo = collections.namedtuple("_OpInfo", "name inputs outputs device")


class NotAnMtfGraphError(InvalidArgumentError, TypeError):
  """GraphInterface was given something other than an mtf or a TF Graph (a
  TypeError, as the original raised)."""


def _mtf_view(graph):
  ops = [_OpInfo(op.name, [t.name for t in op.inputs],
                 [t.name for t in op.outputs], None)
         for op in graph.operations]
  tensors = {t.name: _TensorInfo(tf.as_dtype(t.dtype),
                                 t.shape.to_integer_list(),
                                 [d.name for d in t.shape], None)
             for op in graph.operations for t in op.outputs}
  return ops, tensors


def _tf_view(graph):
  ops = [_OpInfo(op.name, [t.name for t in op.inputs],
                 [t.name for t in op.outputs], op.device or None)
         for op in graph.get_operations()]
  tensors = {t.name: _TensorInfo(t.dtype.base_dtype, t.shape.as_list(), [],
                                 op.device or None)
             for op in graph.get_operations() for t in op.outputs}
  return ops, tensors


class GraphInterface:
  """Names of an mtf (or TF) graph's operations and tensors, and their
  properties.

  Args:
    graph: an mtf Graph, or a ``tf.Graph`` (statically shaped).
    canonical_device: for a TF graph, the device whose tensors count
      (``is_tensor_on_canonical_device``); None: every device.
    mtf_outputs: tensors whose values are kept to the end (final).

  Raises:
    NotAnMtfGraphError: if ``graph`` is neither (a TypeError too).
  """

  def __init__(self, graph, canonical_device=None, mtf_outputs=()):
    if isinstance(graph, Graph):
      ops, tensors = _mtf_view(graph)
    elif isinstance(graph, tf.Graph):
      ops, tensors = _tf_view(graph)
    else:
      raise NotAnMtfGraphError(
          f"GraphInterface reads mtf or TF Graphs, got "
          f"{type(graph).__name__}; build the model with mesh_tf")
    self._canonical_device = canonical_device
    self._op_list = ops
    self._ops = {op.name: op for op in ops}
    self._tensors = tensors
    self._producer = {t: (i, port) for i, op in enumerate(ops)
                      for port, t in enumerate(op.outputs)}
    self._readers = collections.Counter(t for op in ops for t in op.inputs)
    self._final = {t.name for t in mtf_outputs}

  def _op(self, name):
    if name not in self._ops:
      raise UnknownNameError(f"no operation named {name!r} in the graph")
    return self._ops[name]

  def _tensor(self, name):
    if name not in self._tensors:
      raise UnknownNameError(f"no tensor named {name!r} in the graph")
    return self._tensors[name]

  def get_all_operation_names(self):
    return [op.name for op in self._op_list]

  def get_operation_input_names(self, operation_name):
    return list(self._op(operation_name).inputs)

  def get_operation_output_names(self, operation_name):
    return list(self._op(operation_name).outputs)

  def get_all_tensor_names(self):
    return list(self._tensors)

  def get_tensor_dtype(self, tensor_name):
    return self._tensor(tensor_name).dtype

  def get_tensor_shape(self, tensor_name):
    return tf.TensorShape(self._tensor(tensor_name).shape)

  def get_tensor_num_entries(self, tensor_name, partial_layout=None,
                             mesh_dimension_to_size=None):
    """Elements of the tensor, per processor when a layout
    (``{dim name: mesh axis name}``) and the axes' sizes are given."""
    t = self._tensor(tensor_name)
    n = math.prod(t.shape)
    for d in t.dims:
      axis = (partial_layout or {}).get(d)
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
    return {d for t in op.inputs + op.outputs for d in self._tensors[t].dims}

  def get_tensor_mtf_dimension_names(self, tensor_name):
    return list(self._tensor(tensor_name).dims)

  def is_tensor_final(self, tensor_name):
    """Whether the tensor is kept to the end: an output, or read by no op."""
    self._tensor(tensor_name)
    return tensor_name in self._final or (
        not self._final and not self._readers[tensor_name])

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
    """The TF device of a TF graph's tensor (None if unplaced); None for
    an mtf tensor."""
    return self._tensor(tensor_name).device

  def is_tensor_on_canonical_device(self, tensor_name):
    """Whether the tensor is on ``canonical_device`` (always, without one,
    or for an mtf tensor)."""
    device = self._tensor(tensor_name).device
    return (self._canonical_device is None or device is None
            or device == self._canonical_device)

  def compute_memory_contents_under_schedule(self, schedule):
    """The names of the tensors in memory as each op of ``schedule`` (op
    indices, in graph order) runs: the live ones and the op's outputs.
    After the op, a tensor is freed once every reader ran, unless final."""
    readers_left = dict(self._readers)
    live, out = set(), []
    for i in schedule:
      op = self._op_list[i]
      live |= set(op.outputs)
      out.append(frozenset(live))
      for t in op.inputs:
        readers_left[t] -= 1
      for name in list(live):
        if readers_left.get(name, 0) <= 0 and name not in self._final:
          live.discard(name)
    return out

  def compute_cost_graph(self, devices=None):
    """The graph as TF's ``CostGraphDef``: per op its device, inputs
    (producer and port) and outputs (dtype; bytes and shape only for ops on
    one of ``devices``, every op when None), and whether it is final.  An
    mtf graph has no devices, so ``devices`` changes nothing there."""
    tf.compat  # pylint: disable=pointless-statement  (TF via import_order)
    from tensorflow.core.framework import cost_graph_pb2  # pylint: disable=g-import-not-at-top,g-direct-tensorflow-import
    nodes = []
    for i, op in enumerate(self._op_list):
      node = cost_graph_pb2.CostGraphDef.Node(name=op.name, id=i)
      if op.device is not None:
        node.device = op.device
      for t in op.inputs:
        producer, port = self._producer[t]
        node.input_info.add(preceding_node=producer, preceding_port=port)
      sized = devices is None or op.device is None or op.device in devices
      for t in op.outputs:
        info = node.output_info.add(
            size=self.get_tensor_size(t) if sized else 0,
            alias_input_port=-1,
            dtype=self._tensors[t].dtype.as_datatype_enum)
        if sized:
          for size in self._tensors[t].shape:
            info.shape.dim.add(size=size)
      if any(t in self._final for t in op.outputs):
        node.is_final = True
      nodes.append(node)
    return cost_graph_pb2.CostGraphDef(node=nodes)
