"""Fusing runs of slicewise kernels into one TF function per run.

Why: lowering a step for ``n`` processors used to create every slicewise TF
op ``n`` times, once per device.  On the 2-core benchmark machine creating a
TF op costs 0.5-0.8 ms of Python, and TF's first call optimised every one
of them again, so a 32-layer Transformer on 8 devices took 38 s to lower
and run its first step.  Here a run of slicewise kernels between
collectives (a *segment*) is traced ONCE as a ``tf.function`` and called on
each device.  Segments with the same structure -- the same kernels on the
same slice shapes, as in every layer of a deep model -- share one function,
so TF also instantiates and optimises it once per device instead of once per
layer and device: 12 functions serve all 32 layers, and the same step starts
in 17-20 s (``benchmarks/train_step.py``).  TF may inline the calls
(up to ``MAX_INLINED_OPS_PER_GRAPH``), so steps run as unfused while
lowering still builds each segment once: in a plain ``tf.compat.v1`` graph,
which a Session optimises once as a whole anyway, and inside a
``tf.function`` (``TrainStep``), which is called with grappler reduced to
a few passes (``tf_private.LIGHT_PASSES``).  Uninlined (``_noinline``, as before), each
segment cost a call per device every step (0.1 ms each: 1.4x the Session's
steady step at 1 layer) and its function was optimised once per device on
the first step (18 s against 10 s inlined at 8 layers).  There the
functions are defined in the graph's own library (TF's v1 function
machinery, :func:`~mesh_tf.lowering.tf_private.graph_function`), not as
``tf.function``s: tracing those would start TF's eager runtime, and with it
the process-wide intra-op thread pool, before the program's Session could
size it from its ``ConfigProto``.
``PlacementMeshImpl(fuse=False)`` lowers unfused.

How: :meth:`SlicewiseFuser.defer` records a kernel instead of running it;
its output :class:`LaidOutTensor`s are *pending*.  Reading a pending
tensor's ``tensor_list`` (as every collective, export and variable write
does) flushes the kernels pending in that graph: they become one segment,
looked up by :func:`kernel_key` in a per-backend cache, traced if new, and
called once per device.  Kernels still pending when lowering ends were never
read and are never built.

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
import weakref

import numpy as np

from mesh_tf.core import dims, layout
from mesh_tf.lowering import tf_private
from mesh_tf.lowering.laid_out import LaidOutTensor
from mesh_tf.lowering.lazy_tf import tf
from mesh_tf.lowering.mesh_impl import MeshImpl

__all__ = ["SlicewiseFuser", "kernel_key", "step_call_options"]


class Uncacheable(Exception):
  """A kernel's behaviour depends on something :func:`kernel_key` cannot
  name; it runs unfused."""


_SCALARS = (type(None), bool, int, float, complex, str, bytes)
_MAX_DEPTH = 12
_MAX_ARRAY = 4096


# Immutable library types keyed by value (hash/eq).
_VALUE_TYPES = (dims.Dimension, dims.Shape, layout.LayoutRules,
                layout.TensorLayout, np.dtype)


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
  if _is_tf_api(obj):
    return ("id", obj)  # e.g. tf.nn.relu, a module-level function
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
  if isinstance(obj, _VALUE_TYPES):
    return (type(obj), obj)
  if isinstance(obj, MeshImpl):  # shape and layout are fixed for its life
    return ("id", obj)
  raise Uncacheable(f"cannot key a {type(obj).__qualname__}")


def _is_tf_api(obj):
  return callable(obj) and str(getattr(obj, "__module__", None)).startswith(
      "tensorflow")


def _snapshot(obj, _depth=0):
  """``obj`` with function closures copied as they are now (recursively),
  so that running it later gives what running it now would."""
  if _depth > _MAX_DEPTH or _is_tf_api(obj):
    return obj
  if isinstance(obj, types.FunctionType) and obj.__closure__:
    cells = []
    for c in obj.__closure__:
      try:
        cells.append(types.CellType(_snapshot(c.cell_contents, _depth + 1)))
      except ValueError:  # still empty; kernel_key refuses the kernel
        cells.append(types.CellType())
    cells = tuple(cells)
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
  """A deferred slicewise kernel: ``fn(*inputs)`` on every processor."""
  __slots__ = ("fuser", "graph", "fn", "key", "inputs", "outputs")

  def __init__(self, fuser, graph, fn, key, inputs, outputs):
    self.fuser, self.graph, self.fn, self.key = fuser, graph, fn, key
    self.inputs, self.outputs = inputs, outputs

  def materialize(self):
    self.fuser.flush(self.graph)


# Op types TF's single-threaded executor cannot run (control flow, async).
_NEEDS_DEFAULT_EXECUTOR = frozenset([
    "Switch", "Merge", "Enter", "Exit", "NextIteration", "LoopCond", "If",
    "StatelessIf", "While", "StatelessWhile", "_Send", "_Recv", "Send",
    "Recv", "PartitionedCall", "StatefulPartitionedCall"])


class SlicewiseFuser:
  """Defers, groups and runs the slicewise kernels of one backend.

  Args:
    impl: the :class:`PlacementMeshImpl` whose devices run the segments.
    private_tf: use TF's private function and call-option APIs (see
      :mod:`mesh_tf.lowering.tf_private`); False: public APIs only (same
      results; a slower first call and steps).

  Attributes:
    stats: counts of kernels deferred, segments run, distinct functions
      traced, and kernels that ran unfused.
  """

  def __init__(self, impl, private_tf=True):
    self.impl = impl
    self.private_tf = private_tf
    self.call_options = tf_private.CallOptions(private=private_tf)
    self._pending = weakref.WeakKeyDictionary()  # graph -> [PendingKernel]
    self._inlined = weakref.WeakKeyDictionary()  # graph -> ops inlinable
    self._functions = {}  # segment key -> (FusedFunction or None, executor)
    self.stats = {"deferred": 0, "segments": 0, "functions": 0,
                  "unfused": 0}

  def defer(self, fn, inputs, outputs):
    """Records ``fn`` for later; returns False if it must run now."""
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
    graph = tf.compat.v1.get_default_graph()
    node = PendingKernel(self, graph, fn, key, inputs, outputs)
    for o in outputs:
      o._producer = node  # pylint: disable=protected-access
    self._pending.setdefault(graph, []).append(node)
    self.stats["deferred"] += 1
    return True

  def flush(self, graph):
    """Runs every kernel pending in ``graph`` as one segment.

    Taking all of them, not just what the reader needs, makes fewer and
    larger segments (in a Transformer layer, the weight-gradient einsums
    join the activation work instead of each being a segment of its own):
    4 calls per layer and device instead of 13, and a faster step.  Every
    pending kernel would run unfused too, so no extra work is done.
    """
    order = self._pending.pop(graph, [])
    if not order:
      return
    position = {id(n): i for i, n in enumerate(order)}
    externals, ext_index, wiring = [], {}, []
    for n in order:
      wires = []
      for x in n.inputs:
        if not isinstance(x, LaidOutTensor):
          wires.append(("py",))
          continue
        p = x._producer  # pylint: disable=protected-access
        if p is not None and id(p) in position:
          wires.append(("out", position[id(p)], p.outputs.index(x)))
          continue
        if id(x) not in ext_index:
          ext_index[id(x)] = len(externals)
          externals.append(x)
        wires.append(("ext", ext_index[id(x)]))
      wiring.append(tuple(wires))
    ext_lists = [x.tensor_list for x in externals]  # forces other backends
    # Shapes from the layout (a fed tensor's static shape may be unknown).
    specs = tuple((x.slice_shape, ts[0].dtype.name)
                  for x, ts in zip(externals, ext_lists))
    key = (specs, tuple(
        (n.key, w, tuple((o.slice_shape, o.dtype) for o in n.outputs))
        for n, w in zip(order, wiring)))
    # In a plain (Session) graph TF optimises the whole step graph once,
    # before the first run, so calls there may be inlined: the step then
    # runs as unfused (no call per segment and device: 12-16% faster steady
    # steps at 1 and 8 layers in benchmarks/mtf_port.py; at 32 layers
    # 632 against 971 ms, 0.54x against 0.83x the original's, in one
    # interleaved run), while lowering still builds each segment once.
    # Inlined ops cost that first run about 1-2 ms each (32 layers: 185 s
    # against 36 s uninlined and the original's 217 s in that run), as the
    # original's whole graph, which has more nodes, costs it; only past
    # MAX_INLINED_OPS_PER_GRAPH ops of a graph do calls stay uninlined.
    # Inside a tf.function (TrainStep) calls are inlined too: the step is
    # called with grappler reduced to a few passes (see
    # tf_private.LIGHT_PASSES), so the expanded graph costs TF little more
    # to set up than the calls did (each fused function was optimised per
    # device when instantiated), and steady steps save a call per segment
    # and device.
    plain = not graph.building_function
    inline = (self._inlined.get(graph, 0) < self.MAX_INLINED_OPS_PER_GRAPH)
    key = key + (plain, inline)
    with graph.as_default(), graph.device(None), \
        graph.control_dependencies(None):
      if key not in self._functions:
        self._functions[key] = self._trace(order, wiring, specs, inline,
                                           plain)
        self.stats["functions"] += 1
      fn, executor = self._functions[key]
      results = []
      if fn is None:  # too small to be worth a call
        for p in range(self.impl.size):
          with self.impl._on(p):  # pylint: disable=protected-access
            results.append(self._run(order, wiring,
                                     [ts[p] for ts in ext_lists]))
      else:
        # A graph function's calls take no call options (and reading them
        # would start TF's eager runtime).
        with (self.call_options.scope(executor_type=executor)
              if executor is not None else contextlib.nullcontext()):
          for p in range(self.impl.size):
            with self.impl._on(p):  # pylint: disable=protected-access
              results.append(fn.call(*[ts[p] for ts in ext_lists]))
        self.stats["segments"] += 1
        if inline:
          self._inlined[graph] = self._inlined.get(graph, 0) + (
              len(fn.definition.node_def) * self.impl.size)
    k = 0
    for n in order:
      for o in n.outputs:
        o.tensor_list = [r[k] for r in results]
        k += 1

  @staticmethod
  def _run(order, wiring, ext):
    """Runs the segment's kernels on one processor's slices ``ext``; returns
    every output, in order."""
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

  # A segment of at most this many TF ops runs directly on each device: a
  # function call costs as much to build as one op and more to run.
  MAX_DIRECT_OPS = 1
  # Ops of fused calls (over all devices) a Session graph may inline (see
  # flush): the benchmark model has 3,600 at 1 layer, 20,300 at 8 and
  # 77,500 at 32; past this bound a first run would take many minutes.
  MAX_INLINED_OPS_PER_GRAPH = 200_000

  def _trace(self, order, wiring, specs, inline=False, plain=False):
    """Traces the segment once; returns (function, executor type), or
    (None, None) when the segment is small enough to run unfused.

    In a plain graph (``plain``) the function goes into the graph's own
    library, without starting TF's eager runtime, so that the program's
    Session sizes TF's intra-op thread pool as its ``ConfigProto`` says
    (see :func:`~mesh_tf.lowering.tf_private.graph_function`).
    """
    def body(*ext):
      return self._run(order, wiring, ext)
    signature = [tf.TensorSpec(s, d) for s, d in specs]
    if plain:
      fn = tf_private.graph_function(body, signature, "segment",
                                     inline=inline, private=self.private_tf)
      if fn is not None:
        work = [n for n in fn.definition.node_def
                if n.op not in ("Identity", "Const", "NoOp")]
        if len(work) <= self.MAX_DIRECT_OPS:
          return None, None
        return fn, None
    concrete = tf.function(body, autograph=False).get_concrete_function(
        *signature)
    if concrete.captured_inputs:
      raise AssertionError("a fused kernel captured a tensor; kernel_key "
                           "should have refused it")
    # Calls through TF's general executor cost about 0.1 ms each on the
    # benchmark machine; the single-threaded one is about 5% faster per
    # step.  The devices' calls still run in parallel.
    types_ = {op.type for op in concrete.graph.get_operations()}
    work = [op for op in concrete.graph.get_operations()
            if op.type not in ("Placeholder", "Identity", "Const", "NoOp")]
    if len(work) <= self.MAX_DIRECT_OPS:
      return None, None
    executor = ("" if types_ & _NEEDS_DEFAULT_EXECUTOR
                else "SINGLE_THREADED_EXECUTOR")
    return tf_private.uninlined_function(body, signature, concrete,
                                         private=self.private_tf,
                                         inline=inline), executor


def step_call_options():
  """Runs TF function calls made inside with TF's graph optimiser (grappler)
  off for the called function's own graph.

  For a lowered step whose slicewise work is fused, that graph holds only
  variable reads and writes, the collectives' copies and sums, and calls of
  fused functions, which grappler still optimises one by one when TF
  instantiates them.  Optimising the step graph itself took half of the
  first call of a 32-layer Transformer (10 of 20 s on the 2-core benchmark
  machine) and made later steps at most a few percent faster; see
  benchmarks/train_step.py.  A caller that enters it every step should own
  a :class:`~mesh_tf.lowering.tf_private.CallOptions` and enter its
  ``scope(optimize=False)`` instead (this builds TF's options each time).
  """
  return tf_private.CallOptions().scope(optimize=False)
