"""Chip and link specifications, kept as data.

Every number has its unit in the field name and a comment saying where it
comes from.  Bandwidths are in bytes per second and **per direction** unless
the name says otherwise; FLOP/s are dense (no structured sparsity).

Each chip carries its dense matmul peak **per dtype** (``bfloat16``,
``float32`` and, on GPUs that have it, ``tf32``) and the peak of its vector
units (elementwise work); :mod:`costmodels.precision` says which one a
computation runs at.  The datasheet peak is not what a matmul reaches: each
preset also carries the *achievable* fraction of it that large dense
matmuls measure (``matmul_efficiency_by_dtype``, with its source), and the
roofline prices matmuls at ``peak * fraction``.  Model-FLOPs utilisation
keeps the datasheet peak as its denominator (that is its definition).  ``hbm_bytes`` is the memory the chip *exposes* to a
program (what ``nvidia-smi`` reports as total, or the TPU runtime's
capacity), not the marketing "80 GB"; a configurable reserve for the runtime
and fragmentation is taken off it by :func:`usable_memory_bytes`.

A :class:`LinkSpec` describes what one chip can push in one direction over one
kind of link:

* ``ici``: one inter-chip-interconnect link of a TPU torus (a chip has two
  such links per torus dimension, one towards each neighbour);
* ``nvlink``: the whole NVLink bandwidth of one GPU into the NVSwitch;
* ``infiniband``: one GPU's network port (one NIC per GPU, "rail-optimised");
* ``pcie``: one GPU's PCIe x16 slot.

Latencies are per step of a collective algorithm (software launch, hop and
synchronisation together).  They are order-of-magnitude *assumptions*, not
vendor figures, and say so in their comments.

Example:
  >>> CHIPS["h100"].hbm_bytes / 2**30      # 81559 MiB, as nvidia-smi shows
  79.6474609375
  >>> CHIPS["a100"].peak_flops_per_s("float32") / 1e12   # TF32 tensor cores
  156.0
  >>> round(CHIPS["a100"].achievable_flops_per_s("bfloat16") / 1e12, 1)
  267.9
"""

from typing import NamedTuple, Optional, Tuple

from mesh_tf.core.errors import MtfError
from costmodels.errors import TopologyError

#: Fraction of the exposed HBM kept free for the runtime (CUDA context, NCCL
#: buffers, XLA scratch) and allocator fragmentation.  PyTorch's caching
#: allocator and XLA's BFC allocator typically lose a few percent to
#: fragmentation on long training runs; 5% is the usual planning margin.
DEFAULT_MEMORY_RESERVE_FRACTION = 0.05


class LinkSpec(NamedTuple):
  """One kind of link, as seen by one chip.

  Attributes:
    name: e.g. ``"ici-v4"``, ``"nvlink4"``, ``"infiniband-ndr"``.
    kind: ``"ici"``, ``"nvlink"``, ``"infiniband"`` or ``"pcie"``.
    bandwidth_bytes_per_s: bytes per second one chip sends in one direction
      over one such link (see the module docstring).
    latency_s: per-step latency of a collective over this link.
    overlap_efficiency: seconds of this link's communication that one
      second of concurrent compute hides (see :mod:`costmodels.overlap`);
      None: the default of its kind,
      :data:`costmodels.overlap.DEFAULT_OVERLAP_EFFICIENCY`.
    collectives: measured :class:`costmodels.collective_fits.CollectiveFit`
      entries (from calibration).  A collective whose kind has an entry is
      priced by that fit, with the algorithm the lowering really runs on
      these devices; ``()`` (every preset) keeps the ring formulas of
      :mod:`costmodels.collectives`.
    barrier_s: fixed seconds every collective over this link costs in a
      step beyond its law, whatever its group size: the group's members
      wait for each other before the step goes on.  A gradient sync's is
      hidden while overlap is on: no compute waits for it
      (:mod:`costmodels.overlap`).  0 for the presets;
      calibration fits it on whole training steps
      (:mod:`costmodels.calibrate.record_costs`).
  """
  name: str
  kind: str
  bandwidth_bytes_per_s: float
  latency_s: float
  collectives: tuple = ()
  overlap_efficiency: Optional[float] = None
  barrier_s: float = 0.0

  def __repr__(self):
    return (f"LinkSpec({self.name}: {self.bandwidth_bytes_per_s / 1e9:g} GB/s"
            f" per direction, {self.latency_s * 1e6:g} us)")


