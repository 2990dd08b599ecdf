"""Fusing runs of slicewise kernels into one TF function per run.

Why: lowering a step for ``n`` processors used to create every slicewise TF
op ``n`` times, once per device.  On the 2-core benchmark machine creating a
TF op costs about 0.5 ms of Python, and TF's first call optimises every one
of them again, so a 32-layer Transformer on 8 devices spent about 45 s
before its first step.  Here a run of slicewise kernels between
collectives (a *segment*) is traced ONCE as a ``tf.function`` and called on
each device.  Segments with the same structure -- the same kernels on the
same slice shapes, as in every layer of a deep model -- share one function,
so TF also instantiates and optimises it once per device instead of once per
layer and device.  The functions are marked ``_noinline``: inlined, TF
would optimise the whole expanded graph again.

How: :meth:`SlicewiseFuser.defer` records a kernel instead of running it;
its output :class:`LaidOutTensor`s are *pending*.  Reading a pending
tensor's ``tensor_list`` (as every collective, export and variable write
does) flushes the pending kernels it depends on: they become one segment,
looked up by :func:`kernel_key` in a per-backend cache, traced if new, and
called once per device.  Kernels nobody reads are never built.

A kernel is deferred only when it is a pure function of its slices whose
behaviour :func:`kernel_key` can name: its code plus the values it closes
over (numbers, strings, tuples, shapes, dtypes, other such functions).  A
kernel closing over anything else (a TF tensor, an op object) runs at once
on each device, as without fusion, so fusion never changes results.
Closure cells are copied when a kernel is deferred, so a kernel made in a
loop sees the loop variable's value of its own iteration.
"""

import contextlib
import types

import numpy as np

from mesh_tf.lowering.lazy_tf import tf

__all__ = ["SlicewiseFuser", "kernel_key", "step_call_options"]


class Uncacheable(Exception):
  """A kernel's behaviour depends on something :func:`kernel_key` cannot
  name; it runs unfused."""


_SCALARS = (type(None), bool, int, float, complex, str, bytes)
_MAX_DEPTH = 12
_MAX_ARRAY = 4096


def _value_types():
  """Immutable library types keyed by value (hash/eq)."""
  from mesh_tf.core import dims, layout  # pylint: disable=g-import-not-at-top
  return (dims.Dimension, dims.Shape, layout.LayoutRules, layout.TensorLayout,
          np.dtype)


def kernel_key(obj, _depth=0):
  """A hashable key that is equal for two objects only if a kernel built
  from them behaves the same.

  Functions are keyed by code, defaults and closure values; containers by
  their items; numbers, strings, dims, shapes and dtypes by value;
  modules, classes, builtins and mesh backends by identity.  Objects may
  define ``mtf_kernel_key()`` to name their behaviour.

  Raises:
    Uncacheable: for anything else (e.g. a TF tensor).
  """
  if _depth > _MAX_DEPTH:
    raise Uncacheable("closure nesting too deep")
  d = _depth + 1
  if isinstance(obj, (float, complex)):
    return (type(obj), repr(obj))  # -0.0 == 0.0, but kernels may differ
  if isinstance(obj, _SCALARS):
    return (type(obj), obj)
  if isinstance(obj, (tuple, list)):
    return (type(obj), tuple(kernel_key(x, d) for x in obj))
  if isinstance(obj, dict):
    return (dict, tuple(sorted((kernel_key(k, d), kernel_key(v, d))
                               for k, v in obj.items())))
  if isinstance(obj, (set, frozenset)):
    return (frozenset, frozenset(kernel_key(x, d) for x in obj))
  if isinstance(obj, types.FunctionType):
    cells = obj.__closure__ or ()
    try:
      contents = [c.cell_contents for c in cells]
    except ValueError as e:  # an empty cell: a name bound later
      raise Uncacheable(f"{obj.__qualname__} has an unbound closure") from e
    return ("fn", obj.__code__, kernel_key(obj.__defaults__, d),
            kernel_key(obj.__kwdefaults__, d),
            tuple(kernel_key(c, d) for c in contents))
  if isinstance(obj, types.MethodType):
    return ("method", kernel_key(obj.__func__, d), kernel_key(obj.__self__, d))
  if isinstance(obj, (types.BuiltinFunctionType, types.ModuleType, type,
                      type(tf))):
    return ("id", obj)
  if hasattr(obj, "mtf_kernel_key"):
    return (type(obj), kernel_key(obj.mtf_kernel_key(), d))
  if isinstance(obj, np.ndarray):
    if obj.size > _MAX_ARRAY or obj.dtype == object:
      raise Uncacheable("large or object numpy array")
    return ("ndarray", obj.dtype.str, obj.shape, obj.tobytes())
  if isinstance(obj, np.generic):
    return ("np", obj.dtype.str, obj.item())
  if isinstance(obj, tf.DType):
    return ("dtype", obj.name)
  if isinstance(obj, _value_types()):
    return (type(obj), obj)
  from mesh_tf.lowering.mesh_impl import MeshImpl  # pylint: disable=g-import-not-at-top
  if isinstance(obj, MeshImpl):  # shape and layout are fixed for its life
    return ("id", obj)
  if callable(obj) and getattr(obj, "__module__", "").startswith(
      ("tensorflow", "mesh_tf.lowering.lazy_tf")):
    return ("id", obj)  # a TF API function (e.g. a dispatch wrapper)
  raise Uncacheable(f"cannot key a {type(obj).__qualname__}")


