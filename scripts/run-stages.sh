#!/usr/bin/env bash
# SPDX-License-Identifier: MIT OR Apache-2.0
# Runs `make stage-<stage>` for each stage in order, stops at the first
# failure, and prints a summary ending in the line the CI reads:
#   N passed, N failed
# A stage that finds nothing to test marks itself skipped by touching
# build/stages/stage-<stage>.skipped; skipped stages count as neither.
#
# A stage named in STAGES_BACKGROUND starts at its place in the order but
# is not waited for: the stages after it run meanwhile, on the core it
# leaves idle. Its output goes to build/stages/stage-<stage>.log and is
# shown when it ends; a failure stops the run at the next stage boundary,
# and the summary waits for it. Only for a stage that builds nothing the
# others use (loom: a target dir of its own).
#
# usage: scripts/run-stages.sh MAKE STAGE...
set -uo pipefail
make_cmd=$1; shift
marks=${STAGE_MARKS:-build/stages}
background=" ${STAGES_BACKGROUND:-} "
mkdir -p "$marks"

stages=("$@") results=() passed=0 failed=0 stop=0
declare -A bg_index=() bg_pid=()
# A background stage runs in a process group of its own (set -m), so that
# it is not deaf to signals and can be stopped whole when this script ends.
trap 'for p in "${bg_pid[@]}"; do kill -TERM -- "-$p" 2>/dev/null; done' EXIT
trap 'exit 130' INT TERM

# result INDEX STAGE RC SECONDS: records how a stage ended.
result() {
    local r
    if [ "$3" -ne 0 ]; then
        r="FAILED"; failed=$((failed + 1)); stop=1
    elif [ -e "$marks/stage-$2.skipped" ]; then
        r="skipped"
    else
        r="passed"; passed=$((passed + 1))
    fi
    results[$1]=$(printf '  %-14s %-8s %6s' "$2" "$r" "${4}s")
}

# reap [wait]: collects the background stages that have ended (with wait,
# all of them), showing their output.
reap() {
    local stage rc took
    for stage in "${!bg_index[@]}"; do
        [ "${1:-}" = wait ] && wait "${bg_pid[$stage]}"
        [ -e "$marks/stage-$stage.rc" ] || continue
        wait "${bg_pid[$stage]}" 2>/dev/null
        read -r rc took <"$marks/stage-$stage.rc"
        echo
        echo "==================== stage: $stage (ran in the background, ${took}s)"
        cat "$marks/stage-$stage.log"
        result "${bg_index[$stage]}" "$stage" "$rc" "$took"
        unset "bg_index[$stage]" "bg_pid[$stage]"
    done
}

for i in "${!stages[@]}"; do
    stage=${stages[$i]}
    reap
    if [ "$stop" -eq 1 ]; then
        results[$i]=$(printf '  %-14s %s' "$stage" "not run")
        continue
    fi
    rm -f "$marks/stage-$stage.skipped" "$marks/stage-$stage.rc"
    echo
    if [[ $background == *" $stage "* ]]; then
        echo "==================== stage: $stage (in the background: its output when it ends)"
        set -m
        ( start=$SECONDS
          $make_cmd --no-print-directory "stage-$stage" >"$marks/stage-$stage.log" 2>&1
          echo "$? $((SECONDS - start))" >"$marks/stage-$stage.rc.tmp"
          mv "$marks/stage-$stage.rc.tmp" "$marks/stage-$stage.rc" ) &
        bg_pid[$stage]=$! bg_index[$stage]=$i
        set +m
        continue
    fi
    echo "==================== stage: $stage"
    start=$SECONDS
    # $make_cmd is word-split on purpose (it may be "make" or a path + flags).
    $make_cmd --no-print-directory "stage-$stage"
    result "$i" "$stage" $? $((SECONDS - start))
done
reap wait

echo
echo "==================== summary"
printf '%s\n' "${results[@]}"
[ "$stop" -eq 1 ] && echo "stopped at the first failure; later stages were not run"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
