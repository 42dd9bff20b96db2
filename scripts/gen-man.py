#!/usr/bin/env python3
# SPDX-License-Identifier: MIT OR Apache-2.0
"""Generates libeventq's man pages from the doc comments of include/eventq.h.

One section-3 page per function the header declares (NAME, SYNOPSIS,
DESCRIPTION, RETURN VALUE and THREAD SAFETY when the comment has "Returns" or
"Thread safety:" text, SEE ALSO), and eventq(7): what the library is, the
delivery contract (D1-D9, read from docs/design.md), the objects and their
functions, the structures, callback types and constants of the header, and
how to link. Python 3 standard library only.

The header is parsed as cbindgen writes it: doc comments (/** ... */) before
#defines, typedefs, structs and prototypes. A function is never skipped: a
declaration that is not understood fails the run, and one without a doc
comment still gets a page (with a warning on stderr).

usage: gen-man.py --header include/eventq.h --design docs/design.md
                  --version 0.1.0 --out build/man
       gen-man.py --header include/eventq.h --list   (the pages it would write)
"""

import argparse
import datetime
import os
import re
import shutil
import sys

IDENT = r"[A-Za-z_][A-Za-z0-9_]*"
EXTERN_C = re.compile(r'extern\s+"C"\s*\{')


def warn(msg):
    print(f"gen-man: warning: {msg}", file=sys.stderr)


def die(msg):
    print(f"gen-man: error: {msg}", file=sys.stderr)
    sys.exit(1)


# --- Parsing the header ------------------------------------------------------


class Item:
    """One declaration of the header with the doc comment before it."""

    def __init__(self, kind, name, doc, text, **extra):
        self.kind = kind  # macro, opaque, struct, enum, callback, function, other
        self.name = name
        self.doc = doc  # list of comment lines, or []
        self.text = text  # the declaration, whitespace as in the header
        self.__dict__.update(extra)


def comment_lines(raw):
    """The text lines of a /* */ or /** */ comment, without the markers."""
    body = raw.strip()
    body = re.sub(r"^/\*\*?", "", body)
    body = re.sub(r"\*/$", "", body)
    lines = []
    for line in body.split("\n"):
        line = re.sub(r"^\s*\* ?", "", line) if re.match(r"^\s*\*", line) else line.strip()
        lines.append(line.rstrip())
    while lines and not lines[0].strip():
        lines.pop(0)
    while lines and not lines[-1].strip():
        lines.pop()
    return lines


def split_params(params):
    """Splits a parameter list at the commas outside parentheses."""
    out, depth, cur = [], 0, ""
    for ch in params:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            out.append(cur.strip())
            cur = ""
        else:
            cur += ch
    if cur.strip():
        out.append(cur.strip())
    return out


def param_name(param):
    """The name of one parameter ('const void *data' -> 'data'), or None."""
    m = re.search(r"\(\s*\*\s*(" + IDENT + r")\s*\)", param)  # function pointer
    if m:
        return m.group(1)
    m = re.search(r"(" + IDENT + r")\s*(\[[^\]]*\])?\s*$", param)
    if not m or param.strip() == "void" or m.start(1) == 0:
        return None
    return m.group(1)


