"""JavaScript number rules the originals use, for Python scalars and polars columns.

ForgeLoop rounds with `Number(x.toFixed(4))`: the exact binary value of x rounded to four
decimals, ties away from zero, read back as the nearest double. Python's `round()` rounds
the binary value half-to-even and differs on ties such as 1.03125.

`js_round4` does it for one value (exactly, with Decimal). `js_round4_expr` does it for a
polars column with float arithmetic only: the product x * 10^4 is split into its rounded
value and its exact error (Dekker's two-product), so a tie is recognised exactly. Larger
values (|x| >= 2^53 / 10^4) have few fractional bits and are rounded through their fraction.
"""
from __future__ import annotations

import math
from decimal import ROUND_HALF_UP, Decimal, localcontext
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # polars is imported lazily so the CLI starts fast
    import polars as pl

_QUANTUM = Decimal("0.0001")
_SPLIT = 134217729.0  # 2^27 + 1, Veltkamp's splitter for doubles
_EXACT_LIMIT = 2.0**53 / 1e4


def js_round4(value: float | int | None) -> float | int | None:
    """`Number(value.toFixed(4))`; None and non-finite values pass through."""
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int):
        return value
    if not math.isfinite(value):
        return value
    with localcontext() as context:
        context.prec = 400  # room for every digit of the largest double
        rounded = float(Decimal(value).quantize(_QUANTUM, rounding=ROUND_HALF_UP))
    return rounded if rounded != 0 else 0.0


def _ten_thousand_like(column: "pl.Expr") -> "pl.Expr":
    """A column of 10^4. polars divides by a scalar as a multiplication by its reciprocal,
    which is not correctly rounded (1234567891 / 1e4 came out as 123456.78910000001);
    column-by-column division is."""
    return column * 0.0 + 1e4


def _round_small(magnitude: "pl.Expr") -> "pl.Expr":
    """Round |x| < 2^53 / 10^4 half up at 4 decimals, exactly."""
    product = magnitude * 1e4
    big = magnitude * _SPLIT
    high = big - (big - magnitude)
    low = magnitude - high
    error = (high * 1e4 - product) + low * 1e4  # product + error == |x| * 10^4 exactly
    floor = product.floor()
    # the sign of a sum of two doubles is exact, so a tie is recognised exactly
    up = (((product - floor) - 0.5) + error >= 0).cast(float)
    return (floor + up) / _ten_thousand_like(magnitude)


def _round_large(magnitude: "pl.Expr") -> "pl.Expr":
    """Round 2^53 / 10^4 <= |x| half up at 4 decimals, exactly.

    Here the fraction of x is a multiple of 2^-13, so fraction * 10^4 is exact, and the
    sum of the integer part and the rounded fraction rounds like the decimal string would.
    """
    whole = magnitude.floor()
    scaled = (magnitude - whole) * 1e4
    tenths = scaled.floor() + ((scaled - scaled.floor()) >= 0.5).cast(float)
    return whole + tenths / _ten_thousand_like(magnitude)


def js_round4_expr(expr: "pl.Expr") -> "pl.Expr":
    """polars expression: `Number(x.toFixed(4))` for every value of a numeric column."""
    import polars as pl

    x = expr.cast(pl.Float64)
    magnitude = x.abs()
    rounded = (
        pl.when(x.is_nan() | x.is_infinite())
        .then(x)
        .when(magnitude < _EXACT_LIMIT)
        .then(_round_small(magnitude) * x.sign())
        .when(magnitude < 2.0**52)
        .then(_round_large(magnitude) * x.sign())
        .otherwise(x)
    )
    # a small negative rounds to -0.0, as JavaScript's Number(x.toFixed(4)) does (JSON prints it 0);
    # the tables may hold -0.0 (an `x + 0.0` to make it +0.0 would do nothing: polars folds it away)
    return rounded
