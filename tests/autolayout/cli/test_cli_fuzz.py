"""Fuzzing ``mtf-layout``: hypothesis builds argument vectors from a
grammar of valid and invalid pieces (every subcommand, option, value class
and model-file kind), runs them in-process through ``main()`` and checks
the contract of docs/cli.md: exit 0, 2, 3 or 4 (never 1, never an escaped
exception), and on failure exactly one ``error:`` and one ``hint:`` line,
without internal names or overlong echoes, plus a JSON error object with
``-f json``.

About a minute in the suite (``MTF_FUZZ_EXAMPLES``, default 400, and
``MTF_FUZZ_SEED`` for another sample; the suite's run is derandomized so
that it is repeatable).
"""

import os

from hypothesis import given, seed, settings
from hypothesis import strategies as st

from tests.autolayout.cli import cli_contract

EXAMPLES = int(os.environ.get("MTF_FUZZ_EXAMPLES", "400"))
SEED = int(os.environ.get("MTF_FUZZ_SEED", "0"))

MODEL_FILE = '''
import sys
import mesh_tf as mtf

def build(batch=64, d_model=128):
  g = mtf.Graph(); mesh = mtf.Mesh(g, "m")
  x = mtf.zeros(mesh, f"batch:{batch},d_model:{d_model}")
  w = mtf.get_variable(mesh, "w", f"d_model:{d_model},d_ff:256")
  return g, [mtf.reduce_sum(mtf.einsum([x, w], reduced_dims=[w.shape[0]]))]

def exits():
  sys.exit(5)

def chatty():
  print("noise on stdout")
  return build()

def raises():
  raise ValueError("bad model")

def empty():
  return mtf.Graph(), None

def interrupts():
  raise KeyboardInterrupt

def deep(n=0):
  return deep(n + 1)
'''
DIR = os.path.join(os.environ.get("TMPDIR", "/tmp"),
                   f"mtf_layout_fuzz_{os.getpid()}")

VALID_MODELS = ["transformer_tiny", "mlp_tiny", "moe_tiny", "conv3d_tiny",
                "decode:transformer_tiny"]
BAD_MODELS = ["nope", "", "decode:nope", "decode:mlp_tiny", "x" * 400,
              "gpt3_175b"]
FILE_MODELS = ["{d}/m.py:build", "{d}/m.py:exits", "{d}/m.py:chatty",
               "{d}/m.py:raises", "{d}/m.py:empty", "{d}/m.py:interrupts",
               "{d}/m.py:deep", "{d}/m.py:missing", "{d}/m.py",
               "{d}/syntax.py:f", "{d}/exits.py:f", "/nonexistent/m.py:f"]
TOPOLOGIES = ["tpu-v5e-2x4", "dgx-h100", "tpu-v4-2x2x2", "h100x8-nodes2",
              "tpu-v5e-4x4", "nope", "", "tpu-v5e-0x4", "h100x8-nodes0",
              "tpu-v5e-100000x100000", "t" * 300]
MESHES = ["data:8", "data:2;model:4", "x:2;y:2;z:2", "data:16", "", "x:0",
          "a:2;a:4", "data=8", ";;", "x:99999999999999999999", "m" * 300]
NUMBERS = {
    "--time-limit": ["2", "0.5", "0", "-1", "nan", "inf", "1e308", "abc"],
    "--workers": ["1", "2", "0", "-3", "1000000", "2.5", "x"],
    "--seed": ["0", "7", "-1", "99999999999999999999"],
    "--memory-budget": ["hbm", "none", "50%", "16GB", "1B", "0", "-1GB",
                        "1e99", "nan", "16XB", "0%"],
    "--max-axes": ["1", "2", "3", "0", "-1", "99"],
    "--devices": ["8", "16", "0", "7", "-4", "1000000000000"],
    "--max-points": ["1", "2", "0", "-1", "100000"],
    "--top": ["1", "12", "0", "-5"],
    "--view": ["ops", "axes", "memory", "collectives", "variables", "nope"],
    "--objective": ["time", "latency", "comm", "memory", "speed"],
    "--format": ["table", "json", "csv", "xml"],
    "--max-axes-per-dim": ["1", "2", "0", "-1", "99"],
    "--memory-reserve": ["5%", "0", "0.5", "1", "-1", "x"],
    "--zero-stage": ["auto", "0", "3", "7", "x"],
    "--recompute": ["auto", "0", "2", "-1"],
    "--microbatches": ["auto", "1", "2", "0"],
}
LAYOUTS = ["auto", "", "batch:data", "batch:data;d_ff:model", "batch",
           "zzz:data", "batch:nope", "batch:data;batch:data",
           "n=auto@data:8", "=auto", "auto@", "batch:data@x:0"]
SETS = ["layers=1", "layers=0", "layers=100000", "bogus=1", "dtype=int32",
        "dtype=bfloat16", "batch=1000000000000", "layers", "batch=16",
        "d_model=99999999999999999999"]
