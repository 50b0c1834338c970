/* SPDX-License-Identifier: MIT */
#include "daemon/base/stranger.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#include "daemon/base/log.h"

static void unlink_st(struct pr_strangers *l, struct pr_stranger *st)
{
    if (st->prev)
        st->prev->next = st->next;
    else
        l->head = st->next;
    if (st->next)
        st->next->prev = st->prev;
    else
        l->tail = st->prev;
    st->prev = st->next = NULL;
    st->list = NULL;
    l->count--;
}

void pr_stranger_remove(struct pr_stranger *st)
{
    if (st->list)
        unlink_st(st->list, st);
}

unsigned pr_strangers_from(const struct pr_strangers *l, const char *source)
{
    unsigned n = 0;
    for (const struct pr_stranger *o = l->head; o; o = o->next)
        n += strcmp(o->source, source) == 0;
    return n;
}

/*
 * A flood would otherwise write a log line per connection: the first
 * event of a kind is logged, then at most one per PR_STRANGER_LOG_GAP_MS;
 * `more` then says how many went unlogged in between.
 */
static int may_log(uint64_t *logged_ms, uint64_t *quiet, uint64_t now_ms,
                   char *more, size_t more_len)
{
    if (*logged_ms != 0 && now_ms - *logged_ms < PR_STRANGER_LOG_GAP_MS) {
        (*quiet)++;
        return 0;
    }
    more[0] = '\0';
    if (*quiet)
        snprintf(more, more_len, "; %llu more like it not logged",
                 (unsigned long long)*quiet);
    *quiet = 0;
    *logged_ms = now_ms ? now_ms : 1;
    return 1;
}

/* The oldest stranger from `source`, or of all with source NULL. */
static struct pr_stranger *oldest(struct pr_strangers *l, const char *source)
{
    struct pr_stranger *o = l->head;
    while (o && source && strcmp(o->source, source) != 0)
        o = o->next;
    return o;
}

int pr_strangers_admit(struct pr_strangers *l,
                       const struct pr_stranger_rules *r,
                       struct pr_stranger *st, uint64_t now_ms)
{
    struct pr_stranger *victim = NULL;
    unsigned mine = pr_strangers_from(l, st->source);
    if (mine >= r->per_source_max)
        victim = oldest(l, st->source);
    else if (l->count >= r->max)
        victim = oldest(l, NULL);
    if (victim) {
        char more[64];
        if (now_ms - victim->since_ms < PR_STRANGER_GRACE_MS) {
            l->refused++;
            if (may_log(&l->room_logged_ms, &l->room_quiet, now_ms, more,
                        sizeof(more)))
                pr_warn("%s: %u connections without a %s, %u from %s, none "
                        "older than %d ms: refusing a new one (%llu so "
                        "far%s)",
                        r->what, l->count, r->awaits, mine, st->source,
                        PR_STRANGER_GRACE_MS, (unsigned long long)l->refused,
                        more);
            return -EBUSY;
        }
        l->made_room++;
        if (may_log(&l->room_logged_ms, &l->room_quiet, now_ms, more,
                    sizeof(more)))
            pr_warn("%s: %u connections without a %s, %u from %s: closing "
                    "the oldest%s (%s) for a new one (%llu so far%s)",
                    r->what, l->count, r->awaits, mine, st->source,
                    victim == oldest(l, NULL) ? "" : " from there",
                    victim->name ? victim->name : "?",
                    (unsigned long long)l->made_room, more);
        unlink_st(l, victim);
        victim->close(victim, -EBUSY);
    }
    st->since_ms = now_ms;
    st->list = l;
    st->next = NULL;
    st->prev = l->tail;
    if (l->tail)
        l->tail->next = st;
    else
        l->head = st;
    l->tail = st;
    l->count++;
    return 0;
}

void pr_strangers_sweep(struct pr_strangers *l,
                        const struct pr_stranger_rules *r, uint32_t timeout_ms,
                        uint64_t now_ms)
{
    /* Oldest first: the sweep stops at the first one still in time. */
    while (l->head && now_ms - l->head->since_ms >= timeout_ms) {
        struct pr_stranger *st = l->head;
        char more[64];
        l->expired++;
        if (may_log(&l->expiry_logged_ms, &l->expiry_quiet, now_ms, more,
                    sizeof(more)))
            pr_warn("%s: no %s within %u ms: closing (%s: %llu so far%s)",
                    st->name ? st->name : "?", r->awaits, timeout_ms, r->what,
                    (unsigned long long)l->expired, more);
        unlink_st(l, st);
        st->close(st, -ETIMEDOUT);
    }
}

void pr_source_tcp(const uv_tcp_t *t, char *buf, size_t len)
{
    struct sockaddr_storage ss;
    int n = sizeof(ss);
    snprintf(buf, len, "?");
    if (uv_tcp_getpeername(t, (struct sockaddr *)&ss, &n) != 0)
        return;
    if (ss.ss_family == AF_INET6)
        uv_ip6_name((const struct sockaddr_in6 *)&ss, buf, len);
    else if (ss.ss_family == AF_INET)
        uv_ip4_name((const struct sockaddr_in *)&ss, buf, len);
}

void pr_source_pipe(const uv_pipe_t *p, char *buf, size_t len)
{
    uv_os_fd_t fd;
    struct ucred cr;
    socklen_t n = sizeof(cr);
    snprintf(buf, len, "?");
    if (uv_fileno((const uv_handle_t *)p, &fd) != 0 ||
        getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &n) != 0)
        return;
    snprintf(buf, len, "uid %u", (unsigned)cr.uid);
}
