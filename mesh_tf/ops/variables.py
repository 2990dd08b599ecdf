"""Variables and assignment (their initializers: mesh_tf.ops.initializers).

A variable's slices are created by the backend (``MeshImpl.make_variable``)
and kept there, so a ``tf.function`` that re-lowers the graph on each trace
reuses the same slices.  Initial values depend only on the variable name (or
seed) and each element's global index, never on the layout.
"""

import zlib

import numpy as np

from mesh_tf.core import dims as dims_lib
from mesh_tf.core import dtypes as dtypes_lib
from mesh_tf.core.errors import MtfError, ShapeError
from mesh_tf.graph import Operation, Tensor
from mesh_tf.lowering.lazy_tf import tf
from mesh_tf.lowering.laid_out import LazyAllreduceSum
from mesh_tf.ops.initializers import (  # noqa: F401  (the public names live here too)
    Initializer,
    constant_initializer,
    zeros_initializer,
    ones_initializer,
    random_normal_initializer,
    random_uniform_initializer,
    truncated_normal_initializer,
    tf_truncated_normal_initializer,
    _ValueInitializer,
    _as_initializer)


def name_seed(name):
  """A stable seed derived from a variable name."""
  return zlib.crc32(name.encode()) & 0x7FFFFFFF


class Variable(Operation):
  """A variable; its output tensor is the variable's current value.

  ``memory_category`` is what the memory model counts it as:
  ``"params"`` (trainable), ``"optimizer"`` (other state) or e.g.
  ``"kv_cache"``.
  """

  def __init__(self, mesh, name, shape, dtype, initializer, trainable=True,
               memory_category=None):
    super().__init__([], mesh=mesh, name=name)
    if isinstance(dtype, dtypes_lib.VariableDType):
      dtype = dtype.master_dtype   # Mesh TF's Variable takes a VariableDType
    self.initializer = _as_initializer(initializer)
    value = getattr(self.initializer, "value", None)
    if isinstance(value, np.ndarray) and value.shape != tuple(
        d.size for d in dims_lib.convert_to_shape(shape).dims):
      raise ShapeError(
          f"variable {self.name}: initial value of shape {value.shape} for "
          f"the shape {dims_lib.convert_to_shape(shape)!r}; give a value of "
          "that shape")
    self.trainable = trainable
    # What the memory model counts it as; see costmodels.memory.
    self.memory_category = memory_category or (
        "params" if trainable else "optimizer")
    self.seed = name_seed(self.name)
    self._outputs = [Tensor(self, shape, dtype, name=self.name)]
    mesh.graph.all_variables.append(self)
    if trainable:
      mesh.graph.trainable_variables.append(self)
    # Mesh TF's Mesh(graph, name, variable_placer): the master is made now,
    # in the current TF graph, on the device the placer picks; Lowering's
    # masters (mesh_tf.lowering.masters) then use it.
    self.master = None
    placer = getattr(mesh, "variable_placer", None)
    if placer is not None:
      self.master = self._placed_master(placer)

  def _placed_master(self, placer):
    full = tuple(self.shape.to_integer_list())

    def initial_value():
      return self.initializer(full, (0,) * len(full), full, self.dtype,
                              self.seed)
    graph = tf.compat.v1.get_default_graph()
    # A device function places graph ops only (TF ignores it eagerly).
    with (graph.device(placer) if not tf.executing_eagerly()
          else tf.device(None)):
      return tf.compat.v1.Variable(initial_value, name=self.name,
                                   trainable=self.trainable, dtype=self.dtype,
                                   use_resource=True)

  no_gradient_reason = ("a variable has no inputs; gradients stop at its "
                        "value")

  def cost_params(self):
    return (type(self.initializer).__name__, self.trainable)

  @property
  def value(self):
    return self.outputs[0]

  @property
  def shape(self):
    return self.outputs[0].shape

  @property
  def dtype(self):
    return self.outputs[0].dtype

  def initial_value_numpy(self):
    """The full initial value as NumPy (layout-independent)."""
    return self.initializer.numpy(tuple(self.shape.to_integer_list()),
                                  self.dtype, self.seed)

  def lower(self, lowering):
    impl = lowering.mesh_impl(self)

    def init(full, begin, slice_shape, dtype):
      return self.initializer(full, begin, slice_shape, dtype, self.seed)
    v = impl.make_variable(self.name, self.shape, self.dtype, init,
                           self.trainable)
    lowering.variables[self] = v
    lowering.set_tensor_lowering(self.outputs[0], v.value())


# One VariableDType for the language: mesh_tf.core.dtypes (the master is
# stored and checkpointed; the slice copy is what the model reads).
VariableDType = dtypes_lib.VariableDType


