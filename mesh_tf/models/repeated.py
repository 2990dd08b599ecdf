"""How a model declares its repeated layers: :class:`RepeatedLayers`.

A model that pipeline parallelism (:mod:`mesh_tf.pipeline`) can split gives
its graph as parts: the imports of its inputs, what runs before the
repeated layers (``first``: an embedding), what every stage needs once
(``context``: an attention mask), the repeated ``layer`` and what follows
them (``last``: the output layer and the loss).  Each part builds mtf ops
on the mesh it is given, so the pipeline can build any contiguous run of
layers in a graph of its own, on the devices of one stage.
:func:`compose` builds the whole model from the same parts in one graph.

A variable that two parts build under the same name (the embedding table
that the output layer reuses) is *tied*: each stage that needs it holds a
copy, and the pipeline sums their gradients before the update.
"""

import dataclasses
from typing import Any, Callable, Dict

from mesh_tf.core.errors import MtfError

__all__ = ["RepeatedLayers", "as_parts", "compose"]


@dataclasses.dataclass(frozen=True)
class RepeatedLayers:
  """A model as first part, ``layers`` repeated layers and last part.

  Attributes:
    layers: how many repeated layers.
    batch: the whole batch (rows of each input per step).
    inputs: ``inputs(mesh, batch) -> {name: import Tensor}``: the fed
      imports, their first dim ``batch`` rows.
    first: ``first(mesh, inputs) -> x``: what runs before layer 0.
    context: ``context(mesh, inputs) -> ctx``: built once in every graph
      that runs layers, passed to each (e.g. the attention bias); may
      return None.
    layer: ``layer(i, x, ctx) -> x``: repeated layer ``i``.
    last: ``last(mesh, x, inputs) -> loss``: the scalar mean loss.
    id_bounds: name -> exclusive upper bound of an integer input (for
      synthetic values); float inputs are left out.
  """
  layers: int
  batch: int
  inputs: Callable
  first: Callable
  context: Callable
  layer: Callable
  last: Callable
  id_bounds: Dict[str, Any] = dataclasses.field(default_factory=dict)


def as_parts(model):
  """``model`` as :class:`RepeatedLayers`: itself, or its config's
  ``parts()`` (``TransformerConfig``, ``MLPConfig``).

  Raises:
    MtfError: for a model that declares no repeated layers.
  """
  if isinstance(model, RepeatedLayers):
    return model
  parts = getattr(model, "parts", None)
  if parts is None:
    raise MtfError(
        f"{type(model).__name__} declares no repeated layers; give a "
        "RepeatedLayers, or a config with a parts() method (e.g. "
        "TransformerConfig, MLPConfig)")
  return parts()


def compose(parts, mesh, layers=None, batch=None):
  """Builds ``parts`` whole on ``mesh``: first, every layer, last.

  Args:
    parts: a :class:`RepeatedLayers`.
    mesh: the Mesh to build on.
    layers: the layer indices to build (default: all, in order).
    batch: rows per input (default ``parts.batch``).

  Returns:
    ``(loss, inputs)``: the scalar loss and the dict of imports.

  Raises:
    MtfError: if the loss is not a scalar.
  """
  inputs = parts.inputs(mesh, parts.batch if batch is None else batch)
  x = parts.first(mesh, inputs)
  ctx = parts.context(mesh, inputs)
  for i in (range(parts.layers) if layers is None else layers):
    x = parts.layer(i, x, ctx)
  loss = parts.last(mesh, x, inputs)
  if loss.shape.ndims != 0:
    raise MtfError(f"the last part returned {loss.name} of shape "
                   f"{loss.shape!r}; it must return the scalar mean loss")
  return loss, inputs
