"""JSON text exactly as JavaScript's `JSON.stringify` writes it.

ForgeLoop's files and reports come from `JSON.stringify(value, null, 2)` (files) and
`JSON.stringify(value)` (`--json` reports). Python's `json` module differs on numbers:
it prints `56165.0` where JavaScript prints `56165`, `1e-07` for `1e-7` and `1e+16` for
`10000000000000000`. This module prints numbers by ECMAScript's Number::toString rule
(shortest round-trip digits, which Python's repr also gives) and everything else like
`JSON.stringify`.
"""
from __future__ import annotations

import json
import math
from typing import Any

import orjson


def js_number_text(value: float | int) -> str:
    """ECMAScript Number::toString for a finite number; NaN and infinities become null."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        if abs(value) < 10**21:
            return str(value)
        value = float(value)
    if not math.isfinite(value):
        return "null"
    if value == 0:
        return "0"
    sign = "-" if value < 0 else ""
    mantissa, _, exponent_text = repr(abs(value)).partition("e")
    whole, _, fraction = mantissa.partition(".")
    digits = (whole + fraction).lstrip("0")
    # position of the decimal point relative to the first significant digit
    point = len(whole.lstrip("0")) if whole.strip("0") else -(len(fraction) - len(fraction.lstrip("0")))
    if exponent_text:
        point += int(exponent_text)
    digits = digits.rstrip("0") or "0"
    k, n = len(digits), point
    if k <= n <= 21:
        text = digits + "0" * (n - k)
    elif 0 < n <= 21:
        text = digits[:n] + "." + digits[n:]
    elif -6 < n <= 0:
        text = "0." + "0" * (-n) + digits
    else:
        exponent = n - 1
        exponent_part = "e" + ("+" if exponent >= 0 else "-") + str(abs(exponent))
        text = (digits if k == 1 else digits[0] + "." + digits[1:]) + exponent_part
    return sign + text


def _encode(value: Any, indent: str, level: int, parts: list[str]) -> None:
    if value is None:
        parts.append("null")
    elif value is True:
        parts.append("true")
    elif value is False:
        parts.append("false")
    elif isinstance(value, (int, float)):
        parts.append(js_number_text(value))
    elif isinstance(value, str):
        parts.append(json.dumps(value, ensure_ascii=False))
    elif isinstance(value, dict):
        if not value:
            parts.append("{}")
            return
        inner = "\n" + indent * (level + 1) if indent else ""
        colon = ": " if indent else ":"
        parts.append("{")
        for position, (key, item) in enumerate(value.items()):
            if position:
                parts.append(",")
            parts.append(inner)
            parts.append(json.dumps(str(key), ensure_ascii=False))
            parts.append(colon)
            _encode(item, indent, level + 1, parts)
        if indent:
            parts.append("\n" + indent * level)
        parts.append("}")
    elif isinstance(value, (list, tuple)):
        if not value:
            parts.append("[]")
            return
        inner = "\n" + indent * (level + 1) if indent else ""
        parts.append("[")
        for position, item in enumerate(value):
            if position:
                parts.append(",")
            parts.append(inner)
            _encode(item, indent, level + 1, parts)
        if indent:
            parts.append("\n" + indent * level)
        parts.append("]")
    elif type(value) is orjson.Fragment:  # JSON text made for its place (see forgeloop/fragments.py)
        parts.append(orjson.dumps(value).decode())
    else:
        raise TypeError(f"cannot encode {type(value).__name__} as JSON")


class _NeedsSlowPath(Exception):
    pass


_SAFE_INTEGER = 9007199254740992.0


def _number(value: float) -> float | int:
    """The float as orjson should receive it, or _NeedsSlowPath."""
    if value.is_integer():
        if -_SAFE_INTEGER <= value <= _SAFE_INTEGER:
            return int(value)
        if abs(value) < 1e21:  # JavaScript pads the shortest digits with zeros
            raise _NeedsSlowPath
    elif 1e-6 <= abs(value) < 1e-5:
        raise _NeedsSlowPath
    return value


def _normalize(container: Any) -> None:
    """Make integral floats ints, in place, so orjson prints numbers as JSON.stringify does.

    orjson writes the same shortest digits as JavaScript everywhere but in [1e-6, 1e-5),
    where it switches to exponent notation earlier, and for integral values from 2^53 to
    1e21, which JavaScript writes as shortest digits padded with zeros; such a number
    sends the document down the slow path. NaN and infinities are left to orjson (null)."""
    items = container.items() if type(container) is dict else enumerate(container)
    for key, value in items:
        kind = type(value)
        if kind is float:
            if value - value == 0:  # finite
                container[key] = _number(value)
        elif kind is dict or kind is list:
            _normalize(value)
        elif kind is tuple:
            container[key] = list(value)
            _normalize(container[key])


def dumps(value: Any, indent: int | None = None) -> str:
    """`JSON.stringify(value, null, indent)`; `indent=None` is the compact form.

    Containers are normalised in place (integral floats become equal ints)."""
    fast = _fast(value, indent)
    return _slow(value, indent) if fast is None else fast.decode()


def dumps_bytes(value: Any, indent: int | None = None) -> bytes:
    """`dumps` as UTF-8 bytes, as a file takes them (orjson's bytes, never made a str)."""
    fast = _fast(value, indent)
    return _slow(value, indent).encode() if fast is None else fast


def _fast(value: Any, indent: int | None) -> bytes | None:
    if indent in (None, 2) and type(value) in (dict, list):
        try:
            _normalize(value)  # in place: integral floats become ints, which changes no value
            return orjson.dumps(value, option=orjson.OPT_INDENT_2 if indent == 2 else 0)
        except (_NeedsSlowPath, TypeError, orjson.JSONEncodeError):
            pass
    return None


def _slow(value: Any, indent: int | None) -> str:
    parts: list[str] = []
    _encode(value, " " * indent if indent else "", 0, parts)
    return "".join(parts)
