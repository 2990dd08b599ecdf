"""The cluster spec: which tasks exist, at which ``host:port`` addresses.

Pure Python: parsing and checking a cluster touches no network and does not
import TensorFlow (only :meth:`Cluster.to_cluster_spec` does).
"""

import dataclasses
import json
import re
from typing import Tuple

from mesh_tf.distributed.errors import ClusterSpecError

_JOB_RE = re.compile(r"^[a-z][a-z0-9_]*$")  # TensorFlow's rule for job names.
_ADDRESS_RE = re.compile(
    r"^(?P<host>\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9][A-Za-z0-9_.\-]*):(?P<port>\d+)$")
# A remote device name, e.g. /job:worker/replica:0/task:1/device:CPU:3.
DEVICE_TASK_RE = re.compile(r"/job:([^/]+)/replica:(\d+)/task:(\d+)")


def split_address(address):
  """``"host:port"`` -> ``(host, port)``; IPv6 hosts go in brackets.

  Raises:
    ClusterSpecError: if the address is not ``host:port`` with a port in
      1..65535.

  Example:
    >>> split_address("[::1]:2222")
    ('::1', 2222)
  """
  m = _ADDRESS_RE.match(str(address).strip())
  port = int(m.group("port")) if m else 0
  if not m or not 1 <= port <= 65535:
    raise ClusterSpecError(
        f"invalid task address {address!r}: write host:port with a port in "
        "1..65535, e.g. 10.0.0.1:2222 or [::1]:2222")
  return m.group("host").strip("[]"), port


@dataclasses.dataclass(frozen=True)
class Cluster:
  """The tasks of a TensorFlow cluster; the mesh lives on job ``job``.

  Args:
    jobs: ``{job name: [host:port, ...]}`` or the equivalent tuple of
      ``(name, addresses)`` pairs; a task's index is its position.
    job: the job whose tasks hold the mesh's devices (default ``worker``).

  Raises:
    ClusterSpecError: for a bad job name or address, an empty job, a repeated
      address, or a ``job`` that is not in ``jobs``.
  """
  jobs: Tuple[Tuple[str, Tuple[str, ...]], ...]
  job: str = "worker"

  def __post_init__(self):
    jobs = self.jobs.items() if isinstance(self.jobs, dict) else self.jobs
    try:
      jobs = tuple(sorted((name, tuple(str(a).strip() for a in addresses))
                          for name, addresses in jobs))
    except (TypeError, ValueError) as e:
      raise ClusterSpecError(
          f"a cluster maps job names to lists of host:port addresses, got "
          f"{self.jobs!r}") from e
    seen = set()
    for name, addresses in jobs:
      if not isinstance(name, str) or not _JOB_RE.match(name):
        raise ClusterSpecError(
            f"invalid job name {name!r}: use lower-case letters, digits and "
            "'_', starting with a letter (e.g. 'worker')")
      if not addresses:
        raise ClusterSpecError(f"job {name!r} has no tasks; list at least "
                               "one host:port address")
      for a in addresses:
        split_address(a)
        if a in seen:
          raise ClusterSpecError(
              f"address {a} appears twice in the cluster; give each task "
              "its own host:port")
        seen.add(a)
    if self.job not in dict(jobs):
      raise ClusterSpecError(
          f"the mesh job {self.job!r} is not in the cluster, whose jobs are "
          f"{[n for n, _ in jobs]}; pass job= one of them")
    object.__setattr__(self, "jobs", jobs)

  @classmethod
  def from_addresses(cls, addresses, job="worker"):
    """A one-job cluster from ``"h:p,h:p"`` or a list of addresses."""
    if isinstance(addresses, str):
      addresses = [a for a in addresses.split(",") if a.strip()]
    return cls(((job, tuple(addresses)),), job)

  @classmethod
  def from_tf_config(cls, config, job=None):
    """The cluster of a TF_CONFIG-style JSON string or dict (task ignored);
    see :func:`parse_tf_config`."""
    return parse_tf_config(config, job)[0]

  @property
  def addresses(self):
    """``host:port`` of each task of the mesh job, in task order."""
    return dict(self.jobs)[self.job]

  @property
  def num_tasks(self):
    """Number of tasks in the mesh job."""
    return len(self.addresses)

  def _check_task(self, task):
    if not 0 <= task < self.num_tasks:
      raise ClusterSpecError(
          f"task {task} is out of range: job {self.job!r} has "
          f"{self.num_tasks} tasks")

  def task_name(self, task):
    """``/job:<job>/replica:0/task:<task>``."""
    self._check_task(task)
    return f"/job:{self.job}/replica:0/task:{task}"

  def device_name(self, task, index, device_type="CPU"):
    """Full name of device ``index`` of ``task``, e.g.
    ``/job:worker/replica:0/task:1/device:CPU:3``."""
    return f"{self.task_name(task)}/device:{device_type}:{index}"

  def describe_task(self, task):
    """``/job:worker/replica:0/task:1 (host:port)``, for messages."""
    return f"{self.task_name(task)} ({self.addresses[task]})"

  def as_dict(self):
    """``{job: [addresses]}``, as ``tf.train.ClusterSpec`` takes it."""
    return {name: list(addresses) for name, addresses in self.jobs}

  def to_tf_config(self, task=None):
    """A TF_CONFIG JSON string, with ``task`` of the mesh job if given."""
    config = {"cluster": self.as_dict()}
    if task is not None:
      self._check_task(task)
      config["task"] = {"type": self.job, "index": task}
    return json.dumps(config)

  def to_cluster_spec(self):
    """The ``tf.train.ClusterSpec`` (imports TensorFlow)."""
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    return tf.train.ClusterSpec(self.as_dict())

  def __repr__(self):
    parts = [f"{name}={list(addresses)!r}" for name, addresses in self.jobs]
    mesh_job = "" if len(self.jobs) == 1 else f", job={self.job!r}"
    return f"Cluster({', '.join(parts)}{mesh_job})"


