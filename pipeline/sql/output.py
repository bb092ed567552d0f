"""What `loopmeter sql` prints or writes: the result as a table, csv, json, jsonl or Parquet, and
the inputs it reads besides the SQL (`--file`, `--param`)."""
from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator

from ..errors import Exit, LoopmeterError, shown_path
from ..storage.files import write_output

if TYPE_CHECKING:
    import polars as pl

FORMATS = ("table", "csv", "json", "jsonl", "parquet")
TABLE_ROWS = 10_000  # a table for people shows this many rows at most (the other formats give every row)
# The format a file's name says (`sql --out x.parquet`), by its extension, in any case.
EXTENSIONS = {".csv": "csv", ".json": "json", ".jsonl": "jsonl", ".ndjson": "jsonl", ".parquet": "parquet"}


def output_format_of(given: str | None, out: Path | None) -> str:
    """The format of `sql`: --format's, else the one --out's name says, else the table. A name
    that says another format than --format, or a name that says none without --format, is refused
    (a usage error): what lands in the file is never a guess."""
    if given is not None and given not in FORMATS:
        raise LoopmeterError(f"--format must be one of {', '.join(FORMATS)} (got {given!r})", Exit.USAGE)
    if out is None:
        if given == "parquet":
            raise LoopmeterError("--format parquet needs --out FILE", Exit.USAGE)
        return given or "table"
    named = EXTENSIONS.get(out.suffix.lower())
    shown = shown_path(out)
    if given is None:
        if named is None:
            raise LoopmeterError(f"--out {shown}: its name says no format; name it .csv, .json, .jsonl, .ndjson or "
                                 ".parquet, or give --format", Exit.USAGE)
        return named
    if given == "table":
        raise LoopmeterError("--format table prints to the terminal; with --out, give csv, json, jsonl or parquet "
                             "(or leave --format out: --out's name says it)", Exit.USAGE)
    if named is not None and named != given:
        raise LoopmeterError(f"--out {shown} names a {named} file, but --format is {given}; give --out a "
                             f"{'.' + given} name, or leave --format out", Exit.USAGE)
    return given


def _json_default(value: Any) -> Any:
    """JSON for what orjson leaves: bytes (BLOB) as base64 text, a DECIMAL as its exact number."""
    import base64
    from decimal import Decimal

    import orjson

    if isinstance(value, (bytes, bytearray, memoryview)):
        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, Decimal) and value.is_finite():
        return orjson.Fragment(str(value))
    return str(value)


def _dumps(value: Any) -> str:
    import orjson

    return orjson.dumps(value, default=_json_default,
                        option=orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS).decode()


def cell_text(value: Any) -> str:
    """A value as a table cell: bytes as base64 (as in csv and json)."""
    if value is None:
        return ""
    if isinstance(value, (bytes, bytearray, memoryview)):
        return _json_default(value)
    return str(value)


def _flat(frame: "pl.DataFrame") -> "pl.DataFrame":
    """`frame` with what CSV cannot hold as text: a list or struct cell as its JSON text, bytes as base64."""
    import polars as pl

    nested = [name for name, dtype in frame.schema.items() if dtype.is_nested()]
    binary = [name for name, dtype in frame.schema.items() if dtype == pl.Binary]
    return frame.with_columns(_iso_text(name, dtype) for name, dtype in frame.schema.items()
                              if isinstance(dtype, pl.Datetime)).with_columns(
        pl.Series(name, [None if v is None else _dumps(v) for v in frame[name].to_list()], dtype=pl.String)
        for name in nested
    ).with_columns(
        pl.Series(name, [None if v is None else _json_default(v) for v in frame[name].to_list()], dtype=pl.String)
        for name in binary
    )


def _iso_text(name: str, dtype) -> "pl.Expr":
    """A timestamp column as the text json and jsonl give it (ISO 8601: `2026-12-03T13:20:07.148104+00:00`,
    the fraction left out when it is zero, the offset with its colon; a timestamp without a zone
    (DuckDB's TIMESTAMP) without one, as `--format parquet` keeps it), not polars' csv default (`+0000`)."""
    import polars as pl

    zone = "%:z" if dtype.time_zone is not None else ""
    column = pl.col(name)
    return (pl.when(column.dt.microsecond() == 0).then(column.dt.to_string(f"%Y-%m-%dT%H:%M:%S{zone}"))
            .otherwise(column.dt.to_string(f"%Y-%m-%dT%H:%M:%S%.6f{zone}")).alias(name))


def table_rows(frame: "pl.DataFrame") -> list[list[str]]:
    """The cells of `--format table`: numbers and lists as csv writes them (NaN, inf, -inf; 1e-7; [1.0,null]),
    a null as an empty cell, other values as their text."""
    import polars as pl

    flat = _flat(frame)
    flat = flat.with_columns(pl.col(name).cast(pl.String) for name, dtype in flat.schema.items() if dtype.is_float())
    return [[cell_text(value) for value in row] for row in flat.iter_rows()]


