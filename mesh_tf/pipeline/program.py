"""The stage programs of a pipelined training step: mtf graphs, no devices.

:func:`build_program` builds, from a model's
:class:`~mesh_tf.models.repeated.RepeatedLayers` and a
:class:`~mesh_tf.pipeline.spec.Pipeline`:

* one graph per virtual stage (a :class:`ChunkProgram`), at the microbatch
  size: its layers' forward, from the boundary activation it receives (an
  import; the first runs the embedding on the fed inputs instead) to the
  activation it sends on (the last: the loss), and their backward, from the
  gradient it receives back (an import) to the gradient it sends back and
  its variables' gradients (:func:`mesh_tf.gradients`, ``grad_ys``);
* one graph per stage (an :class:`UpdateProgram`): the optimizer update of
  every variable the stage holds, from its gradient accumulated over the
  microbatches (an import), scaled by ``1 / m``.

Each chunk graph's operations are split into the phases the lowering runs:
``pre`` (once per step: variables, their compute copies, constants),
``forward`` and ``backward`` (once per microbatch each, as the schedule
orders them).  A variable two stages hold under one name (a tied
embedding) is listed in ``tied``: the lowering sums its gradients between
its holders before the update, as Megatron-LM does.
"""

import dataclasses
from typing import Dict, NamedTuple, Optional, Tuple

from mesh_tf.core.errors import MtfError
from mesh_tf.gradients import gradients
from mesh_tf.graph import Graph, Mesh, Tensor
from mesh_tf.models.repeated import as_parts
from mesh_tf.ops import creation as creation_ops
from mesh_tf.ops import variables as variable_ops
from mesh_tf.pipeline.spec import PipelineSplitError
from mesh_tf.training import padding as padding_lib
from mesh_tf.training.microbatch import defer_sums
from mesh_tf.training.storage import shard_storage

__all__ = ["ChunkProgram", "PipelineProgram", "UpdateProgram",
           "build_program"]


class ChunkProgram(NamedTuple):
  """The graph of one virtual stage (chunk ``chunk`` of ``stage``).

  ``x_in`` (None on the first) imports the received activation, ``dy``
  (None on the last) the received gradient of ``output``; ``dx`` is the
  gradient to send back (None on the first).  ``grads[i]`` is the gradient
  of ``variables[i]`` (None if it gets none).
  """
  stage: int
  chunk: int
  virtual_stage: int
  graph: Graph
  mesh: Mesh
  inputs: Dict[str, Tensor]
  x_in: Optional[Tensor]
  output: Tensor
  dy: Optional[Tensor]
  dx: Optional[Tensor]
  variables: Tuple[object, ...]
  grads: Tuple[Optional[Tensor], ...]
  pre: Tuple[object, ...]
  forward: Tuple[object, ...]
  backward: Tuple[object, ...]


class UpdateProgram(NamedTuple):
  """The update graph of one stage: ``grad_inputs`` (variable name ->
  import of its accumulated gradient) feed ``update_ops``; ``operations``
  are the ops to lower, the imports excluded."""
  stage: int
  graph: Graph
  mesh: Mesh
  grad_inputs: Dict[str, Tensor]
  update_ops: Tuple[object, ...]
  operations: Tuple[object, ...]


class PipelineProgram(NamedTuple):
  """Everything :func:`build_program` built.

  ``chunks`` are indexed by virtual stage; ``updates`` by stage; ``tied``
  maps a variable name to the stages that hold it (two or more);
  ``padding`` is the :class:`~mesh_tf.training.padding.Padding` of the
  batch (None: unpadded), whose mask the last chunk takes as its input
  :data:`~mesh_tf.training.padding.MASK_INPUT`.
  """
  pipeline: object
  parts: object
  microbatch_size: int
  chunks: Tuple[ChunkProgram, ...]
  updates: Tuple[UpdateProgram, ...]
  tied: Dict[str, Tuple[int, ...]]
  padding: Optional[object] = None


def _ancestors(tensors):
  """Operations the ``tensors`` depend on (themselves included)."""
  seen, stack = set(), [t.operation for t in tensors if t is not None]
  while stack:
    op = stack.pop()
    if op in seen:
      continue
    seen.add(op)
    stack.extend(t.operation for t in op.inputs)
  return seen


def _phases(graph, output, needed):
  """(pre, forward, backward) ops of a chunk graph, each in graph order."""
  micro = set()
  for op in graph.operations:
    data = (isinstance(op, creation_ops.ImportOperation) and op.value is None)
    if (data or getattr(op, "per_use", False)
        or any(t.operation in micro for t in op.inputs)):
      micro.add(op)
  forward = _ancestors([output]) & micro
  backward = _ancestors(needed) & micro - forward
  ops = graph.operations
  return (tuple(op for op in ops if op not in micro),
          tuple(op for op in ops if op in forward),
          tuple(op for op in ops if op in backward))


