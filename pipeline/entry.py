"""The `loopmeter` command's first step. Ctrl-C while the command's modules load ends it at
once, with one line and exit 130 (nothing has been touched yet), not Python's traceback;
from then on `cli.main` answers it. pyarrow is set to load without numpy (`_PyarrowWithoutNumpy`)."""
from __future__ import annotations

import _signal  # the C module: `signal` itself takes a moment to load
import gc
import os
import sys


def _interrupted_while_loading(signum, frame) -> None:
    sys.stderr.write("loopmeter: interrupted before the command began; nothing was changed\n")
    sys.stderr.flush()
    os._exit(130)


class _PyarrowWithoutNumpy:
    """Loads pyarrow as in an environment without numpy. pyarrow imports numpy where it is
    installed (0.04 to 0.08 s: most of pyarrow's own import), for conversions from and to numpy
    arrays the command never makes: its Arrow data comes from Python lists, polars and DuckDB,
    and what uses numpy (the bootstrap draws) hands its results on as polars frames and Python
    numbers. Only the command's own process: a program importing loopmeter's modules keeps its
    pyarrow as it is."""

    @classmethod
    def find_spec(cls, name, path=None, target=None):
        # asked before the import too (polars looks for pyarrow as it loads): in place until then
        if name != "pyarrow":
            return None
        from importlib.machinery import PathFinder

        spec = PathFinder.find_spec(name, path)
        if spec is not None and spec.loader is not None:
            spec.loader = _WithoutNumpy(spec.loader)
        return spec


class _WithoutNumpy:
    """pyarrow's loader, running its `exec_module` with numpy unimportable (unless loaded already),
    and importable again after."""

    def __init__(self, loader) -> None:
        self.loader = loader

    def __getattr__(self, name: str):  # the rest of the loader's interface (resources, file names)
        return getattr(self.loader, name)

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module) -> None:
        if _PyarrowWithoutNumpy in sys.meta_path:
            sys.meta_path.remove(_PyarrowWithoutNumpy)
        hidden = "numpy" not in sys.modules
        if hidden:
            sys.modules["numpy"] = None  # `import numpy` raises ImportError: pyarrow goes on without it
        try:
            self.loader.exec_module(module)
        finally:
            if hidden and sys.modules.get("numpy", 0) is None:
                del sys.modules["numpy"]


def main() -> None:
    if "pyarrow" not in sys.modules:
        sys.meta_path.insert(0, _PyarrowWithoutNumpy)
    # A collection every 100,000 new objects rather than every 700: the collector walks the young
    # objects of each (the parsed runs, the documents: 0.03 to 0.06 s a command, for the few
    # hundred cycles it finds), and a command makes few cycles. Memory stays bounded all the same.
    gc.set_threshold(100_000, 10, 10)
    # only where Ctrl-C would raise: a SIGINT the caller ignores (a background job) stays ignored
    answering = _signal.getsignal(_signal.SIGINT) is _signal.default_int_handler
    if answering:
        _signal.signal(_signal.SIGINT, _interrupted_while_loading)
    from .cli import main as run

    run(restore_interrupt=answering)  # restored inside its error handling: no moment without an answer
