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

import collections
from typing import NamedTuple, Tuple

import numpy as np

from costmodels import memory as cm_memory
from autolayout.search import assignments

MAX_LAYOUTS_TO_SCAN = 200_000
# fits_some_layout scans at most this many global layouts (a mesh with
# more is left to the program: its scan would cost what a build saves),
# this many per numpy block.
SCREEN_MAX_LAYOUTS = 50_000
LAYOUT_BLOCK = 4096


class MemorySteps(NamedTuple):
  """Compressed steps: ``bytes[k, j]`` whole bytes of live tensors whose dim
  set is ``scopes[j]`` at kept step ``k`` (schedule step ``steps[k]``)."""
  scopes: Tuple[Tuple[str, ...], ...]
  bytes: np.ndarray
  steps: Tuple[int, ...]
  total_steps: int


def compress(graph, outputs=None, schedule_ops=None, liveness=None):
  """The :class:`MemorySteps` of ``graph`` under the cost model's schedule
  (or the one of ``liveness``, a :class:`costmodels.memory.Liveness` of
  ``graph`` with these ``outputs``)."""
  if liveness is None:
    liveness = cm_memory.liveness(graph, outputs, schedule_ops)
  else:
    liveness.check_current(graph)
  index = {}
  starts = collections.defaultdict(list)
  ends = collections.defaultdict(list)
  for t, a, b in liveness.intervals:
    scope = tuple(sorted(t.shape.dimension_names))
    j = index.setdefault(scope, len(index))
    nbytes = cm_memory.full_bytes(t)
    starts[a].append((j, nbytes))
    ends[b + 1].append((j, nbytes))
  n = len(liveness.step_ops)   # memory steps (a while loop has several)
  cur = np.zeros(len(index), dtype=np.int64)
  seen, rows, steps = set(), [], []
  for i in range(n):
    for j, nb in starts.get(i, ()):
      cur[j] += nb
    for j, nb in ends.get(i, ()):
      cur[j] -= nb
    key = cur.tobytes()
    if key not in seen:
      seen.add(key)
      rows.append(cur.copy())
      steps.append(i)
  scopes = tuple(sorted(index, key=index.get))
  if not rows:
    return MemorySteps(scopes, np.zeros((0, len(scopes)), np.int64), (), n)
  mat = np.stack(rows)
  order = sorted(range(len(rows)), key=lambda k: (-int(mat[k].sum()), k))
  kept = []
  for k in order:
    if kept and np.any(np.all(mat[kept] >= mat[k], axis=1)):
      continue
    kept.append(k)
  kept.sort()
  return MemorySteps(scopes, mat[kept], tuple(steps[k] for k in kept), n)


def _divisors(space, scope, layouts, dims):
  pos = [dims.index(d) for d in scope]
  div = np.ones(len(layouts), dtype=np.float64)
  for i, lay in enumerate(layouts):
    for p in pos:
      if lay[p] is not None:
        div[i] *= space.axis_size(lay[p])
  return div


def prune_by_layouts(ms, space, max_layouts=MAX_LAYOUTS_TO_SCAN):
  """Keeps only the steps that are the peak under some valid global layout
  (the first such step on ties).  Exact: under every layout the peak over
  the kept steps equals the peak over all steps.  Returns ``ms`` unchanged
  when the mesh admits more than ``max_layouts`` layouts."""
  if len(ms.steps) <= 1:
    return ms
  dims = space.dims
  count = 1
  for d in dims:
    count *= 1 + len(space.options[d])
  if count > max_layouts:
    return ms
  layouts = assignments.local_assignments(space, dims)
  inv = np.stack([1.0 / _divisors(space, scope, layouts, dims)
                  for scope in ms.scopes])            # scopes x layouts
  keep = set()
  for lo in range(0, len(layouts), 4096):
    per = ms.bytes.astype(np.float64) @ inv[:, lo:lo + 4096]
    keep.update(int(k) for k in np.argmax(per, axis=0))
  kept = sorted(keep)
  return MemorySteps(ms.scopes, ms.bytes[kept],
                     tuple(ms.steps[k] for k in kept), ms.total_steps)


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


def fits_some_layout(ms, space, budget, max_layouts=SCREEN_MAX_LAYOUTS):
  r"""Whether some valid global layout keeps every step of ``ms`` within
  ``budget`` bytes per device, each scope's bytes divided (rounded down)
  as :func:`step_coefficients` divides them: constraint 5 of the program
  (:mod:`autolayout.search.formulation`) alone, without the cost tables.

  The program's layouts are valid global layouts (its tables agree with
  the rules and hold only valid local assignments) that also pass every
  op's lowering, so ``False`` proves the program with these steps and
  ``budget`` infeasible.  Finding it takes the schedule and the layouts,
  not the op tables: transformer_tiny's training candidates on
  ``data:2;model:4`` have 201 to 8,247 layouts and take milliseconds,
  where building one's program takes 0.1-0.5 s.

  Returns True or False, or None when the mesh has more than
  ``max_layouts`` valid global layouts (nothing is proven).
  """
  if not len(ms.steps):
    return True
  blocks = layout_blocks(space, max_layouts)
  if blocks is None:
    return None
  dims = space.dims
  divisors = [blocks[:, [dims.index(d) for d in scope]].prod(axis=1)
              for scope in ms.scopes]
  whole = ms.bytes.astype(np.int64)
  for lo in range(0, len(blocks), LAYOUT_BLOCK):
    per = np.zeros((len(ms.steps), min(LAYOUT_BLOCK, len(blocks) - lo)),
                   dtype=np.int64)
    for j, div in enumerate(divisors):
      if whole[:, j].any():
        per += whole[:, j:j + 1] // div[None, lo:lo + LAYOUT_BLOCK]
    if (per.max(axis=0) <= int(budget)).any():
      return True
  return False
