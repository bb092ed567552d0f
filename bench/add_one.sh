#!/bin/bash
# Adding one run set to a stored warehouse, for loopmeter executables given in turn (A/B in one run):
#   bash bench/add_one.sh WAREHOUSE RUN_SET_FOLDER LOOPMETER [LOOPMETER ...]
# Each turn: a `cp -a` of WAREHOUSE, `catalog` and `aggregate` untimed (a writer has run on it), then
# `ingest forgeloop RUN_SET_FOLDER`, `aggregate`, and `aggregate` with nothing to do, each timed.
# WAREHOUSE and RUN_SET_FOLDER as `python bench/aggregate_scale.py --runs N --add-only --keep DIR` leaves
# them (DIR/warehouse-N, DIR/added).
set -e
warehouse=$1 added=$2
shift 2
copy=$(mktemp -d)/warehouse
for loopmeter in "$@"; do
  rm -rf "$copy" && cp -a "$warehouse" "$copy"
  "$loopmeter" --warehouse "$copy" catalog --quiet >/dev/null
  "$loopmeter" --warehouse "$copy" aggregate --quiet >/dev/null
  /usr/bin/time -f "$loopmeter ingest    %e s wall %U+%S s CPU %M KiB" "$loopmeter" --warehouse "$copy" \
    ingest forgeloop "$added" --scenarios "$added/scenarios" --quiet >/dev/null
  /usr/bin/time -f "$loopmeter aggregate %e s wall %U+%S s CPU %M KiB" "$loopmeter" --warehouse "$copy" aggregate --quiet >/dev/null
  /usr/bin/time -f "$loopmeter no-op     %e s wall %U+%S s CPU %M KiB" "$loopmeter" --warehouse "$copy" aggregate --quiet >/dev/null
done
rm -rf "$(dirname "$copy")"