class ChipSpec(NamedTuple):
  """One accelerator chip.

  Attributes:
    name: e.g. ``"tpu-v4"``, ``"h100"``.
    kind: ``"tpu"``, ``"gpu"`` or ``"cpu"`` (a calibrated host device).
    peak_bf16_flops_per_s: dense bf16 peak of the whole chip.
    hbm_bytes: high-bandwidth memory capacity.
    hbm_bandwidth_bytes_per_s: HBM bandwidth.
    link: the chip's own fast link (ICI for TPUs, NVLink for GPUs).
    ici_links_per_chip: ICI ports per TPU chip (0 for GPUs).
    default_network: for GPUs, the InfiniBand generation its usual DGX/HGX
      system ships with (a key of :data:`INFINIBAND`); None for TPUs.
    matmul_flops_by_dtype: ``((dtype, dense matmul FLOP/s), ...)``; dtypes
      are ``"bfloat16"``, ``"float16"``, ``"float32"`` (true fp32) and
      ``"tf32"``.  A dtype not listed runs at the bf16 peak.
    vector_flops_per_s: peak of the vector units (elementwise work), or
      None for the float32 matmul peak.
    launch_overhead_s: fixed seconds per compute record of the trace (TF
      executor and dispatch work), paid whatever its size.  0 for the
      presets (datasheet chips are priced at their roofline only);
      calibration measures it.
    shared_compute_factor: how much slower each device computes when every
      device of the topology computes at once than when it computes alone
      (1: each device has its own compute; 8 logical CPU devices on 2 cores
      measure several times that).  A record's roofline is multiplied by it.
    compute_fits: measured
      :class:`costmodels.compute_fits.ComputeClassFit` entries, one per
      contraction pattern (from calibration); a record whose pattern has
      one is priced by it instead of the roofline.  ``()`` for every
      preset.
    matmul_efficiency_by_dtype: ``((dtype, fraction), ...)``: the fraction
      of the dense matmul peak of each dtype that large, well-shaped
      matmuls achieve (measured GEMM throughput over the datasheet peak),
      in ``(0, 1]``.  Keys are those of ``matmul_flops_by_dtype``; a dtype
      not listed takes the ``"bfloat16"`` entry, and ``()`` means 1 for
      every dtype -- what a calibrated topology has, since calibration
      measures the achieved throughput itself.  The roofline prices a
      matmul at ``peak * fraction``
      (:meth:`achievable_flops_per_s`); MFU divides by the datasheet peak.
    threaded_kernel_s: fixed seconds a matrix product pays when its kernel
      hands the work to a thread pool, beyond a record's launch cost (0 for
      the presets).  On 8 logical CPU devices of a 2-core machine,
      calibration measures about 100-150 us a product, all devices at once,
      against the 15-50 us of a kernel that runs inline.
    inline_kernel_max: ``(batch, rows, cols)``: the largest matrix product
      (see :class:`mesh_tf.lowering.trace.ComputeRecord`'s ``matrix``)
      that runs inline and does not pay ``threaded_kernel_s``; ``()``:
      every product pays it.  Measured by calibration (a batch of one, 16
      rows and 64 columns on the machine above).
    batch_matrix_s: seconds each matrix of a batched product costs beyond
      the first, however few its FLOPs (0 for the presets).  TF's CPU
      batched matmul runs one small product per matrix: calibration
      measures about 0.7 us a matrix on the machine above, so a batch of
      1024 tiny matrices costs 0.7 ms more than one.
    step_overhead_s: fixed seconds of one call of a lowered step, whatever
      its records (0 for the presets): handing the call and its arguments
      to the runtime, starting each device's executor and waiting for the
      last device to return its result (``docs/calibration_terms.md``).
      Calibration measures it as the intercept of reference steps of
      several depths; the report adds it to each step's
      ``wall_step_time_s`` (not to ``step_time_s``, which the layout
      search reproduces: it is the same for every layout).
    devices_in_lockstep: whether the devices run their steps in step with
      each other (True: each device has its own engine, as every GPU and
      TPU preset).  False for logical CPU devices, which share the host's
      cores: TF's executor runs one device's ready ops ahead of the others,
      so a gradient sync waits until the group's last device reaches it,
      and each device holds every gradient that waits for a sync until the
      end of its backward pass (:mod:`costmodels.sync_hold`).  Calibration
      sets it from the device type.
  """
  name: str
  kind: str
  peak_bf16_flops_per_s: float
  hbm_bytes: int
  hbm_bandwidth_bytes_per_s: float
  link: LinkSpec
  ici_links_per_chip: int = 0
  default_network: Optional[str] = None
  matmul_flops_by_dtype: Tuple[Tuple[str, float], ...] = ()
  vector_flops_per_s: Optional[float] = None
  launch_overhead_s: float = 0.0
  shared_compute_factor: float = 1.0
  compute_fits: tuple = ()
  matmul_efficiency_by_dtype: Tuple[Tuple[str, float], ...] = ()
  threaded_kernel_s: float = 0.0
  inline_kernel_max: Tuple[int, ...] = ()
  batch_matrix_s: float = 0.0
  step_overhead_s: float = 0.0
  devices_in_lockstep: bool = True

  def compute_fit(self, pattern):
    """The :class:`~costmodels.compute_fits.ComputeClassFit` of
    ``pattern``, or None."""
    for f in self.compute_fits:
      if f.pattern == pattern:
        return f
    return None

  def peak_flops_per_s(self, dtype="bfloat16"):
    """Dense matmul FLOP/s of ``dtype`` (``"tf32"`` for TF32 tensor cores).

    ``"float32"`` means what a float32 matmul runs at by default: TF32 on
    GPUs that have it (TensorFlow's default,
    ``tf.config.experimental.enable_tensor_float_32_execution``), else
    true fp32.  Use ``"fp32_strict"`` for true fp32 on such GPUs.
    """
    table = dict(self.matmul_flops_by_dtype)
    if dtype == "float32" and "tf32" in table:
      return table["tf32"]
    if dtype == "fp32_strict":
      dtype = "float32"
    if dtype == "float16" and dtype not in table:
      dtype = "bfloat16"
    return table.get(dtype, self.peak_bf16_flops_per_s)

  def matmul_efficiency(self, dtype="bfloat16"):
    """The achievable fraction of :meth:`peak_flops_per_s` of ``dtype``
    for large dense matmuls (1 where the chip lists none).

    ``dtype`` resolves as in :meth:`peak_flops_per_s` (``"float32"`` is
    TF32 where the chip has it); a dtype without an entry takes the
    ``"bfloat16"`` one.
    """
    table = dict(self.matmul_efficiency_by_dtype)
    if not table:
      return 1.0
    flops = dict(self.matmul_flops_by_dtype)
    if dtype == "float32" and "tf32" in flops:
      dtype = "tf32"
    elif dtype == "fp32_strict":
      dtype = "float32"
    elif dtype == "float16" and "float16" not in flops:
      dtype = "bfloat16"
    return table.get(dtype, table.get("bfloat16", 1.0))

  def achievable_flops_per_s(self, dtype="bfloat16"):
    """Dense matmul FLOP/s of ``dtype`` that large matmuls reach: the
    datasheet peak times :meth:`matmul_efficiency`."""
    return self.peak_flops_per_s(dtype) * self.matmul_efficiency(dtype)

  @property
  def peak_vector_flops_per_s(self):
    """FLOP/s of elementwise (non-matmul) work."""
    if self.vector_flops_per_s is not None:
      return self.vector_flops_per_s
    return dict(self.matmul_flops_by_dtype).get("float32",
                                                self.peak_bf16_flops_per_s)

  def __repr__(self):
    eff = self.matmul_efficiency("bfloat16")
    achievable = "" if eff == 1.0 else f" ({eff:.1%} achievable)"
    return (f"ChipSpec({self.name}: {self.peak_bf16_flops_per_s / 1e12:g} "
            f"TFLOP/s bf16{achievable}, "
            f"{self.peak_flops_per_s('float32') / 1e12:g} "
            f"float32, {self.hbm_bytes / 2**30:.1f} GiB HBM at "
            f"{self.hbm_bandwidth_bytes_per_s / 1e9:g} GB/s, {self.link!r})")


