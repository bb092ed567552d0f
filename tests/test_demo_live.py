"""`loopmeter demo` in a terminal shows each stage's line as the stage ends, not all at the end:
read from a pseudo-terminal, each line stamped as it arrives."""
from __future__ import annotations

import os
import pty
import re
import select
import subprocess
import sys
import time

import pytest

pytestmark = pytest.mark.slow

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def lines_as_they_come(command: list[str], cwd) -> tuple[list[tuple[float, str]], int]:
    """Each line the command writes to its terminal, with when it arrived; and its exit code."""
    master, slave = pty.openpty()
    started = time.monotonic()
    process = subprocess.Popen(command, stdin=slave, stdout=slave, stderr=slave, cwd=cwd, close_fds=True,
                               env=dict(os.environ, COLUMNS="200"))
    os.close(slave)
    received, pending = [], b""
    try:
        while True:
            ready, _, _ = select.select([master], [], [], 1.0)  # waits for output, or looks at the process again
            if ready:
                try:
                    chunk = os.read(master, 65536)
                except OSError:  # the terminal's other end closed: the process ended
                    break
                if not chunk:
                    break
                pending += chunk
                *complete, pending = pending.split(b"\n")
                at = time.monotonic() - started
                received += [(at, ANSI.sub("", line.decode(errors="replace")).strip()) for line in complete]
            elif process.poll() is not None:
                break
    finally:
        os.close(master)
    return received, process.wait(timeout=300)


def test_each_stage_line_comes_as_the_stage_ends(tmp_path):
    received, code = lines_as_they_come([sys.executable, "-m", "loopmeter", "demo", "--data", str(tmp_path / "data"),
                                         "--warehouse", str(tmp_path / "w")], tmp_path)
    assert code == 0, received[-5:]
    stages = [(at, line) for at, line in received if line.startswith("✓ ")]
    names = [line[2:].split(":")[0] for _, line in stages]
    assert names == ["sample ForgeLoop run sets", "sample Forge store and git repositories", "ingest forgeloop",
                     "aggregate", "report confidence", "ingest forge", "report routing", "harvest survival",
                     "report html"], names
    assert "made in" in stages[0][1] and "made in" in stages[1][1]
    # they came one after another, as the stages ended: in several reads of the terminal, and the
    # first before the ForgeLoop tables that follow the last one
    times = [at for at, _ in stages]
    assert times == sorted(times) and len(set(times)) >= 5, stages
    tail = next(at for at, line in received if line.startswith("Run set "))
    assert times[0] < times[-1] <= tail
    again, code = lines_as_they_come([sys.executable, "-m", "loopmeter", "demo", "--data", str(tmp_path / "data"),
                                      "--warehouse", str(tmp_path / "w")], tmp_path)
    assert code == 0 and any("kept from before" in line for _, line in again if line.startswith("✓ sample"))
