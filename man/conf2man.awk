# SPDX-License-Identifier: MIT
# Writes preduced.conf(5) from the annotated config and a page template:
#   awk -f man/conf2man.awk conf/preduced.conf man/preduced.conf.5.in
# conf/preduced.conf is the one source of the keys' documentation (a unit
# test checks that it lists every key of daemon/base/conf_table.c with its
# default): its opening comment block becomes the template's @DESCRIPTION@
# line, every "[section]" a subsection and every "#name = value" line,
# with the comment block above it, an entry of @KEYS@.
#
# The opening block's first paragraph (the file's title) is left out.

function esc(s) {
    gsub(/\\/, "\\e", s)
    if (s ~ /^[.']/)
        s = "\\&" s
    return s
}

# One comment block as roff, paragraphs started with `par`. A line
# starting "word: " is an item of a list of values (set on a new line; the
# indented lines after it continue it); another indented line is an
# example, set on a line of its own.
function render(lines, n, par,    i, t, out, indented, item, example) {
    out = ""
    item = example = 0
    for (i = 1; i <= n; i++) {
        t = lines[i]
        if (t == "") {
            out = out par "\n"
            item = example = 0
            continue
        }
        indented = (t ~ /^  /)
        sub(/^ +/, "", t)
        if (indented && !item) {
            out = out ".br\n"
            example = 1
        } else if (!indented && t ~ /^[a-z][a-z0-9_]*: /) {
            out = out ".br\n"
            item = 1
            example = 0
        } else if (example) {
            out = out ".br\n"
            example = 0
        }
        out = out esc(t) "\n"
    }
    return out
}

FNR == NR {
    if (!seen_header) {
        if ($0 == "") {
            for (i = 1; i <= nblock && block[i] != ""; i++)
                ;
            for (j = i + 1; j <= nblock; j++)
                body[j - i] = block[j]
            desc = render(body, nblock - i, ".PP")
            nblock = 0
            seen_header = 1
        } else {
            t = $0
            sub(/^# ?/, "", t)
            block[++nblock] = t
        }
        next
    }
    if ($0 ~ /^\[[a-z]+\]$/) {
        keys = keys ".SS " $0 "\n"
        section = substr($0, 2, length($0) - 2) "."
        nblock = 0
        next
    }
    if ($0 ~ /^#[a-z_]+ =/) {
        name = $0
        sub(/^#/, "", name)
        value = name
        sub(/ =.*/, "", name)
        sub(/^[a-z_]+ = ?/, "", value)
        entry = "\\fB" section name "\\fR = " \
            (value == "" ? "(empty)" : "\\fI" esc(value) "\\fR")
        if (pending) {
            keys = keys ".TQ\n" entry "\n"
        } else {
            keys = keys ".TP\n" entry "\n"
            text = render(block, nblock, ".IP")
        }
        pending = 1
        nblock = 0
        next
    }
    if (pending) {
        keys = keys text
        pending = 0
    }
    if ($0 ~ /^#/) {
        t = $0
        sub(/^# ?/, "", t)
        block[++nblock] = t
    } else {
        nblock = 0
    }
    next
}

# The config is read: the last entry's text, then the template.
FNR != NR && !flushed {
    if (pending)
        keys = keys text
    flushed = 1
}

$0 == "@DESCRIPTION@" { printf "%s", desc; next }
$0 == "@KEYS@" { printf "%s", keys; next }
{ print }
