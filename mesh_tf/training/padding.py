"""Padding a data-parallel dim up to a size the mesh divides.

A batch of 13 rows does not split over a data axis of 8 devices.  A
:class:`Padding` value names the fix: the dim (``batch``), its real size
(13) and the size the step runs at (16, the next multiple of the mesh axes
that split it, times the microbatches).  The step then

* builds the model at the padded size;
* fills the padded rows of every input that has the dim with copies of
  real rows (finite values, so a masked row can never make a NaN);
* feeds a *mask* of that dim, 1 on the real rows and 0 on the padded ones,
  which :func:`pad_loss` multiplies into the loss before the one reduction
  of the dim (the padded rows then have no loss and no gradient);
* normalises by the real row count: a mean loss is rescaled by
  ``padded / real`` after that reduction, so it is the mean of the real
  rows (a sum loss is the sum of the real rows as it is).

The loss and the updated weights are then those of the unpadded step.  The
padded rows are computed like real ones, so a padded step costs what the
step at the padded size costs: the same collectives and sends, plus the
mask's elementwise product (what :mod:`autolayout.training.pipeline_price`
prices).  The rows must be independent until the loss (a Transformer's or
an MLP's are; a batch norm's or an expert router's capacity are not):
:func:`pad_loss` raises :class:`PaddingError` naming the op that mixes
them.

Example:
  >>> padding_for("batch", 13, "data:8", "batch:data")
  Padding(dim='batch', real_size=13, padded_size=16)
  >>> padding_for("batch", 6, "data:4", "batch:data", microbatches=2).rows
  2
  >>> Padding("batch", 6, 8).mask(microbatches=2).tolist()
  [[1.0, 1.0, 1.0, 1.0], [1.0, 1.0, 0.0, 0.0]]
  >>> Padding.from_dict(Padding("batch", 6, 8).to_dict())
  Padding(dim='batch', real_size=6, padded_size=8)
"""

import math
from typing import NamedTuple

import numpy as np

from mesh_tf.core.dims import Dimension, Shape, convert_to_shape
from mesh_tf.core.errors import MtfError
from mesh_tf.core.layout import convert_to_layout_rules
from mesh_tf.ops import creation as creation_ops
from mesh_tf.ops import elementwise as ew
from mesh_tf.ops.reduce import ReduceOperation

__all__ = ["MASK_INPUT", "Padding", "PaddingError", "pad_loss",
           "padding_for"]

#: The name under which a padded step feeds the mask (an input of the
#: graph that holds the loss).
MASK_INPUT = "padding/mask"


class PaddingError(MtfError):
  """A dim cannot be padded as asked (sizes, mesh axes or the loss)."""


class Padding(NamedTuple):
  """Dim ``dim`` of ``real_size`` rows, run at ``padded_size`` rows (the
  extra rows masked out of the loss).

  Raises (on :meth:`check`):
    PaddingError: for sizes below 1 or a padded size below the real one.
  """
  dim: str
  real_size: int
  padded_size: int

  @property
  def rows(self):
    """The padded rows: ``padded_size - real_size``."""
    return self.padded_size - self.real_size

  def check(self):
    """``self``, or :class:`PaddingError` for impossible sizes."""
    if (not isinstance(self.real_size, int) or self.real_size < 1
        or not isinstance(self.padded_size, int)
        or self.padded_size < self.real_size):
      raise PaddingError(
          f"padding {self.dim}={self.real_size} to {self.padded_size}: the "
          f"padded size must be an integer at least the real size "
          f"{self.dim}={self.real_size}")
    return self

  def mask(self, microbatches=1):
    """The mask, float32, ``[microbatches, padded_size / microbatches]``:
    1 on the real rows (first), 0 on the padded ones (last)."""
    flat = np.arange(self.padded_size) < self.real_size
    return flat.astype(np.float32).reshape(microbatches, -1)

  def to_dict(self):
    """A JSON-ready dict (see :meth:`from_dict`)."""
    return {"dim": self.dim, "real_size": self.real_size,
            "padded_size": self.padded_size}

  @classmethod
  def from_dict(cls, d):
    """The Padding of :meth:`to_dict`'s dict, checked.

    Raises:
      PaddingError: for missing or unknown keys, or impossible sizes.
    """
    keys = {"dim", "real_size", "padded_size"}
    if not isinstance(d, dict) or set(d) != keys:
      raise PaddingError(f"a padding is a dict of {sorted(keys)}, got {d!r}")
    return cls(**d).check()

  def row_index(self):
    """The real row each padded row copies: ``i % real_size``."""
    return np.arange(self.padded_size) % self.real_size


def _split_size(dim, mesh_shape, layout_rules):
  """(the mesh axes that split ``dim``, their product)."""
  shape = convert_to_shape(mesh_shape)
  rules = convert_to_layout_rules(layout_rules)
  axes = rules.tensor_dimension_to_mesh_axes(Dimension(dim, 1), shape)
  return ([shape[a] for a in axes],
          math.prod(shape[a].size for a in axes))