_GB = 1e9
_GIB = 2**30

# --- Latency assumptions (not vendor numbers; order of magnitude only) -----
# ICI: a neighbour hop on a TPU torus is on the order of a microsecond.
_ICI_LATENCY_S = 1e-6
# NVLink through NVSwitch: NCCL's low-latency protocol needs about a
# microsecond per ring step inside a node.
_NVLINK_LATENCY_S = 1e-6
# InfiniBand: a few microseconds per message between nodes (RDMA + switch).
_IB_LATENCY_S = 5e-6
# PCIe: host-bridge round trips, a couple of microseconds.
_PCIE_LATENCY_S = 2e-6

# --- Networks between GPU nodes: one NIC port per GPU ------------------------
INFINIBAND = {
    # HDR: 200 Gbit/s per port (NVIDIA ConnectX-6 / Quantum datasheets).
    "hdr": LinkSpec("infiniband-hdr", "infiniband", 200e9 / 8, _IB_LATENCY_S),
    # NDR: 400 Gbit/s per port (ConnectX-7 / Quantum-2 datasheets).
    "ndr": LinkSpec("infiniband-ndr", "infiniband", 400e9 / 8, _IB_LATENCY_S),
    # XDR: 800 Gbit/s per port (ConnectX-8 / Quantum-X800 datasheets).
    "xdr": LinkSpec("infiniband-xdr", "infiniband", 800e9 / 8, _IB_LATENCY_S),
}

