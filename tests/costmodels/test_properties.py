"""Laws of the mapping and the formulas, checked on generated cases."""

import math

from hypothesis import given, settings
from hypothesis import strategies as st

import costmodels as cm
from costmodels.collectives import LinkParams, phase_times

SIZES = st.sampled_from([1, 2, 3, 4, 6, 8])


@st.composite
def torus_and_mesh(draw):
  sizes = draw(st.lists(SIZES, min_size=1, max_size=3))
  wrap = draw(st.booleans())
  topo = cm.torus("tpu-v4", sizes, wraparound=wrap)
  # Split the chip count into 1-3 mesh axes of random (divisor) sizes.
  n, axes = topo.num_chips, []
  for _ in range(draw(st.integers(0, 2))):
    divisors = [d for d in range(1, n + 1) if n % d == 0]
    d = draw(st.sampled_from(divisors))
    axes.append(d)
    n //= d
  axes.append(n)
  mesh = ";".join(f"a{i}:{s}" for i, s in enumerate(axes))
  return topo, mesh


@settings(max_examples=40, deadline=None)
@given(torus_and_mesh())
def test_mapping_covers_every_chip_exactly_once(case):
  topo, mesh = case
  try:
    m = cm.map_mesh(topo, mesh)
  except cm.TopologyError as e:
    assert "cannot be embedded" in str(e)
    return
  used = {i: 1 for i in range(len(topo.dims))}
  for a in reversed(m.axes):          # minor-most first
    assert math.prod(s.size for s in a.segments) == a.size
    for s in a.segments:
      assert s.stride == used[s.phys_index]   # contiguous, row-major
      used[s.phys_index] *= s.size
  assert all(used[i] == d.size for i, d in enumerate(topo.dims)
             if any(s.phys_index == i for a in m.axes for s in a.segments))
  assert math.prod(used.values()) == topo.num_chips
  names = [a.axis for a in m.axes]
  for kind in ("allreduce", "allconcat", "alltoall", "receive"):
    t = cm.collective_time((kind, tuple(names), topo.num_chips, 1024), m)
    assert 0 <= t < math.inf
    assert (t > 0) == (topo.num_chips > 1)


LINKS = st.lists(
    st.builds(LinkParams, st.integers(1, 16),
              st.floats(1.0, 1e12), st.floats(0.0, 1e-3),
              st.sampled_from(["ring", "line", "switch"]),
              barrier_s=st.floats(0.0, 1e-3)),
    min_size=1, max_size=3)


@settings(max_examples=40, deadline=None)
@given(LINKS, st.integers(0, 10**9))
def test_formulas_are_consistent(links, nbytes):
  p = math.prod(l.size for l in links)
  ar = cm.torus_allreduce_time(nbytes, links)
  rs = cm.torus_reduce_scatter_time(nbytes, links)
  assert math.isclose(ar, 2 * rs)
  # An all-gather of n/p per device moves what a reduce-scatter of n does.
  assert math.isclose(cm.torus_allgather_time(nbytes / p, links), rs)
  for kind in ("allreduce", "allgather", "alltoall", "permute"):
    total = cm.time_on_links(kind, nbytes, links)
    assert math.isclose(sum(t for _, t in phase_times(kind, nbytes, links)),
                        total)
    # More bytes never cost less.
    assert cm.time_on_links(kind, 2 * nbytes + 1, links) >= total
  if len(links) == 1:
    (l,) = links
    assert math.isclose(ar, cm.allreduce_time(
        nbytes, l.size, l.bandwidth_bytes_per_s, l.latency_s, l.structure))
