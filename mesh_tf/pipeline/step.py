"""A pipelined training step on devices, as one ``tf.function``.

Example (on 8 devices)::

  parts = models.transformer_parts(models.TransformerConfig(layers=4))
  pipe = Pipeline("stage", stages=2, microbatches=4, layers=4)
  step = PipelineTrainStep(parts, pipe, "stage:2;data:2;model:2",
      "batch:data;d_ff:model;heads:model", mtf.logical_cpu_devices(8),
      optimize.SgdOptimizer(0.1))
  loss = step(inputs=ids, targets=ids)  # the mean of the microbatches'
"""

from mesh_tf.core.errors import MtfError
from mesh_tf.lowering.lazy_tf import tf
from mesh_tf.lowering.placement import PlacementMeshImpl
from mesh_tf.lowering.shape_impl import ShapeMeshImpl
from mesh_tf.lowering.tf_private import CallOptions
from mesh_tf.pipeline.lowering import (last_stage_losses, lower_pipeline,
                                       stage_impls)
from mesh_tf.pipeline.program import build_program
from mesh_tf.pipeline.spec import PipelineBatchError
from mesh_tf.training import padding as padding_lib
from mesh_tf.training.step import padded_value, padding_mask

__all__ = ["PipelineTrainStep", "trace_pipeline"]


class PipelineTrainStep:
  """One pipelined training step of a model given as
  :class:`~mesh_tf.models.repeated.RepeatedLayers`.

  The step takes each input whole (``parts.batch`` rows), splits it into
  the pipeline's microbatches along its first dim, runs the schedule,
  updates every stage once and returns the mean of the microbatch losses
  (the whole batch's mean loss).  Variables live in the stage backends
  (``impls``), created eagerly before the first trace.

  Args:
    parts: the model's repeated layers.
    pipeline: a :class:`~mesh_tf.pipeline.spec.Pipeline`.
    mesh_shape: the whole mesh, the stage axis included, e.g.
      ``"stage:2;data:2;model:2"``.
    layout: layout rules for the other axes.
    devices: one device per processor of the whole mesh.
    optimizer: an optimizer of :mod:`mesh_tf.training.optimize`.
    storage: a ZeRO stage or StoragePlan for every stage (None: none).
    fuse: fuse slicewise kernels as :class:`PlacementMeshImpl` does
      (each step's kernels among themselves).
    eager: run the lowering op by op instead of as one traced function
      (the same TF ops and results; a tiny model's step runs in about a
      fifth of the time it takes to trace and start the function).
    padding: a :class:`~mesh_tf.training.padding.Padding` of the batch:
      the step takes ``padding.real_size`` rows, runs
      ``padding.padded_size`` (the microbatches times a size the mesh
      splits) and masks the padded rows out of the loss; the result is
      the unpadded step's (see :mod:`mesh_tf.training.padding`).

  Attributes:
    program: the :class:`~mesh_tf.pipeline.program.PipelineProgram`.
    impls: one PlacementMeshImpl per stage.
    trace: the :class:`~mesh_tf.pipeline.lowering.PipelineTrace` of the
      (first) trace of the step.
  """

  def __init__(self, parts, pipeline, mesh_shape, layout, devices,
               optimizer, storage=None, fuse=True, eager=False,
               padding=None):
    whole = PlacementMeshImpl(mesh_shape, layout, devices, fuse=fuse)
    if padding is not None:
      padding = _check_padding(padding, whole, pipeline)
    self.program = build_program(parts, pipeline, optimizer, storage,
                                 padding=padding)
    self.padding = padding
    self.impls = stage_impls(whole, pipeline)
    self.pipeline, self.trace, self.eager = pipeline, None, eager
    first = self.program.chunks[0].inputs
    self.input_names = sorted(first)
    specs, self._pad_axes = [], []
    for name in self.input_names:
      t = first[name]
      sizes = t.shape.to_integer_list()
      sizes[0] *= pipeline.microbatches
      axis = None
      if padding is not None and t.shape.dims[0].name == padding.dim:
        axis, sizes[0] = 0, padding.real_size
      self._pad_axes.append(axis)
      specs.append(tf.TensorSpec(sizes, t.dtype))
    self._specs = specs
    self._initialized = False
    self._call_options = CallOptions()
    self._function = tf.function(self._step, autograph=False,
                                 input_signature=specs)

  def _graphs(self):
    for c in self.program.chunks:
      yield c.stage, c.graph
    for u in self.program.updates:
      yield u.stage, u.graph

  def initialize_variables(self):
    """Creates every stage's variables, eagerly (once)."""
    if self._initialized:
      return
    for stage, graph in self._graphs():
      for v in graph.all_variables:
        def init(full, begin, slice_shape, dtype, v=v):
          return v.initializer(full, begin, slice_shape, dtype, v.seed)
        self.impls[stage].make_variable(v.name, v.shape, v.dtype, init,
                                        v.trainable)
    self._initialized = True

  def _step(self, *args):
    m = self.pipeline.microbatches
    if self.padding is not None:
      args = [padded_value(a, axis, self.padding)
              for a, axis in zip(args, self._pad_axes)]
    feeds = {n: tf.split(a, m, axis=0) for n, a in zip(self.input_names,
                                                         args)}
    if self.padding is not None:
      mask = self.program.chunks[-1].inputs[padding_lib.MASK_INPUT]
      feeds[padding_lib.MASK_INPUT] = tf.split(
          padding_mask(self.padding, mask.dtype), m, axis=0)
    for impl in self.impls:
      impl.trace.collectives.clear()
      impl.trace.compute.clear()
    lowered = lower_pipeline(self.program, self.impls, feeds)
    self.trace = lowered.trace
    losses = last_stage_losses(lowered, self.impls, self.program)
    with tf.control_dependencies(list(lowered.update_ops)):
      return tf.identity(tf.add_n(losses) / m)

  def __call__(self, **inputs):
    """Runs one step on whole input values given by name; returns the
    mean loss (a TF scalar)."""
    if sorted(inputs) != self.input_names:
      raise MtfError(f"give every input by name, exactly once: "
                     f"{self.input_names} (got {sorted(inputs)})")
    args = [inputs[n] for n in self.input_names]
    for name, a, spec in zip(self.input_names, args, self._specs):
      got = tuple(int(d) for d in getattr(a, "shape", ()))
      if got != tuple(spec.shape):
        raise PipelineBatchError(
            f"input {name} has shape {got}, but the step takes "
            f"{tuple(spec.shape)}: the whole batch of "
            f"{spec.shape[0]} rows, split into microbatches="
            f"{self.pipeline.microbatches} on pipeline axis "
            f"{self.pipeline.axis}={self.pipeline.stages}")
    self.initialize_variables()
    if self.eager:
      return self._step(*[tf.convert_to_tensor(a) for a in args])
    self._function.get_concrete_function()  # traced with TF's defaults
    # Grappler on the step's many small per-device ops cost more than the
    # step (about 5 s against 0.03 s for a 4-layer Transformer), as for
    # TrainStep.
    with self._call_options.scope(optimize=False):
      return self._function(*args)

  def variable_values(self):
    """The full value of every variable, as NumPy arrays by name (a tied
    variable's from the first stage that holds it)."""
    out = {}
    for stage, graph in self._graphs():
      impl = self.impls[stage]
      for v in graph.all_variables:
        if v.name not in out:
          laid = impl.variables[v.name]
          out[v.name] = impl.export_to_tf_tensor(laid.value(),
                                                 v.shape).numpy()
    return out