def _build_chunk(parts, pipeline, j, b, prev, storage, mesh_name,
                 padding=None):
  stage, chunk = pipeline.location(j)
  last = j == pipeline.virtual_stages - 1
  graph = Graph()
  mesh = Mesh(graph, mesh_name)
  inputs = parts.inputs(mesh, b)
  x_in = None
  if j == 0:
    x = parts.first(mesh, inputs)
  else:
    x = x_in = creation_ops.import_tf_tensor(
        mesh, None, prev.output.shape, name=f"pipeline/activation_{j}",
        dtype=prev.output.dtype)
  layers = pipeline.layers_of(stage, chunk)
  if len(layers):
    ctx = parts.context(mesh, inputs)
    for i in layers:
      x = parts.layer(i, x, ctx)
  output = parts.last(mesh, x, inputs) if last else x
  if last and output.shape.ndims != 0:
    raise MtfError(f"the model's last part returned {output.name} of shape "
                   f"{output.shape!r}; it must return the scalar mean loss")
  if last and padding is not None:
    inputs = dict(inputs)
    inputs[padding_lib.MASK_INPUT] = padding_lib.pad_loss(output, padding)
  if storage is not None:
    shard_storage(graph, storage)
  dy = None
  if not last:
    dy = creation_ops.import_tf_tensor(
        mesh, None, output.shape, name=f"pipeline/activation_grad_{j}",
        dtype=output.dtype)
  variables = tuple(graph.trainable_variables)
  xs = [v.outputs[0] for v in variables] + ([x_in] if x_in is not None
                                            else [])
  grads = gradients([output], xs, grad_ys=None if last else [dy])
  dx = grads[-1] if x_in is not None else None
  grads = tuple(grads[:len(variables)])
  defer_sums(grads)
  pre, forward, backward = _phases(graph, output, list(grads) + [dx])
  # The received tensors are set by the lowering, not imported.
  received = {t.operation for t in (x_in, dy) if t is not None}
  forward = tuple(op for op in forward if op not in received)
  backward = tuple(op for op in backward if op not in received)
  return ChunkProgram(stage, chunk, j, graph, mesh, inputs, x_in, output,
                      dy, dx, variables, grads, pre, forward, backward)


def _build_update(stage, chunks, optimizer, microbatches, mesh_name):
  graph = Graph()
  mesh = Mesh(graph, mesh_name)
  variables, grads, grad_inputs = [], [], {}
  for c in chunks:
    for v, g in zip(c.variables, c.grads):
      # A name two chunks of the stage share is one variable: the lowering
      # accumulates both chunks' gradients into its one import.
      if g is None or v.name in grad_inputs:
        continue
      variables.append(variable_ops.Variable(
          mesh, v.name, v.shape, v.dtype, v.initializer, v.trainable,
          v.memory_category))
      gi = creation_ops.import_tf_tensor(
          mesh, None, g.shape, name=f"pipeline/grad/{v.name}", dtype=g.dtype)
      grad_inputs[v.name] = gi
      grads.append(gi * (1.0 / microbatches))
  update_ops = tuple(optimizer.apply_grads(grads, variables))
  imports = {t.operation for t in grad_inputs.values()}
  ops = tuple(op for op in graph.operations if op not in imports)
  return UpdateProgram(stage, graph, mesh, grad_inputs, update_ops, ops)


def build_program(parts, pipeline, optimizer, storage=None,
                  mesh_name="mesh", padding=None):
  """Builds the chunk and update graphs of a pipelined training step.

  Args:
    parts: the model's :class:`~mesh_tf.models.repeated.RepeatedLayers`,
      or a config with ``parts()`` (e.g. ``TransformerConfig``).
    pipeline: a :class:`~mesh_tf.pipeline.spec.Pipeline` whose ``layers``
      is ``parts.layers``.
    optimizer: an optimizer of :mod:`mesh_tf.training.optimize`.
    storage: a ZeRO stage or :class:`~mesh_tf.training.storage.StoragePlan` applied
      to every chunk graph (None: unsharded).
    mesh_name: the name of every graph's Mesh.
    padding: a :class:`~mesh_tf.training.padding.Padding` of the batch
      dim: the program runs ``padding.padded_size`` rows (whatever
      ``parts.batch`` says) and the last chunk masks the padded ones out
      of the loss (:func:`~mesh_tf.training.padding.pad_loss`).

  Returns:
    A :class:`PipelineProgram`.

  Raises:
    PipelineSplitError: if the pipeline splits another layer count.
    PipelineBatchError: if ``parts.batch`` does not split into the
      microbatches.
    PaddingError: for a padding whose real size is not ``parts.batch``.
  """
  parts = as_parts(parts)
  if padding is not None:
    parts = padded_parts(parts, padding)
  if pipeline.layers != parts.layers:
    raise PipelineSplitError(
        f"the pipeline on axis {pipeline.axis}={pipeline.stages} splits "
        f"layers={pipeline.layers}, but the model has {parts.layers} "
        f"repeated layers; give Pipeline(layers={parts.layers})")
  b = pipeline.microbatch_size(parts.batch)
  chunks, prev = [], None
  for j in range(pipeline.virtual_stages):
    prev = _build_chunk(parts, pipeline, j, b, prev, storage, mesh_name,
                        padding)
    chunks.append(prev)
  updates = tuple(
      _build_update(s, [c for c in chunks if c.stage == s], optimizer,
                    pipeline.microbatches, mesh_name)
      for s in range(pipeline.stages))
  holders = {}
  for u in updates:
    for name in u.grad_inputs:
      holders.setdefault(name, []).append(u.stage)
  tied = {n: tuple(s) for n, s in holders.items() if len(s) > 1}
  return PipelineProgram(pipeline, parts, b, tuple(chunks), updates, tied,
                         padding)


def padded_parts(parts, padding):
  """``parts`` at the padded batch of ``padding`` (of ``parts.batch`` real
  rows, or already padded).

  Raises:
    PaddingError: if ``padding`` pads another real batch.
  """
  padding = padding_lib.Padding(*padding).check()
  if parts.batch not in (padding.real_size, padding.padded_size):
    raise padding_lib.PaddingError(
        f"the padding pads {padding.dim}={padding.real_size} to "
        f"{padding.padded_size}, but the model's batch is {parts.batch}; "
        f"give Padding({padding.dim!r}, {parts.batch}, ...)")
  return dataclasses.replace(parts, batch=padding.padded_size)
