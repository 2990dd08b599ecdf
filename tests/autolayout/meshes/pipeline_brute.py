"""Brute force over the pipelined space: every layout priced, no pruning
(what ``autolayout.meshes.pipeline_search`` must equal)."""

from autolayout.meshes import pipeline_search as ps
from autolayout.training.pipeline_price import measure_stage, measuring_data, price_layout
from mesh_tf.core.errors import MtfError


def brute_best(config, topology, budget, **space):
  """``((step s, chips), price)`` of the fastest layout that fits
  ``budget``, or None."""
  best, works = None, {}
  for lay in ps.layouts(config, topology, **space):
    key = (lay.model, lay.microbatch, lay.recompute, lay.placement)
    if key not in works:
      works[key] = measure_stage(config, topology, lay.model,
                                 measuring_data(lay, topology),
                                 lay.microbatch, lay.recompute,
                                 lay.placement)
    try:
      r = price_layout(config, topology, lay, works[key])
    except MtfError:
      continue   # stages that do not embed in a torus's box
    if r.peak_memory_bytes > budget:
      continue
    key = (r.step_time_s, lay.chips)
    if best is None or key < best[0]:
      best = (key, r)
  return best