def padding_for(dim, real_size, mesh_shape, layout_rules, microbatches=1):
  """The :class:`Padding` of ``dim=real_size`` to the next multiple of the
  mesh axes ``layout_rules`` split it over, times ``microbatches``.

  Raises:
    PaddingError: for a real size below 1.
  """
  _, n = _split_size(dim, mesh_shape, layout_rules)
  n *= microbatches
  if not isinstance(real_size, int) or real_size < 1:
    raise PaddingError(f"cannot pad {dim}={real_size!r}: give a real size "
                       ">= 1")
  return Padding(dim, real_size, -(-real_size // n) * n)


def check_padding(padding, mesh_shape, layout_rules, microbatches=1):
  """Checks that ``padding``'s padded size splits over the mesh axes of
  its dim and into ``microbatches``.

  Raises:
    PaddingError: naming the dim (``name=size``), the mesh axes
      (``name=size``) and the size to pad to.
  """
  padding = Padding(*padding).check()
  axes, n = _split_size(padding.dim, mesh_shape, layout_rules)
  n *= microbatches
  if padding.padded_size % n:
    where = " x ".join([str(a) for a in axes]
                       + ([f"microbatches={microbatches}"]
                          if microbatches > 1 else [])) or "nothing"
    want = -(-padding.real_size // n) * n
    raise PaddingError(
        f"{padding.dim}={padding.real_size} padded to "
        f"{padding.dim}={padding.padded_size} does not split over {where} "
        f"(= {n}); pad it to {padding.dim}={want}")
  return padding


def _ancestors(tensor):
  seen, stack = set(), [tensor.operation]
  while stack:
    op = stack.pop()
    if op not in seen:
      seen.add(op)
      stack.extend(t.operation for t in op.inputs)
  return seen


def _has(tensor, dim):
  return dim in tensor.shape.dimension_names


def _move_before(graph, ops, anchor):
  """Moves ``ops`` (just built, at the graph's end) before ``anchor``."""
  for op in ops:
    graph.operations.remove(op)
  at = graph.operations.index(anchor)
  graph.operations[at:at] = list(ops)


def _rewire(graph, op, old, new):
  """``op`` reads ``new`` where it read ``old``."""
  op._inputs = [new if t is old else t  # pylint: disable=protected-access
                for t in op.inputs]
  readers = graph._consumers.get(old, [])  # pylint: disable=protected-access
  if op in readers:
    readers.remove(op)
  graph._consumers.setdefault(new, []).append(op)  # pylint: disable=protected-access


def pad_loss(loss, padding):
  """Rewrites ``loss``'s graph in place so that the padded rows of
  ``padding.dim`` carry no loss (see the module docstring).

  The loss must reduce the dim in exactly one SUM reduction (a
  ``reduce_sum``, or the sum of a ``reduce_mean``) and no op before it may
  mix rows.  Call it before gradients are built.

  Returns:
    The mask: an import of shape ``[dim]`` (the graph's size of it) to
    feed under :data:`MASK_INPUT`, 1 on real rows and 0 on padded ones.

  Raises:
    PaddingError: if the loss does not reduce ``padding.dim`` once, an op
      mixes its rows, or the graph already has gradients.
  """
  padding = Padding(*padding).check()
  graph, dim = loss.graph, padding.dim
  if any(t.gradient_of is not None for op in graph.operations
         for t in op.outputs):
    raise PaddingError("pad_loss rewrites the loss of a forward graph, but "
                       "this one already has gradients; pad before "
                       "mtf.gradients or building the optimizer")
  feeding = _ancestors(loss)
  mixers = [op for op in graph.operations if op in feeding
            and any(_has(t, dim) for t in op.inputs)
            and not any(_has(t, dim) for t in op.outputs)]
  if len(mixers) != 1 or not (
      isinstance(mixers[0], ReduceOperation)
      and mixers[0].reduction_type == "SUM"):
    names = [f"{op.name} ({type(op).__name__})" for op in mixers]
    raise PaddingError(
        f"padding {dim}={padding.real_size} to {dim}={padding.padded_size}"
        f" needs a loss that reduces {dim!r} once, in a sum or mean of "
        f"independent rows; the loss {loss.name} reduces it in "
        f"{names or 'no op'}; pad a data-parallel dim whose rows meet only "
        "in the loss, or use idle devices instead of padding")
  reduce_op = mixers[0]
  x = reduce_op.inputs[0]
  size = x.shape.get_dim_by_name(dim).size
  mask = creation_ops.import_tf_tensor(
      reduce_op.mesh, None, Shape([Dimension(dim, size)]), name=MASK_INPUT,
      dtype=x.dtype)
  masked = ew.multiply(x, mask, name=f"{reduce_op.name}/padding_mask")
  _move_before(graph, [mask.operation, masked.operation], reduce_op)
  _rewire(graph, reduce_op, x, masked)
  out = reduce_op.outputs[0]
  n = x.shape.size // max(1, out.shape.size)
  means = [op for op in graph.consumers_of(out)
           if getattr(op, "kind", None) == "multiply"
           and getattr(op, "scalar", None) is not None
           and math.isclose(op.scalar * n, 1.0, rel_tol=1e-6)]
  if means and padding.rows:
    # A mean over the padded rows: rescale to the mean over the real ones.
    scaled = ew.multiply(out, padding.padded_size / padding.real_size,
                         name=f"{reduce_op.name}/padding_scale")
    _move_before(graph, [scaled.operation], means[0])
    for op in means:
      _rewire(graph, op, out, scaled)
  return mask
