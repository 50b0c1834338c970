/* SPDX-License-Identifier: MIT */
/*
 * preducectl: a person's view of running preduced daemons.
 *
 *   preducectl status [--metrics HOST:PORT]... [--timeout-ms MS]
 *
 * For each daemon, in order: fetch http://HOST:PORT/metrics (the daemon's
 * [metrics] listen address; default 127.0.0.1:9464) with one plain HTTP/1.0
 * request, parse the Prometheus text, and print a table: for a node, its
 * trainers, reduces and bytes by transport; for a scheduler, its workers,
 * groups, group sizes, per-worker versions and rates, and stragglers.
 *
 * HOST is numeric (IPv4, or IPv6 in brackets) or "localhost": no name
 * lookup, so the only waits are on the network, and each daemon's connect,
 * request and answer together must finish within --timeout-ms (2000).
 * Exit status: 0, 1 when a daemon could not be reached or answered badly
 * (after printing the others), 2 for a usage error.
 */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <netdb.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "daemon/base/conf.h"

#define DEFAULT_METRICS    "127.0.0.1:9464"
#define DEFAULT_TIMEOUT_MS 2000
#define MAX_DAEMONS        64
#define MAX_ANSWER         (16u << 20)

struct sample {
    char *name;
    char *labels; /* between the braces, "" when none */
    double value;
};

struct metrics {
    char *text; /* the body; samples point into it */
    struct sample *s;
    size_t n, cap;
};

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* Waits for `events` on fd until the deadline. 0, -ETIMEDOUT or -errno. */
static int wait_fd(int fd, short events, uint64_t deadline_ms)
{
    for (;;) {
        uint64_t now = now_ms();
        if (now >= deadline_ms)
            return -ETIMEDOUT;
        struct pollfd p = {.fd = fd, .events = events};
        int rc = poll(&p, 1, (int)(deadline_ms - now));
        if (rc > 0)
            return 0;
        if (rc == 0)
            return -ETIMEDOUT;
        if (errno != EINTR)
            return -errno;
    }
}

static int connect_to(const char *hostport, uint64_t deadline, int *out,
                      const char **what)
{
    char host[96], ports[8];
    uint16_t port;
    *what = "bad address (HOST:PORT, HOST numeric or localhost)";
    if (pr_conf_parse_hostport(hostport, host, sizeof(host), &port) < 0 ||
        port == 0)
        return -EINVAL;
    if (!strcmp(host, "localhost"))
        snprintf(host, sizeof(host), "127.0.0.1");
    snprintf(ports, sizeof(ports), "%u", port);
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_NUMERICHOST | AI_NUMERICSERV};
    struct addrinfo *ai;
    if (getaddrinfo(host, ports, &hints, &ai) != 0)
        return -EINVAL;
    *what = "cannot connect";
    int fd =
        socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    int rc = fd < 0 ? -errno : 0;
    if (rc == 0 && connect(fd, ai->ai_addr, ai->ai_addrlen) < 0) {
        rc = errno == EINPROGRESS ? wait_fd(fd, POLLOUT, deadline) : -errno;
        int err = 0;
        socklen_t len = sizeof(err);
        if (rc == 0 && getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0)
            rc = -errno;
        else if (rc == 0 && err)
            rc = -err;
    }
    freeaddrinfo(ai);
    if (rc < 0) {
        if (fd >= 0)
            close(fd);
        return rc;
    }
    *out = fd;
    return 0;
}

/*
 * GET /metrics from one daemon; *body (heap, NUL-terminated) on success.
 * 0, or a negative errno with *what saying which step failed.
 */