def parse_header(path):
    text = open(path, encoding="utf-8").read()
    items = []
    top_comment = None
    pending = []  # doc comment lines waiting for their declaration
    stmt = ""  # the declaration being read (up to ';' at depth 0)
    depth = 0
    fields = []  # (name, doc, decl) of the struct or enum being read
    field_doc = []
    i, n = 0, len(text)
    line_no = 1

    def is_enum(s):
        return re.match(r"\s*(typedef\s+)?enum\b", s) is not None

    def flush_statement(s, doc, flds):
        norm = " ".join(s.split())
        if re.fullmatch(r"typedef struct (" + IDENT + r") \1;", norm):
            name = norm.split()[2]
            items.append(Item("opaque", name, doc, s.strip()))
            return
        m = re.fullmatch(r"typedef (struct|enum|union)(?: (" + IDENT + r"))? \{.*\} (" + IDENT + r");", norm)
        if m:
            kind = "enum" if m.group(1) == "enum" else "struct"
            items.append(Item(kind, m.group(3), doc, s.strip(), keyword=m.group(1), fields=flds))
            return
        m = re.fullmatch(r"(struct|enum|union) (" + IDENT + r") \{.*\};", norm)
        if m:
            kind = "enum" if m.group(1) == "enum" else "struct"
            items.append(Item(kind, m.group(2), doc, s.strip(), keyword=m.group(1), fields=flds))
            return
        m = re.fullmatch(r"typedef (.+?)\(\s*\*\s*(" + IDENT + r")\s*\)\s*\((.*)\);", norm)
        if m:
            items.append(Item("callback", m.group(2), doc, s.strip(), ret=m.group(1).strip(),
                              params=split_params(m.group(3))))
            return
        m = re.fullmatch(r"(?!typedef\b)(.+?)\b(" + IDENT + r")\s*\((.*)\);", norm)
        if m:
            params = split_params(m.group(3))
            items.append(Item("function", m.group(2), doc, s.strip(), ret=m.group(1).strip(),
                              params=params, param_names=[p for p in map(param_name, params) if p]))
            return
        m = re.search(r"(" + IDENT + r")\s*(\[[^\]]*\])?\s*;$", norm)
        items.append(Item("other", m.group(1) if m else norm, doc, s.strip()))

    while i < n:
        if text.startswith("/*", i):
            end = text.find("*/", i + 2)
            if end < 0:
                die(f"{path}:{line_no}: unterminated comment")
            raw = text[i:end + 2]
            line_no += raw.count("\n")
            i = end + 2
            lines = comment_lines(raw)
            if top_comment is None and not items and not stmt.strip():
                top_comment = lines
            elif lines and lines[0].startswith("Generated by"):
                pass
            elif depth > 0:
                field_doc = lines
            else:
                pending = lines
            continue
        if text.startswith("//", i):
            end = text.find("\n", i)
            i = n if end < 0 else end
            continue
        ch = text[i]
        if ch == "#" and not stmt.strip() and (i == 0 or text[i - 1] == "\n"):
            end = text.find("\n", i)
            end = n if end < 0 else end
            line = text[i:end]
            while line.endswith("\\") and end < n:  # continued #define
                nxt = text.find("\n", end + 1)
                nxt = n if nxt < 0 else nxt
                line = line[:-1] + " " + text[end + 1:nxt]
                end = nxt
            i = end
            m = re.match(r"#\s*define\s+(" + IDENT + r")(\(.*?\))?\s*(.*)$", line)
            if m and m.group(1) != "EVENTQ_H":
                items.append(Item("macro", m.group(1), pending, line.strip(),
                                  value=m.group(3).strip(), args=m.group(2)))
            pending = []
            continue
        if ch == "\n":
            line_no += 1
        # extern "C" { ... } of C++ compatibility: not a declaration.
        m = EXTERN_C.match(text, i)
        if m and not stmt.strip():
            i = m.end()
            continue
        if ch == "}" and depth == 0 and not stmt.strip():
            i += 1
            continue
        stmt += ch
        if depth == 1 and (ch == ";" or (ch in ",}" and is_enum(stmt))):
            # The end of a field (';') or an enumerator (',' or the brace).
            body = stmt[:-1]
            seps = ";{" if ch == ";" else ",{"
            cut = max(body.rfind(c) for c in seps)
            decl = " ".join(body[cut + 1:].split())
            if decl:
                name = param_name(decl) if ch == ";" else decl.split("=")[0].strip()
                fields.append((name or decl, field_doc, decl))
            field_doc = []
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
        if ch == ";" and depth == 0:
            flush_statement(stmt, pending, fields)
            stmt, pending, fields, field_doc = "", [], [], []
        i += 1
    if stmt.strip():
        die(f"{path}: unterminated declaration at the end: {stmt.strip()[:60]}")
    return top_comment or [], items


# --- Doc comments to man text ------------------------------------------------


