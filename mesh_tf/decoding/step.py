"""Running the one-token decoding step on a mesh: :class:`DecodeStep`.

The step of a :class:`~mesh_tf.models.decoding.DecodingGraph` is lowered
ONCE, inside a ``tf.function`` with a fixed input signature, and that traced
function is called for every token: one TF graph execution per token, no
Python in the step.  The backend (:class:`mesh_tf.PlacementMeshImpl`) owns
the weights and the key/value caches across calls; the caches are updated in
place by the step, so they never leave the devices.  Only the tiny results
(next ids, or the beam candidates) come back, plus the logits when asked.

Example:
  >>> d = decoding_graph(TransformerConfig(), batch=1)        # doctest: +SKIP
  >>> step = DecodeStep(d, "model:8", "heads:model;d_ff:model;vocab:model",
  ...                   mtf.logical_cpu_devices(8))
  >>> out = step(ids=[3], position=0)     # {"next_ids": ..., "logits": ...}
"""

from mesh_tf.core.errors import MtfError
from mesh_tf.lowering.lazy_tf import tf
from mesh_tf.lowering.lowering import lower
from mesh_tf.lowering.placement import PlacementMeshImpl
from mesh_tf.training.step import LoweredStep

__all__ = ["DecodeStep"]


class DecodeStep(LoweredStep):
  """One decoding step of ``decoding`` on a mesh, as a single tf.function.

  Args:
    decoding: a :class:`~mesh_tf.models.decoding.DecodingGraph`.
    mesh_shape: e.g. ``"model:8"``.
    layout: layout rules, e.g. ``"heads:model;d_ff:model;vocab:model"``.
    devices: one TF device per processor, e.g. ``mtf.logical_cpu_devices(8)``.
    outputs: names of the outputs to return (default: every output except
      ``logits``, which would cost gathering the vocab dim each token).

  Attributes:
    mesh_impl: the backend holding weights and caches.
    traces: how many times the step was lowered (1 after the first call).
    lowering: the Lowering of the last trace (for its collective trace).
  """

  def __init__(self, decoding, mesh_shape, layout, devices, outputs=None):
    self.decoding = decoding
    if outputs is None:
      outputs = [k for k in decoding.outputs if k != "logits"]
    unknown = sorted(set(outputs) - set(decoding.outputs))
    if unknown:
      raise MtfError(f"unknown decoding outputs {unknown}; the step has "
                     f"{sorted(decoding.outputs)}")
    self.output_names = list(outputs)
    self.input_names = sorted(decoding.inputs)
    self.traces = 0
    specs = [tf.TensorSpec(decoding.inputs[k].shape.to_integer_list(),
                           decoding.inputs[k].dtype)
             for k in self.input_names]
    # Its variables: the weights and the zeroed caches.
    self._init_step(decoding.graph,
                    PlacementMeshImpl(mesh_shape, layout, devices), specs)

  def restore(self, path):
    """Loads the model weights from a checkpoint of the training graph
    (saved under any layout, e.g. by ``TrainStep.save``); the caches are
    not in it and start at zero."""
    from mesh_tf import checkpoint
    checkpoint.restore(path, self.mesh_impl, list(self.decoding.weights))

  def _step(self, *args):
    self.traces += 1
    d = self.decoding
    feeds = {d.inputs[k]: a for k, a in zip(self.input_names, args)}
    self.lowering = lower(d.graph, {d.mesh: self.mesh_impl}, feeds=feeds)
    results = {k: self.lowering.export_to_tf_tensor(d.outputs[k])
               for k in self.output_names}
    updates = []
    for op in d.cache_updates:
      updates.extend(self.lowering.lowered_operation(op) or [])
    with tf.control_dependencies(updates):
      return {k: tf.identity(r) for k, r in results.items()}

  def __call__(self, **feeds):
    """Runs one step; ``feeds`` gives every input by name (NumPy or TF
    values).  Returns ``{output name: TF tensor}``.

    Raises:
      MtfError: if an input is missing or unknown.
    """
    if set(feeds) != set(self.input_names):
      raise MtfError(f"give every decoding input by name, exactly once: "
                     f"{self.input_names} (got {sorted(feeds)})")
    self.initialize_variables()
    args = []
    for k in self.input_names:
      t = self.decoding.inputs[k]
      args.append(tf.convert_to_tensor(feeds[k], dtype=t.dtype))
    return self._call(args)

  def cache_values(self):
    """Full values of the caches (keys and values per layer), as NumPy."""
    out = {}
    for c in self.decoding.caches:
      laid = self.mesh_impl.variables[c.name]
      out[c.name] = self.mesh_impl.export_to_tf_tensor(
          laid.value(), c.shape).numpy()
    return out
