"""The ``model_step`` probes: SGD training steps of small zoo models under
a few layouts, whose times price the fixed costs of a record, a message
and a waited collective inside a lowered step
(:mod:`costmodels.calibrate.record_costs`).

TensorFlow is imported only inside the functions that touch devices.
"""

from costmodels.calibrate.timings import Sample
from costmodels.calibrate.probes import Probe


#: The small models of the ``model_step`` probes: the zoo's layers (dense,
#: layer norm, attention, embedding, mixture of experts, 3-D convolution,
#: softmax cross-entropy) at sizes where compute is negligible beside the
#: fixed cost of their records (see :mod:`costmodels.calibrate.record_costs`).
MODEL_STEPS = {
    "mlp": dict(layers=4, batch=8, d_model=8, d_ff=8, classes=8),
    # Wide enough that the bytes its records move (about 10 MB a device
    # replicated) cost as much as their fixed costs: the byte term of
    # costmodels.calibrate.record_costs.
    "mlp_wide": dict(layers=2, batch=16, d_model=128, d_ff=2048, classes=16),
    "transformer": dict(layers=2, d_model=8, heads=2, d_kv=4, d_ff=8,
                        vocab=16, length=4, batch=8),
    "moe": dict(layers=2, d_model=8, heads=2, d_kv=4, d_ff=8, vocab=16,
                length=4, batch=8, experts=8),
    "conv3d": dict(layers=2, batch=8, depth=4, height=4, width=4, channels=4,
                   classes=4),
}


def _zoo_model(name):
  from mesh_tf import models  # pylint: disable=import-outside-toplevel
  build = {"mlp": models.mlp, "mlp_wide": models.mlp,
           "transformer": models.transformer_lm,
           "moe": models.moe_transformer_lm, "conv3d": models.conv3d_net}
  return build[name](**MODEL_STEPS[name])


def record_classes(trace):
  """``((class, count, flops, bytes, matrices), ...)`` of a trace's compute
  records, per the class :func:`costmodels.compute.compute_time` prices
  them by (the pattern of a contraction, else ``elementwise``), sorted;
  ``matrices`` holds the ``(batch, rows, cols)`` of each of its matrix
  products
  (whether each paid the threaded-kernel cost is known once that is
  fitted)."""
  out = {}
  for r in trace.compute:
    cls = r.pattern if r.matmul else "elementwise"
    n, f, b, m = out.get(cls, (0, 0, 0, ()))
    out[cls] = (n + 1, f + r.flops_per_device,
                b + r.output_bytes_per_device + r.input_bytes_per_device,
                m + ((tuple(r.matrix),) if r.matrix else ()))
  return tuple((c,) + v for c, v in sorted(out.items()))


def model_step_layouts(name, n, mixed=True, split=False, data=True):
  """The ``(mesh, rules)`` of each ``model_step`` probe of model ``name``
  on ``n`` devices: replicated on ``x:n`` (every device runs every record,
  as the cost of a record assumes), data parallel on ``x:n`` (the same
  records and the gradients' all-reduces: the cost of a collective's
  messages in a step) and, for the models with a hidden layer on an even
  ``n >= 4``, mixed on ``a:2;b:n/2``: data parallel over ``b`` and the
  hidden layer split over ``a``, whose all-reduces of activations over 2
  devices sit beside gradient syncs over ``n / 2`` and ``n``.  Its
  messages per collective differ from data parallel's ``n - 1``, which
  tells the cost of a collective in a step from that of a message (see
  :mod:`costmodels.calibrate.record_costs`); ``mixed=False`` leaves the
  mixed step out.  ``split=True`` adds the hidden layer split over all
  ``n`` devices (``x:n``, ``d_ff:x``): every collective one the step waits
  for, over the whole mesh, as in a model-parallel layout; the mixed
  step's waits are over 2 devices and sit beside its gradient syncs, and
  on its own the fit put the cost of a waited collective at 260-350 us,
  twice what steps of a tiny MLP measured (about 150 us over 8 devices),
  and ranked the MoE's layouts with many collectives too slow.
  ``data=False`` leaves the data-parallel step out (the quick plan steps
  one model data parallel: enough for the cost of a message)."""
  out = [(f"x:{n}", "")] + ([(f"x:{n}", "batch:x")] if data else [])
  hidden = n >= 4 and n % 2 == 0 and "d_ff" in MODEL_STEPS[name]
  if mixed and hidden:
    out.append((f"a:2;b:{n // 2}", "batch:b;d_ff:a"))
  if split and hidden:
    out.append((f"x:{n}", "d_ff:x"))
  return tuple(out)


def model_step_probes(devices, names=tuple(MODEL_STEPS), mixed=(),
                      split=(), data=tuple(MODEL_STEPS)):
  """Probes ``model_step``: one SGD training step of each small zoo model
  of ``names`` under each of its :func:`model_step_layouts` (the mixed
  one for the models of ``mixed``, the split one for those of ``split``,
  the data-parallel one for those of ``data``)
  on every device, warmed up;
  ``pattern`` names the model and its rules, ``records`` counts its
  records per class, ``messages`` its collectives' slices received per
  device, ``collectives`` its collectives, ``blocking`` those of them
  the step waits for (all but its gradient syncs) and ``transfers`` each
  collective's kind, group and bytes."""
  import costmodels  # pylint: disable=import-outside-toplevel
  from mesh_tf import training  # pylint: disable=import-outside-toplevel
  from mesh_tf.training import optimize
  n = len(devices)
  out = []
  for name in names:
    for mesh, rules in model_step_layouts(
        name, n, name in mixed, name in split, name in data):
      model = _zoo_model(name)
      step = training.train_step_for_model(model, mesh, rules, devices,
                                           optimize.SgdOptimizer(0.01))
      feeds = model.random_values(seed=1)
      step(**feeds).numpy()
      trace = costmodels.trace_graph(step.graph, mesh, rules)
      records = record_classes(trace)
      total = sum(r[1] for r in records)
      messages = sum(c.group_size - 1 for c in trace.collectives)
      buckets = costmodels.overlap.gradient_buckets(step.graph)
      blocking = sum(buckets.record_bucket(c) is None
                     for c in trace.collectives)
      out.append(Probe(
          f"{name} model step {rules or 'replicated'}, {total} records",
          Sample("model_step", "", n, 0, float(total), 0.0,
                 pattern=f"{name} {rules}".strip(), records=records,
                 messages=messages, collectives=len(trace.collectives),
                 blocking=blocking, transfers=tuple(
                     (c.kind, c.group_size, c.bytes_per_device)
                     for c in trace.collectives)),
          [lambda step=step, f=feeds: step(**f).numpy()], 1,
          lambda _: None))
  return out
