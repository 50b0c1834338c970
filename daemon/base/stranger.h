/* SPDX-License-Identifier: MIT */
/*
 * Strangers: the connections a listener has accepted that have not yet
 * finished their hello (or, on the metrics port, sent their request).
 * Anyone who can reach a port can open one, so every listener keeps them
 * in one of these bounded lists, and no number of idle or slow ones can
 * keep a real client out. The rules, for each new connection:
 *
 *  1. Its source is the peer's IP address (TCP) or user id (Unix socket,
 *     SO_PEERCRED). If that source already holds per_source_max strangers,
 *     the oldest of those is the one to make room; else, if the listener
 *     holds max strangers, the oldest of all.
 *  2. That one is closed and the new one admitted, unless it is younger
 *     than PR_STRANGER_GRACE_MS: a real client's hello may be a round trip
 *     away, so under a flood faster than that the new connection is
 *     refused instead (pr_strangers_admit returns -EBUSY) and the ones
 *     already there get their turn.
 *  3. The owner sweeps the list from a timer it runs anyway; each stranger
 *     is closed at since_ms + the listener's hello deadline.
 *  4. A stranger whose hello passes leaves the list (pr_stranger_remove),
 *     as does one whose connection closes; neither counts any more.
 *
 * Real clients say hello within milliseconds of connecting, so one that
 * arrives while idle connections fill the list takes the oldest one's
 * place and is through before a flood could reach it again. A client that
 * has said hello is never a stranger, whatever the list holds.
 *
 * A zeroed struct pr_strangers is an empty list: no init call. Everything
 * runs on the loop thread of the listener that owns the list.
 */
#ifndef PR_STRANGER_H
#define PR_STRANGER_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

/* A stranger younger than this is never closed to make room, ms. */
#define PR_STRANGER_GRACE_MS 100
/* At most one "making room" or "deadline" warning per listener per gap. */
#define PR_STRANGER_LOG_GAP_MS 10000
/* "uid 4294967295", or an IPv6 address in text. */
#define PR_SOURCE_LEN 48

struct pr_stranger;

/*
 * Closes the stranger's connection (status: -EBUSY to make room,
 * -ETIMEDOUT at the deadline). The list has already dropped it.
 */
typedef void (*pr_stranger_close_fn)(struct pr_stranger *st, int status);

/* One per connection, embedded in the owner's per-connection struct. */
struct pr_stranger {
    struct pr_stranger *prev, *next; /* in accept order, oldest first */
    struct pr_strangers *list;       /* NULL: not listed */
    uint64_t since_ms;               /* accepted at, loop time */
    char source[PR_SOURCE_LEN];
    const char *name; /* for logs; owned by the connection */
    pr_stranger_close_fn close;
};

/* What a listener allows; one static const per listener. */
struct pr_stranger_rules {
    const char *what;        /* the listener, for logs */
    const char *awaits;      /* "hello" or "request", for logs */
    unsigned max;            /* strangers at once */
    unsigned per_source_max; /* of them from one source */
};

struct pr_strangers {
    struct pr_stranger *head, *tail;
    unsigned count;
    uint64_t made_room; /* strangers closed for a newer one */
    uint64_t refused;   /* new connections refused (rule 2) */
    uint64_t expired;   /* closed at the deadline */
    /* The last warning of each kind, loop time (0: none yet). */
    uint64_t room_logged_ms, expiry_logged_ms;
    uint64_t room_quiet, expiry_quiet; /* events since, not logged */
};

/*
 * Lists st (its since_ms is now_ms; source, name and close set by the
 * caller), after closing an older stranger if the rules need room. 0, or
 * -EBUSY: st is not listed, and the caller closes the new connection.
 */
int pr_strangers_admit(struct pr_strangers *l,
                       const struct pr_stranger_rules *r,
                       struct pr_stranger *st, uint64_t now_ms);
/* Unlists st (its hello passed, or it closed); unlisted: no-op. */
void pr_stranger_remove(struct pr_stranger *st);
/* Closes every stranger accepted timeout_ms or longer before now_ms. */
void pr_strangers_sweep(struct pr_strangers *l,
                        const struct pr_stranger_rules *r, uint32_t timeout_ms,
                        uint64_t now_ms);
/* Strangers from `source` now listed. */
unsigned pr_strangers_from(const struct pr_strangers *l, const char *source);

/* The source of an accepted TCP connection: its peer's address, or "?". */
void pr_source_tcp(const uv_tcp_t *t, char *buf, size_t len);
/* The source of an accepted Unix socket: "uid N" of its peer, or "?". */
void pr_source_pipe(const uv_pipe_t *p, char *buf, size_t len);

#endif
