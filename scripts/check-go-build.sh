#!/usr/bin/env bash
# SPDX-License-Identifier: MIT OR Apache-2.0
# The Go binding's builds that must fail, and how (stages go and go-unit):
#  - without cgo: `CGO_ENABLED=0 go build ./...` fails, and says that the
#    binding needs cgo and libeventq (cgo_required.go), not just
#    "undefined: Chan";
#  - against an older header: the installed eventq.h with its version
#    macros set to 0.2, found through a copy of eventq.pc whose includedir
#    points at it, stops `go build .` at the #error of eventq_go.h, which
#    names the version found and the version needed; with -tags static too
#    when the module has such files (link_static.go).
#
# usage: scripts/check-go-build.sh GO_DIR PREFIX WORKDIR [static]
#   (GO, and the environment of the go stages: CC, CGO_LDFLAGS, ...)
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
go_dir=$1 prefix=$(realpath -m "$2") work=$(realpath -m "$3")
static=${4:-}
go=${GO:-go}
need "$go" "install Go to check $go_dir"

# 1. No cgo.
if out=$(cd "$go_dir" && CGO_ENABLED=0 "$go" build ./... 2>&1); then
    fail "CGO_ENABLED=0 go build ./... succeeded; it must fail, naming cgo"
elif printf '%s\n' "$out" | reads -F 'the Go binding needs cgo (CGO_ENABLED=1'; then
    ok "CGO_ENABLED=0: the build fails saying the binding needs cgo and libeventq"
else
    fail "CGO_ENABLED=0: the build failed without saying that it needs cgo:"
    printf '%s\n' "$out" | sed 's/^/        /' >&2
fi

# 2. A header of version 0.2.
rm -rf "$work" && mkdir -p "$work/include" "$work/pkgconfig"
sed -E -e 's/^#define EVENTQ_VERSION_MAJOR .*/#define EVENTQ_VERSION_MAJOR 0/' \
    -e 's/^#define EVENTQ_VERSION_MINOR .*/#define EVENTQ_VERSION_MINOR 2/' \
    "$prefix/include/eventq.h" >"$work/include/eventq.h"
sed -e "s|^includedir=.*|includedir=$work/include|" \
    "$prefix/lib/pkgconfig/eventq.pc" >"$work/pkgconfig/eventq.pc"
if ! reads -x '#define EVENTQ_VERSION_MINOR 2' "$work/include/eventq.h" ||
   ! reads -Fx "includedir=$work/include" "$work/pkgconfig/eventq.pc"; then
    fail "could not make the 0.2 header and its eventq.pc in $work"
    finish "Go build" "check-go-build"
fi
# The build cache keys a cgo package on its flags, not on what pkg-config
# prints nor on the headers outside the package: without a flag of its own
# this build would reuse the package built against the real header.
for tags in "" ${static:+static}; do
    what="go build${tags:+ -tags $tags} against an eventq.h of 0.2"
    if out=$(cd "$go_dir" && PKG_CONFIG_PATH="$work/pkgconfig" \
             CGO_CPPFLAGS="${CGO_CPPFLAGS:-} -DEQGO_CHECK_OLD_HEADER" \
             "$go" build ${tags:+-tags "$tags"} . 2>&1); then
        fail "$what succeeded; it must stop at eventq_go.h's #error"
    elif printf '%s\n' "$out" | reads -E '#error "eventq Go binding: found eventq\.h 0\.2, needs libeventq >= [0-9]'; then
        ok "$what: $(printf '%s\n' "$out" | grep -oE 'found eventq\.h 0\.2, needs libeventq >= [0-9.]+' | head -1)"
    else
        fail "$what failed, but not at eventq_go.h's #error:"
        printf '%s\n' "$out" | sed 's/^/        /' >&2
    fi
done
finish "Go build" "check-go-build"
