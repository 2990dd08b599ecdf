"""What every ``mtf-layout`` subcommand shares: where output goes
(:class:`Context`), what a subcommand is (:class:`Command`) and what it
answers (:class:`Answer`), and :func:`emit`, the one place that writes an
answer as a table, JSON or CSV.
"""

import contextlib
import dataclasses
import json
import sys
import time
from typing import Any, Callable, Optional

from autolayout.cli import output as out
from autolayout.cli.errors import CliInputError


class Context:
  """Where output goes: a rich Console on stdout for tables, one on stderr
  for progress, and the raw stream for JSON/CSV."""

  def __init__(self, fmt, stream=None):
    from rich.console import Console
    self.fmt = fmt
    self.stream = stream or sys.stdout
    self.console = Console(file=self.stream, highlight=False)
    self.err = Console(stderr=True, highlight=False)
    # Where the time went: ``[name, seconds, [(step, seconds), ...]]`` per
    # phase, in order (:meth:`phase`, :meth:`phase_step`, :func:`summary`).
    self.phases = []
    self._step_mark = None

  @contextlib.contextmanager
  def phase(self, name):
    """Times one phase of the command (shown live on a terminal, and in
    the closing ``done in`` line, which adds the phases up)."""
    t0 = self._step_mark = time.perf_counter()
    entry = [name, 0.0, []]
    self.phases.append(entry)
    try:
      yield entry
    finally:
      entry[1] = time.perf_counter() - t0
      self._step_mark = None
      if self.err.is_terminal:
        self.err.print(f"[dim]{name}: {entry[1]:.1f} s[/]")

  def phase_step(self, label):
    """Ends a step of the current phase (e.g. one decision program):
    its time is since the phase began or the previous step ended."""
    if not self.phases or self._step_mark is None:
      return
    now = time.perf_counter()
    took = now - self._step_mark
    self.phases[-1][2].append((label, took))
    self._step_mark = now
    if self.err.is_terminal:
      self.err.print(f"[dim]  {label}: {took:.1f} s[/]")

  @contextlib.contextmanager
  def progress(self, what, unit="s"):
    """A live display while the solver runs (on stderr, only on a terminal,
    gone when done): a spinner, the elapsed time and, through the yielded
    ``update(best, bound, elapsed_s)``, the best objective so far and the
    solver's bound (``unit``: "s" or "B")."""
    from rich.progress import (Progress, SpinnerColumn, TextColumn,
                               TimeElapsedColumn)
    with Progress(SpinnerColumn(), TextColumn("{task.description}"),
                  TimeElapsedColumn(), console=self.err, transient=True,
                  disable=not self.err.is_terminal) as p:
      task = p.add_task(what, total=None)

      def update(best, bound, elapsed_s):
        fmt = out.fmt_time if unit == "s" else out.fmt_bytes
        # Short enough for 80 columns; the elapsed time has its own column.
        p.update(task, description=(
            f"solving: best {fmt(best)}, bound {fmt(bound)}"))

      def on_mesh(mesh, index, count, best):
        """The mesh search's display: which mesh shape is being solved
        and the best layout so far."""
        so_far = ("" if best is None else
                  f", best so far {out.fmt_time(best.step_time_s)} on "
                  f"{';'.join(f'{d.name}:{d.size}' for d in best.mesh_shape)}")
        p.update(task, description=(
            f"mesh {index + 1}/{count}: solving {mesh}{so_far}"))
      update.on_mesh = on_mesh
      yield update

  def json(self, payload):
    json.dump(payload, self.stream, indent=2, allow_nan=False)
    self.stream.write("\n")

  def csv(self, df, index=True):
    out.write_csv(df, self.stream, index=index)

  def line(self, text=""):
    from rich.text import Text
    self.console.print(Text(text))


