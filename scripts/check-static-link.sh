#!/usr/bin/env bash
# SPDX-License-Identifier: MIT OR Apache-2.0
# Checks the README's link lines against an install, as a reader would run
# them:
#  - the "## Linking" section of README.md has a `cc app.c ...` line with
#    eventq-static and one without;
#  - each, run with app.c replaced by the README's C example and
#    PKG_CONFIG_PATH set to the install, builds a program that runs;
#  - the shared one needs libeventq.so.MAJOR; the static one has no NEEDED
#    libeventq at all and runs where no libeventq can be found;
#  - eventq-static.pc gives exactly -L<libdir> -l:libeventq.a and the
#    Libs.private of eventq.pc, the same --cflags and version as eventq.pc.
# It also shows (as a note, not a check) what `pkg-config --static --libs
# eventq` links, which the README says is the shared library.
#
# usage: scripts/check-static-link.sh PREFIX VERSION README APP_C WORKDIR
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
prefix=$(realpath -m "$1") version=$2 readme=$3 app_c=$(realpath "$4") work=$5
cc=${CC:-cc}
pkg_config=${PKG_CONFIG:-pkg-config}
major=${version%%.*}
lib=$prefix/lib
need "$cc" "install a C compiler (apt-get install gcc)"
need "$pkg_config" "apt-get install pkg-config"
need readelf "apt-get install binutils"
rm -rf "$work"
mkdir -p "$work"
export PKG_CONFIG_PATH=$lib/pkgconfig

echo "eventq-static.pc:"
private=$(sed -n 's/^Libs.private:[[:space:]]*//p' "$lib/pkgconfig/eventq.pc")
got=$(echo $("$pkg_config" --libs eventq-static 2>&1 || true))
want=$(echo "-L$lib -l:libeventq.a" $private)
if [ "$got" = "$want" ]; then ok "--libs: $got"; else fail "--libs gives '$got', want '$want'"; fi
got=$(echo $("$pkg_config" --static --libs eventq-static 2>&1 || true))
if [ "$got" = "$want" ]; then ok "--static --libs: the same"; else fail "--static --libs gives '$got', want '$want'"; fi
if [ "$("$pkg_config" --cflags eventq-static 2>&1)" = "$("$pkg_config" --cflags eventq)" ]; then
    ok "--cflags as eventq.pc's"
else fail "--cflags differ from eventq.pc's"; fi
got=$("$pkg_config" --modversion eventq-static 2>&1 || true)
if [ "$got" = "$version" ]; then ok "--modversion $got"; else fail "--modversion gives '$got', want $version"; fi

echo "the link lines of $readme:"
awk '/^## / { sec = $0 } sec == "## Linking" && /^```/ { n++; next } sec == "## Linking" && n == 1' "$readme" \
    | grep -E '^cc app\.c ' >"$work/lines.txt" || true
static_line=$(grep -m1 'eventq-static' "$work/lines.txt" || true)
shared_line=$(grep -m1 -v 'eventq-static' "$work/lines.txt" || true)
[ -n "$static_line" ] || fail "no 'cc app.c ... eventq-static ...' line in the Linking section"
[ -n "$shared_line" ] || fail "no shared 'cc app.c ...' line in the Linking section"

# link NAME LINE: runs the README line on the C example; prints the program.
link() {
    local out=$work/$1 cmd
    cmd=${2%%#*}                        # without the comment
    cmd=${cmd/#cc /\"\$CC\" }
    cmd=${cmd/app.c/\"\$APP_C\" -o \"\$OUT\"}
    if CC=$cc APP_C=$app_c OUT=$out sh -c "$cmd" >"$out.log" 2>&1; then echo "$out"
    else cat "$out.log" >&2; return 1; fi
}
if [ -n "$shared_line" ]; then
    echo "  run   $shared_line"
    if bin=$(link shared "$shared_line"); then
        if readelf -d "$bin" | reads "NEEDED.*\[libeventq\.so\.$major\]"; then ok "shared: needs libeventq.so.$major"
        else fail "shared: the program does not need libeventq.so.$major"; fi
        if out=$(LD_LIBRARY_PATH=$lib "$bin" 2>&1); then ok "shared: runs ($(wc -l <<<"$out") lines of output)"
        else fail "shared: the program failed: $out"; fi
    else fail "shared: the README line did not build the example"; fi
fi
if [ -n "$static_line" ]; then
    echo "  run   $static_line"
    if bin=$(link static "$static_line"); then
        if readelf -d "$bin" | reads 'NEEDED.*libeventq'; then
            fail "static: the program needs $(readelf -d "$bin" | grep -o 'libeventq[^]]*' | head -1)"
        else ok "static: no NEEDED libeventq; needs only$(readelf -d "$bin" | sed -n 's/.*NEEDED.*\[\(.*\)\]/ \1/p' | tr -d '\n')"; fi
        if out=$(env -u LD_LIBRARY_PATH "$bin" 2>&1); then ok "static: runs without libeventq.so ($(wc -l <<<"$out") lines of output)"
        else fail "static: the program failed: $out"; fi
    else fail "static: the README line did not build the example"; fi
fi

# What the old line does, for the record.
if "$cc" "$app_c" -o "$work/static-eventq" $("$pkg_config" --static --cflags --libs eventq) >/dev/null 2>&1; then
    if readelf -d "$work/static-eventq" | reads 'NEEDED.*libeventq'; then
        note "pkg-config --static --libs eventq links the shared library here, as the README says"
    else
        note "pkg-config --static --libs eventq links libeventq.a here: the README's remark on it is out of date"
    fi
fi

finish "static link" "static link"
