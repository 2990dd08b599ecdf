"""The collector settings of the ``mtf-layout`` process (``program``) and of
``main`` run in-process: the process collects at GC_THRESHOLDS and keeps
its leftovers out of the shutdown collection; an in-process caller gets
its own thresholds back."""

import gc
import subprocess
import sys
import textwrap

from autolayout.cli import app, main


def test_main_restores_the_callers_thresholds():
  before = gc.get_threshold()
  try:
    gc.set_threshold(1234, 5, 6)
    assert main(["topologies"]) == 0
    assert gc.get_threshold() == (1234, 5, 6)
  finally:
    gc.set_threshold(*before)


def test_the_process_collects_less_and_freezes_what_is_left():
  code = textwrap.dedent("""
      import gc, sys
      from autolayout.cli import program
      sys.argv = ["mtf-layout", "topologies"]
      code = program()
      print("STATE", gc.get_threshold(), gc.get_freeze_count() > 0, code)
  """)
  done = subprocess.run([sys.executable, "-c", code], capture_output=True,
                        text=True, check=True, timeout=120)
  state = [l for l in done.stdout.splitlines() if l.startswith("STATE")]
  assert state == [f"STATE {app.GC_THRESHOLDS} True 0"], done.stdout
