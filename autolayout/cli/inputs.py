"""Inputs of the ``mtf-layout`` CLI: topology names, mesh strings, layout
rules, memory budgets and ``compare``'s layout specs.

Strings are parsed and checked here, once, at the edge (against the
topology and the model), and turned into typed objects; every problem
becomes a :class:`~autolayout.cli.errors.CliInputError` with a hint.
"""

import re

import costmodels
from costmodels import arguments as cm_args
from mesh_tf.core.errors import MtfError, ParseError
from mesh_tf.core.layout import convert_to_layout_rules
from mesh_tf.core.mesh_shape import convert_to_mesh_shape
from autolayout.arguments import default_mesh  # noqa: F401  (the API's)
from autolayout.cli.errors import CliInputError


def get_topology(name):
  """The topology ``name`` (a preset, a family size, or a topology file).

  Raises:
    CliInputError: for an unknown name, with the presets as the hint, or a
      topology file that is missing or off-schema.
  """
  from costmodels.calibrate.topology_file import TopologyFileError
  try:
    topology = costmodels.get_topology(name)
  except TopologyFileError as e:
    raise CliInputError(str(e), hint="write one with `mtf-layout calibrate "
                        "--cpu-devices 8 -o FILE.json`; the schema is in "
                        "docs/topology_files.md") from None
  except costmodels.TopologyError as e:
    detail = str(e).split(";")[0]
    known = f"unknown topology {name!r}" in detail or not detail
    raise CliInputError(
        f"unknown topology {name!r}" if known else
        f"invalid topology {name!r}: {detail}",
        hint="use a preset (" + ", ".join(costmodels.list_topologies())
        + ") or a family size such as tpu-v4-8x8x8 or h100x8-nodes32; "
        "`mtf-layout topologies` lists them") from None
  if topology.num_chips > cm_args.MAX_MESH_SIZE:
    raise CliInputError(
        f"topology {name!r} has {topology.num_chips} chips, over the "
        f"{cm_args.MAX_MESH_SIZE} mtf-layout prices",
        hint="use a smaller size of the family, e.g. --topology "
        "tpu-v5e-16x16 or h100x8-nodes64")
  return topology


def parse_mesh(text, topology):
  """Parses and checks a mesh string against ``topology`` into a
  :class:`~mesh_tf.core.mesh_shape.MeshShape` (whose own checks reject
  repeated axis names and sizes below 1).

  Raises:
    CliInputError: for a malformed string or a non-positive size.
    costmodels.TopologyError: if the mesh does not fit the topology.
  """
  try:
    mesh = convert_to_mesh_shape(text)
  except ParseError as e:
    raise CliInputError(f"malformed mesh {text!r}: {e}",
                        hint="write the mesh as name:size pairs, e.g. "
                        f"--mesh '{default_mesh(topology)}'")
  except Exception as e:  # ShapeError: repeated names, bad sizes
    raise CliInputError(f"malformed mesh {text!r}: {e}",
                        hint="give each mesh axis a distinct name and a "
                        "positive size, e.g. --mesh "
                        f"'{default_mesh(topology)}'")
  if not mesh.dims:
    raise CliInputError(f"malformed mesh {text!r}: every axis needs a size "
                        "of at least 1",
                        hint=f"e.g. --mesh '{default_mesh(topology)}'")
  try:
    costmodels.map_mesh(topology, mesh)
  except costmodels.TopologyError as e:
    raise CliInputError(
        f"mesh {text!r} does not fit topology {topology.name}: {e}",
        hint=f"{topology.name} has {topology.num_chips} chips laid out "
        f"{topology.shape}; try --mesh '{default_mesh(topology)}' or "
        "`mtf-layout mesh` to rank the meshes that fit")
  return mesh


