#!/usr/bin/env bash
# SPDX-License-Identifier: MIT OR Apache-2.0
# Checks install, install-strip and uninstall in scratch DESTDIRs:
#  1. into an empty DESTDIR (PREFIX=/usr/local): exactly the expected files
#     go in, no more, no fewer (libraries and symlinks, debug file, header,
#     both .pc files, the CMake files, a man page per function of the header
#     and eventq(7)); uninstall leaves the DESTDIR empty again;
#  2. into a DESTDIR whose prefix holds other packages' files (in lib/,
#     lib/pkgconfig, lib/cmake, lib/.debug, include/, man3/, man7/) and an
#     empty directory, installed twice: after uninstall the tree is what it
#     was, file for file (types, modes, symlink targets, contents);
#  3. install-strip: libeventq.a has no .debug_info left but still defines
#     the functions (a program linked with it runs), the shared library has
#     no .symtab but the dynamic symbols (and versions) of install's and its
#     .gnu_debuglink; uninstall empties the DESTDIR;
#  4. other directories (LIBDIR, INCLUDEDIR, MANDIR, DEBUGDIR, CMAKEDIR):
#     the same exact file list under them; uninstall empties the DESTDIR;
#  and uninstall where nothing is installed succeeds and changes nothing.
#
# usage: scripts/check-uninstall.sh VERSION HEADER WORKDIR   (MAKE, CC)
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
version=$1 header=$2 work=$(realpath -m "$3")
make_cmd=${MAKE:-make}
cc=${CC:-cc}
major=${version%%.*}
need readelf "apt-get install binutils"
need nm "apt-get install binutils"
need "$cc" "install a C compiler (apt-get install gcc)"
rm -rf "$work"
mkdir -p "$work"

# The functions of the header, each of which gets a man page.
header_functions "$header" >"$work/functions.txt"

# listing DIR: every entry below DIR with its type, mode, symlink target
# and, for files, a checksum.
listing() {
    (cd "$1" && find . -mindepth 1 -printf '%y %m %p -> %l\n' | sort
     cd "$1" && find . -type f -exec sha256sum {} + | sort -k2)
}
# expected PREFIX LIBDIR INCLUDEDIR MANDIR DEBUGDIR CMAKEDIR: the files
# (and symlinks) install must create, one path a line, sorted.
expected() {
    local lib=$2 inc=$3 man=$4 dbg=$5 cm=$6
    {
        printf '%s\n' "$lib/libeventq.so.$version" "$lib/libeventq.so.$major" "$lib/libeventq.so" \
            "$lib/libeventq.a" "$dbg/libeventq.so.$version.debug" "$inc/eventq.h" \
            "$lib/pkgconfig/eventq.pc" "$lib/pkgconfig/eventq-static.pc" \
            "$cm/eventqConfig.cmake" "$cm/eventqConfigVersion.cmake" "$man/man7/eventq.7"
        sed "s|^\(.*\)$|$man/man3/\1.3|" "$work/functions.txt"
    } | sort
}
# installed DESTDIR: the files and symlinks below it, as absolute paths.
installed() { (cd "$1" && find . \( -type f -o -type l \) | sed 's|^\.||' | sort); }
# run NAME ARGS...: make ARGS, output in NAME.log; 1 on failure.
run() {
    local log=$work/$1.log
    shift
    if ! "$make_cmd" --no-print-directory "$@" >"$log" 2>&1; then
        tail -20 "$log" >&2
        return 1
    fi
}
# same_tree WHAT BEFORE AFTER
same_tree() {
    if diff -u "$2" "$3" >"$work/diff.txt"; then ok "$1"
    else fail "$1: the tree changed:"; head -40 "$work/diff.txt" >&2; fi
}
# exact_files WHAT DESTDIR EXPECTED_LIST
exact_files() {
    installed "$2" >"$work/got.txt"
    if diff -u "$3" "$work/got.txt" >"$work/diff.txt"; then ok "$1: the $(wc -l <"$3") expected files, no other"
    else fail "$1: installed files differ from the expected list (- missing, + extra):"; grep '^[-+]/' "$work/diff.txt" >&2; fi
}

