#!/bin/sh
# SPDX-License-Identifier: MIT OR Apache-2.0
# `unsafe` is denied in the crate (src/lib.rs) and allowed by name in a few
# places only: the OS layer, the C ABI, the slot memory and the ring's two
# uses of the slot buffer. This fails when an `allow(unsafe_code)` appears
# anywhere else, or one of these goes, so the list below changes only in a
# reviewed commit.
set -eu
cd "$(dirname "$0")/.."
expected='src/chan/mod.rs: mod slots;
src/chan/ring.rs: fn read_long<T>(&self, pos: u64, len: usize, take: &mut impl FnMut(Payload<'"'"'_>) -> T) -> T {
src/chan/ring.rs: fn write_long(&self, pos: u64, msg: &[u8]) {
src/lib.rs: mod ffi;
src/lib.rs: mod sys;'
found=$(grep -rn -A1 --include='*.rs' 'allow(unsafe_code)' src |
    sed -n 's/^\(src\/[^-]*\.rs\)-[0-9]*- *\(.*\)$/\1: \2/p' | LC_ALL=C sort)
if [ "$found" != "$expected" ]; then
    echo "error: allow(unsafe_code) is where it should not be, or gone from where it was." >&2
    echo "expected (the item after each allow):" >&2
    echo "$expected" | sed 's/^/  /' >&2
    echo "found:" >&2
    echo "$found" | sed 's/^/  /' >&2
    exit 1
fi
echo "unsafe allowed only in: the OS layer (sys), the C ABI (ffi), the slot memory (chan/slots.rs) and the ring's two slot-buffer accesses"
