/* SPDX-License-Identifier: MIT */
/*
 * preduced configuration, table-driven (see conf.h).
 *
 * Every key is one row of `pr_conf_keys` (conf_table.c): where it lives in
 * struct pr_conf, its type, its default as text, its bounds and whether SIGHUP
 * may change it. Defaults go through the same setters as file values, so a bad
 * default in the table fails pr_conf_init() instead of slipping through.
 *
 * Value syntax, for files and --set alike: whole numbers are decimal digits
 * only (no sign, no hex, no junk after them); reals are decimal with an
 * optional exponent (no nan/inf/hex); one pair of double quotes around a
 * value is removed, so `key = ""` means the empty string. The libinih that
 * Debian ships reads ';' after whitespace as an inline comment, '#' only at
 * the start of a line, and lines of at most INI_MAX_LINE - 2 characters.
 *
 * Single-threaded: the loop thread loads and reloads; nothing here locks.
 */
#include "daemon/base/conf.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <ini.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "daemon/base/conf_int.h"
#include "daemon/base/log.h"

#define SYNTAX_MSG "expected 'name = value' or '[section]'"

static const void *cfield(const struct pr_conf *c, const struct entry *e)
{
    return (const char *)c + e->off;
}

static void *field(struct pr_conf *c, const struct entry *e)
{
    return (char *)c + e->off;
}

/* Bytes of one field of each type, for copying fields generically. */
static const size_t type_size[] = {
    [T_STR] = sizeof(char *),
    [T_ENUM] = sizeof(int),
    [T_U32] = sizeof(uint32_t),
    [T_DBL] = sizeof(double),
};

void pr_conf_keyname(char *buf, size_t len, const char *section,
                     const char *name)
{
    snprintf(buf, len, "%s%s%s", section, *section ? "." : "", name);
}

int pr_conf_seterr(struct pr_conf_err *err, int rc, const char *section,
                   const char *name, const char *fmt, ...)
{
    va_list ap;

    err->line = 0;
    pr_conf_keyname(err->key, sizeof(err->key), section, name);
    va_start(ap, fmt);
    vsnprintf(err->msg, sizeof(err->msg), fmt, ap);
    va_end(ap);
    return rc;
}

static const struct entry *lookup(const char *section, const char *name,
                                  struct pr_conf_err *err)
{
    const struct entry *other = NULL;
    int section_known = !*section;

    for (size_t i = 0; i < pr_conf_nkeys; i++) {
        const struct entry *e = &pr_conf_keys[i];
        if (strcmp(e->section, section) == 0) {
            section_known = 1;
            if (strcmp(e->name, name) == 0)
                return e;
        } else if (!other && strcmp(e->name, name) == 0) {
            other = e;
        }
    }
    if (!section_known)
        pr_conf_seterr(err, -EINVAL, section, name, "unknown section [%s]",
                       section);
    else if (other)
        pr_conf_seterr(err, -EINVAL, section, name,
                       "unknown key (did you mean %s%s%s?)", other->section,
                       *other->section ? "." : "", other->name);
    else
        pr_conf_seterr(err, -EINVAL, section, name, "unknown key");
    return NULL;
}

static int parse_u32(const struct entry *e, const char *v, uint32_t *out,
                     struct pr_conf_err *err)
{
    size_t digits = strspn(v, "0123456789");
    unsigned long long n;

    if (digits == 0)
        return bad(err, -EINVAL, e, "'%s' is not a whole number", v);
    if (v[digits])
        return bad(err, -EINVAL, e, "junk after the number in '%s'", v);
    errno = 0;
    n = strtoull(v, NULL, 10);
    if (errno == ERANGE || (double)n < e->lo || (double)n > e->hi)
        return bad(err, -ERANGE, e, "%s is out of range %.0f..%.0f", v, e->lo,
                   e->hi);
    *out = (uint32_t)n;
    return 0;
}

static int parse_dbl(const struct entry *e, const char *v, double *out,
                     struct pr_conf_err *err)
{
    char *end;
    double d;

