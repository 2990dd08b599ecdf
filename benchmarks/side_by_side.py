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
import resource
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


def _children_cpu_s():
  usage = resource.getrusage(resource.RUSAGE_CHILDREN)
  return usage.ru_utime + usage.ru_stime


def run_once(root, argv):
  """``(wall s, CPU s)`` of ``python ARGV`` in ``root`` with ``root``'s
  code.  CPU time (user + system, all threads) is what a loaded machine
  disturbs least."""
  env = dict(os.environ, PYTHONPATH=root, COLUMNS="100")
  t0, c0 = time.perf_counter(), _children_cpu_s()
  done = subprocess.run([sys.executable, *argv], cwd=root, env=env,
                        capture_output=True, text=True, check=False)
  elapsed, cpu = time.perf_counter() - t0, _children_cpu_s() - c0
  if done.returncode != 0:
    raise SystemExit(f"{root}: {' '.join(argv)} failed:\n{done.stderr}")
  return elapsed, cpu


def main():
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--base", required=True, help="the other checkout's root")
  p.add_argument("--repeats", type=int, default=3)
  p.add_argument("--only", choices=sorted(COMMANDS), action="append",
                 help="time only these commands (default: all)")
  args = p.parse_args()
  roots = {"base": os.path.abspath(args.base), "this": HERE}
  print(f"base {roots['base']}  vs  this {roots['this']}; load average "
        f"{os.getloadavg()[0]:.1f}")
  for name, argv in COMMANDS.items():
    if args.only and name not in args.only:
      continue
    runs = {k: [] for k in roots}
    for _ in range(args.repeats):
      for k, root in roots.items():   # alternate, so load hits both
        runs[k].append(run_once(root, argv))
    print(f"{name}:")
    for i, what in ((0, "wall"), (1, "CPU ")):
      base, this = (statistics.median(r[i] for r in runs[k])
                    for k in ("base", "this"))
      print(f"  {what} base {base:7.2f} s  this {this:7.2f} s  this/base "
            f"{this / base:5.3f}  (runs: base "
            f"{', '.join(f'{r[i]:.1f}' for r in runs['base'])}; this "
            f"{', '.join(f'{r[i]:.1f}' for r in runs['this'])})")


if __name__ == "__main__":
  main()
