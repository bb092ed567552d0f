"""Benchmark adapters: what `loopmeter execute` calls to run one scenario in one mode.

An adapter is either

- a **Python adapter**: a `.py` file or an importable module defining
  `run_benchmark(input) -> dict`, and optionally `finalize_benchmark(payload)` and
  `cleanup()`; or
- a **command adapter**: any executable (or a command line such as `node host.mjs`) that
  reads one JSON request per line on stdin and writes one JSON answer per line on stdout:

      -> {"id": 1, "method": "runBenchmark", "params": {...the input...}}
      <- {"id": 1, "result": {...the answer...}}      or  {"id": 1, "error": "what went wrong"}

  The methods are `runBenchmark`, `finalizeBenchmark` and `cleanup`; an adapter answers
  `{"id": n, "result": null}` to a method it does not implement. After `cleanup` the
  runner closes stdin and waits for the process to exit. Its stderr goes to a log file. The process
  runs in a process group of its own, which the runner ends with it (`CommandAdapter._end`), and,
  on Linux, is killed if the runner dies first.

`docs/runner.md` describes the input, the answer and the protocol for adapter authors.
"""
from __future__ import annotations

import contextlib
import copy
import importlib
import importlib.util
import json
import os
import re
import select
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import orjson

from ..config import DEFAULT_MAX_FILE_BYTES
from ..errors import LoopmeterError
from ..lifetime import pdeathsig_setter

MODULE_NAME = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*")
EXIT_WAIT_SECONDS = 10.0  # for the answer to cleanup, and for the adapter to exit once stdin is closed
TERMINATE_WAIT = EXIT_WAIT_SECONDS / 2  # after SIGTERM, before SIGKILL
ANSWER_LIMIT = DEFAULT_MAX_FILE_BYTES  # bytes of one answer line: a run it answers must fit a run file


class AdapterFailed(Exception):
    """One adapter call failed; the message is the adapter's own error."""


class PythonAdapter:
    """Functions of a Python module, called in this process."""

    kind = "python"

    def __init__(self, module: Any, label: str):
        self.label = label
        self._run = getattr(module, "run_benchmark", None)
        if not callable(self._run):
            raise LoopmeterError(f"adapter {label} does not define run_benchmark(input)")
        self._finalize = getattr(module, "finalize_benchmark", None)
        self._cleanup = getattr(module, "cleanup", None)

    def start(self) -> None:
        pass

    def _call(self, function, *arguments) -> Any:
        # an adapter's prints must not end up in the runner's --json output
        with contextlib.redirect_stdout(sys.stderr):
            try:
                return function(*copy.deepcopy(arguments))
            except KeyboardInterrupt:  # Ctrl-C, or SIGTERM (`interrupts.answer`): the runner's to answer
                raise
            except BaseException as error:  # noqa: BLE001 - any failure of the adapter is its answer
                # sys.exit() in a hook, a GeneratorExit or an exception class of its own is the adapter's
                # failure, not the runner's end
                raise AdapterFailed(_failure_text(error)) from None

    def run(self, request: dict) -> Any:
        return self._call(self._run, request)

    def finalize(self, payload: dict) -> Any:
        return None if self._finalize is None else self._call(self._finalize, payload)

    def cleanup(self) -> None:
        if callable(self._cleanup):
            self._call(self._cleanup)


