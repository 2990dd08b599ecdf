"""Applies a training plan's PyTorch export in real PyTorch: 8 gloo ranks
on a CPU DeviceMesh.

``python run_torch_training.py EXPORT.json EXPECTED.json``: EXPORT is
``to_torch(plan)`` of a training plan; EXPECTED holds ``param_bytes``, the
plan's per-device bytes of the stored parameters.  Every rank:

* distributes each parameter with its tensor-parallel placements and
  checks the local shard is the compute slice;
* distributes it with its stored placements and sums the bytes, which
  must equal the plan's;
* applies ``fully_shard`` (FSDP2) with the export's settings
  (``reshard_after_forward``, ``MixedPrecisionPolicy``) to the parameters
  of each ZeRO stage, runs the export's microbatches as gradient
  accumulation (gradient sync only on the last), and checks every
  parameter and its gradient are sharded on the data axis;
* applies the export's activation checkpointing: a model of one block per
  layer of the plan, each block the export lists wrapped in
  ``checkpoint_wrapper`` (and the model in ``fully_shard`` when the plan
  shards), and checks that exactly those blocks run their forward again
  in the backward pass, with the loss and gradients of the same model
  without checkpointing.

Prints TORCH-TRAIN-OK; raises in a rank (and so here) on any mismatch.
"""

import math
import sys

import torch
import torch.distributed as dist
from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import (
    checkpoint_wrapper)
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
from torch.distributed.tensor import Replicate, Shard, distribute_tensor

from run_torch import launch  # this folder: the script's own sys.path[0]

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16,
          "float16": torch.float16}


def _placements(ps):
  return [Shard(p["shard"]) if "shard" in p else Replicate() for p in ps]


class Group(torch.nn.Module):
  """The parameters of one fully_shard setting; forward: a loss that
  touches each of them."""

  def __init__(self, shapes, seed):
    super().__init__()
    g = torch.Generator().manual_seed(seed)
    self.params = torch.nn.ParameterList(
        [torch.nn.Parameter(torch.randn(s, generator=g)) for s in shapes])

  def forward(self, scale):
    return sum((p.float() * scale).square().mean() for p in self.params)


class Block(torch.nn.Module):
  """A stand-in for one layer of the plan: counts its forward runs."""

  def __init__(self, width, seed):
    super().__init__()
    g = torch.Generator().manual_seed(seed)
    self.w = torch.nn.Parameter(torch.randn(width, width, generator=g) / 4)
    self.runs = 0

  def forward(self, x):
    self.runs += 1
    return x + torch.tanh(x @ self.w)


def _layers(t):
  """The plan's layer blocks (``layer_<i>``), in order."""
  return sorted({n.split("/")[0] for n in t["variables"]
                 if n.startswith("layer_")}, key=lambda b: int(b[6:]))


def _check_checkpointing(t, mesh, fsdp_dims):
  """Applies the export's activation checkpointing (module docstring);
  returns how many blocks recompute."""
  listed = set(t["activation_checkpointing"]["blocks"])
  names = _layers(t)
  if not listed <= set(names):
    raise AssertionError(f"checkpointed blocks {sorted(listed)} are not "
                         f"layers of the plan {names}")
  width = 8

  def model():
    return torch.nn.Sequential(*[Block(width, i) for i in range(len(names))])
  x = torch.randn(4, width, generator=torch.Generator().manual_seed(7))
  ref = model()
  ref(x).square().mean().backward()
  blocks = model()
  wrapped = torch.nn.Sequential(*[
      checkpoint_wrapper(b) if n in listed else b
      for n, b in zip(names, blocks)])
  if fsdp_dims:
    fully_shard(wrapped, mesh=mesh[fsdp_dims[0]] if len(fsdp_dims) == 1
                else mesh[fsdp_dims]._flatten())
  loss = wrapped(x).square().mean()
  loss.backward()
  want = ref(x).square().mean()
  if not torch.allclose(loss.detach(), want.detach()):
    raise AssertionError(f"checkpointed loss {float(loss)} != {float(want)}")
  for n, b, r in zip(names, blocks, ref):
    runs = 2 if n in listed else 1
    if b.runs != runs:
      raise AssertionError(f"{n} ran forward {b.runs} times, not {runs} "
                           f"({'checkpointed' if n in listed else 'kept'})")
    grad = b.w.grad
    grad = grad.full_tensor() if hasattr(grad, "full_tensor") else grad
    if not torch.allclose(grad, r.w.grad, atol=1e-6):
      raise AssertionError(f"{n}: gradient differs under checkpointing")
  return len(listed)


