"""What loopmeter does, one function per use case: the Python API, and what each command runs.

Each function opens the warehouse it is given (a path, or `$LOOPMETER_WAREHOUSE`, or
`data/warehouse`), takes the writer lock when it writes, publishes its tables together, builds
the catalog again, and returns a result; it raises `loopmeter.errors.LoopmeterError` (one line,
with the exit code the command ends with) for anything it could not do. The commands of the
`loopmeter` program only parse their options, call one of these and print what it returns.

    from loopmeter import operations as lm

    lm.ingest_forgeloop("results", "scenarios", warehouse="lm")
    lm.aggregate(warehouse="lm")
    tail = lm.forgeloop_report("tail", warehouse="lm").document
"""
from .everything import demo, run_all
from .forge import harvest_survival, ingest_forge, report_routing, report_srm, report_survival
from .forgeloop import aggregate, execute, forgeloop_report, ingest_forgeloop, report_html
from .statistics import compare, report_confidence
from .warehouse import catalog, check, schema, sql

__all__ = [
    "aggregate", "catalog", "check", "compare", "demo", "execute", "forgeloop_report", "harvest_survival",
    "ingest_forge", "ingest_forgeloop", "report_confidence", "report_html", "report_routing", "report_srm",
    "report_survival", "run_all", "schema", "sql",
]