class CommandAdapter:
    """A long-lived process speaking JSON lines; restarted if it dies between calls."""

    kind = "command"

    def __init__(self, argv: list[str], label: str, stderr_log: Path):
        self.argv, self.label, self.stderr_log = argv, label, stderr_log
        self.process: subprocess.Popen | None = None
        self.next_id = 0
        self._stderr: threading.Thread | None = None

    def start(self) -> None:
        self.stderr_log.parent.mkdir(parents=True, exist_ok=True)
        try:
            self.process = subprocess.Popen(
                self.argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, bufsize=0,
                preexec_fn=_tied_to(os.getpid(), pdeathsig_setter()),
            )
        except (OSError, subprocess.SubprocessError) as error:
            raise LoopmeterError(f"adapter {self.label} cannot be started: {getattr(error, 'strerror', None) or error}") from None
        self._stderr = threading.Thread(target=_keep_stderr, args=(self.process.stderr, self.stderr_log),
                                        name="adapter-stderr", daemon=True)
        self._stderr.start()

    def _running(self) -> bool:
        """The adapter process runs; one found ended is reaped, its group killed first."""
        if self.process is None:
            return False
        if not _ended(self.process, 0):
            return True
        self._end(0)
        return False

    def _exited(self) -> AdapterFailed:
        code = self._end(EXIT_WAIT_SECONDS)
        if self._stderr is not None:
            self._stderr.join(timeout=2)  # its last lines in the log (a child out of its group may hold the pipe)
        last = _last_line(self.stderr_log)
        detail = f"; its last stderr line: {last}" if last else f"; its stderr is in {self.stderr_log}"
        return AdapterFailed(f"the adapter process exited (code {code}) without answering{detail}")

    def _call(self, method: str, params: Any, timeout: float | None = None) -> Any:
        if not self._running():
            self.start()  # the first call, or the process died after an earlier one
        self.next_id += 1
        request = _encoded({"id": self.next_id, "method": method, "params": params}) + b"\n"
        try:
            self.process.stdin.write(request)
            self.process.stdin.flush()
        except (BrokenPipeError, OSError):
            raise self._exited() from None
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            line = self._line(deadline, method)
            if not line:
                raise self._exited()
            answer = _parsed(line)
            if not isinstance(answer, dict) or not ({"result", "error"} & answer.keys()):
                raise AdapterFailed('the adapter\'s answer must be an object with "result" or "error"')
            number = answer.get("id", self.next_id)
            if type(number) is int and number < self.next_id:
                continue  # the late answer of a request whose call failed (a stray line was read for it)
            if isinstance(number, bool) or number != self.next_id:  # `true` is no id, though Python takes it for 1
                self._abandon()  # out of step: the next call starts a new process
                raise AdapterFailed(f"the adapter answered request {number!r}, expected {self.next_id}")
            break
        error = answer.get("error")
        if error is not None:
            if isinstance(error, dict) and isinstance(error.get("message"), str):
                error = error["message"]
            raise AdapterFailed(error if isinstance(error, str) else orjson.dumps(error).decode())
        return answer.get("result")

    def _line(self, deadline: float | None, method: str) -> bytes:
        """The next stdout line (b"" at its end), at most ANSWER_LIMIT bytes (a longer one fails the call and
        ends the adapter: memory stays bounded, and a signal is answered, whatever it writes); with a
        deadline, NoAnswer once it passes. Read a byte at a time (stdout is unbuffered), so what follows
        the line stays in the pipe for the next read."""
        stdout = self.process.stdout
        if deadline is None:
            line = stdout.readline(ANSWER_LIMIT + 1)
            if len(line) > ANSWER_LIMIT:
                self._abandon()
                raise AdapterFailed(f"the adapter's answer to {method} is longer than {ANSWER_LIMIT >> 20} MiB (the "
                                    "largest run file `ingest forgeloop` takes); it was ended")
            return line
        line = b""
        while not line.endswith(b"\n"):
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([stdout], [], [], left)[0]:
                raise NoAnswer(f"the adapter did not answer {method} within {EXIT_WAIT_SECONDS:g} s; it was terminated")
            byte = stdout.read(1)
            if not byte:
                return line
            line += byte
        return line

    def run(self, request: dict) -> Any:
        return self._call("runBenchmark", request)

    def finalize(self, payload: dict) -> Any:
        return self._call("finalizeBenchmark", payload)

    def cleanup(self) -> None:
        """`cleanup`, its answer awaited EXIT_WAIT_SECONDS at most (an adapter busy with a call a Ctrl-C
        left, or hung, does not hold the runner), then stdin closed and the process group ended."""
        if not self._running():
            return  # nothing running: nothing to clean up
        try:
            self._call("cleanup", {}, timeout=EXIT_WAIT_SECONDS)
        except AdapterFailed as error:
            self._end(0 if isinstance(error, NoAnswer) else EXIT_WAIT_SECONDS)
            raise
        except BaseException:  # Ctrl-C or SIGTERM while it is awaited: end the adapter now
            self._end(0)
            raise
        self._end(EXIT_WAIT_SECONDS)

    def _abandon(self) -> None:
        self._end(0, terminate=False)

    def _end(self, wait: float, terminate: bool = True) -> int | None:
        """End the adapter: stdin closed, `wait` seconds for it to exit, then its process group sent SIGTERM
        (`terminate`) and TERMINATE_WAIT seconds more, then SIGKILL to the group whatever happened: the
        processes the adapter started in the background end with it. The group is signalled before the
        adapter is reaped, while its group id cannot be another's. Returns the adapter's exit code."""
        process, self.process = self.process, None
        if process is None:
            return None
        try:
            with contextlib.suppress(OSError):
                process.stdin.close()
            if not _ended(process, wait) and terminate:
                _signal_group(process, signal.SIGTERM)
                _ended(process, TERMINATE_WAIT)
        finally:  # even when a Ctrl-C cuts the waits short
            _signal_group(process, signal.SIGKILL)
            code = process.wait()
            _close_pipes(process)
        return code


