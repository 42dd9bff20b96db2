#!/usr/bin/env bash
# SPDX-License-Identifier: MIT OR Apache-2.0
# Checks the CMake package of an install as a CMake user meets it:
#  - tests/cmake (find_package(eventq MAJOR.MINOR REQUIRED)) configured
#    with CMAKE_PREFIX_PATH=PREFIX finds this install, builds one program against
#    eventq::eventq and one against eventq::eventq-static; both send and
#    receive a message; the first needs libeventq.so.MAJOR (readelf -d), the
#    second has no NEEDED libeventq at all and runs without the library;
#  - the same against a copy of the install moved elsewhere: every path the
#    package gives is inside the copy (the package is relocatable), and the
#    shared program loads the copy's library;
#  - version requests (tests/cmake/probe): while M is 0, SameMinorVersion
#    (0.x minors are releases of their own), from 1.0 SameMajorVersion, as
#    the soname promises. For 0.m.p: 0.m, 0.m.0, 0.m.p, 0.m.p EXACT,
#    0.m...<0.m+1 and 0.m...<1 are accepted; 0.m-1 (the previous minor,
#    whose programs 0.m does not serve), 0, 0.0, 0.m+1, 1, 1.0, 0.m-1...<1,
#    0.m.p+1 and 0.m.p+1 EXACT refused (for the version, not another
#    error); so is a project whose pointer size differs from the library's;
#  - an install staged in a DESTDIR with other directories (LIBDIR
#    lib/x86_64-linux-gnu, INCLUDEDIR include/eventq, CMAKEDIR under share)
#    gives paths that exist inside that staging tree.
#
# usage: scripts/check-cmake.sh PREFIX VERSION WORKDIR
#   (MAKE: the make to run the staged install with; CC, CMAKE)
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
prefix=$(realpath -m "$1") version=$2 work=$(realpath -m "$3")
cmake=${CMAKE:-cmake}
cc=${CC:-cc}
make_cmd=${MAKE:-make}
major=${version%%.*}
IFS=. read -r _ minor patch <<<"$version"
# What a user of this release asks for.
request=$major.$minor
src=$(realpath tests/cmake)
need "$cmake" "apt-get install cmake"
need "$cc" "install a C compiler (apt-get install gcc)"
need readelf "apt-get install binutils"
rm -rf "$work"
mkdir -p "$work"
# found FILE KEY: a value tests/cmake wrote to found.txt.
found() { sed -n "s|^$2=||p" "$1"; }

# build NAME PREFIX_PATH: configures and builds tests/cmake; 1 on failure.
build() {
    local dir=$work/$1
    if ! "$cmake" -S "$src" -B "$dir" -DCMAKE_PREFIX_PATH="$2" -DCMAKE_C_COMPILER="$cc" \
            -DEVENTQ_REQUEST="$request" \
            -DCMAKE_C_FLAGS="-Wall -Wextra -Werror" -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF \
            >"$dir.log" 2>&1 ||
       ! "$cmake" --build "$dir" >>"$dir.log" 2>&1; then
        cat "$dir.log" >&2
        return 1
    fi
}

# check_build NAME PREFIX: what the build against PREFIX found, linked and ran.
check_build() {
    local name=$1 pfx=$2 dir=$work/$1
    local f=$dir/found.txt
    [ "$(found "$f" dir)" = "$pfx/lib/cmake/eventq" ] && ok "$name: eventq_DIR $(found "$f" dir)" ||
        fail "$name: eventq_DIR is '$(found "$f" dir)', want $pfx/lib/cmake/eventq"
    [ "$(found "$f" version)" = "$version" ] && ok "$name: eventq_VERSION $version" ||
        fail "$name: eventq_VERSION is '$(found "$f" version)', want $version"
    for want in "shared=$pfx/lib/libeventq.so.$version" "static=$pfx/lib/libeventq.a" "include=$pfx/include"; do
        [ "$(found "$f" "${want%%=*}")" = "${want#*=}" ] ||
            fail "$name: ${want%%=*} is '$(found "$f" "${want%%=*}")', want ${want#*=}"
    done
    ok "$name: eventq::eventq, eventq::eventq-static and the include directory are in $pfx"

    local shared=$dir/sendrecv_shared static=$dir/sendrecv_static out
    if readelf -d "$shared" | reads "NEEDED.*\[libeventq\.so\.$major\]"; then
        ok "$name: eventq::eventq program needs libeventq.so.$major"
    else fail "$name: the eventq::eventq program does not need libeventq.so.$major"; fi
    if readelf -d "$static" | reads 'NEEDED.*libeventq'; then
        fail "$name: the eventq::eventq-static program needs $(readelf -d "$static" | grep -o 'libeventq[^]]*')"
    else ok "$name: eventq::eventq-static program has no NEEDED libeventq"; fi
    if out=$("$shared" 2>&1); then ok "$name: shared: $out"; else fail "$name: shared program: $out"; fi
    loaded=$(LD_TRACE_LOADED_OBJECTS=1 "$shared" | awk '/libeventq/ { print $3 }')
    if [ "$loaded" = "$pfx/lib/libeventq.so.$major" ]; then ok "$name: shared program loads $loaded"
    else fail "$name: the shared program loads '${loaded:-nothing}', want $pfx/lib/libeventq.so.$major"; fi
    # The static program must not need the library at all: run it where
    # no libeventq can be found.
    if out=$(env -u LD_LIBRARY_PATH "$static" 2>&1); then ok "$name: static: $out"
    else fail "$name: static program: $out"; fi
}

echo "tests/cmake against $prefix:"
if build installed "$prefix"; then check_build installed "$prefix"
else fail "tests/cmake did not configure or build against $prefix"; fi