def parse_tf_config(config, job=None):
  """Reads a TF_CONFIG-style JSON string or dict.

  Args:
    config: ``{"cluster": {job: [addresses]}, "task": {"type": job,
      "index": i}}``; ``task`` is optional.
    job: the mesh job; default the task's type, else ``worker`` if present,
      else the cluster's only job.

  Returns:
    ``(cluster, task_index)``; ``task_index`` is None when the config has no
    task, or its task belongs to another job.

  Raises:
    ClusterSpecError: for invalid JSON or a config without a cluster.

  Example:
    >>> parse_tf_config('{"cluster": {"worker": ["a:1", "b:1"]}, '
    ...                 '"task": {"type": "worker", "index": 1}}')
    (Cluster(worker=['a:1', 'b:1']), 1)
  """
  if isinstance(config, str):
    try:
      config = json.loads(config)
    except json.JSONDecodeError as e:
      raise ClusterSpecError(f"TF_CONFIG is not valid JSON ({e}): "
                             f"{config[:200]!r}") from e
  if not isinstance(config, dict) or not isinstance(config.get("cluster"),
                                                    dict):
    raise ClusterSpecError(
        'TF_CONFIG must be a JSON object with a "cluster" object, e.g. '
        '{"cluster": {"worker": ["host-a:2222", "host-b:2222"]}, '
        '"task": {"type": "worker", "index": 0}}')
  jobs = config["cluster"]
  task = config.get("task") or {}
  if not isinstance(task, dict):
    raise ClusterSpecError(f'TF_CONFIG "task" must be an object, got {task!r}')
  if job is None:
    job = task.get("type") or (
        "worker" if "worker" in jobs or len(jobs) != 1 else next(iter(jobs)))
  cluster = Cluster(jobs, job)
  index = task.get("index")
  if task.get("type", job) != job or index is None:
    return cluster, None
  try:
    index = int(index)
  except (TypeError, ValueError) as e:
    raise ClusterSpecError(f"TF_CONFIG task index must be an integer, got "
                           f"{index!r}") from e
  return cluster, index


def convert_to_cluster(x, job=None):
  """A :class:`Cluster` from a Cluster, ``"h:p,h:p"``, an address list, a
  TF_CONFIG JSON string or dict, or a ``{job: addresses}`` dict."""
  if isinstance(x, Cluster):
    return x if job is None or job == x.job else Cluster(x.jobs, job)
  if isinstance(x, str) and x.lstrip().startswith("{"):
    return parse_tf_config(x, job)[0]
  if isinstance(x, dict):
    if "cluster" in x:
      return parse_tf_config(x, job)[0]
    return Cluster(x, job or "worker")
  if isinstance(x, (str, list, tuple)):
    return Cluster.from_addresses(x, job or "worker")
  raise ClusterSpecError(
      f"cannot make a cluster from {x!r}; pass 'host:port,host:port', a list "
      "of addresses, or TF_CONFIG-style JSON")
