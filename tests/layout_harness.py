"""Shared machinery for "every valid layout matches the reference" tests.

``check_layouts(build, dims)`` lowers the graph made by ``build(mesh)`` under
every valid layout of ``dims`` on meshes of 1, 2, 4 (2x2) and 8 (2x4 and 8)
TF logical CPU devices, and compares the outputs with a 1-device run and
with an optional NumPy reference.  It also checks that the shape-only
backend records exactly the same trace as the real lowering.
"""

import itertools

import numpy as np

import mesh_tf as mtf

MESHES = ["all:1", "x:2", "rows:2;cols:2", "rows:2;cols:4", "x:8"]


def valid_layouts(dims, mesh_shape, limit=None):
  """All layout rules that map distinct dims of ``dims`` to distinct axes
  (or nowhere) with divisible sizes, as strings; "" (replicated) first."""
  mesh_shape = mtf.convert_to_shape(mesh_shape)
  dims = [mtf.convert_to_dimension(d) for d in dims]
  axes = [a for a in mesh_shape if a.size > 1]
  out = []
  options = [None] + axes
  for choice in itertools.product(options, repeat=len(dims)):
    used = [c.name for c in choice if c is not None]
    if len(used) != len(set(used)):
      continue
    if any(c is not None and d.size % c.size for d, c in zip(dims, choice)):
      continue
    out.append(";".join(f"{d.name}:{c.name}" for d, c in zip(dims, choice)
                        if c is not None))
  if limit is not None and len(out) > limit:
    # Keep "" and the layouts splitting the most dims, then a stable sample.
    rng = np.random.RandomState(len(out))
    keep = [out[0]] + sorted(out[1:], key=lambda s: -s.count(":"))[:limit // 2]
    rest = [s for s in out if s not in keep]
    keep += [rest[i] for i in sorted(rng.choice(len(rest), limit - len(keep),
                                                replace=False))]
    out = keep
  return out


def run(build, mesh_shape, layout, feeds_fn=None):
  """Builds, lowers on real devices, and returns (numpy outputs, trace)."""
  graph = mtf.Graph()
  mesh = mtf.Mesh(graph, "mesh")
  outputs = build(mesh)
  if isinstance(outputs, mtf.Tensor):
    outputs = [outputs]
  n = mtf.convert_to_shape(mesh_shape).size
  impl = mtf.PlacementMeshImpl(mesh_shape, layout,
                               mtf.logical_cpu_devices(n))
  lowering = mtf.Lowering(graph, {mesh: impl})
  values = [lowering.export_to_tf_tensor(t).numpy() for t in outputs]
  shape_impl = mtf.ShapeMeshImpl(mesh_shape, layout)
  shape_lowering = mtf.Lowering(graph, {mesh: shape_impl})
  for t in outputs:
    shape_lowering.laid_out(t)
  for t in outputs:  # Force pending all-reduces in the same order.
    lowering.laid_out(t)
  assert shape_impl.trace == impl.trace, (
      f"shape-only trace differs from the lowering's under {layout!r} on "
      f"{mesh_shape!r}:\n{shape_impl.trace.collectives}\nvs\n"
      f"{impl.trace.collectives}")
  return values, impl.trace


def check_layouts(build, dims, reference=None, meshes=MESHES, rtol=1e-5,
                  atol=1e-5, limit=24, exact=False):
  """Asserts that every valid layout of ``dims`` gives the same outputs.

  Returns the number of (mesh, layout) cases checked.
  """
  base, _ = run(build, "all:1", "")
  if reference is not None:
    ref = reference()
    ref = ref if isinstance(ref, (list, tuple)) else [ref]
    for b, r in zip(base, ref):
      _assert_close(b, r, rtol, atol, exact, "1-device vs reference")
  count = 0
  for mesh_shape in meshes:
    for layout in valid_layouts(dims, mesh_shape, limit):
      vals, _ = run(build, mesh_shape, layout)
      for v, b in zip(vals, base):
        _assert_close(v, b, rtol, atol, exact,
                      f"mesh {mesh_shape!r} layout {layout!r}")
      count += 1
  return count


def _assert_close(a, b, rtol, atol, exact, what):
  a, b = np.asarray(a), np.asarray(b)
  assert a.shape == b.shape, f"{what}: shape {a.shape} != {b.shape}"
  if exact or a.dtype.kind in "biu":
    np.testing.assert_array_equal(a, b, err_msg=what)
  else:
    np.testing.assert_allclose(a.astype(np.float64), b.astype(np.float64),
                               rtol=rtol, atol=atol, err_msg=what)