def _wide(frame: "pl.DataFrame") -> list[str]:
    import polars as pl

    return [name for name, dtype in frame.schema.items() if dtype in (pl.Int128, pl.UInt128)]


PIECE_ROWS = 10_000  # rows rendered at a time: csv, json and jsonl text is made and written a piece at a time


def write_result(frame: "pl.DataFrame", output_format: str, out: Path | None, piece_rows: int = PIECE_ROWS) -> str | None:
    """Render `frame` as csv/json/jsonl text (returned when `out` is None) or write it to `out` (atomically:
    a failed write leaves what was there; the text is made and written a piece at a time)."""
    import polars as pl

    if output_format not in FORMATS:
        raise LoopmeterError(f"--format must be one of {', '.join(FORMATS)}", Exit.USAGE)
    if output_format == "parquet":
        if out is None:
            raise LoopmeterError("--format parquet needs --out FILE", Exit.USAGE)
        wide = _wide(frame)
        try:  # Parquet has no 128-bit integers: DECIMAL(38, 0) holds them up to 38 digits
            frame = frame.with_columns(pl.col(name).cast(pl.Decimal(38, 0), strict=True) for name in wide)
        except pl.exceptions.PolarsError:
            raise LoopmeterError(f"column {', '.join(wide)}: integers of more than 38 digits do not fit Parquet's "
                                 "DECIMAL(38); cast them in SQL (e.g. CAST(x AS VARCHAR))") from None
        write_output(Path(out), frame.write_parquet)
        return None
    pieces = result_pieces(frame, output_format, piece_rows)
    if out is None:
        return "".join(pieces)

    def write(path: Path) -> None:
        with open(path, "w", encoding="utf-8") as handle:
            for piece in pieces:
                handle.write(piece)

    write_output(Path(out), write)
    return None


def result_pieces(frame: "pl.DataFrame", output_format: str, rows: int = PIECE_ROWS) -> Iterator[str]:
    """The csv, json or jsonl text of `frame`, `rows` rows at a time (memory: the frame and one piece's
    text, never a Python object per row of the whole result): together, the text of the whole frame."""
    if output_format not in ("csv", "json", "jsonl"):
        raise LoopmeterError("--format table prints to the terminal; use csv, json, jsonl or parquet with --out", Exit.USAGE)
    return _pieces(frame, output_format, rows)


def _pieces(frame: "pl.DataFrame", output_format: str, rows: int) -> Iterator[str]:
    starts = range(0, frame.height, rows) if frame.height else [0]
    if output_format == "json":
        yield "["
    for start in starts:
        piece = frame.slice(start, rows)
        if output_format == "csv":  # NaN, inf and -inf as polars writes them (the table shows the same text)
            yield _flat(piece).write_csv(include_header=start == 0)
            continue
        dumped = [_dumps(row) for row in _json_rows(piece)]  # NaN, inf and -inf as null: JSON has no such numbers
        if output_format == "jsonl":
            yield "".join(line + "\n" for line in dumped)
        elif dumped:
            yield ("," if start else "") + ",".join(dumped)
    if output_format == "json":
        yield "]\n"


def _json_rows(frame: "pl.DataFrame") -> list[dict]:
    import orjson

    rows = frame.to_dicts()
    for name in _wide(frame):  # 128-bit integers as JSON integers (orjson stops at 64 bits)
        for row in rows:
            if row[name] is not None:
                row[name] = orjson.Fragment(str(row[name]))
    return rows


SQL_FILE_LIMIT = 16 << 20  # bytes of `sql --file`: far more than any query, far less than memory


def read_sql_file(file: Path, limit: int = SQL_FILE_LIMIT) -> str:
    """The SQL text of `--file` (`-`: standard input): at most `limit` bytes are read, whatever the
    file is (a regular file, a pipe such as <(...), a device such as /dev/zero), and one more refuses it."""
    shown = shown_path(file)
    try:
        if str(file) == "-":  # as every tool that reads a file reads `-`: standard input
            data = sys.stdin.buffer.read(limit + 1)
        else:
            with open(file, "rb") as handle:
                data = handle.read(limit + 1)
    except OSError as error:
        raise LoopmeterError(f"--file {shown}: {error.strerror or error}") from None
    if len(data) > limit:
        raise LoopmeterError(f"--file {shown}: larger than {limit >> 20} MiB, the most loopmeter sql reads as SQL")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise LoopmeterError(f"--file {shown}: not UTF-8 text (byte {error.start}: {error.reason})") from None


def parse_parameters(pairs: list[str]) -> dict[str, Any]:
    """`--param name=value` pairs; values stay text (cast in SQL where needed)."""
    parameters = {}
    for pair in pairs:
        name, separator, value = pair.partition("=")
        if not separator or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
            raise LoopmeterError(f"--param takes name=value (got {pair!r})", Exit.USAGE)
        parameters[name] = value
    return parameters
