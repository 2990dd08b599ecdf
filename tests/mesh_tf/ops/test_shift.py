"""shift and halo_exchange, including dims split across the mesh."""

import numpy as np
import pytest

import mesh_tf as mtf
from tests.layout_harness import check_layouts, run

RNG = np.random.RandomState(2)
X = RNG.randn(2, 16).astype(np.float32)  # a:2, s:16
OFFSETS = [1, -1, 2, -3, 4, 5, -6, 9, -13, 16, 17, -20]


def np_shift(x, offset, axis, wrap):
  if wrap:
    return np.roll(x, offset, axis)
  out = np.zeros_like(x)
  n = x.shape[axis]
  src = np.arange(n) - offset
  ok = (src >= 0) & (src < n)
  idx = [np.s_[:]] * x.ndim
  idx[axis] = np.nonzero(ok)[0]
  sidx = list(idx)
  sidx[axis] = src[ok]
  out[tuple(idx)] = x[tuple(sidx)]
  return out


def _kinds(trace):
  return [(c.kind, c.mesh_axes, c.bytes_per_device) for c in trace.collectives]


@pytest.mark.parametrize("wrap", [False, True])
def test_shift_under_every_layout(wrap):
  def build(mesh):
    x = mtf.import_tf_tensor(mesh, X, "a:2,s:16")
    return [mtf.shift(x, k, x.shape[1], wrap) for k in OFFSETS] + [
        mtf.shift(x, 1, "a", wrap)]
  ref = lambda: [np_shift(X, k, 1, wrap) for k in OFFSETS] + [
      np_shift(X, 1, 0, wrap)]
  assert check_layouts(build, ["a:2", "s:16"], ref, exact=True) > 12


def test_shift_by_one_on_a_split_dim_receives_one_element():
  def build(mesh):
    x = mtf.import_tf_tensor(mesh, X, "a:2,s:16")
    return mtf.shift(x, 1, "s", wrap=False)
  (v,), trace = run(build, "rows:2;cols:4", "s:cols;a:rows")
  np.testing.assert_array_equal(v, np_shift(X, 1, 1, False))
  # Each device holds a[1] x s[4] and sends its last column to its neighbour.
  assert _kinds(trace) == [("receive", ("cols",), 1 * 1 * 4)]
  assert trace.total_flops_per_device == 0


def test_shift_by_a_whole_block_moves_the_block():
  def build(mesh):
    x = mtf.import_tf_tensor(mesh, X, "a:2,s:16")
    return mtf.shift(x, -4, "s", wrap=True)
  (v,), trace = run(build, "x:4", "s:x")
  np.testing.assert_array_equal(v, np.roll(X, -4, 1))
  assert _kinds(trace) == [("receive", ("x",), 2 * 4 * 4)]


def test_long_shift_on_a_split_dim_uses_two_receives():
  def build(mesh):
    x = mtf.import_tf_tensor(mesh, X, "a:2,s:16")
    return mtf.shift(x, 5, "s", wrap=True)
  (v,), trace = run(build, "x:8", "s:x")
  np.testing.assert_array_equal(v, np.roll(X, 5, 1))
  # Blocks of 2: 5 = 2*2 + 1, so 1 element goes 3 processors on and 1 goes 2.
  assert sorted(_kinds(trace)) == [("receive", ("x",), 2 * 1 * 4)] * 2


def test_shift_past_the_end_without_wrap_is_local_zeros():
  def build(mesh):
    x = mtf.import_tf_tensor(mesh, X, "a:2,s:16")
    return mtf.shift(x, -16, "s", wrap=False)
  (v,), trace = run(build, "x:8", "s:x")
  np.testing.assert_array_equal(v, np.zeros_like(X))
  assert trace.collectives == []


def test_shift_of_an_unsplit_dim_is_local():
  def build(mesh):
    x = mtf.import_tf_tensor(mesh, X, "a:2,s:16")
    return mtf.shift(x, 3, "s", wrap=False)
  (v,), trace = run(build, "x:2", "a:x")
  np.testing.assert_array_equal(v, np_shift(X, 3, 1, False))
  assert trace.collectives == []


