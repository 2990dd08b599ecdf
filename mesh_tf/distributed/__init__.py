"""Meshes that span several processes, on TensorFlow's distributed runtime.

A multi-host mesh runs on one TensorFlow gRPC server per task (start each
with ``mtf-worker``, see :mod:`mesh_tf.distributed.worker`) and one client process that
builds, lowers and runs the graph.  The client:

1. describes the cluster with a :class:`Cluster` (``host:port`` list or a
   TF_CONFIG-style JSON);
2. checks the mesh against it before touching the network
   (:func:`mesh_devices` raises :class:`ClusterMeshMismatchError`);
3. connects with :func:`connect`, which waits a bounded time for every task
   and names the ones that do not answer (:class:`WorkerUnavailableError`);
4. lowers with :class:`~mesh_tf.lowering.PlacementMeshImpl` over the remote
   devices, e.g. ``/job:worker/replica:0/task:1/device:CPU:3``, and runs the
   step through :meth:`Connection.run`, which bounds its time and turns a
   lost worker into :class:`WorkerUnavailableError`.

Slices live on the workers; a collective on a mesh axis whose processors sit
in different tasks moves data between tasks through TensorFlow's runtime
(send/recv over gRPC).  :func:`classify_collectives` tells, for each record
of a lowering's trace, whether it crossed processes, and
:func:`process_spanning_axes` which mesh axes are the slow, cross-host links.

Example:
  >>> cluster = Cluster.from_addresses("10.0.0.1:2222,10.0.0.2:2222")
  >>> cluster
  Cluster(worker=['10.0.0.1:2222', '10.0.0.2:2222'])
  >>> devices = mesh_devices("hosts:2;local:2", cluster, devices_per_task=2)
  >>> devices[2]
  '/job:worker/replica:0/task:1/device:CPU:0'
  >>> process_spanning_axes("hosts:2;local:2", devices)
  ('hosts',)

Only :func:`connect` and :class:`Connection` import TensorFlow.

Modules: :mod:`~mesh_tf.distributed.errors`, :mod:`~.cluster` (the cluster
spec), :mod:`~.mesh` (a mesh's devices on a cluster, cross-process
collectives), :mod:`~.health` (TCP health checks) and :mod:`~.connection`
(:func:`connect`, :class:`Connection`); :mod:`~.local` starts real
``mtf-worker`` processes on 127.0.0.1 for trying a multi-process mesh on one
machine.
"""

from mesh_tf.distributed.errors import (ClusterError, ClusterMeshMismatchError,
                                        ClusterSpecError, StepTimeoutError,
                                        WorkerUnavailableError)
from mesh_tf.distributed.cluster import (Cluster, convert_to_cluster,
                                         parse_tf_config, split_address)
from mesh_tf.distributed.mesh import (ClassifiedCollective,
                                      classify_collectives, mesh_devices,
                                      process_spanning_axes)
from mesh_tf.distributed.health import (check_health, probe_address,
                                        set_fail_fast_default,
                                        unreachable_tasks)
from mesh_tf.distributed.connection import Connection, connect

__all__ = [
    "ClassifiedCollective", "Cluster", "ClusterError",
    "ClusterMeshMismatchError", "ClusterSpecError", "Connection",
    "StepTimeoutError", "WorkerUnavailableError", "check_health",
    "classify_collectives", "connect", "convert_to_cluster", "mesh_devices",
    "parse_tf_config", "probe_address", "process_spanning_axes",
    "set_fail_fast_default", "split_address", "unreachable_tasks",
]