echo "tests/cmake against a moved copy of the install:"
moved=$work/moved/somewhere/else
mkdir -p "$moved"
cp -a "$prefix/." "$moved/"
if build moved "$moved"; then check_build moved "$moved"
else fail "tests/cmake did not configure or build against the moved copy $moved"; fi

# probe NAME ARGS PREFIX [cmake args...]: find_package(eventq ARGS) in
# tests/cmake/probe; 0 if found.
probe() {
    local name=$1 args=$2 pfx=$3
    shift 3
    "$cmake" -S "$src/probe" -B "$work/probe-$name" -DCMAKE_PREFIX_PATH="$pfx" \
        -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF "-DEVENTQ_FIND_ARGS=$args" "$@" >"$work/probe-$name.log" 2>&1
}
# CMake's words when it found this package but its version file said no.
refused_for_version() {
    local text
    text=$(tr -s ' \n' '  ' <"$1")
    grep -qE '(compatible with|exactly matches) requested version' <<<"$text" &&
        grep -qF "$prefix/lib/cmake/eventq/eventqConfig.cmake, version: $version" <<<"$text"
}
n=0
if [ "$major" = 0 ]; then
    echo "version requests against $version (SameMinorVersion while the major version is 0):"
    accepted=("$major.$minor" "$major.$minor.0" "$version" "$version;EXACT" "$major.$minor...<$major.$((minor + 1))"
              "$major.$minor...<1")
    refused=("$major.$((minor - 1))" "0" "0.0" "$major.$((minor + 1))" "1" "1.0" "$major.$((minor - 1))...<1"
             "$major.$minor.$((patch + 1))" "$major.$minor.$((patch + 1));EXACT")
else
    echo "version requests against $version (SameMajorVersion):"
    next=$((major + 1))
    accepted=("$major.$minor" "$major" "$major.0" "$version;EXACT" "$major.$minor...<$next" "$version")
    refused=("$major.$((minor + 1))" "$next" "$next.0" "$major.$((minor + 1))...<$next"
             "$major.$minor.$((patch + 1));EXACT")
fi
for request_args in "${accepted[@]}"; do
    n=$((n + 1))
    if probe "ok$n" "$request_args" "$prefix"; then ok "find_package(eventq ${request_args//;/ }) finds it"
    else fail "find_package(eventq ${request_args//;/ }) refused:"; tail -5 "$work/probe-ok$n.log" >&2; fi
done
n=0
for request_args in "${refused[@]}"; do
    n=$((n + 1))
    if probe "no$n" "$request_args" "$prefix"; then fail "find_package(eventq ${request_args//;/ }) accepted $version"
    elif refused_for_version "$work/probe-no$n.log"; then ok "find_package(eventq ${request_args//;/ }) refuses it"
    else fail "find_package(eventq ${request_args//;/ }) failed, but not for the version:"; tail -5 "$work/probe-no$n.log" >&2; fi
done
other=$(( $(od -An -tu1 -j4 -N1 "$prefix/lib/libeventq.so.$version") == 2 ? 4 : 8 ))
if probe ptr "$request" "$prefix" -DCMAKE_SIZEOF_VOID_P="$other"; then
    fail "a project with $other-byte pointers accepted the library"
elif refused_for_version "$work/probe-ptr.log" && grep -q -- "-bit)" "$work/probe-ptr.log"; then
    ok "a project with $other-byte pointers refuses it"
else fail "a project with $other-byte pointers failed, but not for the pointer size:"; tail -5 "$work/probe-ptr.log" >&2; fi

echo "a staged install with other directories:"
stage=$work/stage
sp=/opt/eventq
if "$make_cmd" --no-print-directory install DESTDIR="$stage" PREFIX=$sp \
        LIBDIR=$sp/lib/x86_64-linux-gnu INCLUDEDIR=$sp/include/eventq \
        CMAKEDIR=$sp/share/cmake/eventq >"$work/stage.log" 2>&1; then
    if probe stage "$request" "$stage$sp"; then
        f=$work/probe-stage/found.txt
        bad=""
        [ "$(found "$f" dir)" = "$stage$sp/share/cmake/eventq" ] || bad+=" dir=$(found "$f" dir)"
        [ "$(found "$f" shared)" = "$stage$sp/lib/x86_64-linux-gnu/libeventq.so.$version" ] || bad+=" shared=$(found "$f" shared)"
        [ "$(found "$f" static)" = "$stage$sp/lib/x86_64-linux-gnu/libeventq.a" ] || bad+=" static=$(found "$f" static)"
        [ "$(found "$f" include)" = "$stage$sp/include/eventq" ] || bad+=" include=$(found "$f" include)"
        if [ -z "$bad" ]; then ok "paths inside the staging tree: $(found "$f" shared)"
        else fail "the staged package points elsewhere:$bad"; fi
        libs=$(found "$f" libs)
        want=$(sed -n 's/^Libs.private:[[:space:]]*//p' "$stage$sp/lib/x86_64-linux-gnu/pkgconfig/eventq.pc" |
               tr -s ' ' '\n' | sed -n 's/^-l//p' | paste -sd';')
        if [ -n "$libs" ] && [ "$libs" = "$want" ]; then ok "eventq::eventq-static links $libs (Libs.private of eventq.pc)"
        else fail "eventq::eventq-static INTERFACE_LINK_LIBRARIES '$libs', want '$want' (Libs.private of eventq.pc)"; fi
    else
        fail "find_package(eventq $request) failed on the staged install:"; tail -5 "$work/probe-stage.log" >&2
    fi
else
    cat "$work/stage.log" >&2
    fail "make install into $stage failed"
fi

finish "CMake package" "CMake package"
