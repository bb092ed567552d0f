"""Progress bars for long stages: rich on a terminal, silent when piped or with --quiet."""
from __future__ import annotations

import sys
from contextlib import contextmanager
from typing import Iterator

QUIET = False


def enabled() -> bool:
    return not QUIET and sys.stderr.isatty()


class _Silent:
    def advance(self, steps: int = 1) -> None:
        pass

    def update(self, **_: object) -> None:
        pass


class _Bar:
    def __init__(self, progress, task):
        self.progress, self.task = progress, task

    def advance(self, steps: int = 1) -> None:
        self.progress.advance(self.task, steps)

    def update(self, **fields: object) -> None:
        self.progress.update(self.task, **fields)


@contextmanager
def bar(description: str, total: int | None) -> Iterator[_Bar | _Silent]:
    """A progress bar with an ETA on stderr, or an object that ignores updates."""
    if not enabled():
        yield _Silent()
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    with Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeRemainingColumn(),
        transient=True,
        console=_console(),
    ) as progress:
        yield _Bar(progress, progress.add_task(description, total=total))


def _console():
    from rich.console import Console

    return Console(stderr=True)
