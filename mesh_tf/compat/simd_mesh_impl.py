"""Mesh TF's module path for the TPU tilings, so that code written as
``mtf.simd_mesh_impl.HierarchicalTiling(...)`` or
``mtf.simd_mesh_impl.auto_logical_to_physical_tpu(...)`` ports unchanged.

mesh-tf has no TPU backend (``SimdMeshImpl``); the tilings are pure logic
(:mod:`mesh_tf.core.tiling`), also used by the cost model's mesh mapping
(:mod:`costmodels.topology.tiling`).
"""

from mesh_tf.core.tiling import (HierarchicalTiling,  # noqa: F401
                            auto_logical_to_physical_tpu,
                            physical_shape_3d_from_topology_proto_4d)
