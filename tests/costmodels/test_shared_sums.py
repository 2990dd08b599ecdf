"""An all-reduced sum is one buffer, the group's first device's, read by
every peer and freed by the last (what costmodels.sync_hold's
hold_shared_sums rests on): TF's allocator events of one lowered
all-reduce on 8 logical CPU devices."""

import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))

_MEASURE = '''
import json
import mesh_tf as mtf
mtf.set_logical_cpu_devices(8)
from mesh_tf.lowering.lazy_tf import tf
from benchmarks import allocator_events
from mesh_tf.lowering.tf_private import CallOptions

impl = mtf.PlacementMeshImpl("x:8", "d_ff:x", mtf.logical_cpu_devices(8))
values = [tf.random.normal([16, 64]), tf.random.normal([64, 32]),
          tf.random.normal([32, 64])]


@tf.function
def step(*vs):
  """y = x w sums the split d_ff (an all-reduce); every device reads the
  sum (exp), then a product split over d_ff again."""
  g = mtf.Graph()
  m = mtf.Mesh(g, "m")
  x, w, v = [mtf.import_tf_tensor(m, t, mtf.convert_to_shape(s), name=n)
             for t, s, n in zip(vs, ["batch:16,d_ff:64",
                                     "d_ff:64,d_model:32",
                                     "d_model:32,d_ff:64"], "xwv")]
  y = mtf.einsum([x, w], output_shape="batch:16,d_model:32")
  z = mtf.einsum([mtf.exp(y), v], output_shape="batch:16,d_ff:64")
  low = mtf.Lowering(g, {m: impl})
  return tf.reduce_sum(low.export_to_tf_tensor(z))


options = CallOptions()


def call():
  with options.scope(optimize="light"):
    return step(*values).numpy()


call()
graph = step.get_concrete_function(*values).graph
owners = allocator_events.op_devices(graph)
types = {o.name: o.type for o in graph.get_operations()}
events, (start, end) = allocator_events.profile_step(tf, call)
out = []
for t, alloc, st in events:
  op = st.get("tf_op") or ""
  if alloc and start <= t <= end:
    kind = op.split("/")[-1].rstrip("_0123456789")
    out.append([owners.get(op.split("/")[0], owners.get(op)), kind,
                st["requested_bytes"]])
print(json.dumps([out, sorted(set(types.values()))]))
'''


def test_the_sum_is_one_buffer_that_the_last_reader_frees():
  """``tf.add_n`` on the group's first device and the peers' ``Identity``
  allocate nothing: the sum is device 0's partial, summed in place, and
  every peer reads that buffer.  Each reader of the sum (``exp``) but the
  last allocates its own output; the last one, when every other read is
  done, reuses the sum's buffer in place -- so the buffer lives until the
  slowest peer has read it."""
  env = dict(os.environ, PYTHONPATH=ROOT, TF_CPP_MIN_LOG_LEVEL="3")
  env.pop("TF_CPU_ALLOCATOR_USE_BFC", None)
  out = subprocess.run([sys.executable, "-c", _MEASURE], env=env, cwd=ROOT,
                       capture_output=True, text=True, timeout=120,
                       check=True)
  made, types = json.loads(out.stdout.strip().splitlines()[-1])
  assert {"AddN", "Identity"} <= set(types)
  assert not [m for m in made if m[1] in ("AddN", "Identity")]
  partial = 16 * 32 * 4
  # Every device makes its partial sum (the product's output: a plain
  # matrix product runs as MatMul).
  assert {d for d, kind, n in made
          if kind in ("Einsum", "MatMul") and n == partial} == set(range(8))
  exps = [d for d, kind, n in made if kind == "Exp"]
  assert all(n == partial for _, kind, n in made if kind == "Exp")
  assert len(exps) == len(set(exps)) == 7, made
