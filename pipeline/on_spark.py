"""A command's tasks computed on Spark (`--engine spark`, see `engines.py`).

Spark runs loopmeter's own code (an aggregate's bucket, a batch of run files, a part of a Forge
summary), never a translation of it: each task of a `mapInArrow` job calls the work function with
its arguments and hands the result back, and this process writes the tables and documents as it
does for the other engines. The executors need loopmeter installed (the same version) and the
warehouse and inputs at the same paths (`local[*]`, or a cluster whose nodes mount them). The tasks
go in waves of as many as the session runs at once, so this process holds one wave's results.

The session: Spark Connect where `SPARK_REMOTE` is set (`sc://host:port`, or `local[...]` for a
Connect server pyspark starts here), else a session at `master` (default `local[*]`); its UI off
and, when local, bound to 127.0.0.1.
"""
from __future__ import annotations

import os
import pickle
import re
import sys
import tempfile
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import partial

from .errors import LoopmeterError, first_line, usage_error


def session(master: str | None, job: str = "loopmeter"):
    """A Spark session (created here: the caller ends it with `stop`), or a usage error without
    pyspark. Its Java process writes its log to an unnamed scratch file, not to this terminal
    (`_quiet_stderr`); a start that fails says Spark's reason in one line. The Java process a start
    left behind (interrupted, or failed) is ended: pyspark starts it deaf to Ctrl-C, and once its
    start was cut short it would serve nobody for ever. Ctrl-C keeps the handler it had (pyspark
    sets its own, which prints py4j's tracebacks)."""
    try:
        from pyspark.sql import SparkSession
    except ImportError:
        raise usage_error("--engine spark needs pyspark: pip install 'loopmeter[spark]'") from None
    builder = SparkSession.builder.appName(job)
    remote = os.environ.get("SPARK_REMOTE")
    where = None  # a Spark Connect endpoint elsewhere: host:port
    if not remote:
        chosen = master or "local[*]"
        builder = builder.master(chosen).config("spark.ui.enabled", "false").config("spark.log.level", "ERROR")
        if chosen.startswith("spark://"):
            _check_master(chosen)
    else:
        chosen = remote  # `local[...]`: pyspark starts a Spark Connect server in this process, `sc://...`: one elsewhere
        if remote.startswith("sc://"):
            where = _check_reachable(remote)
        elif not remote.startswith("local"):
            raise usage_error(f"SPARK_REMOTE={remote.split(';', 1)[0]!r} is not a Spark Connect address (sc://host:port) "
                              "nor local[N] (a Connect server pyspark starts here)")
    if chosen.startswith("local"):
        # the executors' Python is this one (loopmeter installed), the driver on the loopback only
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        builder = builder.config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
        if remote:  # the Connect server pyspark starts: on the loopback too, no UI
            builder = builder.config("spark.connect.grpc.binding.address", "127.0.0.1").config(
                "spark.ui.enabled", "false").config("spark.log.level", "ERROR")
    _unlogged()
    before = _descendants(os.getpid())
    with _quiet_stderr() as log, warnings.catch_warnings(), _sigint_kept():
        warnings.simplefilter("ignore")
        try:
            spark = builder.getOrCreate()
            _quiet_accumulators(spark)
            return spark
        except BaseException as error:
            spark_error = not isinstance(error, KeyboardInterrupt) and type(error).__module__.startswith(
                ("pyspark", "py4j", "grpc"))
            reason = (_rpc_reason(error) if where is not None else _java_reason(error, log)) if spark_error else ""
            _end_gateway()
            _kill(_descendants(os.getpid()) - before)
            if not spark_error:
                raise
            if where is not None:
                raise LoopmeterError(f"--engine spark: Spark Connect at {where} (SPARK_REMOTE) did not start a session: "
                                     f"{reason}") from None
            told = "SPARK_REMOTE" if remote else "--spark-master"
            raise LoopmeterError(f"--engine spark: {told} {chosen!r}: Spark did not start a session: {reason}") from None


def _quiet_accumulators(spark) -> None:
    """pyspark's accumulator server (a thread of this process the Java process connects to) prints a
    traceback to the terminal when that connection ends mid-job (the Java process stopped by a signal
    to the whole process group): it says nothing now; what fails reaches the command as the job's
    error. A Spark Connect session has none."""
    try:
        server = getattr(spark.sparkContext, "_accumulatorServer", None)
    except Exception:  # noqa: BLE001 - Spark Connect: no SparkContext here
        return
    if server is not None:
        server.handle_error = lambda request, address: None


def _unlogged() -> None:
    """py4j logs through Python's logging, on its root logger too, with tracebacks ("KeyboardInterrupt
    while sending command", a connection shut down by Ctrl-C): the root logger is given a handler that
    drops records, once (loopmeter logs nothing; what fails reaches it as an exception)."""
    import logging

    root = logging.getLogger()
    if not any(isinstance(handler, logging.NullHandler) for handler in root.handlers):
        root.addHandler(logging.NullHandler())