static int fetch(const char *hostport, int timeout_ms, char **body,
                 const char **what)
{
    uint64_t deadline = now_ms() + (uint64_t)timeout_ms;
    int fd;
    int rc = connect_to(hostport, deadline, &fd, what);
    if (rc < 0)
        return rc;
    char req[256];
    int len = snprintf(req, sizeof(req),
                       "GET /metrics HTTP/1.0\r\nHost: %s\r\n"
                       "User-Agent: preducectl\r\n\r\n",
                       hostport);
    *what = "sending the request";
    for (int off = 0; rc == 0 && off < len;) {
        ssize_t w = send(fd, req + off, (size_t)(len - off), MSG_NOSIGNAL);
        if (w > 0)
            off += (int)w;
        else if (errno == EAGAIN || errno == EINTR)
            rc = wait_fd(fd, POLLOUT, deadline);
        else
            rc = -errno;
    }
    char *buf = NULL;
    size_t n = 0, cap = 0;
    if (rc == 0)
        *what = "reading the answer";
    while (rc == 0) {
        if (cap - n < 4096) {
            cap = cap ? cap * 2 : 65536;
            char *p = cap <= MAX_ANSWER ? realloc(buf, cap + 1) : NULL;
            if (!p) {
                rc = cap > MAX_ANSWER ? -EMSGSIZE : -ENOMEM;
                break;
            }
            buf = p;
        }
        ssize_t r = recv(fd, buf + n, cap - n, 0);
        if (r > 0)
            n += (size_t)r;
        else if (r == 0)
            break;
        else if (errno == EAGAIN || errno == EINTR)
            rc = wait_fd(fd, POLLIN, deadline);
        else
            rc = -errno;
    }
    close(fd);
    if (rc < 0) {
        free(buf);
        return rc;
    }
    buf[n] = '\0';
    *what = "not an HTTP answer with metrics";
    char *end = strstr(buf, "\r\n\r\n");
    int code = 0;
    if (!end || sscanf(buf, "HTTP/1.%*d %d", &code) != 1) {
        free(buf);
        return -EPROTO;
    }
    if (code != 200) {
        *what = code == 404 ? "HTTP 404: no /metrics there"
                            : "the daemon answered with an HTTP error";
        free(buf);
        return -EPROTO;
    }
    memmove(buf, end + 4, n - (size_t)(end + 4 - buf) + 1);
    *body = buf;
    return 0;
}

/* ------------------------------------------------------------------ */
/* Prometheus text                                                      */

/* Parses every sample line; text is modified in place and kept. */
static int parse(char *text, struct metrics *m)
{
    memset(m, 0, sizeof(*m));
    m->text = text;
    for (char *line = text, *next; line && *line; line = next) {
        next = strchr(line, '\n');
        if (next)
            *next++ = '\0';
        if (line[0] == '#' || line[0] == '\0')
            continue;
        struct sample s = {.name = line, .labels = ""};
        char *p = line + strcspn(line, "{ ");
        if (*p == '{') {
            *p++ = '\0';
            s.labels = p;
            /* The closing brace is the first one outside quotes. */
            int quoted = 0;
            for (; *p && (quoted || *p != '}'); p++) {
                if (*p == '\\' && p[1])
                    p++;
                else if (*p == '"')
                    quoted = !quoted;
            }
            if (*p != '}')
                continue;
            *p++ = '\0';
        } else if (*p == ' ') {
            *p++ = '\0';
        } else {
            continue;
        }
        char *e;
        s.value = strtod(p, &e);
        if (e == p)
            continue;
        if (m->n == m->cap) {
            size_t cap = m->cap ? m->cap * 2 : 256;
            struct sample *ns = realloc(m->s, cap * sizeof(*ns));
            if (!ns)
                return -ENOMEM;
            m->s = ns;
            m->cap = cap;
        }
        m->s[m->n++] = s;
    }
    return 0;
}

static void metrics_free(struct metrics *m)
{
    free(m->s);
    free(m->text);
}

/* Copies label `key` of a sample into out (unescaped); 0 or -ENOENT. */
static int label(const struct sample *s, const char *key, char *out,
                 size_t outlen)
{
    size_t klen = strlen(key);
    const char *p = s->labels;
    while (*p) {
        const char *eq = strchr(p, '=');
        if (!eq || eq[1] != '"')
            return -ENOENT;
        int match = (size_t)(eq - p) == klen && !strncmp(p, key, klen);
        size_t o = 0;
        for (p = eq + 2; *p && *p != '"'; p++) {
            char c = *p;
            if (c == '\\' && p[1]) {
                c = *++p == 'n' ? '\n' : *p;
            }
            if (match && o + 1 < outlen)
                out[o++] = c;
        }
        if (match) {
            out[o] = '\0';
            return 0;
        }
        if (*p == '"')
            p++;
        if (*p == ',')
            p++;
    }
    return -ENOENT;
}

