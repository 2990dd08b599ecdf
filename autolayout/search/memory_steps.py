"""The cost model's memory liveness, compressed for the integer program.

:mod:`costmodels.memory` fixes one schedule for every layout, and the peak is
``max_i sum_{t live at step i} bytes(t)``.  Under any layout the bytes per
device of a tensor are its whole bytes divided by the sizes of the axes its
dims are split over, which depends only on the *set* of its dim names (its
scope).  So a step is summarised by a vector: for each scope, the whole
bytes of the tensors of that scope live then.  Steps with equal vectors are
merged, and a step whose vector is <= another's everywhere can never be the
peak under any layout, so it is dropped.
"""

import math
from typing import NamedTuple, Optional, Tuple

import numpy as np

from costmodels import memory as cm_memory
from autolayout.search import assignments

MAX_LAYOUTS_TO_SCAN = 200_000
# Where the options' product passes MAX_LAYOUTS_TO_SCAN, the most
# (layouts x steps x scopes) prune_by_layouts scans: tens of milliseconds.
SCAN_WORK = 50_000_000
# Global layouts scanned per numpy block: small enough that the matrix
# products stay on one thread (OpenBLAS threads the larger ones, which on
# a loaded 2-core machine cost 10x the CPU: 8,247 layouts took 27 ms of
# CPU in blocks of 4096 and 3 ms in blocks of 256).
LAYOUT_BLOCK = 256


class MemorySteps(NamedTuple):
  """Compressed steps: ``bytes[k, j]`` whole bytes of live tensors whose dim
  set is ``scopes[j]`` at kept step ``k`` (schedule step ``steps[k]``).
  ``least_peak``: the smallest peak per device over these steps of any
  valid global layout (:func:`prune_by_layouts`), or None if not scanned."""
  scopes: Tuple[Tuple[str, ...], ...]
  bytes: np.ndarray
  steps: Tuple[int, ...]
  total_steps: int
  least_peak: Optional[int] = None


def compress(graph, outputs=None, schedule_ops=None, liveness=None):
  """The :class:`MemorySteps` of ``graph`` under the cost model's schedule
  (or the one of ``liveness``, a :class:`costmodels.memory.Liveness` of
  ``graph`` with these ``outputs``)."""
  if liveness is None:
    liveness = cm_memory.liveness(graph, outputs, schedule_ops)
  else:
    liveness.check_current(graph)
  index, scope_of = {}, {}
  rows_at, cols, nbytes = [], [], []
  for t, a, b in liveness.intervals:
    j = scope_of.get(t.shape)
    if j is None:
      scope = tuple(sorted(t.shape.dimension_names))
      j = scope_of[t.shape] = index.setdefault(scope, len(index))
    nb = cm_memory.full_bytes(t)
    rows_at += [a, b + 1]
    cols += [j, j]
    nbytes += [nb, -nb]
  n = len(liveness.step_ops)   # memory steps (a while loop has several)
  # Each step's live bytes per scope: the running sum of the intervals'
  # starts and ends (one numpy pass, not one row update per interval).
  delta = np.zeros((n + 1, len(index)), dtype=np.int64)
  np.add.at(delta, (np.asarray(rows_at, dtype=np.int64),
                    np.asarray(cols, dtype=np.int64)),
            np.asarray(nbytes, dtype=np.int64))
  live = np.cumsum(delta[:n], axis=0)
  scopes = tuple(sorted(index, key=index.get))
  if not n:
    return MemorySteps(scopes, np.zeros((0, len(scopes)), np.int64), (), n)
  # Each distinct row's first step, in step order.
  steps = np.sort(np.unique(live, axis=0, return_index=True)[1])
  mat = live[steps]
  # Largest total first (ties: the earlier step); a row <= a kept one
  # everywhere is dropped.  The kept rows grow in one buffer, compared
  # with each row in one numpy pass.
  order = np.lexsort((np.arange(len(mat)), -mat.sum(axis=1)))
  kept, buf = [], np.empty_like(mat)
  for k in order.tolist():
    m = len(kept)
    if m and (buf[:m] >= mat[k]).all(axis=1).any():
      continue
    buf[m] = mat[k]
    kept.append(k)
  kept.sort()
  return MemorySteps(scopes, mat[kept], tuple(steps[kept].tolist()), n)