class NoAnswer(AdapterFailed):
    """The adapter did not answer in the time it was given."""


def _tied_to(parent: int, set_pdeathsig):
    """What the adapter process runs before the adapter: a process group of its own (the runner ends the
    whole group, and a terminal's Ctrl-C reaches the runner alone, which answers it), and, on Linux, death
    by SIGKILL when the runner's thread that started it ends (PR_SET_PDEATHSIG: a runner killed with
    SIGKILL takes the adapter with it; the processes the adapter started stay out of its reach)."""
    def before_exec() -> None:
        os.setpgid(0, 0)
        if set_pdeathsig is not None:
            set_pdeathsig()
            if os.getppid() != parent:  # the runner died before the adapter was tied to it
                os._exit(1)
    return before_exec


def _ended(process: subprocess.Popen, timeout: float) -> bool:
    """Whether the adapter process has exited, waiting up to `timeout` seconds, without reaping it (its
    process id, the group's id, stays its own until `wait`)."""
    if process.returncode is not None:
        return True
    deadline = time.monotonic() + timeout
    pause = 0.001
    while True:
        try:
            if os.waitid(os.P_PID, process.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None:
                return True
        except ChildProcessError:
            return True
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        time.sleep(min(pause, left))
        pause = min(pause * 2, 0.05)


def _signal_group(process: subprocess.Popen, number: int) -> None:
    if process.returncode is not None:
        return  # reaped already: its group id may be another's by now
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, number)


def _parsed(line: bytes) -> Any:
    """An answer line as JSON. orjson refuses integers beyond 64 bits, which JSON allows: such a line
    is read again with the standard parser (NaN and Infinity, which JSON does not allow, still refused),
    and the contract's rules judge the number (`answer rejected: <field>: <rule>`)."""
    try:
        return orjson.loads(line)
    except orjson.JSONDecodeError:
        pass
    try:
        return json.loads(line, parse_constant=_not_json, parse_int=_integer)
    except (ValueError, RecursionError):
        shown = line.decode("utf-8", "replace").strip()
        raise AdapterFailed(f"the adapter answered with a line that is not JSON: {shown[:200]!r}") from None


def _integer(text: str) -> int:
    """A JSON integer; one of more digits than Python converts (4,300) as 10**4300 with its sign, which
    the contract judges as it judges any number beyond its bounds."""
    digits = text.lstrip("-")
    if len(digits) <= 4300:
        return int(text)
    return -(10 ** 4300) if text.startswith("-") else 10 ** 4300


def _not_json(constant: str) -> Any:
    raise ValueError(f"{constant} is not JSON")


