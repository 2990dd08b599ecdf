"""A jitted JAX training step built from a plan's export, run on 8 fake CPU
devices, and XLA's own numbers for it held against the plan's prediction.

  python examples/jax_train_from_plan.py PLAN.json [PLAN.json ...] \\
      [--steps 3] [--json OUT.json]

For each plan (of the zoo Transformer, ``mtf-layout solve ... --train
--save PLAN.json``): ``autolayout.plans.export.to_jax(plan)`` gives the
mesh, every parameter's stored, compute and gradient ``PartitionSpec`` (by
its ZeRO stage), the blocks to ``jax.checkpoint``, the microbatch count and
the compute dtype.  The step built from it (Adam with decoupled weight
decay, as mesh-tf's) is compiled, run a few times on one batch (the loss
must go down), and checked:

* ``compiled.memory_analysis()``: the parameter and optimizer-state bytes
  per device XLA takes as arguments must equal the plan's exactly; the
  peak (arguments + outputs + temporaries - aliased) is reported as a
  ratio to the plan's predicted peak;
* the collectives of the optimized HLO (kind, replica groups as mesh axes,
  bytes) next to the plan's predicted ones, with each difference listed.

XLA_FLAGS must be set before JAX starts, so run this as its own process.
"""

import argparse
import collections
import json
import os
import re
import sys

os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "")
                           + " --xla_force_host_platform_device_count=8")
os.environ.setdefault("JAX_PLATFORMS", "cpu")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "notebooks"))

import mesh_tf  # noqa: E402,F401  (OR-Tools before TF, as everywhere)
import numpy as np  # noqa: E402

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from jax.sharding import Mesh, NamedSharding, PartitionSpec  # noqa: E402

import jax_transformer  # noqa: E402  pylint: disable=g-import-not-at-top
from autolayout.plans import decisions as plan_decisions  # noqa: E402
from autolayout.plans.export import to_jax  # noqa: E402

HLO_KINDS = {"all-reduce": "allreduce", "all-gather": "allgather",
             "all-to-all": "alltoall", "reduce-scatter": "reduce_scatter",
             "collective-permute": "permute"}
# mtf's names for the collectives XLA names otherwise: an allconcat is an
# all-gather along one dim.
PLAN_KINDS = {"allconcat": "allgather"}
DTYPE_BYTES = {"f32": 4, "bf16": 2, "f16": 2, "s32": 4, "u32": 4, "pred": 1,
               "s8": 1, "u8": 1, "f64": 8, "s64": 8}


def sharding(mesh, spec):
  return NamedSharding(mesh, PartitionSpec(*[
      tuple(a) if isinstance(a, list) else a for a in spec]))


