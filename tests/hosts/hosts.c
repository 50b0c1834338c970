/* SPDX-License-Identifier: MIT */
#include "tests/hosts/hosts.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static const char *net_sh(void)
{
    const char *p = getenv("PREDUCE_HOSTS_NET");
    return p ? p : "tests/hosts/net.sh";
}

int hh_net(const struct hh *h, const char *fmt, ...)
{
    char args[512], cmd[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof(args), fmt, ap);
    va_end(ap);
    /* The command's first word, then the prefix, then the rest. */
    const char *rest = strchr(args, ' ');
    int wlen = rest ? (int)(rest - args) : (int)strlen(args);
    snprintf(cmd, sizeof(cmd), "timeout 20 %s %.*s %s%s", net_sh(), wlen, args,
             h->prefix, rest ? rest : "");
    int rc = system(cmd);
    if (rc != 0) {
        fprintf(stderr, "hosts: '%s' failed (%d)\n", cmd, rc);
        return -EIO;
    }
    return 0;
}

void hh_addr(int i, char *buf, size_t len)
{
    snprintf(buf, len, "10.77.0.%d", i + 1);
}

int hh_up(struct hh *h, int nhosts)
{
    memset(h, 0, sizeof(*h));
    const char *pre = getenv("PREDUCE_HOSTS_PREFIX");
    char own[32];
    if (!pre) {
        snprintf(own, sizeof(own), "prh%d", (int)getpid());
        pre = own;
    }
    snprintf(h->prefix, sizeof(h->prefix), "%.20s-%d", pre, (int)getpid());
    h->nhosts = nhosts;
    h->route = -1;
    snprintf(h->dir, sizeof(h->dir), "/tmp/preduce-hosts-XXXXXX");
    if (!mkdtemp(h->dir)) {
        int rc = -errno;
        fprintf(stderr, "hosts: mkdtemp: %s\n", strerror(errno));
        h->dir[0] = '\0';
        return rc;
    }
    hh_net(h, "down"); /* a previous test of the same pid */
    return hh_net(h, "up %d", nhosts);
}

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static const char *relay_path(void)
{
    const char *p = getenv("PREDUCE_HOSTS_RELAY");
    return p ? p : "build/tests/hosts/relay";
}

void hh_relay_log(const struct hh *h, int k, char *buf, size_t len)
{
    snprintf(buf, len, "%s/relay%d.log", h->dir, k);
}

int hh_relay_add(struct hh *h, int host, uint16_t port, uint16_t target_port,
                 int delay_ms, int window_kb)
{
    if (h->nrelays == HH_MAX_RELAYS)
        return -ENOSPC;
    struct hh_relay *r = &h->relay[h->nrelays];
    *r = (struct hh_relay){.host = host,
                           .port = port,
                           .target_port = target_port,
                           .delay_ms = delay_ms,
                           .window_kb = window_kb};
    return h->nrelays++;
}

/* How many lines of file `path` hold `s` (0 when there is no file). */
static int count_lines(const char *path, const char *s)
{
    FILE *f = fopen(path, "r");
    char line[512];
    int n = 0;
    while (f && fgets(line, sizeof(line), f))
        n += strstr(line, s) != NULL;
    if (f)
        fclose(f);
    return n;
}

static void dump(const char *path)
{
    FILE *f = fopen(path, "r");
    char line[512];
    fprintf(stderr, "---- %s ----\n", path);
    while (f && fgets(line, sizeof(line), f))
        fputs(line, stderr);
    if (f)
        fclose(f);
}

/*
 * The child: into the host's namespace, its log as stderr, exec. It dies
 * with the test (PDEATHSIG), as the harness's daemons do.
 */