def _encoded(request: dict) -> bytes:
    """A request as one JSON line; with the standard encoder when orjson refuses it (an integer beyond
    64 bits in an answer handed back to finalizeBenchmark)."""
    try:
        return orjson.dumps(request)
    except orjson.JSONEncodeError:
        return json.dumps(request, ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode()


STDERR_LIMIT = 16 << 20  # bytes of an adapter's stderr kept in its log each time it is started


def _keep_stderr(pipe, log_path: Path, limit: int = STDERR_LIMIT) -> None:
    """Copy what the adapter writes on stderr to its log, the first `limit` bytes of it (an adapter that
    logs without end does not fill the disk); the rest is read, so the adapter never waits on a full
    pipe, and counted in a last line. Ends when every process holding the pipe has closed it."""
    kept = dropped = 0
    try:
        with open(log_path, "ab") as log:
            while True:
                chunk = pipe.read(1 << 16)
                if not chunk:
                    break
                room = max(0, limit - kept)
                if room:
                    log.write(chunk[:room])
                    log.flush()
                kept += min(room, len(chunk))
                dropped += len(chunk) - min(room, len(chunk))
            if dropped:
                log.write(f"\n[loopmeter: {dropped} more bytes of stderr not kept: the log keeps {limit >> 20} MiB "
                          "each time the adapter starts]\n".encode())
    except (OSError, ValueError):  # the log cannot be written (a full disk): the pipe is still drained
        with contextlib.suppress(OSError, ValueError):
            while pipe.read(1 << 16):
                pass
    finally:
        with contextlib.suppress(OSError):
            pipe.close()


def _close_pipes(process: subprocess.Popen) -> None:
    """Close the pipes to and from an ended adapter process, each even when the other cannot be."""
    for pipe in (process.stdin, process.stdout):
        with contextlib.suppress(OSError):
            pipe.close()


def _failure_text(error: BaseException) -> str:
    """`<ExceptionType>: <message>`; a SystemExit shows its code (`SystemExit: 0`), as sys.exit() gave it."""
    if isinstance(error, SystemExit):
        return f"SystemExit: {error.code}"
    return f"{type(error).__name__}: {error}"


def _last_line(path: Path) -> str:
    try:
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            handle.seek(max(0, handle.tell() - 4096))
            lines = [line.strip() for line in handle.read().decode("utf-8", "replace").splitlines() if line.strip()]
    except OSError:
        return ""
    return lines[-1][:300] if lines else ""


def _python_file(path: Path) -> PythonAdapter:
    name = f"loopmeter_adapter_{re.sub(r'[^0-9A-Za-z_]', '_', path.stem)}"
    directory = str(path.parent.resolve())
    if directory not in sys.path:
        sys.path.insert(0, directory)  # so the adapter can import its neighbours
    try:
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    except KeyboardInterrupt:
        raise
    except BaseException as error:  # noqa: BLE001 - any error while importing the adapter
        raise LoopmeterError(f"adapter {path} cannot be loaded: {_failure_text(error)}") from None
    return PythonAdapter(module, str(path))


def load_adapter(spec: str, stderr_log: Path) -> PythonAdapter | CommandAdapter:
    """The adapter named by `--adapter`: a .py file, an executable file, a command line,
    an importable module name, or a command on PATH (tried in that order)."""
    if not spec or not spec.strip():
        raise LoopmeterError("--adapter must name a Python file or module, or a command")
    path = Path(spec).expanduser()
    if path.is_file():
        if path.suffix == ".py":
            return _python_file(path)
        if not os.access(path, os.X_OK):
            raise LoopmeterError(f"adapter {spec} is not executable (chmod +x it, or give a .py adapter module)")
        return CommandAdapter([str(path.resolve())], spec, stderr_log)
    if path.suffix == ".py" and not any(c.isspace() for c in spec):
        raise LoopmeterError(f"adapter {spec} does not exist")
    if any(c.isspace() for c in spec.strip()):
        try:
            argv = shlex.split(spec)
        except ValueError as error:
            raise LoopmeterError(f"--adapter {spec!r} is not a valid command line: {error}") from None
        if shutil.which(argv[0]) is None:
            raise LoopmeterError(f"adapter command {argv[0]!r} is not found (not a file, not on PATH)")
        return CommandAdapter(argv, spec, stderr_log)
    if MODULE_NAME.fullmatch(spec):
        if os.getcwd() not in sys.path:
            sys.path.insert(0, os.getcwd())
        try:
            module = importlib.import_module(spec)
        except ModuleNotFoundError as error:
            missing = error.name or ""
            if spec != missing and not spec.startswith(f"{missing}."):  # the adapter's own import failed
                raise LoopmeterError(f"adapter module {spec} cannot be loaded: ModuleNotFoundError: {error}") from None
        except KeyboardInterrupt:
            raise
        except BaseException as error:  # noqa: BLE001 - any error while importing the adapter
            raise LoopmeterError(f"adapter module {spec} cannot be loaded: {_failure_text(error)}") from None
        else:
            return PythonAdapter(module, spec)
    if shutil.which(spec) is not None:
        return CommandAdapter([spec], spec, stderr_log)
    raise LoopmeterError(f"adapter {spec!r} is neither a file, an importable Python module, nor a command on PATH")