PCIE = {
    # PCIe 4.0 x16: 16 GT/s x 16 lanes x 128/130 encoding = 31.5 GB/s each way.
    "gen4": LinkSpec("pcie-gen4-x16", "pcie", 16e9 * 16 * 128 / 130 / 8,
                     _PCIE_LATENCY_S),
    # PCIe 5.0 x16: 32 GT/s x 16 lanes x 128/130 = 63 GB/s each way.
    "gen5": LinkSpec("pcie-gen5-x16", "pcie", 32e9 * 16 * 128 / 130 / 8,
                     _PCIE_LATENCY_S),
}

_MIB = 2**20

# TPU MXUs multiply bf16 only: XLA runs a float32 matmul at
# ``Precision.HIGHEST`` as six bf16 passes (JAX docs, ``jax.lax.Precision``:
# "HIGHEST ... bf16_6x"), so true-fp32 matmul throughput is a sixth of bf16.
_TPU_FP32_PASSES = 6


def _tpu_flops(bf16):
  return (("bfloat16", bf16), ("float32", bf16 / _TPU_FP32_PASSES))


# --- Achievable fraction of the matmul peak (measured large GEMMs) ----------
# What the roofline prices matmuls at, as a fraction of the datasheet peak.
# GPUs: the best bf16 ``torch.matmul`` throughput over a brute-force search
# of shapes, over the datasheet dense peak ("Maximum Achievable Matmul
# FLOPS", S. Bekman, *Machine Learning Engineering*, compute/accelerator
# chapter, measured with CUDA 12.1 unless noted): A100 SXM 267.9 of 312
# TFLOP/s; H100 SXM 792.1 of 989 (GH200, the same GPU at a higher power
# limit, 821.0); B200 SXM 1745.0 of 2250 (same book, guide "When Is It Worth
# Upgrading GPUs?", where H100/H200 measure 794.5).  float16 runs on the same
# tensor-core paths at the same peak; TF32 and CUDA-core fp32 have no
# published measurement of this kind, so they take the bf16 fraction (the
# rule of ``ChipSpec.matmul_efficiency``).
_A100_MATMUL_EFFICIENCY = 267.9 / 312
_H100_MATMUL_EFFICIENCY = 792.1 / 989
_B200_MATMUL_EFFICIENCY = 1745.0 / 2250
# TPUs: a large bf16 matmul of a Transformer's feed-forward block
# (bf16[32,1024,8192] x bf16[8192,32768] on 8 TPU v2 cores) profiled at 96
# ms against 95.6 ms at the datasheet peak (Austin et al., "How to Scale
# Your Model", 2025, chapter "How to Profile TPU Programs").  That is a
# TPU v2 measurement; no per-generation public figure of this kind was
# found for v3-v5p, whose MXUs are the same 128x128 systolic arrays driven
# by XLA, so they take it too.
_TPU_MATMUL_EFFICIENCY = 95.6 / 96


