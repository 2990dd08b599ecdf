"""Lowering of mtf graphs onto backends.

``lower`` / ``Lowering``, ``lower_operation``, ``MeshImpl`` and
``ShapeMeshImpl`` are pure Python; ``PlacementMeshImpl`` loads TensorFlow
only when it runs a kernel.

Modules: :mod:`~mesh_tf.lowering.lowering` (the explicit calls),
:mod:`~mesh_tf.lowering.mesh_impl` (the backend contract),
:mod:`~mesh_tf.lowering.laid_out` (the values: laid-out tensors and
variables), :mod:`~mesh_tf.lowering.trace` (the records),
:mod:`~mesh_tf.lowering.geometry` (pnums and processor groups), the backends
:mod:`~mesh_tf.lowering.shape_impl` and :mod:`~mesh_tf.lowering.placement`,
:mod:`~mesh_tf.lowering.fusion` and :mod:`~mesh_tf.lowering.tf_private`
(every private TensorFlow API mesh-tf uses, each with a public fallback).
"""

from mesh_tf.lowering.fusion import step_call_options
from mesh_tf.lowering.laid_out import (LaidOutTensor, LaidOutVariable,
                                       LazyAllreduceSum)
from mesh_tf.lowering.lowering import (Lowering, OpLowering, lower,
                                       lower_operation)
from mesh_tf.lowering.backend import MeshBackend
from mesh_tf.lowering.mesh_impl import BackendRequiredError, MeshImpl
from mesh_tf.lowering.placement import (PlacementMeshImpl, logical_cpu_devices,
                                        set_logical_cpu_devices)
from mesh_tf.lowering.shape_impl import ShapeMeshImpl
from mesh_tf.lowering.trace import (CollectiveRecord, CollectiveTrace,
                                    ComputeRecord)