    /* strtod alone would also take "nan", "inf" and hex floats. */
    if (!*v || strspn(v, "0123456789+-.eE") != strlen(v) ||
        !strpbrk(v, "0123456789"))
        return bad(err, -EINVAL, e, "'%s' is not a decimal number", v);
    errno = 0;
    d = strtod(v, &end);
    if (end == v || *end)
        return bad(err, -EINVAL, e, "'%s' is not a decimal number", v);
    if (errno == ERANGE || d < e->lo || d > e->hi)
        return bad(err, -ERANGE, e, "%s is out of range %g..%g", v, e->lo,
                   e->hi);
    *out = d;
    return 0;
}

static int parse_enum(const struct entry *e, const char *v, int *out,
                      struct pr_conf_err *err)
{
    char allowed[96];

    if (pr_name_parse(e->names, v, out) == 0)
        return 0;
    return bad(err, -EINVAL, e, "'%s' is not one of: %s", v,
               pr_name_list(e->names, allowed, sizeof(allowed)));
}

static int parse_str(const struct entry *e, const char *v, char **out,
                     struct pr_conf_err *err)
{
    char *s;

    if (strlen(v) > PR_CONF_STR_MAX)
        return bad(err, -EINVAL, e, "longer than %d characters",
                   PR_CONF_STR_MAX);
    for (const char *p = v; *p; p++) {
        if (iscntrl((unsigned char)*p))
            return bad(err, -EINVAL, e, "control characters are not allowed");
        /* In a file this starts a comment, so dump could not write it. */
        if (*p == ';' && p > v && isspace((unsigned char)p[-1]))
            return bad(err, -EINVAL, e, "' ;' would start a comment");
    }
    s = strdup(v);
    if (!s)
        return bad(err, -ENOMEM, e, "out of memory");
    free(*out);
    *out = s;
    return 0;
}

/* The one generic setter: files, --set and the defaults all come here. */
static int set_value(struct pr_conf *c, const struct entry *e,
                     const char *value, struct pr_conf_err *err)
{
    size_t len = strlen(value);
    char *v;
    int rc = 0;

    if (len >= 2 && value[0] == '"' && value[len - 1] == '"') {
        value++;
        len -= 2;
    }
    v = strndup(value, len);
    if (!v)
        return bad(err, -ENOMEM, e, "out of memory");
    switch (e->type) {
    case T_STR:
        rc = parse_str(e, v, field(c, e), err);
        break;
    case T_ENUM:
        rc = parse_enum(e, v, field(c, e), err);
        break;
    case T_U32:
        rc = parse_u32(e, v, field(c, e), err);
        break;
    case T_DBL:
        rc = parse_dbl(e, v, field(c, e), err);
        break;
    }
    free(v);
    return rc;
}

/* Keys whose empty value stands for something computed at load time. */
static int finish(struct pr_conf *c)
{
    char host[256];

    if (c->node_name && *c->node_name)
        return 0;
    if (gethostname(host, sizeof(host)) < 0)
        return 0; /* keep "": the name only labels logs and metrics */
    host[sizeof(host) - 1] = '\0';
    char *s = strdup(host);
    if (!s)
        return -ENOMEM;
    free(c->node_name);
    c->node_name = s;
    return 0;
}

int pr_conf_init(struct pr_conf *c)
{
    struct pr_conf_err err;
    int rc;

    memset(c, 0, sizeof(*c));
    for (size_t i = 0; i < pr_conf_nkeys; i++) {
        rc = set_value(c, &pr_conf_keys[i], pr_conf_keys[i].def, &err);
        if (rc) {
            pr_conf_fini(c);
            return rc;
        }
    }
    rc = finish(c);
    if (rc)
        pr_conf_fini(c);
    return rc;
}

void pr_conf_fini(struct pr_conf *c)
{
    for (size_t i = 0; i < pr_conf_nkeys; i++) {
        if (pr_conf_keys[i].type == T_STR) {
            char **s = field(c, &pr_conf_keys[i]);
            free(*s);
            *s = NULL;
        }
    }
}

