"""The errors of multi-process meshes, all subclasses of ``mtf.MtfError``."""

from mesh_tf.core.errors import MeshSizeError, MtfError


class ClusterError(MtfError):
  """A problem with the cluster that a multi-process mesh runs on."""


class ClusterSpecError(ClusterError):
  """A cluster spec, address or TF_CONFIG is malformed."""


class ClusterMeshMismatchError(ClusterError, MeshSizeError):
  """The cluster's tasks and devices do not match the mesh shape."""


class WorkerUnavailableError(ClusterError):
  """A worker task is down, unreachable, or does not answer.

  Attributes:
    tasks: indices (in the mesh job) of the tasks found unavailable.
    addresses: their ``host:port`` addresses.
  """

  def __init__(self, message, tasks=(), addresses=()):
    super().__init__(message)
    self.tasks = tuple(tasks)
    self.addresses = tuple(addresses)

  @classmethod
  def for_tasks(cls, cluster, problems, waited_s, detail=""):
    """The error naming each task of ``problems`` and why it failed.

    Args:
      cluster: the :class:`~mesh_tf.distributed.Cluster`.
      problems: ``{task index: why}``, e.g. ``{1: "not reachable (...)"}``.
      waited_s: how long the caller waited before giving up.
      detail: text appended to the message (what was being done).
    """
    tasks = sorted(problems)
    lines = [f"{cluster.describe_task(k)}: {problems[k]}" for k in tasks]
    message = (f"{len(problems)} of {cluster.num_tasks} task(s) of job "
               f"{cluster.job!r} unavailable after {waited_s:.1f} s: "
               + "; ".join(lines) + ". Check that `mtf-worker` runs for each "
               "listed task with the same cluster, and that its port is open"
               + detail)
    return cls(message, tasks=tasks,
               addresses=[cluster.addresses[k] for k in tasks])


class StepTimeoutError(ClusterError):
  """A run did not finish in time although every task answers a probe."""
