#!/usr/bin/env bash
# SPDX-License-Identifier: MIT OR Apache-2.0
# For `make uninstall`: removes each DIR if it is empty, then its parents
# while they are empty, never TOP itself nor anything outside TOP. Only
# rmdir(1), so nothing that still holds a file can go.
#
# usage: scripts/rmdir-empty.sh TOP DIR...
set -euo pipefail
[ $# -ge 1 ] || { echo "usage: $0 TOP DIR..." >&2; exit 2; }
top=$(realpath -m -s "$1")
shift
for dir in "$@"; do
    d=$(realpath -m -s "$dir")
    case "$d" in
        "${top%/}"/*) ;;
        *) continue ;;  # outside TOP: left alone
    esac
    while [ "$d" != "$top" ] && [ -d "$d" ] && [ ! -L "$d" ] \
          && [ -z "$(ls -A "$d")" ]; do
        rmdir "$d"
        echo "rmdir $d"
        d=$(dirname "$d")
    done
done