/*
 * State of one file parse. libinih reads lines through our reader so that
 * we know the current line number inside the handler, and so that the first
 * error can stop the parse: the reader returns NULL once one is recorded.
 */
struct parse {
    struct pr_conf *c;
    FILE *f;
    struct pr_conf_err *err;
    int lineno;
    int indented;               /* the current line starts with white space */
    int rc;                     /* first error, 0 while none */
    int err_line;               /* its line */
    int seen[PR_CONF_KEYS_MAX]; /* line that set each key: duplicates */
};

/*
 * fgets() without its blind spots: a NUL byte would end the line for every
 * reader after it (cutting a value short, silently), and other control
 * bytes have no business in a text file; both fail the parse on their line.
 * *len_out is the line's length in bytes.
 */
static int get_line(struct parse *p, char *str, int num, size_t *len_out)
{
    size_t n = 0;
    int ch = 0;

    while (n + 1 < (size_t)num && (ch = getc(p->f)) != EOF) {
        unsigned char b = (unsigned char)ch;
        if (b == 0 || (b < 0x20 && b != '\t' && b != '\r' && b != '\n') ||
            b == 0x7f) {
            p->rc = pr_conf_seterr(p->err, -EINVAL, "", "",
                                   b ? "control character 0x%02x in the file"
                                     : "NUL byte in the file",
                                   b);
            p->err_line = p->err->line = p->lineno + 1;
            return -EINVAL;
        }
        str[n++] = (char)b;
        if (b == '\n')
            break;
    }
    str[n] = '\0';
    *len_out = n;
    return n ? 0 : -ENODATA;
}

static char *read_line(char *str, int num, void *stream)
{
    struct parse *p = stream;
    const char *s = str;
    size_t n;
    int ch;

    if (p->rc || get_line(p, str, num, &n) < 0)
        return NULL;
    p->lineno++;
    /* libinih would read the rest of an over-long line as a new line. */
    if (n && str[n - 1] != '\n' && (ch = getc(p->f)) != EOF) {
        ungetc(ch, p->f);
        p->rc = pr_conf_seterr(p->err, -EINVAL, "", "",
                               "line longer than %d characters", num - 2);
        p->err_line = p->err->line = p->lineno;
        return NULL;
    }
    if (p->lineno == 1 && strncmp(str, "\xef\xbb\xbf", 3) == 0)
        s += 3; /* libinih skips a UTF-8 BOM too */
    p->indented = *s == ' ' || *s == '\t';
    while (isspace((unsigned char)*s))
        s++;
    /*
     * Lines libinih rejects for sure. It would report them but go on and
     * apply the keys below; we stop here. It still catches the subtler ones
     * ("name ; = x"), and pr_conf_load() reports those by their line.
     */
    if (*s && !strchr(";#", *s) && !p->indented &&
        (*s == '[' ? !strchr(s, ']') : !strpbrk(s, "=:"))) {
        p->rc = pr_conf_seterr(p->err, -EINVAL, "", "", SYNTAX_MSG);
        p->err_line = p->err->line = p->lineno;
        return NULL;
    }
    return str;
}

static int on_key(void *user, const char *section, const char *name,
                  const char *value)
{
    struct parse *p = user;
    const struct entry *e;
    int rc;

    if (p->rc)
        return 0;
    if (p->indented) {
        /* INI would append it to the previous value: too easy to misread. */
        rc = pr_conf_seterr(
            p->err, -EINVAL, section, name,
            "indented line (continuation lines are not supported)");
    } else if (!(e = lookup(section, name, p->err))) {
        rc = -EINVAL;
    } else if (p->seen[e - pr_conf_keys]) {
        rc =
            pr_conf_seterr(p->err, -EINVAL, section, name,
                           "already set on line %d", p->seen[e - pr_conf_keys]);
    } else {
        p->seen[e - pr_conf_keys] = p->lineno;
        rc = set_value(p->c, e, value, p->err);
        if (!rc)
            p->c->file_keys[e - pr_conf_keys] = 1;
    }
    if (!rc)
        return 1;
    p->rc = rc;
    p->err_line = p->err->line = p->lineno;
    return 0;
}

