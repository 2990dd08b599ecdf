"""Calibration: measure the devices at hand and fit a topology to them.

* :mod:`~costmodels.calibrate.measure`: micro-benchmarks through the real
  lowering (imports TensorFlow, lazily, in the measuring subprocess only);
* the fits, one module per family of terms, each on
  :class:`~costmodels.calibrate.timings.Sample` timings and SciPy's NNLS
  (:mod:`~costmodels.calibrate.least_squares`):
  :mod:`~costmodels.calibrate.compute_fit` (the chip's roofline),
  :mod:`~costmodels.calibrate.pattern_fit` (one per contraction pattern),
  :mod:`~costmodels.calibrate.threaded_kernel`,
  :mod:`~costmodels.calibrate.collective_fit`,
  :mod:`~costmodels.calibrate.overlap_fit` and
  :mod:`~costmodels.calibrate.record_costs` (the fixed costs inside a step);
* :mod:`~costmodels.calibrate.topology_file`: the versioned JSON file
  (``docs/topology_files.md``);
* :mod:`~costmodels.calibrate.calibration`: :func:`calibrate`, which runs
  the three.

Example:
  >>> from costmodels import calibrate                        # doctest: +SKIP
  >>> cal = calibrate.calibrate("mycpu.json", cpu_devices=8, quick=True)
  >>> costmodels.evaluate(graph, "x:8", "batch:x", "mycpu.json")
"""

from costmodels.calibrate.calibration import (Calibration, calibrate,
                                              default_meshes, fit_topology)
from costmodels.calibrate.timings import CalibrationError, Sample
from costmodels.calibrate.collective_fit import fit_collective
from costmodels.calibrate.compute_fit import fit_compute
from costmodels.calibrate.least_squares import nonneg_lstsq
from costmodels.calibrate.topology_file import (TopologyFileError,
                                                read_topology,
                                                read_topology_file,
                                                topology_from_json,
                                                topology_json,
                                                write_topology)

__all__ = ["Calibration", "CalibrationError", "Sample", "TopologyFileError",
           "calibrate", "default_meshes", "fit_collective", "fit_compute",
           "fit_topology", "nonneg_lstsq", "read_topology",
           "read_topology_file", "topology_from_json", "topology_json",
           "write_topology"]
