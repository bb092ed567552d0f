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
  runner closes stdin and waits for the process to exit. Its stderr goes to a log file.

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
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson

from ..errors import LoopmeterError

MODULE_NAME = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*")
EXIT_WAIT_SECONDS = 10.0


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
            except (Exception, SystemExit) as error:  # noqa: BLE001 - any failure of the adapter is its answer
                # sys.exit() in a hook is the adapter's failure, not the runner's exit; Ctrl-C and the
                # runner's own termination (not Exception, not SystemExit) pass through
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

    def start(self) -> None:
        self.stderr_log.parent.mkdir(parents=True, exist_ok=True)
        with open(self.stderr_log, "ab") as log:
            try:
                self.process = subprocess.Popen(
                    self.argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, bufsize=0
                )
            except OSError as error:
                raise LoopmeterError(f"adapter {self.label} cannot be started: {error.strerror or error}") from None

    def _exited(self) -> AdapterFailed:
        process, self.process = self.process, None
        code = None
        if process is not None:
            try:
                code = process.wait(timeout=EXIT_WAIT_SECONDS)
            except subprocess.TimeoutExpired:
                process.kill()
                code = process.wait()
            _close_pipes(process)
        last = _last_line(self.stderr_log)
        detail = f"; its last stderr line: {last}" if last else f"; its stderr is in {self.stderr_log}"
        return AdapterFailed(f"the adapter process exited (code {code}) without answering{detail}")

    def _call(self, method: str, params: Any) -> Any:
        if self.process is None or self.process.poll() is not None:
            self.start()  # the first call, or the process died after an earlier one
        self.next_id += 1
        request = _encoded({"id": self.next_id, "method": method, "params": params}) + b"\n"
        try:
            self.process.stdin.write(request)
            self.process.stdin.flush()
        except (BrokenPipeError, OSError):
            raise self._exited() from None
        while True:
            line = self.process.stdout.readline()
            if not line:
                raise self._exited()
            answer = _parsed(line)
            if not isinstance(answer, dict) or not ({"result", "error"} & answer.keys()):
                raise AdapterFailed('the adapter\'s answer must be an object with "result" or "error"')
            number = answer.get("id", self.next_id)
            if type(number) is int and number < self.next_id:
                continue  # the late answer of a request whose call failed (a stray line was read for it)
            if number != self.next_id:
                self._abandon()  # out of step: the next call starts a new process
                raise AdapterFailed(f"the adapter answered request {number!r}, expected {self.next_id}")
            break
        error = answer.get("error")
        if error is not None:
            if isinstance(error, dict) and isinstance(error.get("message"), str):
                error = error["message"]
            raise AdapterFailed(error if isinstance(error, str) else orjson.dumps(error).decode())
        return answer.get("result")

    def run(self, request: dict) -> Any:
        return self._call("runBenchmark", request)

    def finalize(self, payload: dict) -> Any:
        return self._call("finalizeBenchmark", payload)

    def cleanup(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return  # nothing running: nothing to clean up
        try:
            self._call("cleanup", {})
        finally:
            self._close()

    def _abandon(self) -> None:
        process, self.process = self.process, None
        if process is not None:
            process.kill()
            process.wait()
            _close_pipes(process)

    def _close(self) -> None:
        process, self.process = self.process, None
        if process is None:
            return
        with contextlib.suppress(OSError):
            process.stdin.close()
        try:
            process.wait(timeout=EXIT_WAIT_SECONDS)
        except subprocess.TimeoutExpired:
            process.terminate()
            try:
                process.wait(timeout=EXIT_WAIT_SECONDS / 2)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        _close_pipes(process)


def _parsed(line: bytes) -> Any:
    """An answer line as JSON. orjson refuses integers beyond 64 bits, which JSON allows: such a line
    is read again with the standard parser (NaN and Infinity, which JSON does not allow, still refused),
    and the contract's rules judge the number (`answer rejected: <field>: <rule>`)."""
    try:
        return orjson.loads(line)
    except orjson.JSONDecodeError:
        pass
    try:
        return json.loads(line, parse_constant=_not_json)
    except (ValueError, RecursionError) as error:  # ValueError: not JSON, or an integer of over 4300 digits
        shown = line.decode("utf-8", "replace").strip()
        reason = str(error) if "digits" in str(error) else "not JSON"
        raise AdapterFailed(f"the adapter answered with a line that is {reason}: {shown[:200]!r}") from None


def _not_json(constant: str) -> Any:
    raise ValueError(f"{constant} is not JSON")


def _encoded(request: dict) -> bytes:
    """A request as one JSON line; with the standard encoder when orjson refuses it (an integer beyond
    64 bits in an answer handed back to finalizeBenchmark)."""
    try:
        return orjson.dumps(request)
    except orjson.JSONEncodeError:
        return json.dumps(request, ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode()


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
    except (Exception, SystemExit) as error:  # noqa: BLE001 - any error while importing the adapter
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
        except (Exception, SystemExit) as error:  # noqa: BLE001
            raise LoopmeterError(f"adapter module {spec} cannot be loaded: {_failure_text(error)}") from None
        else:
            return PythonAdapter(module, spec)
    if shutil.which(spec) is not None:
        return CommandAdapter([spec], spec, stderr_log)
    raise LoopmeterError(f"adapter {spec!r} is neither a file, an importable Python module, nor a command on PATH")
