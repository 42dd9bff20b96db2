#!/usr/bin/env bash
# SPDX-License-Identifier: MIT OR Apache-2.0
# The release check: every place that states libeventq's version agrees
# with the release's, X.Y.Z (the root Cargo.toml's [workspace.package] or
# [package] version):
#  - the version of every crate of the release (each Cargo.toml that git
#    tracks and that is published: publish = false crates, such as benches,
#    are not part of it), either X.Y.Z or inherited from the workspace, and
#    every version requirement of one of them on another; Cargo.lock;
#  - include/eventq.h's EVENTQ_VERSION_MAJOR, _MINOR, _PATCH;
#  - what the Makefile stamps into eventq.pc, eventq-static.pc and the
#    CMake package (`make print-version`), and that their templates take it
#    from there (@version@) rather than stating one;
#  - the Go binding's header check (bindings/go/eventq_go.h): the version
#    it needs is X.Y.0, and its messages name that version;
#  - the Python binding: pyproject.toml and the package's __version__;
#  - CHANGELOG.md's first entry is X.Y.Z (dated, for --tag);
#  - README.md's find_package line asks for X.Y.
# Without --tag it only checks, and prints the tags a release needs. With
# --tag, on a clean work tree whose checks all pass, it creates them at
# HEAD (annotated): vX.Y.Z for the library and crates, and
# bindings/go/vX.Y.Z, the tag the Go toolchain looks for when a program
# requires github.com/libeventq/libeventq/bindings/go at vX.Y.Z (a module
# in a subdirectory is tagged with its path). Push them with
# `git push origin vX.Y.Z bindings/go/vX.Y.Z`.
#
# usage: scripts/release.sh [--tag]   (MAKE)
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$(dirname "${BASH_SOURCE[0]}")/.."
tag=0
case ${1:-} in
    --tag) tag=1 ;;
    "") ;;
    *) echo "usage: scripts/release.sh [--tag]" >&2; exit 2 ;;
esac