static void relay_exec(const struct hh *h, int k, pid_t parent)
{
    const struct hh_relay *r = &h->relay[k];
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent)
        _exit(127);
    char log[128], ns[96], listen[48], target[48], delay[16], window[16];
    hh_relay_log(h, k, log, sizeof(log));
    int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (fd >= 0) {
        dup2(fd, STDOUT_FILENO);
        dup2(fd, STDERR_FILENO);
        close(fd);
    }
    snprintf(ns, sizeof(ns), "/run/netns/%s-h%d", h->prefix, r->host);
    int nfd = open(ns, O_RDONLY | O_CLOEXEC);
    if (nfd < 0 || setns(nfd, CLONE_NEWNET) < 0) {
        fprintf(stderr, "hosts: setns(%s): %s\n", ns, strerror(errno));
        _exit(126);
    }
    close(nfd);
    char addr[32];
    hh_addr(r->host, addr, sizeof(addr));
    snprintf(listen, sizeof(listen), "%s:%u", addr, r->port);
    snprintf(target, sizeof(target), "%s:%u", addr, r->target_port);
    snprintf(delay, sizeof(delay), "%d", r->delay_ms);
    snprintf(window, sizeof(window), "%d", r->window_kb);
    execl(relay_path(), relay_path(), listen, target, delay, window,
          (char *)NULL);
    fprintf(stderr, "hosts: exec %s: %s\n", relay_path(), strerror(errno));
    _exit(127);
}

int hh_relay_start(struct hh *h, int k)
{
    struct hh_relay *r = &h->relay[k];
    if (k < 0 || k >= h->nrelays || r->pid > 0)
        return -EINVAL;
    char log[128];
    hh_relay_log(h, k, log, sizeof(log));
    /* A restart: the log goes on, so count the "listening" lines. */
    static const char ready[] = "relay: listening on ";
    int before = count_lines(log, ready);
    pid_t parent = getpid();
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0)
        return -errno;
    if (pid == 0)
        relay_exec(h, k, parent);
    r->pid = pid;
    for (int i = 0; i < 500; i++) {
        if (count_lines(log, ready) > before)
            return 0;
        int st;
        if (waitpid(pid, &st, WNOHANG) == pid) {
            r->pid = 0;
            fprintf(stderr, "hosts: relay %d exited (status %d)\n", k, st);
            dump(log);
            return -EIO;
        }
        sleep_ms(10);
    }
    fprintf(stderr, "hosts: relay %d did not listen within 5 s\n", k);
    dump(log);
    hh_relay_kill(h, k);
    return -ETIMEDOUT;
}

int hh_relay_conns(const struct hh *h, int k, struct hh_relay_conn *v, int max)
{
    char log[128], line[512];
    hh_relay_log(h, k, log, sizeof(log));
    FILE *f = fopen(log, "r");
    if (!f)
        return -errno;
    int n = 0;
    while (fgets(line, sizeof(line), f)) {
        unsigned long id;
        char peer[64];
        const char *tail;
        if (strstr(line, "relay: listening on ")) {
            n = 0; /* started again: its connections begin anew */
        } else if (strstr(line, " opened") &&
                   sscanf(line, "relay: connection %lu from %63s", &id, peer) ==
                       2) {
            if (n < max) {
                v[n] = (struct hh_relay_conn){.id = id};
                snprintf(v[n].peer, sizeof(v[n].peer), "%s", peer);
            }
            n++;
        } else if ((tail = strstr(line, " closed (")) &&
                   sscanf(line, "relay: connection %lu", &id) == 1) {
            tail = strstr(tail, "): ");
            for (int j = 0; tail && j < n && j < max; j++) {
                if (v[j].id != id)
                    continue;
                v[j].closed = 1;
                if (sscanf(tail, "): %llu bytes up, %llu down", &v[j].up,
                           &v[j].down) != 2)
                    v[j].up = v[j].down = 0;
            }
        }
    }
    fclose(f);
    return n;
}

void hh_relay_kill(struct hh *h, int k)
{
    struct hh_relay *r = &h->relay[k];
    if (r->pid <= 0)
        return;
    kill(r->pid, SIGKILL);
    waitpid(r->pid, NULL, 0);
    r->pid = 0;
}

int hh_route(struct hh *h, int host, int delay_ms, int window_kb)
{
    int k = hh_relay_add(h, host, HH_RELAY_PORT, 0, delay_ms, window_kb);
    if (k >= 0) {
        h->route = k;
        h->route_host = host;
    }
    return k;
}

#define MAX_SETS 32

