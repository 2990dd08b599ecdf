"""Checkpoints of laid-out variables, restorable under any layout and mesh.

The format is TensorFlow's own (V2 checkpoint: ``<prefix>.index`` plus
``<prefix>.data-*``), keyed by mtf variable name, so
``tf.train.load_checkpoint(prefix).get_tensor(name)`` reads a full value.

Each distinct slice is written once, as a TF *slice* of the full variable
(the way TF saves partitioned variables), straight from the device that holds
it: no processor ever assembles a full variable.  Restoring reads, for each
processor, just its slice under the new layout; TF's reader cuts it out of
whatever slices were saved.  Values are copied bit for bit.

Saving is atomic: the new checkpoint is written under a staged prefix and
swapped in by renames (:mod:`mesh_tf.checkpoint.files`), so a process
killed at any point of a save leaves the previous checkpoint at ``path``
restorable (the next save or restore rolls the interrupted one back).

Example:
  >>> prefix = save("/tmp/ckpt/model", impl_a, graph.all_variables)  # doctest: +SKIP
  >>> restore(prefix, impl_b, graph.all_variables)                  # doctest: +SKIP
"""

import os

from mesh_tf.checkpoint import files as checkpoint_files
from mesh_tf.core import dtypes as dtypes_lib
from mesh_tf.core.errors import MtfError
from mesh_tf.graph import Graph, Tensor
from mesh_tf.lowering.lazy_tf import tf
from mesh_tf.ops import variables as variable_ops

__all__ = ["CheckpointError", "CheckpointMismatchError", "load_values",
           "restore", "save"]


class CheckpointError(MtfError):
  """A checkpoint cannot be written or read."""


class CheckpointMismatchError(CheckpointError):
  """A checkpoint does not match the graph: a variable is missing, or has
  another shape or dtype."""


def _variable_list(variables):
  if isinstance(variables, Graph):
    return list(variables.all_variables)
  out = []
  for v in variables:
    if isinstance(v, Tensor):
      v = v.operation
    if not isinstance(v, variable_ops.Variable):
      raise CheckpointError(f"{v!r} is not an mtf variable")
    out.append(v)
  return out


def _slice_spec(full_shape, begin, slice_shape):
  """TF's ``shape_and_slices`` string, e.g. ``"4 6 0,2:-"``."""
  if list(slice_shape) == list(full_shape):
    return ""
  parts = []
  for b, n, f in zip(begin, slice_shape, full_shape):
    parts.append("-" if n == f else f"{b},{n}")
  return " ".join(str(f) for f in full_shape) + " " + ":".join(parts)


def save(path, mesh_impl, variables=None, on_stage=None):
  """Writes the variables held by ``mesh_impl`` to checkpoint ``path``.

  The write is atomic: until it returns, ``path`` holds the previous
  checkpoint (if any), whole, even if the process is killed meanwhile.

  Args:
    path: the checkpoint prefix (its directory is created).
    mesh_impl: a backend holding variable slices (PlacementMeshImpl).
    variables: a Graph, or Variables (or their Tensors), to save; by default
      every variable the backend holds.
    on_stage: optional ``fn(stage)`` called as the save goes: ``"writing"``
      before the values are written, then each of
      ``checkpoint_files.STAGES`` (``"committed"`` once ``path`` is new).

  Returns:
    ``path``, for :func:`restore` or ``tf.train.load_checkpoint``.

  Raises:
    CheckpointError: if a variable has not been created in the backend yet
      (lower the graph or run a step first).
  """
  held = getattr(mesh_impl, "variables", None)
  if held is None:
    raise CheckpointError(f"{type(mesh_impl).__name__} holds no variable "
                          "values to save; use a PlacementMeshImpl")
  if variables is None:
    names = sorted(held)
  else:
    names = [v.name for v in _variable_list(variables)]
  tensor_names, specs, tensors = [], [], []
  for name in names:
    laid = held.get(name)
    if laid is None or laid.slices is None:
      raise CheckpointError(
          f"variable {name!r} has no values in the backend yet; lower the "
          "graph (or run a training step) before saving")
    full = laid.shape.to_integer_list()
    seen = set()
    for p, v in enumerate(laid.slices):
      begin = mesh_impl.slice_begin(laid.shape, p)
      if begin in seen:
        continue  # a replica of a slice already written
      seen.add(begin)
      tensor_names.append(name)
      specs.append(_slice_spec(full, begin, laid.slice_shape))
      tensors.append(v.read_value())
  directory = os.path.dirname(os.path.abspath(path))
  os.makedirs(directory, exist_ok=True)
  checkpoint_files.recover(path)
  if on_stage is not None:
    on_stage("writing")
  with tf.device("CPU:0"):
    tf.raw_ops.SaveV2(prefix=checkpoint_files.staged_prefix(path),
                      tensor_names=tensor_names, shape_and_slices=specs,
                      tensors=tensors)
  checkpoint_files.commit(path, on_stage)
  return path


