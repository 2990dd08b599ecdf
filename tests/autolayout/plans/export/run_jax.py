"""Runs exported plans in real JAX on 8 fake CPU devices (its own process:
XLA_FLAGS must be set before JAX starts).

``python run_jax.py OUT.json PLAN.json...``: for each plan file, put every
param and named activation on the exported ``NamedSharding`` and compare
each device's shard (shape and offset) with ShapeMeshImpl's slice; jit the
tiny Transformer's forward with the exported in/out shardings and sharding
constraints, compare it with the unsharded forward, and collect the
collectives of the compiled HLO by mesh axes.  Writes the findings to
OUT.json; raises on any mismatch.
"""

import json
import os
import re
import sys

os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "")
                           + " --xla_force_host_platform_device_count=8")
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import mesh_tf  # noqa: E402  (OR-Tools first)
import numpy as np  # noqa: E402

import jax  # noqa: E402
from jax.sharding import Mesh, NamedSharding, PartitionSpec  # noqa: E402

from autolayout.plans import export  # noqa: E402
from tests.autolayout.plans.export import plans  # noqa: E402

sys.path.insert(0, os.path.join(plans.ROOT, "notebooks"))
import jax_transformer  # noqa: E402  pylint: disable=g-import-not-at-top

HLO_KINDS = {"all-reduce": "allreduce", "all-gather": "allgather",
             "all-to-all": "alltoall", "reduce-scatter": "reduce_scatter",
             "collective-permute": "permute"}


def replica_groups(line, n):
  """The replica groups of one HLO collective, as lists of device ids."""
  m = re.search(r"replica_groups=\{(\{[\d,\s]*\}(?:,\s*\{[\d,\s]*\})*)\}",
                line)
  if m:
    return [[int(x) for x in g.split(",") if x.strip()]
            for g in re.findall(r"\{([\d,\s]*)\}", m.group(1))]
  m = re.search(r"replica_groups=\[([\d,]+)\]<=\[([\d,]+)\](?:T\(([\d,]+)\))?",
                line)
  if m:
    groups = [int(x) for x in m.group(1).split(",")]
    ids = np.arange(n).reshape([int(x) for x in m.group(2).split(",")])
    if m.group(3):
      ids = ids.transpose([int(x) for x in m.group(3).split(",")])
    return ids.reshape(groups).tolist()
  m = re.search(r"source_target_pairs=\{(.*?)\}\s*(,|$)", line)
  if m:
    return [[int(a), int(b)] for a, b in
            re.findall(r"\{(\d+),(\d+)\}", m.group(1))]
  return [list(range(n))]


def axes_of(group, mesh):
  """Mesh axis names along which the group's members differ."""
  pos = {d.id: np.unravel_index(i, mesh.devices.shape)
         for i, d in enumerate(mesh.devices.flat)}
  coords = np.array([pos[i] for i in group])
  return tuple(a for k, a in enumerate(mesh.axis_names)
               if len(set(coords[:, k])) > 1)


def hlo_collectives(text, mesh):
  found = set()
  for line in text.splitlines():
    m = re.search(r"= \S+ (all-reduce|all-gather|all-to-all|reduce-scatter|"
                  r"collective-permute)(-start)?\(", line)
    if not m:
      continue
    for g in replica_groups(line, mesh.devices.size):
      axes = axes_of(g, mesh)
      if axes:
        found.add((HLO_KINDS[m.group(1)], axes))
  return found


def check_shards(spec, mesh, expected, section):
  for name, rec in spec[section].items():
    want_shape, begins = expected[name]
    sharding = NamedSharding(mesh, PartitionSpec(*[
        tuple(a) if isinstance(a, list) else a
        for a in rec["partition_spec"]]))
    arr = jax.device_put(np.zeros(rec["shape"], np.float32), sharding)
    where = {d.id: i for i, d in enumerate(mesh.devices.flat)}
    for shard in arr.addressable_shards:
      pnum = where[shard.device.id]
      got = list(shard.data.shape)
      if got != want_shape:
        raise AssertionError(f"{section} {name}: device {pnum} holds "
                             f"{got}, mtf slices {want_shape}")
      start = [s.start or 0 for s in shard.index]
      if start != begins[pnum]:
        raise AssertionError(f"{section} {name}: device {pnum} starts at "
                             f"{start}, mtf's slice at {begins[pnum]}")
  return len(spec[section])


def run_forward(plan, spec, mesh):
  def sharding(rec):
    # A dim over several axes is a list in the spec, a tuple in JAX.
    return NamedSharding(mesh, PartitionSpec(*[
        tuple(a) if isinstance(a, list) else a
        for a in rec["partition_spec"]]))
  acts = spec["activations"]
  params = jax_transformer.init_params(spec["params"])
  p_sh = {n: sharding(r) for n, r in spec["params"].items()}
  rng = np.random.RandomState(1)
  vocab = spec["params"]["embedding/weights"]["shape"][0]
  shape = acts["inputs"]["shape"]
  inputs = rng.randint(0, vocab, size=shape).astype(np.int32)
  targets = rng.randint(0, vocab, size=shape).astype(np.int32)

  def constrain(name, x):
    return jax.lax.with_sharding_constraint(x, sharding(acts[name]))

  fn = jax.jit(lambda p, i, t: jax_transformer.forward(p, i, t, constrain),
               in_shardings=(p_sh, sharding(acts["inputs"]),
                             sharding(acts["targets"])),
               out_shardings=(sharding(acts["logits"]),
                              sharding(acts["loss"])))
  compiled = fn.lower(params, inputs, targets).compile()
  logits, loss = compiled(params, inputs, targets)
  ref_logits, ref_loss = jax.jit(jax_transformer.forward)(params, inputs,
                                                          targets)
  np.testing.assert_allclose(np.asarray(logits), np.asarray(ref_logits),
                             rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(float(loss), float(ref_loss), rtol=1e-5)
  if logits.sharding.spec != sharding(acts["logits"]).spec:
    raise AssertionError(f"logits came back as {logits.sharding}")
  return compiled.as_text(), float(loss)


def main(out_path, plan_paths):
  results = {}
  for path in plan_paths:
    plan = mesh_tf.load_plan(path, plans.tiny_model()[0].graph)
    spec = export.to_jax(plan)
    mesh = Mesh(np.array(jax.devices()[:plan.mesh_shape.size]).reshape(
        spec["mesh"]["shape"]), tuple(spec["mesh"]["axis_names"]))
    n_params = check_shards(spec, mesh, plans.expected_slices(plan),
                            "params")
    n_acts = check_shards(spec, mesh,
                          plans.expected_slices(plan, "activations"),
                          "activations")
    hlo, loss = run_forward(plan, spec, mesh)
    results[path] = {
        "params": n_params, "activations": n_acts, "loss": loss,
        "hlo_collectives": sorted([k, list(a)] for k, a in
                                  hlo_collectives(hlo, mesh)),
        "predicted": sorted([k, list(a)] for k, a, _, _ in
                            plan.costs.collectives)}
  with open(out_path, "w", encoding="utf-8") as f:
    json.dump(results, f, indent=1)
  print("JAX-OK")


if __name__ == "__main__":
  main(sys.argv[1], sys.argv[2:])
