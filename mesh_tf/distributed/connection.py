"""The client's connection to a cluster: :func:`connect` and
:class:`Connection`, the only part of :mod:`mesh_tf.distributed` that
imports TensorFlow (lazily, when connecting or running)."""

import contextlib
import threading
import time

from mesh_tf.distributed.cluster import (DEVICE_TASK_RE, convert_to_cluster,
                                         split_address)
from mesh_tf.distributed.errors import (ClusterMeshMismatchError,
                                        ClusterSpecError, StepTimeoutError,
                                        WorkerUnavailableError)
from mesh_tf.distributed.health import (check_health, set_fail_fast_default,
                                        unreachable_tasks)
from mesh_tf.distributed.mesh import mesh_devices


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
      raise WorkerUnavailableError.for_tasks(self.cluster, problems,
                                             time.monotonic() - start)

  def _unavailable(self, error, start):
    """The WorkerUnavailableError for a TF error, or None if no task is
    to blame."""
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    if not isinstance(error, tf.errors.OpError):
      return None
    problems = unreachable_tasks(self.cluster)
    if not problems:
      connection_error = isinstance(error, (
          tf.errors.UnavailableError, tf.errors.AbortedError,
          tf.errors.CancelledError, tf.errors.DeadlineExceededError))
      if not connection_error:
        return None
      text = str(error)
      for m in DEVICE_TASK_RE.finditer(text):
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
    return WorkerUnavailableError.for_tasks(
        self.cluster, problems, time.monotonic() - start,
        f" (TensorFlow said: {_first_line(error)}); restart the worker(s) "
        "and reconnect")

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
    problems = unreachable_tasks(self.cluster)
    if not problems:
      problems = self._probe_tf(min(5.0, timeout_s))
    if problems:
      raise WorkerUnavailableError.for_tasks(
          self.cluster, problems, time.monotonic() - start,
          f"; the run did not finish within {timeout_s:.1f} s")
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
            or unreachable_tasks(cluster, 1.0)):
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
    raise WorkerUnavailableError.for_tasks(
        cluster, {k: "accepts TCP connections, but connecting did not "
                     f"finish within {left:.1f} s"
                  for k in range(cluster.num_tasks)},
        time.monotonic() - start,
        " (not another program) for this cluster")
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
