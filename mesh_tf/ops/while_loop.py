"""``while_loop``: Mesh TensorFlow's loop over mtf Tensors.

A :class:`WhileLoopOperation` holds two small sub-graphs, the condition and
the body, built once by calling ``cond_fn`` and ``body_fn`` on stand-in
tensors.  Their ops are kept inside the loop op, not in
``graph.operations``: the graph sees one op whose inputs are the loop's
initial values plus every outer tensor the sub-graphs read.

Lowering builds ONE ``tf.while_loop`` whose loop variables are the slices
of every processor; each iteration runs the body ops' ordinary lowering
(slicewise kernels and collectives) on those slices.  The condition, an mtf
scalar, is read from processor 0 (every processor holds the same value).

Accumulators (``has_accumulators=True``): outputs of ``body_fn`` beyond the
loop variables are summed over the iterations and returned after the loop
variables.  A body output that is a partial sum (a pending SUM all-reduce)
is summed locally in the loop and all-reduced once, lazily, afterwards, so
gradient accumulation over microbatches costs one all-reduce per step.

What the trace records (both backends alike, so prediction equals
lowering): the condition's records ``n + 1`` times and the body's ``n``
times, attributed to the loop op, where ``n`` is the trip count.  The trip
count is known when the loop counter is static: the loop variables that the
condition reads start from scalar constants and the body updates them by
scalar arithmetic (``i = 0; while i < 10: i += 1``); the loop op evaluates
that on the host, capped by ``maximum_iterations``.  Otherwise the trip
count is unknown and the loop is priced as ``maximum_iterations`` trips when
that is given (an upper bound), else as ONE trip (a lower bound);
:attr:`WhileLoopOperation.trip_count` is then None and
:attr:`WhileLoopOperation.priced_iterations` says what was priced.

Memory (``costmodels.memory``): the loop's outputs are its carried values,
live through the loop; the condition's and the body's tensors peak on top
of them once per iteration, not once per trip.  :attr:`inner_tensors`,
:attr:`body_outputs` and :attr:`accumulator_sums` are what it reads.

Gradients do not flow through the loop, as in Mesh TensorFlow: call
``mtf.gradients`` inside ``body_fn`` and sum the gradients with
accumulators instead.
"""

import contextlib

import numpy as np

from mesh_tf.core import dtypes as dtypes_lib
from mesh_tf.core.errors import MtfError, ShapeError
from mesh_tf.graph import Operation, Tensor
from mesh_tf.lowering.laid_out import LaidOutTensor, LazyAllreduceSum
from mesh_tf.lowering.lazy_tf import tf
from mesh_tf.lowering.trace import CollectiveTrace
from mesh_tf.ops import creation as creation_ops
from mesh_tf.ops import elementwise as ew
from mesh_tf.ops.variables import Variable

__all__ = ["WhileLoopOperation", "while_loop"]

#: A static loop counter is followed on the host at most this many trips;
#: past it the trip count counts as unknown.
MAX_STATIC_TRIPS = 100_000