# --- per-slice assign functions: fn(variable, slice_var, value) -> TF op ---
def assign_slice(variable, slice_var, val):
  """Sets one slice: the default ``assign_fn`` of :func:`mesh_tf.assign`."""
  del variable
  return slice_var.assign(val, read_value=False)


def assign_add_slice(variable, slice_var, val):
  """Adds ``val`` to one slice (``assign_fn`` of :func:`mesh_tf.assign_add`)."""
  del variable
  return slice_var.assign_add(val, read_value=False)


def assign_sub_slice(variable, slice_var, val):
  """Subtracts ``val`` from one slice (``assign_fn`` of ``assign_sub``)."""
  del variable
  return slice_var.assign_sub(val, read_value=False)


MODE_OF_ASSIGN_FN = {assign_slice: "assign", assign_add_slice: "assign_add",
                     assign_sub_slice: "assign_sub"}


def run_assign_fn(impl, assign_fn, variable, laid_variable, laid_value):
  """Calls a custom ``assign_fn(variable, slice_var, value)`` on each
  processor's slice; returns the TF ops (None for the shape-only backend)."""
  if laid_variable.slices is None:
    return None
  ops = []
  for p, (s, t) in enumerate(zip(laid_variable.slices,
                                 laid_value.tensor_list)):
    with tf.device(impl.devices[p]):
      ops.append(assign_fn(variable, s, t))
  return ops



def get_variable(mesh, name, shape, dtype="float32", initializer=None,
                 trainable=True, activation_dtype=None, master_dtype=None,
                 slice_dtype=None, memory_category=None):
  """Creates a variable and returns its value as an mtf Tensor.

  Args:
    mesh: the Mesh.
    name: variable name (made unique in the graph).
    shape: its Shape (or shape string).
    dtype: element dtype, or a :class:`mesh_tf.VariableDType` giving all
      three dtypes at once.
    initializer: an mtf initializer, a scalar, a NumPy array of the full
      shape, or a callable ``(shape, dtype)`` such as a Keras initializer.
    trainable: whether ``graph.trainable_variables`` lists it.
    activation_dtype: if given, the returned value is cast to it (Mesh TF's
      bfloat16-activations pattern).
    master_dtype: the dtype the variable is stored, checkpointed and
      updated in (default ``dtype``).
    slice_dtype: the dtype of the compute copy the model reads (default:
      the master dtype, no copy).  Mixed precision is ``master_dtype=
      "float32", slice_dtype="bfloat16"``: the float32 master is cast to a
      bfloat16 copy, which the memory model counts as parameter memory and
      the roofline prices at the bf16 peak.
    memory_category: what the memory model counts the variable as (default
      ``"params"`` if trainable, else ``"optimizer"``); e.g. ``"kv_cache"``
      for a decoding cache.

  Example:
    >>> import mesh_tf as mtf
    >>> g = mtf.Graph(); mesh = mtf.Mesh(g, "m")
    >>> w = get_variable(mesh, "w", "a:4", master_dtype="float32",
    ...                  slice_dtype="bfloat16")
    >>> w.dtype, w.operation.inputs[0].dtype
    ('bfloat16', 'float32')

  Inside a ``tf.compat.v1.variable_scope`` the name gets the scope's prefix,
  as in Mesh TensorFlow (see :mod:`mesh_tf.compat.tf_scope`).
  """
  from mesh_tf.compat.tf_scope import scoped_name  # pylint: disable=g-import-not-at-top
  name = scoped_name(name)
  shape = dims_lib.convert_to_shape(shape)
  if isinstance(dtype, dtypes_lib.VariableDType):
    master_dtype = master_dtype or dtype.master_dtype
    slice_dtype = slice_dtype or dtype.slice_dtype
    activation_dtype = activation_dtype or dtype.activation_dtype
    dtype = dtype.master_dtype
  var_dtype = dtypes_lib.VariableDType(master_dtype or dtype, slice_dtype,
                                       activation_dtype)
  value = Variable(mesh, name, shape, var_dtype.master_dtype, initializer,
                   trainable, memory_category=memory_category).outputs[0]
  from mesh_tf.ops.elementwise import cast  # pylint: disable=g-import-not-at-top
  # Each cast is a no-op when the dtypes agree.
  value = cast(value, var_dtype.slice_dtype, name=f"{name}/slice_cast")
  return cast(value, var_dtype.activation_dtype)


