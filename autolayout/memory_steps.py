"""The cost model's memory liveness, compressed for the integer program.

:mod:`costmodels.memory` fixes one schedule for every layout, and the peak is
``max_i sum_{t live at step i} bytes(t)``.  Under any layout a tensor's bytes
depend only on its dims and dtype (its *type*), so a step is summarised by
how many tensors of each type are live.  Steps with equal counts are merged,
and a step whose counts are all <= another's can never be the peak under any
layout, so it is dropped.  In a deep model the saved activations only grow
along the forward pass, so few steps survive and the number of memory
constraints does not grow with depth.
"""

import collections
from typing import Dict, List, NamedTuple, Tuple

import numpy as np

from costmodels import memory as cm_memory
from autolayout import assignments


class TensorType(NamedTuple):
  """What a tensor's bytes per device depend on."""
  dims: Tuple[Tuple[str, int], ...]
  dtype: str

  @property
  def scope(self):
    return tuple(sorted(n for n, _ in self.dims))


class MemorySteps(NamedTuple):
  """Compressed steps: ``counts[k, j]`` tensors of ``types[j]`` live at
  kept step ``k`` (which stands for schedule step ``steps[k]``)."""
  types: Tuple[TensorType, ...]
  examples: Tuple[object, ...]       # one tensor of each type
  counts: np.ndarray
  steps: Tuple[int, ...]
  total_steps: int


def tensor_type(t):
  return TensorType(tuple((d.name, d.size) for d in t.shape), t.dtype)


def compress(graph, outputs=None, schedule_ops=None):
  """The :class:`MemorySteps` of ``graph`` under the cost model's schedule."""
  if schedule_ops is None:
    schedule_ops = cm_memory.schedule(graph, outputs)
  intervals = cm_memory.live_intervals(graph, schedule_ops, outputs)
  index, examples = {}, []
  starts = collections.defaultdict(list)
  ends = collections.defaultdict(list)
  for t, (a, b) in intervals.items():
    ty = tensor_type(t)
    if ty not in index:
      index[ty] = len(index)
      examples.append(t)
    starts[a].append(index[ty])
    ends[b + 1].append(index[ty])
  n = len(schedule_ops)
  cur = np.zeros(len(index), dtype=np.int64)
  seen, rows, steps = set(), [], []
  for i in range(n):
    for j in starts.get(i, ()):
      cur[j] += 1
    for j in ends.get(i, ()):
      cur[j] -= 1
    key = cur.tobytes()
    if key not in seen:
      seen.add(key)
      rows.append(cur.copy())
      steps.append(i)
  types = tuple(sorted(index, key=index.get))
  if not rows:
    return MemorySteps(types, tuple(examples),
                       np.zeros((0, len(types)), np.int64), (), n)
  mat = np.stack(rows)
  order = sorted(range(len(rows)), key=lambda k: (-int(mat[k].sum()), k))
  kept = []
  for k in order:
    if kept and np.any(np.all(mat[kept] >= mat[k], axis=1)):
      continue
    kept.append(k)
  kept.sort()
  return MemorySteps(types, tuple(examples), mat[kept],
                     tuple(steps[k] for k in kept), n)


def step_coefficients(ms, space):
  """Per kept step, ``{scope: {local assignment: bytes}}`` with the bytes of
  that step's tensors of each scope under each assignment."""
  per_type = []
  for ty, ex in zip(ms.types, ms.examples):
    scope = ty.scope
    table = {}
    for sigma in assignments.local_assignments(space, scope):
      rules = assignments.to_rules(scope, sigma)
      table[sigma] = cm_memory.tensor_bytes_per_device(ex, space.mesh_shape,
                                                       rules)
    per_type.append((scope, table))
  out = []
  for row in ms.counts:
    step: Dict[tuple, Dict[tuple, int]] = {}
    for j, c in enumerate(row):
      if not c:
        continue
      scope, table = per_type[j]
      acc = step.setdefault(scope, {})
      for sigma, b in table.items():
        acc[sigma] = acc.get(sigma, 0) + int(c) * b
    out.append(step)
  return out
