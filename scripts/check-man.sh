#!/usr/bin/env bash
# SPDX-License-Identifier: MIT OR Apache-2.0
# Checks the man pages of an install the way a reader meets them:
#  - every function eventq.h declares has its page, share/man/man3/NAME.3,
#    and man3 holds no eventq_* page for a function the header lacks;
#    share/man/man7/eventq.7 is there;
#  - man finds each page through MANPATH=PREFIX/share/man (man -w);
#  - every page renders with no warning: man --warnings -E UTF-8 -l, and
#    groff -man -ww -z (all warnings) for the ascii device;
#  - lexgrog parses each NAME line (what mandb, whatis and apropos read);
#  - a function's page has a SYNOPSIS with #include <eventq.h>, its
#    prototype and the link line; a DESCRIPTION that starts with the first
#    words of the header's comment; RETURN VALUE when that comment has
#    "Returns", THREAD SAFETY when it has "Thread safety:";
#  - eventq(7) lists every function and has the delivery contract, the
#    same items (D1, D2, ...) as docs/design.md;
#  - every eventq page a SEE ALSO names exists.
# The functions and their comments are read from the header here, with the
# preprocessor and awk, not with the generator, so it cannot hide a skip.
#
# usage: scripts/check-man.sh PREFIX HEADER DESIGN_MD WORKDIR
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
prefix=$(realpath -m "$1") header=$2 design=$3 work=$4
cc=${CC:-cc}
man=${MAN:-man}
mandir=$prefix/share/man
need "$man" "apt-get install man-db"
need lexgrog "apt-get install man-db"
need groff "apt-get install groff-base"
need "$cc" "install a C compiler"
mkdir -p "$work"
# Plain text, no pager, no line wrapping to undo.
export MANPAGER=cat PAGER=cat MANWIDTH=1000 MAN_KEEP_FORMATTING= LC_ALL=C.UTF-8
rm -rf "$work/text"; mkdir -p "$work/text"
# Rendered once per page (man takes a tenth of a second): the text is kept.
render() { sed 's/  */ /g' "$work/text/$(basename "$1")"; }
# section TITLE < rendered text: the lines of that section.
section() { awk -v want="$1" '/^[A-Z]/ { sec = $0; next } sec == want && NF { print }'; }

