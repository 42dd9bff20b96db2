#!/usr/bin/env bash
# SPDX-License-Identifier: MIT OR Apache-2.0
# Writes the native libraries a static link of libeventq.a needs, as rustc
# reports them (--print native-static-libs), to OUT, e.g.
#   -lgcc_s -lutil -lrt -lpthread -lm -ldl -lc
# The staticlib is built in its own TARGET_DIR so the main target/ build is
# never invalidated by the different crate-type and rustc arguments.
#
# usage: scripts/native-static-libs.sh TARGET_DIR OUT
set -euo pipefail
target_dir=$1 out=$2
cargo=${CARGO:-cargo}

mkdir -p "$(dirname "$out")"
log=$out.log
echo "native-static-libs: building the staticlib in $target_dir (only when dependencies change)"
if ! CARGO_TARGET_DIR=$target_dir "$cargo" rustc --release --lib --crate-type staticlib ${CARGO_FEATURES:---features capi} \
        -- --print native-static-libs >"$log" 2>&1; then
    cat "$log" >&2
    echo "error: the staticlib build for --print native-static-libs failed" >&2
    exit 1
fi
# cargo replays the cached note when the build is already fresh.
libs=$(sed -n 's/^note: native-static-libs: //p' "$log" | tail -n 1)
if [ -z "$libs" ]; then
    cat "$log" >&2
    echo "error: rustc printed no native-static-libs line (see above)" >&2
    exit 1
fi
printf '%s\n' "$libs" >"$out.tmp"
mv -f "$out.tmp" "$out"
echo "native-static-libs: $libs"
