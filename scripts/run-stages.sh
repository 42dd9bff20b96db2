#!/usr/bin/env bash
# SPDX-License-Identifier: MIT OR Apache-2.0
# Runs `make test-<stage>` for each stage in order, stops at the first
# failure, and prints a summary ending in the line the CI reads:
#   N passed, N failed
# A stage that finds nothing to test marks itself skipped by touching
# build/stages/test-<stage>.skipped; skipped stages count as neither.
#
# usage: scripts/run-stages.sh MAKE STAGE...
set -uo pipefail
make_cmd=$1; shift
marks=${STAGE_MARKS:-build/stages}
mkdir -p "$marks"

results=() passed=0 failed=0 stop=0
for stage in "$@"; do
    if [ "$stop" -eq 1 ]; then
        results+=("$(printf '  %-14s %s' "$stage" "not run")")
        continue
    fi
    rm -f "$marks/test-$stage.skipped"
    echo
    echo "==================== stage: $stage"
    start=$SECONDS
    # $make_cmd is word-split on purpose (it may be "make" or a path + flags).
    $make_cmd --no-print-directory "test-$stage"
    rc=$?
    took="$((SECONDS - start))s"
    if [ "$rc" -ne 0 ]; then
        result="FAILED"; failed=$((failed + 1)); stop=1
    elif [ -e "$marks/test-$stage.skipped" ]; then
        result="skipped"
    else
        result="passed"; passed=$((passed + 1))
    fi
    results+=("$(printf '  %-14s %-8s %6s' "$stage" "$result" "$took")")
done

echo
echo "==================== summary"
printf '%s\n' "${results[@]}"
[ "$stop" -eq 1 ] && echo "stopped at the first failure; later stages were not run"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