def parse_rules(text, model, mesh):
  """Parses layout rules and checks their dims and axes exist."""
  try:
    rules = convert_to_layout_rules(text)
  except ParseError as e:
    raise CliInputError(f"malformed layout rules {text!r}: {e}",
                        hint="write rules as dim:axis pairs, e.g. "
                        "'batch:data;d_ff:model', or 'auto'")
  dims = sorted({d.name for t in model.graph.tensors for d in t.shape.dims})
  axes = mesh.dimension_names
  named = [p.split(":")[0] for p in re.split(r"[;,\s]+", text) if p]
  twice = sorted({d for d in named if named.count(d) > 1})
  if twice:
    raise CliInputError(
        f"layout rules {text!r} give dim {twice[0]!r} more than one rule",
        hint="give each dim one rule, e.g. --layout 'batch:data;d_ff:model'")
  for dim, axis in rules.pairs:
    if dim not in dims:
      raise CliInputError(
          f"layout rule {dim}:{axis} names dim {dim!r}, which no tensor of "
          f"{model.name} has",
          hint=f"the model's dims are {', '.join(dims)}; e.g. --layout "
          f"'{dims[0]}:{axes[0]}'")
    if axis not in axes:
      raise CliInputError(
          f"layout rule {dim}:{axis} names mesh axis {axis!r}, which mesh "
          f"{mesh.text} does not have",
          hint=f"use one of the mesh axes {', '.join(axes)}, e.g. --layout "
          f"'{dim}:{axes[0]}'")
  return rules


def memory_reserve(args):
  """``--memory-reserve`` as a fraction (default
  :data:`costmodels.hardware.DEFAULT_MEMORY_RESERVE_FRACTION`)."""
  from costmodels import hardware
  text = getattr(args, "memory_reserve", None)
  if text is None:
    return hardware.DEFAULT_MEMORY_RESERVE_FRACTION
  s = str(text).strip()
  try:
    value = float(s[:-1]) / 100 if s.endswith("%") else float(s)
  except ValueError:
    value = -1.0
  if not 0 <= value < 1:
    raise CliInputError(f"cannot use --memory-reserve {text!r}: it is not a "
                        "fraction of HBM in [0, 1)",
                        hint="use e.g. 5% or 0.05 (0 for none)")
  return value


def memory_budget(args, topology):
  """``--memory-budget`` in bytes per device (None: no limit).

  ``hbm`` (the default) and percentages refer to the *usable* memory: the
  HBM the chip exposes less ``--memory-reserve``.
  """
  from costmodels import hardware
  text = getattr(args, "memory_budget", None)
  if text is None:
    return None
  usable = hardware.usable_memory_bytes(topology.chip, memory_reserve(args))
  try:
    return cm_args.parse_size(text, usable, name="--memory-budget")
  except MtfError as e:
    raise CliInputError(
        str(e).replace("--memory-budget=", "--memory-budget ").split(
            "; e.g.")[0].split("; give")[0],
        hint="use e.g. --memory-budget 16GB (or 12GiB, 512MiB, 90% of "
        "usable HBM, hbm, none)") from None


def check_devices(n, topology):
  """Checks a ``--devices`` count against the topology's chips."""
  if n < 1:
    raise CliInputError(f"--devices {n} is not a positive count",
                        hint=f"e.g. --devices {topology.num_chips}")
  if n != topology.num_chips:
    raise CliInputError(
        f"--devices {n} differs from the {topology.num_chips} chips of "
        f"topology {topology.name}",
        hint=f"use --devices {topology.num_chips}, or a topology with {n} "
        "chips (see `mtf-layout topologies`)")


def parse_layout_spec(spec, index):
  """``[NAME=]RULES[@MESH]`` -> ``(name, rules text, mesh text or None)``.

  Raises:
    CliInputError: for an empty name (``=auto``) or mesh (``auto@``).
  """
  name, rules, mesh = None, spec.strip(), None
  if "@" in rules:
    rules, _, mesh = rules.rpartition("@")
    if not mesh.strip():
      raise CliInputError(
          f"--layout {spec!r} ends in '@' but names no mesh",
          hint="write the mesh after '@', e.g. --layout "
          "'dp=batch:data@data:8', or drop the '@'")
  if "=" in rules:
    name, _, rules = rules.partition("=")
    name = name.strip()
    if not name:
      raise CliInputError(f"--layout {spec!r} has an empty name before '='",
                          hint="name it, e.g. --layout dp=batch:data, or "
                          "drop the '='")
  rules = rules.strip()
  if name is None:
    name = rules if rules in ("auto", "") else f"L{index}"
    name = name or "replicated"
  return name, rules, (mesh.strip() if mesh else None)
