"""A mesh over a cluster's devices: device names, and which collectives of a
lowering's trace cross processes.  Pure Python; touches no network."""

from typing import NamedTuple

from mesh_tf.core import dims as dims_lib
from mesh_tf.core.errors import MeshSizeError, UnknownNameError
from mesh_tf.core.mesh_shape import convert_to_mesh_shape
from mesh_tf.distributed.cluster import DEVICE_TASK_RE, convert_to_cluster
from mesh_tf.distributed.errors import ClusterMeshMismatchError
from mesh_tf.lowering.trace import CollectiveRecord

def mesh_devices(mesh_shape, cluster, devices_per_task, device_type="CPU"):
  """Device names for a mesh over ``cluster``, in row-major mesh order.

  Processor ``p`` is device ``p % devices_per_task`` of task
  ``p // devices_per_task``, so the leading mesh axes run across tasks: for
  ``hosts:2;local:4`` over 2 tasks x 4 devices, ``hosts`` spans processes and
  ``local`` stays inside one.  Pure Python; checks sizes before any network.

  Raises:
    ClusterMeshMismatchError: if the mesh size is not
      ``num_tasks * devices_per_task``.
  """
  shape = convert_to_mesh_shape(mesh_shape)
  cluster = convert_to_cluster(cluster)
  n = cluster.num_tasks
  total = n * devices_per_task
  if devices_per_task < 1 or shape.size != total:
    if shape.size % n == 0:
      fix = (f"expose {shape.size // n} {device_type} devices per task "
             f"(mtf-worker --cpu-devices {shape.size // n}) or use a mesh of "
             f"{total} processors, e.g. hosts:{n};local:{devices_per_task}")
    else:
      fix = (f"use a mesh whose size is a multiple of the {n} tasks, e.g. "
             f"hosts:{n};local:{max(devices_per_task, 1)}, or change the "
             "cluster")
    raise ClusterMeshMismatchError(
        f"mesh {dims_lib.Shape(shape)!r} has {shape.size} processors but job "
        f"{cluster.job!r} has {n} task(s) x {devices_per_task} "
        f"{device_type} device(s) = {total} ({', '.join(cluster.addresses)});"
        f" {fix}")
  return [cluster.device_name(p // devices_per_task, p % devices_per_task,
                              device_type) for p in range(shape.size)]


def _process_of(device):
  """(job, replica, task) of a device name; the client for local names."""
  m = DEVICE_TASK_RE.search(device)
  if m is None or m.group(1) == "localhost":
    return ("localhost", 0, 0)
  return (m.group(1), int(m.group(2)), int(m.group(3)))


class ClassifiedCollective(NamedTuple):
  """A trace record and how many processes its groups span.

  ``tasks_per_group`` is the largest number of distinct processes (tasks)
  among the groups of processors that take part in the collective.
  """
  record: CollectiveRecord
  tasks_per_group: int

  @property
  def cross_process(self):
    """True if the collective moved data between processes."""
    return self.tasks_per_group > 1


def _tasks_per_group(shape, devices, axis_names):
  from mesh_tf.lowering.shape_impl import ShapeMeshImpl  # pure Python
  geometry = ShapeMeshImpl(shape, "")
  axes = []
  for name in axis_names:
    if name not in shape.dimension_names:
      raise UnknownNameError(
          f"mesh axis {name!r} is not in mesh {dims_lib.Shape(shape)!r}; "
          "classify a trace "
          "with the mesh shape it was recorded on")
    axes.append(shape.dimension_names.index(name))
  groups = geometry.processor_groups(tuple(sorted(axes)))
  return max(len({_process_of(devices[p]) for p in g}) for g in groups)


def classify_collectives(trace, mesh_shape, devices):
  """Marks each collective of ``trace`` as cross-process or not.

  A collective over mesh axes crosses processes when one of its groups of
  participating processors (those that differ only on those axes) holds
  devices of more than one task.

  Args:
    trace: a :class:`~mesh_tf.lowering.CollectiveTrace` (e.g.
      ``mesh_impl.trace``), or a list of CollectiveRecords.
    mesh_shape: the mesh shape the trace was recorded on.
    devices: one device name per processor, as given to PlacementMeshImpl.

  Returns:
    A list of :class:`ClassifiedCollective`, in trace order.

  Raises:
    MeshSizeError: if ``len(devices)`` is not the mesh size.
  """
  shape = convert_to_mesh_shape(mesh_shape)
  devices = list(devices)
  if len(devices) != shape.size:
    raise MeshSizeError(
        f"mesh {dims_lib.Shape(shape)!r} has {shape.size} processors but "
        f"{len(devices)} "
        "devices were given; pass the devices the trace was lowered on")
  records = getattr(trace, "collectives", trace)
  cache = {}
  out = []
  for r in records:
    if r.mesh_axes not in cache:
      cache[r.mesh_axes] = _tasks_per_group(shape, devices, r.mesh_axes)
    out.append(ClassifiedCollective(r, cache[r.mesh_axes]))
  return out


def process_spanning_axes(mesh_shape, devices):
  """Names of the mesh axes along which processors sit in several tasks:
  the slow, cross-host links of the mesh."""
  shape = convert_to_mesh_shape(mesh_shape)
  return tuple(d.name for d in shape
               if d.size > 1 and _tasks_per_group(shape, list(devices),
                                                  (d.name,)) > 1)
