"""Distributes exported params with real PyTorch DTensor on a CPU
DeviceMesh: one gloo process per mesh position, on 127.0.0.1.

``python run_torch.py EXPORT.json EXPECTED.json``: EXPORT is
``autolayout.plans.export.to_torch(plan)``; EXPECTED is ``{name: [slice shape,
[slice begin per pnum]]}`` from ShapeMeshImpl.  Every rank builds the same
full tensor, calls ``distribute_tensor`` with the exported placements, and
checks that its local shard has our slice's shape and values.  Prints
TORCH-OK; raises in a rank (and so here) on any mismatch.
"""

import json
import math
import socket
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Replicate, Shard, distribute_tensor


def _placement(p):
  return Shard(p["shard"]) if "shard" in p else Replicate()


def _rank(rank, world, port, spec, expected):
  torch.set_num_threads(1)
  dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}",
                          rank=rank, world_size=world)
  try:
    mesh = init_device_mesh("cpu", tuple(spec["mesh"]["shape"]),
                            mesh_dim_names=tuple(spec["mesh"]["axis_names"]))
    for name, rec in spec["params"].items():
      shape = rec["shape"]
      full = torch.arange(int(torch.tensor(shape).prod()),
                          dtype=torch.float32).reshape(shape)
      local = distribute_tensor(full, mesh, [
          _placement(p) for p in rec["placements"]]).to_local()
      want_shape, begins = expected[name]
      if list(local.shape) != want_shape:
        raise AssertionError(f"rank {rank}: {name} local shard "
                             f"{list(local.shape)}, mtf slice {want_shape}")
      index = tuple(slice(b, b + s) for b, s in zip(begins[rank],
                                                     want_shape))
      if not torch.equal(local, full[index]):
        raise AssertionError(f"rank {rank}: {name} holds other values than "
                             f"mtf's slice at {begins[rank]}")
  finally:
    dist.destroy_process_group()


def launch(rank, spec_path, expected_path):
  """Runs ``rank(r, world, port, spec, expected)`` on one forked gloo
  process per mesh position (``world`` of them, a free 127.0.0.1 port);
  returns ``(spec, world)``.  Shared with ``run_torch_training.py``."""
  with open(spec_path, encoding="utf-8") as f:
    spec = json.load(f)
  with open(expected_path, encoding="utf-8") as f:
    expected = json.load(f)
  world = math.prod(spec["mesh"]["shape"])
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
  # fork: the ranks share the parent's imported torch instead of importing
  # it again each (seconds apiece on a small machine).  Nothing here has
  # started a thread pool yet, so forking is safe.
  mp.start_processes(rank, args=(world, port, spec, expected),
                     nprocs=world, join=True, start_method="fork")
  return spec, world


def main(spec_path, expected_path):
  spec, world = launch(_rank, spec_path, expected_path)
  print(f"TORCH-OK {len(spec['params'])} params on {world} ranks")


if __name__ == "__main__":
  main(sys.argv[1], sys.argv[2])
