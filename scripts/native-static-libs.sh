#!/usr/bin/env bash
# SPDX-License-Identifier: MIT OR Apache-2.0
# The release build of libeventq.a (make's only one), which also writes the
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
# usage: scripts/native-static-libs.sh OUT   (CARGO, CARGO_FEATURES)
set -euo pipefail
out=$1
cargo=${CARGO:-cargo}
features=${CARGO_FEATURES:---features capi}

mkdir -p "$(dirname "$out")"
log=$out.log
echo "$cargo rustc --release --lib $features -- --print native-static-libs"
# shellcheck disable=SC2086
"$cargo" rustc --release --lib $features -- --print native-static-libs 2>&1 | tee "$log"
libs=$(sed -n 's/^note: native-static-libs: //p' "$log" | tail -n 1)
if [ -z "$libs" ]; then
    echo "error: rustc printed no native-static-libs line (see above)" >&2
    exit 1
fi
printf '%s\n' "$libs" >"$out.tmp"
if cmp -s "$out.tmp" "$out"; then rm -f "$out.tmp"; else mv -f "$out.tmp" "$out"; fi