def stop(spark) -> None:
    """End the session `session` made, and the Java process behind it: waited for, so that nothing
    of it outlives the command (pyspark leaves it to notice this process's end)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # pyspark's, when the Java process a signal ended is gone already
            spark.stop()
    finally:
        _end_gateway()


def _end_gateway() -> None:
    """End pyspark's Java gateway process, if this process started one: its standard input closed
    (the gateway ends at its end), killed when it has not ended within 10 s; a Spark session made
    later in this process starts a Java process of its own."""
    import subprocess

    try:
        from pyspark import SparkContext
    except ImportError:
        return
    gateway = SparkContext._gateway
    process = getattr(gateway, "proc", None)
    SparkContext._gateway = SparkContext._jvm = None
    if process is None:
        return
    try:
        gateway.shutdown()
    except Exception:  # noqa: BLE001 - a gateway already gone: its process is ended below all the same
        pass
    try:
        process.stdin.close()
        process.wait(timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        process.kill()
        process.wait()


def _descendants(pid: int) -> set[int]:
    """The processes below `pid` (Linux's /proc; none found elsewhere)."""
    found: set[int] = set()
    todo = [pid]
    while todo:
        parent = todo.pop()
        try:
            tasks = os.listdir(f"/proc/{parent}/task")
        except OSError:
            continue
        for task in tasks:
            try:
                with open(f"/proc/{parent}/task/{task}/children") as listing:
                    children = {int(child) for child in listing.read().split()}
            except (OSError, ValueError):
                continue
            todo += children - found
            found |= children
    return found


def _kill(pids: set[int]) -> None:
    """SIGKILL these processes (started by a session's start, which left them), and reap this
    process's own children among them."""
    import signal

    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            continue
    for pid in pids:
        try:
            os.waitpid(pid, 0)
        except OSError:  # not this process's child: its own parent, or init, reaps it
            pass


@contextmanager
def _sigint_kept() -> Iterator[None]:
    """SIGINT's handler as it was before the block (pyspark's SparkContext sets its own)."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.getsignal(signal.SIGINT)
    try:
        yield
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)


def _check_master(master: str, seconds: float = 10.0) -> None:
    """Refuse a standalone master (`spark://host:port[,host:port...]`) none of whose addresses takes
    a connection within `seconds`: Spark would try it for more than a minute, then say nothing of why."""
    import socket

    reasons = []
    for address in master[len("spark://"):].split(","):
        host, _, port = address.rpartition(":")
        try:
            socket.create_connection((host or address, int(port) if port else 7077), timeout=seconds).close()
            return
        except (OSError, ValueError) as error:
            reasons.append(f"{address}: {getattr(error, 'strerror', None) or error}")
    raise LoopmeterError(f"--engine spark: --spark-master {master!r} cannot be reached ({'; '.join(reasons)})")


def _java_reason(error: Exception, log) -> str:
    """Why Spark did not start: the Java exception's message (`Could not parse Master URL ...`), from the
    error (read while the gateway still answers) or else from the log the Java process wrote (its
    reason for exiting), else the log's first line that says `Error`, else the error's first line."""
    try:
        told = str(error)
    except Exception:  # noqa: BLE001 - py4j asks the gateway for the Java exception's text
        told = ""
    try:
        log.seek(0)
        logged = log.read().decode("utf-8", "replace")
    except (OSError, ValueError):
        logged = ""
    lines = [line.strip() for line in (told + "\n" + logged).splitlines() if line.strip()]
    for line in lines:
        found = re.match(r"(?:Exception in thread \"\w+\" |Caused by: )?[\w.$]+(?:Exception|Error): (.+)", line)
        if found:
            return found.group(1).strip()[:500]
    said = next((line for line in lines if line.startswith("Error")), None)
    return (said or (lines[0] if lines else type(error).__name__))[:500]


def _rpc_reason(error: Exception) -> str:
    """What a failed call to a Spark Connect server says: gRPC's status and details, which the
    client's error holds on the lines after its first."""
    text = str(error)
    status = re.search(r"status = StatusCode\.(\w+)", text)
    details = re.search(r'details = "(.*)"', text)
    if status is None:
        return first_line(error)
    return status.group(1) + (f": {details.group(1)}" if details else "")


def _check_reachable(remote: str, seconds: float = 10.0) -> str:
    """Refuse `remote` when it is no Spark Connect address (`sc://host[:port][/;options]`: a usage
    error), or its endpoint takes no connection, or no gRPC channel to it is ready, within `seconds`
    (one line, exit 1): pyspark's client would retry such an endpoint for minutes, without a word.
    Returns the endpoint as host:port."""
    import socket
    from urllib.parse import urlsplit

    address = remote.split(";", 1)[0]  # what follows `;` may be a token: never shown
    try:
        where = urlsplit(address.rstrip("/"))
        host, port = where.hostname, where.port or 15002
    except ValueError as error:
        raise usage_error(f"SPARK_REMOTE={address!r} is not a Spark Connect address (sc://host:port): {error}") from None
    if not host:
        raise usage_error(f"SPARK_REMOTE={address!r} is not a Spark Connect address (sc://host:port)")
    try:
        socket.create_connection((host, port), timeout=seconds).close()
    except OSError as error:
        raise LoopmeterError(f"--engine spark: Spark Connect at {host}:{port} (SPARK_REMOTE) cannot be reached: "
                             f"{error.strerror or error}") from None
    # A connection taken is not yet a Spark Connect server: one that does not speak gRPC (a web
    # server, say) would have the client retry for many minutes. The channel the client will use
    # (pyspark's own builder: TLS and token as the address says) must be ready within `seconds`.
    import grpc

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # pyspark's own, about the pandas it finds
        from pyspark.sql.connect.client import DefaultChannelBuilder

    channel = DefaultChannelBuilder(remote).toChannel()
    try:
        grpc.channel_ready_future(channel).result(timeout=seconds)
    except grpc.FutureTimeoutError:
        raise LoopmeterError(f"--engine spark: {host}:{port} (SPARK_REMOTE) takes a connection but does not answer as a "
                             f"Spark Connect (gRPC) server within {seconds:g} s") from None
    finally:
        channel.close()
    return f"{host}:{port}"


@contextmanager
def _quiet_stderr() -> Iterator:
    """File descriptor 2 pointed at an unnamed scratch file while the block runs: a process started
    in it (Spark's Java gateway, and through it the Python workers) keeps writing there."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as scratch:
        os.dup2(scratch.fileno(), 2)
        try:
            yield scratch
        finally:
            os.dup2(saved, 2)
            os.close(saved)


def failure(error: Exception) -> LoopmeterError:
    """A Spark job's failure in one line: the last line of the Python traceback it carries."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip() and not line.startswith((" ", "\t"))]
    told = next((line for line in reversed(lines) if not line.startswith(("SQLSTATE", "at ", "JVM stacktrace"))),
                type(error).__name__)
    return LoopmeterError(f"--engine spark: a task failed: {told}")


def _run_tasks(work: Callable, batches):
    """The executors' side: each (bucket, task) row's result, `work(*task)`, pickled."""
    import pyarrow as pa

    for batch in batches:
        numbers, tasks = batch.column("bucket").to_pylist(), batch.column("task").to_pylist()
        parts = [pickle.dumps(work(*pickle.loads(task)), protocol=pickle.HIGHEST_PROTOCOL) for task in tasks]
        yield pa.RecordBatch.from_pydict({"bucket": numbers, "part": parts},
                                         schema=pa.schema([("bucket", pa.int32()), ("part", pa.binary())]))


def wave_size(spark, workers: int | None = None) -> int:
    """How many tasks go in one wave: `workers` (--workers) where given, else as many as the session
    runs at once (Spark Connect does not tell: 2 there)."""
    if workers:
        return workers
    return max(1, spark.sparkContext.defaultParallelism if not os.environ.get("SPARK_REMOTE") else 2)


def wave(spark, work: Callable, tasks: list[tuple]) -> list:
    """`work(*task)` of each task, in order: one Spark job, a task per partition (`work`: a
    module-level function the executors import by name)."""
    rows = [(number, pickle.dumps(task, protocol=pickle.HIGHEST_PROTOCOL)) for number, task in enumerate(tasks)]
    # a task per partition, however many the wave holds (--workers may differ from the session's
    # parallelism): Connect's one relation cut by range, a classic session's rows sliced one each
    # (a round-robin `repartition` can give one partition two tasks)
    if os.environ.get("SPARK_REMOTE"):
        frame = spark.createDataFrame(rows, "bucket int, task binary").repartitionByRange(len(tasks), "bucket")
    else:
        frame = spark.createDataFrame(spark.sparkContext.parallelize(rows, len(tasks)), "bucket int, task binary")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            results = frame.mapInArrow(partial(_run_tasks, work), "bucket int, part binary").collect()
    except Exception as error:
        if type(error).__module__.startswith(("pyspark", "py4j")):
            raise failure(error) from None
        raise
    return [pickle.loads(row["part"]) for row in sorted(results, key=lambda row: row["bucket"])]


def compute(work: Callable, tasks: list[tuple], master: str | None, job: str = "loopmeter",
            workers: int | None = None) -> Iterator:
    """`work(*task)` of each task, in order, computed on Spark in waves (`wave_size`)."""
    spark = session(master, job)
    try:
        size = wave_size(spark, workers)
        for start in range(0, len(tasks), size):
            yield from wave(spark, work, tasks[start:start + size])
    finally:
        stop(spark)
