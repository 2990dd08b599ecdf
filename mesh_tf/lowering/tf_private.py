"""Every private TensorFlow API mesh-tf uses, each with a public fallback.

Private APIs (``tensorflow.python.*``, ``_``-prefixed attributes, the eager
context's internals) may move in any TensorFlow release.  Each use lives
here, behind a function that takes ``private=True``: on ``private=False``, or
when the private route fails, the function takes a route through public
APIs only, which gives the same results and is slower or does nothing
(each function says which).  ``tests/mesh_tf/test_tf_private.py`` runs both
routes and compares them.

The uses:

* :func:`skip_autograph` -- AutoGraph's conversion rules, so that lowering
  code called inside a user's ``tf.function`` is not converted (tracing is
  faster).  Public route: none; AutoGraph converts mesh-tf's code.
* :func:`uninlined_function` -- a traced segment registered so that TF
  neither inlines nor specialises it per call site (see
  :mod:`mesh_tf.lowering.fusion`).  Public route: the ``_noinline``
  attribute through ``tf.function(experimental_attributes=...)``, which
  cannot stop grappler specialising call sites (a slower first call).
* :func:`graph_function` -- a segment defined in a plain ``tf.compat.v1``
  graph's own function library through TF's v1 function machinery, so that
  building a Session graph never starts TF's eager runtime (which would
  make the process-wide intra-op thread pool before the program's Session,
  ignoring its ``ConfigProto``).  Public route: None (the caller traces a
  ``tf.function`` instead: same results, eager runtime started).
* :class:`CallOptions` -- the per-thread options TF function calls are made
  with (executor type, grappler on or off).  Public route: TF's defaults
  (slower steps).
* :func:`flat_caller` -- calls a traced step on its flat tensors and
  captured variables, without binding the arguments to its signature again.
  Public route: the ConcreteFunction's own call (0.1-0.2 ms more per call).
"""

import contextlib
import weakref

from mesh_tf.startup.import_order import import_tensorflow

__all__ = ["CallOptions", "FusedFunction", "flat_caller", "graph_function",
           "skip_autograph", "uninlined_function"]

# What a moved private API raises when we reach for it.
_MOVED = (ImportError, AttributeError, TypeError)


def skip_autograph(package, private=True):
  """Tells AutoGraph not to convert the code of ``package`` (a module name).

  Lowering is plain Python that builds TF ops; converting it inside a
  user's ``tf.function`` only costs tracing time (seconds for a deep model).

  Returns:
    True if the rule is in place; False on the public route (there is no
    public API for it: AutoGraph then converts the package, same results).
  """
  if not private:
    return False
  try:
    from tensorflow.python.autograph.core import config  # pylint: disable=g-import-not-at-top,g-direct-tensorflow-import
    rules = tuple(config.CONVERSION_RULES)
    # Once per process, also when mesh_tf is imported again (rules compare
    # by identity).
    if not any(isinstance(r, config.DoNotConvert) and r.matches(package)
               for r in rules):
      config.CONVERSION_RULES = (config.DoNotConvert(package),) + rules
    return True
  except _MOVED:
    return False


class FusedFunction:
  """A traced TF function called on flat tensors, not inlined by TF.

  Attributes:
    definition: its ``FunctionDef`` (the name call ops refer to, the body).
    private: whether it was made through TF's private function API.
  """
  __slots__ = ("definition", "private", "_call")

  def __init__(self, definition, call, private):
    self.definition = definition
    self.private = private
    self._call = call

  def call(self, *tensors):
    """Calls the function (creates a call op in a graph); returns the list
    of its output tensors."""
    return list(self._call(*tensors))


class GraphFunction(FusedFunction):
  """A function in plain TF graphs' own libraries (see
  :func:`graph_function`): each graph it is called in gets its definition
  once, and calls are ops of the function's own type.

  Attributes:
    output_shapes: the static shapes of its outputs (TF does not infer
      shapes through these call ops), set on every call's outputs.
  """
  __slots__ = ("output_shapes", "_defined", "_children", "_graphs")

  def __init__(self, defined, children, output_shapes):
    super().__init__(defined.definition, None, private=True)
    self.output_shapes = output_shapes
    self._defined = defined
    self._children = children
    self._graphs = weakref.WeakSet()  # graphs holding the definition

  def call(self, *tensors):
    from tensorflow.python.framework import function as v1_function  # pylint: disable=g-import-not-at-top,g-direct-tensorflow-import
    tf = import_tensorflow()
    graph = tf.compat.v1.get_default_graph()
    if graph not in self._graphs:
      graph._add_function_recursive(self._defined)  # pylint: disable=protected-access
      for child in self._children:
        graph._add_function_recursive(child)  # pylint: disable=protected-access
      self._graphs.add(graph)
    out, op = v1_function._call(  # pylint: disable=protected-access
        self.definition.signature, *tensors)
    del out
    for t, shape in zip(op.outputs, self.output_shapes):
      t.set_shape(shape)
    return list(op.outputs)


