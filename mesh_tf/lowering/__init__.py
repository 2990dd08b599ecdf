"""Lowering of mtf graphs onto backends.

``Lowering``, ``MeshImpl`` and ``ShapeMeshImpl`` are pure Python;
``PlacementMeshImpl`` loads TensorFlow only when it runs a kernel.
"""

from mesh_tf.lowering.fusion import step_call_options
from mesh_tf.lowering.lowering import Lowering
from mesh_tf.lowering.mesh_impl import (LaidOutTensor, LaidOutVariable,
                                        LazyAllreduceSum, MeshImpl)
from mesh_tf.lowering.placement import (PlacementMeshImpl, logical_cpu_devices,
                                        set_logical_cpu_devices)
from mesh_tf.lowering.shape_impl import ShapeMeshImpl
from mesh_tf.lowering.trace import (CollectiveRecord, CollectiveTrace,
                                    ComputeRecord)
