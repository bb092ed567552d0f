"""The parts every help page shares: a short first sentence (the line in the command list), an
example, the exit codes that apply to the command, and the choices an option takes.

Imports nothing but the exit codes, so `--help` answers at once.
"""
from __future__ import annotations

from ..errors import Exit

# What each exit code means; every command may end with the first three, 130, 141 and 143.
MEANINGS = {
    Exit.OK: "done",
    Exit.FATAL: "failed; nothing was changed",
    Exit.USAGE: "wrong command line",
    Exit.REJECTED: "some inputs rejected (each listed with its reason); the rest stored",
    Exit.BUSY: "the warehouse is locked by another writer (--wait waits for it)",
    Exit.REGRESSED: "compare --fail-on: a gated row regressed, is inconclusive or is underpowered",
    Exit.INTERRUPTED: "interrupted (Ctrl-C); tables already replaced keep their new version",
    Exit.BROKEN_PIPE: "the reader of the output left (| head)",
    Exit.TERMINATED: "terminated (SIGTERM), answered as Ctrl-C is",
}
EVERY_COMMAND = (Exit.OK, Exit.FATAL, Exit.USAGE, Exit.INTERRUPTED, Exit.BROKEN_PIPE, Exit.TERMINATED)
SOME_COMMANDS = (Exit.REJECTED, Exit.BUSY, Exit.REGRESSED)

SHORT_MEANINGS = {
    Exit.REJECTED: "some inputs rejected (the rest stored)",
    Exit.BUSY: "warehouse locked by another writer",
    Exit.REGRESSED: "a gated row met --fail-on",
}

TIER_METAVAR = "[smoke|evidence|tail]"
FORMAT_METAVAR = "[table|csv|json|jsonl|parquet]"


def exit_codes_table(width: int | None = None) -> str:
    """`loopmeter help exit-codes`: every code, one line each, a line wider than `width` wrapped at
    spaces (a code's meaning continues under itself)."""
    from ..tables_text import fit_line, wrap_words

    lines = [fit_line("Exit codes of loopmeter (each command's --help lists those it can end with):", width), ""]
    for code in Exit:
        meaning = [MEANINGS[code]] if width is None else wrap_words(MEANINGS[code], max(20, width - 7), hang=0)
        lines += [(f"  {int(code):>3}  " if not at else " " * 7) + part for at, part in enumerate(meaning)]
    lines += ["", fit_line("Every command may end with 0, 1, 2, 130, 141 and 143; 3, 4 and 5 only where its help says so.",
                           width)]
    return "\n".join(lines) + "\n"


def exit_codes_line(codes: tuple[Exit, ...] = ()) -> str:
    """A command's exit codes: those every command has, then the ones of its own (`codes`)."""
    own = "".join(f", {int(code)} {SHORT_MEANINGS[code]}" for code in sorted(codes))
    return f"Exit codes: 0 done, 1 failed, 2 wrong command line{own}; 130, 141 and 143 as every command " \
           "(loopmeter help exit-codes)."


def command_help(summary: str, details: str = "", *, example: str, codes: tuple[Exit, ...] = ()) -> dict:
    """The help of a command, as keyword arguments of typer's `command`: `summary` (one short
    sentence: the command list shows it whole), `details`, and an epilog with the example (lines
    shown as written) and the exit codes that apply."""
    if len(summary) > 60 or not summary.endswith("."):
        raise ValueError(f"a command's summary is one sentence of at most 60 characters: {summary!r}")
    lines = "\n".join(f"  {line}" for line in example.strip("\n").splitlines())
    return {
        "help": summary + (" " + details if details else ""),
        "short_help": summary,
        "epilog": f"\b\nExample:\n{lines}\n\n{exit_codes_line(codes)}",
    }