def _rank(rank, world, port, spec, expected):
  torch.set_num_threads(1)
  dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}",
                          rank=rank, world_size=world)
  try:
    names, sizes = spec["mesh"]["axis_names"], spec["mesh"]["shape"]
    mesh = init_device_mesh("cpu", tuple(sizes), mesh_dim_names=tuple(names))
    t = spec["training"]
    stored = 0
    groups = {}
    for name, v in t["variables"].items():
      shape = spec["params"][name]["shape"]
      full = torch.arange(math.prod(shape), dtype=torch.float32).reshape(
          shape)
      local = distribute_tensor(full, mesh, _placements(
          v["tensor_parallel"])).to_local()
      want = list(shape)
      for m, p in enumerate(v["tensor_parallel"]):
        if "shard" in p:
          want[p["shard"]] //= sizes[m]
      if list(local.shape) != want:
        raise AssertionError(f"{name}: TP shard {list(local.shape)}, "
                             f"compute slice {want}")
      stored += distribute_tensor(full, mesh, _placements(
          v["stored"])).to_local().numel() * 4
      fs = v["fully_shard"]
      if fs is not None:
        key = (tuple(fs["mesh_dims"]), fs["reshard_after_forward"])
        groups.setdefault(key, []).append(shape)
    if stored != expected["param_bytes"]:
      raise AssertionError(f"rank {rank}: stored params {stored} B per "
                           f"device, the plan's {expected['param_bytes']}")
    mp_policy = MixedPrecisionPolicy(
        param_dtype=DTYPES[t["mixed_precision"]["param_dtype"]],
        reduce_dtype=DTYPES[t["mixed_precision"]["reduce_dtype"]])
    modules = []
    for i, ((dims, reshard), shapes) in enumerate(sorted(groups.items())):
      mod = Group(shapes, seed=i)
      fully_shard(mod, mesh=mesh[dims[0]] if len(dims) == 1 else
                  mesh[dims]._flatten(), reshard_after_forward=reshard,
                  mp_policy=mp_policy)
      modules.append((mod, sizes[names.index(dims[0])] if len(dims) == 1
                      else math.prod(sizes[names.index(d)] for d in dims)))
    k = t["gradient_accumulation"]["microbatches"]
    for i in range(k):
      for mod, _ in modules:
        mod.set_requires_gradient_sync(i == k - 1)
      loss = sum(mod(float(i + 1)) for mod, _ in modules)
      loss.backward()
    for mod, n in modules:
      for p in mod.params:
        if p.placements != (Shard(0),):
          raise AssertionError(f"param placed {p.placements}")
        full0 = p.shape[0]
        if p.to_local().shape[0] != -(-full0 // n) and full0 % n == 0:
          raise AssertionError(f"local shard {tuple(p.to_local().shape)} "
                               f"of {tuple(p.shape)} over {n}")
        if p.grad is None or p.grad.placements != (Shard(0),):
          raise AssertionError("no sharded gradient")
    fsdp_dims = sorted({d for v in t["variables"].values()
                        if v["fully_shard"] for d in v["fully_shard"][
                            "mesh_dims"]}, key=names.index)
    recomputed = _check_checkpointing(t, mesh, fsdp_dims)
    if rank == 0:
      print(f"TORCH-CHECKPOINT-OK {recomputed} of {len(_layers(t))} blocks "
            "checkpointed (forward again in backward), same loss and "
            "gradients", flush=True)
      print(f"TORCH-TRAIN-OK {len(t['variables'])} params, "
            f"{sum(len(m.params) for m, _ in modules)} fully_shard, "
            f"{stored} B stored per device, {k} microbatches", flush=True)
  finally:
    dist.destroy_process_group()


def main(spec_path, expected_path):
  launch(_rank, spec_path, expected_path)


if __name__ == "__main__":
  main(sys.argv[1], sys.argv[2])
