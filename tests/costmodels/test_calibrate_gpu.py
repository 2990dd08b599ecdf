"""The GPU path of calibration, on CPU: what ``calibrate(gpus=1)`` fits
from its probes' timings -- matmul throughput per dtype, memory
bandwidth, the launch cost of a kernel and of a step -- recovered from
synthetic timings of one GPU made from known parameters, written into a
``gpu`` chip and round-tripped through the topology file.  The measuring
side runs only where TensorFlow sees a GPU (see test_gpu_memory.py)."""

import pytest

import costmodels
from costmodels.calibrate import calibration, topology_file
from costmodels.calibrate.measure import make_plan
from costmodels.calibrate.timings import Sample

PEAK = {"float32": 5e13, "bfloat16": 4e14, "float16": 4.2e14}
BANDWIDTH, LAUNCH, STEP = 2.5e12, 6e-6, 4e-4
INFO = {"devices": ["/job:localhost/replica:0/task:0/device:GPU:0"],
        "device_types": ["GPU"], "gpu_name": "NVIDIA H100 80GB HBM3",
        "memory_bytes_per_device": 80 * 2**30}


def _gpu_samples():
  out = []
  for dtype, peak in PEAK.items():
    for flops in (2**30, 2**33, 2**36):
      out.append(Sample("matmul", "", 1, 0, float(flops),
                        LAUNCH + flops / peak, dtype=dtype))
  for nbytes in (2**24, 2**27, 2**30):
    out.append(Sample("elementwise", "", 1, nbytes, 0.0,
                      LAUNCH + nbytes / BANDWIDTH))
  out.append(Sample("launch", "", 1, 4, 1.0, LAUNCH))
  # Reference steps of three depths: a step's own cost and a few kernels
  # a record.
  out += [Sample("step", "", 1, 0, float(n), STEP + n * 3 * LAUNCH)
          for n in (14, 50, 98)]
  return out


def test_one_gpu_fits_peaks_per_dtype_bandwidth_and_launch_costs(tmp_path):
  topo, rows = calibration.fit_topology(_gpu_samples(), INFO, "h100")
  chip = topo.chip
  assert chip.kind == "gpu" and chip.name == INFO["gpu_name"]
  assert chip.hbm_bytes == INFO["memory_bytes_per_device"]
  assert chip.peak_bf16_flops_per_s == pytest.approx(PEAK["float32"],
                                                     rel=1e-6)
  for dtype, peak in PEAK.items():
    assert dict(chip.matmul_flops_by_dtype)[dtype] == pytest.approx(
        peak, rel=0.05), dtype
  assert chip.hbm_bandwidth_bytes_per_s == pytest.approx(BANDWIDTH,
                                                         rel=1e-6)
  # The launch cost: the reference steps' slope per record where it is
  # above one kernel's (three kernels a record here).
  assert chip.launch_overhead_s == pytest.approx(3 * LAUNCH, rel=1e-6)
  assert chip.shared_compute_factor == 1.0
  assert chip.step_overhead_s == pytest.approx(STEP, rel=1e-6)
  assert {"einsum", "elementwise", "launch", "step"} <= {r[0] for r in rows}
  # One GPU: one device dimension, no collective to fit.
  assert [d.size for d in topo.dims] == [1]
  path = tmp_path / "h100.json"
  topology_file.write_topology(path, topo)
  assert costmodels.get_topology(str(path)) == topo
  # A bfloat16 einsum is priced at its own peak.
  import mesh_tf as mtf
  g = mtf.Graph()
  mesh = mtf.Mesh(g, "m")
  x = mtf.zeros(mesh, "batch:64,d_model:4096", dtype="bfloat16")
  w = mtf.get_variable(mesh, "w", "d_model:4096,d_ff:4096",
                       dtype="bfloat16")
  mtf.einsum([x, w], reduced_dims=[w.shape[0]])
  r = costmodels.evaluate(g, "x:1", "", topo)
  flops = 2 * 64 * 4096 * 4096
  assert r.compute_time_s >= flops / PEAK["bfloat16"] * 0.9


def test_the_gpu_plan_times_every_dtype_asked_and_one_device_meshes():
  plan = make_plan(("x:1",), dtypes=("float32", "bfloat16", "float16"))
  assert plan.dtypes == ("float32", "bfloat16", "float16")
  assert plan.step_depths and len(set(plan.step_depths)) >= 2
  assert calibration.default_meshes(1) == ("x:1",)
