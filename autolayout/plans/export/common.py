"""What every exporter shares: per-dim mesh axes, slice shapes, the mesh,
and the rename hook."""

from mesh_tf.core import dims as dims_lib
from mesh_tf.core.errors import LayoutError
from autolayout.errors import ExportError


def mesh_dict(plan):
  """``{"axis_names": [...], "shape": [...]}`` of the plan's mesh."""
  return {"axis_names": plan.mesh_shape.dimension_names,
          "shape": plan.mesh_shape.to_integer_list()}


def _layout(plan, entry):
  """The lowering's TensorLayout of ``entry`` under the plan's rules.

  Raises:
    ExportError: if the rules cannot lay the tensor out (two of its dims on
      one mesh axis, or a dim not divisible by its axis).
  """
  try:
    return plan.rules.tensor_layout(dims_lib.Shape(entry.dims),
                                    plan.mesh_shape, entry.name)
  except LayoutError as e:
    raise ExportError(f"cannot export {entry.name!r}: {e}") from None


def dim_axes(plan, entry):
  """For each dim of ``entry`` (a TensorEntry), the tuple of mesh axis names
  it is split over (``()``: not split), major axis first.

  Raises:
    ExportError: if the plan's rules cannot lay the tensor out.
  """
  names = plan.mesh_shape.dimension_names
  return tuple(tuple(names[a] for a in axes)
               for axes in _layout(plan, entry).tensor_axis_to_mesh_axes)


def slice_shape(plan, entry):
  """Per-device slice shape of ``entry`` under the plan (a list of ints),
  by the lowering's own formula (:meth:`TensorLayout.slice_sizes`)."""
  return list(_layout(plan, entry).slice_sizes(dims_lib.Shape(entry.dims),
                                               plan.mesh_shape))


def renamed(names, rename=None):
  """``[(mtf name, framework name), ...]`` for ``names`` under ``rename``.

  ``rename`` is the hook from mtf variable names to a framework model's
  parameter names:

  * None: names stay as they are;
  * a mapping ``{mtf name: new name}``: names it lacks stay as they are; a
    value of None drops that tensor from the export;
  * a function ``fn(mtf name) -> new name or None`` (None drops it).

  Raises:
    ExportError: if a new name is not a string, or two tensors get the same
      name.

  Example:
    >>> renamed(["layer_0/ffn/wi/kernel"],
    ...         lambda n: n.replace("/", ".").replace("layer_", "layers."))
    [('layer_0/ffn/wi/kernel', 'layers.0.ffn.wi.kernel')]
  """
  if rename is None:
    fn = lambda n: n  # noqa: E731
  elif callable(rename):
    fn = rename
  elif hasattr(rename, "get"):
    fn = lambda n: rename.get(n, n)  # noqa: E731
  else:
    raise ExportError(f"rename must be a mapping or a function, got "
                      f"{type(rename).__name__}")
  out, seen = [], {}
  for n in names:
    new = fn(n)
    if new is None:
      continue
    if not isinstance(new, str) or not new:
      raise ExportError(f"rename gave {new!r} for {n!r}; names are "
                        "non-empty strings (None drops the tensor)")
    if new in seen:
      raise ExportError(f"rename gives both {seen[new]!r} and {n!r} the "
                        f"name {new!r}; give each its own name")
    seen[new] = n
    out.append((n, new))
  return out


def entries(plan, rename, which="variables"):
  """``[(framework name, TensorEntry), ...]`` of the plan's variables or
  activations, renamed."""
  items = {e.name: e for e in getattr(plan.model, which)}
  return [(new, items[old]) for old, new in renamed(list(items), rename)]