/*
 * Opens a config file for reading: a regular file of at most
 * PR_CONF_MAX_BYTES. A FIFO or a device would block or never end (-t on
 * /dev/zero read for ever); O_NONBLOCK keeps open() itself from waiting on
 * a FIFO's writer before fstat() can tell.
 */
static int open_conf(const char *path, FILE **out, struct pr_conf_err *err)
{
    struct stat st;
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    int rc;

    if (fd < 0) {
        rc = -errno;
        snprintf(err->msg, sizeof(err->msg), "fopen(%s): %s", path,
                 strerror(-rc));
        return rc;
    }
    if (fstat(fd, &st) < 0) {
        rc = -errno;
        snprintf(err->msg, sizeof(err->msg), "fstat(%s): %s", path,
                 strerror(-rc));
    } else if (!S_ISREG(st.st_mode)) {
        rc = -EINVAL;
        snprintf(err->msg, sizeof(err->msg), "not a regular file");
    } else if (st.st_size > PR_CONF_MAX_BYTES) {
        rc = -EFBIG;
        snprintf(err->msg, sizeof(err->msg),
                 "%lld bytes: a config file may have %d at most",
                 (long long)st.st_size, PR_CONF_MAX_BYTES);
    } else if (fcntl(fd, F_SETFL, 0) < 0 || !(*out = fdopen(fd, "r"))) {
        rc = -errno;
        snprintf(err->msg, sizeof(err->msg), "fdopen(%s): %s", path,
                 strerror(-rc));
    } else {
        return 0;
    }
    close(fd);
    return rc;
}

int pr_conf_load(struct pr_conf *c, const char *path, struct pr_conf_err *err)
{
    struct pr_conf_err dummy;
    struct parse p;
    int ret, io, rc;

    if (!err)
        err = &dummy;
    memset(err, 0, sizeof(*err));
    p = (struct parse){.c = c, .err = err};
    rc = open_conf(path, &p.f, err);
    if (rc < 0)
        return rc;
    memset(c->file_keys, 0, sizeof(c->file_keys));
    ret = ini_parse_stream(read_line, &p, on_key, &p);
    io = ferror(p.f);
    fclose(p.f);

    /* libinih reports the first error line, ours or its own syntax error. */
    if (ret > 0 && (!p.rc || ret < p.err_line)) {
        pr_conf_seterr(err, -EINVAL, "", "", SYNTAX_MSG);
        err->line = ret;
        return -EINVAL;
    }
    if (p.rc)
        return p.rc;
    if (ret < 0)
        return pr_conf_seterr(err, -ENOMEM, "", "", "out of memory");
    if (io) {
        snprintf(err->msg, sizeof(err->msg), "read error on %s", path);
        return -EIO;
    }
    rc = finish(c);
    if (rc)
        pr_conf_seterr(err, rc, "node", "name", "out of memory");
    return rc;
}

static char *trim(char *s)
{
    size_t n;

    while (isspace((unsigned char)*s))
        s++;
    n = strlen(s);
    while (n && isspace((unsigned char)s[n - 1]))
        s[--n] = '\0';
    return s;
}

/* One "section.name=value" into c; scalar: numbers and names only. */
static int set_one(struct pr_conf *c, const char *assignment, int scalar,
                   struct pr_conf_err *err)
{
    struct pr_conf_err dummy;
    const struct entry *e;
    char *copy, *key, *value, *dot;
    const char *section = "";
    int rc;

    if (!err)
        err = &dummy;
    memset(err, 0, sizeof(*err));
    copy = strdup(assignment);
    if (!copy)
        return pr_conf_seterr(err, -ENOMEM, "", "", "out of memory");
    value = strchr(copy, '=');
    if (!value) {
        rc = pr_conf_seterr(err, -EINVAL, "", trim(copy),
                            "expected section.name=value");
        goto out;
    }
    *value++ = '\0';
    value = trim(value);
    key = trim(copy);
    dot = strchr(key, '.');
    if (dot) {
        *dot = '\0';
        section = key;
        key = dot + 1;
    }
    e = lookup(section, key, err);
    if (e && scalar && e->type == T_STR) {
        e = NULL;
        pr_conf_seterr(err, -EINVAL, section, key, "not a number or a name");
    }
    rc = e ? set_value(c, e, value, err) : -EINVAL;
    if (!rc)
        c->set_keys[e - pr_conf_keys] = 1;
out:
    free(copy);
    return rc;
}

