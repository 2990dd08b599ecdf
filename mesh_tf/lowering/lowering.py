"""Lowering: turns an mtf Graph into per-processor computations.

Lowering is an explicit call:

* :func:`lower` lowers every operation of a graph and returns the
  :class:`Lowering` that holds the laid-out value of each tensor;
* :func:`lower_operation` lowers ONE operation on given laid-out inputs and
  returns its outputs and the trace it recorded (the cost tables of the
  layout search price ops this way, on :class:`~mesh_tf.ShapeMeshImpl`).

``Lowering(graph, {mesh: impl})`` is Mesh TensorFlow's spelling of
:func:`lower`, kept so that its programs port by changing their import only.
"""

from typing import NamedTuple, Tuple

from mesh_tf.core.errors import MtfError
from mesh_tf.graph import Mesh, Operation, Tensor
from mesh_tf.lowering.laid_out import LaidOutTensor
from mesh_tf.lowering.trace import CollectiveTrace

__all__ = ["Lowering", "OpLowering", "lower", "lower_operation"]


class Lowering:
  """The laid-out values of a graph's tensors, lowered on their backends.

  Op lowering code reads and writes it: ``mesh_impl(op)``, ``laid_out(t)``,
  ``set_tensor_lowering(t, x)``, ``tensors``, ``variables`` (mtf Variable op
  -> LaidOutVariable), ``feeds`` and ``lowered_operations``.

  ``Lowering(graph, mesh_to_impl, feeds=None)`` lowers the
  whole graph: it is exactly :func:`lower`, in Mesh TensorFlow's spelling.
  It lowers at once rather than on first use so that a layout the graph
  cannot take raises where the program asks for the lowering (as in Mesh
  TF), and so that inside a ``tf.function`` the TF ops are created while
  the function is traced.  :meth:`empty` makes one that holds nothing yet.

  Args:
    graph: the mtf Graph.
    mesh_to_impl: dict from each Mesh to its MeshImpl backend.
    feeds: optional dict from mtf Tensors made by ``import_tf_tensor`` to TF
      tensors that replace the imported value (e.g. ``tf.function`` args).
  Raises:
    MtfError: subclasses, for a layout the graph cannot take, or a mesh
      without a MeshImpl.

  Example:
    >>> lowering = mtf.lower(graph, {mesh: mesh_impl})   # doctest: +SKIP
    >>> tf_y = lowering.export_to_tf_tensor(y)           # doctest: +SKIP
  """

  def __init__(self, graph, mesh_to_impl, feeds=None):
    self._start(graph, mesh_to_impl, feeds)
    self.lower_operations(graph.operations)
    if self.variables:
      # Mesh TF's order: in a tf.compat.v1 graph the masters exist once the
      # Lowering does, so an initializer built next covers them.
      from mesh_tf.lowering.masters import make_masters_in_v1_graph  # pylint: disable=g-import-not-at-top
      make_masters_in_v1_graph(self)

  @classmethod
  def empty(cls, graph, mesh_to_impl, feeds=None):
    """A Lowering of ``graph`` in which nothing is lowered yet."""
    lowering = cls.__new__(cls)
    lowering._start(graph, mesh_to_impl, feeds)  # pylint: disable=protected-access
    return lowering

  def _start(self, graph, mesh_to_impl, feeds):
    self.graph = graph
    self.mesh_to_impl = dict(mesh_to_impl)
    self.feeds = dict(feeds or {})
    self.tensors = {}
    self.variables = {}
    self.lowered_operations = {}

  # --- lowering ops -----------------------------------------------------
  def lower_operations(self, operations):
    """Lowers ``operations`` in order (their inputs must be lowered already,
    in this Lowering); returns self."""
    for op in operations:
      self.lower_op(op)
    return self

  def lower_op(self, op):
    """Lowers one operation whose inputs are lowered in this Lowering."""
    impl = self.mesh_impl(op)
    try:
      impl.check_splittable(op)
      with impl.recording(op.name):
        op.lower(self)
    except Exception:
      # A layout error names the output tensor, not just a shape that op
      # code laid out.  Checked only on failure: on every op it cost 13% of
      # pricing one op for the layout search.
      for t in op.outputs:
        impl.tensor_layout(t)
      raise
    for t in op.outputs:
      if t not in self.tensors:
        raise AssertionError(f"{op} did not lower its output {t.name}")

  # --- the interface op lowering code uses -------------------------------
  def mesh_impl(self, x):
    """The MeshImpl of a Mesh, Tensor or Operation."""
    mesh = x if isinstance(x, Mesh) else x.mesh
    impl = self.mesh_to_impl.get(mesh)
    if impl is None:
      raise MtfError(f"no MeshImpl was given for mesh {mesh.name!r}; pass "
                     "{mesh: mesh_impl} to Lowering")
    return impl

  def set_tensor_lowering(self, tensor, laid_out):
    """Records the lowered value (LaidOutTensor or lazy sum) of ``tensor``."""
    expected = self.mesh_impl(tensor).slice_shape(tensor)
    if tuple(laid_out.slice_shape) != expected:
      raise AssertionError(
          f"lowering of {tensor.name} has slice shape {laid_out.slice_shape},"
          f" expected {expected}")
    self.tensors[tensor] = laid_out

  def laid_out(self, tensor):
    """The LaidOutTensor of ``tensor``, forcing a pending all-reduce."""
    return self.tensors[tensor].to_laid_out_tensor()

  # --- results ----------------------------------------------------------
  def export_to_tf_tensor(self, x):
    """The full value of mtf Tensor ``x`` as one TF tensor."""
    if not isinstance(x, Tensor):
      raise MtfError(f"export_to_tf_tensor expects an mtf Tensor, got {x!r}")
    if x not in self.tensors:
      raise MtfError(f"tensor {x.name} was not lowered: it belongs to another "
                     "graph, or was built after this Lowering")
    impl = self.mesh_impl(x)
    return impl.export_to_tf_tensor(self.laid_out(x), x.shape)

  def lowered_operation(self, op):
    """What an op with side effects lowered to (e.g. assign ops).

    A list of TF ops; in a graph it also stands for their ``tf.group``
    where TF wants one op (``tf.control_dependencies([...])``), as Mesh
    TF's single op did.
    """
    if not isinstance(op, Operation):
      op = op.operation
    lowered = self.lowered_operations.get(op)
    if isinstance(lowered, list) and not isinstance(lowered, LoweredOps):
      lowered = LoweredOps(lowered)
    return lowered

  def collective_trace(self, mesh):
    """The trace of ``mesh``'s backend (everything it lowered so far)."""
    return self.mesh_to_impl[mesh].trace

  # Mesh TensorFlow's master variables (see mesh_tf.lowering.masters): made
  # by Lowering in a tf.compat.v1 graph, else on the first call.
  def copy_masters_to_slices(self):
    """A TF op that fills every variable's slices from its master."""
    from mesh_tf.lowering.masters import make_masters  # pylint: disable=g-import-not-at-top
    return make_masters(self).copy_masters_to_slices()

  def copy_slices_to_masters(self):
    """A TF op that writes every variable's slices into its master."""
    from mesh_tf.lowering.masters import make_masters  # pylint: disable=g-import-not-at-top
    return make_masters(self).copy_slices_to_masters()

