"""Cost models: hardware as data, topologies, collective costs, rooflines,
memory liveness, and the per-layout :class:`CostReport`.

Nothing here imports TensorFlow.  Collectives, FLOPs and variable slices come
from lowering the graph on :class:`mesh_tf.ShapeMeshImpl` (the same op
lowering code that runs on real devices), and are priced on a topology:

* :mod:`costmodels.hardware`: chip and link specs with units and sources;
* :mod:`costmodels.errors`: :class:`TopologyError`;
* :mod:`costmodels.topology`: a package of ``types`` (:class:`Topology`),
  ``presets`` (TPU tori, GPU clusters, named presets) and ``mapping``
  (:func:`map_mesh`, which lays a logical mesh onto a topology, row-major,
  so that every mesh axis knows its links);
* :mod:`costmodels.collectives`: pure alpha-beta formulas (ring, line,
  switch, and dimension-ordered torus/hierarchical variants);
* :mod:`costmodels.collective_fits`: measured collective costs (the
  algorithm the lowering really runs, fitted per link by calibration);
* :mod:`costmodels.compute`: the per-record roofline, plus a calibrated
  chip's launch cost and shared-compute factor;
* :mod:`costmodels.calibrate`: measure the devices at hand (TensorFlow in a
  subprocess only), fit, and read/write topology files
  (``get_topology("mycpu.json")``, ``docs/topology_files.md``);
* :mod:`costmodels.memory`: per-device tensor bytes, a layout-independent
  memory-minimising schedule and liveness (a :class:`memory.Liveness` the
  caller builds once per graph and reuses over layouts), and the peak;
* :mod:`costmodels.evaluate`: :func:`evaluate`, :func:`op_costs` and
  :func:`collective_time`.  The step time is compute plus *exposed*
  communication;
* :mod:`costmodels.overlap`: gradient syncs hidden under the rest of the
  backward pass, from the op order, with per-link overlap efficiency.

Example:
  >>> import costmodels
  >>> costmodels.get_topology("dgx-h100").num_chips
  8
"""

from costmodels.hardware import (CHIPS, INFINIBAND, PCIE, ChipSpec, LinkSpec,
                                 get_chip, get_network)
from costmodels.topology import (AxisLink, MeshMapping, PhysicalDim, Segment,
                                 Topology, TopologyError, get_topology,
                                 gpu_cluster, list_topologies, map_mesh,
                                 torus, tpu_slice)
from costmodels.collectives import (LinkParams, allgather_time,
                                    allreduce_time, alltoall_time,
                                    permute_time, reduce_scatter_time,
                                    time_on_links, torus_allgather_time,
                                    torus_allreduce_time,
                                    torus_alltoall_time,
                                    torus_reduce_scatter_time)
from costmodels.compute import compute_time, roofline_time
from costmodels import memory
from costmodels import overlap
from costmodels.memory import (live_intervals, live_sets, peak_memory,
                               schedule, tensor_bytes_per_device)
from costmodels.report import CostReport
from costmodels.evaluate import (OpCost, collective_price,
                                 collective_time, collective_time_by_axis,
                                 collective_wait_by_axis, evaluate, op_costs,
                                 trace_graph)
