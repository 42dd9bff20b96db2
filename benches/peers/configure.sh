#!/bin/sh
# SPDX-License-Identifier: MIT OR Apache-2.0
# Finds the peer libraries of benches/peers (libuv, ZeroMQ, nng, GLib) with
# pkg-config and writes the compiler and linker flags for the ones found to
# DIR/cflags and DIR/libs (each peer's source is compiled in only under its
# PEERS_HAVE_* define). A file is rewritten only when its content changes,
# so make relinks only when a library appears or goes.
#
# Debian's libnng-dev ships no nng.pc (only CMake files): without the
# pkg-config module, nng is taken if <nng/nng.h> compiles and -lnng links.
# A library not found is no error: the bench names it, with its apt-get
# line, and leaves its rows out.
#
#   CC=cc PKG_CONFIG=pkg-config benches/peers/configure.sh DIR
set -eu
dir=${1:?usage: configure.sh DIR}
CC=${CC:-cc}
PKG_CONFIG=${PKG_CONFIG:-pkg-config}
mkdir -p "$dir"
cflags=
libs=

# peer DEFINE MODULE NAME APT
peer() {
    if "$PKG_CONFIG" --exists "$2" 2>/dev/null; then
        cflags="$cflags -D$1 $("$PKG_CONFIG" --cflags "$2")"
        libs="$libs $("$PKG_CONFIG" --libs "$2")"
        echo "bench-peers: $3 $("$PKG_CONFIG" --modversion "$2") (pkg-config $2)"
        return 0
    fi
    return 1
}
missing() {
    echo "bench-peers: $1 not found (pkg-config module $2): its rows are left out; apt-get install $3"
}

peer PEERS_HAVE_UV libuv libuv libuv1-dev || missing libuv libuv libuv1-dev
peer PEERS_HAVE_ZMQ libzmq ZeroMQ libzmq3-dev || missing ZeroMQ libzmq libzmq3-dev
peer PEERS_HAVE_GLIB glib-2.0 GLib libglib2.0-dev || missing GLib glib-2.0 libglib2.0-dev
if ! peer PEERS_HAVE_NNG nng nng libnng-dev; then
    probe=$dir/nng-probe
    printf '#include <nng/nng.h>\n#include <nng/protocol/pipeline0/pull.h>\nint main(void) { nng_socket s; return nng_pull0_open(&s) == 0 ? 0 : 1; }\n' \
        > "$probe.c"
    if $CC "$probe.c" -o "$probe" -lnng >/dev/null 2>&1; then
        cflags="$cflags -DPEERS_HAVE_NNG -DPEERS_NNG_NO_PC"
        libs="$libs -lnng"
        echo "bench-peers: nng (no pkg-config module nng: <nng/nng.h> and -lnng found by a compile probe)"
    else
        missing nng nng libnng-dev
    fi
    rm -f "$probe" "$probe.c"
fi

update() {
    printf '%s\n' "$2" > "$1.tmp"
    if cmp -s "$1.tmp" "$1"; then rm -f "$1.tmp"; else mv -f "$1.tmp" "$1"; fi
}
update "$dir/cflags" "${cflags# }"
update "$dir/libs" "${libs# }"
