"""Valid assignments of named dims to mesh axes.

A *local assignment* of a scope (a tuple of dim names) gives each dim of the
scope an *option*: a mesh-axis name, a tuple of several (a dim over several
axes, major first, as the rule ``batch:x+y`` writes it) or None (not split).
It is valid when

* every split dim is splittable (no op marks it unsplittable) and its size is
  divisible by the product of its axes' sizes, and
* no two dims that share a tensor anywhere in the graph share an axis.

Mesh axes of size 1 are never used: splitting over them changes nothing.
A multi-axis option lists its axes in mesh order: ``x+y`` and ``y+x`` form
the same processor groups and cost the same, so the search tries one.
A global layout is a local assignment of the scope of all dims.
"""

import itertools
import math
from typing import Dict, FrozenSet, NamedTuple, Optional, Tuple, Union

from mesh_tf.core import dims as dims_lib
from mesh_tf.core.layout import LayoutRules

Option = Union[str, Tuple[str, ...]]
Assignment = Tuple[Optional[Option], ...]

MAX_LOCAL_ASSIGNMENTS = 250_000


def option_axes(option):
  """The mesh-axis names of an option (``()`` for None)."""
  if option is None:
    return ()
  return (option,) if isinstance(option, str) else tuple(option)


def option_key(option):
  """A sort key over options (single axes, then tuples), since a str and a
  tuple do not compare."""
  return (len(option_axes(option)), option_axes(option))


def option_text(option):
  """How a rule writes an option: ``x`` or ``x+y``."""
  return "+".join(option_axes(option))


class DimSpace(NamedTuple):
  """What the search may do with each dim of a graph on one mesh.

  Attributes:
    mesh_shape: the mesh Shape.
    sizes: dim name -> size (the largest, where ops such as pad, slice,
      halo exchanges or local attention give one name several sizes).
    options: dim name -> tuple of options the dim may take: mesh-axis
      names, then tuples of several names (see the module docstring).
    conflicts: frozensets {a, b} of dim names that share some tensor.
    unsplittable: dim names some op cannot split.
    all_sizes: dim name -> every size the name has in the graph (sorted);
      an option must divide each, since one rule splits every tensor's
      dim of that name.
  """
  mesh_shape: dims_lib.Shape
  sizes: Dict[str, int]
  options: Dict[str, Tuple[str, ...]]
  conflicts: FrozenSet[FrozenSet[str]]
  unsplittable: FrozenSet[str]
  all_sizes: Optional[Dict[str, Tuple[int, ...]]] = None

  @property
  def dims(self):
    return tuple(sorted(self.sizes))

  @property
  def axes(self):
    return tuple(a.name for a in self.mesh_shape if a.size > 1)

  def axis_size(self, axis):
    """The number of blocks of an option: its axes' sizes multiplied."""
    return math.prod(self.mesh_shape.get_dim_by_name(a).size
                     for a in option_axes(axis))