class LoweredOps(list):
  """The TF ops of one lowered mtf op; TF graph code may also use it as one
  op (their group), through TF's ``_as_graph_element`` protocol."""

  def _as_graph_element(self):
    from mesh_tf.lowering.lazy_tf import tf  # pylint: disable=g-import-not-at-top
    return tf.group(*self)


def lower(graph, mesh_to_impl, feeds=None):
  """Lowers every operation of ``graph``, in graph order.

  Args:
    graph: the mtf Graph.
    mesh_to_impl: dict from each Mesh to its MeshImpl backend.
    feeds: optional dict from mtf Tensors made by ``import_tf_tensor`` to the
      values that replace the imported ones (e.g. ``tf.function`` args).

  Returns:
    The :class:`Lowering`, holding the laid-out value of every tensor.

  Raises:
    MtfError: subclasses, for a layout the graph cannot take.

  Example:
    >>> lowering = lower(graph, {mesh: mesh_impl})      # doctest: +SKIP
    >>> lowering.export_to_tf_tensor(y)                 # doctest: +SKIP
  """
  return Lowering.empty(graph, mesh_to_impl, feeds).lower_operations(
      graph.operations)


class OpLowering(NamedTuple):
  """One operation lowered alone, by :func:`lower_operation`.

  Attributes:
    outputs: the laid-out value of each output of the op, in order: a
      LaidOutTensor, or a :class:`LazyAllreduceSum` whose ``pending`` says
      whether its all-reduce is still to come.
    trace: the records that lowering the op added to its backend's trace.
    lowered: what the op lowered to if it has side effects (e.g. the assign
      ops of an update), else None.
  """
  outputs: Tuple[object, ...]
  trace: CollectiveTrace
  lowered: object = None


