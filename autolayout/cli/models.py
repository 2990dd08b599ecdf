"""Models for the ``mtf-layout`` CLI: zoo presets with overrides, or a
user's ``path/to/file.py:function``.

Strings are parsed here, once, at the edge: ``--set layers=96,d_model=12288``
becomes ``{"layers": 96, "d_model": 12288}``, and a model spec becomes a
:class:`LoadedModel` (graph, outputs, a description).  Nothing here imports
TensorFlow.
"""

import contextlib
import dataclasses
import importlib.util
import os
import sys
from typing import Any, Dict, Optional, Tuple

from costmodels import arguments as cm_args
from autolayout.arguments import MODEL_FAMILIES
from mesh_tf.core.errors import MtfError
from autolayout.cli.errors import CliInputError

# Family names a user would type, mapped to a real-sized zoo preset.
FAMILIES = MODEL_FAMILIES


@dataclasses.dataclass(frozen=True)
class LoadedModel:
  """A model ready to lay out.

  Attributes:
    graph: the mtf Graph.
    outputs: tensors of the step's results, or None for the default (every
      tensor no op reads).
    name: what the user asked for (a preset or ``file.py:function``).
    description: one line: preset, overrides, op and parameter counts.
    config: the zoo config (None for a user function).
    overrides: the ``--set`` values.
    train: whether the graph is the training step (forward, backward and
      update) rather than the forward pass.
    microbatches: the :class:`mesh_tf.microbatch.MicrobatchPlan` when the
      graph is one microbatch of a step (a training plan's), else None.
    decisions: the :class:`~autolayout.decisions.TrainingDecisions` the
      step was built for (a training plan's), else None.
  """
  graph: Any
  outputs: Optional[Tuple[Any, ...]]
  name: str
  description: str
  config: Any = None
  overrides: Dict[str, Any] = dataclasses.field(default_factory=dict)
  train: bool = False
  microbatches: Any = None
  decisions: Any = None


def parse_value(text):
  """``"96"`` -> 96, ``"0.1"`` -> 0.1, ``"true"`` -> True, ``"none"`` ->
  None, anything else stays a string."""
  low = text.strip().lower()
  if low in ("none", "null"):
    return None
  if low in ("true", "false"):
    return low == "true"
  for conv in (int, float):
    try:
      return conv(text)
    except ValueError:
      pass
  return text.strip()


def parse_overrides(items):
  """Parses ``--set`` arguments (each ``k=v[,k=v...]``) into a dict.

  Raises:
    CliInputError: for an item that is not ``name=value``.

  Example:
    >>> parse_overrides(["layers=2,d_model=64", "activation=gelu"])
    {'layers': 2, 'd_model': 64, 'activation': 'gelu'}
  """
  out = {}
  for item in items or ():
    for part in item.split(","):
      part = part.strip()
      if not part:
        continue
      key, sep, value = part.partition("=")
      if not sep or not key.strip() or not value.strip():
        raise CliInputError(
            f"cannot parse --set item {part!r}: it is not of the form "
            "name=value",
            hint="write --set layers=2,d_model=512 (commas between items)")
      key = key.strip()
      if key in out:
        raise CliInputError(
            f"--set gives {key} twice ({key}={out[key]!r} and "
            f"{key}={parse_value(value)!r})",
            hint=f"give each field once, e.g. --set {key}={value.strip()}")
      out[key] = parse_value(value)
  return out


def list_models():
  """Family names and zoo presets the CLI accepts."""
  from mesh_tf import models
  return sorted(FAMILIES) + models.list_models()


def _add_training(graph, loss):
  """Adds gradients and an Adam update, so memory counts optimizer state."""
  from mesh_tf.training import optimize
  from mesh_tf.gradients import gradients
  variables = list(graph.trainable_variables)
  grads = gradients([loss], [v.outputs[0] for v in variables])
  optimize.AdamWeightDecayOptimizer(1e-4).apply_grads(grads, variables)


