"""``python -m autolayout.cli``: the same program as ``mtf-layout``."""

import sys

from autolayout.cli import program

sys.exit(program())
