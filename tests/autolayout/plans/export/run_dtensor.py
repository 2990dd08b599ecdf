"""Lays out exported params with real TF DTensor on 8 logical CPU devices
(its own process: logical devices are fixed once TF starts).

``python run_dtensor.py EXPORT.json EXPECTED.json``: EXPORT is
``autolayout.plans.export.to_dtensor(plan)``; EXPECTED is ``{name: [slice shape,
[slice begin per pnum]]}`` from ShapeMeshImpl.  For each param, a full
tensor is relaid out onto the exported ``Layout``; each device's component
must have our slice's shape and values.  Prints DTENSOR-OK.
"""

import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402

import tensorflow as tf  # noqa: E402
from tensorflow.experimental import dtensor  # noqa: E402


def main(spec_path, expected_path):
  with open(spec_path, encoding="utf-8") as f:
    spec = json.load(f)
  with open(expected_path, encoding="utf-8") as f:
    expected = json.load(f)
  shape = spec["mesh"]["shape"]
  n = int(np.prod(shape))
  cpu = tf.config.list_physical_devices("CPU")[0]
  tf.config.set_logical_device_configuration(
      cpu, [tf.config.LogicalDeviceConfiguration()] * n)
  mesh = dtensor.create_mesh(list(zip(spec["mesh"]["axis_names"], shape)),
                             devices=[f"CPU:{i}" for i in range(n)])
  for name, rec in spec["params"].items():
    full = np.arange(int(np.prod(rec["shape"])),
                     dtype=np.float32).reshape(rec["shape"])
    layout = dtensor.Layout(rec["sharding_specs"], mesh)
    replicated = dtensor.Layout.replicated(mesh, rank=len(rec["shape"]))
    t = dtensor.relayout(dtensor.copy_to_mesh(tf.constant(full), replicated),
                         layout)
    assert dtensor.fetch_layout(t) == layout
    want_shape, begins = expected[name]
    parts = dtensor.unpack(t)
    assert len(parts) == n, (name, len(parts))
    for pnum, part in enumerate(parts):
      if list(part.shape) != want_shape:
        raise AssertionError(f"{name}: device {pnum} holds "
                             f"{list(part.shape)}, mtf slices {want_shape}")
      index = tuple(slice(b, b + s) for b, s in zip(begins[pnum],
                                                     want_shape))
      if not np.array_equal(part.numpy(), full[index]):
        raise AssertionError(f"{name}: device {pnum} holds other values "
                             f"than mtf's slice at {begins[pnum]}")
  print(f"DTENSOR-OK {len(spec['params'])} params on {n} devices")


if __name__ == "__main__":
  main(sys.argv[1], sys.argv[2])
