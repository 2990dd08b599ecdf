"""Pipeline parallelism: a mesh axis that carries stages.

* :mod:`~mesh_tf.pipeline.spec`: the split as a value (:class:`Pipeline`,
  :class:`Schedule`) and its errors;
* :mod:`~mesh_tf.pipeline.schedule`: the schedules as data (the ordered
  forward/backward steps of each stage, the activations in flight);
* :mod:`~mesh_tf.pipeline.program`: the stage graphs of a pipelined step;
* :mod:`~mesh_tf.pipeline.lowering`: their lowering on the stages' device
  groups, with point-to-point sends, on either backend;
* :mod:`~mesh_tf.pipeline.step`: the step on devices (one ``tf.function``)
  and its shape-only trace;
* :mod:`~mesh_tf.pipeline.costs`: what the cost model reads off the trace,
  per stage.

A model declares its repeated layers as a
:class:`~mesh_tf.models.repeated.RepeatedLayers`
(``mesh_tf.models.transformer_parts``, ``mesh_tf.models.mlp_parts``).
"""

from mesh_tf.pipeline.costs import (StageCost, expected_boundary_bytes,
                                    stage_costs)
from mesh_tf.pipeline.lowering import (PipelineTrace, Segment,
                                       lower_pipeline, stage_impls)
from mesh_tf.pipeline.program import PipelineProgram, build_program
from mesh_tf.pipeline.schedule import (Step, max_in_flight, schedule_order,
                                       simulate, stage_steps)
from mesh_tf.pipeline.spec import (Pipeline, PipelineAxisError,
                                   PipelineBatchError, PipelineError,
                                   PipelineScheduleError, PipelineSplitError,
                                   Schedule)
from mesh_tf.pipeline.step import PipelineTrainStep, trace_pipeline