class AssignOperation(Operation):
  """Writes a new value (or adds/subtracts one) into variables' slices."""

  def __init__(self, variables, new_values, mode="assign", name=None,
               assign_fn=None):
    variables = [_as_variable(v) for v in variables]
    new_values = list(new_values)
    for v, x in zip(variables, new_values):
      if x.shape != v.shape:
        raise ShapeError(f"{mode} to variable {v.name} {v.shape!r} from "
                         f"{x.name} {x.shape!r}: the shapes differ")
    super().__init__(new_values, mesh=variables[0].mesh,
                     name=name or mode)
    self.variables, self.mode = variables, mode
    # A custom per-slice fn(variable, slice_var, value) (Mesh TF's assign_fn).
    self.assign_fn = assign_fn
    # Set on the accumulation of a microbatched step, which runs once per
    # step on the microbatches' summed partial sums: a pending sum it
    # forces is recorded as its own (once per step), not as the op that
    # left it (once per microbatch).
    self.reduces_sums = False

  no_gradient_reason = "a state update has no outputs"

  @property
  def written(self):
    """The tensor written into each of :attr:`variables`."""
    return self.inputs

  def rewritten(self, variables, values):
    """Points this update at ``variables`` and their ``values`` instead
    (the stack rewrite of :mod:`mesh_tf.ops.stacked_variables`)."""
    self.variables = list(variables)
    self._inputs = list(values)  # pylint: disable=protected-access

  def cost_params(self):
    return (self.mode, tuple((v.shape, v.dtype) for v in self.variables),
            self.reduces_sums)

  def lower(self, lowering):
    ops = []
    for v, x in zip(self.variables, self.inputs):
      laid_v = lowering.variables[v]
      value = lowering.tensors.get(x)
      if (self.reduces_sums and isinstance(value, LazyAllreduceSum)
          and value.pending):
        lowering.set_tensor_lowering(x, value.with_partial(
            value.laid_out_input, self.name))
      x_laid = lowering.laid_out(x)
      if x.dtype != v.dtype:
        x_laid = lowering.mesh_impl(self).slicewise(
            lambda t, d=v.dtype: tf.cast(t, d), x_laid, shape=x.shape,
            dtype=v.dtype)
      if self.assign_fn is not None:
        r = run_assign_fn(lowering.mesh_impl(self), self.assign_fn, v, laid_v,
                          x_laid.to_laid_out_tensor())
      else:
        r = laid_v.assign(x_laid, self.mode)
      if r:
        ops.extend(r)
    lowering.lowered_operations[self] = ops


class ApplyGradientDescentOperation(Operation):
  """``var -= lr * grad``, fused into one TF op per slice.

  ``var`` and ``grad`` are one variable and its gradient, or equal-length
  lists of them (one op updating several variables at one rate, as
  :func:`combine_assignments` makes).  ``lr`` is a Python float or a scalar
  mtf Tensor (e.g. a schedule).
  """

  def __init__(self, var, grad, lr, name=None):
    many = isinstance(var, (list, tuple))
    variables = [_as_variable(v) for v in (var if many else [var])]
    grads = list(grad) if many else [grad]
    if len(grads) != len(variables) or not variables:
      raise MtfError(f"apply_gradient_descent got {len(variables)} "
                     f"variables and {len(grads)} gradients; pass one "
                     "gradient per variable")
    for v, g in zip(variables, grads):
      if g.shape != v.shape:
        raise ShapeError(f"gradient {g.name} {g.shape!r} does not match "
                         f"variable {v.name} {v.shape!r}")
    if isinstance(lr, Tensor) and lr.shape.ndims != 0:
      raise ShapeError(f"learning rate {lr.name} must be a scalar, but has "
                       f"shape {lr.shape!r}")
    inputs = grads + ([lr] if isinstance(lr, Tensor) else [])
    super().__init__(inputs, mesh=variables[0].mesh,
                     name=name or "sgd_update")
    self.variables, self.lr = variables, lr
    self.assign_fn = None  # as AssignOperation's: the built-in update

  no_gradient_reason = "a state update has no outputs"

  @property
  def variable(self):
    """The first (for a one-variable update, the) variable updated."""
    return self.variables[0]

  @property
  def grads(self):
    return self.inputs[:len(self.variables)]

  written = grads  # the shared name of what each variable's update reads

  def cost_params(self):
    if len(self.variables) == 1:
      return (self.variable.shape, self.variable.dtype)
    return tuple((v.shape, v.dtype) for v in self.variables)

  def rewritten(self, variables, grads):
    """As :meth:`AssignOperation.rewritten`; the rate stays last."""
    rate = self.inputs[len(self.variables):]
    self.variables = list(variables)
    self._inputs = list(grads) + rate  # pylint: disable=protected-access

  def lower(self, lowering):
    impl = lowering.mesh_impl(self)
    rates = {}  # dtype -> the rate in it: one per dtype, not per variable

    def rate(dtype):
      if dtype not in rates:
        if isinstance(self.lr, Tensor):
          alpha = lowering.laid_out(self.lr)
          if self.lr.dtype != dtype:
            alpha = impl.slicewise(lambda t, d=dtype: tf.cast(t, d), alpha,
                                   slice_shape=(), dtype=dtype)
        else:
          alpha = impl.scalar_constant(float(self.lr), dtype)
        rates[dtype] = alpha
      return rates[dtype]

    ops = []
    for v, grad in zip(self.variables, self.grads):
      laid_v = lowering.variables[v]
      g = lowering.laid_out(grad)
      if grad.dtype != v.dtype:
        g = impl.slicewise(lambda t, d=v.dtype: tf.cast(t, d), g,
                           shape=grad.shape, dtype=v.dtype)
      impl.record_compute(2 * g.slice_size, g.slice_bytes,
                          2 * g.slice_bytes, v.dtype)
      ops.extend(laid_v.apply_gradient_descent(g, rate(v.dtype)) or [])
    lowering.lowered_operations[self] = ops