def _snapshot(obj, _depth=0):
  """``obj`` with function closures copied as they are now (recursively),
  so that running it later gives what running it now would."""
  if _depth > _MAX_DEPTH:
    return obj
  if isinstance(obj, types.FunctionType) and obj.__closure__:
    cells = tuple(types.CellType(_snapshot(c.cell_contents, _depth + 1))
                  for c in obj.__closure__)
    fn = types.FunctionType(obj.__code__, obj.__globals__, obj.__name__,
                            obj.__defaults__, cells)
    fn.__kwdefaults__ = obj.__kwdefaults__
    fn.__qualname__ = obj.__qualname__
    return fn
  if isinstance(obj, list):
    return [_snapshot(x, _depth + 1) for x in obj]
  if isinstance(obj, dict):
    return {k: _snapshot(v, _depth + 1) for k, v in obj.items()}
  return obj


class PendingKernel:
  """A deferred slicewise kernel: ``fn(*inputs)`` per processor."""
  __slots__ = ("fuser", "seq", "fn", "key", "inputs", "outputs")

  def __init__(self, fuser, seq, fn, key, inputs, outputs):
    self.fuser, self.seq, self.fn, self.key = fuser, seq, fn, key
    self.inputs, self.outputs = inputs, outputs

  def materialize(self):
    self.fuser.flush(self)


class SlicewiseFuser:
  """Defers, groups and runs the slicewise kernels of one backend.

  Args:
    impl: the :class:`PlacementMeshImpl` whose devices run the segments.

  Attributes:
    stats: counts of deferred kernels, segments, distinct functions traced
      and kernels that ran unfused.
  """

  def __init__(self, impl):
    self.impl = impl
    self._seq = 0
    self._functions = {}
    self.stats = {"deferred": 0, "segments": 0, "functions": 0,
                  "unfused": 0}

  def defer(self, fn, inputs, outputs):
    """Records ``fn`` for later; returns False if it must run now."""
    from mesh_tf.lowering.mesh_impl import LaidOutTensor  # pylint: disable=g-import-not-at-top
    if tf.executing_eagerly():
      return False
    try:
      fn = _snapshot(fn)
      inputs = [x if isinstance(x, LaidOutTensor) else _snapshot(x)
                for x in inputs]
      key = (kernel_key(fn),) + tuple(
          kernel_key(x) for x in inputs if not isinstance(x, LaidOutTensor))
    except Uncacheable:
      self.stats["unfused"] += 1
      return False
    self._seq += 1
    node = PendingKernel(self, self._seq, fn, key, inputs, outputs)
    for o in outputs:
      o._producer = node  # pylint: disable=protected-access
    self.stats["deferred"] += 1
    return True

  def flush(self, node):
    """Runs ``node`` and every pending kernel it depends on as one segment."""
    from mesh_tf.lowering.mesh_impl import LaidOutTensor  # pylint: disable=g-import-not-at-top
    found, stack = {}, [node]
    while stack:
      n = stack.pop()
      if n.seq in found:
        continue
      found[n.seq] = n
      for x in n.inputs:
        if isinstance(x, LaidOutTensor):
          p = x._producer  # pylint: disable=protected-access
          if p is not None and p.fuser is self:
            stack.append(p)
    order = [found[s] for s in sorted(found)]
    position = {n.seq: i for i, n in enumerate(order)}
    externals, ext_index, wiring = [], {}, []
    for n in order:
      wires = []
      for x in n.inputs:
        if not isinstance(x, LaidOutTensor):
          wires.append(("py",))
          continue
        p = x._producer  # pylint: disable=protected-access
        if p is not None and p.fuser is self:
          wires.append(("out", position[p.seq], p.outputs.index(x)))
          continue
        if id(x) not in ext_index:
          ext_index[id(x)] = len(externals)
          externals.append(x)
        wires.append(("ext", ext_index[id(x)]))
      wiring.append(tuple(wires))
    ext_lists = [x.tensor_list for x in externals]  # forces other backends
    specs = tuple((tuple(ts[0].shape.as_list()), ts[0].dtype.name)
                  for ts in ext_lists)
    key = (specs, tuple(
        (n.key, w, tuple((o.slice_shape, o.dtype) for o in n.outputs))
        for n, w in zip(order, wiring)))
    fn = self._functions.get(key)
    graph = tf.compat.v1.get_default_graph()
    with graph.device(None), graph.control_dependencies(None):
      if fn is None:
        fn = self._trace(order, wiring, specs)
        self._functions[key] = fn
        self.stats["functions"] += 1
      results = []
      for p in range(self.impl.size):
        with self.impl._on(p):  # pylint: disable=protected-access
          results.append(fn.call_flat(*[ts[p] for ts in ext_lists]))
    self.stats["segments"] += 1
    k = 0
    for n in order:
      for o in n.outputs:
        o.tensor_list = [r[k] for r in results]
        k += 1

  def _trace(self, order, wiring, specs):
    """Traces the segment once as a ``_noinline`` TF function."""
    def body(*ext):
      values, flat = {}, []
      for i, (n, wires) in enumerate(zip(order, wiring)):
        args = []
        for x, w in zip(n.inputs, wires):
          if w[0] == "py":
            args.append(x)
          elif w[0] == "ext":
            args.append(ext[w[1]])
          else:
            args.append(values[(w[1], w[2])])
        r = n.fn(*args)
        if len(n.outputs) == 1:
          r = [r]
        for j, (o, t) in enumerate(zip(n.outputs, r)):
          if tuple(t.shape) != o.slice_shape:
            raise AssertionError(f"slicewise kernel gave shape {t.shape}, "
                                 f"expected {o.slice_shape}")
          values[(i, j)] = t
          flat.append(t)
      return flat
    signature = [tf.TensorSpec(s, d) for s, d in specs]
    concrete = tf.function(body, autograph=False).get_concrete_function(
        *signature)
    if concrete.captured_inputs:
      raise AssertionError("a fused kernel captured a tensor; kernel_key "
                           "should have refused it")
    return _uninlined_copy(concrete._inference_function)  # pylint: disable=protected-access


