"""Graph objects: Graph, Mesh, Tensor, Operation.

Building a graph records operations and nothing else: no TensorFlow is
imported and no memory is allocated for tensor values.  There is no global
state; the graph is reached through the mesh each op is built on.
"""

import functools

from mesh_tf.core import dims as dims_lib
from mesh_tf.core import dtypes as dtypes_lib
from mesh_tf.core.errors import MtfError, ShapeError


class Graph:
  """A list of operations in the order they were built (a topological order).

  Names are unique and deterministic: a repeated name gets ``_1``, ``_2``...
  """

  def __init__(self):
    self.operations = []
    self.all_variables = []
    self.trainable_variables = []
    self._names = {}
    self._consumers = {}  # tensor -> ops reading it, kept as ops are built

  def unique_name(self, name):
    """``name``, or ``name_<n>`` with the first ``n`` not in use.  As in
    TensorFlow, names in use are compared ignoring case."""
    name = name or "op"
    key = name.lower()
    n = self._names.get(key)
    if n is None:
      self._names[key] = 1
      return name
    while True:
      candidate = f"{name}_{n}"
      n += 1
      if candidate.lower() not in self._names:
        self._names[key] = n
        self._names[candidate.lower()] = 1
        return candidate

  @property
  def tensors(self):
    return [t for op in self.operations for t in op.outputs]

  def consumers_of(self, tensor):
    """The operations that read ``tensor``, in graph order (a tuple)."""
    return tuple(self._consumers.get(tensor, ()))

  def consumers(self):
    """Maps each tensor to the list of operations that read it."""
    out = {}
    for op in self.operations:
      for t in op.inputs:
        out.setdefault(t, []).append(op)
    return out

  def __repr__(self):
    return f"Graph({len(self.operations)} ops)"


class Mesh:
  """A named mesh of processors in a graph; its shape comes at lowering time.

  Args:
    graph: the mtf Graph.
    name: the mesh's name.
    variable_placer: Mesh TF's optional TF device function for the
      variables' masters (e.g. :class:`mtf.utils.BalancedVariablePlacer`);
      see :mod:`mesh_tf.lowering.masters`.
  """

  def __init__(self, graph, name, variable_placer=None):
    self.graph = graph
    self.name = name
    self.variable_placer = variable_placer

  def __repr__(self):
    return f"Mesh({self.name!r})"


class Tensor:
  """A named-dim tensor: the output of an :class:`Operation`.

  Attributes:
    gradient_of: for a gradient that ``mtf.gradients`` returned for a
      variable's value, that value (a Tensor); None for every other tensor.
      The memory model reports these tensors' bytes as "gradients".
  """

  def __init__(self, operation, shape, dtype, name=None, index=0):
    self.operation = operation
    self.shape = dims_lib.convert_to_shape(shape)
    self.dtype = dtypes_lib.as_dtype(dtype)
    self.index = index
    self.name = name or f"{operation.name}:{index}"
    self.gradient_of = None

  @property
  def mesh(self):
    return self.operation.mesh

  @property
  def graph(self):
    return self.operation.graph

  @property
  def size(self):
    return self.shape.size

  def __repr__(self):
    return f"Tensor[{self.name}, {self.shape}, {self.dtype}]"

  # Arithmetic (+, -, *, /, unary -) broadcasts by dim name; the op library
  # (mesh_tf.ops) binds the operators, so that this module imports no ops.


