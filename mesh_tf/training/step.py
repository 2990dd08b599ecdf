"""Running a training step lowered on a mesh.

A :class:`TrainStep` holds an mtf graph with its loss, the gradient and
optimizer ops built on it, and a backend (:class:`PlacementMeshImpl`) that
owns the variables.  Calling it runs the whole step -- forward, backward and
update -- as ONE ``tf.function``: the mtf graph is lowered while that
function is traced (once per input signature), so a step costs one TF graph
execution, with no Python in the loop.

Variables are created once, eagerly, before the first trace (or restored from
a checkpoint), and live in the backend across steps and traces.

Example:
  >>> def build(mesh):                                        # doctest: +SKIP
  ...   x = mtf.import_tf_tensor(mesh, None, "batch:8;d:4", dtype="float32")
  ...   w = mtf.get_variable(mesh, "w", "d:4;k:2")
  ...   loss = mtf.reduce_mean(mtf.square(mtf.einsum([x, w], "batch:8;k:2")))
  ...   return loss, [x]
  >>> step = make_train_step(build, "rows:2;cols:4", "batch:rows",
  ...                        mtf.logical_cpu_devices(8), SgdOptimizer(0.1))
  >>> loss = step(x_value)        # a float32 TF scalar; variables updated
"""

from mesh_tf.core.errors import MtfError, ShapeError
from mesh_tf.graph import Graph, Mesh, Tensor
from mesh_tf.lowering.lazy_tf import tf
from mesh_tf.lowering.lowering import Lowering, lower
from mesh_tf.lowering.placement import PlacementMeshImpl
from mesh_tf.lowering.tf_private import CallOptions, flat_caller
from mesh_tf.ops import creation as creation_ops
from mesh_tf.training import padding as padding_lib
from mesh_tf.training.microbatch import accumulate_sums

__all__ = ["TrainStep", "make_train_step", "train_step_for_model"]


def padded_value(value, axis, padding):
  """``value`` (a TF tensor with ``padding.real_size`` rows along
  ``axis``) with the padded rows appended: copies of real rows (see
  :mod:`mesh_tf.training.padding`)."""
  if axis is None or not padding.rows:
    return value
  return tf.gather(value, padding.row_index(), axis=axis)


def padding_mask(padding, dtype):
  """The mask of ``padding`` as a TF tensor of ``dtype``,
  ``[padded_size]`` (the step splits it into its microbatches)."""
  return tf.cast(tf.constant(padding.mask()[0]),
                 dtype)


class LoweredStep:
  """What a lowered step (:class:`TrainStep`, ``DecodeStep``) is made of:
  variables created eagerly once, in ``mesh_impl``; ``_step`` traced once
  as a ``tf.function`` (the mtf lowering runs then); calls of the traced
  step with grappler reduced to a few passes, through call options the step
  owns (built once, not per call).

  Subclasses call :meth:`_init_step` and define ``_step(*args)``.
  """

  def _init_step(self, graph, mesh_impl, signature):
    self.mesh_impl = mesh_impl
    self._variable_graph = graph
    self.lowering = None
    self._initialized = False
    self._concrete = None
    self._call_options = CallOptions()
    self._signature = list(signature)
    self._caller = None  # calls the traced step (tf_private.flat_caller)
    self._function = tf.function(self._step, autograph=False,
                                 input_signature=signature)

  def initialize_variables(self):
    """Creates, eagerly, every variable of the graph not yet in the backend.

    Called by the first step; call it earlier to time it separately.
    Variables restored from a checkpoint beforehand are kept.
    """
    if self._initialized:
      return
    for v in self._variable_graph.all_variables:
      def init(full, begin, slice_shape, dtype, v=v):
        return v.initializer(full, begin, slice_shape, dtype, v.seed)
      self.mesh_impl.make_variable(v.name, v.shape, v.dtype, init,
                                   v.trainable)
    self._initialized = True

  def concrete_function(self):
    """The traced step (lowering happens here the first time)."""
    self.initialize_variables()
    if self._concrete is None:  # get_concrete_function costs ~0.3 ms
      self._concrete = self._function.get_concrete_function()
      self._caller = flat_caller(self._concrete,
                                 private=self._call_options.private)
    return self._concrete

  def _arguments(self, args):
    """``args`` as tensors of the step's signature (NumPy arrays and lists
    converted)."""
    tensors = []
    for name, spec, a in zip(self.input_names, self._signature, args):
      if isinstance(a, tf.Tensor) and a.dtype != spec.dtype:
        raise MtfError(f"input {name} is {a.dtype.name}, the step takes "
                       f"{spec.dtype.name}; cast it")
      t = tf.convert_to_tensor(a, dtype=spec.dtype)
      if not spec.shape.is_compatible_with(t.shape):
        raise ShapeError(f"input {name} has shape {t.shape.as_list()}, the "
                         f"step takes {spec.shape.as_list()}")
      tensors.append(t)
    return tensors

  def _call(self, args):
    # The step graph, with the fused segments' calls inlined (see
    # mesh_tf.lowering.fusion), gets a light grappler (see
    # tf_private.LIGHT_PASSES): full grappler on the expanded graph would
    # make the first step as slow as a Session's.  The traced step is
    # called directly on its tensors and variables: the tf.function would
    # look its trace up again on every call, hashing the captured
    # variables, and bind the arguments to its signature (together 0.6 ms
    # of Python per call on the 2-core benchmark machine, a twentieth of
    # the 1-layer step of benchmarks/mtf_port.py).
    self.concrete_function()
    tensors = self._arguments(args)
    with self._call_options.scope(optimize="light"):
      return self._caller(*tensors)