PLOTS = ["{d}/out.png", "{d}/out.svg", "/nonexistent/x.png", "{d}",
         "{d}/out.txt"]
COMMANDS = ["solve", "compare", "report", "mesh", "pareto", "topologies",
            "explain"]
PLAN_COMMANDS = ["diff", "export"]
PLAN_FILES = ["{d}/plan.json", "{d}/m.py", "/nonexistent/p.json", "{d}",
              "{d}/garbage.json"]


def _setup_files():
  os.makedirs(DIR, exist_ok=True)
  with open(os.path.join(DIR, "m.py"), "w", encoding="utf-8") as f:
    f.write(MODEL_FILE)
  with open(os.path.join(DIR, "syntax.py"), "w", encoding="utf-8") as f:
    f.write("def f(:\n")
  with open(os.path.join(DIR, "exits.py"), "w", encoding="utf-8") as f:
    f.write("import sys\nsys.exit(2)\n")
  with open(os.path.join(DIR, "garbage.json"), "w", encoding="utf-8") as f:
    f.write("{not json")
  if not os.path.exists(os.path.join(DIR, "plan.json")):
    # A real plan, saved by `solve --save`, for diff and export.
    cli_contract.run(["solve", "-m", "mlp_tiny", "-t", "tpu-v5e-2x4",
                      "--save", os.path.join(DIR, "plan.json")])


@st.composite
def argv(draw):
  """An argument vector: mostly well-formed, with invalid pieces mixed in
  (any option may land on any subcommand)."""
  command = draw(st.sampled_from(COMMANDS + PLAN_COMMANDS
                                 + ["frobnicate", "--version"]))
  args = [command]
  if command == "--version":
    return args
  if command in PLAN_COMMANDS:
    plan = st.sampled_from(PLAN_FILES)
    args += [draw(plan).replace("{d}", DIR)
             for _ in range(2 if command == "diff" else 1)]
    if command == "export":
      args += ["--to", draw(st.sampled_from(["jax", "torch", "dtensor",
                                             "onnx"]))]
      if draw(st.booleans()):
        args += ["-o", draw(st.sampled_from(
            ["{d}/out.json", "/nonexistent/o.json", "{d}"])).replace(
                "{d}", DIR)]
    if draw(st.booleans()):
      args += ["--format", draw(st.sampled_from(NUMBERS["--format"]))]
    return args
  if command in ("topologies", "frobnicate"):
    if draw(st.booleans()):
      args += ["--format", draw(st.sampled_from(NUMBERS["--format"]))]
    return args
  kind = draw(st.sampled_from(["valid", "valid", "valid", "file", "bad",
                               "none"]))
  model = {"valid": st.sampled_from(VALID_MODELS),
           "file": st.sampled_from(FILE_MODELS),
           "bad": st.sampled_from(BAD_MODELS),
           "none": st.just(None)}[kind]
  model = draw(model)
  if model is not None:
    args += ["--model", model.replace("{d}", DIR)]
  args += ["--topology", draw(st.sampled_from(
      TOPOLOGIES[:1] * 4 + TOPOLOGIES))]
  # A short search unless the draw picks another --time-limit.
  if not draw(st.integers(0, 5)) == 0:
    args += ["--time-limit", "2"]
  options = draw(st.lists(st.sampled_from(
      sorted(NUMBERS) + ["--mesh", "--layout", "--set", "--train", "--plot",
                         "--debug-free", "--forward", "--layout-only",
                         "--no-overlap"]), max_size=4, unique=True))
  for opt in options:
    if opt in NUMBERS:
      args += [opt, draw(st.sampled_from(NUMBERS[opt]))]
    elif opt == "--mesh":
      args += [opt, draw(st.sampled_from(MESHES))]
    elif opt == "--layout":
      args += [opt, draw(st.sampled_from(LAYOUTS))]
    elif opt == "--set":
      for item in draw(st.lists(st.sampled_from(SETS), min_size=1,
                                max_size=2)):
        args += [opt, item]
    elif opt in ("--train", "--forward", "--layout-only", "--no-overlap"):
      args += [opt]
    elif opt == "--plot":
      args += [opt, draw(st.sampled_from(PLOTS)).replace("{d}", DIR)]
  if "--train" in options and "--time-limit" not in args:
    # The training search (meshes x decisions) runs to its time limit on
    # some tiny models; the fuzz checks the contract, not the default 60 s.
    args += ["--time-limit", "2"]
  if command in ("compare", "report") and "--layout" not in options:
    if draw(st.booleans()):
      args += ["--layout", draw(st.sampled_from(LAYOUTS))]
  return args


@seed(SEED)
@settings(max_examples=EXAMPLES, deadline=None, derandomize=not SEED,
          database=None)
@given(argv())
def test_every_argument_vector_keeps_the_contract(args):
  _setup_files()
  r = cli_contract.run(args)
  assert cli_contract.problems(r) == [], (args, r.code, r.err[-800:])
