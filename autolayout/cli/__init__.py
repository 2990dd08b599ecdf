"""``mtf-layout``: how should I shard this model on this hardware, and what
will it cost per device?

Subcommands (``mtf-layout <cmd> --help`` for each):

* ``solve``: the optimal layout of a model on a mesh (or device count) and
  topology, under an objective and a per-device memory budget;
* ``compare``: several layouts (rules strings and ``auto``) side by side;
* ``report``: the full cost report of one layout (per op, axis, category);
* ``mesh``: every mesh shape of N devices that embeds in the topology,
  ranked, each with its optimal layout;
* ``pareto``: the memory-versus-step-time front;
* ``topologies``: the preset topologies and their numbers (and the topology
  files given);
* ``explain``: why each rule was chosen, and the cost of dropping it;
* ``diff``: two plan files rule by rule, each change priced alone;
* ``export``: a plan file as JAX, PyTorch DTensor or TF DTensor shardings;
* ``calibrate``: measure the devices at hand and write a topology file
  (``-t FILE.json`` then takes it).

``solve --save plan.json`` writes a plan file and ``--hint plan.json``
starts from one; ``-l @plan.json`` takes a plan's layout wherever layouts
are taken (:mod:`~autolayout.cli.plans`, ``docs/plan_files.md``).

Models are zoo presets with overrides (``--model transformer --set
layers=96,d_model=12288,heads=96,batch=1536``) or ``path/to/file.py:fn``
returning ``(graph, outputs)``.  ``--format table|json|csv`` (JSON schema:
``docs/cli.md``); ``--plot out.png``.

Exit codes: 0 success, 2 bad input, 3 no layout fits the memory budget,
4 a limit was reached (no layout within ``--time-limit``, which bounds the
whole search), 1 only for a bug in mesh-tf.  Every error is one ``error:``
line and one ``hint:`` line on stderr, never a traceback (``--debug``
shows it); with ``-f json`` also a JSON error object on stdout.  Options
are checked in :mod:`~autolayout.cli.validate` before any work.

Solving never imports TensorFlow.

Example:
  $ mtf-layout solve --model transformer --topology tpu-v5e-16x16

The package has one module per subcommand (:mod:`~autolayout.cli.solve`,
``compare``, ``report``, ``mesh``, ``pareto``, ``topologies``, ``explain``,
``diff``, ``export``, ``calibrate``),
each defining a :class:`~autolayout.cli.context.Command`, plus the shared
:mod:`~autolayout.cli.arguments`, :mod:`~autolayout.cli.inputs` (strings
parsed once), :mod:`~autolayout.cli.models` (model loading),
:mod:`~autolayout.cli.common` (shared steps and tables),
:mod:`~autolayout.cli.output` (formatting, JSON records) and
:mod:`~autolayout.cli.context` (the one json/csv/table writer).
:mod:`~autolayout.cli.app` registers the commands and runs ``main``.
"""
# OR-Tools first: it must be loaded before TensorFlow in any process.
from ortools.sat.python import cp_model  # noqa: F401  isort:skip

from autolayout.cli.app import COMMANDS, build_parser, main, program

__all__ = ["COMMANDS", "build_parser", "main", "program"]
