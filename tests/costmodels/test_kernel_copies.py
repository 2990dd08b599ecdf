"""The buffers an op's slice kernel makes besides its output
(costmodels.kernel_copies): the memory model's bytes per device against
what TF's BFC allocator records for one op lowered on 8 logical CPU
devices, and the copies in the liveness at their op's step alone."""

import json
import os
import subprocess
import sys

import mesh_tf as mtf
from costmodels import kernel_copies, memory
from mesh_tf.lowering.kernel_copies import einsum_copies

#: oneDNN's fixed scratch beside a product (see the test below).
SCRATCH = 12 * 1024

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))

#: Each case: (name, mesh, layout).  The graphs are built by _build, the
#: same code in this process and in the measuring one.
CASES = [
    ("attention", "rows:2;cols:4", "batch:rows;length:cols"),
    ("attention", "x:8", "length:x"),
    ("weight_grad", "x:8", "d_ff:x"),
    ("weight_grad", "x:8", "batch:x"),
    ("matmul", "x:8", "batch:x"),
    ("conv", "x:8", ""),
    ("conv", "x:8", "depth:x"),
    ("conv", "rows:2;cols:4", "depth:rows;height:cols"),
]

_BUILD = '''
import numpy as np
import mesh_tf as mtf


def _build(name, mesh, values=None):
  """(inputs' mtf tensors, the op's output): the op alone, its inputs
  imported (from ``values`` when given)."""
  shapes = {
      "attention": ["batch:2,length:64,heads:4,d_kv:16",
                    "batch:2,memory:64,heads:4,d_kv:16"],
      "weight_grad": ["batch:256,d_model:64", "batch:256,d_ff:32"],
      "matmul": ["batch:256,d_model:64", "d_model:64,d_ff:32"],
      "conv": ["batch:2,depth:16,height:8,width:8,channels:4",
               "fd:3,fh:3,fw:3,channels:4,filters:8"],
  }[name]
  xs = []
  for i, s in enumerate(shapes):
    shape = mtf.convert_to_shape(s)
    v = (np.zeros(shape.to_integer_list(), np.float32) if values is None
         else values[i])
    xs.append(mtf.import_tf_tensor(mesh, v, shape, name=f"in{i}"))
  if name == "conv":
    y = mtf.conv3d(xs[0], xs[1], padding="SAME")
  elif name == "attention":
    y = mtf.einsum(xs, output_shape="batch:2,length:64,heads:4,memory:64")
  elif name == "weight_grad":
    y = mtf.einsum(xs, output_shape="d_model:64,d_ff:32")
  else:
    y = mtf.einsum(xs, output_shape="batch:256,d_ff:32")
  return xs, y
'''

_MEASURE = _BUILD + '''
import json, sys
mtf.set_logical_cpu_devices(8)
from mesh_tf.lowering.lazy_tf import tf
from benchmarks import allocator_events
from mesh_tf.lowering.tf_private import CallOptions

#: The kernels that make each op's buffers, by TF op type.
#: A plain product runs as MatMul in a tf.function (einsum_kernels), a
#: batched one as Einsum.
KERNELS = {"attention": ("Einsum",), "weight_grad": ("MatMul",),
           "matmul": ("MatMul",), "conv": ("Pad", "concat")}
options = CallOptions()


def light(f, *args):
  """``f(*args)`` with grappler's light passes, as TrainStep calls."""
  with options.scope(optimize="light"):
    return f(*args).numpy()

out = []
for name, mesh_shape, layout in json.loads(sys.argv[1]):
  n = mtf.convert_to_shape(mesh_shape).size
  impl = mtf.PlacementMeshImpl(mesh_shape, layout, mtf.logical_cpu_devices(n))
  graph = mtf.Graph()
  mesh = mtf.Mesh(graph, "m")
  probe, _ = _build(name, mesh)
  values = [tf.random.normal(x.shape.to_integer_list()) for x in probe]

  @tf.function
  def step(*vs):
    g = mtf.Graph()
    m = mtf.Mesh(g, "m")
    _, y = _build(name, m, vs)
    low = mtf.Lowering(g, {m: impl})
    return tf.reduce_sum(low.export_to_tf_tensor(y))
  light(step, *values)
  graph = step.get_concrete_function(*values).graph
  owners = allocator_events.op_devices(graph)
  events, (start, end) = allocator_events.profile_step(
      tf, lambda: light(step, *values))
  made = {}
  for t, alloc, st in events:
    op = st.get("tf_op") or ""
    if (alloc and start <= t <= end
        and op.split("/")[-1].startswith(KERNELS[name])
        and op.split("/")[0] != op):   # the import's and export's own
      d = owners.get(op.split("/")[0], owners.get(op))
      made.setdefault(d, []).append(st["requested_bytes"])
  out.append({str(d): b for d, b in made.items()})
print(json.dumps(out))
'''