/* The first sample `name` with label key == val (key NULL: any); or NULL. */
static const struct sample *find(const struct metrics *m, const char *name,
                                 const char *key, const char *val)
{
    char buf[256];
    for (size_t i = 0; i < m->n; i++) {
        if (strcmp(m->s[i].name, name) != 0)
            continue;
        if (!key ||
            (label(&m->s[i], key, buf, sizeof(buf)) == 0 && !strcmp(buf, val)))
            return &m->s[i];
    }
    return NULL;
}

static double get(const struct metrics *m, const char *name, const char *key,
                  const char *val)
{
    const struct sample *s = find(m, name, key, val);
    return s ? s->value : NAN;
}

/* ------------------------------------------------------------------ */
/* Tables                                                               */

static const char *human_bytes(double b, char *out, size_t len)
{
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int u = 0;
    while (b >= 1024 && u < 4) {
        b /= 1024;
        u++;
    }
    snprintf(out, len, u ? "%.1f %s" : "%.0f %s", b, units[u]);
    return out;
}

/*
 * The preduce_worker_version samples in rank order, in rows[] (heap, free
 * it); *width gets the widest worker name, at least min. How many, or -1.
 */
static long rank_of(const struct sample *s)
{
    char r[32];
    return label(s, "rank", r, sizeof(r)) == 0 ? strtol(r, NULL, 10) : -1;
}

static int cmp_rank(const void *a, const void *b)
{
    long x = rank_of(*(const struct sample *const *)a);
    long y = rank_of(*(const struct sample *const *)b);
    return x < y ? -1 : x > y;
}

static long worker_rows(const struct metrics *m, int min,
                        const struct sample ***rows, int *width)
{
    const struct sample **r = calloc(m->n ? m->n : 1, sizeof(*r));
    if (!r)
        return -1;
    size_t n = 0;
    *width = min;
    for (size_t k = 0; k < m->n; k++) {
        char wn[128];
        if (strcmp(m->s[k].name, "preduce_worker_version") != 0 ||
            label(&m->s[k], "worker", wn, sizeof(wn)) < 0)
            continue;
        r[n++] = &m->s[k];
        if ((int)strlen(wn) > *width)
            *width = (int)strlen(wn);
    }
    qsort(r, n, sizeof(*r), cmp_rank);
    *rows = r;
    return (long)n;
}

/*
 * The per-worker gauges by rank, gathered in one pass over the samples:
 * a search per worker and gauge would be quadratic in the workers (4000
 * took 6 s). v[g][rank] is NAN where a worker has no such sample.
 */
enum { WG_RATE, WG_STEP, WG_STALE, WG_STEPS, WG_STRAGGLER, WG_N };
static const char *const wg_names[WG_N] = {
    "preduce_worker_update_rate", "preduce_worker_step_seconds",
    "preduce_worker_staleness", "preduce_worker_steps_total",
    "preduce_worker_straggler"};

struct wgauges {
    double *v[WG_N];
    long nranks;
};

static void wgauges_free(struct wgauges *g)
{
    for (int i = 0; i < WG_N; i++)
        free(g->v[i]);
}

/* For ranks 0..nranks-1. 0, or -ENOMEM. */
static int wgauges_build(const struct metrics *m, long nranks,
                         struct wgauges *g)
{
    memset(g, 0, sizeof(*g));
    g->nranks = nranks;
    for (int i = 0; i < WG_N; i++) {
        if (!(g->v[i] =
                  malloc((size_t)(nranks ? nranks : 1) * sizeof(double)))) {
            wgauges_free(g);
            return -ENOMEM;
        }
        for (long r = 0; r < nranks; r++)
            g->v[i][r] = NAN;
    }
    for (size_t k = 0; k < m->n; k++) {
        if (strncmp(m->s[k].name, "preduce_worker_", 15) != 0)
            continue;
        for (int i = 0; i < WG_N; i++) {
            long r;
            if (strcmp(m->s[k].name, wg_names[i]) == 0 &&
                (r = rank_of(&m->s[k])) >= 0 && r < nranks) {
                g->v[i][r] = m->s[k].value;
                break;
            }
        }
    }
    return 0;
}