def apply_gradient_descent(var, grad, lr, name=None):
  """``var -= lr * grad`` as one fused update per slice; returns the op."""
  return ApplyGradientDescentOperation(var, grad, lr, name=name)


def combine_assignments(assignments):
  """Merges state updates into as few ops as do the same thing (Mesh TF's
  ``Graph.combine_assignments``); returns the new list of ops.

  Assigns of one mode and ``assign_fn``, and gradient-descent updates at one
  learning rate, each become one op over all their variables, so that
  ``Lowering(..., autostack=True)`` can stack the variables they write
  (:mod:`mesh_tf.ops.stacked_variables`).  Mesh TF's optimizers called it
  in ``apply_grads``; mesh-tf's do not (each update stays its own op, one
  per variable, as the layout search reads them), so call it on their
  result before an autostacked lowering.  Other ops, and updates that
  write a variable another update of their group writes too, are kept as
  they are.  The merged ops leave the graph.

  Example:
    >>> import mesh_tf as mtf
    >>> g = mtf.Graph(); mesh = mtf.Mesh(g, "m")
    >>> a = mtf.get_variable(mesh, "a", "x:2"); b = mtf.get_variable(mesh, "b", "x:2")
    >>> ops = combine_assignments([mtf.assign_sub(a, a), mtf.assign_sub(b, b)])
    >>> [v.name for v in ops[0].variables]
    ['a', 'b']
  """
  groups, keys = {}, []
  for i, op in enumerate(assignments):
    if isinstance(op, AssignOperation):
      key = ("assign", op.mode, op.assign_fn, op.mesh)
    elif isinstance(op, ApplyGradientDescentOperation):
      lr = op.lr
      key = ("sgd", id(lr) if isinstance(lr, Tensor) else float(lr), op.mesh)
    else:
      key = ("alone", i)
    if key not in groups:
      keys.append(key)
      groups[key] = []
    groups[key].append(op)
  out = []
  for key in keys:
    ops = groups[key]
    variables = [v for op in ops for v in op.variables]
    if len(ops) == 1 or len(set(variables)) != len(variables):
      out.extend(ops)
      continue
    values = [x for op in ops for x in op.written]
    for op in ops:
      op._discard()  # pylint: disable=protected-access
    if key[0] == "assign":
      out.append(AssignOperation(
          variables, values, ops[0].mode, name=f"combined_{ops[0].mode}",
          assign_fn=ops[0].assign_fn))
    else:
      out.append(ApplyGradientDescentOperation(
          variables, values, ops[0].lr, name="combined_sgd_update"))
  return out


def _as_variable(v):
  if isinstance(v, Variable):
    return v
  if isinstance(v, Tensor) and isinstance(v.operation, Variable):
    return v.operation
  raise MtfError(f"{v!r} is not a variable")


def _assign(var, new_val, mode, assign_fn, name):
  if assign_fn is not None and assign_fn in MODE_OF_ASSIGN_FN:
    mode, assign_fn = MODE_OF_ASSIGN_FN[assign_fn], None
  return AssignOperation([var], [new_val], mode, name=name,
                         assign_fn=assign_fn)


def assign(var, new_val, assign_fn=None, name=None):
  """Assigns ``new_val`` to variable ``var``; returns the AssignOperation.

  ``assign_fn(variable, slice_var, value)``, as in Mesh TF, may replace the
  per-slice write (default :func:`assign_slice`).
  """
  return _assign(var, new_val, "assign", assign_fn, name)


def assign_add(var, new_val, assign_fn=None, name=None):
  """Adds ``new_val`` to variable ``var``; returns the AssignOperation."""
  return _assign(var, new_val, "assign_add", assign_fn, name)


def assign_sub(var, new_val, assign_fn=None, name=None):
  """Subtracts ``new_val`` from ``var``; returns the AssignOperation."""
  return _assign(var, new_val, "assign_sub", assign_fn, name)


def read(var):
  """The value of a variable, as a tensor (for API compatibility)."""
  return _as_variable(var).value