def _load_preset(name, overrides, train):
  from mesh_tf import models
  preset = FAMILIES.get(name, name)
  if preset not in models.PRESETS:
    raise CliInputError(
        f"unknown model {name!r}",
        hint=f"use --model with one of {', '.join(list_models())}, or "
        "--model path/to/file.py:function")
  try:
    config = models.get_config(preset, **overrides)
  except MtfError as e:
    raise CliInputError(str(e), hint=f"--set takes the fields of {preset}: "
                        + ", ".join(f.name for f in
                                    dataclasses.fields(models.PRESETS[preset]))
                        + f"; e.g. --set {_example_set(preset)}") from None
  except (TypeError, ValueError) as e:
    raise CliInputError(f"model {name!r} rejects --set "
                        f"{_echo_set(overrides)}: {e}",
                        hint=f"e.g. --set {_example_set(preset)}") from None
  train = True if train is None else train
  try:
    model = config.build()
    if train:  # once: --train and the default ask the same question
      _add_training(model.graph, model.loss)
    cm_args.check_graph(model.graph)
  except MtfError as e:
    if not overrides:  # the zoo's own preset: a bug in mesh-tf, not input
      raise RuntimeError(f"zoo preset {preset!r} fails with its own "
                         f"defaults: {e}") from e
    raise CliInputError(f"model {name!r} with --set {_echo_set(overrides)} "
                        f"cannot be built: {e}",
                        hint="change the sizes given with --set, e.g. "
                        f"--set {_example_set(preset)}") from None
  label = name if name == preset else f"{name} ({preset})"
  desc = (f"{label}: {len(model.graph.operations)} ops, "
          f"{_params(model.num_parameters)} params"
          f"{', training step (Adam)' if train else ', forward'}")
  return LoadedModel(model.graph, None, name, desc, config, overrides,
                     train)


def _echo_set(overrides):
  return ",".join(f"{k}={v}" for k, v in overrides.items())


def _example_set(preset):
  """A valid ``--set`` for ``preset``: two of its size fields, halved."""
  from mesh_tf import models
  config = models.PRESETS[preset]
  sizes = [(f.name, getattr(config, f.name)) for f in
           dataclasses.fields(config)
           if type(getattr(config, f.name)) is int  # pylint: disable=unidiomatic-typecheck
           and getattr(config, f.name) >= 2]
  return ",".join(f"{k}={max(1, v // 2)}" for k, v in sizes[:2])


def _params(n):
  for unit, size in (("B", 1e9), ("M", 1e6), ("K", 1e3)):
    if n >= size:
      return f"{n / size:.3g}{unit}"
  return str(n)


def fenced(where, hint, fn, *args, **kwargs):
  """Runs user code ``fn(*args, **kwargs)`` (a model file's import or its
  function) fenced off from the CLI.

  Its stdout goes to stderr (so ``-f json`` stays parseable), and anything
  it raises, ``SystemExit``, ``KeyboardInterrupt`` and ``RecursionError``
  included, becomes a CliInputError naming ``where`` (the file and the
  function).
  """
  try:
    with contextlib.redirect_stdout(sys.stderr):
      return fn(*args, **kwargs)
  except CliInputError:
    raise
  except SystemExit as e:
    raise CliInputError(f"{where} called sys.exit({e.code!r})",
                        hint=hint) from None
  except KeyboardInterrupt:
    raise CliInputError(f"{where} raised KeyboardInterrupt",
                        hint=hint) from None
  except RecursionError:
    raise CliInputError(f"{where} recursed too deeply (RecursionError)",
                        hint=hint) from None
  except BaseException as e:  # pylint: disable=broad-except
    raise CliInputError(f"{where} raised {type(e).__name__}: {e}",
                        hint=hint) from None


def _import_file(path):
  if not os.path.isfile(path):
    raise CliInputError(f"model file {path!r} does not exist",
                        hint="give --model path/to/file.py:function with a "
                        "path relative to the current directory")
  mod_name = "_mtf_layout_user_" + os.path.splitext(
      os.path.basename(path))[0].replace("-", "_")
  try:
    spec = importlib.util.spec_from_file_location(mod_name, path)
    module = importlib.util.module_from_spec(spec)
  except (ImportError, AttributeError, ValueError) as e:
    raise CliInputError(f"cannot load model file {path!r}: {e}",
                        hint="give --model path/to/file.py:function, a "
                        "Python file") from None
  sys.modules[mod_name] = module
  try:
    fenced(f"model file {path!r} failed to import: it",
           "fix the file so that `python " + path + "` runs, then retry "
           "--model " + path + ":FUNCTION",
           spec.loader.exec_module, module)
  except CliInputError:
    del sys.modules[mod_name]
    raise
  return module


def _unpack_user_result(value, where):
  """``(graph, outputs, loss)`` from what a user function returned."""
  from mesh_tf.graph import Graph, Tensor
  from mesh_tf.models.base import ModelGraph
  if isinstance(value, ModelGraph):
    return value.graph, None, value.loss
  if isinstance(value, tuple) and len(value) == 2 and isinstance(
      value[0], Graph):
    graph, outs = value
    if isinstance(outs, Tensor):
      outs = [outs]
    elif isinstance(outs, dict):
      outs = list(outs.values())
    outs = tuple(outs) if outs is not None else None
    if outs is not None and not all(isinstance(t, Tensor) for t in outs):
      raise CliInputError(
          f"{where} returned outputs that are not mtf Tensors",
          hint="return (graph, [tensor, ...]) or a models.ModelGraph")
    loss = outs[0] if outs and outs[0].shape.ndims == 0 else None
    return graph, outs, loss
  raise CliInputError(
      f"{where} returned {type(value).__name__}, not an mtf graph and its "
      "outputs",
      hint="return (graph, outputs) with outputs a Tensor or list of "
      "Tensors, or a mesh_tf.models.ModelGraph; e.g. `return g, [loss]`")


