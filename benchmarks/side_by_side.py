"""Two checkouts of mesh-tf timed side by side, in one run: each command
runs under each checkout's code (``PYTHONPATH``) in turn, alternating, and
the median wall times and their ratio are printed.  For "no slower than
the previous commit" claims on a shared, noisy machine (issue 38).

Reproduce (the previous commit extracted next to this one):
  git archive f3280a2 | tar -x -C /tmp/base
  python benchmarks/side_by_side.py --base /tmp/base --repeats 3
"""

import argparse
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# name -> argv, run from the checkout's root with its code on the path.
COMMANDS = {
    "benchmarks/solve.py --layers 2 24 --handwritten 8": [
        "benchmarks/solve.py", "--layers", "2", "24", "--handwritten", "8",
        "--repeats", "1"],
    "mtf-layout solve --model transformer --topology tpu-v5e-16x16": [
        "-m", "autolayout.cli", "solve", "--model", "transformer",
        "--topology", "tpu-v5e-16x16"],
}


def run_once(root, argv):
  """Wall seconds of ``python ARGV`` in ``root`` with ``root``'s code."""
  env = dict(os.environ, PYTHONPATH=root, COLUMNS="100")
  t0 = time.perf_counter()
  done = subprocess.run([sys.executable, *argv], cwd=root, env=env,
                        capture_output=True, text=True, check=False)
  elapsed = time.perf_counter() - t0
  if done.returncode != 0:
    raise SystemExit(f"{root}: {' '.join(argv)} failed:\n{done.stderr}")
  return elapsed


def main():
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--base", required=True, help="the other checkout's root")
  p.add_argument("--repeats", type=int, default=3)
  args = p.parse_args()
  roots = {"base": os.path.abspath(args.base), "this": HERE}
  print(f"base {roots['base']}  vs  this {roots['this']}; load average "
        f"{os.getloadavg()[0]:.1f}")
  for name, argv in COMMANDS.items():
    times = {k: [] for k in roots}
    for _ in range(args.repeats):
      for k, root in roots.items():   # alternate, so load hits both
        times[k].append(run_once(root, argv))
    base, this = (statistics.median(times[k]) for k in ("base", "this"))
    print(f"{name}:\n  base {base:7.2f} s  this {this:7.2f} s  this/base "
          f"{this / base:5.3f}  (runs: base "
          f"{', '.join(f'{t:.1f}' for t in times['base'])}; this "
          f"{', '.join(f'{t:.1f}' for t in times['this'])})")


if __name__ == "__main__":
  main()
