#!/usr/bin/env bash
# SPDX-License-Identifier: MIT OR Apache-2.0
# Fails when the committed C header differs from a fresh cbindgen generation.
# build.rs writes the fresh header to its OUT_DIR on every run without touching
# the working tree; this finds that copy through cargo's JSON messages, copies
# it to a temporary file and diffs it against the committed one.
#
# usage: scripts/check-header.sh include/eventq.h
set -euo pipefail
committed=$1
cargo=${CARGO:-cargo}

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# The release build as make runs it (scripts/native-static-libs.sh), so a
# built tree builds nothing here.
if ! "$cargo" rustc --release -p eventq-capi --lib --message-format=json \
        -- --print native-static-libs >"$tmp/messages.json" 2>"$tmp/stderr"; then
    cat "$tmp/stderr" >&2
    echo "error: cargo build failed, cannot regenerate the header" >&2
    exit 1
fi
# The eventq package's build-script-executed message carries its out_dir
# (not eventq-capi's: that crate has no build script).
out_dir=$(grep '"reason":"build-script-executed"' "$tmp/messages.json" \
          | grep -E '"package_id":"[^"]*[#/]eventq[@#]' \
          | sed -n 's/.*"out_dir":"\([^"]*\)".*/\1/p' | tail -n 1)
if [ -z "$out_dir" ] || [ ! -f "$out_dir/eventq.h" ]; then
    echo "error: build.rs produced no eventq.h in its OUT_DIR (${out_dir:-not found})" >&2
    exit 1
fi
cp "$out_dir/eventq.h" "$tmp/eventq.h"

if ! diff -u --label "$committed (committed)" --label "$committed (generated)" \
        "$committed" "$tmp/eventq.h"; then
    echo >&2
    echo "error: $committed is out of date with src/ffi: run make header and commit it" >&2
    exit 1
fi
echo "header: $committed matches a fresh generation"