def _load_file(spec, overrides, train):
  path, _, fn_name = spec.rpartition(":")
  if not fn_name.isidentifier():
    raise CliInputError(f"model {spec!r} does not end in :function",
                        hint="write --model path/to/file.py:build_fn")
  module = _import_file(path)
  fn = getattr(module, fn_name, None)
  if not callable(fn):
    names = [n for n, v in vars(module).items()
             if callable(v) and not n.startswith("_")
             and getattr(v, "__module__", None) == module.__name__]
    raise CliInputError(
        f"model file {path!r} has no function {fn_name!r}",
        hint=(f"its functions are {', '.join(names)}; e.g. --model "
              f"{path}:{names[0]}") if names else
        "it defines no functions; add one that returns (graph, outputs) "
        f"and give it as --model {path}:build")
  where = f"{path}:{fn_name}"
  value = fenced(where, "fix the model function (it runs with the --set "
                 "values as keyword arguments, e.g. --set batch=64)", fn,
                 **overrides)
  graph, outs, loss = _unpack_user_result(value, where)
  if train is None:
    train = loss is not None  # a graph without a loss is a forward pass
  if not graph.operations:
    raise CliInputError(f"{where} returned an empty graph (no operations)",
                        hint="build the model into the graph it returns, "
                        "e.g. return (graph, [loss])")
  if outs is not None and not outs:
    raise CliInputError(f"{where} returned no outputs, so the step "
                        "computes nothing",
                        hint="return (graph, [loss]), or (graph, None) for "
                        "every tensor no op reads, e.g. `return g, [loss]`")
  try:
    cm_args.check_graph(graph)
  except MtfError as e:
    raise CliInputError(f"{where} returned a graph the cost model cannot "
                        f"take: {e}", hint="fix the model function (or "
                        "the values given with --set, e.g. --set "
                        "batch=64)") from None
  if train:
    if loss is None:
      raise CliInputError(f"--train needs a scalar loss, but {where} "
                          "returned none",
                          hint="return the scalar loss first in outputs")
    _add_training(graph, loss)
    outs = None
  n_params = sum(v.shape.size for v in graph.trainable_variables)
  desc = (f"{where}: {len(graph.operations)} ops, {_params(n_params)} "
          f"params{', training step (Adam)' if train else ''}")
  return LoadedModel(graph, outs, where, desc, None, overrides, train)


def load_model(spec, overrides=None, train=None):
  """Builds the model ``spec``: a zoo family/preset name or
  ``path/to/file.py:function``.

  Args:
    spec: e.g. ``"transformer"``, ``"gpt3_175b"``, ``"my_model.py:build"``.
    overrides: preset fields (or the function's keyword arguments).
    train: True: the training step (the backward pass and an Adam update
      too); False: the forward pass; None (the default, as the CLI's): the
      training step, except for decoding steps and user graphs without a
      loss.

  Returns:
    A :class:`LoadedModel`.

  Raises:
    CliInputError: for an unknown model, a bad override, or a model file
      that fails to import or returns something else than a graph.
  """
  overrides = dict(overrides or {})
  if spec.endswith(".py") or ".py:" in spec:
    return _load_file(spec, overrides, train)
  if spec.startswith("decode:"):
    return _load_decoding(spec, overrides, train)
  return _load_preset(spec, overrides, train)


def _load_decoding(spec, overrides, train):
  """``decode:PRESET``: the one-token decoding step of a zoo LM (batch,
  memory_length, mode, beam_size and the preset's fields via --set); its
  predicted step time is the per-token latency."""
  from mesh_tf.models import decoding
  name = spec.split(":", 1)[1] or "transformer_tiny"
  preset = FAMILIES.get(name, name)
  if train:
    raise CliInputError("a decoding step has no training step",
                        hint="drop --train for decode: models")
  train = False
  try:
    d = decoding.decoding_model(preset, **overrides)
  except MtfError as e:
    raise CliInputError(f"cannot build the decoding step of {name!r}: {e}",
                        hint="give a zoo LM preset (e.g. decode:gpt2_small) "
                        "and --set batch=,memory_length= or its fields")
  except (TypeError, ValueError) as e:
    raise CliInputError(f"decode:{name} rejects --set {overrides}: {e}",
                        hint="check the values given with --set, e.g. "
                        "--set batch=1,memory_length=64")
  desc = (f"decode:{name}: one-token decoding step, "
          f"{len(d.graph.operations)} ops (step time = per-token latency)")
  return LoadedModel(d.graph, tuple(d.cost_outputs()), spec, desc, None,
                     overrides)