/*
 * h_cluster_start_at's steps, with node.data_advertise for the routed
 * host and its relay started once its data port is known; each node has
 * joined before the next starts, so that their ids follow host order.
 */
static int start_routed(struct hh *h, const struct h_place *at,
                        const char *const *sched_sets,
                        const char *const *node_sets)
{
    struct h_cluster *c = &h->c;
    struct hh_relay *r = &h->relay[h->route];
    memset(c, 0, sizeof(*c));
    c->sched_at = at[0];
    for (int i = 0; i < h->nhosts; i++)
        c->node_at[i] = at[i];
    snprintf(c->dir, sizeof(c->dir), "/tmp/preduce-test-XXXXXX");
    if (!mkdtemp(c->dir))
        return -errno;
    c->sched_port = h_free_port();
    int rc = h_sched_start(c, sched_sets);
    if (rc < 0)
        return rc;
    c->nnodes = h->nhosts;
    char advertise[96];
    snprintf(advertise, sizeof(advertise), "node.data_advertise=%s:%u",
             at[h->route_host].addr, r->port);
    for (int i = 0; i < h->nhosts; i++) {
        const char *sets[MAX_SETS + 2];
        int n = 0;
        for (; node_sets && node_sets[n] && n < MAX_SETS; n++)
            sets[n] = node_sets[n];
        if (i == h->route_host)
            sets[n++] = advertise;
        sets[n] = NULL;
        rc = h_node_start(c, i, sets);
        if (rc < 0)
            return rc;
        if (i == h->route_host) {
            r->target_port = c->node_port[i];
            rc = hh_relay_start(h, h->route);
            if (rc < 0)
                return rc;
        }
        char who[16];
        snprintf(who, sizeof(who), "node%d", i);
        for (int t = 0; t < 500 && !h_log_contains(c, who, "joined job"); t++)
            sleep_ms(10);
        if (!h_log_contains(c, who, "joined job")) {
            fprintf(stderr, "hosts: %s did not join within 5 s\n", who);
            h_log_dump(c, who);
            return -ETIMEDOUT;
        }
    }
    return 0;
}

int hh_start(struct hh *h, const char *const *sched_sets,
             const char *const *node_sets)
{
    struct h_place at[H_MAX_NODES];
    if (h->nhosts > H_MAX_NODES)
        return -EINVAL;
    memset(at, 0, sizeof(at));
    for (int i = 0; i < h->nhosts; i++) {
        snprintf(at[i].netns, sizeof(at[i].netns), "%s-h%d", h->prefix, i);
        hh_addr(i, at[i].addr, sizeof(at[i].addr));
    }
    if (h->route >= 0)
        return start_routed(h, at, sched_sets, node_sets);
    return h_cluster_start_at(&h->c, h->nhosts, &at[0], at, sched_sets,
                              node_sets);
}

int hh_stop(struct hh *h)
{
    int bad = h->c.dir[0] ? h_cluster_stop(&h->c) : 0;
    memset(&h->c, 0, sizeof(h->c));
    /*
     * The routed relay forwards to this run's data port: it goes too,
     * once it has logged the end of every connection (up to 2 s), so that
     * a test can read what each carried.
     */
    if (h->route >= 0 && h->relay[h->route].pid > 0) {
        struct hh_relay_conn v[64];
        for (int i = 0; i < 200; i++) {
            int n = hh_relay_conns(h, h->route, v, 64), open = 0;
            for (int j = 0; j < n && j < 64; j++)
                open += !v[j].closed;
            if (open == 0)
                break;
            sleep_ms(10);
        }
        hh_relay_kill(h, h->route);
    }
    return bad;
}

int hh_down(struct hh *h)
{
    int bad = hh_stop(h);
    for (int k = 0; k < h->nrelays; k++)
        hh_relay_kill(h, k);
    hh_net(h, "down");
    if (h->dir[0] && !getenv("PREDUCE_KEEP_LOGS")) {
        char cmd[128];
        snprintf(cmd, sizeof(cmd), "rm -rf '%s'", h->dir);
        if (system(cmd) != 0)
            fprintf(stderr, "hosts: could not remove %s\n", h->dir);
    }
    return bad;
}
