#!/usr/bin/env bash
# SPDX-License-Identifier: MIT OR Apache-2.0
# Checks an installed libeventq the way a user of the C library meets it:
#  - lib/libeventq.so.X.Y.Z is a regular file, libeventq.so.X and libeventq.so
#    are symlinks to it (via .so.X), libeventq.a and include/eventq.h exist and
#    the installed header is the committed one;
#  - the SONAME is libeventq.so.X;
#  - the dynamic symbol table exports at least one symbol and only eventq_*
#    ones, and every function the header declares is exported;
#  - pkg-config finds eventq.pc and gives exactly -I/-L/-l for this prefix
#    (paths resolved: the .pc files say prefix=${pcfiledir}/../..), the
#    version from Cargo.toml, and Libs.private for --static;
#  - the install is relocatable: a copy of it moved elsewhere, found
#    through its own lib/pkgconfig, gives flags inside the copy only, and a
#    program built with them loads the copy's library and runs;
#  - a C program built with pkg-config against the install sees
#    eventq_version() == EVENTQ_VERSION of the header, the header macros equal
#    the Cargo.toml version, and eventq_version_string() agrees.
#
# usage: scripts/check-install.sh PREFIX VERSION COMMITTED_HEADER WORKDIR
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
prefix=$1 version=$2 committed_header=$3 work=$4
cc=${CC:-cc}
pkg_config=${PKG_CONFIG:-pkg-config}
major=${version%%.*}
lib=$prefix/lib

need nm "apt-get install binutils"
need readelf "apt-get install binutils"
need "$cc" "install a C compiler (apt-get install gcc)"
need "$pkg_config" "apt-get install pkg-config"
mkdir -p "$work"

echo "installed files in $prefix:"
real=$lib/libeventq.so.$version
if [ -f "$real" ] && [ ! -L "$real" ]; then ok "lib/libeventq.so.$version is a file"
else fail "lib/libeventq.so.$version is missing or not a regular file"; fi
for link_target in "libeventq.so.$major:libeventq.so.$version" "libeventq.so:libeventq.so.$major"; do
    link=${link_target%%:*} want=${link_target#*:}
    if [ -L "$lib/$link" ] && [ "$(readlink "$lib/$link")" = "$want" ] && [ -e "$lib/$link" ]; then
        ok "lib/$link -> $want"
    else
        fail "lib/$link should be a symlink to $want (is: $(readlink "$lib/$link" 2>/dev/null || echo missing))"
    fi
done
if [ -f "$lib/libeventq.a" ]; then ok "lib/libeventq.a"; else fail "lib/libeventq.a is missing"; fi
if cmp -s "$prefix/include/eventq.h" "$committed_header"; then ok "include/eventq.h is $committed_header"
else fail "include/eventq.h is missing or differs from $committed_header"; fi
[ -f "$real" ] || { echo "error: no library to check further" >&2; exit 1; }

echo "shared library:"
soname=$(readelf -d "$real" | sed -n 's/.*(SONAME).*\[\(.*\)\].*/\1/p')
if [ "$soname" = "libeventq.so.$major" ]; then ok "SONAME $soname"
else fail "SONAME is '${soname:-none}', want libeventq.so.$major"; fi

# Symbols of type A are the version nodes themselves (EVENTQ_0.2), not code.
nm -D --defined-only "$real" | awk '$2 != "A" { print $NF }' | sed 's/@.*//' | sort -u >"$work/exported.txt"
count=$(wc -l <"$work/exported.txt")
if [ "$count" -gt 0 ]; then ok "$count dynamic symbols exported"
else fail "no dynamic symbols exported"; fi
foreign=$(grep -v '^eventq_' "$work/exported.txt" || true)
if [ -z "$foreign" ]; then ok "every exported symbol is eventq_*"
else fail "symbols outside eventq_* are exported:"; printf '        %s\n' $foreign >&2; fi
# Functions the header declares (comments gone after preprocessing).
header_functions "$prefix/include/eventq.h" >"$work/declared.txt"
missing=$(comm -23 "$work/declared.txt" "$work/exported.txt")
if [ -z "$missing" ]; then ok "all $(wc -l <"$work/declared.txt") functions of the header are exported"
else fail "declared in eventq.h but not exported:"; printf '        %s\n' $missing >&2; fi
undeclared=$(comm -13 "$work/declared.txt" "$work/exported.txt")
if [ -n "$undeclared" ]; then
    note "exported but not declared in eventq.h:" $undeclared
fi

# resolved FLAGS...: the flags with each -I/-L path resolved (.., symlinks).
resolved() {
    local f out=()
    for f in "$@"; do
        case $f in
            -I*|-L*) out+=("${f:0:2}$(realpath -m "${f:2}")") ;;
            *) out+=("$f") ;;
        esac
    done
    echo "${out[*]}"
}

echo "pkg-config:"
export PKG_CONFIG_PATH=$lib/pkgconfig
for pc in eventq eventq-static; do
    line=$(grep '^prefix=' "$lib/pkgconfig/$pc.pc" || true)
    if [ "$line" = 'prefix=${pcfiledir}/../..' ]; then ok "$pc.pc: $line (relocatable)"
    else fail "$pc.pc: '$line', want 'prefix=\${pcfiledir}/../..'"; fi
done
if flags=$("$pkg_config" --cflags --libs eventq); then
    # shellcheck disable=SC2086
    flags=$(resolved $flags)
    want="-I$(realpath -m "$prefix/include") -L$(realpath -m "$lib") -leventq"
    if [ "$flags" = "$want" ]; then ok "--cflags --libs: $flags"
    else fail "--cflags --libs gives '$flags', want '$want'"; fi
