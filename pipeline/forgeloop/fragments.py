"""The bulk of ForgeLoop's documents as JSON text made by polars, whole columns at once.

A scenario document is mostly its three mode aggregates (25 statistic blocks each) and its
pairedRuns lists. Building them as Python dicts, normalising their numbers and encoding them
took most of a full `aggregate`. Here polars writes each mode aggregate and each pairedRuns
list as `JSON.stringify(doc, null, 2)` prints it at its place, and the documents hold them as
`orjson.Fragment`s that orjson copies as they are. The indentation is baked in: the depth in
the document is fixed (`modeAggregates.<mode>` and `comparisons.<mode>.pairedRuns` are 2 and
3 deep; a statistic block `modeAggregates.<mode>.<metric>` 3, and each dot in the metric's name
one more), so such a document must be written with an indent of 2, as ForgeLoop writes its
files (`jsjson.dumps_bytes(document, 2)`).

A number is written as JavaScript prints it: integral values as integers, others with the
shortest digits that read back the same (polars' text of a float, which is those digits); a
string as it is, between quotes. Where polars' text would differ from JavaScript's (a number
polars writes with an exponent or beyond 2^53, a string that needs escaping) the mode
aggregate or list gets no text, and the document takes the blocks or the dicts the slow path
encodes.
"""
from __future__ import annotations

import orjson
import polars as pl

from .analysis import MODE
from .contract import CONTEXT_ITEMS, DIAGNOSTIC_COUNTS, MODE_METRICS, QUALITY_SCORES
from .stats import LEGACY_FIELDS, ROBUST_FIELDS

PAIR_FIELDS = {  # key in pairedRuns -> column of Analysis.paired_runs
    "runIndex": "run_index",
    "directTokens": "direct_tokens",
    "candidateTokens": "candidate_tokens",
    "absoluteDeltaTokens": "absolute_delta_tokens",
    "pairedOverheadPercent": "paired_overhead_percent",
    "baselineRegime": "baseline_regime",
}
# magnitudes whose digits polars writes without an exponent, as JavaScript does (which writes none from
# 1e-6 to 1e21); up to 2^53, below which every integer is exact (integers as floats beyond it take the slow path)
_DECIMAL = (1e-5, 2.0**53)


def js_number_text(expr: pl.Expr) -> pl.Expr:
    """JavaScript's text of each number (`null` for a missing one) where `plain_number` holds:
    polars' shortest digits, without the `.0` it puts after an integral value."""
    x = expr.cast(pl.Float64)
    # -0.0 prints as 0 (polars simplifies away the `x + 0.0` that would make it +0.0)
    return pl.when(x == 0).then(0.0).otherwise(x).cast(pl.String).str.strip_suffix(".0").fill_null("null")


def plain_number(expr: pl.Expr) -> pl.Expr:
    """Numbers `js_number_text` writes as JavaScript does: missing, 0, or finite with a magnitude
    in `_DECIMAL`."""
    x = expr.cast(pl.Float64).abs()
    return x.is_null() | (x == 0) | (x.is_finite() & (x >= _DECIMAL[0]) & (x <= _DECIMAL[1]))


def _object(pairs: list[tuple[str, pl.Expr]], depth: int) -> pl.Expr:
    """The text of a JSON object whose place is `depth` deep (its members one deeper)."""
    parts: list[pl.Expr] = []
    for position, (key, value) in enumerate(pairs):
        parts += [pl.lit(("{" if position == 0 else ",") + _indent(depth + 1) + f'"{key}": '), value]
    return pl.concat_str([*parts, pl.lit(_indent(depth) + "}")])


def _indent(depth: int) -> str:
    return "\n" + "  " * depth


def statistic_blocks(mode_stats: pl.DataFrame, legacy: pl.DataFrame) -> pl.DataFrame:
    """Per row of `mode_stats` (`row`, its number; run set, scenario, mode, metric; in no particular
    order): `text`, the statistic block of its document (v1 fields where `legacy`, a frame of run
    set, scenario and `legacy`, says the scenario's document is version 1), or null where a number
    needs the slow path."""
    frame = (
        mode_stats.with_row_index("row")
        .join(legacy, on=MODE[:2], how="left", maintain_order="left")
        .with_columns(
            pl.col("legacy").fill_null(False),
            (pl.col("metric").str.count_matches(".", literal=True) + 3).alias("depth"),
            pl.all_horizontal(plain_number(pl.col(name)) for name in ROBUST_FIELDS).alias("plain"),
            *(js_number_text(pl.col(name)).alias(f"{name}_text") for name in ROBUST_FIELDS),
        )
    )
    blocks = []
    # the blocks of one depth and version at a time: literal indentation (concat_str is much
    # faster with a few long literals than with a column per separator)
    for (depth, version_1), part in frame.partition_by("depth", "legacy", as_dict=True).items():
        fields = LEGACY_FIELDS if version_1 else ROBUST_FIELDS
        text = _object([(name, pl.col(f"{name}_text")) for name in fields], depth)
        blocks.append(part.select("row", *MODE, "metric", "legacy", pl.when("plain").then(text).alias("text")))
    empty = pl.DataFrame(schema={**frame.select("row", *MODE, "metric", "legacy").schema, "text": pl.String})
    return pl.concat([empty, *blocks])