static double wg(const struct wgauges *g, int i, long rank)
{
    return rank >= 0 && rank < g->nranks ? g->v[i][rank] : NAN;
}

static void print_node(const struct metrics *m, const struct sample *info,
                       const char *addr)
{
    char name[128] = "?", job[128] = "?", id[32] = "?";
    label(info, "name", name, sizeof(name));
    label(info, "job", job, sizeof(job));
    label(info, "node_id", id, sizeof(id));
    printf("node %s (job %s, node id %s) at %s\n", name, job, id, addr);
    printf("  scheduler link   %s\n",
           get(m, "preduce_node_scheduler_up", NULL, NULL) == 1 ? "up"
                                                                : "down");
    printf("  trainers         %.0f\n",
           get(m, "preduce_node_trainers", NULL, NULL));
    double cnt = get(m, "preduce_node_reduce_seconds_count", NULL, NULL);
    double sum = get(m, "preduce_node_reduce_seconds_sum", NULL, NULL);
    printf("  reduces          %.0f ok, %.0f failed",
           get(m, "preduce_node_reduces_total", "status", "ok"),
           get(m, "preduce_node_reduces_total", "status", "failed"));
    if (cnt > 0)
        printf(", mean %.2f ms", sum / cnt * 1000);
    printf("\n  groups           %.0f ok, %.0f failed, %.0f running\n",
           get(m, "preduce_node_groups_total", "status", "ok"),
           get(m, "preduce_node_groups_total", "status", "failed"),
           get(m, "preduce_node_groups_running", NULL, NULL));
    static const char *const xports[] = {"tcp", "rdma"};
    for (int i = 0; i < 2; i++) {
        char sent[32], recvd[32];
        double s = 0, r = 0;
        for (size_t k = 0; k < m->n; k++) {
            char t[16], d[16];
            if (strcmp(m->s[k].name, "preduce_node_bytes_total") != 0 ||
                label(&m->s[k], "transport", t, sizeof(t)) < 0 ||
                label(&m->s[k], "direction", d, sizeof(d)) < 0 ||
                strcmp(t, xports[i]) != 0)
                continue;
            if (!strcmp(d, "sent"))
                s = m->s[k].value;
            else
                r = m->s[k].value;
        }
        printf("  bytes %-4s       %s sent, %s received\n", xports[i],
               human_bytes(s, sent, sizeof(sent)),
               human_bytes(r, recvd, sizeof(recvd)));
    }
    printf("  peer links up    %.0f%s\n",
           get(m, "preduce_node_links_up", NULL, NULL),
           get(m, "preduce_node_rdma", NULL, NULL) == 1 ? " (RDMA device open)"
                                                        : "");
    const struct sample **rows;
    int w;
    long nrows = worker_rows(m, 7, &rows, &w);
    if (nrows > 0)
        printf("  %-*s  %5s  %8s\n", w, "trainer", "rank", "version");
    for (long k = 0; k < nrows; k++) {
        char wn[128] = "?", rank[32] = "?";
        label(rows[k], "worker", wn, sizeof(wn));
        label(rows[k], "rank", rank, sizeof(rank));
        printf("  %-*s  %5s  %8.0f\n", w, wn, rank, rows[k]->value);
    }
    if (nrows >= 0)
        free(rows);
}