class WhileLoopOperation(Operation):
  """``while cond_fn(*vars): vars = body_fn(*vars)`` over mtf Tensors.

  Args:
    cond_fn: a function of n mtf Tensors returning a scalar bool Tensor.
    body_fn: a function of n mtf Tensors returning n Tensors of the same
      shapes and dtypes (then, with ``has_accumulators``, any number of
      accumulator Tensors).
    inputs: the n initial values (mtf Tensors).
    tf_kwargs: keyword arguments for ``tf.while_loop`` (e.g.
      ``maximum_iterations``, ``parallel_iterations``).
    has_accumulators: whether ``body_fn`` returns accumulators.
    name: the op name.

  Attributes:
    trip_count: the number of body runs when it is known statically, else
      None (see the module docstring).
    priced_iterations: the number of body runs the trace records.

  Raises:
    ShapeError: if ``cond_fn`` does not return a scalar bool Tensor, or
      ``body_fn`` returns the wrong number, shapes or dtypes of Tensors.
    MtfError: for an empty ``inputs`` or ``back_prop=True``.
  """

  no_gradient_reason = (
      "gradients do not flow through a while loop (as in Mesh TensorFlow); "
      "call mtf.gradients inside body_fn and sum the gradients with "
      "has_accumulators=True")

  def __init__(self, cond_fn, body_fn, inputs, tf_kwargs=None,
               has_accumulators=False, name=None):
    inputs = list(inputs)
    if not inputs:
      raise MtfError("while_loop needs at least one loop variable in inputs")
    self._tf_kwargs = dict(tf_kwargs or {})
    if self._tf_kwargs.pop("back_prop", False):
      raise MtfError("while_loop: back_prop=True is not supported; "
                     "gradients do not flow through the loop")
    super().__init__(inputs, name=name or "while_loop")
    self._n = len(inputs)
    self._has_accumulators = bool(has_accumulators)
    graph = self.graph
    ops = graph.operations
    ops.remove(self)
    start = len(ops)
    made = []
    try:
      self._cond_inputs = self._stand_ins("cond_input")
      cond_out = cond_fn(*self._cond_inputs)
      self._cond_ops = ops[start:]
      made += ops[start:]
      del ops[start:]
      self._body_inputs = self._stand_ins("body_input")
      body_out = body_fn(*self._body_inputs)
      body_ops = ops[start:]
      made += ops[start:]
      del ops[start:]
      self._check(cond_out, body_out)
    except BaseException:
      for op in reversed(made + ops[start:]):
        op._discard()  # pylint: disable=protected-access
      del ops[start:]
      raise
    self._cond_output = cond_out
    self._body_outputs = list(body_out)
    # Each iteration adds the body's accumulator outputs to the sums into
    # new tensors; these stand for them in the memory model.
    self._new_sums = [Tensor(self, t.shape, t.dtype,
                             name=f"{self.name}/new_sum:{i}")
                      for i, t in enumerate(self._body_outputs[self._n:])]
    # New variables belong to the graph, before the loop (as in Mesh TF).
    variables = [op for op in body_ops + self._cond_ops
                 if isinstance(op, Variable)]
    self._cond_ops = [op for op in self._cond_ops if op not in variables]
    self._body_ops = [op for op in body_ops if op not in variables]
    ops.extend(variables)
    ops.append(self)
    self._capture_outer_tensors()
    self._outputs = [Tensor(self, t.shape, t.dtype, name=f"{self.name}:{i}")
                     for i, t in enumerate(self._body_outputs)]
    self.trip_count = _static_trip_count(self)
    limit = self._tf_kwargs.get("maximum_iterations")
    if self.trip_count is not None:
      self.priced_iterations = self.trip_count
    elif isinstance(limit, int):
      self.priced_iterations = limit
    else:
      self.priced_iterations = 1

  def _stand_ins(self, what):
    return [Tensor(self, t.shape, t.dtype, name=f"{self.name}/{what}:{i}")
            for i, t in enumerate(self._inputs)]

  def _check(self, cond_out, body_out):
    if not isinstance(cond_out, Tensor) or cond_out.shape.ndims or (
        cond_out.dtype != "bool"):
      raise ShapeError(
          f"{self.name}: cond_fn must return a scalar bool mtf Tensor, got "
          f"{cond_out!r}; reduce it (e.g. mtf.reduce_all) or compare a "
          "scalar counter")
    if isinstance(body_out, Tensor) or not isinstance(body_out,
                                                      (list, tuple)):
      raise ShapeError(f"{self.name}: body_fn must return a list of mtf "
                       f"Tensors, got {body_out!r}")
    n, m = self._n, len(body_out)
    if m < n or (m > n and not self._has_accumulators):
      raise ShapeError(
          f"{self.name}: body_fn returned {m} Tensors for {n} loop "
          "variables" + ("; pass has_accumulators=True to return "
                         "accumulators after them" if m > n else ""))
    for i, t in enumerate(body_out):
      if not isinstance(t, Tensor):
        raise ShapeError(f"{self.name}: body_fn output {i} is {t!r}, not an "
                         "mtf Tensor")
      if i < n and (t.shape != self._inputs[i].shape
                    or t.dtype != self._inputs[i].dtype):
        raise ShapeError(
            f"{self.name}: body_fn output {i} {t.shape!r} {t.dtype} differs "
            f"from loop variable {i} {self._inputs[i].shape!r} "
            f"{self._inputs[i].dtype}; a loop variable keeps its shape and "
            "dtype")

  def _capture_outer_tensors(self):
    """Adds the outer tensors the sub-graphs read to this op's inputs, so
    that the graph orders, prices and keeps them alive as its inputs."""
    graph = self.graph
    inner_ops = set(self._cond_ops) | set(self._body_ops)
    own = set(self._cond_inputs) | set(self._body_inputs)
    captured = []
    reads = [t for op in self._cond_ops + self._body_ops for t in op.inputs]
    for t in reads + [self._cond_output] + self._body_outputs:
      if t in own or t.operation in inner_ops or t in captured:
        continue
      captured.append(t)
    for t in captured:
      readers = graph._consumers.setdefault(t, [])  # pylint: disable=protected-access
      readers[:] = [r for r in readers if r not in inner_ops]
      readers.append(self)
    for t in self._inputs:
      readers = graph._consumers.get(t, [])  # pylint: disable=protected-access
      readers[:] = [r for r in readers if r not in inner_ops]
      if self not in readers:
        readers.append(self)
    self._inputs = self._inputs + [t for t in captured
                                   if t not in self._inputs]

  # --- declarations ------------------------------------------------------
  @property
  def cond_operations(self):
    """The ops of the condition sub-graph, in build order."""
    return list(self._cond_ops)

  @property
  def body_operations(self):
    """The ops of the body sub-graph, in build order."""
    return list(self._body_ops)

  @property
  def num_loop_vars(self):
    return self._n

  @property
  def cond_output(self):
    """The condition's scalar bool Tensor."""
    return self._cond_output

  @property
  def body_outputs(self):
    """What ``body_fn`` returned: the next loop values, then the
    accumulators' per-iteration terms."""
    return list(self._body_outputs)

  @property
  def inner_tensors(self):
    """Every tensor the condition's and the body's ops read or make (those
    of nested loops too), in build order, each once.  The layout search
    reads their dims: the loop's cost and memory depend on them."""
    out = {}
    for op in self._cond_ops + self._body_ops:
      for t in list(op.inputs) + list(op.outputs) + list(
          getattr(op, "inner_tensors", ())):
        out.setdefault(t, None)
    return list(out)

  @property
  def accumulator_sums(self):
    """Stand-ins (not graph tensors) for the new sums each iteration
    computes (old sum + term), one per accumulator; the memory model counts
    them at the end of every iteration."""
    return list(self._new_sums)

  @property
  def unsplittable_dims(self):
    out = set()
    for op in self._cond_ops + self._body_ops:
      out |= op.unsplittable_dims
    return frozenset(out)

  @property
  def lowering_unsplittable_dims(self):
    out = set()
    for op in self._cond_ops + self._body_ops:
      out |= op.lowering_unsplittable_dims
    return frozenset(out)

  @property
  def splittable_dims(self):
    names = set(super().splittable_dims)
    for op in self._cond_ops + self._body_ops:
      names |= op.splittable_dims
    return frozenset(names - self.unsplittable_dims)

  def cost_params(self):
    return (self._n, self.priced_iterations,
            tuple(op.signature for op in self._cond_ops),
            tuple(op.signature for op in self._body_ops),
            tuple(sorted((k, repr(v)) for k, v in self._tf_kwargs.items())))

  # --- lowering -----------------------------------------------------------
  def lower(self, lowering):
    impl = lowering.mesh_impl(self)
    n = self._n
    laid_in = [lowering.laid_out(t) for t in self._inputs]
    for x in laid_in:
      x.tensor_list  # pylint: disable=pointless-statement  (runs fused work)
    acc = self._body_outputs[n:]
    zeros = [impl.slicewise(_zeros_kernel(impl.slice_shape(t), t.dtype),
                            shape=t.shape, dtype=t.dtype, flops=0)
             for t in acc]
    pending = self._record_iterations(lowering, impl)
    if laid_in[0].tensor_list is None:  # the shape-only backend
      results = [LaidOutTensor(impl.slice_shape(t), t.dtype)
                 for t in self._body_outputs]
    else:
      # The sub-graphs read the outer tensors' reduced values, as the dry
      # run in _record_iterations does.
      outer = {t: lowering.tensors[t] for t in self._inputs}
      lowering.tensors.update(zip(self._inputs, laid_in))
      try:
        results = self._run_tf_loop(lowering, impl, laid_in[:n] + zeros)
      finally:
        lowering.tensors.update(outer)
    for i, (out, laid) in enumerate(zip(self._outputs, results)):
      if pending[i] is not None:
        laid = LazyAllreduceSum(impl, laid, pending[i], source_op=self.name)
      lowering.set_tensor_lowering(out, laid)

  def _bind(self, lowering, stand_ins, laid):
    for t, x in zip(stand_ins, laid):
      lowering.tensors[t] = x

  def _lower_body(self, lowering, impl, laid_vars):
    """Lowers the body ops on ``laid_vars``; returns the new loop values,
    then each accumulator's new sum (partial sums stay partial)."""
    n = self._n
    self._bind(lowering, self._body_inputs, laid_vars[:n])
    for op in self._body_ops:
      lowering.lower_op(op)
    out = []
    for i, t in enumerate(self._body_outputs):
      x = lowering.tensors[t]
      if i < n:
        out.append(x.to_laid_out_tensor())
        continue
      if isinstance(x, LazyAllreduceSum) and x.pending and x.then is None:
        x = x.laid_out_input
      out.append(impl.slicewise(_add, laid_vars[i], x.to_laid_out_tensor(),
                                shape=t.shape, dtype=t.dtype))
    return out

  def _pending_axes(self, lowering):
    out = [None] * len(self._body_outputs)
    for i, t in enumerate(self._body_outputs):
      x = lowering.tensors.get(t)
      if i >= self._n and isinstance(x, LazyAllreduceSum) and x.pending:
        out[i] = x.mesh_axes
    return out

  def _record_iterations(self, lowering, impl):
    """Records the condition's and the body's trace records, one copy per
    run, into ``impl``'s trace; returns the mesh axes still to sum over of
    each output (None for a plain value).

    The records come from lowering the sub-graphs once on a shape-only twin
    of ``impl``, so both backends record the same whatever TF does (an
    eager loop runs the body many times, a traced one once)."""
    from mesh_tf.lowering.lowering import Lowering  # pylint: disable=g-import-not-at-top
    from mesh_tf.lowering.shape_impl import ShapeMeshImpl  # pylint: disable=g-import-not-at-top
    twin = ShapeMeshImpl(impl.shape, impl.layout_rules)
    dry = Lowering.empty(self.graph, {self.mesh: twin})
    dry.variables = _StandInVariables(twin)
    for t in self._inputs:
      dry.tensors[t] = LaidOutTensor(twin.slice_shape(t), t.dtype)
    stand = [LaidOutTensor(twin.slice_shape(t), t.dtype)
             for t in self._body_outputs]
    with twin.recording(self.name):
      self._bind(dry, self._cond_inputs, stand[:self._n])
      for op in self._cond_ops:
        dry.lower_op(op)
      dry.laid_out(self._cond_output)
    cond_trace, twin.trace = twin.trace, CollectiveTrace()
    with twin.recording(self.name):
      self._lower_body(dry, twin, stand)
    body_trace = twin.trace
    pending = self._pending_axes(dry)
    k = self.priced_iterations
    for trace, times in ((cond_trace, k + 1), (body_trace, k)):
      coll = [r._replace(op_name=self.name, source_op=self.name)
              for r in trace.collectives]
      comp = [r._replace(op_name=self.name) for r in trace.compute]
      for _ in range(times):
        impl.trace.collectives.extend(coll)
        impl.trace.compute.extend(comp)
    return pending

  def _run_tf_loop(self, lowering, impl, laid_init):
    """The real ``tf.while_loop`` over every processor's slices."""
    n = self._n
    specs = [(x.slice_shape, x.dtype) for x in laid_init]

    def wrap(lists):
      return [LaidOutTensor(s, d, list(ts)) for (s, d), ts in zip(specs,
                                                                  lists)]

    def cond(*lists):
      self._bind(lowering, self._cond_inputs, wrap(lists[:n]))
      for op in self._cond_ops:
        lowering.lower_op(op)
      return tf.reshape(lowering.laid_out(self._cond_output).tensor_list[0],
                        [])

    def body(*lists):
      new = self._lower_body(lowering, impl, wrap(lists))
      return [list(x.tensor_list) for x in new]

    # The records were made by _record_iterations; what TF runs here (once
    # when traced, once per trip when eager) is not recorded again.
    saved = impl.trace
    impl.trace = CollectiveTrace()
    context = getattr(impl, "in_control_flow", None)
    if context is None or tf.compat.v1.control_flow_v2_enabled():
      context = contextlib.nullcontext
    try:
      with context():
        lists = tf.while_loop(cond, body,
                              [list(x.tensor_list) for x in laid_init],
                              **self._tf_kwargs)
    finally:
      impl.trace = saved
    return wrap(lists)


