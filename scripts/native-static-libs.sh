#!/usr/bin/env bash
# SPDX-License-Identifier: MIT OR Apache-2.0
# The release build of the C library (make's only one: the crate
# eventq-capi in capi/, target/release/libeventq_capi.a), which also writes the
# native libraries a static link of it needs, as rustc reports them
# (--print native-static-libs), to OUT, e.g.
#   -lgcc_s -lutil -lrt -lpthread -lm -ldl -lc
# One build serves both: cargo replays rustc's note when the build is fresh,
# and OUT is rewritten only when the list changes, so nothing that depends
# on it is redone for nothing. `cargo rustc` with extra arguments is a unit
# of its own to cargo (they are part of its metadata hash), so a plain
# `cargo build --release` builds the crate once more: scripts/check-header.sh
# runs this same command.
#
# The C library's crate turns on eventq's feature `capi` itself.
#
# usage: scripts/native-static-libs.sh OUT   (CARGO)
set -euo pipefail
out=$1
cargo=${CARGO:-cargo}

mkdir -p "$(dirname "$out")"
log=$out.log
echo "$cargo rustc --release -p eventq-capi --lib -- --print native-static-libs"
"$cargo" rustc --release -p eventq-capi --lib -- --print native-static-libs 2>&1 | tee "$log"
libs=$(sed -n 's/^note: native-static-libs: //p' "$log" | tail -n 1)
if [ -z "$libs" ]; then
    echo "error: rustc printed no native-static-libs line (see above)" >&2
    exit 1
fi
printf '%s\n' "$libs" >"$out.tmp"
if cmp -s "$out.tmp" "$out"; then rm -f "$out.tmp"; else mv -f "$out.tmp" "$out"; fi
