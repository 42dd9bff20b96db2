# SPDX-License-Identifier: MIT OR Apache-2.0
# Shared by the scripts in scripts/ (sourced, not run): how a check reports,
# how a missing tool is named, and the skip lists of sanitize.sh.
#
#   ok TEXT...         a check passed
#   fail TEXT...       a check failed (counted in $failures; the script goes on)
#   note TEXT...       something to know that is neither
#   finish WHAT LABEL  exits 1 with "N WHAT check(s) failed" if any failed,
#                      else prints "LABEL: all checks passed"
#   need TOOL HINT     exits 1 saying what to install when TOOL is not on PATH
#   reads ARGS...      grep ARGS, reading all of its input
#   header_functions HEADER   the functions HEADER declares, one a line, sorted
#   skip_list LIST NAME...    NAMEs are left out of LIST's runs
#   skipped LIST NAME         true when NAME is on LIST (see skip_list)

failures=0
ok()   { echo "  ok    $*"; }
fail() { echo "  FAIL  $*" >&2; failures=$((failures + 1)); }
note() { echo "  note  $*"; }

finish() {
    if [ "$failures" -ne 0 ]; then
        echo "$failures $1 check(s) failed" >&2
        exit 1
    fi
    echo "$2: all checks passed"
}

need() {
    command -v "$1" >/dev/null 2>&1 || { echo "error: $1 is missing: $2" >&2; exit 1; }
}

# grep -q would stop early and fail the writer with SIGPIPE, which pipefail
# turns into "no match".
reads() { grep "$@" >/dev/null; }

# Names followed by "(" after preprocessing, so comments do not count.
header_functions() {
    "${CC:-cc}" -E -P -D_GNU_SOURCE "$1" \
        | grep -oE '\beventq_[A-Za-z0-9_]+[[:space:]]*\(' | tr -d '( \t' | sort -u
}

# Skip lists are kept as " a b c " so a lookup is one pattern match; a
# list that was never declared skips nothing.
declare -A SKIP_LISTS=()
skip_list() {
    local list=$1
    shift
    SKIP_LISTS[$list]=" $* "
}
skipped() {
    case ${SKIP_LISTS[$1]:-} in
        *" $2 "*) return 0 ;;
    esac
    return 1
}