def build_step(spec, mesh, lr=1e-3, b1=0.9, b2=0.999, eps=1e-6):
  """``(jitted step, shardings)`` of the export ``spec``."""
  t = spec["training"]
  cd = jnp.dtype(t["compute_dtype"])
  k, blocks = t["microbatches"], tuple(t["checkpoint"]["blocks"])
  v = t["variables"]
  p_sh = {n: sharding(mesh, r["param"]) for n, r in v.items()}
  o_sh = {n: sharding(mesh, r["optimizer_state"]) for n, r in v.items()}
  c_sh = {n: sharding(mesh, r["compute"]) for n, r in v.items()}
  g_sh = {n: sharding(mesh, r["gradient"]) for n, r in v.items()}
  acts = spec["activations"]
  in_sh = sharding(mesh, acts["inputs"]["partition_spec"])

  def constrain(name, x):
    if name in acts and name not in ("inputs", "targets"):
      return jax.lax.with_sharding_constraint(
          x, sharding(mesh, acts[name]["partition_spec"]))
    return x

  def loss_fn(params, inputs, targets):
    compute = {n: jax.lax.with_sharding_constraint(p.astype(cd), c_sh[n])
               for n, p in params.items()}
    return jax_transformer.forward(compute, inputs, targets, constrain,
                                   blocks)[1]

  def step(params, m, vv, inputs, targets):
    grads, loss = None, 0.0
    for i in range(k):  # microbatches: k passes, gradients summed
      rows = slice(i * inputs.shape[0] // k, (i + 1) * inputs.shape[0] // k)
      inp = jax.lax.with_sharding_constraint(inputs[rows], in_sh)
      tgt = jax.lax.with_sharding_constraint(targets[rows], in_sh)
      li, gi = jax.value_and_grad(loss_fn)(params, inp, tgt)
      gi = {n: jax.lax.with_sharding_constraint(g, g_sh[n])
            for n, g in gi.items()}
      grads = gi if grads is None else {n: grads[n] + gi[n] for n in gi}
      loss = loss + li / k
    new_p, new_m, new_v = {}, {}, {}
    for n, p in params.items():
      g = grads[n] / k
      new_m[n] = b1 * m[n] + (1 - b1) * g
      new_v[n] = b2 * vv[n] + (1 - b2) * g * g
      new_p[n] = p - lr * new_m[n] / (jnp.sqrt(new_v[n]) + eps)
    return new_p, new_m, new_v, loss

  whole = NamedSharding(mesh, PartitionSpec())  # the batch, on every device
  fn = jax.jit(step, in_shardings=(p_sh, o_sh, o_sh, whole, whole),
               out_shardings=(p_sh, o_sh, o_sh, None),
               donate_argnums=(0, 1, 2))
  return fn, p_sh, o_sh


def hlo_collectives(text, mesh):
  """``{(kind, mesh axes): [count, bytes per device]}`` of the optimized
  HLO (the bytes of each collective's result on one device)."""
  pos = {d.id: np.unravel_index(i, mesh.devices.shape)
         for i, d in enumerate(mesh.devices.flat)}
  found = collections.defaultdict(lambda: [0, 0])
  for line in text.splitlines():
    m = re.search(r"= (\(?[^=]*?\)?) (all-reduce|all-gather|all-to-all|"
                  r"reduce-scatter|collective-permute)(-start)?\(", line)
    if not m:
      continue
    size = 0
    for dt, dims in re.findall(r"(\w+)\[([\d,]*)\]", m.group(1)):
      n = int(np.prod([int(x) for x in dims.split(",") if x])) if dims else 1
      size += n * DTYPE_BYTES.get(dt, 4)
    groups = _groups(line, mesh.devices.size)
    axes = set()
    for g in groups:
      coords = np.array([pos[i] for i in g])
      axes |= {a for j, a in enumerate(mesh.axis_names)
               if len(set(coords[:, j])) > 1}
    if axes:
      key = (HLO_KINDS[m.group(2)], tuple(a for a in mesh.axis_names
                                          if a in axes))
      found[key][0] += 1
      found[key][1] += size
  return dict(found)


def _groups(line, n):
  m = re.search(r"replica_groups=\{(\{[\d,\s]*\}(?:,\s*\{[\d,\s]*\})*)\}",
                line)
  if m:
    return [[int(x) for x in g.split(",") if x.strip()]
            for g in re.findall(r"\{([\d,\s]*)\}", m.group(1))]
  m = re.search(r"replica_groups=\[([\d,]+)\]<=\[([\d,]+)\]"
                r"(?:T\(([\d,]+)\))?", line)
  if m:
    ids = np.arange(n).reshape([int(x) for x in m.group(2).split(",")])
    if m.group(3):
      ids = ids.transpose([int(x) for x in m.group(3).split(",")])
    return ids.reshape([int(x) for x in m.group(1).split(",")]).tolist()
  m = re.search(r"source_target_pairs=\{(.*?)\}\s*(,|$)", line)
  if m:
    return [[int(a), int(b)] for a, b in
            re.findall(r"\{(\d+),(\d+)\}", m.group(1))]
  return [list(range(n))]


WHY = {
    "allgather": "XLA gathers a sharded parameter (or a gradient it keeps "
                 "whole) where its consumer needs it; mtf gathers each "
                 "stored weight once per use",
    "allreduce": "XLA reduces a partial sum at once where mtf splits it "
                 "into a reduce-scatter (or the other way round), or sums "
                 "the loss and norms it computes redundantly",
    "reduce_scatter": "XLA fuses an all-reduce followed by a slice into a "
                      "reduce-scatter (the gradient of a stored shard)",
    "alltoall": "XLA reshards between two layouts by an all-to-all",
    "permute": "XLA moves shards point to point to reshard",
}


def check(path, steps):
  plan = plan_decisions.load_plan(path)
  spec = to_jax(plan)
  shape = spec["mesh"]["shape"]
  mesh = Mesh(np.array(jax.devices()[:int(np.prod(shape))]).reshape(shape),
              tuple(spec["mesh"]["axis_names"]))
  t = spec["training"]
  fn, p_sh, o_sh = build_step(spec, mesh)
  params = {n: jax.device_put(v, p_sh[n]) for n, v in
            jax_transformer.init_params(spec["params"]).items()}
  zeros = {n: jax.device_put(np.zeros(r["shape"], np.float32), o_sh[n])
           for n, r in spec["params"].items()}
  m, vv = zeros, {n: jnp.copy(z) for n, z in zeros.items()}
  rows = spec["activations"]["inputs"]["shape"]
  rows = [rows[0] * t["microbatches"]] + rows[1:]
  vocab = spec["params"]["embedding/weights"]["shape"][0]
  rng = np.random.RandomState(0)
  inputs = rng.randint(0, vocab, size=rows).astype(np.int32)
  targets = rng.randint(0, vocab, size=rows).astype(np.int32)
  compiled = fn.lower(params, m, vv, inputs, targets).compile()
  mem = compiled.memory_analysis()
  losses = []
  for _ in range(steps):
    params, m, vv, loss = compiled(params, m, vv, inputs, targets)
    losses.append(float(loss))
  # What the plan predicts: each trainable variable and its Adam slots,
  # per device, from the cost model's trace of the lowering.
  report = plan_decisions.evaluate(plan)
  by_var = report.variable_bytes_per_device
  state = sum(b for n, b in by_var.items()
              if n in spec["params"] or n.rsplit("/", 1)[-1] in
              ("adam_m", "adam_v"))
  inputs_bytes = 2 * inputs.nbytes  # fed whole (replicated) to each device
  xla_state = int(mem.argument_size_in_bytes) - inputs_bytes
  donated = int(mem.alias_size_in_bytes)  # the state, updated in place
  shards = sum(a.addressable_shards[0].data.nbytes
               for tree in (params, m, vv) for a in tree.values())
  xla_peak = int(mem.argument_size_in_bytes + mem.output_size_in_bytes
                 + mem.temp_size_in_bytes - mem.alias_size_in_bytes)
  predicted = collections.defaultdict(lambda: [0, 0])
  for kind, axes, count, nbytes in plan.costs.collectives:
    kind = PLAN_KINDS.get(kind, kind)
    predicted[(kind, tuple(axes))][0] += count
    predicted[(kind, tuple(axes))][1] += nbytes
  xla = hlo_collectives(compiled.as_text(), mesh)
  rows_out, differ = [], []
  for key in sorted(set(predicted) | set(xla)):
    a, b = predicted.get(key, [0, 0]), xla.get(key, [0, 0])
    rows_out.append({"kind": key[0], "mesh_axes": list(key[1]),
                     "plan_count": a[0], "plan_bytes": a[1],
                     "xla_count": b[0], "xla_bytes": b[1]})
    if (a[0] > 0) != (b[0] > 0):
      differ.append({"kind": key[0], "mesh_axes": list(key[1]),
                     "only_in": "plan" if a[0] else "xla",
                     "why": WHY.get(key[0], "")})
  return {
      "plan": path, "decisions": plan.decisions, "mesh": shape,
      "losses": losses,
      "state_bytes": {"plan": int(state), "xla_arguments": xla_state,
                      "xla_aliased": donated, "xla_shards": int(shards)},
      "memory_analysis": {
          "arguments": int(mem.argument_size_in_bytes),
          "outputs": int(mem.output_size_in_bytes),
          "temporaries": int(mem.temp_size_in_bytes),
          "aliased": int(mem.alias_size_in_bytes)},
      "peak": {"plan": int(plan.costs.peak_memory_bytes), "xla": xla_peak,
               "ratio_xla_to_plan": xla_peak / plan.costs.peak_memory_bytes},
      "collectives": rows_out, "collectives_differ": differ,
      "not_expressible": t["not_expressible"],
  }


def main():
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  p.add_argument("plans", nargs="+")
  p.add_argument("--steps", type=int, default=3)
  p.add_argument("--json", help="write the findings here")
  args = p.parse_args()
  results = [check(path, args.steps) for path in args.plans]
  for r in results:
    s, pk = r["state_bytes"], r["peak"]
    print(f"{os.path.basename(r['plan'])}: state/device plan {s['plan']} B, "
          f"XLA arguments {s['xla_arguments']} B; peak plan {pk['plan']} B,"
          f" XLA {pk['xla']} B (x{pk['ratio_xla_to_plan']:.2f}); loss "
          f"{r['losses'][0]:.4f} -> {r['losses'][-1]:.4f}; collectives XLA "
          f"chose differently: "
          + (", ".join(f"{d['kind']} over {'+'.join(d['mesh_axes'])} only in "
                       f"{d['only_in']}" for d in r["collectives_differ"])
             or "none"))
  if args.json:
    with open(args.json, "w", encoding="utf-8") as f:
      json.dump(results, f, indent=1)
  print("JAX-TRAIN-OK")


if __name__ == "__main__":
  main()