class _StandInVariables(dict):
  """Value-less laid-out variables for the shape-only dry run."""

  def __init__(self, impl):
    super().__init__()
    self._impl = impl

  def __missing__(self, variable):
    v = self._impl.laid_out_variable(variable.name, variable.shape,
                                     variable.dtype)
    self[variable] = v
    return v


def _zeros_kernel(slice_shape, dtype):
  shape, name = tuple(slice_shape), dtypes_lib.as_dtype(dtype)

  def kernel():
    return tf.zeros(shape, name)
  return kernel


def _add(a, b):
  return tf.add(a, b)


# --- the static trip count -----------------------------------------------------
class _NotStatic(Exception):
  """A value the host cannot compute from constants alone."""


_BINARY = {
    "add": np.add, "subtract": np.subtract, "multiply": np.multiply,
    "floordiv": np.floor_divide, "mod": np.mod, "minimum": np.minimum,
    "maximum": np.maximum, "less": np.less, "less_equal": np.less_equal,
    "greater": np.greater, "greater_equal": np.greater_equal,
    "equal": np.equal, "not_equal": np.not_equal,
    "logical_and": np.logical_and, "logical_or": np.logical_or}
_UNARY = {"identity": lambda x: x, "negative": np.negative,
          "logical_not": np.logical_not, "abs": np.abs}