else
    fail "pkg-config --cflags --libs eventq failed (PKG_CONFIG_PATH=$PKG_CONFIG_PATH)"
fi
modversion=$("$pkg_config" --modversion eventq 2>/dev/null || true)
if [ "$modversion" = "$version" ]; then ok "--modversion $modversion"
else fail "--modversion gives '$modversion', want $version"; fi
static=$(echo $("$pkg_config" --static --libs eventq 2>/dev/null || true))
private=$(sed -n 's/^Libs.private:[[:space:]]*//p' "$lib/pkgconfig/eventq.pc")
absent=""
for flag in -leventq $private; do
    [[ " $static " == *" $flag "* ]] || absent="$absent $flag"
done
if [ -n "$private" ] && [ -z "$absent" ]; then ok "--static --libs: $static"
else fail "Libs.private is empty or --static --libs ('$static') lacks:$absent"; fi

echo "version, header against library:"
cat >"$work/version.c" <<'C'
#include <eventq.h>
#include <stdio.h>
#include <string.h>

#define STR_(x) #x
#define STR(x) STR_(x)

int main(void) {
    const char *header = STR(EVENTQ_VERSION_MAJOR) "." STR(EVENTQ_VERSION_MINOR) "."
                         STR(EVENTQ_VERSION_PATCH);
    unsigned lib = eventq_version();
    const char *lib_str = eventq_version_string();
    int bad = 0;
    if (lib != (unsigned)EVENTQ_VERSION) {
        fprintf(stderr, "eventq_version() = 0x%06x, header EVENTQ_VERSION = 0x%06x\n",
                lib, (unsigned)EVENTQ_VERSION);
        bad = 1;
    }
    if (strcmp(header, EXPECT_VERSION) != 0) {
        fprintf(stderr, "header macros say %s, Cargo.toml says %s\n", header, EXPECT_VERSION);
        bad = 1;
    }
    if (lib_str == NULL || strcmp(lib_str, EXPECT_VERSION) != 0) {
        fprintf(stderr, "eventq_version_string() = %s, Cargo.toml says %s\n",
                lib_str ? lib_str : "(null)", EXPECT_VERSION);
        bad = 1;
    }
    if (!bad)
        printf("library %s (0x%06x) = header %s = Cargo.toml %s\n", lib_str, lib, header,
               EXPECT_VERSION);
    return bad;
}
C
# shellcheck disable=SC2046
if "$cc" -std=c11 -D_GNU_SOURCE -Wall -Wextra -Werror -DEXPECT_VERSION="\"$version\"" \
        $("$pkg_config" --cflags eventq) "$work/version.c" -o "$work/version" \
        $("$pkg_config" --libs eventq) -Wl,-rpath,"$lib"; then
    if out=$("$work/version" 2>&1); then ok "$out"; else fail "$out"; fi
    # It must have loaded the installed library, through the soname symlink.
    loaded=$(LD_TRACE_LOADED_OBJECTS=1 "$work/version" | awk '/libeventq/ { print $3 }')
    if [ "$loaded" = "$lib/libeventq.so.$major" ]; then ok "a program linked with -leventq loads $loaded"
    else fail "a program linked with -leventq loads '${loaded:-nothing}', want $lib/libeventq.so.$major"; fi
else
    fail "a C program could not be built against the install with pkg-config"
fi

echo "a moved copy of the install:"
moved=$(realpath -m "$work/moved")
rm -rf "$moved" "$work/copy"
cp -a "$prefix" "$work/copy"
mkdir -p "$moved/somewhere"
mv "$work/copy" "$moved/somewhere/else"
mlib=$moved/somewhere/else/lib
if mflags=$(PKG_CONFIG_PATH=$mlib/pkgconfig "$pkg_config" --cflags --libs eventq); then
    # shellcheck disable=SC2086
    mres=$(resolved $mflags)
    if [[ "$mflags $mres" == *"$prefix/"* ]]; then fail "the moved copy's flags name the original install: $mflags"
    elif [ "$mres" = "-I$moved/somewhere/else/include -L$mlib -leventq" ]; then ok "flags inside the copy: $mflags"
    else fail "the moved copy gives '$mres', want -I/-L inside $moved/somewhere/else"; fi
    mlibdir=$(PKG_CONFIG_PATH=$mlib/pkgconfig "$pkg_config" --variable=libdir eventq)
    # shellcheck disable=SC2086
    if "$cc" -std=c11 -D_GNU_SOURCE -Wall -Wextra -Werror -DEXPECT_VERSION="\"$version\"" \
            "$work/version.c" -o "$work/version-moved" $mflags -Wl,-rpath,"$mlibdir"; then
        if out=$("$work/version-moved" 2>&1); then ok "built with the copy's flags, runs: $out"
        else fail "the program built against the copy failed: $out"; fi
        loaded=$(LD_TRACE_LOADED_OBJECTS=1 "$work/version-moved" | awk '/libeventq/ { print $3 }')
        if [ "$(realpath -m "$loaded")" = "$(realpath -m "$mlib/libeventq.so.$major")" ]; then
            ok "it loads the copy's $(realpath -m "$loaded" | sed "s|^$moved/||")"
        else fail "it loads '${loaded:-nothing}', want $mlib/libeventq.so.$major"; fi
    else
        fail "a C program could not be built with the moved copy's pkg-config flags"
    fi
else
    fail "pkg-config --cflags --libs eventq failed on the moved copy"
fi
rm -rf "$moved"

finish "installed-library" "installed library"
