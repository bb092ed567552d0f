"""What an ingest of ForgeLoop run files answers: the files accepted, unchanged and rejected, per tree."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from .walk import group_of


@dataclass
class IngestResult:
    results: Path
    run_sets: list[str] = field(default_factory=list)
    accepted: int = 0
    unchanged: int = 0
    rejections: list[tuple[str, str, str]] = field(default_factory=list)  # (path, field, rule)
    scenarios: int = 0
    scenarios_unchanged: bool = False  # the scenario files are those the last ingest read (names, sizes, times)
    wrote: bool = False  # some table changed (false for an unchanged tree)

    @property
    def rejected(self) -> int:
        """Every file rejected: run files and scenario files."""
        return len(self.rejections)

    @property
    def runs_rejected(self) -> int:
        return sum(1 for path, _, _ in self.rejections if rejection_group(path) is not None)

    @property
    def scenarios_rejected(self) -> int:
        return self.rejected - self.runs_rejected

    @property
    def seen(self) -> int:
        """Run files seen (the scenario files are `scenarios` + `scenarios_rejected`)."""
        return self.accepted + self.unchanged + self.runs_rejected

    def as_dict(self) -> dict:
        return {
            "results": str(self.results),
            "runSets": self.run_sets,
            "seen": self.seen,
            "accepted": self.accepted,
            "unchanged": self.unchanged,
            "rejected": self.runs_rejected,
            "scenarios": self.scenarios,
            "scenariosRejected": self.scenarios_rejected,
            "scenariosUnchanged": self.scenarios_unchanged,
            "rejections": [{"path": p, "field": f, "reason": r} for p, f, r in self.rejections],
        }


def rejection_group(path: str) -> str | None:
    """A rejected run file's entry of raw/; None for a scenario file (an absolute path)."""
    return group_of(path) if path == "raw" or path.startswith("raw/") else None