def _reader(path):
  checkpoint_files.recover(path)  # roll back a save that was interrupted
  try:
    return tf.train.load_checkpoint(path)
  except (tf.errors.NotFoundError, tf.errors.DataLossError, ValueError) as e:
    raise CheckpointError(f"cannot read checkpoint {path!r}: {e}") from None


def _check(reader, v, path):
  shapes = reader.get_variable_to_shape_map()
  dtypes = reader.get_variable_to_dtype_map()
  if v.name not in shapes:
    close = sorted(shapes)[:8]
    raise CheckpointMismatchError(
        f"variable {v.name!r} {v.shape!r} is not in checkpoint {path!r}, "
        f"which holds {len(shapes)} variables (e.g. {close}); restore a "
        "checkpoint of this model or rename the variable")
  want = v.shape.to_integer_list()
  if list(shapes[v.name]) != want:
    raise CheckpointMismatchError(
        f"variable {v.name!r} has shape {v.shape!r} (sizes {want}) in the "
        f"graph but {list(shapes[v.name])} in checkpoint {path!r}; build the "
        "model with the sizes it was saved with")
  got = dtypes_lib.as_dtype(dtypes[v.name].name)
  if got != v.dtype:
    raise CheckpointMismatchError(
        f"variable {v.name!r} is {v.dtype} in the graph but {got} in "
        f"checkpoint {path!r}")


def _read_slice(path, name, full, begin, slice_shape, dtype):
  with tf.device("CPU:0"):
    return tf.raw_ops.RestoreV2(
        prefix=path, tensor_names=[name],
        shape_and_slices=[_slice_spec(full, begin, slice_shape)],
        dtypes=[tf.as_dtype(dtype)])[0]


def restore(path, mesh_impl, variables):
  """Loads ``variables`` from checkpoint ``path`` into ``mesh_impl``.

  The checkpoint may have been saved under any layout and mesh shape.
  Variables the backend does not hold yet are created with the checkpoint's
  values (so no initializer runs); the others are assigned.

  Args:
    path: a checkpoint prefix written by :func:`save` (or by TF, with the
      mtf variable names as keys).
    mesh_impl: the PlacementMeshImpl to load into.
    variables: a Graph, or Variables (or their Tensors).

  Raises:
    CheckpointMismatchError: naming the variable, if one is missing from the
      checkpoint or has another shape or dtype there.  Nothing is loaded then.
  """
  variables = _variable_list(variables)
  reader = _reader(path)
  for v in variables:  # check everything before changing anything
    _check(reader, v, path)
  held = mesh_impl.variables
  for v in variables:
    full = v.shape.to_integer_list()
    laid = held.get(v.name)
    if laid is None:
      def init(full_shape, begin, slice_shape, dtype, name=v.name):
        return _read_slice(path, name, list(full_shape), begin, slice_shape,
                           dtype)
      mesh_impl.make_variable(v.name, v.shape, v.dtype, init, v.trainable)
      continue
    cache = {}
    for p, var in enumerate(laid.slices):
      begin = mesh_impl.slice_begin(v.shape, p)
      if begin not in cache:
        cache[begin] = _read_slice(path, v.name, full, begin,
                                   laid.slice_shape, v.dtype)
      var.assign(cache[begin])


def load_values(path):
  """Every variable of a checkpoint as a full NumPy array, by name."""
  reader = _reader(path)
  return {name: reader.get_tensor(name)
          for name in sorted(reader.get_variable_to_shape_map())}