int pr_conf_set(struct pr_conf *c, const char *assignment,
                struct pr_conf_err *err)
{
    int rc = set_one(c, assignment, 0, err);
    return rc ? rc : finish(c);
}

int pr_conf_set_scalar(struct pr_conf *c, const char *assignment,
                       struct pr_conf_err *err)
{
    return set_one(c, assignment, 1, err);
}

int pr_conf_parse_hostport(const char *s, char *host, size_t hostlen,
                           uint16_t *port)
{
    const char *colon, *h = s, *hend, *ports;
    unsigned long n;

    if (s[0] == '[') {
        /* "[v6addr]:port", the only form in which the host has colons. */
        h = s + 1;
        hend = strchr(h, ']');
        if (!hend || hend[1] != ':')
            return -EINVAL;
        colon = hend + 1;
    } else {
        colon = strchr(s, ':');
        if (!colon || strchr(colon + 1, ':'))
            return -EINVAL;
        hend = colon;
    }
    if (hend == h)
        return -EINVAL;
    for (const char *q = h; q < hend; q++)
        if (!isgraph((unsigned char)*q) || *q == '[' || *q == ']' ||
            (s[0] != '[' && *q == ':'))
            return -EINVAL;
    ports = colon + 1;
    if (!*ports || strlen(ports) > 5 ||
        strspn(ports, "0123456789") != strlen(ports))
        return -EINVAL;
    n = strtoul(ports, NULL, 10);
    if (n > 65535)
        return -EINVAL;
    if (host) {
        if ((size_t)(hend - h) >= hostlen)
            return -EINVAL;
        memcpy(host, h, (size_t)(hend - h));
        host[hend - h] = '\0';
    }
    if (port)
        *port = (uint16_t)n;
    return 0;
}

int pr_conf_addr_list(const char *s, char (*out)[PR_CONF_ADDR_MAX], size_t max)
{
    size_t k = 0;

    for (const char *p = s;; p++) {
        const char *end = strchr(p, ',');
        if (!end)
            end = p + strlen(p);
        while (p < end && isspace((unsigned char)*p))
            p++;
        const char *q = end;
        while (q > p && isspace((unsigned char)q[-1]))
            q--;
        char one[PR_CONF_ADDR_MAX];
        uint16_t port;
        if (q == p || (size_t)(q - p) >= sizeof(one))
            return -EINVAL;
        memcpy(one, p, (size_t)(q - p));
        one[q - p] = '\0';
        if (pr_conf_parse_hostport(one, NULL, 0, &port) < 0 || port == 0)
            return -EINVAL;
        if (k == max)
            return -E2BIG;
        if (out)
            memcpy(out[k], one, sizeof(one));
        k++;
        if (!*end)
            return (int)k;
        p = end;
    }
}

/*
 * Per-key checks for pr_conf_validate(): the bounds again, because a struct
 * filled in code never saw the setters, and host:port syntax.
 */
int pr_conf_name_ok(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > 63)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (!isgraph((unsigned char)s[i]) || s[i] == '"' || s[i] == '\\')
            return 0;
    return 1;
}

static int check_entry(const struct pr_conf *c, const struct entry *e,
                       struct pr_conf_err *err)
{
    const void *f = cfield(c, e);
    const char *s;
    uint16_t port;

