"""Tables for people, in rich, never wider than the terminal and never cutting a name or a number.

Where the output goes decides its width (`output_width`): a terminal's width, or `COLUMNS` when it
is set (a whole number of at least 1), on a terminal or not. Output with neither (a pipe, a file)
has no width: every table is printed whole, each row on one line, as wide as it is.

With a width, a table is printed in the first of these forms that fits:
1. the table as it is;
2. the table with its cells (headers too) wrapped at spaces, the widest columns narrowed first,
   no column narrower than its longest word: a name (`api-feature`, `TAIL_REGRESSION`) or a number
   (`6550.3`, `+116.1805%`) is never split;
3. one record per block: a line `Header: value` per column, a blank line between records; a value
   too long for its line wraps at spaces, then after a hyphen or an underscore; a number is never
   split unless it is wider than the whole line.
Cells are never cut with "…". Used by the reports and by `loopmeter sql`.

Text that is not a rich table fits the same width: fixed-width rows (the Forge reports) that are
wider become a table of the same columns (`table_lines`); a listing of names and texts (`schema`,
`queries`) puts each text beside its name or under it (`hanging`); a line of prose (a summary line)
wraps at spaces, a word never split (`wrap_words`, `fit_line`). With no width, all of it is printed
as it is.
"""
from __future__ import annotations

import io
import os
import re
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Iterable

from .errors import printable

if TYPE_CHECKING:  # rich is imported where a table is made: text that fits as it is needs none of it
    from rich.console import Console
    from rich.table import Table

_NUMBER = re.compile(r"[+\-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+\-]?\d+)?%?|[+\-]?inf(?:inity)?|nan", re.IGNORECASE)
_PIECE = re.compile(r"[^\-_]*(?:[\-_]+|$)")  # a word's pieces: each ends after its hyphens or underscores


def env_columns() -> int | None:
    """`COLUMNS` as a width (a whole number, at least 1), else None."""
    text = os.environ.get("COLUMNS", "").strip()
    return int(text) if text.isdigit() and int(text) >= 1 else None


def output_width(is_terminal: bool, terminal_width: int | None) -> int | None:
    """The width tables must fit in: `COLUMNS` when set, else the terminal's width (`terminal_width`,
    80 when unknown) on a terminal, else None (no limit: rows printed whole)."""
    columns = env_columns()
    if columns is not None:
        return columns
    if is_terminal:
        return terminal_width or 80
    return None


def _out_encoding() -> str | None:
    """stdout's encoding when it is not UTF-8 (a locale of ISO-8859-1 or ASCII), else None."""
    import codecs

    try:
        name = codecs.lookup(sys.stdout.encoding or "utf-8").name
    except (AttributeError, LookupError, TypeError):
        return None
    return None if name == "utf-8" else name


def _cell(text: str) -> str:
    """`text` for a table cell: printable (`errors.printable`), and in stdout's encoding, a character it
    lacks (`Δ`) written as its escape before the columns are measured, so the borders stay aligned."""
    encoding = _out_encoding()
    shown = printable(text)
    return shown if encoding is None else shown.encode(encoding, "backslashreplace").decode(encoding)


def new_table(headers: Iterable[str], title: str | None = None, right: Iterable[str] = ()) -> Table:
    """A table of plain-text cells (no markup) that wrap rather than being cut; `right`: headers of
    columns aligned right. Fill it with `add_row`, print it with `print_table`."""
    from rich.table import Table
    from rich.text import Text

    right = set(right)
    table = Table(title=Text(_cell(title)) if title else None, title_justify="left")
    if _out_encoding() is not None:  # borders of ASCII where stdout's encoding lacks the box-drawing characters
        from rich import box

        table.box = box.ASCII
    for header in headers:
        table.add_column(Text(_cell(header)), justify="right" if header in right else "left", overflow="fold")
    return table


def add_row(table: Table, cells: Iterable[str]) -> None:
    """A row of plain-text cells; a control character a cell holds (a name from a store) is shown escaped."""
    from rich.text import Text

    table.add_row(*(Text(_cell(cell)) for cell in cells))


def _plain(cell: Any) -> str:
    from rich.text import Text

    return cell.plain if isinstance(cell, Text) else str(cell)


def _cell_len(text: str) -> int:
    from rich.cells import cell_len

    return cell_len(text)


def _natural_width(column: list[str]) -> int:
    """The width a column (its header, then its cells) takes with every cell on its longest line."""
    return max([_cell_len(line) for cell in column for line in cell.split("\n")] + [1])


