#!/usr/bin/env bash
# SPDX-License-Identifier: MIT OR Apache-2.0
# Checks that `make install` installs what `make` built and builds nothing,
# as `make && sudo make install` needs (root's PATH has no cargo):
#  - with a PATH of /usr/bin:/bin behind a directory whose cargo, rustc and
#    python3 fail loudly if run, `make install DESTDIR=...` succeeds, runs
#    none of them, changes no build output, and installs the library,
#    header, .pc files and man pages;
#  - with nothing built (BUILD and CARGO_TARGET_DIR pointing at an empty
#    directory) it fails, saying to run `make` first, and installs nothing.
#
# usage: scripts/check-install-nobuild.sh VERSION WORKDIR   (MAKE)
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
version=$1 work=$(realpath -m "$2")
major=${version%%.*}
make_cmd=$(command -v "${MAKE:-make}")
rm -rf "$work"
mkdir -p "$work/bin"

# Tools install must not run: each says so and fails.
for tool in cargo rustc python3; do
    printf '#!/bin/sh\necho "%s was run by make install" >&2\nexit 97\n' "$tool" >"$work/bin/$tool"
    chmod +x "$work/bin/$tool"
done
path=$work/bin:/usr/bin:/bin

# The build outputs, with their modification times.
outputs() { find build/lib build/dist build/man build/native-libs -type f -printf '%T@ %p\n' 2>/dev/null | sort; }
outputs >"$work/before.txt"

echo "make install with PATH=$path:"
dest=$work/dest
if env PATH="$path" "$make_cmd" --no-print-directory install DESTDIR="$dest" PREFIX=/usr/local \
        >"$work/install.log" 2>&1; then
    ok "make install succeeded"
else
    fail "make install failed:"; tail -5 "$work/install.log" >&2
fi
ran=$(grep -o '[a-z0-9]* was run by make install' "$work/install.log" | sort -u | tr '\n' ' ' || true)
if [ -z "$ran" ]; then ok "it ran no cargo, rustc or python3"; else fail "it ran: $ran"; fi
outputs >"$work/after.txt"
if cmp -s "$work/before.txt" "$work/after.txt"; then ok "no build output changed ($(wc -l <"$work/after.txt") files)"
else fail "build outputs changed:"; diff "$work/before.txt" "$work/after.txt" | head -5 >&2; fi
for f in lib/libeventq.so.$version lib/libeventq.so.$major lib/libeventq.a include/eventq.h \
         lib/pkgconfig/eventq.pc lib/pkgconfig/eventq-static.pc share/man/man3/eventq_chan_send.3 \
         share/man/man7/eventq.7; do
    [ -e "$dest/usr/local/$f" ] || missing="${missing:-} /usr/local/$f"
done
if [ -z "${missing:-}" ]; then ok "installed the libraries, header, .pc files and man pages"
else fail "not installed:$missing"; fi

echo "make install with nothing built:"
empty=$work/empty
mkdir -p "$empty"
if env PATH="$path" "$make_cmd" --no-print-directory install BUILD="$empty/build" \
        CARGO_TARGET_DIR="$empty/target" DESTDIR="$work/dest-empty" >"$work/empty.log" 2>&1; then
    fail "make install succeeded with nothing built"
else
    if grep -q 'run `make` first' "$work/empty.log"; then ok "it fails: $(grep -m1 'error:' "$work/empty.log" | cut -c1-110)..."
    else fail "it fails without saying to run make first:"; tail -3 "$work/empty.log" >&2; fi
fi
if [ -z "$(find "$work/dest-empty" -mindepth 1 2>/dev/null | head -1)" ]; then ok "and installs nothing"
else fail "files were installed into $work/dest-empty"; fi
ran=$(grep -o '[a-z0-9]* was run by make install' "$work/empty.log" | sort -u | tr '\n' ' ' || true)
if [ -z "$ran" ]; then ok "nor runs cargo to build them"; else fail "it ran: $ran"; fi

finish "install-without-build" "install builds nothing"