class TrainStep(LoweredStep):
  """One training step of ``loss`` on a mesh, as a single ``tf.function``.

  Args:
    graph: the mtf Graph holding the model.
    mesh: the Mesh of the model (one mesh).
    loss: the scalar loss Tensor.
    inputs: the Tensors made by ``import_tf_tensor(mesh, None, shape)`` that
      the step's arguments feed, in argument order; or a dict name -> Tensor
      (then the arguments follow the sorted names, or are given by name).
    mesh_impl: the backend, normally a :class:`PlacementMeshImpl`.
    optimizer: an optimizer from :mod:`mesh_tf.training.optimize`, or None for a
      forward-only step (evaluation).
    variables: the variables to train (default: the graph's trainable ones).
    outputs: extra Tensors to return after the loss (e.g. logits).
    microbatches: gradient accumulation (see :mod:`mesh_tf.training.microbatch`):
      the graph is built at the microbatch size, the step takes ``k`` times
      as many rows of each input (split along its first dim), runs ``k``
      forward/backward passes accumulating the gradients, updates once and
      returns the mean of the microbatch losses.  ``plan`` is then the
      :class:`~mesh_tf.training.microbatch.MicrobatchPlan` to price it with.
    padding: a :class:`~mesh_tf.training.padding.Padding`: the graph is
      built with ``padding.dim`` at the padded size (per microbatch: its
      ``1/k``), the step takes inputs at the real size, pads them and
      masks the padded rows out of the loss (the loss and the update are
      the unpadded step's; see :mod:`mesh_tf.training.padding`); extra
      ``outputs`` keep the padded rows.

  Raises:
    MtfError: if the loss is not a scalar or an input is not an import.
    PaddingError: if ``padding`` does not fit the graph, the mesh or the
      loss (naming the dim and the mesh axes).

  Attributes:
    update_ops: the mtf assign ops of the update.
    grads: the mtf gradient Tensors, one per variable.
  """

  def __init__(self, graph, mesh, loss, inputs, mesh_impl, optimizer=None,
               variables=None, outputs=(), microbatches=1, padding=None):
    from mesh_tf.gradients import gradients
    from mesh_tf.training.microbatch import microbatched_update
    if loss.shape.ndims != 0:
      raise MtfError(f"the loss {loss.name} must be a scalar, but has shape "
                     f"{loss.shape!r}; reduce it, e.g. with reduce_mean")
    self.graph, self.mesh, self.loss = graph, mesh, loss
    if isinstance(inputs, dict):
      self.input_names = sorted(inputs)
      inputs = [inputs[k] for k in self.input_names]
    else:
      self.input_names = [t.name for t in inputs]
    self.inputs = list(inputs)
    for t in self.inputs:
      if not isinstance(t.operation, creation_ops.ImportOperation):
        raise MtfError(f"input {t.name} is made by {t.operation.name}, not "
                       "import_tf_tensor; step arguments feed imports only")
    self.outputs = list(outputs)
    self.optimizer = optimizer
    self.padding, self._pad_axes = None, None
    if padding is not None:
      self._pad(padding, mesh_impl, microbatches)
    if variables is None:
      variables = list(graph.trainable_variables)
    self.variables = list(variables)
    self.grads, self.update_ops = [], []
    self.microbatches, self.plan, self._phases = microbatches, None, None
    if microbatches != 1:
      if optimizer is None or self.outputs:
        raise MtfError(f"microbatches={microbatches} needs an optimizer and "
                       "no extra outputs (they would be per microbatch)")
      upd = microbatched_update(graph, loss, self.variables, optimizer,
                                microbatches)
      self.grads, self.update_ops = list(upd.grads), list(upd.update_ops)
      self.plan, self._phases = upd.plan, upd
      self._accumulate_ops = list(upd.accumulate_ops)
    elif optimizer is not None:
      self.grads = gradients([loss], [v.outputs[0] for v in self.variables])
      self.update_ops = optimizer.apply_grads(self.grads, self.variables)
    specs = []
    for i, t in enumerate(self.inputs[:len(self.input_names)]):
      sizes = t.shape.to_integer_list()
      if sizes and microbatches != 1:
        sizes[0] *= microbatches
      if self._pad_axes is not None and self._pad_axes[i] is not None:
        sizes[self._pad_axes[i]] = self.padding.real_size
      specs.append(tf.TensorSpec(sizes, t.dtype))
    self._init_step(graph, mesh_impl, specs)

  def _pad(self, padding, mesh_impl, microbatches):
    """Masks the padded rows out of the loss and notes which axis of each
    input the padding extends."""
    padding = padding_lib.check_padding(padding, mesh_impl.shape,
                                        mesh_impl.layout_rules,
                                        microbatches)
    axes = []
    for name, t in zip(self.input_names, self.inputs):
      names = t.shape.dimension_names
      axis = names.index(padding.dim) if padding.dim in names else None
      if axis is not None:
        size = t.shape.dims[axis].size * (microbatches if axis == 0 else 1)
        if size != padding.padded_size or (microbatches != 1 and axis):
          raise padding_lib.PaddingError(
              f"input {name} has {padding.dim}={size} per step (axis "
              f"{axis}), but the padding runs {padding.dim}="
              f"{padding.padded_size}; build the graph at the padded size"
              + (" with the dim first" if axis else ""))
      axes.append(axis)
    if not any(a is not None for a in axes):
      raise padding_lib.PaddingError(
          f"no input has the padded dim {padding.dim}={padding.real_size};"
          f" pad a dim of the inputs {self.input_names}")
    self.inputs.append(padding_lib.pad_loss(self.loss, padding))
    self.padding, self._pad_axes = padding, axes + [None]

  def _microbatched_step(self, *args):
    """pre once, micro k times (one slice of each input), the gradients
    summed over the microbatches (pending all-reduces as partial sums,
    see :mod:`~mesh_tf.training.microbatch`), accumulated once, post
    once."""
    k, ph = self.microbatches, self._phases
    parts = [tf.split(a, k, axis=0) for a in args]
    lw = Lowering.empty(self.graph, {self.mesh: self.mesh_impl})
    lw.lower_operations(ph.pre)
    losses, deps = [], []
    sums = [None] * len(self._accumulate_ops)
    for i in range(k):
      lw.feeds = {t: p[i] for t, p in zip(self.inputs, parts)}
      with tf.control_dependencies(deps):
        lw.lower_operations(ph.micro)
        losses.append(lw.export_to_tf_tensor(self.loss))
        for j, op in enumerate(self._accumulate_ops):
          sums[j] = accumulate_sums(self.mesh_impl, sums[j],
                                    lw.tensors[op.inputs[0]],
                                    f"{op.name}/partial")
      deps = [losses[-1]]
      for total in sums:
        laid = getattr(total, "laid_out_input", total)
        deps.extend(laid.tensor_list or [])
    for op, total in zip(self._accumulate_ops, sums):
      lw.tensors[op.inputs[0]] = total
    with tf.control_dependencies(deps):
      lw.lower_operations(self._accumulate_ops)
    deps = []
    for op in self._accumulate_ops:
      deps.extend(lw.lowered_operation(op) or [])
    with tf.control_dependencies(deps):
      lw.lower_operations(ph.post)
    self.lowering = lw
    updates = []
    for op in self.update_ops:
      updates.extend(lw.lowered_operation(op) or [])
    with tf.control_dependencies(updates):
      return tf.identity(tf.add_n(losses) / k)

  def _step(self, *args):
    if self.padding is not None:
      args = [padded_value(a, axis, self.padding)
              for a, axis in zip(args, self._pad_axes)]
      args.append(padding_mask(self.padding, self.inputs[-1].dtype))
    if self.microbatches != 1:
      return self._microbatched_step(*args)
    self.lowering = lower(self.graph, {self.mesh: self.mesh_impl},
                          feeds=dict(zip(self.inputs, args)))
    results = [self.lowering.export_to_tf_tensor(t)
               for t in [self.loss] + self.outputs]
    updates = []
    for op in self.update_ops:
      updates.extend(self.lowering.lowered_operation(op) or [])
    with tf.control_dependencies(updates):
      results = [tf.identity(r) for r in results]
    return results if self.outputs else results[0]

  def __call__(self, *args, **named):
    """Runs one step on full input values (positional, or by input name);
    returns the loss (a list ``[loss, *outputs]`` if there are outputs)."""
    if named:
      unknown = set(named) - set(self.input_names)
      if args or unknown or len(named) != len(self.input_names):
        raise MtfError(f"give every input by name, exactly once: "
                       f"{self.input_names} (got {sorted(named)})")
      args = [named[k] for k in self.input_names]
    fed = self.inputs[:len(self.input_names)]
    if len(args) != len(fed):
      raise MtfError(f"the step takes {len(fed)} inputs "
                     f"({[t.name for t in fed]}), got {len(args)}")
    return self._call(args)

  def variable_values(self):
    """The full value of every variable, as NumPy arrays by name."""
    out = {}
    for v in self.graph.all_variables:
      laid = self.mesh_impl.variables[v.name]
      out[v.name] = self.mesh_impl.export_to_tf_tensor(
          laid.value(), v.shape).numpy()
    return out

  def save(self, path):
    """Saves every variable to a TF checkpoint; see :mod:`checkpoint`."""
    from mesh_tf import checkpoint
    self.initialize_variables()
    return checkpoint.save(path, self.mesh_impl, self.graph.all_variables)

  def restore(self, path):
    """Restores every variable from a checkpoint saved under any layout."""
    from mesh_tf import checkpoint
    checkpoint.restore(path, self.mesh_impl, self.graph.all_variables)