def _efficiency(fraction):
  return (("bfloat16", fraction),)


CHIPS = {
    # TPU v3 (Cloud TPU docs, "TPU v3": 123 TFLOP/s bf16 per chip, 32 GiB HBM2
    # at 900 GB/s, 2D torus).  ICI: 4 links of 656 Gbit/s (Jouppi et al.,
    # "Ten Lessons From Three Generations Shaped Google's TPUv4i", ISCA 2021,
    # Table 1), read as both directions together: 41 GB/s each way.
    # The TPU runtime exposes the whole 32 GiB (two cores of 16 GiB).
    "tpu-v3": ChipSpec(
        "tpu-v3", "tpu", peak_bf16_flops_per_s=123e12, hbm_bytes=32 * _GIB,
        hbm_bandwidth_bytes_per_s=900 * _GB,
        link=LinkSpec("ici-v3", "ici", 656e9 / 8 / 2, _ICI_LATENCY_S),
        ici_links_per_chip=4, matmul_flops_by_dtype=_tpu_flops(123e12),
        matmul_efficiency_by_dtype=_efficiency(_TPU_MATMUL_EFFICIENCY)),
    # TPU v4 (Cloud TPU docs, "TPU v4": 275 TFLOP/s bf16, 32 GiB HBM2 at
    # 1200 GB/s, 3D torus of 6 links per chip).  ICI one-way bandwidth per
    # link 4.5e10 B/s (Austin et al., "How to Scale Your Model", TPU chapter).
    # 32 GiB is what one v4 chip (megacore) exposes to a JAX/TF program.
    "tpu-v4": ChipSpec(
        "tpu-v4", "tpu", peak_bf16_flops_per_s=275e12, hbm_bytes=32 * _GIB,
        hbm_bandwidth_bytes_per_s=1200 * _GB,
        link=LinkSpec("ici-v4", "ici", 45 * _GB, _ICI_LATENCY_S),
        ici_links_per_chip=6, matmul_flops_by_dtype=_tpu_flops(275e12),
        matmul_efficiency_by_dtype=_efficiency(_TPU_MATMUL_EFFICIENCY)),
    # TPU v5e (Cloud TPU docs, "TPU v5e": 197 TFLOP/s bf16, 16 GB HBM2 at
    # 819 GB/s, 400 GB/s bidirectional ICI per chip over 4 ports, 2D torus):
    # 400 / 4 ports / 2 directions = 50 GB/s per link each way.
    "tpu-v5e": ChipSpec(
        "tpu-v5e", "tpu", peak_bf16_flops_per_s=197e12, hbm_bytes=16 * 10**9,
        hbm_bandwidth_bytes_per_s=819 * _GB,
        link=LinkSpec("ici-v5e", "ici", 400 * _GB / 4 / 2, _ICI_LATENCY_S),
        ici_links_per_chip=4, matmul_flops_by_dtype=_tpu_flops(197e12),
        matmul_efficiency_by_dtype=_efficiency(_TPU_MATMUL_EFFICIENCY)),
    # TPU v5p (Cloud TPU docs, "TPU v5p": 459 TFLOP/s bf16, 95 GiB HBM2e at
    # 2765 GB/s, 1200 GB/s bidirectional ICI per chip, 3D torus of 6 links):
    # 1200 / 6 / 2 = 100 GB/s per link each way.
    "tpu-v5p": ChipSpec(
        "tpu-v5p", "tpu", peak_bf16_flops_per_s=459e12, hbm_bytes=95 * _GIB,
        hbm_bandwidth_bytes_per_s=2765 * _GB,
        link=LinkSpec("ici-v5p", "ici", 1200 * _GB / 6 / 2, _ICI_LATENCY_S),
        ici_links_per_chip=6, matmul_flops_by_dtype=_tpu_flops(459e12),
        matmul_efficiency_by_dtype=_efficiency(_TPU_MATMUL_EFFICIENCY)),
    # A100 SXM4 80GB (NVIDIA A100 datasheet, dense: 312 TFLOP/s bf16/fp16,
    # 156 TFLOP/s TF32, 19.5 TFLOP/s fp32 on CUDA cores; 2039 GB/s HBM2e;
    # NVLink3 600 GB/s total = 300 GB/s each way).  Memory: nvidia-smi
    # reports 81920 MiB total on A100-SXM4-80GB.  DGX A100 ships ConnectX-6
    # HDR, one port per GPU.
    "a100": ChipSpec(
        "a100", "gpu", peak_bf16_flops_per_s=312e12,
        hbm_bytes=81920 * _MIB, hbm_bandwidth_bytes_per_s=2039 * _GB,
        link=LinkSpec("nvlink3", "nvlink", 300 * _GB, _NVLINK_LATENCY_S),
        default_network="hdr",
        matmul_flops_by_dtype=(("bfloat16", 312e12), ("float16", 312e12),
                               ("tf32", 156e12), ("float32", 19.5e12)),
        vector_flops_per_s=19.5e12,
        matmul_efficiency_by_dtype=_efficiency(_A100_MATMUL_EFFICIENCY)),
    # H100 SXM5 (NVIDIA H100 datasheet, dense = half the sparse figures:
    # 989 TFLOP/s bf16/fp16, 494.5 TFLOP/s TF32, 67 TFLOP/s fp32 on CUDA
    # cores; 3.35 TB/s HBM3; NVLink4 900 GB/s total = 450 GB/s each way).
    # Memory: nvidia-smi reports 81559 MiB (79.6 GiB) on "H100 80GB HBM3".
    # DGX H100 ships ConnectX-7 NDR 400 Gbit/s, one port per GPU.
    "h100": ChipSpec(
        "h100", "gpu", peak_bf16_flops_per_s=989e12,
        hbm_bytes=81559 * _MIB, hbm_bandwidth_bytes_per_s=3350 * _GB,
        link=LinkSpec("nvlink4", "nvlink", 450 * _GB, _NVLINK_LATENCY_S),
        default_network="ndr",
        matmul_flops_by_dtype=(("bfloat16", 989e12), ("float16", 989e12),
                               ("tf32", 494.5e12), ("float32", 67e12)),
        vector_flops_per_s=67e12,
        matmul_efficiency_by_dtype=_efficiency(_H100_MATMUL_EFFICIENCY)),
    # H200 SXM (NVIDIA H200 datasheet: the H100's compute -- 989 TFLOP/s
    # dense bf16, 494.5 TF32, 67 fp32 -- with 141 GB HBM3e at 4.8 TB/s,
    # NVLink4 900 GB/s total).  Memory: nvidia-smi reports 143771 MiB
    # (140.4 GiB).  DGX H200: ConnectX-7 NDR.
    "h200": ChipSpec(
        "h200", "gpu", peak_bf16_flops_per_s=989e12,
        hbm_bytes=143771 * _MIB, hbm_bandwidth_bytes_per_s=4800 * _GB,
        link=LinkSpec("nvlink4", "nvlink", 450 * _GB, _NVLINK_LATENCY_S),
        default_network="ndr",
        matmul_flops_by_dtype=(("bfloat16", 989e12), ("float16", 989e12),
                               ("tf32", 494.5e12), ("float32", 67e12)),
        vector_flops_per_s=67e12,
        matmul_efficiency_by_dtype=_efficiency(_H100_MATMUL_EFFICIENCY)),
    # B200 (NVIDIA DGX/HGX B200 datasheets, for 8 GPUs with sparsity: 36
    # PFLOP/s bf16 and 18 PFLOP/s TF32 -> 2.25 and 1.125 PFLOP/s dense per
    # GPU; 600 TFLOP/s fp32 -> 75 per GPU; 1440 GB HBM3e and 64 TB/s -> 180 GB
    # at 8 TB/s each; NVLink5 1.8 TB/s total = 900 GB/s each way).  Memory:
    # nvidia-smi reports 183359 MiB (179 GiB).  DGX B200: ConnectX-7 NDR.
    "b200": ChipSpec(
        "b200", "gpu", peak_bf16_flops_per_s=2250e12,
        hbm_bytes=183359 * _MIB, hbm_bandwidth_bytes_per_s=8000 * _GB,
        link=LinkSpec("nvlink5", "nvlink", 900 * _GB, _NVLINK_LATENCY_S),
        default_network="ndr",
        matmul_flops_by_dtype=(("bfloat16", 2250e12), ("float16", 2250e12),
                               ("tf32", 1125e12), ("float32", 75e12)),
        vector_flops_per_s=75e12,
        matmul_efficiency_by_dtype=_efficiency(_B200_MATMUL_EFFICIENCY)),
}