def blocks_of(lines):
    """Paragraphs and list items: [('p', text) | ('li', text)]."""
    blocks, cur, kind, item_indent = [], [], None, 0

    def end():
        nonlocal cur, kind
        if cur:
            blocks.append((kind, " ".join(s.strip() for s in cur)))
        cur, kind = [], None

    for line in lines:
        if not line.strip():
            end()
            continue
        m = re.match(r"^(\s*)- (.*)$", line)
        if m:
            end()
            kind, cur, item_indent = "li", [m.group(2)], len(m.group(1)) + 2
            continue
        indent = len(line) - len(line.lstrip())
        if kind == "li" and indent < item_indent:
            end()
        if kind is None:
            kind = "p"
        cur.append(line)
    end()
    return blocks


def esc(s):
    """Escapes plain text for roff (no font changes inside)."""
    out = []
    for ch in s:
        if ch == "\\":
            out.append("\\e")
        elif ch == "-":
            out.append("\\-")
        elif ord(ch) > 127:
            out.append(f"\\[u{ord(ch):04X}]")
        else:
            out.append(ch)
    s = "".join(out)
    # Abbreviations followed by a space are not sentence ends.
    return re.sub(r"\b(e\.g|i\.e|etc)\.(?= )", r"\1.\\&", s)


class Markup:
    """Inline markup of doc text: `code`, function and macro names."""

    def __init__(self, functions, macros, types):
        self.functions = functions
        self.macros = macros
        self.types = types

    def inline(self, text, params=(), refs=None):
        out = []
        pos = 0
        pattern = re.compile(r"`([^`]+)`|\b(eventq_\w+|EVENTQ_\w+)\b(\(\))?")
        for m in pattern.finditer(text):
            out.append(esc(text[pos:m.start()]))
            pos = m.end()
            if m.group(1) is not None:
                code = m.group(1)
                fn = re.fullmatch(r"(" + IDENT + r")(\(\))?", code)
                if fn and fn.group(1) in self.functions:
                    out.append(self.fn_ref(fn.group(1), refs))
                elif code in self.macros:
                    out.append(f"\\fB{esc(code)}\\fP")
                else:
                    out.append(f"\\fI{esc(code)}\\fP")
            else:
                name = m.group(2)
                if name in self.functions:
                    out.append(self.fn_ref(name, refs))
                elif name in self.macros or name in self.types:
                    out.append(f"\\fB{esc(name)}\\fP")
                else:
                    out.append(esc(m.group(0)))
        out.append(esc(text[pos:]))
        return "".join(out)

    def fn_ref(self, name, refs):
        if refs is not None:
            refs.add(name)
        return f"\\fB{esc(name)}\\fP()"


def fill(text, width=78):
    """Breaks escaped text into source lines at spaces; no line starts with
    a control character."""
    words = text.split(" ")
    lines, cur = [], ""
    for w in words:
        if not w:
            continue
        if cur and len(cur) + 1 + len(w) > width:
            lines.append(cur)
            cur = w
        else:
            cur = f"{cur} {w}" if cur else w
    if cur:
        lines.append(cur)
    return "\n".join(("\\&" + ln) if ln[:1] in (".", "'") else ln for ln in lines)


def summary(doc_lines, name):
    """The NAME line's description: the first sentence of the comment,
    without parenthesised asides, lower-cased like other man pages."""
    blocks = blocks_of(doc_lines)
    if not blocks:
        return "undocumented"
    text = blocks[0][1]
    # Drop (...) outside `code`.
    out, depth, code = [], 0, False
    for ch in text:
        if ch == "`":
            code = not code
        if not code and ch == "(":
            depth += 1
            continue
        if not code and ch == ")" and depth:
            depth -= 1
            continue
        if depth == 0:
            out.append(ch)
    text = re.sub(r"\s+", " ", "".join(out)).replace(" ,", ",").replace(" ;", ";").replace(" .", ".")
    m = re.search(r"(?<!e\.g)(?<!i\.e)[.;:](\s|$)", text)
    if m:
        text = text[:m.start()]
    text = text.replace("`", "").strip()
    # A long first sentence is cut at its first comma.
    if len(text) > 70 and ", " in text[20:]:
        text = text[:text.index(", ", 20)]
    if len(text) > 1 and text[0].isupper() and not text[1].isupper():
        text = text[0].lower() + text[1:]
    return text