def _uninlined_copy(atomic):
  """``atomic`` re-registered so that TF neither inlines nor specialises it.

  Inlined, TF's first call would optimise every copy of the body again.
  Grappler also *specialises* a function for each call site whose outputs
  are not all used -- most segments have such outputs -- which copies the
  body per call site just the same; ``_nospecialize`` (read by grappler's
  function optimizer, not settable through ``tf.function``) stops that.
  """
  from tensorflow.python.eager.polymorphic_function import atomic_function  # pylint: disable=g-import-not-at-top
  fdef = type(atomic.definition)()
  fdef.CopyFrom(atomic.definition)
  fdef.signature.name = fdef.signature.name + "_fused"
  fdef.attr["_noinline"].b = True
  fdef.attr["_nospecialize"].b = True
  return atomic_function.from_function_def(fdef, atomic.function_type)


_STEP_CALL_OPTIONS = {}


@contextlib.contextmanager
def step_call_options():
  """Runs TF function calls made inside with TF's graph optimiser (grappler)
  off for the called function's own graph.

  For a lowered step whose slicewise work is fused, that graph holds only
  variable reads and writes, the collectives' copies and sums, and calls of
  fused functions, which grappler still optimises one by one when TF
  instantiates them.  Optimising the step graph itself took half of the
  first call of a 32-layer Transformer (10 of 20 s on the 2-core benchmark
  machine) and did not make later steps faster (0.83 s without it, 0.94 s
  with it); see benchmarks/train_step.py.
  """
  try:
    from tensorflow.core.protobuf import config_pb2  # pylint: disable=g-import-not-at-top
    from tensorflow.python.eager import context  # pylint: disable=g-import-not-at-top
    ctx = context.context()
    old = ctx.function_call_options
  except (ImportError, AttributeError):  # private API moved: only slower
    yield
    return
  key = (old.config_proto_serialized, old.executor_type)
  new = _STEP_CALL_OPTIONS.get(key)
  if new is None:
    config = config_pb2.ConfigProto()
    config.ParseFromString(old.config_proto_serialized)
    config.graph_options.rewrite_options.disable_meta_optimizer = True
    new = context.FunctionCallOptions(executor_type=old.executor_type,
                                      config_proto=config)
    _STEP_CALL_OPTIONS[key] = new
  ctx.function_call_options = new
  try:
    yield
  finally:
    ctx.function_call_options = old