@dataclasses.dataclass(frozen=True)
class Answer:
  """A subcommand's result in every output format; :func:`emit` writes the
  one asked for, so each format is built only when needed.

  Attributes:
    json: ``() -> dict``, the JSON payload after its ``schema`` and
      ``command`` keys (``docs/cli.md``).
    csv: ``() -> DataFrame`` written by ``--format csv``.
    table: ``(Context) -> None`` that prints the rich tables.
    csv_index: whether the CSV has the DataFrame's index.
    plot: ``(autolayout.plots) -> Figure`` for ``--plot``, or None.
    views: ``(JSON payload) -> [LayoutView]`` for ``--html``
      (:mod:`autolayout.cli.html`), or None.
  """
  json: Callable[[], dict]
  csv: Callable[[], Any]
  table: Callable[[Context], None]
  csv_index: bool = True
  plot: Optional[Callable[[Any], Any]] = None
  views: Optional[Callable[[dict], Any]] = None


@dataclasses.dataclass(frozen=True)
class Command:
  """One ``mtf-layout`` subcommand.

  A new subcommand is a module that defines ``COMMAND = Command(...)`` and
  one line naming it in :data:`autolayout.cli.app.COMMANDS`.

  Attributes:
    name: what the user types (``solve``).
    help: one line for ``mtf-layout --help``.
    description: the paragraph of ``mtf-layout NAME --help``.
    add_arguments: ``(argparse parser) -> None``, the command's options.
    run: ``(args, Context) -> Answer``; raises typed errors.
    timed: whether table output ends with a "done in" line on stderr.
  """
  name: str
  help: str
  description: str
  add_arguments: Callable[[Any], None]
  run: Callable[[Any, Context], Answer]
  timed: bool = True


def summary(ctx, wall_s):
  """``done in 26.5 s = model 0.4 s + search 25.9 s (k=1 3.1 s, ...) +
  output 0.1 s + other 0.1 s``: the phases add up to the wall time."""
  if all(name == "output" for name, _, _ in ctx.phases):
    return f"done in {wall_s:.1f} s"
  parts = []
  for name, s, steps in ctx.phases:
    if len(steps) > 8:   # the six longest, and the rest together
      top = sorted(steps, key=lambda x: -x[1])[:6]
      rest = [t for x, t in steps if (x, t) not in top]
      steps = [x for x in steps if x in top] + [
          (f"{len(rest)} more", sum(rest))]
    inner = "".join(f"; {label} {t:.1f} s" for label, t in steps)
    parts.append(f"{name} {s:.1f} s" + (f" ({inner[2:]})" if inner else ""))
  rest = wall_s - sum(s for _, s, _ in ctx.phases)
  return (f"done in {wall_s:.1f} s = " + " + ".join(parts)
          + f" + other {max(rest, 0.0):.1f} s")


def emit(ctx, command, answer, args):
  """Writes the plot if ``--plot`` asks, then ``answer`` in ``ctx.fmt``.

  The plot goes first: if it cannot be written, the command fails before
  any output, so stdout never holds a document followed by an error.
  """
  path = getattr(args, "plot", None)
  if path and answer.plot is not None:
    # matplotlib only when a plot is asked for (its import is 0.14 s of a
    # solve that draws nothing); Agg before anything imports pyplot.
    import matplotlib  # pylint: disable=g-import-not-at-top
    matplotlib.use("Agg")
    from autolayout import plots  # pylint: disable=g-import-not-at-top
    fig = answer.plot(plots)
    try:
      plots.save(fig, path)
    except (OSError, ValueError) as e:
      raise CliInputError(f"cannot write the plot to {path!r}: {e}",
                          hint="give --plot a writable path ending in "
                          ".png, .svg or .pdf")
    print(f"wrote {path}", file=sys.stderr)
  payload = None
  if getattr(args, "html", None) and answer.views is not None:
    from autolayout.cli import html
    payload = answer.json()
    html.write(args.html, command, payload, answer.views)
  if ctx.fmt == "json":
    ctx.json({"schema": out.SCHEMA, "command": command,
              **(payload or answer.json())})
  elif ctx.fmt == "csv":
    ctx.csv(answer.csv(), index=answer.csv_index)
  else:
    answer.table(ctx)
