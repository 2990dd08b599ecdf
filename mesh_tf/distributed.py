"""Meshes that span several processes, on TensorFlow's distributed runtime.

A multi-host mesh runs on one TensorFlow gRPC server per task (start each
with ``mtf-worker``, see :mod:`mesh_tf.worker`) and one client process that
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
"""

import contextlib
import dataclasses
import json
import os
import re
import socket
import threading
import time
from typing import NamedTuple, Tuple

from mesh_tf.core import dims as dims_lib
from mesh_tf.core.errors import MeshSizeError, MtfError, UnknownNameError
from mesh_tf.lowering.trace import CollectiveRecord

__all__ = [
    "ClassifiedCollective", "Cluster", "ClusterError",
    "ClusterMeshMismatchError", "ClusterSpecError", "Connection",
    "StepTimeoutError", "WorkerUnavailableError", "check_health",
    "classify_collectives", "connect", "convert_to_cluster", "mesh_devices",
    "parse_tf_config", "process_spanning_axes", "set_fail_fast_default",
    "split_address",
]


# --- errors ------------------------------------------------------------------
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


class StepTimeoutError(ClusterError):
  """A run did not finish in time although every task answers a probe."""


# --- cluster description -------------------------------------------------------
_JOB_RE = re.compile(r"^[a-z][a-z0-9_]*$")  # TensorFlow's rule for job names.
_ADDRESS_RE = re.compile(
    r"^(?P<host>\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9][A-Za-z0-9_.\-]*):(?P<port>\d+)$")
_DEVICE_TASK_RE = re.compile(r"/job:([^/]+)/replica:(\d+)/task:(\d+)")


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


# --- devices of a mesh ---------------------------------------------------------
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
  shape = dims_lib.convert_to_shape(mesh_shape)
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
        f"mesh {shape!r} has {shape.size} processors but job "
        f"{cluster.job!r} has {n} task(s) x {devices_per_task} "
        f"{device_type} device(s) = {total} ({', '.join(cluster.addresses)});"
        f" {fix}")
  return [cluster.device_name(p // devices_per_task, p % devices_per_task,
                              device_type) for p in range(shape.size)]