def _word_width(column: list[str]) -> int:
    """The width of a column's longest word (text between spaces), header included."""
    return max([_cell_len(word) for cell in column for word in cell.split()] + [1])


def _capped(floors: list[int], ceilings: list[int], available: int) -> list[int] | None:
    """Widths between each floor and ceiling summing to at most `available`, the widest columns
    narrowed first (every column at min(ceiling, T) for the largest cap T); None when the floors
    alone exceed it."""
    if sum(floors) > available:
        return None
    low, high = 0, max(ceilings, default=0)
    while low < high:
        middle = (low + high + 1) // 2
        if sum(max(floor, min(ceiling, middle)) for floor, ceiling in zip(floors, ceilings)) <= available:
            low = middle
        else:
            high = middle - 1
    widths = [max(floor, min(ceiling, low)) for floor, ceiling in zip(floors, ceilings)]
    spare = available - sum(widths)
    for index, (width, ceiling) in enumerate(zip(widths, ceilings)):  # what the cap leaves, a column each
        if spare > 0 and width < ceiling:
            widths[index] += 1
            spare -= 1
    return widths


def column_widths(cells: list[list[str]], available: int) -> list[int] | None:
    """The widths of the columns (each its header, then its cells, as text) within `available`
    characters with no word split (text wraps at spaces, the widest columns narrowed first); each
    column at its natural width when they all fit so; None when the longest words alone do not fit."""
    natural = [_natural_width(column) for column in cells]
    if sum(natural) <= available:
        return natural
    return _capped([_word_width(column) for column in cells], natural, available)


def _pieces(word: str) -> list[str]:
    """Where a word may break: after its hyphens and underscores; a number never."""
    if _NUMBER.fullmatch(word.strip(",;:()[]")):
        return [word]
    return [piece for piece in _PIECE.findall(word) if piece]


def _fold(piece: str, width: int) -> list[str]:
    """`piece` in runs of at most `width` cells (only for a piece wider than a whole line)."""
    runs, run = [], ""
    for character in piece:
        if run and _cell_len(run + character) > width:
            runs.append(run)
            run = ""
        run += character
    return runs + [run]


def wrap(text: str, width: int) -> list[str]:
    """`text` in lines of at most `width` cells (at least 1): broken at spaces; a word wider than a
    line starts a line of its own and breaks after its hyphens and underscores, a piece still wider
    than a line folds. The lines hold every character of the text but its spaces, in order."""
    width = max(width, 1)
    lines: list[str] = []
    for paragraph in text.split("\n"):
        line = ""
        for word in paragraph.split():
            if line and _cell_len(line) + 1 + _cell_len(word) <= width:
                line += " " + word
                continue
            if line:
                lines.append(line)
                line = ""
            if _cell_len(word) <= width:
                line = word
                continue
            for piece in _pieces(word):
                if line and _cell_len(line + piece) <= width:
                    line += piece
                    continue
                if line:
                    lines.append(line)
                if _cell_len(piece) > width:
                    *whole, piece = _fold(piece, width)
                    lines.extend(whole)
                line = piece
        lines.append(line)
    return lines