/* "4: 47 groups, 2: 3" from the cumulative size histogram. */
static void print_sizes(const struct metrics *m)
{
    double prev = 0, prev_le = 0;
    int any = 0;
    printf("  group sizes     ");
    for (size_t k = 0; k < m->n; k++) {
        char le[16];
        if (strcmp(m->s[k].name, "preduce_sched_group_size_bucket") != 0 ||
            label(&m->s[k], "le", le, sizeof(le)) < 0)
            continue;
        double cur = m->s[k].value, hi = strtod(le, NULL);
        if (cur > prev) {
            if (!strcmp(le, "+Inf"))
                printf("%s>%.0f: %.0f", any ? ", " : " ", prev_le, cur - prev);
            else if (hi == prev_le + 1)
                printf("%s%.0f: %.0f", any ? ", " : " ", hi, cur - prev);
            else
                printf("%s%.0f-%.0f: %.0f", any ? ", " : " ", prev_le + 1, hi,
                       cur - prev);
            any = 1;
        }
        prev = cur;
        prev_le = hi;
    }
    printf("%s\n", any ? "" : " none yet");
}

static void print_sched(const struct metrics *m, const struct sample *info,
                        const char *addr)
{
    char job[128] = "?";
    label(info, "job", job, sizeof(job));
    printf("scheduler (job %s) at %s\n", job, addr);
    printf("  nodes            %.0f\n",
           get(m, "preduce_sched_nodes", NULL, NULL));
    printf("  workers          %.0f live, %.0f waiting for a group\n",
           get(m, "preduce_sched_workers_live", NULL, NULL),
           get(m, "preduce_sched_workers_queued", NULL, NULL));
    double groups = get(m, "preduce_sched_groups_total", NULL, NULL);
    double members = get(m, "preduce_sched_member_updates_total", NULL, NULL);
    printf("  groups           %.0f formed", groups);
    if (groups > 0)
        printf(", mean size %.1f", members / groups);
    printf("\n");
    print_sizes(m);
    printf("  stragglers      ");
    int any = 0;
    for (size_t k = 0; k < m->n; k++) {
        char wn[128];
        if (!strcmp(m->s[k].name, "preduce_worker_straggler") &&
            m->s[k].value == 1 &&
            label(&m->s[k], "worker", wn, sizeof(wn)) == 0) {
            printf("%s%s", any ? ", " : " ", wn);
            any = 1;
        }
    }
    printf("%s\n", any ? "" : " none");

    const struct sample **rows;
    int w;
    long nrows = worker_rows(m, 6, &rows, &w);
    struct wgauges wgs;
    /* Rows are in rank order: the last has the highest rank. */
    long nranks = nrows > 0 ? rank_of(rows[nrows - 1]) + 1 : 0;
    if (nrows > 0 && wgauges_build(m, nranks > 0 ? nranks : 0, &wgs) < 0) {
        fprintf(stderr, "preducectl: out of memory\n");
        free(rows);
        return;
    }
    if (nrows > 0)
        printf("  %-*s  %5s  %4s  %8s  %5s  %8s  %9s  %8s\n", w, "worker",
               "rank", "node", "version", "stale", "steps", "updates/s",
               "step ms");
    for (long k = 0; k < nrows; k++) {
        char wn[128] = "?", rank[32] = "?", node[32] = "?", rate[32] = "-",
             step[32] = "-";
        label(rows[k], "worker", wn, sizeof(wn));
        label(rows[k], "rank", rank, sizeof(rank));
        label(rows[k], "node", node, sizeof(node));
        long rk = rank_of(rows[k]);
        double r = wg(&wgs, WG_RATE, rk);
        double s = wg(&wgs, WG_STEP, rk);
        if (!isnan(r))
            snprintf(rate, sizeof(rate), "%.1f", r);
        if (!isnan(s))
            snprintf(step, sizeof(step), "%.1f", s * 1000);
        printf("  %-*s  %5s  %4s  %8.0f  %5.0f  %8.0f  %9s  %8s%s\n", w, wn,
               rank, node, rows[k]->value, wg(&wgs, WG_STALE, rk),
               wg(&wgs, WG_STEPS, rk), rate, step,
               wg(&wgs, WG_STRAGGLER, rk) == 1 ? "  straggler" : "");
    }
    if (nrows > 0)
        wgauges_free(&wgs);
    if (nrows >= 0)
        free(rows);
}