header_functions "$header" >"$work/declared.txt"
# For each function: name, whether its doc comment says "Returns" and
# "Thread safety:", and the comment's first words (backticks removed).
awk '
    /^\/\*\*/ { doc = ""; inc = 1 }
    inc { doc = doc " " $0; if ($0 ~ /\*\//) inc = 0; next }
    /^[A-Za-z]/ && /(^|[^A-Za-z0-9_])eventq_[A-Za-z0-9_]+\(/ && !/^typedef/ {
        match($0, /eventq_[A-Za-z0-9_]+\(/)
        name = substr($0, RSTART, RLENGTH - 1)
        text = doc
        gsub(/\/\*\*|\*\/|`/, "", text); gsub(/ \* ?/, " ", text); gsub(/ +/, " ", text)
        sub(/^ /, "", text)
        n = split(text, w, " "); first = ""
        for (k = 1; k <= n && k <= 4; k++) first = first (k > 1 ? " " : "") w[k]
        printf "%s\t%d\t%d\t%s\n", name, doc ~ /Returns/, doc ~ /Thread safety:/, first
        doc = ""; next
    }
    NF { doc = "" }
' "$header" | sort >"$work/comments.tsv"
cut -f1 "$work/comments.tsv" >"$work/commented.txt"
if ! cmp -s "$work/declared.txt" "$work/commented.txt"; then
    fail "the header scan and the preprocessor disagree on the functions:"
    diff "$work/declared.txt" "$work/commented.txt" >&2 || true
fi

echo "pages in $mandir:"
ls "$mandir/man3" 2>/dev/null | sed -n 's/^\(eventq_.*\)\.3$/\1/p' | sort >"$work/pages.txt"
missing=$(comm -23 "$work/declared.txt" "$work/pages.txt")
extra=$(comm -13 "$work/declared.txt" "$work/pages.txt")
if [ -z "$missing" ]; then ok "each of the $(wc -l <"$work/declared.txt") functions of the header has a page"
else fail "functions without a page:"; printf '        %s\n' $missing >&2; fi
if [ -z "$extra" ]; then ok "no page for a function the header does not declare"
else fail "pages for functions the header does not declare:"; printf '        %s\n' $extra >&2; fi
if [ -f "$mandir/man7/eventq.7" ]; then ok "man7/eventq.7"; else fail "man7/eventq.7 is missing"; fi

echo "man finds them (MANPATH=$mandir):"
lookups=0
while read -r fn; do
    got=$(MANPATH=$mandir "$man" -w "$fn" 2>/dev/null || true)
    if [ "$got" = "$mandir/man3/$fn.3" ]; then lookups=$((lookups + 1))
    else fail "man -w $fn gives '${got:-nothing}', want $mandir/man3/$fn.3"; fi
done <"$work/declared.txt"
ok "man -w finds the page of $lookups function(s), e.g. $(MANPATH=$mandir "$man" -w eventq_chan_send 2>/dev/null || echo '(eventq_chan_send: not found)')"
got=$(MANPATH=$mandir "$man" -w eventq 2>/dev/null || true)
if [ "$got" = "$mandir/man7/eventq.7" ]; then ok "man -w eventq: $got"
else fail "man -w eventq gives '${got:-nothing}', want $mandir/man7/eventq.7"; fi

echo "rendering (man --warnings, groff -ww), NAME lines (lexgrog):"
pages=("$mandir"/man3/eventq_*.3 "$mandir/man7/eventq.7")
clean=0
for page in "${pages[@]}"; do
    [ -f "$page" ] || continue
    warnings=$( { "$man" --warnings -E UTF-8 -l "$page" >"$work/text/$(basename "$page")"; } 2>&1 \
                || echo "(man failed)")
    warnings+=$(groff -k -man -ww -z -Tascii "$page" 2>&1 || echo "(groff failed)")
    if [ -n "$warnings" ]; then fail "${page#"$mandir"/}:"; echo "$warnings" | sed 's/^/        /' >&2
    else clean=$((clean + 1)); fi
    base=$(basename "$page"); name=${base%.*}
    if ! lexgrog "$page" 2>/dev/null | reads -F "\"$name - "; then
        fail "lexgrog cannot read the NAME line of ${page#"$mandir"/}: $(lexgrog "$page" 2>&1 | head -1)"
    fi
done
ok "$clean of ${#pages[@]} page(s) render without a warning"

echo "function pages against the header's comments:"
checked=0
while IFS=$'\t' read -r fn has_returns has_thread first; do
    page=$mandir/man3/$fn.3
    [ -f "$page" ] || continue
    text=$(render "$page")
    bad=""
    synopsis=$(section SYNOPSIS <<<"$text")
    grep -qF '#include <eventq.h>' <<<"$synopsis" || bad+=" no-#include"
    grep -qE "(^|[ *])$fn\(" <<<"$synopsis" || bad+=" no-prototype"
    grep -qF -- '-leventq' <<<"$synopsis" || bad+=" no-link-line"
    desc=$(section DESCRIPTION <<<"$text" | sed 's/()//g')
    if [ -z "$first" ]; then bad+=" no-doc-comment-in-the-header"
    elif ! grep -qF -- "$first" <<<"$desc"; then bad+=" description-not-from-comment('$first')"; fi
    if [ "$has_returns" = 1 ] && ! grep -qx 'RETURN VALUE' <<<"$text"; then bad+=" no-RETURN-VALUE"; fi
    if [ "$has_thread" = 1 ] && ! grep -qx 'THREAD SAFETY' <<<"$text"; then bad+=" no-THREAD-SAFETY"; fi
    grep -qx 'SEE ALSO' <<<"$text" || bad+=" no-SEE-ALSO"
    for ref in $(section 'SEE ALSO' <<<"$text" | grep -oE 'eventq[a-z0-9_]*\([37]\)'); do
        ref_name=${ref%(*} ref_sec=${ref#*(}; ref_sec=${ref_sec%)}
        [ -f "$mandir/man$ref_sec/$ref_name.$ref_sec" ] || bad+=" dangling-$ref"
    done
    if [ -n "$bad" ]; then fail "$fn.3:$bad"; else checked=$((checked + 1)); fi
done <"$work/comments.tsv"
ok "$checked function page(s) have their sections and the header's text"

echo "eventq(7):"
if [ -f "$mandir/man7/eventq.7" ]; then
    text=$(render "$mandir/man7/eventq.7")
    unlisted=""
    while read -r fn; do grep -qF "$fn(3)" <<<"$text" || unlisted+=" $fn"; done <"$work/declared.txt"
    if [ -z "$unlisted" ]; then ok "lists every function"; else fail "eventq(7) does not list:$unlisted"; fi
    contract=$(section 'THE DELIVERY CONTRACT' <<<"$text" | grep -oE '^ *D[0-9]+ ' | tr -d ' ' | tr '\n' ' ')
    want=$(awk '/^## / { sec = $0 } sec == "## The delivery contract"' "$design" |
           sed -n 's/^- \*\*\(D[0-9]*\) .*/\1/p' | tr '\n' ' ')
    if [ -n "$want" ] && [ "$contract" = "$want" ]; then ok "the delivery contract of $design: $contract"
    else fail "THE DELIVERY CONTRACT has '$contract', $design has '$want'"; fi
    for ref in $(section 'SEE ALSO' <<<"$text" | grep -oE 'eventq[a-z0-9_]*\([37]\)'); do
        ref_name=${ref%(*} ref_sec=${ref#*(}; ref_sec=${ref_sec%)}
        [ -f "$mandir/man$ref_sec/$ref_name.$ref_sec" ] || fail "eventq(7) SEE ALSO names $ref, which is not installed"
    done
fi

finish "man page" "man pages"
