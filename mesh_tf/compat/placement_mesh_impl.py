"""Mesh TF's module path for :class:`PlacementMeshImpl`, so that code written
as ``mtf.placement_mesh_impl.PlacementMeshImpl(...)`` ports unchanged."""

from mesh_tf.lowering.placement import PlacementMeshImpl  # noqa: F401