def graph_function(body, signature, name, inline=True, private=True):
  """``body`` as a function of the current plain (non-function) TF graph,
  made without TF's eager runtime; None on the public route.

  ``tf.function`` binds every traced function to the eager context and so
  starts it, and with it TF's process-wide intra-op thread pool, sized for
  every core, before a Session program's ``ConfigProto`` can size it.  The
  v1 function machinery defines the function in the graph's own library
  instead, as Mesh TensorFlow's programs' graphs were built.

  Args:
    body: the Python function (flat tensors in, list of tensors out).
    signature: its ``tf.TensorSpec`` list (static shapes are set on the
      arguments before ``body`` runs).
    name: a prefix of the function's name; a hash of the body and
      ``_fused_inline`` (or ``_fused``) follow it.
    inline: leave TF free to inline the calls (else ``_noinline``).
    private: False: return None (there is no public route).

  Returns:
    A :class:`GraphFunction`, or None (public route, or the private API
    moved).  Raises whatever ``body`` raises.
  """
  if not private:
    return None
  try:
    from tensorflow.python.framework import function as v1_function  # pylint: disable=g-import-not-at-top,g-direct-tensorflow-import
    defined_cls = v1_function._DefinedFunction  # pylint: disable=protected-access
    from_definition = v1_function._from_definition  # pylint: disable=protected-access
  except _MOVED:
    return None
  shapes = []

  def traced(*args):
    for t, spec in zip(args, signature):
      t.set_shape(spec.shape)
    outputs = list(body(*args))
    shapes.extend(t.shape for t in outputs)
    return outputs
  traced.__name__ = name
  try:
    defined = defined_cls(traced, [], [s.dtype for s in signature])
    fdef = defined.definition  # traces body (in graph mode)
  except _MOVED:
    return None
  if defined.captured_inputs:
    raise AssertionError("a fused kernel captured a tensor; kernel_key "
                         "should have refused it")
  fdef.signature.name += "_fused_inline" if inline else "_fused"
  if not inline:
    fdef.attr["_noinline"].b = True
  fdef.attr["_nospecialize"].b = True
  try:
    renamed = from_definition(fdef)
    children = list(defined._sub_functions.values())  # pylint: disable=protected-access
  except _MOVED:
    return None
  return GraphFunction(renamed, children, tuple(shapes))


def uninlined_function(body, signature, concrete, private=True,
                       inline=False):
  """``body`` as a function TF does not specialise, nor (by default) inline.

  Inlined, TF's first call would optimise every copy of the body again.
  Grappler also *specialises* a function for each call site whose outputs
  are not all used, which copies the body per call site just the same;
  ``_nospecialize`` (read by grappler's function optimizer, not settable
  through ``tf.function``) stops that.

  Args:
    body: the Python function (flat tensors in, list of tensors out).
    signature: its ``tf.TensorSpec`` list.
    concrete: ``tf.function(body, autograph=False)`` traced on
      ``signature`` (the private route copies it instead of tracing again).
    private: try the private route first.
    inline: leave TF free to inline the calls (no ``_noinline``), for a
      graph that TF optimises once as a whole anyway (a ``tf.compat.v1``
      Session graph).

  Returns:
    A :class:`FusedFunction`.  Public route: ``body`` traced again with
    the ``_noinline`` attribute, called as a ConcreteFunction.
  """
  if private:
    try:
      return _private_uninlined_copy(concrete, inline)
    except _MOVED:
      pass
  public = import_tensorflow().function(
      body, autograph=False,
      experimental_attributes={"_noinline": not inline}
  ).get_concrete_function(*signature)
  return FusedFunction(public.function_def, public, private=False)


def _private_uninlined_copy(concrete, inline=False):
  from tensorflow.python.eager.polymorphic_function import atomic_function  # pylint: disable=g-import-not-at-top,g-direct-tensorflow-import
  atomic = concrete._inference_function  # pylint: disable=protected-access
  fdef = type(atomic.definition)()
  fdef.CopyFrom(atomic.definition)
  fdef.signature.name = fdef.signature.name + (
      "_fused_inline" if inline else "_fused")
  if not inline:
    fdef.attr["_noinline"].b = True
  fdef.attr["_nospecialize"].b = True
  ctx = atomic._bound_context  # pylint: disable=protected-access
  ctx.add_function_def(fdef)
  # Children: functions the body calls (e.g. tf.cond branches).
  copy = atomic_function.AtomicFunction(
      fdef.signature.name, ctx, atomic.function_type,
      children=list(atomic.children), call_options=atomic.call_options)
  return FusedFunction(copy.definition, copy.call_flat, private=True)