def usable_memory_bytes(chip, reserve_fraction=DEFAULT_MEMORY_RESERVE_FRACTION):
  """The bytes a plan may use on ``chip``: its exposed HBM less a reserve.

  Args:
    chip: a :class:`ChipSpec` or its name.
    reserve_fraction: the fraction kept free for the runtime and
      fragmentation, in ``[0, 1)``.

  Raises:
    mesh_tf.MtfError: for a fraction outside ``[0, 1)``.

  Example:
    >>> round(usable_memory_bytes("h100") / 2**30, 2)   # 95% of 79.65 GiB
    75.67
  """
  chip = get_chip(chip)
  if not 0 <= reserve_fraction < 1:
    raise MtfError(f"memory reserve {reserve_fraction!r} is not a fraction "
                   "in [0, 1); give e.g. 0.05 for 5%")
  return int(chip.hbm_bytes * (1 - reserve_fraction))


def get_chip(chip):
  """The :class:`ChipSpec` named ``chip`` (or ``chip`` itself).

  Raises:
    TopologyError: for an unknown name.
  """
  if isinstance(chip, ChipSpec):
    return chip
  key = str(chip).lower()
  if key.startswith("v") and f"tpu-{key}" in CHIPS:
    key = f"tpu-{key}"
  if key not in CHIPS:
    raise TopologyError(f"unknown chip {chip!r}; use one of {sorted(CHIPS)} "
                        "or build a ChipSpec")
  return CHIPS[key]


def get_network(network):
  """The :class:`LinkSpec` of an InfiniBand generation or PCIe generation.

  ``network`` is a LinkSpec, ``"hdr"``, ``"ndr"``, ``"xdr"`` (InfiniBand),
  ``"pcie-gen4"`` or ``"pcie-gen5"``.
  """
  if isinstance(network, LinkSpec):
    return network
  key = str(network).lower()
  if key.startswith("infiniband-"):
    key = key[len("infiniband-"):]
  if key in INFINIBAND:
    return INFINIBAND[key]
  if key.startswith("pcie-") and key[5:] in PCIE:
    return PCIE[key[5:]]
  raise TopologyError(
      f"unknown network {network!r}; use one of {sorted(INFINIBAND)} "
      f"(InfiniBand), {['pcie-' + k for k in sorted(PCIE)]} or a LinkSpec")
