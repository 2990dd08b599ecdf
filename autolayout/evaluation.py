"""``costmodels.evaluate`` for graphs whose inputs are fed at run time.

Model graphs import their inputs with ``import_tf_tensor(mesh, None, ...)``
and feed values when lowering.  ``costmodels.evaluate`` lowers without
feeds, which such imports reject; the shape-only backend never reads the
value, so here they get a stand-in feed.  Everything else (the lowering on
ShapeMeshImpl, the prices, the memory model, the CostReport) is the cost
model's own code, unchanged.
"""

import costmodels
from costmodels import memory as cm_memory
from mesh_tf.core import dims as dims_lib
from mesh_tf.core.layout import convert_to_layout_rules
from mesh_tf.lowering.lowering import Lowering
from mesh_tf.lowering.shape_impl import ShapeMeshImpl
from mesh_tf.ops.creation import ImportOperation


def unfed_imports(graph):
  """Outputs of imports that were built without a value."""
  return [op.outputs[0] for op in graph.operations
          if isinstance(op, ImportOperation) and op.value is None]


def evaluate(graph, mesh_shape, layout_rules, topology, outputs=None):
  """:func:`costmodels.evaluate`, feeding value-less imports a stand-in."""
  unfed = unfed_imports(graph)
  if not unfed:
    return costmodels.evaluate(graph, mesh_shape, layout_rules, topology,
                               outputs=outputs)
  topology = costmodels.get_topology(topology)
  mesh_shape = dims_lib.convert_to_shape(mesh_shape)
  rules = convert_to_layout_rules(layout_rules)
  mapping = costmodels.map_mesh(topology, mesh_shape)
  impl = ShapeMeshImpl(mesh_shape, rules)
  mesh = graph.operations[0].mesh
  lowering = Lowering(graph, {mesh: impl}, feeds={t: 0 for t in unfed})
  outs = cm_memory.default_outputs(graph) if outputs is None else outputs
  for t in outs:
    lowering.laid_out(t)
  costs = costmodels.op_costs(impl.trace, mapping)
  profile = cm_memory.memory_profile(
      graph, mesh_shape, rules, None,
      None if outputs is None else list(outputs))
  return costmodels.CostReport(graph=graph, mesh_shape=mesh_shape,
                               layout_rules=rules, topology=topology,
                               mapping=mapping, trace=impl.trace,
                               op_costs=costs, memory=profile)