def _check_padding(padding, impl, pipeline):
  """``padding`` checked against the stage mesh and the microbatches."""
  sub = [d for d in impl.shape.dims if d.name != pipeline.axis]
  return padding_lib.check_padding(padding, sub, impl.layout_rules,
                                   pipeline.microbatches)


def trace_pipeline(parts, pipeline, mesh_shape, layout, optimizer,
                   storage=None, microbatches=None, padding=None):
  """The :class:`~mesh_tf.pipeline.lowering.PipelineTrace` of the step on
  :class:`~mesh_tf.lowering.ShapeMeshImpl`: the same lowering, shapes only,
  without TensorFlow.  ``microbatches``: lower only that many of the
  step's microbatches (see :func:`~mesh_tf.pipeline.lowering.
  lower_pipeline`; enough for :func:`~mesh_tf.pipeline.costs.stage_costs`).
  ``padding``: the batch's :class:`~mesh_tf.training.padding.Padding`,
  as :class:`PipelineTrainStep` takes it.

  Example:
    >>> from mesh_tf import models, optimize
    >>> from mesh_tf.pipeline.spec import Pipeline
    >>> parts = models.transformer_parts(models.TransformerConfig(layers=2))
    >>> t = trace_pipeline(parts, Pipeline("stage", 2, 2, 2),
    ...     "stage:2;data:2", "batch:data", optimize.SgdOptimizer(0.1))
    >>> sorted({c.kind for c in t.stages[0].collectives})
    ['allreduce', 'recv', 'send']
  """
  whole = ShapeMeshImpl(mesh_shape, layout)
  if padding is not None:
    padding = _check_padding(padding, whole, pipeline)
  program = build_program(parts, pipeline, optimizer, storage,
                          padding=padding)
  impls = stage_impls(whole, pipeline)
  return lower_pipeline(program, impls, microbatches=microbatches).trace