echo "1. install and uninstall, empty DESTDIR:"
d=$work/empty
mkdir -p "$d"
listing "$d" >"$work/before1.txt"
p=/usr/local
if run install1 install DESTDIR="$d" PREFIX=$p; then
    expected $p $p/lib $p/include $p/share/man $p/lib/.debug $p/lib/cmake/eventq >"$work/expected1.txt"
    exact_files "install" "$d" "$work/expected1.txt"
    if [ "$(readlink "$d$p/lib/libeventq.so.$major")" = "libeventq.so.$version" ] &&
       [ "$(readlink "$d$p/lib/libeventq.so")" = "libeventq.so.$major" ]; then ok "soname and dev symlinks"
    else fail "symlinks: libeventq.so.$major -> $(readlink "$d$p/lib/libeventq.so.$major"), libeventq.so -> $(readlink "$d$p/lib/libeventq.so")"; fi
    unstripped_a_debug=$(readelf -S -W "$d$p/lib/libeventq.a" 2>/dev/null | grep -c '\.debug_info' || true)
    nm -D --defined-only "$d$p/lib/libeventq.so.$version" >"$work/dynsym1.txt" 2>&1 || true
    if run uninstall1 uninstall DESTDIR="$d" PREFIX=$p; then
        listing "$d" >"$work/after1.txt"
        same_tree "uninstall leaves the DESTDIR empty" "$work/before1.txt" "$work/after1.txt"
    else fail "make uninstall failed"; fi
    if run uninstall1b uninstall DESTDIR="$d" PREFIX=$p; then
        listing "$d" >"$work/after1b.txt"
        same_tree "uninstall with nothing installed succeeds, changes nothing" "$work/before1.txt" "$work/after1b.txt"
    else fail "make uninstall with nothing installed failed"; fi
else fail "make install failed"; fi

echo "2. install twice and uninstall over other packages' files:"
d=$work/shared
r=$d/usr/local
mkdir -p "$r/lib/pkgconfig" "$r/lib/cmake/other" "$r/lib/.debug" "$r/include" \
         "$r/share/man/man3" "$r/share/man/man7" "$r/share/doc/empty" "$r/bin"
echo 'not really a library' >"$r/lib/libother.so.1.2"
ln -s libother.so.1.2 "$r/lib/libother.so.1"
echo 'Name: other' >"$r/lib/pkgconfig/other.pc"
echo '# other' >"$r/lib/cmake/other/otherConfig.cmake"
echo 'debug' >"$r/lib/.debug/libother.so.1.2.debug"
echo '#define OTHER 1' >"$r/include/other.h"
printf '.TH other 3\n' >"$r/share/man/man3/other.3"
printf '.TH other 7\n' >"$r/share/man/man7/other.7"
printf '#!/bin/sh\n' >"$r/bin/other"; chmod 755 "$r/bin/other"
listing "$d" >"$work/before2.txt"
if run install2 install DESTDIR="$d" PREFIX=/usr/local && run install2b install DESTDIR="$d" PREFIX=/usr/local; then
    n_before=$(grep -c '^[fl] ' "$work/before2.txt")
    n_now=$(installed "$d" | wc -l)
    n_ours=$(wc -l <"$work/expected1.txt")
    if [ "$n_now" -eq $((n_before + n_ours)) ]; then ok "installed twice: $n_before files of others + $n_ours of libeventq"
    else fail "installed twice: $n_now files, want $n_before + $n_ours"; fi
    if run uninstall2 uninstall DESTDIR="$d" PREFIX=/usr/local; then
        listing "$d" >"$work/after2.txt"
        same_tree "uninstall leaves the other files and directories as they were" "$work/before2.txt" "$work/after2.txt"
    else fail "make uninstall failed"; fi
else fail "make install failed"; fi

