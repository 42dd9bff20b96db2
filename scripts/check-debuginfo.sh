#!/usr/bin/env bash
# SPDX-License-Identifier: MIT OR Apache-2.0
# Checks the installed shared library's split debug info, as a debugger
# finds it:
#  - the library has no .debug_* section left and no symbol table (.symtab:
#    its dynamic symbols are all a program needs), and a .gnu_debuglink
#    naming DEBUG_FILE's basename;
#  - DEBUG_FILE exists, holds .debug_info, .debug_line and the symbol table
#    (for gdb, perf and backtraces), and its CRC-32 is
#    the one the debuglink records (what gdb checks before using it);
#  - both carry the same GNU build ID (the other way gdb matches them);
#  - readelf, following the link by itself (-wK), finds DEBUG_FILE;
#  - gdb, given only the library, reads line numbers of eventq_chan_send
#    from it (skipped with a notice when gdb is not installed).
#
# usage: scripts/check-debuginfo.sh LIBRARY DEBUG_FILE
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
so=$(realpath -m "$1") dbg=$(realpath -m "$2")
need readelf "apt-get install binutils"
need objcopy "apt-get install binutils"
need python3 "apt-get install python3"
[ -f "$so" ] || { echo "error: $so is missing" >&2; exit 1; }

echo "$so:"
sections=$(readelf -S -W "$so" | awk '$1 == "[" { print $3; next } $1 ~ /^\[/ { print $2 }' || true)
left=$(grep '^\.debug_' <<<"$sections" || true)
if [ -z "$left" ]; then ok "no .debug_* section"; else fail "debug sections left:" $left; fi
if grep -qx -- '.symtab' <<<"$sections"; then
    fail "a .symtab is left ($(readelf -s -W "$so" | grep -c ': ') symbols; the debug file has them)"
else ok "no .symtab ($(readelf --dyn-syms -W "$so" | grep -c ' eventq_') eventq_* dynamic symbols)"; fi
links=$(readelf --debug-dump=links "$so" 2>/dev/null || true)
name=$(sed -n 's/^ *Separate debug info file: *//p' <<<"$links" | head -1)
crc=$(sed -n 's/^ *CRC value: *//p' <<<"$links" | head -1)
if [ "$name" = "$(basename "$dbg")" ]; then ok ".gnu_debuglink names $name (CRC $crc)"
else fail ".gnu_debuglink names '${name:-nothing}', want $(basename "$dbg")"; fi

echo "$dbg:"
if [ -f "$dbg" ]; then
    dsections=$(readelf -S -W "$dbg" | awk '$1 == "[" { print $3; next } $1 ~ /^\[/ { print $2 }' || true)
    for sec in .debug_info .debug_line .symtab; do
        if grep -qx -- "$sec" <<<"$dsections"; then ok "has $sec"; else fail "has no $sec"; fi
    done
    actual=$(python3 -c 'import sys, zlib; print("%#010x" % zlib.crc32(open(sys.argv[1], "rb").read()))' "$dbg" || true)
    if [ -n "$crc" ] && [ "$((crc))" = "$((actual))" ]; then ok "CRC-32 $actual matches the debuglink"
    else fail "CRC-32 of the file is $actual, the debuglink says '${crc:-nothing}'"; fi
    id_so=$(readelf -n "$so" 2>/dev/null | sed -n 's/^ *Build ID: *//p' || true)
    id_dbg=$(readelf -n "$dbg" 2>/dev/null | sed -n 's/^ *Build ID: *//p' || true)
    if [ -n "$id_so" ] && [ "$id_so" = "$id_dbg" ]; then ok "build ID $id_so in both"
    else fail "build IDs differ: library '${id_so:-none}', debug file '${id_dbg:-none}'"; fi
else
    fail "the debug file is missing"
fi

echo "lookups from the library alone:"
found=$(readelf -wK --debug-dump=links "$so" 2>/dev/null | sed -n 's/.*Found separate debug info file: *//p' | head -1)
if [ -n "$found" ] && [ "$(realpath -m "$found")" = "$dbg" ]; then ok "readelf -wK follows the link to $found"
else fail "readelf -wK finds '${found:-nothing}', want $dbg"; fi
if command -v gdb >/dev/null 2>&1; then
    # The library has no line table: a line number can only come from the
    # debug file; the symbol tables say which file gdb loaded.
    out=$(gdb -nx -batch -ex 'info line eventq_chan_send' -ex 'maint info symtabs chan.rs' "$so" 2>&1 || true)
    line=$(grep -E '^Line [0-9]+ of "' <<<"$out" | head -1)
    objfile=$(sed -n 's/^{ objfile \([^ ]*\) .*/\1/p' <<<"$out" | head -1)
    if [ -n "$line" ] && [ "$objfile" = "$dbg" ]; then ok "gdb loads $objfile: ${line%% starts at*}"
    else fail "gdb: no line information for eventq_chan_send from $dbg:"; grep -v '^ ' <<<"$out" | sed 's/^/        /' >&2; fi
else
    note "gdb is missing: its lookup is not checked (apt-get install gdb); the CRC and build ID checks above stand"
fi

finish "debug info" "debug info"