def split_sections(doc_lines):
    """DESCRIPTION, RETURN VALUE and THREAD SAFETY blocks of a comment."""
    desc, ret, thread = [], [], []
    for kind, text in blocks_of(doc_lines):
        if kind == "p" and text.startswith("Thread safety:"):
            rest = text[len("Thread safety:"):].strip()
            thread.append(("p", rest[:1].upper() + rest[1:]))
            continue
        if kind == "p" and re.match(r"(Returns\b|Errors\b|-E[A-Z]+)", text):
            ret.append((kind, text))
            continue
        m = re.search(r"(?<=[.)]) (Returns\b.*)$", text) if kind == "p" else None
        if m:
            desc.append((kind, text[:m.start()]))
            ret.append((kind, m.group(1)))
            continue
        desc.append((kind, text))
    return desc, ret, thread


def emit_blocks(blocks, markup, params=(), refs=None):
    out = []
    for kind, text in blocks:
        if kind == "li":
            out.append(".IP \\(bu 2")
        elif out:
            out.append(".PP")
        out.append(fill(markup.inline(text, params, refs)))
    return out


# --- Pages -------------------------------------------------------------------


def prototype_lines(ret, name, params, is_typedef=False):
    """The prototype in the SYNOPSIS, parameter names in italics, one
    parameter per line after the first when it is long."""
    head = f"typedef {ret} (*{name})(" if is_typedef else (
        f"{ret}{'' if ret.endswith('*') else ' '}{name}(")
    parts = []
    for p in params or ["void"]:
        pname = param_name(p)
        if pname:
            k = p.rfind(pname)
            after = esc(p[k + len(pname):])
            parts.append(f"\\fB{esc(p[:k])}\\fP\\fI{esc(pname)}\\fP" + (f"\\fB{after}\\fP" if after else ""))
        else:
            parts.append(f"\\fB{esc(p)}\\fP")
    flat = head + ", ".join(params or ["void"]) + ");"
    if len(flat) <= 72:
        return [f"\\fB{esc(head)}\\fP" + "\\fB, \\fP".join(parts) + "\\fB);\\fP"]
    pad = " " * len(head)
    lines = []
    for k, part in enumerate(parts):
        prefix = f"\\fB{esc(head)}\\fP" if k == 0 else pad
        suffix = "\\fB);\\fP" if k == len(parts) - 1 else "\\fB,\\fP"
        lines.append(prefix + part + suffix)
    return lines


def th(name, section, date, version):
    return f'.TH {name} {section} {date} "libeventq {version}" "libeventq Manual"'


def link_lines():
    return [
        ".PP",
        "Link with \\fI\\-leventq\\fP, or with",
        "\\fB$(pkg\\-config\\ \\-\\-cflags\\ \\-\\-libs\\ eventq)\\fP;",
        "statically with \\fB$(pkg\\-config\\ \\-\\-cflags\\ \\-\\-libs\\ eventq\\-static)\\fP.",
    ]


