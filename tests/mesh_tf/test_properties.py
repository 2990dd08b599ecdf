"""Property: layout never changes results.

Hypothesis builds small random graphs of einsums, reductions, softmaxes,
elementwise ops and reshapes over a few named dims, and checks that a random
valid layout on 2, 4 or 8 devices gives the same outputs (every intermediate
tensor included) as one device, and that the shape-only backend records the
same trace as the real lowering (``layout_harness.run`` asserts that).
"""

import itertools

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import mesh_tf as mtf
from tests.layout_harness import run, valid_layouts

POOL = {"a": 4, "b": 2, "c": 8, "d": 4}
DIMS = {n: mtf.Dimension(n, s) for n, s in POOL.items()}
MESHES = ["x:2", "rows:2;cols:2", "rows:2;cols:4", "x:8"]
LAYOUTS = {m: valid_layouts(list(DIMS.values()), m) for m in MESHES}

UNARY = {"tanh": mtf.tanh, "relu": mtf.relu, "negative": mtf.negative,
         "sigmoid": mtf.sigmoid, "square": lambda x: mtf.square(x) * 0.25}
BINARY = {"add": mtf.add, "subtract": mtf.subtract, "maximum": mtf.maximum,
          "multiply": lambda x, y: mtf.multiply(mtf.tanh(x), y)}
REDUCE = {"sum": mtf.reduce_sum, "max": mtf.reduce_max, "min": mtf.reduce_min,
          "mean": mtf.reduce_mean}


def _shape(names):
  return mtf.Shape([DIMS[n] for n in names])


def _size(names):
  return int(np.prod([POOL[n] for n in names]))


def _reshape_targets(names):
  """Orderings of pool dims with as many elements as ``names``."""
  size = _size(names)
  out = []
  for k in range(1, len(POOL) + 1):
    for combo in itertools.permutations(sorted(POOL), k):
      if _size(combo) == size and list(combo) != list(names):
        out.append(list(combo))
  return out


@st.composite
def graphs(draw):
  """A graph spec: input dim lists, then op specs over earlier tensors."""
  names = st.lists(st.sampled_from(sorted(POOL)), min_size=1, max_size=3,
                   unique=True)
  inputs = draw(st.lists(names, min_size=1, max_size=3))
  shapes = list(inputs)
  ops = []
  for _ in range(draw(st.integers(1, 5))):
    kind = draw(st.sampled_from(["unary", "binary", "einsum", "reduce",
                                 "softmax", "reshape"]))
    i = draw(st.integers(0, len(shapes) - 1))
    x = shapes[i]
    if kind == "unary":
      spec, out = (kind, draw(st.sampled_from(sorted(UNARY))), i), x
    elif kind == "binary":
      j = draw(st.integers(0, len(shapes) - 1))
      out = x + [n for n in shapes[j] if n not in x]
      spec = (kind, draw(st.sampled_from(sorted(BINARY))), i, j)
    elif kind == "einsum":
      j = draw(st.integers(0, len(shapes) - 1))
      union = x + [n for n in shapes[j] if n not in x]
      out = draw(st.permutations(union))[:draw(st.integers(0, len(union)))]
      spec = (kind, i, j, out)
    elif kind == "reduce":
      out = draw(st.permutations(x))[:draw(st.integers(0, len(x)))]
      spec = (kind, draw(st.sampled_from(sorted(REDUCE))), i, out)
    elif kind == "softmax":
      if not x:  # a scalar
        continue
      spec, out = (kind, i, draw(st.sampled_from(x))), x
    else:
      targets = _reshape_targets(x)
      if not targets:
        continue
      out = draw(st.sampled_from(targets))
      spec = (kind, i, out)
    ops.append(spec)
    shapes.append(list(out))
  return inputs, ops


def _builder(spec):
  inputs, ops = spec

  def build(mesh):
    ts = []
    for k, names in enumerate(inputs):
      value = np.random.RandomState(k).randn(*[POOL[n] for n in names])
      ts.append(mtf.import_tf_tensor(mesh, value.astype(np.float32),
                                     _shape(names)))
    outs = []
    for op in ops:
      kind = op[0]
      if kind == "unary":
        y = UNARY[op[1]](ts[op[2]])
      elif kind == "binary":
        y = BINARY[op[1]](ts[op[2]], ts[op[3]])
      elif kind == "einsum":
        y = mtf.einsum([ts[op[1]], ts[op[2]]], _shape(op[3]))
      elif kind == "reduce":
        y = REDUCE[op[1]](ts[op[2]], output_shape=_shape(op[3]))
      elif kind == "softmax":
        y = mtf.softmax(ts[op[1]], DIMS[op[2]])
      else:
        y = mtf.reshape(ts[op[1]], _shape(op[2]))
      ts.append(y)
      outs.append(y)
    return outs or ts
  return build


@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(spec=graphs(), data=st.data())
def test_random_graphs_give_the_same_outputs_under_any_layout(spec, data):
  build = _builder(spec)
  base, _ = run(build, "all:1", "")
  mesh_shape = data.draw(st.sampled_from(MESHES), label="mesh")
  layout = data.draw(st.sampled_from(LAYOUTS[mesh_shape]), label="layout")
  got, _ = run(build, mesh_shape, layout)
  assert len(got) == len(base)
  for k, (g, b) in enumerate(zip(got, base)):
    np.testing.assert_allclose(
        g, b, rtol=1e-4, atol=1e-4,
        err_msg=f"output {k} of {spec} on {mesh_shape} under {layout!r}")


@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(spec=graphs(), data=st.data())
def test_shape_only_lowering_never_fails_where_placement_works(spec, data):
  """The cost model's backend needs no TF and accepts every valid layout."""
  graph = mtf.Graph()
  mesh = mtf.Mesh(graph, "mesh")
  outs = _builder(spec)(mesh)
  mesh_shape = data.draw(st.sampled_from(MESHES), label="mesh")
  layout = data.draw(st.sampled_from(LAYOUTS[mesh_shape]), label="layout")
  impl = mtf.ShapeMeshImpl(mesh_shape, layout)
  lowering = mtf.Lowering(graph, {mesh: impl})
  for t in outs:
    assert lowering.laid_out(t).slice_shape == impl.slice_shape(t)
  # Every collective moves whole slices of a positive size, within a group
  # that divides the mesh.
  for c in impl.trace.collectives:
    assert c.bytes_per_device > 0
    assert impl.size % c.group_size == 0 and c.group_size > 1