def prune_by_layouts(ms, space, max_layouts=MAX_LAYOUTS_TO_SCAN):
  r"""Keeps only the steps that can be the peak under some valid global
  layout, and finds the smallest peak of any layout (``least_peak``).

  A step's bytes per device under a layout are, as the program adds them
  (:func:`step_coefficients`), each scope's whole bytes divided by its
  blocks and rounded down: at most one byte per scope under the quotients'
  sum, which is what the scan computes (one matrix product per block of
  layouts).  A step is kept when, under some layout, its sum is within
  that rounding (plus a byte for the floats) of the largest, so under
  every layout the kept steps' largest rounded total is the peak over all
  steps: the program is the same for every budget.  ``least_peak`` is
  then exact, over the kept steps, in the program's integers: no layout
  that passes every op's lowering has a smaller peak, so a budget below it
  makes the program infeasible (what :meth:`LayoutSearch.may_fit
  <autolayout.search.state.LayoutSearch.may_fit>` reads).

  Returns ``ms`` unchanged when the mesh admits more than ``max_layouts``
  valid layouts (:func:`layout_blocks`), or, when the options multiply
  past ``max_layouts``, more than the scan's work bound allows
  (``SCAN_WORK``).
  """
  if not len(ms.steps):
    return ms
  dims = space.dims
  count = math.prod(1 + len(space.options[d]) for d in dims)
  if count > max_layouts:
    # The clashes may still leave few layouts (a per-group-stage step:
    # 531,441 products, 8,247 layouts), but a scan of many steps costs
    # what the program saves: only as many as SCAN_WORK allows.
    max_layouts = min(max_layouts, SCAN_WORK // (len(ms.steps)
                                                 * max(1, len(ms.scopes))))
  blocks = layout_blocks(space, max_layouts)
  if blocks is None:
    return ms
  divisors = np.stack([blocks[:, [dims.index(d) for d in scope]].prod(axis=1)
                       for scope in ms.scopes])       # scopes x layouts
  slack = len(ms.scopes) + 1
  whole = ms.bytes.astype(np.float64)
  keep = np.zeros(len(ms.steps), dtype=bool)
  for lo in range(0, len(blocks), LAYOUT_BLOCK):
    per = whole @ (1.0 / divisors[:, lo:lo + LAYOUT_BLOCK])
    keep |= (per >= per.max(axis=0) - slack).any(axis=1)
  kept = np.flatnonzero(keep)
  exact = ms.bytes[kept].astype(np.int64)
  least = None
  for lo in range(0, len(blocks), LAYOUT_BLOCK):
    per = np.zeros((len(kept), min(LAYOUT_BLOCK, len(blocks) - lo)),
                   dtype=np.int64)
    for j in range(len(ms.scopes)):
      if exact[:, j].any():
        per += exact[:, j:j + 1] // divisors[j:j + 1, lo:lo + LAYOUT_BLOCK]
    block_least = int(per.max(axis=0).min())
    least = block_least if least is None else min(least, block_least)
  return MemorySteps(ms.scopes, ms.bytes[kept],
                     tuple(ms.steps[k] for k in kept.tolist()),
                     ms.total_steps, least)


def step_coefficients(ms, space):
  """Per kept step, ``{scope: {local assignment: bytes per device}}``."""
  divisors = []
  for scope in ms.scopes:
    divisors.append({
        sigma: int(np.prod([space.axis_size(a) for a in sigma
                            if a is not None], dtype=np.int64))
        for sigma in assignments.local_assignments(space, scope)})
  out = []
  for row in ms.bytes:
    step = {}
    for j, whole in enumerate(row):
      if whole:
        step[ms.scopes[j]] = {s: int(whole) // d
                              for s, d in divisors[j].items()}
    out.append(step)
  return out


def layout_blocks(space, most):
  """The blocks each dim is split into (1: unsplit) under every valid
  global layout of ``space`` (:func:`assignments.local_assignments` of
  every dim, as an int array ``layouts x space.dims``), or None when
  there are more than ``most`` layouts.

  Built with numpy one dim at a time, a clash pruning every layout that
  would contain it, so a mesh whose options multiply past
  ``MAX_LOCAL_ASSIGNMENTS`` but whose clashes leave a few thousand is
  listed (transformer_tiny's per-group-stage step on ``data:2;model:4``:
  531,441 products of options, 8,247 layouts); a prefix never has more
  layouts than the whole, since None extends every one.
  """
  dims = space.dims
  bit = {a: 1 << i for i, a in enumerate(space.axes)}
  used = np.zeros((1, 0), dtype=np.int64)     # axes bitmask per dim
  blocks = np.ones((1, 0), dtype=np.int64)
  for i, d in enumerate(dims):
    clash = [j for j in range(i) if frozenset((d, dims[j])) in space.conflicts]
    taken = np.bitwise_or.reduce(used[:, clash], axis=1) if clash else (
        np.zeros(len(used), dtype=np.int64))
    new_used, new_blocks = [], []
    for o in (None,) + tuple(space.options[d]):
      mask = sum(bit[a] for a in assignments.option_axes(o))
      keep = (taken & mask) == 0
      size = 1 if o is None else space.axis_size(o)
      new_used.append(np.column_stack(
          [used[keep], np.full(int(keep.sum()), mask, dtype=np.int64)]))
      new_blocks.append(np.column_stack(
          [blocks[keep], np.full(int(keep.sum()), size, dtype=np.int64)]))
    used, blocks = np.concatenate(new_used), np.concatenate(new_blocks)
    if len(blocks) > most:
      return None
  return blocks