def _measured():
  env = dict(os.environ, PYTHONPATH=ROOT, TF_CPP_MIN_LOG_LEVEL="3")
  env.pop("TF_CPU_ALLOCATOR_USE_BFC", None)
  out = subprocess.run([sys.executable, "-c", _MEASURE, json.dumps(CASES)],
                       env=env, cwd=ROOT, capture_output=True, text=True,
                       timeout=120, check=True)
  return json.loads(out.stdout.strip().splitlines()[-1])


def _predicted(name, mesh_shape, layout):
  """(bytes per device of the op's kernel copies, of its output)."""
  namespace = {}
  exec(_BUILD, namespace)   # pylint: disable=exec-used
  graph = mtf.Graph()
  mesh = mtf.Mesh(graph, "m")
  _, y = namespace["_build"](name, mesh)
  copies = kernel_copies.copies_of(y.operation)
  rules = mtf.convert_to_layout_rules(layout)
  mesh_shape = mtf.convert_to_shape(mesh_shape)
  return (sum(memory._slice_bytes(c, mesh_shape, rules) for c in copies),
          memory._slice_bytes(y, mesh_shape, rules))


def test_each_kernel_copy_is_what_the_allocator_records_on_every_device():
  """An einsum's kernel allocates its output and the copies the model
  names, each of its slice's bytes, and oneDNN's scratch buffer of a
  fixed few kB (9.5 kB beside a batched product, 1.4-5.6 kB beside a
  plain one), which the model leaves out.  A convolution's largest
  padding buffer (the ``Pad``, or the halo exchange's last ``concat``
  where every padded dim is split) is the zero-padded, halo-extended input
  the model prices; the ``concat`` before a ``Pad`` is not priced."""
  measured = _measured()
  for (name, mesh_shape, layout), by_device in zip(CASES, measured):
    copies, output = _predicted(name, mesh_shape, layout)
    # Every device computes a split op; a replicated one's result is read
    # from its first device alone, and pruning drops the others' kernels.
    assert len(by_device) == (mtf.convert_to_shape(mesh_shape).size
                              if layout else 1)
    for d, sizes in by_device.items():
      what = f"{name} on {mesh_shape} under {layout!r}, device {d}"
      if name == "conv":
        assert max(sizes) == copies, (what, sizes, copies)
        continue
      made = sum(sizes) - output
      assert copies <= made <= copies + SCRATCH, (what, sizes, copies)


def test_einsum_copies_follow_the_kernel_plan():
  assert einsum_copies("abc,cd->abd") == ()        # one matmul, as laid out
  assert einsum_copies("abcd,abd->abc") == ()      # one batched matmul
  assert einsum_copies("ab,ac->bc") == ()         # tf.matmul, transpose_a
  assert einsum_copies("ac,ab->bc") == ()          # operands swapped
  assert einsum_copies("abcd,aecd->abce") == ("a", "b", "out")
  assert einsum_copies("abcd,bed->abce") == ("a", "out")
  assert einsum_copies("ba,b->ab") == ("a",)       # broadcast product
  assert einsum_copies("ab->a") == ()


def test_copies_live_at_their_ops_step_alone_and_count_as_activations():
  g = mtf.Graph()
  mesh = mtf.Mesh(g, "m")
  q = mtf.zeros(mesh, "b:8,l:16,h:4,k:8")
  k = mtf.zeros(mesh, "b:8,m:16,h:4,k:8")
  s = mtf.einsum([q, k], output_shape="b:8,l:16,h:4,m:16")
  live = memory.liveness(g)
  copies = [(t, a, b) for t, a, b in live.intervals
            if isinstance(t, kernel_copies.KernelCopy)]
  step = list(live.step_ops).index(s.operation)
  assert [(t.shape, a, b) for t, a, b in copies] == [
      (q.shape, step, step), (k.shape, step, step), (s.shape, step, step)]
  assert {memory.tensor_category(t) for t, _, _ in copies} == {"activations"}
  # At the einsum: both inputs, the output, and the three copies.
  prof = memory.memory_profile(g, "x:2", "b:x", liveness_plan=live)
  assert prof.bytes_by_step[step] == (
      4 * memory.tensor_bytes_per_device(q, "x:2", "b:x")
      + 2 * memory.tensor_bytes_per_device(s, "x:2", "b:x"))