echo "3. install-strip:"
d=$work/strip
mkdir -p "$d"
p=/usr/local
if run install3 install-strip DESTDIR="$d" PREFIX=$p; then
    exact_files "install-strip" "$d" "$work/expected1.txt"
    a=$d$p/lib/libeventq.a so=$d$p/lib/libeventq.so.$version
    left=$(readelf -S -W "$a" 2>/dev/null | grep -c '\.debug_info' || true)
    if [ "$left" -eq 0 ] && [ "${unstripped_a_debug:-0}" -gt 0 ]; then
        ok "libeventq.a: no .debug_info left (install's copy had $unstripped_a_debug)"
    else fail "libeventq.a: $left .debug_info section(s) left (install's copy had ${unstripped_a_debug:-?})"; fi
    # readelf, not nm: nm tries the LLVM plugin on the objects that carry
    # bitcode (.llvmbc) and lists no symbol for them.
    if readelf -s -W "$a" 2>/dev/null | reads -E ' FUNC +GLOBAL +DEFAULT +[0-9]+ eventq_chan_send$'; then
        ok "libeventq.a still defines eventq_chan_send"
    else fail "libeventq.a lost eventq_chan_send"; fi
    # shellcheck disable=SC2046
    if "$cc" -std=c11 -Wall -Werror -I"$d$p/include" tests/cmake/sendrecv.c -o "$work/sendrecv-stripped" \
            "$a" $(sed -n 's/^Libs.private:[[:space:]]*//p' "$d$p/lib/pkgconfig/eventq.pc") \
            >"$work/link3.log" 2>&1 && out=$("$work/sendrecv-stripped" 2>&1); then
        ok "a program linked with the stripped libeventq.a runs: $out"
    else fail "a program could not be linked with the stripped libeventq.a, or failed:"; cat "$work/link3.log" >&2; fi
    if readelf -S -W "$so" | reads -E '\] \.symtab '; then fail "the shared library still has .symtab"
    else ok "the shared library has no .symtab"; fi
    # The dynamic symbols, with their versions, are install's.
    nm -D --defined-only "$so" >"$work/dynsym3.txt" 2>&1 || true
    if reads -E ' T eventq_chan_send(@@.*)?$' "$work/dynsym3.txt" && cmp -s "$work/dynsym1.txt" "$work/dynsym3.txt"; then
        ok "the shared library exports what install's does ($(grep -c ' T ' "$work/dynsym3.txt") functions)"
    else fail "the shared library's dynamic symbols differ from install's:"; diff "$work/dynsym1.txt" "$work/dynsym3.txt" | head -5 >&2; fi
    if readelf -S -W "$so" | reads -E '\] \.gnu_debuglink '; then ok "the shared library keeps its .gnu_debuglink"
    else fail "the shared library lost its .gnu_debuglink"; fi
    if run uninstall3 uninstall DESTDIR="$d" PREFIX=$p; then
        listing "$d" >"$work/after3.txt"
        same_tree "uninstall leaves the DESTDIR empty" "$work/before1.txt" "$work/after3.txt"
    else fail "make uninstall failed"; fi
else fail "make install-strip failed"; fi

echo "4. other directories:"
d=$work/dirs
mkdir -p "$d"
p=/opt/eq
vars=(PREFIX=$p LIBDIR=$p/lib64 INCLUDEDIR=$p/include/eq MANDIR=$p/doc/man
      DEBUGDIR=/usr/lib/debug$p/lib64 CMAKEDIR=$p/share/cmake/eventq)
if run install4 install DESTDIR="$d" "${vars[@]}"; then
    expected $p $p/lib64 $p/include/eq $p/doc/man /usr/lib/debug$p/lib64 $p/share/cmake/eventq >"$work/expected4.txt"
    exact_files "install" "$d" "$work/expected4.txt"
    if run uninstall4 uninstall DESTDIR="$d" "${vars[@]}"; then
        listing "$d" >"$work/after4.txt"
        same_tree "uninstall leaves the DESTDIR empty" "$work/before1.txt" "$work/after4.txt"
    else fail "make uninstall failed"; fi
else fail "make install failed"; fi

finish "install/uninstall" "install, install-strip, uninstall"