/* Fetches and prints one daemon. 0, or 1 after a message on stderr. */
static int status_one(const char *addr, int timeout_ms)
{
    char *body = NULL;
    const char *what = "";
    int rc = fetch(addr, timeout_ms, &body, &what);
    if (rc < 0) {
        fprintf(stderr, "preducectl: %s: %s: %s\n", addr, what,
                rc == -ETIMEDOUT ? "no answer in time"
                : rc == -EPROTO  ? "bad answer"
                                 : strerror(-rc));
        return 1;
    }
    struct metrics m;
    if (parse(body, &m) < 0) {
        fprintf(stderr, "preducectl: %s: out of memory\n", addr);
        metrics_free(&m);
        return 1;
    }
    const struct sample *info = find(&m, "preduce_info", NULL, NULL);
    char role[32] = "";
    if (info)
        label(info, "role", role, sizeof(role));
    rc = 0;
    if (!strcmp(role, "node")) {
        print_node(&m, info, addr);
    } else if (!strcmp(role, "scheduler")) {
        print_sched(&m, info, addr);
    } else {
        fprintf(stderr,
                "preducectl: %s: no preduce_info metric: not a "
                "preduced metrics endpoint\n",
                addr);
        rc = 1;
    }
    metrics_free(&m);
    return rc;
}

static void usage(FILE *f)
{
    fprintf(f,
            "usage: preducectl status [--metrics HOST:PORT]... "
            "[--timeout-ms MS]\n"
            "Shows the state of running preduced daemons, read from their\n"
            "metrics endpoints ([metrics] listen in preduced.conf).\n"
            "\n"
            "  --metrics HOST:PORT  a daemon's metrics address; repeat for\n"
            "                       several (default " DEFAULT_METRICS ").\n"
            "                       HOST: an IP address or localhost\n"
            "  --timeout-ms MS      limit per daemon for connect, request\n"
            "                       and answer (%d)\n"
            "  -h, --help           this text\n"
            "Exit status: 0; 1 if a daemon could not be reached; 2 on a\n"
            "usage error.\n",
            DEFAULT_TIMEOUT_MS);
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"metrics", required_argument, NULL, 'm'},
        {"timeout-ms", required_argument, NULL, 't'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    if (argc >= 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
        usage(stdout);
        return 0;
    }
    if (argc < 2 || strcmp(argv[1], "status") != 0) {
        fprintf(stderr, "preducectl: %s%s\n",
                argc < 2 ? "a command is needed" : "unknown command ",
                argc < 2 ? "" : argv[1]);
        usage(stderr);
        return 2;
    }
    const char *addrs[MAX_DAEMONS];
    int naddrs = 0, timeout_ms = DEFAULT_TIMEOUT_MS, c;
    char *end;
    long v;
    while ((c = getopt_long(argc - 1, argv + 1, "m:t:h", opts, NULL)) != -1) {
        switch (c) {
        case 'm':
            if (naddrs == MAX_DAEMONS) {
                fprintf(stderr, "preducectl: more than %d --metrics\n",
                        MAX_DAEMONS);
                return 2;
            }
            addrs[naddrs++] = optarg;
            break;
        case 't':
            v = strtol(optarg, &end, 10);
            if (*end || v < 1 || v > 600000) {
                fprintf(stderr,
                        "preducectl: --timeout-ms %s: must be 1..600000\n",
                        optarg);
                return 2;
            }
            timeout_ms = (int)v;
            break;
        case 'h':
            usage(stdout);
            return 0;
        default:
            usage(stderr);
            return 2;
        }
    }
    if (optind < argc - 1) {
        fprintf(stderr, "preducectl: unexpected argument '%s'\n",
                argv[optind + 1]);
        return 2;
    }
    if (naddrs == 0)
        addrs[naddrs++] = DEFAULT_METRICS;
    int failed = 0;
    for (int i = 0; i < naddrs; i++) {
        if (i > 0)
            printf("\n");
        failed |= status_one(addrs[i], timeout_ms);
        fflush(stdout);
    }
    return failed;
}