def lower_operation(op, mesh_impl, inputs=None, feeds=None, variables=None):
  """Lowers ``op`` alone on ``mesh_impl``, on the given laid-out inputs.

  The op runs the same lowering code as in :func:`lower`, so its trace is
  what it records inside a whole-graph lowering given the same inputs.

  Args:
    op: an mtf Operation.
    mesh_impl: the backend (a MeshImpl); its layout rules apply.
    inputs: one laid-out value per ``op.inputs`` entry: a LaidOutTensor, a
      :class:`LazyAllreduceSum` (an input whose all-reduce is pending), or
      None for a value-less stand-in of the tensor's slice shape (enough
      for :class:`~mesh_tf.ShapeMeshImpl`).  None: stand-ins for all.
    feeds: values for an import op, as in :func:`lower`.
    variables: dict from mtf Variable ops to the LaidOutVariables an
      assign or update writes; missing ones come from
      ``mesh_impl.laid_out_variable``.

  Returns:
    An :class:`OpLowering` (outputs, trace, lowered).

  Raises:
    MtfError: subclasses, for a layout the op cannot take, or inputs that
      do not match ``op.inputs``.

  Example:
    >>> impl = mtf.ShapeMeshImpl("rows:2;cols:4", "d_ff:cols")  # doctest: +SKIP
    >>> r = lower_operation(einsum_op, impl)                      # doctest: +SKIP
    >>> r.outputs[0].pending, r.trace.total_flops_per_device      # doctest: +SKIP
  """
  if inputs is None:
    inputs = [None] * len(op.inputs)
  inputs = list(inputs)
  if len(inputs) != len(op.inputs):
    raise MtfError(f"operation {op.name} has {len(op.inputs)} inputs, but "
                   f"{len(inputs)} laid-out inputs were given; give one per "
                   "op.inputs entry (None for a stand-in)")
  lowering = Lowering.empty(op.graph, {op.mesh: mesh_impl}, feeds)
  lowering.variables = _VariableLookup(mesh_impl, variables or {})
  for t, x in zip(op.inputs, inputs):
    if t in lowering.tensors:  # the same tensor twice, e.g. x * x
      continue
    if x is None:
      lowering.tensors[t] = LaidOutTensor(mesh_impl.slice_shape(t), t.dtype)
    else:
      lowering.set_tensor_lowering(t, x)
  trace = mesh_impl.trace
  n_coll, n_comp, n_vars = (len(trace.collectives), len(trace.compute),
                            len(trace.variables))
  lowering.lower_op(op)
  own = CollectiveTrace()
  own.collectives = trace.collectives[n_coll:]
  own.compute = trace.compute[n_comp:]
  if len(trace.variables) > n_vars:
    for name in list(trace.variables)[n_vars:]:
      own.variables[name] = trace.variables[name]
  tensors = lowering.tensors
  return OpLowering(tuple([tensors[t] for t in op.outputs]), own,
                    lowering.lowered_operations.get(op))


class _VariableLookup(dict):
  """Laid-out variables given by the caller, else found on the backend."""

  def __init__(self, mesh_impl, given):
    super().__init__(given)
    self._impl = mesh_impl

  def __missing__(self, variable):
    v = self._impl.laid_out_variable(variable.name, variable.shape,
                                     variable.dtype)
    self[variable] = v
    return v

