#!/usr/bin/env bash
# SPDX-License-Identifier: MIT OR Apache-2.0
# Checks the README's link lines against an install, as a reader would run
# them:
#  - the "## Linking" section of README.md has a `cc app.c ...` line with
#    eventq-static, one without, and a fully static `cc -static app.c ...`;
#  - each, run with app.c replaced by the README's C example and
#    PKG_CONFIG_PATH set to the install, builds a program that runs;
#  - the shared one needs libeventq.so.MAJOR; the static one has no NEEDED
#    libeventq at all and runs where no libeventq can be found; the fully
#    static one has no dynamic section at all (libc, the unwinder and all:
#    the driver brings libgcc_eh, as no -lgcc_s is asked for) and runs;
#  - eventq-static.pc gives exactly -L<libdir> -l:libeventq.a and the
#    Libs.private of eventq.pc, the same --cflags and version as eventq.pc;
#  - the installed libeventq.a defines no global symbol but eventq_*, and
#    a C program linking it beside another Rust static library
#    (tests/static-neighbour, built here with cargo: it has its own std)
#    links and runs. (With cargo's own archive that link fails on the
#    duplicate std symbols: shown as a note when ORIGINAL_A is given.)
# It also shows (as a note, not a check) what `pkg-config --static --libs
# eventq` links, which the README says is the shared library.
#
# usage: scripts/check-static-link.sh PREFIX VERSION README APP_C WORKDIR
#   (CC, PKG_CONFIG, CARGO; ORIGINAL_A: cargo's libeventq.a, for the note)
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

# resolved FLAGS...: the flags with each -L path resolved (the .pc files
# say prefix=${pcfiledir}/../..).
resolved() {
    local f out=()
    for f in "$@"; do
        case $f in -L*) out+=("-L$(realpath -m "${f:2}")") ;; *) out+=("$f") ;; esac
    done
    echo "${out[*]}"
}

echo "eventq-static.pc:"
private=$(sed -n 's/^Libs.private:[[:space:]]*//p' "$lib/pkgconfig/eventq.pc")
# shellcheck disable=SC2046
got=$(resolved $("$pkg_config" --libs eventq-static 2>&1 || true))
want=$(echo "-L$lib -l:libeventq.a" $private)
if [ "$got" = "$want" ]; then ok "--libs: $got"; else fail "--libs gives '$got', want '$want'"; fi
# shellcheck disable=SC2046
got=$(resolved $("$pkg_config" --static --libs eventq-static 2>&1 || true))
if [ "$got" = "$want" ]; then ok "--static --libs: the same"; else fail "--static --libs gives '$got', want '$want'"; fi
if [ "$("$pkg_config" --cflags eventq-static 2>&1)" = "$("$pkg_config" --cflags eventq)" ]; then
    ok "--cflags as eventq.pc's"
else fail "--cflags differ from eventq.pc's"; fi
got=$("$pkg_config" --modversion eventq-static 2>&1 || true)
if [ "$got" = "$version" ]; then ok "--modversion $got"; else fail "--modversion gives '$got', want $version"; fi

echo "the link lines of $readme:"
awk '/^## / { sec = $0 } sec == "## Linking" && /^```/ { n++; next } sec == "## Linking" && n == 1' "$readme" \
    | grep -E '^cc (-static )?app\.c ' >"$work/lines.txt" || true
static_line=$(grep '^cc app\.c' "$work/lines.txt" | grep -m1 'eventq-static' || true)
shared_line=$(grep '^cc app\.c' "$work/lines.txt" | grep -m1 -v 'eventq-static' || true)
full_line=$(grep -m1 '^cc -static app\.c.*eventq-static' "$work/lines.txt" || true)
[ -n "$static_line" ] || fail "no 'cc app.c ... eventq-static ...' line in the Linking section"
[ -n "$shared_line" ] || fail "no shared 'cc app.c ...' line in the Linking section"
[ -n "$full_line" ] || fail "no fully static 'cc -static app.c ... eventq-static ...' line in the Linking section"

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

if [ -n "$full_line" ]; then
    echo "  run   $full_line"
    if bin=$(link full "$full_line"); then
        if readelf -d "$bin" 2>&1 | reads 'no dynamic section'; then ok "fully static: no dynamic section"
        else fail "fully static: the program has a dynamic section: $(readelf -d "$bin" | sed -n 's/.*NEEDED.*\[\(.*\)\]/\1/p' | tr '\n' ' ')"; fi
        if out=$(env -i "$bin" 2>&1); then ok "fully static: runs ($(wc -l <<<"$out") lines of output)"
        else fail "fully static: the program failed: $out"; fi
    else fail "fully static: the README line did not build the example"; fi
fi

echo "libeventq.a's global symbols:"
foreign=$(nm -g --defined-only "$lib/libeventq.a" | awk 'NF == 3 { print $3 }' | grep -v '^eventq_' || true)
count=$(nm -g --defined-only "$lib/libeventq.a" | awk 'NF == 3' | wc -l)
if [ "$count" -gt 0 ] && [ -z "$foreign" ]; then ok "$count defined global symbols, all eventq_*"
else fail "libeventq.a defines $(wc -w <<<"$foreign") global symbols outside eventq_*:$(head -c 400 <<<" $foreign")"; fi

echo "beside another Rust static library:"
cargo=${CARGO:-cargo}
neighbour=$(realpath tests/static-neighbour)
if ! command -v "$cargo" >/dev/null 2>&1; then
    fail "$cargo is missing: the neighbour static library cannot be built"
elif CARGO_TARGET_DIR=$work/neighbour-target "$cargo" build -q --release --offline \
        --manifest-path "$neighbour/Cargo.toml" >"$work/neighbour-build.log" 2>&1; then
    nlib=$work/neighbour-target/release/libneighbour.a
    # shellcheck disable=SC2046
    if "$cc" -std=c11 -Wall -Wextra -Werror $("$pkg_config" --cflags eventq-static) "$neighbour/neighbour.c" \
            -o "$work/neighbour" "$nlib" $("$pkg_config" --libs eventq-static) >"$work/neighbour.log" 2>&1; then
        ok "a C program links libeventq.a and $(basename "$nlib") (each with its own std)"
        if out=$("$work/neighbour" 2>&1); then ok "and runs: $out"; else fail "the program failed: $out"; fi
    else
        fail "libeventq.a does not link beside $(basename "$nlib"):"; head -5 "$work/neighbour.log" >&2
    fi
    if [ -n "${ORIGINAL_A:-}" ] && [ -f "$ORIGINAL_A" ]; then
        # shellcheck disable=SC2046
        if "$cc" "$neighbour/neighbour.c" $("$pkg_config" --cflags eventq-static) -o "$work/neighbour-orig" "$nlib" \
                "$ORIGINAL_A" $(sed -n 's/^Libs.private:[[:space:]]*//p' "$lib/pkgconfig/eventq.pc") \
                >"$work/neighbour-orig.log" 2>&1; then
            note "cargo's own archive links beside it too here (this toolchain's objects did not collide)"
        else
            note "cargo's own archive does not (what the local symbols fix): $(grep -c 'multiple definition' "$work/neighbour-orig.log") multiple definitions, e.g. $(grep -o "multiple definition of [^;]*" "$work/neighbour-orig.log" | head -1)"
        fi
    fi
else
    cat "$work/neighbour-build.log" >&2
    fail "cargo could not build tests/static-neighbour"
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