def function_page(fn, ctx):
    markup, date, version = ctx["markup"], ctx["date"], ctx["version"]
    refs = set()
    desc, ret, thread = split_sections(fn.doc)
    if not fn.doc:
        warn(f"{fn.name} has no doc comment in the header")
        desc = [("p", "Not documented in <eventq.h>.")]
    out = [
        f'.\\" Generated by scripts/gen-man.py from eventq.h. Do not edit.',
        th(fn.name, 3, date, version),
        ".SH NAME",
        f"{esc(fn.name)} \\- {esc(summary(fn.doc, fn.name))}",
        ".SH SYNOPSIS",
        ".nf",
        ".B #include <eventq.h>",
        ".PP",
    ]
    callbacks = []
    for p in fn.params:
        for word in re.findall(IDENT, p):
            cb = ctx["callbacks"].get(word)
            if cb and cb not in callbacks:
                callbacks.append(cb)
    for cb in callbacks:
        out += prototype_lines(cb.ret, cb.name, cb.params, is_typedef=True)
    if callbacks:
        out.append("")
    out += prototype_lines(fn.ret, fn.name, fn.params)
    out.append(".fi")
    out += link_lines()
    out.append(".SH DESCRIPTION")
    out += emit_blocks(desc, markup, fn.param_names, refs)
    structs = []
    for p in fn.params + [fn.ret]:
        for word in re.findall(IDENT, p):
            if word in ctx["structs"] and word not in structs:
                structs.append(word)
    if structs:
        names = ", ".join(f"\\fI{ctx['structs'][s]} {esc(s)}\\fP" for s in structs)
        out += [".PP", fill(f"{names} {'is' if len(structs) == 1 else 'are'} described in "
                            "\\fBeventq\\fP(7).")]
    if callbacks:
        out.append(".SS Callbacks")
        for cb in callbacks:
            out += [".TP", f".I {esc(cb.name)}"]
            cb_desc = blocks_of(cb.doc) or [("p", "Not documented in <eventq.h>.")]
            body = emit_blocks(cb_desc, markup, cb.params, refs)
            out += [ln if ln != ".PP" else ".IP" for ln in body]
    if ret:
        out.append(".SH RETURN VALUE")
        out += emit_blocks(ret, markup, fn.param_names, refs)
    if thread:
        out.append(".SH THREAD SAFETY")
        out += emit_blocks(thread, markup, fn.param_names, refs)
    out.append(".SH SEE ALSO")
    # Functions the comment names, the ones whose name extends this one's or
    # that this one's extends (send, send_batch, send_fd), and the object's
    # constructor.
    related = set(refs)
    for other in ctx["function_names"]:
        if other.startswith(fn.name + "_") or fn.name.startswith(other + "_"):
            related.add(other)
    obj = re.match(r"(eventq_[a-z0-9]+)_", fn.name)
    if obj and obj.group(1) + "_new" in ctx["function_names"]:
        related.add(obj.group(1) + "_new")
    see = sorted(related - {fn.name})
    entries = [f".BR {esc(s)} (3)," for s in see] + [".BR eventq (7)"]
    out += entries
    return "\n".join(out) + "\n"


def design_contract(path):
    """The delivery contract bullets of docs/design.md: [(label, text)]."""
    text = open(path, encoding="utf-8").read()
    m = re.search(r"^## The delivery contract\n(.*?)(?=^## )", text, re.S | re.M)
    if not m:
        die(f"{path} has no '## The delivery contract' section")
    items = []
    for bullet in re.split(r"\n(?=- \*\*)", m.group(1)):
        b = re.match(r"- \*\*(D\d+ [^*]+)\*\*:?\s*(.*)", bullet.strip(), re.S)
        if b:
            items.append((b.group(1), " ".join(b.group(2).split())))
    labels = [label.split()[0] for label, _ in items]
    if not items or labels != [f"D{k}" for k in range(1, len(items) + 1)]:
        die(f"{path}: the delivery contract should be bullets **D1 ...** to **Dn ...**, found {labels}")
    return items


