"""A JSON document whose one long list is printed as it is made.

A report of every run set in a large warehouse is mostly one list (a run set, or a run set and
scenario, per item). `Streamed` makes that list's items one at a time; printed (`write_json`),
each item is encoded and set aside in an unnamed scratch file as it comes, so only one item is
held, and the fields around the list, which may count or sum over the items (a status over all
run sets), are made once the last item has passed. The text is exactly `jsjson.dumps` of the
whole document (`document()`, what the Python API gives). The reports for people take the items
as they come too (`parts`).
"""
from __future__ import annotations

import codecs
import secrets
import tempfile
from collections.abc import Callable, Iterator
from typing import Any

from .jsjson import dumps_bytes


def _placed(document: dict, key: str, dump: Callable[[dict], bytes]) -> tuple[bytes, bytes, bytes]:
    """The document's text split where `key`'s value lies: its value is a placeholder (a random text
    JSON escapes), taken again until it occurs once in the text, as no key or value of the fields is it."""
    while True:
        place = f"\0the list {secrets.token_hex(8)}\0"
        text, placed = dump({**document, key: place}), dumps_bytes(place)
        if text.count(placed) == 1:
            return text.partition(placed)


class Streamed:
    """The document `fields()` returns with `key`'s value replaced by the list of `items`.

    `fields` is called after the items are made (they may record what it reads); it returns the
    document's keys in their order, `key` among them with any value."""

    def __init__(self, key: str, items: Iterator[Any], fields: Callable[[], dict]):
        self.key, self._items, self._fields = key, items, fields
        self._used = False

    def _take(self) -> Iterator[Any]:
        if self._used:
            raise RuntimeError("a streamed document is made once")
        self._used = True
        return self._items

    def items(self) -> Iterator[Any]:
        """The list's items as they are made (once); `fields()` after the last."""
        return self._take()

    def fields(self) -> dict:
        """The fields around the list (its own value None), once the items are made."""
        return self._fields()

    def document(self) -> dict:
        """The whole document, held at once."""
        items = list(self._take())
        document = self._fields()
        document[self.key] = items
        return document

    def write_json(self, write: Callable[[str], Any], indent: int | None = None,
                   each: Callable[[Any], Any] = lambda value: value, chunk: int = 1 << 16) -> None:
        """`jsjson.dumps(document(), indent)` handed to `write` a piece at a time, holding one item at
        a time; `each` is applied to every item and to the fields (as `print_json` applies `named_in`)."""
        with tempfile.TemporaryFile() as spool:
            count = 0
            for item in self._take():
                text = dumps_bytes(each(item), indent)
                if indent:  # the items lie two levels in: each line of one is indented twice
                    text = b"\n" + b"\n".join(b" " * (2 * indent) + line for line in text.split(b"\n"))
                spool.write(b"," + text if count else text)
                count += 1
            document = self._fields()
            if self.key not in document:
                raise RuntimeError(f"{self.key!r} is not among the document's fields")
            before, _, after = _placed(document, self.key, lambda fields: dumps_bytes(each(fields), indent))
            write((before + b"[").decode())
            if count:
                spool.seek(0)
                decoder = codecs.getincrementaldecoder("utf-8")()
                while piece := spool.read(chunk):
                    write(decoder.decode(piece))
                write(decoder.decode(b"", final=True) + ("\n" + " " * indent if indent else ""))
            write((b"]" + after).decode())


def parts(report: dict | Streamed, key: str) -> tuple[Iterator[Any], Callable[[], dict]]:
    """The list at `key` of a document, whole or streamed, as its items one at a time, and the fields
    around it (to be read after the last item)."""
    if isinstance(report, Streamed):
        return report.items(), report.fields
    return iter(report[key]), lambda: report
