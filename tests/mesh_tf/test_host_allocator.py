"""import mesh_tf asks TF for its BFC host allocator unless the user chose."""

import os
import subprocess
import sys

import pytest

from mesh_tf.startup import host_allocator


def test_request_sets_bfc_when_unset():
  env = {}
  assert host_allocator.request_bfc(env) == "true"
  assert env == {host_allocator.ENV_VAR: "true"}


@pytest.mark.parametrize("value", ["false", "0", "true"])
def test_request_keeps_the_users_choice(value):
  env = {host_allocator.ENV_VAR: value}
  assert host_allocator.request_bfc(env) == value
  assert env == {host_allocator.ENV_VAR: value}


@pytest.mark.parametrize("preset", [None, "false"])
def test_importing_mesh_tf_requests_it_before_tf_reads_it(preset):
  env = {k: v for k, v in os.environ.items()
         if k != host_allocator.ENV_VAR}
  if preset is not None:
    env[host_allocator.ENV_VAR] = preset
  code = ("import os, sys\n"
          "import mesh_tf\n"
          "assert 'tensorflow' not in sys.modules\n"
          f"print(os.environ[{host_allocator.ENV_VAR!r}])\n")
  out = subprocess.run([sys.executable, "-c", code], env=env, check=True,
                       capture_output=True, text=True).stdout.split()
  assert out == [preset or "true"]