def flat_caller(concrete, private=True):
  """A function calling the ConcreteFunction ``concrete`` on its positional
  arguments, as tensors of its signature's dtypes and shapes.

  The private route passes them, with the function's captured inputs (a
  step's variables), straight to the traced function; a ConcreteFunction's
  own call binds them to its signature and converts them again first.  The
  caller checks their dtypes and shapes (as ``LoweredStep`` does).

  Returns:
    ``fn(*tensors)`` -> the function's (structured) outputs; on the public
    route (or when the private API moved, or captures are deferred)
    ``concrete`` itself.
  """
  if private:
    try:
      atomic = concrete._inference_function  # pylint: disable=protected-access
      deferred = any(callable(c) for c in concrete._captured_inputs)  # pylint: disable=protected-access
      captures = list(concrete.captured_inputs)
      call, pack = atomic.call_flat, atomic.function_type.pack_output
    except _MOVED:
      deferred = True
    if not deferred:
      return lambda *tensors: pack(call(*tensors, *captures))
  return concrete


class CallOptions:
  """Sets the options of TF function calls made inside a ``with`` block.

  It owns the option objects it builds (one per base options and
  override), so that entering a block costs a lookup, not a parse of TF's
  ``ConfigProto``.

  Args:
    private: use TF's private per-thread ``function_call_options`` (the
      only way to set them); False: blocks change nothing, and calls keep
      TF's defaults (slower, same results).

  Example:
    >>> options = CallOptions()                            # doctest: +SKIP
    >>> with options.scope(optimize=False):                # doctest: +SKIP
    ...   step_function(x)
  """

  def __init__(self, private=True):
    self.private = private
    self._made = {}

  @contextlib.contextmanager
  def scope(self, executor_type=None, optimize=True):
    """Calls made inside use ``executor_type`` (None: unchanged) and, if
    not ``optimize``, no grappler for the called function's own graph;
    ``optimize="light"``: one run of a few of grappler's optimizers (see
    :data:`LIGHT_PASSES`)."""
    if not self.private:
      yield
      return
    try:
      from tensorflow.python.eager import context  # pylint: disable=g-import-not-at-top,g-direct-tensorflow-import
      ctx = context.context()
      old = ctx.function_call_options
      key = (old.config_proto_serialized, old.executor_type, executor_type,
             optimize)
      new = self._made.get(key)
      if new is None:
        config = import_tensorflow().compat.v1.ConfigProto()
        config.ParseFromString(old.config_proto_serialized)
        if not optimize:
          config.graph_options.rewrite_options.disable_meta_optimizer = True
        elif optimize == "light":
          _light_rewrites(config.graph_options.rewrite_options)
        new = context.FunctionCallOptions(
            executor_type=old.executor_type if executor_type is None
            else executor_type, config_proto=config)
        self._made[key] = new
    except _MOVED:
      yield
      return
    ctx.function_call_options = new
    try:
      yield
    finally:
      ctx.function_call_options = old


# Grappler's passes that a "light" scope runs, once each, in this order (a
# list of passes replaces grappler's own choice and order).  Pruning drops
# the Identity nodes of the calls' inputs and outputs, so that common
# subgraph elimination then sees through them; the function optimizer
# inlines the fused segments' calls; common subgraph elimination merges
# what two segments compute twice (a norm's backward segment recomputes
# its forward segment's statistics) and the duplicate constants of every
# inlined call; constant folding folds the matmul kernels' shapes and
# reshapes; the dependency optimizer drops the NoOp nodes and the control
# edges that lowering and inlining leave.  On the 1-layer Transformer of
# benchmarks/mtf_port.py the step graph then has 2,829 nodes where the
# dependency optimizer alone left 4,621 (the Session graph has 2,798).
# Grappler's arithmetic optimizer, which a Session also runs, is left out:
# it reorders floating-point sums and products, so a ZeRO step would no
# longer match the unsharded one within 1e-6 (tests/mesh_tf/models/
# test_storage.py), and with it the 8-layer step was no faster.
LIGHT_PASSES = ("pruning", "function", "common_subgraph_elimination",
                "constfold", "dependency")


def _light_rewrites(rewrite_options):
  """Grappler with one run of each of :data:`LIGHT_PASSES`."""
  del rewrite_options.optimizers[:]
  rewrite_options.optimizers.extend(LIGHT_PASSES)
  rewrite_options.meta_optimizer_iterations = type(rewrite_options).ONE
