"""Calibration: measure the devices at hand and fit a topology to them.

* :mod:`~costmodels.calibrate.measure`: micro-benchmarks through the real
  lowering (imports TensorFlow, lazily, in the measuring subprocess only);
* :mod:`~costmodels.calibrate.fit`: least-squares fits (numpy);
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
from costmodels.calibrate.fit import (CalibrationError, Sample,
                                      fit_collective, fit_compute,
                                      nonneg_lstsq)
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
