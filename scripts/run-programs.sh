#!/usr/bin/env bash
# SPDX-License-Identifier: MIT OR Apache-2.0
# Runs test programs one after another, each under a timeout, showing their
# own output; runs them all, then fails if any failed or hung.
#
# usage: scripts/run-programs.sh TIMEOUT_SECONDS PROGRAM...
set -uo pipefail
limit=$1; shift
failed=()
for prog in "$@"; do
    echo "=== $prog"
    start=$SECONDS
    timeout --kill-after=10 "$limit" "$prog"
    rc=$?
    took=$((SECONDS - start))
    if [ "$rc" -eq 0 ]; then
        echo "--- ok    $prog (${took}s)"
    else
        case $rc in
            124|137) why="timed out after ${limit}s" ;;
            *) if [ "$rc" -gt 128 ]; then why="killed by signal $((rc - 128))"; else why="exit status $rc"; fi ;;
        esac
        echo "--- FAIL  $prog ($why)"
        failed+=("$prog")
    fi
done
echo "$(( $# - ${#failed[@]} )) of $# program(s) passed"
if [ "${#failed[@]}" -ne 0 ]; then
    printf 'failed: %s\n' "${failed[@]}" >&2
    exit 1
fi
