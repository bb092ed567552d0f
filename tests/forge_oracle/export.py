"""The store reader the seed's routing.py imports, written from the input contract.

Slow and obvious on purpose: every event parsed in Python, grouped in dicts.
"""
from __future__ import annotations

import json
from collections import defaultdict


class Store:
    def __init__(self, db):
        self.repo_paths = dict(db.execute("SELECT repo, path FROM repos"))
        self.events = []
        for rid, kind, src, ts, run, task, repo, mode, data in db.execute(
            "SELECT rid, kind, src, ts, run, task, repo, mode, data FROM events ORDER BY ts, rid"
        ):
            self.events.append(dict(rid=rid, kind=kind, src=src, ts=ts, run=run, task=task, repo=repo, mode=mode,
                                    d=json.loads(data)))


class Runs:
    def __init__(self, store: Store):
        self.store = store
        self.plans = defaultdict(list)  # run -> its plan events (revisions), in event order
        self.attempts = defaultdict(list)  # (run, task) -> attempt events, in event order
        self.dispatches = defaultdict(list)  # (run, task, role) -> [{attempt, d, ts}]
        self.accepted = set()
        for e in store.events:
            kind, d = e["kind"], e["d"]
            if kind == "plan":
                self.plans[e["run"]].append(e)
            elif kind == "attempt":
                self.attempts[(e["run"], e["task"])].append(e)
            elif kind == "dispatch":
                self.dispatches[(e["run"], e["task"], d.get("role"))].append(dict(attempt=d.get("attempt"), d=d, ts=e["ts"]))
            elif kind == "event" and d.get("name") == "accepted":
                self.accepted.add((e["run"], e["task"]))

    def resolved(self, run, task, role, n) -> dict:
        """The last dispatch of `role` for attempt n: what really ran."""
        found = {}
        for e in self.dispatches.get((run, task, role), []):
            if e["attempt"] == n:
                found = e["d"]
        return found


def _attempts(runs: Runs, run, task, events) -> list:
    by_n = {}
    for e in events:
        by_n.setdefault(e["d"].get("n"), []).append(e)
    out = []
    for n in sorted(by_n):
        group = by_n[n]
        statuses = [e["d"].get("status") for e in group]
        outcome = True if "passed" in statuses else False if "failed" in statuses else None
        reasons = [e["d"].get("reason") for e in group if e["d"].get("reason")]
        reason = reasons[-1] if reasons else statuses[-1]
        out.append(dict(n=n, events=group, outcome=outcome, reason=reason))
    return out
