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
  parameter and its gradient are sharded on the data axis.

Prints TORCH-TRAIN-OK; raises in a rank (and so here) on any mismatch.
"""

import math
import sys

import torch
import torch.distributed as dist
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
    if rank == 0:
      print(f"TORCH-TRAIN-OK {len(t['variables'])} params, "
            f"{sum(len(m.params) for m, _ in modules)} fully_shard, "
            f"{stored} B stored per device, {k} microbatches", flush=True)
  finally:
    dist.destroy_process_group()


def main(spec_path, expected_path):
  launch(_rank, spec_path, expected_path)


if __name__ == "__main__":
  main(sys.argv[1], sys.argv[2])
