"""TensorFlow's host-memory allocator: mesh-tf asks for its BFC allocator.

Why: a lowered step on logical CPU devices is thousands of small kernels
(the Session-mode Transformer of ``benchmarks/mtf_port.py``: 11,500 per
8-layer step), each allocating its output.  By default TF takes host memory
from ``malloc``; profiled with ``perf`` on that step, glibc's allocator
(``_int_malloc``, ``_int_free``, ``malloc_consolidate``, ...) was 11% of the
process's CPU time, and a second executor thread freeing what the first
allocated makes them contend (``MALLOC_ARENA_MAX=1``, one shared arena, made
the step 1.2-1.9x slower).  TF's own best-fit-with-coalescing allocator keeps
freed chunks for reuse without those locks.

How: TF reads ``TF_CPU_ALLOCATOR_USE_BFC`` once, when it first makes its CPU
allocator (the first Session, eager context or device listing).
``import mesh_tf`` sets it to ``true`` unless it is already set, so a user's
own choice wins: run with ``TF_CPU_ALLOCATOR_USE_BFC=false`` to keep
``malloc``.  Importing mesh_tf after TF has made its allocator changes
nothing.  The BFC allocator grows as needed and keeps what it took for
reuse, so a process's resident memory stays near its peak; TF caps it with
``TF_CPU_BFC_MEM_LIMIT_IN_MB`` (64 GiB unless set).

Pure Python; imports nothing of TensorFlow.
"""

import os

__all__ = ["ENV_VAR", "request_bfc"]

#: The environment variable TensorFlow reads.
ENV_VAR = "TF_CPU_ALLOCATOR_USE_BFC"


def request_bfc(environ=None):
  """Asks TF for its BFC host allocator unless the environment chose.

  Args:
    environ: the mapping to set (``os.environ`` unless given).

  Returns:
    The value TF will read: ``"true"``, or the user's own setting.
  """
  environ = os.environ if environ is None else environ
  return environ.setdefault(ENV_VAR, "true")
