#!/usr/bin/env bash
# SPDX-License-Identifier: MIT OR Apache-2.0
# Checks the licence files: the crate is "MIT OR Apache-2.0" (Cargo.toml), so
#  - LICENSE-MIT holds the MIT licence, word for word, under the copyright
#    line "Copyright (c) The libeventq developers";
#  - LICENSE-APACHE is the Apache License 2.0 text as the ASF publishes it;
#  - the Go module, published on its own, carries identical copies.
# The licence bodies are compared by SHA-256 (of the MIT text with its
# whitespace collapsed, from "Permission is hereby granted" on; of the whole
# Apache file), so an edited or truncated text fails.
#
# usage: scripts/check-licenses.sh GO_MODULE_DIR
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
go_dir=$1
need sha256sum "apt-get install coreutils"

mit_body_sha=fe2a9817987f862eaced948f0468c7f51d2fedfc48c5c505b246a49a3870e9a5
apache_sha=cfc7749b96f63bd31c3c42b5c471bf756814053e847c10f3eb003417bc523d30
copyright="Copyright (c) The libeventq developers"

license=$(awk -F'"' '/^\[/ { pkg = ($0 == "[package]") } pkg && /^license[ \t]*=/ { print $2; exit }' Cargo.toml)
if [ "$license" = "MIT OR Apache-2.0" ]; then ok "Cargo.toml: license = \"$license\""
else fail "Cargo.toml's license is '$license'; these checks are for \"MIT OR Apache-2.0\""; fi

if [ -f LICENSE-MIT ]; then
    body=$(sed -n '/^Permission is hereby granted/,$p' LICENSE-MIT | tr -s ' \n' '  ' | sed 's/ *$//' | sha256sum)
    if [ "${body%% *}" = "$mit_body_sha" ]; then ok "LICENSE-MIT: the MIT licence text"
    else fail "LICENSE-MIT: the text from 'Permission is hereby granted' on is not the MIT licence"; fi
    lines=$(grep -c '^Copyright' LICENSE-MIT || true)
    if grep -qxF "$copyright" LICENSE-MIT && [ "$lines" -eq 1 ]; then ok "LICENSE-MIT: $copyright"
    else fail "LICENSE-MIT: want exactly one copyright line, '$copyright'"; fi
else
    fail "LICENSE-MIT is missing"
fi

if [ -f LICENSE-APACHE ]; then
    sum=$(sha256sum <LICENSE-APACHE)
    if [ "${sum%% *}" = "$apache_sha" ]; then ok "LICENSE-APACHE: the Apache License 2.0 text"
    else fail "LICENSE-APACHE is not the Apache License 2.0 text (sha256 ${sum%% *})"; fi
else
    fail "LICENSE-APACHE is missing"
fi

if [ -f "$go_dir/go.mod" ]; then
    for f in LICENSE-MIT LICENSE-APACHE; do
        if cmp -s "$f" "$go_dir/$f"; then ok "$go_dir/$f is $f"
        else fail "$go_dir/$f is missing or differs from $f"; fi
    done
else
    note "no $go_dir/go.mod: no Go module to check"
fi

finish "licence" "licences"