def _process_of(device):
  """(job, replica, task) of a device name; the client for local names."""
  m = _DEVICE_TASK_RE.search(device)
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
          f"mesh axis {name!r} is not in mesh {shape!r}; classify a trace "
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
  shape = dims_lib.convert_to_shape(mesh_shape)
  devices = list(devices)
  if len(devices) != shape.size:
    raise MeshSizeError(
        f"mesh {shape!r} has {shape.size} processors but {len(devices)} "
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
  shape = dims_lib.convert_to_shape(mesh_shape)
  return tuple(d.name for d in shape
               if d.size > 1 and _tasks_per_group(shape, list(devices),
                                                  (d.name,)) > 1)


# --- health and connection ---------------------------------------------------
def set_fail_fast_default():
  """Makes TensorFlow's gRPC calls fail at once on a broken connection.

  Sets ``GRPC_FAIL_FAST=true`` unless the variable is already set.  With
  TensorFlow's default (``use_caller``), setting up remote execution waits
  for an unreachable task forever; failing fast lets mesh-tf name the task.
  Call it before TensorFlow opens its first remote connection (``connect``
  and ``mtf-worker`` do).
  """
  os.environ.setdefault("GRPC_FAIL_FAST", "true")


def _tcp_probe(address, timeout_s):
  """None if ``address`` accepts a TCP connection, else the OSError."""
  host, port = split_address(address)
  try:
    with socket.create_connection((host, port), timeout=timeout_s):
      return None
  except OSError as e:
    return e


def _describe(cluster, problems, waited_s):
  lines = [f"{cluster.describe_task(k)}: {why}"
           for k, why in sorted(problems.items())]
  return (f"{len(problems)} of {cluster.num_tasks} task(s) of job "
          f"{cluster.job!r} unavailable after {waited_s:.1f} s: "
          + "; ".join(lines) + ". Check that `mtf-worker` runs for each "
          "listed task with the same cluster, and that its port is open")


def check_health(cluster, timeout_s=10.0):
  """Waits until every task of the mesh job accepts connections.

  Probes each task's ``host:port`` over TCP, retrying until all answer or
  ``timeout_s`` has passed (so workers that are still starting are waited
  for).  Pure Python; does not import TensorFlow.

  Raises:
    WorkerUnavailableError: naming each task that did not answer in time.
  """
  cluster = convert_to_cluster(cluster)
  start = time.monotonic()
  deadline = start + timeout_s
  pending = {k: None for k in range(cluster.num_tasks)}
  while True:
    for k in list(pending):
      left = deadline - time.monotonic()
      err = _tcp_probe(cluster.addresses[k], max(0.05, min(2.0, left)))
      if err is None:
        del pending[k]
      else:
        pending[k] = err
    if not pending or time.monotonic() >= deadline:
      break
    time.sleep(min(0.2, max(0.0, deadline - time.monotonic())))
  if pending:
    problems = {k: f"not reachable ({e})" for k, e in pending.items()}
    raise WorkerUnavailableError(
        _describe(cluster, problems, time.monotonic() - start),
        tasks=sorted(pending),
        addresses=[cluster.addresses[k] for k in sorted(pending)])


def _call_with_deadline(fn, timeout_s):
  """Runs ``fn()`` in a daemon thread; returns (done, value, error)."""
  box = {}

  def target():
    try:
      box["value"] = fn()
    except BaseException as e:  # pylint: disable=broad-except
      box["error"] = e
  t = threading.Thread(target=target, name="mesh-tf-distributed", daemon=True)
  t.start()
  t.join(timeout_s)
  if t.is_alive():
    return False, None, None
  return True, box.get("value"), box.get("error")


class Connection:
  """A client's connection to a cluster; made by :func:`connect`.

  Attributes:
    cluster: the :class:`Cluster`.
    device_type: the device type the mesh uses (``CPU``, ``GPU``...).
    devices_per_task: how many of each task's devices a mesh uses.
    timeout_s: default bound of :meth:`run` and :meth:`check_health`.
  """

  def __init__(self, cluster, device_type, devices_per_task, timeout_s):
    self.cluster = cluster
    self.device_type = device_type
    self.devices_per_task = devices_per_task
    self.timeout_s = timeout_s

  def __repr__(self):
    return (f"Connection({self.cluster!r}, {self.devices_per_task} "
            f"{self.device_type} device(s) per task)")

  def mesh_devices(self, mesh_shape):
    """Remote device names for ``mesh_shape``; see :func:`mesh_devices`."""
    return mesh_devices(mesh_shape, self.cluster, self.devices_per_task,
                        self.device_type)

  def _probe_tf(self, timeout_s):
    """Runs a tiny op on every task; returns {task: problem} for failures."""
    from mesh_tf.lowering.lazy_tf import tf
    results = {}

    def probe(k):
      with tf.device(self.cluster.device_name(k, 0, self.device_type)):
        value = tf.reduce_sum(tf.fill([2], k + 1))
      return int(value.numpy())
    threads = []
    for k in range(self.cluster.num_tasks):
      t = threading.Thread(
          target=lambda k=k: results.__setitem__(k, _call_with_deadline(
              lambda: probe(k), timeout_s)), daemon=True)
      t.start()
      threads.append(t)
    deadline = time.monotonic() + timeout_s + 1.0
    problems = {}
    for k, t in enumerate(threads):
      t.join(max(0.0, deadline - time.monotonic()))
      done, value, error = results.get(k, (False, None, None))
      if not done:
        problems[k] = f"did not answer a probe op within {timeout_s:.1f} s"
      elif error is not None:
        problems[k] = f"probe op failed: {_first_line(error)}"
      elif value != 2 * (k + 1):
        problems[k] = f"probe op returned {value}, expected {2 * (k + 1)}"
    return problems

  def check_health(self, timeout_s=None):
    """Checks that every task accepts connections and runs an op.

    Raises:
      WorkerUnavailableError: naming each task that fails, within about
        ``timeout_s`` (default ``self.timeout_s``) seconds.
    """
    timeout_s = self.timeout_s if timeout_s is None else timeout_s
    start = time.monotonic()
    check_health(self.cluster, timeout_s)
    left = max(1.0, timeout_s - (time.monotonic() - start))
    problems = self._probe_tf(left)
    if problems:
      raise WorkerUnavailableError(
          _describe(self.cluster, problems, time.monotonic() - start),
          tasks=sorted(problems),
          addresses=[self.cluster.addresses[k] for k in sorted(problems)])

  def _down_tasks(self, timeout_s=2.0):
    return {k: f"not reachable ({e})"
            for k in range(self.cluster.num_tasks)
            for e in [_tcp_probe(self.cluster.addresses[k], timeout_s)]
            if e is not None}

  def _unavailable(self, error, start):
    """The WorkerUnavailableError for a TF error, or None if no task is
    to blame."""
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    if not isinstance(error, tf.errors.OpError):
      return None
    problems = self._down_tasks()
    if not problems:
      connection_error = isinstance(error, (
          tf.errors.UnavailableError, tf.errors.AbortedError,
          tf.errors.CancelledError, tf.errors.DeadlineExceededError))
      if not connection_error:
        return None
      text = str(error)
      for m in _DEVICE_TASK_RE.finditer(text):
        if m.group(1) == self.cluster.job:
          k = int(m.group(3))
          if 0 <= k < self.cluster.num_tasks:
            problems[k] = "lost during the run"
      for k, a in enumerate(self.cluster.addresses):
        if a in text:
          problems[k] = "lost during the run"
      if not problems:
        problems = {k: "a connection failed during the run"
                    for k in range(self.cluster.num_tasks)}
    return WorkerUnavailableError(
        _describe(self.cluster, problems, time.monotonic() - start)
        + f" (TensorFlow said: {_first_line(error)}); restart the worker(s) "
        "and reconnect", tasks=sorted(problems),
        addresses=[self.cluster.addresses[k] for k in sorted(problems)])

  @contextlib.contextmanager
  def translate_errors(self):
    """Turns a TensorFlow error caused by a lost task into
    :class:`WorkerUnavailableError`; other errors pass unchanged."""
    start = time.monotonic()
    try:
      yield
    except Exception as e:  # pylint: disable=broad-except
      unavailable = self._unavailable(e, start)
      if unavailable is None:
        raise
      raise unavailable from e

  def run(self, fn, *args, timeout_s=None, **kwargs):
    """Calls ``fn(*args, **kwargs)`` (lowering and/or running a step) with a
    bound on its time.

    Returns:
      What ``fn`` returns.

    Raises:
      WorkerUnavailableError: if a task is down or stops answering; it names
        the task(s).  Raised within about ``timeout_s`` seconds plus a few
        seconds of probing (a failed connection is reported at once).
      StepTimeoutError: if ``fn`` runs past ``timeout_s`` though every task
        still answers; raise ``timeout_s`` if the step is just slow.
      Exception: whatever else ``fn`` raises, unchanged.

    A timed-out ``fn`` keeps running in a daemon thread: TensorFlow cannot
    cancel remote eager work from Python.  Reconnect or restart the client.
    """
    timeout_s = self.timeout_s if timeout_s is None else timeout_s
    start = time.monotonic()
    with self.translate_errors():
      done, value, error = _call_with_deadline(
          lambda: fn(*args, **kwargs), timeout_s)
      if error is not None:
        raise error
    if done:
      return value
    problems = self._down_tasks()
    if not problems:
      problems = self._probe_tf(min(5.0, timeout_s))
    if problems:
      raise WorkerUnavailableError(
          _describe(self.cluster, problems, time.monotonic() - start)
          + f"; the run did not finish within {timeout_s:.1f} s",
          tasks=sorted(problems),
          addresses=[self.cluster.addresses[k] for k in sorted(problems)])
    raise StepTimeoutError(
        f"the run did not finish within {timeout_s:.1f} s, though every task "
        f"of {self.cluster!r} answers a probe; pass a larger timeout_s if the "
        "step is just slow")


def _first_line(error):
  text = str(error).strip()
  return text.splitlines()[0] if text else type(error).__name__


def connect(cluster, devices_per_task=None, device_type="CPU",
            timeout_s=30.0, client_address=None):
  """Connects this process, as the client, to the workers of ``cluster``.

  Waits (up to ``timeout_s``) for every task to accept connections, then
  calls ``tf.config.experimental_connect_to_cluster`` (local ops stay on
  this process's devices), checks that each task runs an op and counts its
  devices.  Afterwards, ops placed on ``/job:<job>/replica:0/task:<k>/...``
  devices run on the workers.

  Args:
    cluster: a :class:`Cluster`, ``"host:port,host:port"``, an address list
      or TF_CONFIG-style JSON.
    devices_per_task: how many devices of each task a mesh will use; default
      the number every task exposes.
    device_type: ``CPU`` (``mtf-worker --cpu-devices``), ``GPU``...
    timeout_s: bound of the whole connect, and default bound of
      :meth:`Connection.run`.
    client_address: ``host:port`` at which the workers can reach this
      client, which then joins the cluster as job ``client``.  By default
      TensorFlow serves the client at ``localhost:<free port>``, which the
      workers cannot reach from other hosts; pass a routable address (with
      an open port) when they run elsewhere.

  Returns:
    A :class:`Connection`.

  Raises:
    WorkerUnavailableError: naming each task that does not answer in time.
    ClusterMeshMismatchError: if a task has fewer than ``devices_per_task``
      devices, or tasks expose different numbers and none is given.

  Example:
    >>> conn = connect("host-a:2222,host-b:2222")      # doctest: +SKIP
    >>> devices = conn.mesh_devices("hosts:2;local:4")  # doctest: +SKIP
    >>> impl = mtf.PlacementMeshImpl("hosts:2;local:4", "batch:hosts",
    ...                              devices)           # doctest: +SKIP
    >>> loss = conn.run(step, inputs)                   # doctest: +SKIP
  """
  cluster = convert_to_cluster(cluster)
  jobs, client_job = cluster.as_dict(), "localhost"
  if client_address is not None:
    split_address(client_address)
    if "client" in jobs:
      raise ClusterSpecError(
          "the cluster already has a job named 'client', which connect uses "
          "for client_address; rename that job")
    jobs["client"], client_job = [client_address], "client"
  start = time.monotonic()
  check_health(cluster, timeout_s)
  set_fail_fast_default()
  import tensorflow as tf  # pylint: disable=import-outside-toplevel

  def attach():
    # A worker restarted on the same port answers TCP at once, but the
    # client's gRPC channel to it stays in back-off for a second or two and
    # fails fast meanwhile: retry while every task accepts connections.
    while True:
      try:
        tf.config.experimental_connect_to_cluster(
            tf.train.ClusterSpec(jobs), job_name=client_job, task_index=0,
            protocol="grpc", make_master_device_default=False)
        break
      except tf.errors.UnavailableError:
        if (time.monotonic() - start > timeout_s - 1.0
            or Connection(cluster, device_type, 0, 1.0)._down_tasks(1.0)):  # pylint: disable=protected-access
          raise
        time.sleep(0.5)
    return [d.name for d in tf.config.list_logical_devices(device_type)]
  left = max(1.0, timeout_s - (time.monotonic() - start))
  conn = Connection(cluster, device_type, devices_per_task, timeout_s)
  with conn.translate_errors():
    done, names, error = _call_with_deadline(attach, left)
    if error is not None:
      raise error
  if not done:
    raise WorkerUnavailableError(
        f"connecting to {cluster!r} did not finish within {left:.1f} s "
        "although every task accepts TCP connections; check that each "
        "address runs `mtf-worker` (not another program) for this cluster",
        tasks=range(cluster.num_tasks), addresses=cluster.addresses)
  counts = [sum(1 for n in names if n.startswith(cluster.task_name(k) + "/"))
            for k in range(cluster.num_tasks)]
  if devices_per_task is None:
    if len(set(counts)) != 1:
      raise ClusterMeshMismatchError(
          f"the tasks of job {cluster.job!r} expose different numbers of "
          f"{device_type} devices ({dict(enumerate(counts))}); start every "
          "worker with the same --cpu-devices, or pass devices_per_task")
    conn.devices_per_task = counts[0]
  short = {k: c for k, c in enumerate(counts) if c < conn.devices_per_task}
  if short:
    raise ClusterMeshMismatchError(
        "; ".join(f"{cluster.describe_task(k)} exposes {c} {device_type} "
                  f"device(s) but the mesh needs {conn.devices_per_task} per "
                  "task" for k, c in short.items())
        + f"; restart it with mtf-worker --cpu-devices "
        f"{conn.devices_per_task}, or use a smaller mesh")
  conn.check_health(max(1.0, timeout_s - (time.monotonic() - start)))
  return conn
