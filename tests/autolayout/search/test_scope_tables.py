"""The scope tables (autolayout.search.formulation.build_tables) are the
per-choice sums of their factors: every column, overlap terms included,
equals a plain loop over each table's choices and factors, float for
float (the tables are built as numpy columns over many choices at once)."""

import collections

import pytest

import costmodels
from mesh_tf.core.mesh_shape import convert_to_mesh_shape
from mesh_tf.models.configs import get_config
from autolayout.search import assignments, formulation, overlap_terms, tables
from autolayout.search.pricing import Pricer
from autolayout.training.build import build_training
from autolayout.training.families import TrainingDecisions


def _per_choice(gt, tb, factors, placed):
  """``(time_s, comm_s, terms)`` of table ``tb``, one choice at a time."""
  times, comms, per_key, touched = [], [], collections.defaultdict(
      lambda: [0.0] * len(tb.choices)), set()
  for i, sigma in enumerate(tb.choices):
    t = c = 0.0
    for f in factors:
      sub = assignments.restrict(tb.scope, sigma, f.scope)
      valid, compute, comm = gt.value(f, sub)
      assert valid
      pl = placed[(f.kind, f.key)]
      plain = f.count if pl is None else pl.plain
      t += f.count * compute + plain * comm
      c += plain * comm
      if pl is None:
        continue
      extra = []
      if compute:
        extra += [(("work", seg), n * compute) for seg, n in pl.segments
                  if seg]
        extra += [(("window", w), n * compute) for w, n in pl.windows]
      if comm and (pl.sync_buckets or pl.gathers):
        waits = dict(gt.wait_by_axis(f, sub))
        for a, secs in gt.comm_by_axis(f, sub):
          extra += [(("sync", b, a), n * (secs - waits.get(a, 0.0)))
                    for b, n in pl.sync_buckets]
          for b, seg, n in pl.gathers:
            extra.append((("gather", b, a), n * secs))
            if seg:
              extra.append((("taken", seg, a), n * secs))
      for key, x in extra:
        per_key[key][i] += x
        touched.add(key)
    times.append(t)
    comms.append(c)
  terms = tuple((k, tuple(per_key[k])) for k in sorted(touched, key=repr))
  return tuple(times), tuple(comms), terms


@pytest.mark.parametrize("zero_stage", [
    3, {"attention": 3, "embedding": 2, "ffn": 1, "norm": 0}])
def test_scope_tables_equal_their_per_choice_sums(zero_stage):
  training = build_training(get_config("transformer_tiny"), TrainingDecisions(
      "bfloat16", zero_stage, 1, 2))
  graph, mesh = training.graph, convert_to_mesh_shape("data:2;model:4")
  topo = costmodels.get_topology("dgx-h100")
  space = assignments.dim_space(graph, mesh)
  gt = tables.GraphTables(graph, mesh, None, Pricer(topo, mesh), space,
                          training.plan)
  placed, _ = overlap_terms.overlap_terms(graph, gt, space.axes)
  tbls, host = formulation.build_tables(gt, space, (), placed)
  by_host = collections.defaultdict(list)
  for f in gt.factors:
    by_host[host[f.scope]].append(f)
  keys = set()
  for tb in tbls:
    time_s, comm_s, terms = _per_choice(gt, tb, by_host[tb.scope], placed)
    assert tb.time_s == time_s and tb.comm_s == comm_s, tb.scope
    assert tb.terms == terms, tb.scope
    keys |= {k[0] for k, _ in terms}
  # Every kind of overlap term is exercised.
  assert keys == {"work", "window", "sync", "gather", "taken"}