def train_step_for_model(model, mesh_shape, layout, devices, optimizer,
                         outputs=(), fuse=True, microbatches=1, padding=None):
  """The :class:`TrainStep` of a zoo model (a ``mesh_tf.models.ModelGraph``).

  The step takes the model's inputs by name, e.g.
  ``step(inputs=ids, targets=ids)``.  ``padding``: see :class:`TrainStep`
  (the model built at the padded size).

  Example:
    >>> model = mesh_tf.models.transformer_lm(layers=2)    # doctest: +SKIP
    >>> step = train_step_for_model(model, "rows:2;cols:4",
    ...     "batch:rows;d_ff:cols;heads:cols;vocab:cols",
    ...     mtf.logical_cpu_devices(8), SgdOptimizer(0.1))
    >>> loss = step(**model.random_values())
  """
  impl = PlacementMeshImpl(mesh_shape, layout, devices, fuse=fuse)
  return TrainStep(model.graph, model.mesh, model.loss, dict(model.inputs),
                   impl, optimizer, outputs=outputs,
                   microbatches=microbatches, padding=padding)


def make_train_step(build_fn, mesh_shape, layout, devices, optimizer,
                    mesh_name="mesh", fuse=True):
  """Builds a model and returns its :class:`TrainStep` on ``devices``.

  Args:
    build_fn: ``build_fn(mesh)`` returns ``(loss, inputs)``: the scalar loss
      and the list of fed inputs (``import_tf_tensor(mesh, None, shape,
      dtype=...)``), or ``(loss, inputs, outputs)``.
    mesh_shape: e.g. ``"rows:2;cols:4"``.
    layout: layout rules, e.g. ``"batch:rows;d_ff:cols"``.
    devices: one TF device name per processor, e.g.
      ``mtf.logical_cpu_devices(8)``.
    optimizer: e.g. ``SgdOptimizer(0.1)``; None for a forward-only step.
    mesh_name: the name of the Mesh passed to ``build_fn``.
    fuse: fuse slicewise kernels into shared per-device TF functions (see
      :class:`PlacementMeshImpl`): about 2x faster to lower and start a deep
      model, 10-20% slower per step on logical CPU devices.

  Returns:
    A :class:`TrainStep`; ``step(*input_values)`` runs one step.
  """
  graph = Graph()
  mesh = Mesh(graph, mesh_name)
  built = build_fn(mesh)
  if isinstance(built, Tensor) or len(built) not in (2, 3):
    raise MtfError("build_fn(mesh) must return (loss, inputs) or "
                   "(loss, inputs, outputs)")
  loss, inputs = built[0], built[1]
  outputs = built[2] if len(built) == 3 else ()
  impl = PlacementMeshImpl(mesh_shape, layout, devices, fuse=fuse)
  return TrainStep(graph, mesh, loss, inputs, impl, optimizer,
                   outputs=outputs)
