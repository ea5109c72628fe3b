#!/usr/bin/env bash
# A tier of `make test` with its time against its budget: `tier.sh NAME BUDGET_S COMMAND...`. Prints one line when
# the tier ends, saying so when it ran over; the tier's exit status is the command's (no test is timed).
set -uo pipefail
name=$1 budget=$2
shift 2
started=$SECONDS
"$@"
status=$?
took=$((SECONDS - started))
verdict="within its budget of ${budget} s"
[ "$took" -gt "$budget" ] && verdict="OVER its budget of ${budget} s"
printf '[tier] %s: %d min %02d s, %s (exit %d)\n' "$name" $((took / 60)) $((took % 60)) "$verdict" "$status"
exit "$status"