def dim_space(graph, mesh_shape, max_axes_per_dim=1):
  """The :class:`DimSpace` of ``graph`` on ``mesh_shape``.

  ``max_axes_per_dim``: the most mesh axes one dim may split over; above 1
  a dim may also take every ordered (mesh-order) tuple of up to that many
  axes whose sizes' product divides it.

  A dim name may have several sizes (pad, slice, halo exchanges, local
  attention, compress_mean ...): a layout rule is per name, so an option
  must divide every one of them.
  """
  mesh_shape = dims_lib.convert_to_shape(mesh_shape)
  all_sizes, unsplittable, conflicts = {}, set(), set()
  shapes = set()
  for op in graph.operations:
    unsplittable |= set(op.lowering_unsplittable_dims)
    # A while loop's body and condition are priced with the loop.
    for t in list(op.inputs) + list(op.outputs) + list(
        getattr(op, "inner_tensors", ())):
      shapes.add(t.shape)
  # Each distinct shape once: a training step has thousands of tensors of
  # a few dozen shapes (this was a third of the memory screen's time).
  for shape in shapes:
    for d in shape:
      all_sizes.setdefault(d.name, set()).add(d.size)
    for a, b in itertools.combinations(sorted(shape.dimension_names), 2):
      conflicts.add(frozenset((a, b)))
  all_sizes = {n: tuple(sorted(s)) for n, s in all_sizes.items()}
  sizes = {n: s[-1] for n, s in all_sizes.items()}
  # Dividing every size is dividing their greatest common divisor.
  common = {n: math.gcd(*s) for n, s in all_sizes.items()}
  axes = [a for a in mesh_shape if a.size > 1]
  tuples = [c for k in range(2, max(1, int(max_axes_per_dim)) + 1)
            for c in itertools.combinations(axes, k)]
  options = {
      n: tuple(a.name for a in axes
               if n not in unsplittable and common[n] % a.size == 0)
      + tuple(tuple(a.name for a in c) for c in tuples
              if n not in unsplittable
              and common[n] % math.prod(a.size for a in c) == 0)
      for n in sizes}
  return DimSpace(mesh_shape, sizes, options, frozenset(conflicts),
                  frozenset(unsplittable & set(sizes)), all_sizes)


def local_assignments(space, scope):
  """All valid local assignments of ``scope`` (a tuple of dim names).

  The order is deterministic: the all-replicated assignment comes first.

  Raises:
    AutoLayoutError: if the scope has more than ``MAX_LOCAL_ASSIGNMENTS``
      candidate assignments.

  Example:
    >>> space = dim_space(graph, "x:2")          # doctest: +SKIP
    >>> local_assignments(space, ("b", "k"))     # doctest: +SKIP
    [(None, None), (None, 'x'), ('x', None)]
  """
  scope = tuple(scope)
  choices = [(None,) + space.options[d] for d in scope]
  count = 1
  for c in choices:
    count *= len(c)
  if count > MAX_LOCAL_ASSIGNMENTS:
    from autolayout.errors import AutoLayoutError
    raise AutoLayoutError(
        f"the dims {list(scope)} are priced together (one op, or pending "
        f"sums merged across ops, touches them all) and have up to {count} "
        f"local assignments on mesh {space.mesh_shape}, more than "
        f"{MAX_LOCAL_ASSIGNMENTS}; mark some of them unsplittable, or use a "
        "mesh with fewer axes")
  # Extended one dim at a time, in itertools.product's order, so that a
  # clash prunes every assignment that would contain it.
  earlier = [[j for j in range(i)
              if frozenset((scope[i], scope[j])) in space.conflicts]
             for i in range(len(scope))]
  axes = {o: frozenset(option_axes(o)) for c in choices for o in c}
  out = [()]
  for i, options in enumerate(choices):
    before = earlier[i]
    out = [p + (o,) for p in out for o in options
           if o is None or not any(p[j] is not None and axes[o] & axes[p[j]]
                                   for j in before)]
  return out


def to_rules(scope, assignment):
  """The LayoutRules of a local assignment."""
  return LayoutRules([(d, a) for d, a in zip(scope, assignment)
                      if a is not None])


def from_rules(scope, rules):
  """The local assignment of ``scope`` under global LayoutRules."""
  m = rules.as_dict()
  return tuple(m.get(d) for d in scope)


def restrict(scope, assignment, sub_scope):
  """The assignment of ``sub_scope`` (a subset of ``scope``)."""
  pos = {d: i for i, d in enumerate(scope)}
  return tuple(assignment[pos[d]] for d in sub_scope)


def all_layouts(graph, mesh_shape, max_axes_per_dim=1):
  """Every valid global layout of ``graph`` on ``mesh_shape``, as LayoutRules.

  For brute-force checks on small graphs; the count grows exponentially with
  the number of dims.
  """
  space = dim_space(graph, mesh_shape, max_axes_per_dim)
  scope = space.dims
  return [to_rules(scope, a) for a in local_assignments(space, scope)]