def _value(t, env):
  """The host value of scalar ``t``, given values ``env`` of stand-ins."""
  if t in env:
    v = env[t]
    if v is None:
      raise _NotStatic(t.name)
    return v
  op = t.operation
  if t.shape.ndims:
    raise _NotStatic(t.name)
  if isinstance(op, creation_ops.ConstantOperation) and np.ndim(
      op.value) == 0:
    return np.asarray(op.value, dtype=dtypes_lib.as_dtype(t.dtype))
  kind = getattr(op, "kind", None)
  if type(op) is ew.BinaryOperation and kind in _BINARY:  # pylint: disable=unidiomatic-typecheck
    args = [_value(x, env) for x in op.inputs]
    if op.scalar is not None:
      s = np.asarray(op.scalar)
      args = [s, args[0]] if getattr(op, "scalar_first", False) else (
          [args[0], s])
    return np.asarray(_BINARY[kind](*args)).astype(
        dtypes_lib.as_dtype(t.dtype))
  if isinstance(op, ew.UnaryOperation) and (kind in _UNARY or
                                            kind == "cast"):
    v = _value(op.inputs[0], env)
    v = v if kind == "cast" else _UNARY[kind](v)
    return np.asarray(v).astype(dtypes_lib.as_dtype(t.dtype))
  raise _NotStatic(t.name)