def record_lines(headers: list[str], rows: list[list[str]], width: int) -> list[str]:
    """Each row as a block of `Header: value` lines, values aligned, a blank line between blocks;
    every line at most `width` cells. Labels take at most half the width; a value goes on the lines
    under its label, indented by two, when the label is longer than that or the value has a word
    too wide for the room beside it."""
    labels = [f"{header}:" for header in headers]
    indent = max((_cell_len(label) for label in labels if _cell_len(label) <= width // 2), default=0) + 1
    if not rows:
        return [line for label in labels for line in wrap(label, width)]
    lines: list[str] = []
    for number, row in enumerate(rows):
        if number:
            lines.append("")
        for label, value in zip(labels, row):
            longest = max((_cell_len(word) for word in value.split()), default=0)
            if _cell_len(label) < indent and 0 < longest <= width - indent:
                first, *rest = wrap(value, width - indent)
                lines.append(label + " " * (indent - _cell_len(label)) + first)
                lines.extend(" " * indent + line for line in rest)
            else:
                lines.extend(wrap(label, width))
                lines.extend("  " + line for line in wrap(value, width - 2) if line)
    return lines


def column_groups(cells: list[list[str]], available: int, per_column: int, key: Iterable[int] = (0,),
                  most: int = 4) -> list[list[int]] | None:
    """The columns in groups, each a table of its own within `available` characters with no word
    split: the `key` columns (what names a row) first in every group, then as many of the others,
    in order, as fit (`per_column`: the borders and padding a column adds); as few groups as can
    be, with no cell wrapped if as few allow it. None when one of the others does not fit beside
    the key, or when it takes more than `most` groups."""
    keys = [index for index in dict.fromkeys(key) if 0 <= index < len(cells)]

    def packed(widths: list[int]) -> list[list[int]] | None:
        def fits(group: list[int]) -> bool:
            return sum(widths[index] for index in group) + per_column * len(group) <= available

        groups: list[list[int]] = []
        for index in (index for index in range(len(cells)) if index not in keys):
            if groups and fits(groups[-1] + [index]):
                groups[-1].append(index)
            elif fits(keys + [index]):
                groups.append(keys + [index])
            else:
                return None
        return groups

    fewest = packed([_word_width(column) for column in cells])
    if fewest is None or not 1 < len(fewest) <= most:
        return None
    whole = packed([_natural_width(column) for column in cells])  # no cell wrapped, if as few tables
    return whole if whole is not None and len(whole) <= len(fewest) else fewest


def print_table(console: Console, table: Table, width: int | None = None, key: Iterable[int] = (0,)) -> None:
    """Print `table` (made by `new_table`) with every character of every cell. `width`: the width
    it must fit in (the forms in this module's text), by default the console's when it is a
    terminal or `COLUMNS` is set; without one, the table whole, each row on one line. `key`: the
    columns (indexes) that name a row, first in each table when the columns are split."""
    from rich.measure import Measurement

    if width is None and (console.is_terminal or env_columns() is not None):
        width = console.width
    cells = [[_plain(column.header)] + [_plain(cell) for cell in column.cells] for column in table.columns]
    natural = [_natural_width(column) for column in cells]
    full = Measurement.get(console, console.options.update_width(sum(natural) * 2 + 1000), table).maximum
    if width is not None:
        overhead = full - sum(natural)  # borders and padding: `per_column` a column, and an edge
        widths = column_widths(cells, width - overhead)
        if widths is None:
            per_column = overhead // max(len(cells), 1)
            groups = column_groups(cells, width - (overhead - per_column * len(cells)), per_column, key)
            if groups is None:
                _print_records(console, table, cells, width)
            else:
                for number, group in enumerate(groups):
                    print_table(console, _part(table, group, title=number == 0), width)
            return
        for column, column_width in zip(table.columns, widths):
            column.width = column_width
        full = sum(widths) + overhead
    shown = console.width
    if full <= shown:
        console.print(table)
        return
    console.width = full  # wider than the console: the whole table, its lines as long as it takes
    try:
        console.print(table)
    finally:
        console.width = shown


def _part(table: Table, indexes: list[int], title: bool) -> Table:
    """A table of some of `table`'s columns (its title if `title`)."""
    from rich.table import Table

    part = Table(title=table.title if title else None, title_justify=table.title_justify)
    for index in indexes:
        column = table.columns[index]
        part.add_column(column.header, justify=column.justify, overflow=column.overflow)
    for row in zip(*(table.columns[index].cells for index in indexes)):
        part.add_row(*row)
    return part


def _print_records(console: Console, table: Table, cells: list[list[str]], width: int) -> None:
    from rich.text import Text

    lines = wrap(_plain(table.title), width) + [""] if table.title else []
    headers = [column[0] for column in cells]
    rows = [list(row) for row in zip(*(column[1:] for column in cells))]
    lines += record_lines(headers, rows, width) + [""]  # a blank line ends the records
    console.print(Text("\n".join(lines)), soft_wrap=True, markup=False, highlight=False)


# ---- text that is not a rich table: fixed-width reports, listings and summary lines ------------

def stdout_width() -> int | None:
    """The width stdout's text must fit in (`output_width` for stdout), None when it has none."""
    import sys

    try:
        terminal = sys.stdout.isatty()
        columns = os.get_terminal_size(sys.stdout.fileno()).columns if terminal else None
    except (OSError, ValueError, AttributeError):
        terminal, columns = False, None
    return output_width(terminal, columns)


def fits(lines: Iterable[str], width: int | None) -> bool:
    """Whether no line is wider than `width` (any line fits no width)."""
    return width is None or all(_cell_len(line) <= width for line in lines)


def wrap_words(text: str, width: int, hang: int = 2) -> list[str]:
    """`text` (one line) broken at spaces into lines of at most `width` cells, its leading spaces
    kept and each further line indented `hang` more; a word is never split: one too wide for the
    room after the indent starts a line with no indent, and one wider than `width` has that line to
    itself, as wide as it is."""
    lead = len(text) - len(text.lstrip(" "))
    lines: list[str] = []
    line, indent = " " * lead, lead
    for word in text.split():
        if line.strip() and _cell_len(line) + 1 + _cell_len(word) <= width:
            line += " " + word
            continue
        if line.strip():
            lines.append(line)
            indent = lead + hang
        line = (" " * indent if indent + _cell_len(word) <= width else "") + word
    return lines + [line] if line.strip() or not lines else lines


def fit_line(text: str, width: int | None, hang: int = 2) -> str:
    """A line of prose as it is printed at `width`: whole when it fits or there is no width, else
    wrapped at spaces (`wrap_words`)."""
    if fits([text], width):
        return text
    return "\n".join(wrap_words(text, width, hang))


def table_lines(headers: list[str], rows: list[list[str]], width: int, right: Iterable[str] = (),
                key: Iterable[int] = (0,)) -> list[str]:
    """A table of `headers` and `rows` (text cells) as `print_table` prints it at `width`, as lines
    with no trailing spaces and no colour."""
    from rich.console import Console

    table = new_table(headers, right=right)
    for row in rows:
        add_row(table, row)
    out = io.StringIO()
    console = Console(file=out, width=max(width, 1), color_system=None, force_terminal=False, highlight=False,
                      emoji=False, markup=False, legacy_windows=False)
    print_table(console, table, max(width, 1), key=key)
    return [line.rstrip() for line in out.getvalue().rstrip("\n").split("\n")]


def listing(lines: list[str], entries: list[tuple[str, str]], width: int | None) -> str:
    """A listing: its `lines` as they are (each a lead and a text) when there is no width or they
    all fit it (tabs at every 8 columns), else its `entries` fitted (`hanging`)."""
    if fits([line.expandtabs() for line in lines], width):
        return "\n".join(lines)
    return "\n".join(hanging(entries, width))


def hanging(entries: list[tuple[str, str]], width: int, gap: int = 2, least: int = 24, under: int = 4) -> list[str]:
    """Entries of a listing, each a lead (a name) and its text, fitted to `width`: the texts in a
    column after the leads (the widest lead and `gap` spaces), wrapped at spaces, when that column
    is at least `least` wide; an entry whose lead or text has no room there, or every entry when the
    column would be narrower, has its lead on a line of its own and its text under it, indented
    `under`. Words are never split (`wrap_words`)."""
    column = max((_cell_len(lead) for lead, _ in entries), default=0) + gap
    beside = width - column >= least
    lines: list[str] = []
    for lead, text in entries:
        longest = max((_cell_len(word) for word in text.split()), default=0)
        if beside and longest <= width - column:
            first, *rest = wrap_words(text, width - column, 0) if text.strip() else [""]
            lines.append((lead + " " * (column - _cell_len(lead)) + first).rstrip())
            lines.extend(" " * column + line for line in rest)
        else:
            lead = lead.rstrip()
            lines.extend([lead] if fits([lead], width) else wrap_words(lead, width))
            if text.strip():
                lines.extend(wrap_words(" " * under + text, width, 0))
    return lines


def print_fitted(text: str) -> None:
    """Print a summary line on stdout, wrapped at spaces when it is wider than stdout's width
    (`fit_line`): a path or a number is never split."""
    print(fit_line(printable(text), stdout_width()))


@contextmanager
def aside(console: Console) -> Iterator[tuple[Console, Callable[[], None]]]:
    """A console printing as `console` does (its width, on a terminal or not, its colours) into an
    unnamed scratch file, and a function that copies what it printed to `console`'s file: tables
    printed one at a time before a line above them that counts them."""
    from rich.console import Console as RichConsole

    with tempfile.TemporaryFile("w+", encoding="utf-8") as scratch:
        spare = RichConsole(file=scratch, width=console.width, force_terminal=console.is_terminal,
                            color_system=console.color_system)

        def copy() -> None:
            scratch.flush()
            scratch.seek(0)
            shutil.copyfileobj(scratch, console.file)

        yield spare, copy