def design_processes(path):
    """The contract between processes of docs/design.md ("Between
    processes", its first paragraph and its bullets, nested ones included):
    [(depth, text)] where depth is 0 for a paragraph, 1 or 2 for a bullet."""
    text = open(path, encoding="utf-8").read()
    m = re.search(r"^## Between processes.*?\n(.*?)(?=^## )", text, re.S | re.M)
    if not m:
        die(f"{path} has no '## Between processes' section")
    c = re.search(r"\*\*The contract between processes\.\*\*(.*?)(?=\n\n\*\*)", m.group(1), re.S)
    if not c:
        die(f"{path}: 'Between processes' has no paragraph '**The contract between processes.**'")
    items = []
    for line in c.group(1).strip("\n").split("\n"):
        b = re.match(r"( *)- (.*)", line)
        if b:
            items.append([1 + len(b.group(1)) // 2, b.group(2)])
        elif items and line.strip():
            items[-1][1] += " " + line.strip()
        elif line.strip():
            items.append([0, line.strip()])
    return [(depth, " ".join(t.split())) for depth, t in items]


def md_inline(text, markup):
    """`code` and **bold** of markdown, then the header's names."""
    parts = re.split(r"(\*\*[^*]+\*\*)", text)
    out = []
    for part in parts:
        if part.startswith("**") and part.endswith("**"):
            out.append(f"\\fB{esc(part[2:-2])}\\fP")
        else:
            out.append(markup.inline(part))
    return "".join(out)


def struct_definition(item):
    """The struct's declaration without comments, for a .nf block."""
    lines = [f"\\fB{item.keyword} {esc(item.name)} {{\\fP"]
    for name, _doc, decl in item.fields:
        if item.keyword == "enum":
            lines.append(f"    \\fB{esc(decl)},\\fP")
        else:
            lines.append(f"    \\fB{esc(decl)};\\fP")
    lines.append("\\fB};\\fP")
    return lines


def overview_page(ctx, top, items, contract, processes):
    markup, date, version = ctx["markup"], ctx["date"], ctx["version"]
    functions = [it for it in items if it.kind == "function"]
    opaque = [it for it in items if it.kind == "opaque"]
    structs = [it for it in items if it.kind in ("struct", "enum")]
    callbacks = [it for it in items if it.kind == "callback"]
    macros = [it for it in items if it.kind == "macro"]
    others = [it for it in items if it.kind == "other"]
    tagline = "per\\-event message delivery between threads and into event loops"
    if top and ":" in top[0]:
        tagline = esc(top[0].split(":", 1)[1].strip().rstrip("."))
    out = [
        '.\\" Generated by scripts/gen-man.py from eventq.h and docs/design.md. Do not edit.',
        th("eventq", 7, date, version),
        ".SH NAME",
        f"eventq, libeventq \\- {tagline}",
        ".SH SYNOPSIS",
        ".nf",
        ".B #include <eventq.h>",
        ".fi",
    ] + link_lines() + [
        ".SH DESCRIPTION",
        fill("An eventfd is a counter, not a queue: several writes made before the "
             "reader reads add up into one value, so a consumer polling it sees fewer "
             "events than were sent, and merged values. libeventq keeps the messages "
             "in a bounded multi-producer, multi-consumer FIFO and uses eventfds only "
             "as doorbells that track the queue exactly. A channel's receive fd is "
             "readable exactly while messages are pending, so any poll, epoll or "
             "select loop (or Go's netpoller, asyncio, libuv) can wait on it, and "
             "every message arrives once, whole and in order. The doorbell is rung "
             "only when the queue goes from empty to non\\-empty, so a busy channel "
             "costs no system call per message."),
        ".PP",
        fill("The library also has an event loop (\\fBeventq_loop_new\\fP(3)) that "
             "dispatches fd, timer, signal, channel and memory\\-cgroup sources, "
             "calling a channel source's callback once per message."),
        ".SS Conventions",
    ]
    conv = [b for b in blocks_of(top[1:])] if top else []
    conv = [b for b in conv if not b[1].startswith("Conventions")]
    out += emit_blocks(conv, markup) if conv else [fill("See <eventq.h>.")]
    out += [".SH THE DELIVERY CONTRACT",
            fill("Every binding and test of libeventq refers to these guarantees "
                 "(docs/design.md of the source has their full text and reasons).")]
    for label, text in contract:
        out += [".TP", f".B {esc(label)}", fill(md_inline(text, markup))]
    out += [".SH BETWEEN PROCESSES",
            fill("A process\\-shared channel (\\fBeventq_chan_new_shared\\fP(3)) is the "
                 "same channel with its ring in a sealed memfd that two processes "
                 "map, handed from the one that made it to the other "
                 "(\\fBeventq_chan_send_to\\fP(3), \\fBeventq_chan_export_fds\\fP(3)).")]
    depth_now = 0
    for depth, text in processes:
        while depth_now > max(depth, 1):
            out.append(".RE")
            depth_now -= 1
        if depth == 2 and depth_now == 1:
            out.append(".RS 2")
            depth_now = 2
        if depth == 0:
            out += [".PP", fill(md_inline(text, markup))]
        else:
            depth_now = max(depth_now, 1)
            out += [".IP \\(bu 2", fill(md_inline(text, markup))]
    out += [".RE"] * max(depth_now - 1, 0)

    out.append(".SH OBJECTS")
    out.append(fill("Handles are opaque pointers, each created by a function of its "
                    "object and freed with its \\fI_free\\fP function; freeing NULL "
                    "is a no\\-op."))
    prefixes = sorted(((o.name + "_", o) for o in opaque), key=lambda p: -len(p[0]))
    groups = {o.name: [] for o in opaque}
    misc = []
    for fn in functions:
        owner = next((o for pre, o in prefixes if fn.name.startswith(pre)), None)
        (groups[owner.name] if owner else misc).append(fn)
    for o in opaque:
        out += [".SS " + f"struct {esc(o.name)}"]
        out += emit_blocks(blocks_of(o.doc) or [("p", "Not documented in <eventq.h>.")], markup)
        for fn in groups[o.name]:
            out += [".TP", f".BR {esc(fn.name)} (3)", esc(summary(fn.doc, fn.name))]
    if misc:
        out += [".SS Other functions"]
        for fn in misc:
            out += [".TP", f".BR {esc(fn.name)} (3)", esc(summary(fn.doc, fn.name))]

    if structs:
        out.append(".SH STRUCTURES")
        for st in structs:
            out += [".SS " + f"{st.keyword} {esc(st.name)}"]
            out += emit_blocks(blocks_of(st.doc), markup)
            out += [".PP", ".in +4n", ".nf"] + struct_definition(st) + [".fi", ".in"]
            for name, doc, _decl in st.fields:
                if doc:
                    out += [".TP", f".I {esc(name)}"]
                    out += [ln if ln != ".PP" else ".IP" for ln in emit_blocks(blocks_of(doc), markup)]
    if callbacks:
        out.append(".SH CALLBACK TYPES")
        for cb in callbacks:
            out += [".PP", ".nf"] + prototype_lines(cb.ret, cb.name, cb.params, is_typedef=True) + [".fi"]
            out += [".RS 4"] + emit_blocks(blocks_of(cb.doc) or [("p", "Not documented.")], markup) + [".RE"]
    if macros:
        out.append(".SH CONSTANTS")
        out.append(fill("In the header's order; a constant without a description of its "
                        "own follows the one it goes with."))
        for mac in macros:
            value = f" = {esc(mac.value)}" if mac.value else ""
            out += [".TP", f"\\fB{esc(mac.name)}{esc(mac.args or '')}\\fP{value}"]
            body = emit_blocks(blocks_of(mac.doc), markup) if mac.doc else []
            out += [ln if ln != ".PP" else ".IP" for ln in body] or ["\\&"]
    if others:
        out.append(".SH OTHER DECLARATIONS")
        for it in others:
            out += [".PP", ".nf", f"\\fB{esc(' '.join(it.text.split()))}\\fP", ".fi"]
            out += [".RS 4"] + emit_blocks(blocks_of(it.doc) or [("p", "Not documented.")], markup) + [".RE"]

    out += [
        ".SH LINKING",
        fill("The shared library's soname is \\fIlibeventq.so.0\\fP; it exports "
             "\\fIeventq_*\\fP symbols only. With pkg\\-config:"),
        ".PP",
        ".in +4n",
        ".EX",
        "cc app.c $(pkg\\-config \\-\\-cflags \\-\\-libs eventq)          # shared",
        "cc app.c $(pkg\\-config \\-\\-cflags \\-\\-libs eventq\\-static)   # static",
        ".EE",
        ".in",
        ".PP",
        fill("\\fIeventq\\-static\\fP links \\fIlibeventq.a\\fP and the system libraries "
             "it needs, also where \\fIlibeventq.so\\fP is installed in the same "
             "directory (where \\fBpkg\\-config \\-\\-static \\-\\-libs eventq\\fP would "
             "still link the shared library). With CMake:"),
        ".PP",
        ".in +4n",
        ".EX",
        "find_package(eventq 0.1 REQUIRED)",
        "target_link_libraries(app PRIVATE eventq::eventq)         # shared",
        "target_link_libraries(app PRIVATE eventq::eventq\\-static)  # static",
        ".EE",
        ".in",
        ".SH FILES",
        ".TP",
        ".I eventq.h",
        "The header, in the include directory.",
        ".TP",
        '.IR libeventq.so.0 ", " libeventq.a',
        "The shared and static libraries, in the library directory; the shared "
        "library's debug information is in \\fI.debug/\\fP below it, found by "
        "gdb(1) through its \\fI.gnu_debuglink\\fP.",
        ".TP",
        '.IR pkgconfig/eventq.pc ", " pkgconfig/eventq\\-static.pc',
        "The pkg\\-config files, in the library directory.",
        ".TP",
        ".I cmake/eventq/eventqConfig.cmake",
        "The CMake package, in the library directory.",
        ".SH SEE ALSO",
        ".BR eventq_chan_new (3),",
        ".BR eventq_loop_new (3),",
        ".BR eventfd (2),",
        ".BR epoll (7),",
        ".BR pkg\\-config (1)",
    ]
    return "\n".join(out) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--header", required=True)
    ap.add_argument("--design")
    ap.add_argument("--version")
    ap.add_argument("--out")
    ap.add_argument("--list", action="store_true", help="print the pages, write nothing")
    args = ap.parse_args()

    top, items = parse_header(args.header)
    functions = [it for it in items if it.kind == "function"]
    if not functions:
        die(f"{args.header} declares no function")
    seen = set()
    for fn in functions:
        if fn.name in seen:
            die(f"{fn.name} is declared twice")
        seen.add(fn.name)
    pages = [f"man3/{fn.name}.3" for fn in functions] + ["man7/eventq.7"]
    if args.list:
        print("\n".join(pages))
        return
    if not (args.design and args.version and args.out):
        die("--design, --version and --out are needed to write the pages")

    epoch = os.environ.get("SOURCE_DATE_EPOCH")
    stamp = int(epoch) if epoch else int(os.stat(args.header).st_mtime)
    date = datetime.datetime.fromtimestamp(stamp, datetime.timezone.utc).strftime("%Y-%m-%d")
    ctx = {
        "markup": Markup({f.name for f in functions},
                         {it.name for it in items if it.kind == "macro"},
                         {it.name for it in items if it.kind in ("opaque", "struct", "enum", "callback")}),
        "callbacks": {it.name: it for it in items if it.kind == "callback"},
        "function_names": {f.name for f in functions},
        "structs": {it.name: it.keyword for it in items if it.kind in ("struct", "enum")},
        "date": date,
        "version": args.version,
    }
    contract = design_contract(args.design)
    processes = design_processes(args.design)

    # Written to a fresh directory, then swapped in: no page of a function
    # that is gone survives.
    tmp = args.out.rstrip("/") + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(os.path.join(tmp, "man3"))
    os.makedirs(os.path.join(tmp, "man7"))
    for fn in functions:
        with open(os.path.join(tmp, "man3", fn.name + ".3"), "w", encoding="utf-8") as f:
            f.write(function_page(fn, ctx))
    with open(os.path.join(tmp, "man7", "eventq.7"), "w", encoding="utf-8") as f:
        f.write(overview_page(ctx, top, items, contract, processes))
    shutil.rmtree(args.out, ignore_errors=True)
    os.rename(tmp, args.out)
    print(f"gen-man: {len(functions)} section-3 pages and eventq(7) in {args.out}")


if __name__ == "__main__":
    main()
