"""A networkx view of an mtf graph in terms of named dims.

Nodes are ``("dim", name)``, ``("tensor", name)`` and ``("op", name)``, each
with a ``kind`` attribute.  Edges:

* ``op -> tensor`` (``role="output"``) and ``tensor -> op``
  (``role="input"``): the data flow;
* ``tensor -> dim`` (``role="has_dim"``): the tensor's dims;
* ``op -> dim`` (``role="touches"``): every dim an op's inputs or outputs
  carry.

The view answers which dims are splittable, which dims are always used
together, and which ops repeat (identical layers), and exports to GraphML and
DOT.

Example:
  >>> v = build_view(graph)                       # doctest: +SKIP
  >>> splittable_dims(graph, "rows:2;cols:4")     # doctest: +SKIP
  {'batch': ('rows', 'cols'), 'd_model': ('rows', 'cols'), ...}
"""

import collections

from autolayout.search import assignments

# networkx is imported where a view is built: the layout search imports
# this module for op_signature alone, and networkx is 0.12 s of a solve.


def build_view(graph):
  """The networkx DiGraph of ``graph``'s ops, tensors and dims."""
  import networkx as nx  # pylint: disable=import-outside-toplevel
  v = nx.DiGraph()
  for op in graph.operations:
    v.add_node(("op", op.name), kind="op", label=op.name,
               op_type=type(op).__name__)
    touched = set()
    for t in op.inputs:
      v.add_edge(("tensor", t.name), ("op", op.name), role="input")
      touched |= set(t.shape.dimension_names)
    for t in op.outputs:
      v.add_node(("tensor", t.name), kind="tensor", label=t.name,
                 shape=str(t.shape), dtype=t.dtype)
      v.add_edge(("op", op.name), ("tensor", t.name), role="output")
      touched |= set(t.shape.dimension_names)
      for d in t.shape:
        v.add_node(("dim", d.name), kind="dim", label=d.name, size=d.size)
        v.add_edge(("tensor", t.name), ("dim", d.name), role="has_dim")
    for n in sorted(touched):
      v.add_edge(("op", op.name), ("dim", n), role="touches")
  return v


def dims_of(view, node):
  """Names of the dims a tensor or op node touches, sorted."""
  return tuple(sorted(n[1] for n in view.successors(node) if n[0] == "dim"))


def splittable_dims(graph, mesh_shape):
  """Dim name -> the mesh axes it may map to (empty tuple: not splittable).

  A dim is splittable over an axis when no op marks it unsplittable and its
  size is divisible by the axis size (axes of size 1 are left out).
  """
  return dict(sorted(assignments.dim_space(graph, mesh_shape).options.items()))


def dim_sets(graph):
  """Counter of the distinct sets of dims touched by one op (inputs and
  outputs together); the layout search keeps one table per set."""
  out = collections.Counter()
  for op in graph.operations:
    names = set()
    for t in list(op.inputs) + list(op.outputs):
      names |= set(t.shape.dimension_names)
    out[tuple(sorted(names))] += 1
  return out


def dims_used_together(graph):
  """Groups of dims that are always used together: every tensor that has one
  of them has all of them.  Returns sorted tuples, largest groups first."""
  occurs = collections.defaultdict(set)
  for t in graph.tensors:
    for d in t.shape:
      occurs[d.name].add(t.name)
  groups = collections.defaultdict(list)
  for name, ts in occurs.items():
    groups[frozenset(ts)].append(name)
  return sorted((tuple(sorted(g)) for g in groups.values()),
                key=lambda g: (-len(g), g))


def op_signature(op):
  """What an op's lowering cost can depend on: :attr:`Operation.signature`,
  which each op declares (its type, its inputs' and outputs' shapes and
  dtypes, and its ``cost_params()``; not its name nor its seed).

  Ops of identical layers have equal signatures, so the search prices them
  once.
  """
  return op.signature


def repeated_ops(graph):
  """Groups of op names with equal signatures (2 or more), largest first."""
  groups = collections.defaultdict(list)
  for op in graph.operations:
    groups[op_signature(op)].append(op.name)
  return sorted((g for g in groups.values() if len(g) > 1),
                key=lambda g: (-len(g), g[0]))


def _plain(view):
  """A copy with string node ids and GraphML-friendly attributes."""
  import networkx as nx  # pylint: disable=import-outside-toplevel
  g = nx.DiGraph()
  for n, data in view.nodes(data=True):
    g.add_node(f"{n[0]}:{n[1]}", **{k: (v if isinstance(v, (int, float, str))
                                        else str(v)) for k, v in data.items()})
  for a, b, data in view.edges(data=True):
    g.add_edge(f"{a[0]}:{a[1]}", f"{b[0]}:{b[1]}", **data)
  return g


def write_graphml(view, path):
  """Writes the view as GraphML (readable by networkx, Gephi, yEd)."""
  import networkx as nx  # pylint: disable=import-outside-toplevel
  nx.write_graphml(_plain(view), path)


def to_dot(view):
  """The view as Graphviz DOT text (dims are boxes, ops ellipses)."""
  shapes = {"dim": "box", "tensor": "note", "op": "ellipse"}
  lines = ["digraph mtf {"]
  for n, data in view.nodes(data=True):
    label = data.get("label", n[1])
    if n[0] == "dim":
      label = f"{label}={data.get('size')}"
    lines.append(f'  "{n[0]}:{n[1]}" [label="{label}", '
                 f'shape={shapes.get(n[0], "ellipse")}];')
  for a, b, data in view.edges(data=True):
    style = "dashed" if data.get("role") in ("has_dim", "touches") else "solid"
    lines.append(f'  "{a[0]}:{a[1]}" -> "{b[0]}:{b[1]}" [style={style}];')
  lines.append("}")
  return "\n".join(lines) + "\n"


def write_dot(view, path):
  """Writes :func:`to_dot` to ``path``."""
  with open(path, "w") as f:
    f.write(to_dot(view))