def _try_value(t, env):
  try:
    return _value(t, env)
  except (_NotStatic, TypeError, ValueError, ArithmeticError):
    return None


def _static_trip_count(op):
  """How many times ``op``'s body runs, if constants alone decide it."""
  n = op._n  # pylint: disable=protected-access
  vals = [_try_value(t, {}) for t in op.inputs[:n]]
  limit = op._tf_kwargs.get("maximum_iterations")  # pylint: disable=protected-access
  cap = limit if isinstance(limit, int) else MAX_STATIC_TRIPS
  cond_in, body_in = op._cond_inputs, op._body_inputs  # pylint: disable=protected-access
  body_out = op._body_outputs[:n]  # pylint: disable=protected-access
  trips = 0
  while True:
    go = _try_value(op._cond_output, dict(zip(cond_in, vals)))  # pylint: disable=protected-access
    if go is None:
      return None
    if not go:
      return trips
    if trips == cap:
      return trips if isinstance(limit, int) else None
    env = dict(zip(body_in, vals))
    vals = [_try_value(t, env) for t in body_out]
    trips += 1


def while_loop(cond_fn, body_fn, inputs, num_loop_vars=None,
               has_accumulators=False, **kwargs):
  """Mesh TensorFlow's ``while_loop``: repeats ``body_fn`` while ``cond_fn``.

  Args:
    cond_fn: a function of n mtf Tensors returning a scalar bool Tensor.
    body_fn: a function of n mtf Tensors returning n Tensors of the same
      shapes and dtypes, then (with ``has_accumulators``) accumulators,
      which are summed over the iterations.
    inputs: the n initial values.
    num_loop_vars: Mesh TF's option to keep the variables after the first
      ``num_loop_vars`` outside the loop state (a multi-GPU speed-up there);
      here every variable is loop state, and only the first
      ``num_loop_vars`` outputs (then the accumulators) are returned, as in
      Mesh TF.  The results are the same.
    has_accumulators: whether ``body_fn`` returns accumulators.
    **kwargs: passed to ``tf.while_loop`` (e.g. ``maximum_iterations``).

  Returns:
    The list of final loop values, then the accumulators' sums.

  Raises:
    ShapeError, MtfError: see :class:`WhileLoopOperation`.

  Example:
    >>> import mesh_tf as mtf
    >>> g = mtf.Graph(); mesh = mtf.Mesh(g, "m")
    >>> i0 = mtf.constant(mesh, 0, dtype="int32")
    >>> x0 = mtf.ones(mesh, "d:4")
    >>> i, x = while_loop(lambda i, x: mtf.less(i, 3),
    ...                   lambda i, x: [i + 1, x * 2.0], [i0, x0])
    >>> i.operation.trip_count
    3
  """
  inputs = list(inputs)
  if num_loop_vars is not None and not 0 < num_loop_vars <= len(inputs):
    raise MtfError(f"while_loop: num_loop_vars={num_loop_vars} must be in "
                   f"[1, {len(inputs)}] (the number of inputs)")
  outs = WhileLoopOperation(cond_fn, body_fn, inputs, tf_kwargs=kwargs,
                            has_accumulators=has_accumulators).outputs
  if num_loop_vars is None:
    return outs
  return outs[:num_loop_vars] + outs[len(inputs):]