def _np_halo(x, halo, wrap):
  """x: [blocks, block] -> [blocks, block + 2*halo] from the flat sequence."""
  nb, b = x.shape[-2:]
  flat = x.reshape(x.shape[:-2] + (nb * b,))
  n = nb * b
  out = []
  for i in range(nb):
    idx = np.arange(i * b - halo, (i + 1) * b + halo)
    if wrap:
      out.append(flat[..., idx % n])
    else:
      ok = (idx >= 0) & (idx < n)
      part = np.zeros(flat.shape[:-1] + (len(idx),), x.dtype)
      part[..., ok] = flat[..., idx[ok]]
      out.append(part)
  return np.stack(out, -2)


@pytest.mark.parametrize("wrap", [False, True])
def test_halo_exchange_under_every_layout(wrap):
  v = RNG.randn(2, 8, 4).astype(np.float32)  # c:2, blocks:8, block:4

  def build(mesh):
    x = mtf.import_tf_tensor(mesh, v, "c:2,blocks:8,block:4")
    return [mtf.halo_exchange(x, x.shape[1], x.shape[2], h, wrap)
            for h in (1, 4, 6)]
  ref = lambda: [_np_halo(v, h, wrap) for h in (1, 4, 6)]
  # block (4, 12, 16) is left whole: 6 and 12 do not split 8 ways.
  assert check_layouts(build, ["c:2", "blocks:8"], ref, exact=True) > 12


def test_halo_exchange_on_split_blocks_only_talks_to_neighbours():
  v = RNG.randn(8, 4).astype(np.float32)

  def build(mesh):
    x = mtf.import_tf_tensor(mesh, v, "blocks:8,block:4")
    return mtf.halo_exchange(x, "blocks", "block", 1)
  (got,), trace = run(build, "x:4", "blocks:x")
  np.testing.assert_array_equal(got, _np_halo(v, 1, False))
  assert {c.kind for c in trace.collectives} == {"receive"}
  assert len(trace.collectives) == 2


def test_halo_exchange_with_a_split_block_dim():
  v = RNG.randn(8, 8).astype(np.float32)

  def build(mesh):
    x = mtf.import_tf_tensor(mesh, v, "blocks:8,block:8")
    return mtf.halo_exchange(x, "blocks", "block", 2, wrap=True)
  (got,), _ = run(build, "rows:2;cols:2", "block:rows;blocks:cols")
  np.testing.assert_array_equal(got, _np_halo(v, 2, True))


def test_halo_exchange_of_zero_is_the_input():
  x = _x()
  assert mtf.halo_exchange(x, "a", "s", 0) is x


# --- errors ------------------------------------------------------------------
def _x():
  mesh = mtf.Mesh(mtf.Graph(), "mesh")
  return mtf.import_tf_tensor(mesh, X, "a:2,s:16")


def test_shift_errors():
  x = _x()
  with pytest.raises(mtf.UnknownNameError, match=r"shift: .* has no dim named "
                     r"'t'"):
    mtf.shift(x, 1, "t", False)
  with pytest.raises(mtf.ShapeError, match=r"offset must be an integer, got "
                     r"1.5"):
    mtf.shift(x, 1.5, "s", False)
  with pytest.raises(mtf.ShapeError, match=r"dim s=8 does not match dim s=16"):
    mtf.shift(x, 1, mtf.Dimension("s", 8), False)


def test_halo_exchange_errors():
  x = _x()
  with pytest.raises(mtf.ShapeError, match=r"both s=16; pass two different"):
    mtf.halo_exchange(x, "s", "s", 1)
  with pytest.raises(mtf.ShapeError, match=r"halo_size must be an integer >= "
                     r"0, got -1"):
    mtf.halo_exchange(x, "a", "s", -1)
  with pytest.raises(mtf.UnknownNameError, match=r"halo_exchange: .* no dim "
                     r"named 'b'"):
    mtf.halo_exchange(x, "b", "s", 1)
