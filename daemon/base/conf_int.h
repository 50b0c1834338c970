/* SPDX-License-Identifier: MIT */
/*
 * The config table's row type, shared by conf.c (the parser, checks and
 * dump, all driven by the table), conf_reload.c (SIGHUP: a new file
 * checked whole, then swapped in) and conf_table.c (the table: every key,
 * its type, default, bounds and documentation). conf_reload.c calls
 * conf.c, never the other way. Private to the config: other modules use
 * conf.h.
 */
#ifndef PR_CONF_INT_H
#define PR_CONF_INT_H

#include <stddef.h>

#include "daemon/base/conf.h"

enum type { T_STR, T_ENUM, T_U32, T_DBL };

enum {
    F_RELOAD = 1, /* SIGHUP may change it */
    F_ADDR = 2,   /* T_STR holding host:port, checked by pr_conf_validate() */
    F_EMPTY = 4,  /* F_ADDR: "" is allowed (off, or "same as") */
    F_PORT0 = 8,  /* F_ADDR: port 0 is allowed (listen on any free port) */
    F_SOCKPATH = 16, /* T_STR: a Unix socket path (fits sockaddr_un) */
    F_LIST = 32,     /* F_ADDR: a comma-separated list of them */
    F_NAME = 64,     /* T_STR: 1..63 printable bytes, no space or quote */
};

struct entry {
    const char *section; /* "" for the global keys */
    const char *name;
    enum type type;
    size_t off;                  /* offsetof(struct pr_conf, field) */
    const char *def;             /* default, parsed like a file value */
    double lo, hi;               /* T_U32 and T_DBL bounds, inclusive */
    const struct pr_name *names; /* T_ENUM: the enum's name table */
    int flags;                   /* F_* */
    const char *doc;             /* one line, written by pr_conf_dump() */
};

/* The table, and its rows counted (at most PR_CONF_KEYS_MAX). */
extern const struct entry *const pr_conf_keys;
extern const size_t pr_conf_nkeys;

/*
 * Strings longer than this could not be written back by pr_conf_dump() as a
 * line libinih reads (name + " = " + quotes + value < INI_MAX_LINE).
 */
#define PR_CONF_STR_MAX 160

/* conf.c, for conf_reload.c: "section.name", or "name" for a global key. */
void pr_conf_keyname(char *buf, size_t len, const char *section,
                     const char *name);
/* Fills *err (line 0; the file parser sets it) and returns rc. */
__attribute__((format(printf, 5, 6))) int
pr_conf_seterr(struct pr_conf_err *err, int rc, const char *section,
               const char *name, const char *fmt, ...);
#define bad(err, rc, e, ...)                                                   \
    pr_conf_seterr(err, rc, (e)->section, (e)->name, __VA_ARGS__)
/* The value as pr_conf_dump() writes it: the setters read it back. */
void pr_conf_format_value(const struct pr_conf *c, const struct entry *e,
                          char *buf, size_t len);
/* Exchanges entry e's field between a and b (strings move, not copied). */
void pr_conf_swap_field(struct pr_conf *a, struct pr_conf *b,
                        const struct entry *e);

#endif