class Operation:
  """Base class of every op.

  Subclasses set ``self._outputs`` in ``__init__`` and implement
  ``lower(lowering)``.  Next to its lowering, each op family declares:

  * ``gradient(grad_ys)``: one gradient (or None) per input, given one (or
    None) per output, built from mtf ops; or, for ops without one,
    ``no_gradient_reason``, a sentence saying why (integer or random
    outputs, state updates, gradients of gradients);
  * ``unsplittable_dims``: dim names the layout must not split for it (Mesh
    TF's definition), and ``lowering_unsplittable_dims`` (mesh-tf's own);
  * ``cost_params()``: what its lowering cost depends on besides its inputs'
    and outputs' shapes and dtypes (see :attr:`signature`).
  """

  #: Why this op has no gradient; None for ops that declare ``gradient``.
  no_gradient_reason = None

  def __init_subclass__(cls, **kwargs):
    # A subclass validates its arguments after Operation.__init__ has
    # recorded it in the graph.  If its __init__ raises, take the half-built
    # op out again, so that the graph still lowers after a caught error.
    super().__init_subclass__(**kwargs)
    init = cls.__dict__.get("__init__")
    if init is None:
      return

    @functools.wraps(init)
    def checked_init(self, *args, **kwargs):
      try:
        init(self, *args, **kwargs)
      except BaseException:
        self._discard()
        raise
    cls.__init__ = checked_init

  def _discard(self):
    mesh = getattr(self, "_mesh", None)
    if mesh is None:
      return
    graph = mesh.graph
    for lst in (graph.operations, graph.all_variables,
                graph.trainable_variables):
      for i in range(len(lst) - 1, -1, -1):
        if lst[i] is self:
          del lst[i]
    for t in getattr(self, "_inputs", ()):
      readers = graph._consumers.get(t, [])
      if self in readers:
        readers.remove(self)

  def __init__(self, inputs, mesh=None, name=None):
    inputs = list(inputs)
    if mesh is None:
      if not inputs:
        raise MtfError(f"operation {name!r} has no inputs, so it needs a mesh")
      mesh = inputs[0].mesh
    for t in inputs:
      if not isinstance(t, Tensor):
        raise ShapeError(f"operation {name!r} got input {t!r}, which is not "
                         "an mtf Tensor")
      if t.mesh is not mesh:
        raise MtfError(
            f"operation {name!r} mixes tensors of mesh {mesh.name!r} and "
            f"{t.mesh.name!r} ({t.name}); move tensors between meshes "
            "explicitly")
    self._inputs = inputs
    self._mesh = mesh
    self._name = mesh.graph.unique_name(name or type(self).__name__)
    self._outputs = []
    mesh.graph.operations.append(self)
    for t in inputs:
      mesh.graph._consumers.setdefault(t, []).append(self)

  @property
  def name(self):
    return self._name

  @property
  def inputs(self):
    return self._inputs

  @property
  def outputs(self):
    return self._outputs

  @property
  def mesh(self):
    return self._mesh

  @property
  def graph(self):
    return self._mesh.graph

  @property
  def unsplittable_dims(self):
    """Names of dims that this op cannot split, as Mesh TF defines it per op
    (its auto-layout, :mod:`mesh_tf.auto_mtf`, and users read it)."""
    return frozenset()

  @property
  def lowering_unsplittable_dims(self):
    """Names of dims that mesh-tf's lowering of this op cannot split; the
    layout search and ``MeshImpl.check_splittable`` read it.  It is
    ``unsplittable_dims`` except where mesh-tf lowers a split that Mesh TF
    refused (concat, split, stack, slice and pad gather their dim; pooling
    and convolution keep spatial dims split), or the reverse (conv
    backprop, whose spatial dims the original let split)."""
    return self.unsplittable_dims

  @property
  def splittable_dims(self):
    """Names of the dims of this op's inputs and outputs that its lowering
    can split (Mesh TF's attribute): all of them but ``unsplittable_dims``."""
    names = {d.name for t in list(self._inputs) + list(self._outputs)
             for d in t.shape}
    return frozenset(names - self.unsplittable_dims)

  @property
  def has_gradient(self):
    """Whether this op's class declares ``gradient``."""
    return type(self).gradient is not Operation.gradient

  def gradient(self, grad_ys):
    """Gradients of this op's inputs (one Tensor or None each), given the
    gradients of its outputs ``grad_ys`` (one Tensor or None each).

    Each gradient has its input's exact shape.  Subclasses override this;
    the base class has no gradient.
    """
    reason = self.no_gradient_reason or "it declares none"
    raise MtfError(f"operation {self.name} ({type(self).__name__}) has no "
                   f"gradient: {reason}")

  def cost_params(self):
    """A tuple of hashable values that this op's lowering (hence its cost)
    depends on besides the shapes and dtypes of its inputs and outputs:
    e.g. a reduction's type or a shift's offset.  Names of ops and seeds
    are left out, so that identical layers have equal signatures."""
    return ()

  @property
  def signature(self):
    """What this op's lowering cost can depend on, as a hashable value: its
    type, its inputs' and outputs' shapes and dtypes, and
    :meth:`cost_params`.  Ops of identical layers have equal signatures, so
    the layout search prices them once."""
    return (type(self).__name__,
            tuple((t.shape, t.dtype) for t in self._inputs),
            tuple((t.shape, t.dtype) for t in self._outputs),
            tuple(self.cost_params()))

  def lower(self, lowering):
    raise NotImplementedError(type(self).__name__)

  def __repr__(self):
    ins = ", ".join(t.name for t in self._inputs)
    return f"{type(self).__name__}[{self.name}]({ins})"