def empty_statistic(depth: int, legacy: bool) -> orjson.Fragment:
    """The block of a statistic without values."""
    return orjson.Fragment(_empty_text(depth, legacy))


def paired_runs_lists(paired_runs: pl.DataFrame) -> pl.DataFrame:
    """Per run set, scenario and candidate mode with pairs: `text`, its pairedRuns list (the
    pairs in run order) as a version-2 document holds it, or null where a number needs the slow path."""
    values = {  # baselineRegime is NORMAL or LOW_BASELINE_TOKEN_REGIME (analysis.compare): nothing to escape
        key: (pl.lit('"') + pl.col(column) + pl.lit('"')) if key == "baselineRegime" else js_number_text(pl.col(column))
        for key, column in PAIR_FIELDS.items()
    }
    plain = pl.all_horizontal(plain_number(pl.col(column)) for key, column in PAIR_FIELDS.items() if key != "baselineRegime")
    item = pl.lit(_indent(4)) + _object(list(values.items()), 4)
    return (
        paired_runs.select(*MODE, pl.when(plain).then(item).alias("item"))
        .group_by(MODE, maintain_order=True)
        .agg(pl.col("item").null_count().alias("unrendered"), pl.col("item").str.join(","))
        .select(*MODE, pl.when(pl.col("unrendered") == 0)
                .then(pl.lit("[") + pl.col("item") + pl.lit(_indent(3) + "]")).alias("text"))
    )


def _string_list(column: str, depth: int) -> pl.Expr:
    """A list of strings as JSON text at `depth`; null when a string needs escaping (or is null)."""
    values = pl.col(column)
    quoted = values.list.eval(pl.lit(_indent(depth + 1) + '"') + pl.element() + pl.lit('"')).list.join(",", ignore_nulls=False)
    plain = ~values.list.eval(pl.element().is_null() | pl.element().str.contains(r'["\\\x00-\x1f]')).list.any()
    return (pl.when(values.list.len() == 0).then(pl.lit("[]"))
            .when(plain).then(pl.lit("[") + quoted + pl.lit(_indent(depth) + "]")))


def mode_aggregates(mode_runs: pl.DataFrame, blocks: pl.DataFrame, flags: pl.DataFrame) -> pl.DataFrame:
    """Per run set, scenario and mode of `mode_runs` (in no particular order): `text`, its
    `modeAggregates.<mode>` object as its document holds it (2 deep), or null where something in it
    needs the slow path. `blocks`: `statistic_blocks`; `flags`: per run set and scenario, `legacy`,
    `with_context` and `with_quality`, which say what the scenario's document holds."""
    wide = blocks.pivot(on="metric", index=MODE, values="text")
    frame = (
        mode_runs.select(*MODE, "run_count", "verification_success_rate", "usage_sources", "context_sources",
                         "context_profiles", "context_measured_runs", "quality_sources")
        .join(flags, on=MODE[:2], how="left", maintain_order="left")
        .join(wide, on=MODE, how="left", maintain_order="left")
    )

    def block(metric: str, depth: int, legacy: bool) -> pl.Expr:
        if metric in frame.columns:
            return pl.col(metric)
        return pl.lit(_empty_text(depth, legacy))  # a metric the query does not give: no values

    def number(column: str) -> pl.Expr:
        return pl.when(plain_number(pl.col(column))).then(js_number_text(pl.col(column)))

    texts = []
    for (legacy, with_context, with_quality), part in frame.partition_by(
            "legacy", "with_context", "with_quality", as_dict=True).items():
        pairs = [("runCount", number("run_count")), ("verificationSuccessRate", number("verification_success_rate")),
                 ("usageSources", _string_list("usage_sources", 3))]
        pairs += [(metric, block(metric, 3, legacy)) for metric in MODE_METRICS]
        if not legacy:
            diagnostics = [(name, block(f"diagnostics.{name}", 4, legacy)) for name in DIAGNOSTIC_COUNTS]
            pairs.append(("diagnostics", _object(diagnostics, 3)))
        if with_context:
            items = [(name, block(f"contextUsage.items.{name}", 5, legacy)) for name in CONTEXT_ITEMS]
            context = [("sources", _string_list("context_sources", 4)), ("profiles", _string_list("context_profiles", 4)),
                       ("measuredRuns", number("context_measured_runs")),
                       ("totalTokens", block("contextUsage.totalTokens", 4, legacy)),
                       ("items", _object(items, 4))]
            pairs.append(("contextUsage", _object(context, 3)))
        if with_quality:
            scores = [(name, block(f"quality.scores.{name}", 5, legacy)) for name in QUALITY_SCORES]
            quality = [("sources", _string_list("quality_sources", 4)), ("scores", _object(scores, 4))]
            pairs.append(("quality", _object(quality, 3)))
        texts.append(part.select(*MODE, _object(pairs, 2).alias("text")))
    return pl.concat([pl.DataFrame(schema={**frame.select(MODE).schema, "text": pl.String}), *texts])


def _empty_text(depth: int, legacy: bool) -> str:
    fields = LEGACY_FIELDS if legacy else ROBUST_FIELDS
    members = ",".join(f'{_indent(depth + 1)}"{name}": {0 if name in ("count", "outlierCount") else "null"}' for name in fields)
    return "{" + members + _indent(depth) + "}"