    switch (e->type) {
    case T_STR:
        s = *(char *const *)f;
        if (!s)
            return bad(err, -EINVAL, e, "not set");
        if ((e->flags & F_SOCKPATH) &&
            strlen(s) >= sizeof(((struct sockaddr_un *)0)->sun_path))
            return bad(err, -ENAMETOOLONG, e,
                       "%zu bytes: a Unix socket path has at most %zu",
                       strlen(s),
                       sizeof(((struct sockaddr_un *)0)->sun_path) - 1);
        if ((e->flags & F_SOCKPATH) && !*s)
            return bad(err, -EINVAL, e, "empty path");
        if ((e->flags & F_NAME) && !pr_conf_name_ok(s))
            return bad(err, -EINVAL, e,
                       "'%.64s' is not 1..63 printable bytes without spaces "
                       "or quotes",
                       s);
        if (!(e->flags & F_ADDR) || (!*s && (e->flags & F_EMPTY)))
            return 0;
        if (e->flags & F_LIST) {
            int k = pr_conf_addr_list(s, NULL, PR_SCHED_LIST_MAX);
            if (k == -E2BIG)
                return bad(err, -E2BIG, e, "more than %d addresses",
                           PR_SCHED_LIST_MAX);
            if (k < 0)
                return bad(err, -EINVAL, e,
                           "'%s' is not a list of host:port, port 1..65535", s);
            return 0;
        }
        if (pr_conf_parse_hostport(s, NULL, 0, &port) < 0 ||
            (port == 0 && !(e->flags & F_PORT0)))
            return bad(err, -EINVAL, e, "'%s' is not host:port, port %d..65535",
                       s, (e->flags & F_PORT0) ? 0 : 1);
        return 0;
    case T_ENUM:
        if (pr_name_of(e->names, *(const int *)f))
            return 0;
        return bad(err, -EINVAL, e, "bad value %d", *(const int *)f);
    case T_U32:
        if (*(const uint32_t *)f < e->lo || *(const uint32_t *)f > e->hi)
            return bad(err, -EINVAL, e, "%u is out of range %.0f..%.0f",
                       *(const uint32_t *)f, e->lo, e->hi);
        return 0;
    case T_DBL:
        if (!(*(const double *)f >= e->lo && *(const double *)f <= e->hi))
            return bad(err, -EINVAL, e, "%g is out of range %g..%g",
                       *(const double *)f, e->lo, e->hi);
        return 0;
    }
    return 0;
}

int pr_conf_encrypts(const struct pr_conf *c)
{
    return c->sec_key_file && c->sec_key_file[0] &&
           c->sec_encrypt != PR_ENCRYPT_OFF;
}

int pr_conf_validate(const struct pr_conf *c, struct pr_conf_err *err)
{
    struct pr_conf_err dummy;
    int rc;

    if (!err)
        err = &dummy;
    memset(err, 0, sizeof(*err));
    for (size_t i = 0; i < pr_conf_nkeys; i++) {
        rc = check_entry(c, &pr_conf_keys[i], err);
        if (rc)
            return rc;
    }
    /*
     * The bounds above already hold group_size >= 1, chunk_kb >= 4 and
     * inflight >= 1. Each rule below relates keys that are all reloadable
     * or all fixed, so the mix pr_conf_reload() makes of a valid new file
     * and the fixed keys of the live config is valid too. Keep it that way.
     */
    if (c->sched_group_max != 0 && c->sched_group_min > c->sched_group_max)
        return pr_conf_seterr(err, -EINVAL, "scheduler", "group_min",
                              "group_min %u is above group_max %u",
                              c->sched_group_min, c->sched_group_max);
    if (!(c->sched_window_min_ms <= c->sched_window_ms))
        return pr_conf_seterr(err, -EINVAL, "scheduler", "window_ms",
                              "window_ms %g is below window_min_ms %g",
                              c->sched_window_ms, c->sched_window_min_ms);
    if (!(c->sched_window_ms <= c->sched_window_max_ms))
        return pr_conf_seterr(err, -EINVAL, "scheduler", "window_ms",
                              "window_ms %g is above window_max_ms %g",
                              c->sched_window_ms, c->sched_window_max_ms);
    /*
     * A node is dropped when silent for node_timeout_ms, judged on ticks
     * every heartbeat_ms: its last answer may be a heartbeat old when a
     * tick starts, and a tick up to a heartbeat late still judges (sched.c
     * heartbeat_cb), so three heartbeats leave room for one answer late.
     */
    if (c->sched_node_timeout_ms < 3 * (uint64_t)c->sched_heartbeat_ms)
        return pr_conf_seterr(err, -EINVAL, "scheduler", "node_timeout_ms",
                              "%u ms is less than 3 x heartbeat_ms (%u ms)",
                              c->sched_node_timeout_ms, c->sched_heartbeat_ms);
    /* Sealing needs the key its link keys come from. */
    int keyed = c->sec_key_file && c->sec_key_file[0];
    if (c->sec_encrypt == PR_ENCRYPT_ON && !keyed)
        return pr_conf_seterr(err, -EINVAL, "security", "encrypt",
                              "on needs a security.key_file");
    /* The verbs path lands tensors in clear (docs/operations.md). */
    if (pr_conf_encrypts(c) && c->xport_type == PR_XPORT_RDMA)
        return pr_conf_seterr(err, -EINVAL, "transport", "type",
                              "rdma would carry tensors unencrypted, and "
                              "security.encrypt is on (the default with a "
                              "key): set type = auto or tcp, or encrypt = "
                              "off");
    /* 0 would weigh every stale member 0, 1 makes every level's mass 0. */
    if (!(c->sched_staleness_alpha > 0 && c->sched_staleness_alpha < 1))
        return pr_conf_seterr(err, -EINVAL, "scheduler", "staleness_alpha",
                              "%g is not strictly between 0 and 1",
                              c->sched_staleness_alpha);
    return 0;
}

