"""Benchmark: how far past ``--time-limit`` each kind of search runs.

Runs ``mtf-layout`` commands in-process through ``main()`` with a short
limit and prints the wall time and the overrun (wall - limit), including
building the model (which the limit does not count: about 0.6 s for
GPT-3's training step).

Reproduce:
  python benchmarks/time_limit.py 2 5
"""

import contextlib
import io
import sys
import time

import mesh_tf  # noqa: F401  (OR-Tools before TensorFlow)
from autolayout.cli.app import main

CASES = [
    "solve -m gpt3_175b -t a100x8-nodes128 -f json",
    "solve -m gpt3_175b -t a100x8-nodes128 --train -f json",
    "solve -m gpt3_175b -t a100x8-nodes128 --mesh data:128;model:8 -f json",
    "solve -m transformer -t tpu-v5e-16x16 -f json",
    "mesh -m gpt3_175b -t h100x8-nodes64 -f json",
    "pareto -m gpt3_175b -t a100x8-nodes128 --mesh data:128;model:8 -f json",
    "explain -m gpt3_175b -t a100x8-nodes128 --mesh data:128;model:8 -f json",
]


def run(limits):
  for limit in limits:
    for case in CASES:
      argv = case.split() + ["--time-limit", limit]
      t = time.perf_counter()
      with contextlib.redirect_stdout(io.StringIO()), \
          contextlib.redirect_stderr(io.StringIO()):
        try:
          code = main(argv)
        except SystemExit as e:
          code = e.code
      wall = time.perf_counter() - t
      print(f"limit {limit:>4} s  wall {wall:6.2f} s  over "
            f"{wall - float(limit):+6.2f} s  exit {code}  {case}",
            flush=True)


if __name__ == "__main__":
  run(sys.argv[1:] or ["2"])