# toml_get FILE TABLE KEY: the string value of KEY in [TABLE] (first one).
toml_get() {
    awk -v table="[$2]" -v key="$3" '
        /^\[/ { in_table = ($0 == table); next }
        in_table && $0 ~ "^" key "[ \t]*=" {
            line = $0; sub(/^[^=]*=[ \t]*/, "", line)
            if (line ~ /^"/) { sub(/^"/, "", line); sub(/".*/, "", line); print line }
            else print "{" line
            exit
        }' "$1"
}

root_version=$(toml_get Cargo.toml workspace.package version)
[ -n "$root_version" ] || root_version=$(toml_get Cargo.toml package version)
if ! [[ $root_version =~ ^([0-9]+)\.([0-9]+)\.([0-9]+)$ ]]; then
    echo "error: Cargo.toml states no X.Y.Z version (found '${root_version}')" >&2
    exit 1
fi
version=$root_version
major=${BASH_REMATCH[1]} minor=${BASH_REMATCH[2]} patch=${BASH_REMATCH[3]}
echo "release $version (Cargo.toml):"

echo "crates:"
crates=""
while IFS= read -r manifest; do
    if [ "$(toml_get "$manifest" package publish)" = "{false" ]; then continue; fi
    name=$(toml_get "$manifest" package name)
    [ -n "$name" ] || continue        # a virtual workspace manifest
    v=$(toml_get "$manifest" package version)
    v_ws=$(awk '/^\[/ { p = ($0 == "[package]"); next }
                p && /^version\.workspace[ \t]*=[ \t]*true/ { print "ws" }' "$manifest")
    if [ "$v" = "$version" ]; then ok "$manifest: $name $v"
    elif [ "$v_ws" = ws ] || [[ $v == "{"*workspace*true* ]]; then
        ok "$manifest: $name, version from the workspace"
    else fail "$manifest: $name is '${v:-unversioned}', want $version"; fi
    crates="$crates $name"
done < <(git ls-files -- 'Cargo.toml' '*/Cargo.toml' | sort)
# A release crate's requirement on another: name = { path = ..., version = "..." }.
while IFS= read -r manifest; do
    for name in $crates; do
        while IFS= read -r req; do
            [ -n "$req" ] || continue
            req=${req#[=^~]}
            if [ "$req" = "$version" ] || [ "$req" = "$major.$minor" ]; then
                ok "$manifest: its requirement on $name is $req"
            else fail "$manifest: requires $name version '$req', want $version"; fi
        done < <(sed -n "s/^$name[ \t]*=.*version[ \t]*=[ \t]*\"\([^\"]*\)\".*/\1/p" "$manifest")
    done
done < <(git ls-files -- 'Cargo.toml' '*/Cargo.toml')
for name in $crates; do
    v=$(awk -v n="$name" '$0 == "name = \"" n "\"" { getline; sub(/^version = "/, ""); sub(/"$/, ""); print; exit }' Cargo.lock 2>/dev/null || true)
    if [ -z "$v" ]; then note "Cargo.lock has no $name (built outside the workspace)"
    elif [ "$v" = "$version" ]; then ok "Cargo.lock: $name $v"
    else fail "Cargo.lock: $name is $v, want $version (run cargo build)"; fi
done

echo "C header and packaging:"
hdr=include/eventq.h
h=$(for part in MAJOR MINOR PATCH; do sed -n "s/^#define EVENTQ_VERSION_$part \([0-9]*\)$/\1/p" "$hdr"; done | paste -sd.)
if [ "$h" = "$version" ]; then ok "$hdr: EVENTQ_VERSION_* $h"
else fail "$hdr: EVENTQ_VERSION_* say '$h', want $version (run make header)"; fi
mk=$("${MAKE:-make}" --no-print-directory -s print-version 2>/dev/null || true)
if [ "$mk" = "$version" ]; then ok "make stamps $mk into the .pc files and the CMake package"
else fail "make print-version gives '$mk', want $version"; fi
for f in eventq.pc.in eventq-static.pc.in cmake/eventqConfigVersion.cmake.in; do
    if grep -q '^Version: @version@$\|"@version@"' "$f" && ! grep -qE '[0-9]+\.[0-9]+\.[0-9]+' "$f"; then
        ok "$f takes its version from make (@version@)"
    else fail "$f does not take its version from @version@, or states one"; fi
done

echo "Go binding:"
goh=bindings/go/eventq_go.h
needs=$(sed -n 's/^#define EQGO_NEEDS_VERSION \(0x[0-9A-Fa-f]*\).*/\1/p' "$goh")
want_needs=$(printf '0x%06x' $(((major << 16) | (minor << 8))))
if [ -n "$needs" ] && [ "$((needs))" = "$((want_needs))" ]; then ok "$goh: EQGO_NEEDS_VERSION $needs ($major.$minor.0)"
else fail "$goh: EQGO_NEEDS_VERSION is '${needs:-missing}', want $want_needs ($major.$minor.0)"; fi
stale=$(grep -o 'needs libeventq >= [0-9.]*' "$goh" | sort -u | grep -v ">= $major.$minor.0$" || true)
if [ -z "$stale" ]; then ok "$goh: its messages name $major.$minor.0"
else fail "$goh: messages name another version: $(echo $stale)"; fi

echo "Python binding:"
py=bindings/python
v=$(toml_get $py/pyproject.toml project version)
if [ "$v" = "$version" ]; then ok "$py/pyproject.toml: $v"; else fail "$py/pyproject.toml: '$v', want $version"; fi
v=$(sed -n 's/^__version__[ \t]*=[ \t]*"\([^"]*\)".*/\1/p' $py/eventq/__init__.py)
if [ "$v" = "$version" ]; then ok "$py/eventq/__init__.py: __version__ $v"
else fail "$py/eventq/__init__.py: __version__ is '${v:-not a literal}', want $version"; fi

echo "documents:"
top=$(grep -m1 '^## ' CHANGELOG.md || true)
if [[ $top == "## $version "* || $top == "## $version" ]]; then
    if [ "$tag" = 1 ] && [[ $top == *unreleased* ]]; then fail "CHANGELOG.md: '$top': give it the release date before tagging"
    else ok "CHANGELOG.md's first entry: ${top#\#\# }"; fi
else fail "CHANGELOG.md's first entry is '${top#\#\# }', want $version"; fi
fp=$(grep -o 'find_package(eventq [0-9.]*' README.md | sort -u)
if [ "$fp" = "find_package(eventq $major.$minor" ]; then ok "README.md: $fp REQUIRED)"
else fail "README.md: '$(echo $fp)', want find_package(eventq $major.$minor"; fi

tags=("v$version" "bindings/go/v$version")
if [ "$failures" -ne 0 ]; then
    finish "release" "release"
fi
if [ "$tag" = 0 ]; then
    echo "would tag HEAD ($(git rev-parse --short HEAD)): ${tags[*]} (scripts/release.sh --tag)"
    finish "release" "release $version"
    exit 0
fi
if [ -n "$(git status --porcelain --untracked-files=no)" ]; then
    echo "error: the work tree has changes: commit them before tagging" >&2
    exit 1
fi
for t in "${tags[@]}"; do
    if git rev-parse -q --verify "refs/tags/$t" >/dev/null; then
        echo "error: tag $t exists already" >&2
        exit 1
    fi
done
git tag -a "v$version" -m "libeventq $version" HEAD
git tag -a "bindings/go/v$version" -m "libeventq Go binding $version" HEAD
echo "tagged ${tags[*]} at $(git rev-parse --short HEAD)"
echo "push them: git push origin ${tags[*]}"