/* The value as pr_conf_dump() writes it: the setters read it back. */
void pr_conf_format_value(const struct pr_conf *c, const struct entry *e,
                          char *buf, size_t len)
{
    const void *f = cfield(c, e);
    const char *s;
    double d;

    switch (e->type) {
    case T_STR:
        s = *(char *const *)f;
        if (!s)
            s = "";
        /* Quotes keep white space at either end, which INI would strip. */
        if (*s && (isspace((unsigned char)s[0]) || s[0] == '"' ||
                   isspace((unsigned char)s[strlen(s) - 1])))
            snprintf(buf, len, "\"%s\"", s);
        else
            snprintf(buf, len, "%s", s);
        return;
    case T_ENUM:
        if ((s = pr_name_of(e->names, *(const int *)f)))
            snprintf(buf, len, "%s", s);
        else
            snprintf(buf, len, "%d", *(const int *)f);
        return;
    case T_U32:
        snprintf(buf, len, "%u", *(const uint32_t *)f);
        return;
    case T_DBL:
        d = *(const double *)f;
        /* The shortest text that reads back as the same double. */
        for (int prec = 1; prec <= 17; prec++) {
            snprintf(buf, len, "%.*g", prec, d);
            if (strtod(buf, NULL) == d)
                break;
        }
        return;
    }
}

int pr_conf_dump(const struct pr_conf *c, FILE *out)
{
    const char *section = NULL;
    char val[PR_CONF_STR_MAX + 8];

    for (size_t i = 0; i < pr_conf_nkeys; i++) {
        const struct entry *e = &pr_conf_keys[i];
        if (!section || strcmp(section, e->section) != 0) {
            if (*e->section)
                fprintf(out, "%s[%s]\n", section ? "\n" : "", e->section);
            section = e->section;
        }
        pr_conf_format_value(c, e, val, sizeof(val));
        fprintf(out, "; %s%s\n%s = %s\n", e->doc,
                (e->flags & F_RELOAD) ? " (reloadable)" : "", e->name, val);
    }
    if (fflush(out) != 0 || ferror(out))
        return -EIO;
    return 0;
}

/* Exchanges entry e's field between a and b (strings move, not copied). */
void pr_conf_swap_field(struct pr_conf *a, struct pr_conf *b,
                        const struct entry *e)
{
    unsigned char tmp[sizeof(double)]; /* the largest field */
    memcpy(tmp, field(a, e), type_size[e->type]);
    memcpy(field(a, e), field(b, e), type_size[e->type]);
    memcpy(field(b, e), tmp, type_size[e->type]);
}
