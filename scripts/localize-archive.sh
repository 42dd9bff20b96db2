#!/usr/bin/env bash
# SPDX-License-Identifier: MIT OR Apache-2.0
# libeventq.a as installed: the objects of cargo's staticlib (the crate,
# Rust's std, compiler_builtins) linked into one relocatable object in
# which only the exports of eventq.map stay global, archived alone.
#
# cargo's archive defines some 2,500 global symbols besides eventq_* (std's
# functions, rust_eh_personality, compiler_builtins' weak libm and
# __udivti3-style names): a program linking it beside another Rust static
# library gets duplicate definitions, and the weak math names can stand in
# for libm's. Inside the one object the references among them are
# resolved, so making them local changes nothing for libeventq; undefined
# references (libc, the unwinder) stay undefined, to be resolved by the
# program's link as before.
#
# usage: scripts/localize-archive.sh IN.a eventq.map OUT.a   (CC, OBJCOPY, AR, NM)
set -euo pipefail
in=$1 map=$2 out=$3
cc=${CC:-cc}
objcopy=${OBJCOPY:-objcopy}
ar=${AR:-ar}
nm=${NM:-nm}

work=$(mktemp -d "${TMPDIR:-/tmp}/eventq-localize.XXXXXX")
trap 'rm -rf "$work"' EXIT

# The exported names, as eventq.map lists them under "global:".
sed -n 's/^[[:space:]]*\(eventq_[A-Za-z0-9_]*\);.*/\1/p' "$map" | sort -u >"$work/exports.txt"
[ -s "$work/exports.txt" ] || { echo "error: $map lists no eventq_* export" >&2; exit 1; }

"$cc" -nostdlib -r -Wl,--whole-archive "$in" -Wl,--no-whole-archive -o "$work/libeventq.o"
# Without the bitcode that std's objects embed (.llvmbc, .llvmcmd: only
# rustc's LTO reads it): joined into one section it is no valid bitcode,
# and binutils' LLVM plugin (nm, ar, ld with LLVMgold in bfd-plugins)
# aborts on the object.
"$objcopy" --remove-section=.llvmbc --remove-section=.llvmcmd \
    --keep-global-symbols="$work/exports.txt" "$work/libeventq.o"

# Every export must still be there, defined and global.
"$nm" -g --defined-only "$work/libeventq.o" | awk '{ print $NF }' | sort -u >"$work/global.txt"
missing=$(comm -23 "$work/exports.txt" "$work/global.txt")
if [ -n "$missing" ]; then
    echo "error: exports of $map not defined in $in:" $missing >&2
    exit 1
fi

mkdir -p "$(dirname "$out")"
rm -f "$out.tmp"
"$ar" rcs "$out.tmp" "$work/libeventq.o"
mv -f "$out.tmp" "$out"
echo "$out: $(wc -l <"$work/global.txt") global symbols (eventq_*), was $("$nm" -g --defined-only "$in" 2>/dev/null | grep -c ' [A-Za-z] ')"
