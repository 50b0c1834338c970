/* SPDX-License-Identifier: MIT */
#include "tests/integration/harness.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <netinet/in.h>
#include <sched.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "preduce.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

double h_now(void)
{
    return now_s();
}

/*
 * Moves this process (or thread) into network namespace `name`
 * (/run/netns/NAME, as `ip netns add` makes it); an empty name stays.
 * 0 or -errno.
 */
static int enter_netns(const char *name)
{
    if (!name || !name[0])
        return 0;
    char path[128];
    snprintf(path, sizeof(path), "/run/netns/%s", name);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    int rc = setns(fd, CLONE_NEWNET) < 0 ? -errno : 0;
    close(fd);
    return rc;
}

/* The address of a place, 127.0.0.1 when it has none. */
static const char *place_addr(const struct h_place *p)
{
    return p->addr[0] ? p->addr : "127.0.0.1";
}

/* 0 when `port` (0: any) can be bound on 127.0.0.1 now; *got: which. */
static int try_bind(uint16_t port, uint16_t *got)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(sa);
    int rc = fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 ||
                     getsockname(fd, (struct sockaddr *)&sa, &len) < 0
                 ? -1
                 : 0;
    if (fd >= 0)
        close(fd);
    *got = ntohs(sa.sin_port);
    return rc;
}

/*
 * Whether `p` was handed out already by this process. A pick is only
 * checked, and bound later by a daemon, so two picks made before either
 * daemon binds would otherwise be free to coincide: one daemon then fails
 * with "address already in use" (a test starts a scheduler, a relay and
 * nodes with a data and a metrics port each, all picked ahead).
 */
static bool port_given(uint16_t p)
{
    static uint16_t given[1024];
    static unsigned n;
    unsigned have = n < 1024 ? n : 1024;
    for (unsigned i = 0; i < have; i++)
        if (given[i] == p)
            return true;
    given[n++ % 1024] = p;
    return false;
}

/*
 * The port is only checked, and bound later by a daemon: one from the
 * kernel's ephemeral range could meanwhile become the local port of some
 * outgoing connection (the daemons make several). So a random port just
 * below that range, where the kernel never picks one on its own; the
 * ephemeral pick is the fallback.
 */
uint16_t h_free_port(void)
{
    static unsigned seed;
    unsigned lo = 32768, hi;
    FILE *f = fopen("/proc/sys/net/ipv4/ip_local_port_range", "r");
    if (f) {
        if (fscanf(f, "%u %u", &lo, &hi) != 2)
            lo = 32768;
        fclose(f);
    }
    if (!seed)
        seed = (unsigned)getpid() ^ (unsigned)(now_s() * 1e6);
    uint16_t got;
    if (lo > 4096) {
        unsigned span = lo - 2048 < 16384 ? lo - 2048 : 16384;
        for (int i = 0; i < 64; i++) {
            uint16_t p = (uint16_t)(lo - 1 - rand_r(&seed) % span);
            if (try_bind(p, &got) == 0 && !port_given(p))
                return p;
        }
    }
    for (int i = 0; i < 8; i++)
        if (try_bind(0, &got) == 0 && !port_given(got))
            return got;
    return 0;
}

static const char *preduced_path(void)
{
    const char *p = getenv("PREDUCED");
    return p ? p : "build/preduced";
}

/*
 * With PREDUCE_TEST_PIN_CPUS=1 each "host" (a node daemon and its
 * trainers) runs on one CPU of its own, host i on CPU i modulo those
 * online: benchmarks that play several hosts on one machine then give
 * each the one core a rank of MPI bound to its core (--bind-to core) has,
 * instead of every daemon's reduce threads contending for all of them.
 * The daemon's default node.reduce_threads follows (the CPUs it may run
 * on).
 */
static void pin_host(int host)
{
    const char *v = getenv("PREDUCE_TEST_PIN_CPUS");
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    if (host < 0 || !v || strcmp(v, "1") != 0 || ncpu < 1)
        return;
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(host % ncpu, &set);
    if (sched_setaffinity(0, sizeof(set), &set) < 0)
        fprintf(stderr, "harness: pinning host %d: %s\n", host,
                strerror(errno));
}

static pid_t spawn(const struct h_cluster *c, const char *who, int host,
                   const char *netns, const char **argv)
{
    char log[400];
    snprintf(log, sizeof(log), "%s/%s.log", c->dir, who);
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid != 0)
        return pid;
    /*
     * A test that fails an assertion exits at once (Check's fork mode
     * skips the rest of it): its daemons must not outlive it.
     */
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent)
        _exit(127);
    int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (fd >= 0) {
        dup2(fd, STDOUT_FILENO);
        dup2(fd, STDERR_FILENO);
        close(fd);
    }
    int rc = enter_netns(netns);
    if (rc < 0) {
        fprintf(stderr, "harness: netns %s: %s\n", netns, strerror(-rc));
        _exit(126);
    }
    pin_host(host);
    execv(argv[0], (char *const *)argv);
    _exit(127);
}

static int wait_connect_unix(const char *path, int timeout_ms)
{
    double end = now_s() + timeout_ms / 1000.0;
    while (now_s() < end) {
        int fd = socket(AF_UNIX, SOCK_STREAM, 0);
        struct sockaddr_un sa = {.sun_family = AF_UNIX};
        snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
        int rc = connect(fd, (struct sockaddr *)&sa, sizeof(sa));
        close(fd);
        if (rc == 0)
            return 0;
        sleep_ms(10);
    }
    return -ETIMEDOUT;
}

/*
 * Connects to at's address:port until it accepts. A socket belongs to the
 * namespace it was made in: the test enters at->netns for each one and
 * goes back to its own.
 */
static int wait_connect_tcp(const struct h_place *at, uint16_t port,
                            int timeout_ms)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port)};
    if (inet_pton(AF_INET, place_addr(at), &sa.sin_addr) != 1)
        return -EINVAL;
    int home = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
    if (home < 0)
        return -errno;
    double end = now_s() + timeout_ms / 1000.0;
    int rc = -ETIMEDOUT;
    while (now_s() < end) {
        int err = enter_netns(at->netns);
        if (err < 0) {
            rc = err;
            break;
        }
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        if (at->netns[0] && setns(home, CLONE_NEWNET) < 0)
            abort(); /* the test cannot go on in the wrong namespace */
        int ok =
            fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0;
        if (fd >= 0)
            close(fd);
        if (ok) {
            rc = 0;
            break;
        }
        sleep_ms(10);
    }
    close(home);
    return rc;
}

#define MAX_ARGS 64

static int add_sets(const char **argv, int argc, const char *const *sets)
{
    for (; sets && *sets && argc < MAX_ARGS - 3; sets++) {
        argv[argc++] = "--set";
        argv[argc++] = *sets;
    }
    return argc;
}

/*
 * --set for each space-separated key=value in $var, split in buf (which
 * must outlive argv: the tokens point into it).
 */
static int add_env_sets(const char **argv, int argc, const char *var, char *buf,
                        size_t len)
{
    const char *env = getenv(var);
    snprintf(buf, len, "%s", env ? env : "");
    for (char *save = NULL, *tok = strtok_r(buf, " ", &save);
         tok && argc < MAX_ARGS - 3; tok = strtok_r(NULL, " ", &save)) {
        argv[argc++] = "--set";
        argv[argc++] = tok;
    }
    return argc;
}

int h_node_start(struct h_cluster *c, int i, const char *const *node_sets)
{
    char who[16], sched[96], sock[320], data[96], name[32];
    snprintf(who, sizeof(who), "node%d", i);
    snprintf(sched, sizeof(sched), "node.scheduler=%s:%u",
             place_addr(&c->sched_at), c->sched_port);
    char dir[256];
    memcpy(dir, c->dir, sizeof(dir));
    snprintf(c->sock[i], sizeof(c->sock[i]), "%s/node%d/preduced.sock", dir, i);
    snprintf(sock, sizeof(sock), "node.socket=%s", c->sock[i]);
    c->node_port[i] = h_free_port();
    snprintf(data, sizeof(data), "node.data_listen=%s:%u",
             place_addr(&c->node_at[i]), c->node_port[i]);
    snprintf(name, sizeof(name), "node.name=node%d", i);
    const char *argv[MAX_ARGS] = {preduced_path(),
                                  "--role",
                                  "node",
                                  "--set",
                                  sched,
                                  "--set",
                                  sock,
                                  "--set",
                                  data,
                                  "--set",
                                  name,
                                  "--set",
                                  "log.level=debug"};
    int argc = 13;
    if (c->node_conf[0]) {
        argv[argc++] = "-c";
        argv[argc++] = c->node_conf;
    }
    argc = add_sets(argv, argc, node_sets);
    /* Settings from the environment, e.g. the RDMA guest's transport. */
    static char env_sets[1024];
    argc = add_env_sets(argv, argc, "PREDUCE_TEST_NODE_SETS", env_sets,
                        sizeof(env_sets));
    argv[argc] = NULL;
    c->node_pid[i] = spawn(c, who, i, c->node_at[i].netns, argv);
    if (c->node_pid[i] < 0)
        return -errno;
    return wait_connect_unix(c->sock[i], 5000);
}

int h_sched_start(struct h_cluster *c, const char *const *sched_sets)
{
    char listen[96];
    snprintf(listen, sizeof(listen), "scheduler.listen=%s:%u",
             place_addr(&c->sched_at), c->sched_port);
    const char *argv[MAX_ARGS] = {preduced_path(),  "--role", "scheduler",
                                  "--set",          listen,   "--set",
                                  "log.level=debug"};
    int argc = 7;
    /*
     * Settings from the environment (the RDMA guest's longer timeouts)
     * come first, so that a test's own settings win over them.
     */
    static char env_sets[1024];
    argc = add_env_sets(argv, argc, "PREDUCE_TEST_SCHED_SETS", env_sets,
                        sizeof(env_sets));
    argc = add_sets(argv, argc, sched_sets);
    argv[argc] = NULL;
    c->sched_pid = spawn(c, "sched", -1, c->sched_at.netns, argv);
    if (c->sched_pid < 0)
        return -errno;
    return wait_connect_tcp(&c->sched_at, c->sched_port, 5000);
}

int h_cluster_start(struct h_cluster *c, int nnodes,
                    const char *const *sched_sets, const char *const *node_sets)
{
    return h_cluster_start_at(c, nnodes, NULL, NULL, sched_sets, node_sets);
}

int h_cluster_start_at(struct h_cluster *c, int nnodes,
                       const struct h_place *sched_at,
                       const struct h_place *node_at,
                       const char *const *sched_sets,
                       const char *const *node_sets)
{
    if (nnodes > H_MAX_NODES)
        return -EINVAL;
    memset(c, 0, sizeof(*c));
    if (sched_at)
        c->sched_at = *sched_at;
    for (int i = 0; node_at && i < nnodes; i++)
        c->node_at[i] = node_at[i];
    snprintf(c->dir, sizeof(c->dir), "/tmp/preduce-test-XXXXXX");
    if (!mkdtemp(c->dir))
        return -errno;
    /*
     * A test that must know the scheduler's port before it starts (to
     * list it in a node's node.scheduler with others) sets its own
     * scheduler.listen; otherwise a free port.
     */
    c->sched_port = 0;
    for (const char *const *s = sched_sets; s && *s; s++) {
        const char *colon = strrchr(*s, ':');
        if (!strncmp(*s, "scheduler.listen=", 17) && colon)
            c->sched_port = (uint16_t)atoi(colon + 1);
    }
    if (!c->sched_port)
        c->sched_port = h_free_port();
    int rc = h_sched_start(c, sched_sets);
    if (rc < 0)
        return rc;
    c->nnodes = nnodes;
    for (int i = 0; i < nnodes; i++) {
        rc = h_node_start(c, i, node_sets);
        if (rc < 0)
            return rc;
    }
    /* Give the daemons a moment to join and learn about each other. */
    sleep_ms(100);
    return 0;
}

int h_wait(pid_t pid, int timeout_ms)
{
    double end = now_s() + timeout_ms / 1000.0;
    int st;
    for (;;) {
        pid_t r = waitpid(pid, &st, WNOHANG);
        if (r == pid)
            return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        if (r < 0)
            return -errno;
        if (now_s() >= end) {
            kill(pid, SIGKILL);
            waitpid(pid, &st, 0);
            return -ETIMEDOUT;
        }
        sleep_ms(5);
    }
}

int h_wait_trainers(const pid_t *pids, char (*names)[16], int n, int timeout_ms)
{
    int failed = 0;
    for (int i = 0; i < n; i++) {
        int st = h_wait(pids[i], timeout_ms);
        if (st != 0) {
            fprintf(stderr, "trainer %s: status %d\n", names[i], st);
            failed++;
        }
    }
    return failed;
}

/* 0 when the daemon exited 0 on SIGTERM (sanitizers find nothing). */
static int stop_pid(const struct h_cluster *c, const char *who, pid_t pid)
{
    if (pid <= 0)
        return 0;
    kill(pid, SIGTERM);
    int st = h_wait(pid, 5000);
    if (st == 0)
        return 0;
    fprintf(stderr, "harness: %s (pid %d) %s %d\n", who, (int)pid,
            st == -ETIMEDOUT ? "ignored SIGTERM:" : "exited with status", st);
    h_log_dump(c, who);
    return 1;
}

int h_cluster_stop(struct h_cluster *c)
{
    int bad = 0;
    for (int i = 0; i < c->nnodes; i++) {
        char who[16];
        snprintf(who, sizeof(who), "node%d", i);
        bad += stop_pid(c, who, c->node_pid[i]);
    }
    bad += stop_pid(c, "sched", c->sched_pid);
    if (!getenv("PREDUCE_KEEP_LOGS") && c->dir[0]) {
        char cmd[300];
        snprintf(cmd, sizeof(cmd), "rm -rf '%s'", c->dir);
        if (system(cmd) != 0)
            fprintf(stderr, "harness: could not remove %s\n", c->dir);
    }
    return bad;
}

int h_log_contains(const struct h_cluster *c, const char *who, const char *s)
{
    char path[400];
    snprintf(path, sizeof(path), "%s/%s.log", c->dir, who);
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    char line[2048];
    int found = 0;
    while (!found && fgets(line, sizeof(line), f))
        found = strstr(line, s) != NULL;
    fclose(f);
    return found;
}

int h_log_wait(const struct h_cluster *c, const char *who, const char *s,
               int timeout_ms)
{
    double end = now_s() + timeout_ms / 1000.0;
    for (;;) {
        if (h_log_contains(c, who, s))
            return 1;
        if (now_s() >= end)
            break;
        usleep(10 * 1000);
    }
    h_log_dump(c, who);
    return 0;
}

void h_log_dump(const struct h_cluster *c, const char *who)
{
    char path[400];
    snprintf(path, sizeof(path), "%s/%s.log", c->dir, who);
    FILE *f = fopen(path, "r");
    if (!f)
        return;
    char line[2048];
    fprintf(stderr, "---- %s ----\n", who);
    while (fgets(line, sizeof(line), f))
        fputs(line, stderr);
    fclose(f);
}

/*
 * h_input depends on i only through c = 31 i mod 1000, one of 1000
 * values: fill and check walk c along the elements and look values up in
 * tables of 1000 (the same floats, bit for bit), so a full check of every
 * element costs a lookup and a compare. Under TCG in the RDMA guest the
 * 64-bit modulo and divisions per element and member were most of a test's
 * time.
 */
#define H_CYCLE 1000u

/* This trainer's job's offset into the inputs (0: no job named). */
static unsigned in_salt;

static unsigned in_base(uint32_t rank, uint64_t v)
{
    return (unsigned)(((uint64_t)rank * 7919u + v * 104729u + in_salt) %
                      H_CYCLE);
}

/* 1..H_CYCLE - 1 from a job's name: never the offset of no job. */
static unsigned job_salt(const char *job)
{
    uint32_t x = 2166136261u; /* FNV-1a */
    for (const char *p = job; *p; p++)
        x = (x ^ (unsigned char)*p) * 16777619u;
    return 1 + x % (H_CYCLE - 1);
}

static float in_value(unsigned r)
{
    return 1.0f + (float)r / 1000.0f;
}

float h_input(uint32_t rank, uint64_t v, size_t i)
{
    return in_value((in_base(rank, v) + (unsigned)(i * 31u % H_CYCLE)) %
                    H_CYCLE);
}

static void fill(preduce_tensor_t **t, int nparts, uint32_t rank, uint64_t v)
{
    float table[H_CYCLE];
    unsigned a = in_base(rank, v);
    for (unsigned c = 0; c < H_CYCLE; c++)
        table[c] = in_value((a + c) % H_CYCLE);
    unsigned c = 0; /* 31 i mod 1000 for the element i at hand */
    for (int p = 0; p < nparts; p++) {
        float *x = preduce_tensor_data(t[p]);
        size_t n = preduce_tensor_len(t[p]);
        for (size_t i = 0; i < n; i++) {
            x[i] = table[c];
            c = c + 31 >= H_CYCLE ? c + 31 - H_CYCLE : c + 31;
        }
    }
}

/*
 * 0 when the tensors still hold fill(t, nparts, rank, v), bit for bit: a
 * failed reduce left them alone. Else -1 and the first element that
 * differs in why.
 */
static int kept(preduce_tensor_t **t, int nparts, uint32_t rank, uint64_t v,
                char *why, size_t whylen)
{
    float table[H_CYCLE];
    unsigned a = in_base(rank, v);
    for (unsigned c = 0; c < H_CYCLE; c++)
        table[c] = in_value((a + c) % H_CYCLE);
    unsigned c = 0;
    size_t off = 0;
    for (int p = 0; p < nparts; p++) {
        const float *x = preduce_tensor_data(t[p]);
        size_t n = preduce_tensor_len(t[p]);
        for (size_t i = 0; i < n; i++) {
            if (memcmp(&x[i], &table[c], sizeof(float)) != 0)
                return snprintf(why, whylen,
                                "after the failure element %zu is %.9g, "
                                "its input was %.9g",
                                off + i, (double)x[i], (double)table[c]),
                       -1;
            c = c + 31 >= H_CYCLE ? c + 31 - H_CYCLE : c + 31;
        }
        off += n;
    }
    return 0;
}

/*
 * The reference for this worker's result in double precision, for the
 * elements whose 31 i mod 1000 is c: the weighted mean sum_j w_j x_j, or
 * with `personal` (staleness weighting) this member's personal result
 * (docs/algorithm.md):
 *   (x_i + (k - 1) * (S - e_i x_i) / (1 - e_i)) / k,  S = sum_j e_j x_j.
 */
static double reference(const unsigned *base, const double *w, size_t k,
                        size_t self, int personal, unsigned c)
{
    double sum = 0;
    for (size_t j = 0; j < k; j++)
        sum += w[j] * (double)in_value((base[j] + c) % H_CYCLE);
    if (!personal)
        return sum;
    double own = in_value((base[self] + c) % H_CYCLE);
    if (k == 1 || w[self] >= 1.0)
        return own;
    double others = (sum - w[self] * own) / (1.0 - w[self]);
    return (own + (double)(k - 1) * others) / (double)k;
}

/* Checks the tensors against the combination the result reports. */
static int check(preduce_tensor_t **t, int nparts, const preduce_result_t *r,
                 uint32_t rank, const struct h_trainer_opts *o, double *worst,
                 char *why, size_t whylen)
{
    size_t k = preduce_result_size(r), self = k;
    uint32_t ranks[64];
    uint64_t vers[64];
    double w[64], wsum = 0;
    if (k == 0 || k > 64)
        return snprintf(why, whylen, "group of %zu members", k), -1;
    size_t healing = 0;
    for (size_t j = 0; j < k; j++) {
        preduce_result_member(r, j, &ranks[j], &vers[j], &w[j]);
        wsum += w[j];
        healing += w[j] == 0.0;
        if (ranks[j] == rank)
            self = j;
    }
    /*
     * A group with healing members (weight 0: a fresh model joining a job
     * that has gone past it) gives everyone the others' mean: uniform over
     * those, and never personal.
     */
    if (healing == k)
        return snprintf(why, whylen, "every member weighs 0"), -1;
    for (size_t j = 0; j < k; j++)
        if (o->uniform && w[j] != 0.0 &&
            fabs(w[j] - 1.0 / (double)(k - healing)) > 1e-12)
            return snprintf(why, whylen, "member %zu weight %g, not 1/%zu", j,
                            w[j], k - healing),
                   -1;
    int personal = o->personal && healing == 0;
    if (self == k)
        return snprintf(why, whylen, "rank %u is not in its own group", rank),
               -1;
    if (fabs(wsum - 1.0) > 1e-9)
        return snprintf(why, whylen, "weights sum to %.12f", wsum), -1;
    if (fabs(preduce_result_weight(r) - w[self]) > 1e-15)
        return snprintf(why, whylen, "own weight %g but member weight %g",
                        preduce_result_weight(r), w[self]),
               -1;
    unsigned base[64];
    for (size_t j = 0; j < k; j++)
        base[j] = in_base(ranks[j], vers[j]);
    double ref[H_CYCLE], inv[H_CYCLE];
    for (unsigned c = 0; c < H_CYCLE; c++) {
        ref[c] = reference(base, w, k, self, personal, c);
        inv[c] = 1.0 / fabs(ref[c]);
    }
    /*
     * 1e-6 of the reference. A personal result is built from the float sum
     * S of the weighted group, whose rounding it multiplies by
     * (k - 1) / (k (1 - e_i)) (above 1 when this member weighs much): the
     * bound grows by that factor, or a correct daemon would fail a few
     * elements in a thousand runs (seen: 1.05e-6 with k = 6).
     */
    double tol = o->tol > 0 ? o->tol : 1e-6;
    if (personal && k > 1 && w[self] < 1.0)
        tol *= 1.0 + (double)(k - 1) / ((double)k * (1.0 - w[self]));
    size_t off = 0;
    unsigned c = 0;
    for (int p = 0; p < nparts; p++) {
        const float *x = preduce_tensor_data(t[p]);
        size_t n = preduce_tensor_len(t[p]);
        for (size_t i = 0; i < n; i++) {
            double err = fabs((double)x[i] - ref[c]) * inv[c];
            if (err > *worst)
                *worst = err;
            if (err > tol)
                return snprintf(why, whylen,
                                "element %zu: got %.9g, reference %.9g",
                                off + i, (double)x[i], ref[c]),
                       -1;
            c = c + 31 >= H_CYCLE ? c + 31 - H_CYCLE : c + 31;
        }
        off += n;
    }
    return 0;
}

/* Appends a failed reduce's code to <dir>/<name>.codes (a line each). */
static void record_code(const struct h_cluster *c, const char *name, int rc)
{
    char path[400];
    snprintf(path, sizeof(path), "%s/%s.codes", c->dir, name);
    FILE *f = fopen(path, "a");
    if (f) {
        fprintf(f, "%d\n", rc);
        fclose(f);
    }
}

int h_trainer_codes(const struct h_cluster *c, const char *name, int *codes,
                    long *counts, int max)
{
    char path[400];
    snprintf(path, sizeof(path), "%s/%s.codes", c->dir, name);
    FILE *f = fopen(path, "r");
    if (!f)
        return errno == ENOENT ? 0 : -errno; /* none failed */
    int n = 0, code, k;
    while (fscanf(f, "%d", &code) == 1) {
        for (k = 0; k < n && k < max && codes[k] != code; k++) {
        }
        if (k < n && k < max) {
            counts[k]++;
        } else if (n < max) {
            codes[n] = code;
            counts[n++] = 1;
        } else {
            n++; /* more distinct codes than room */
        }
    }
    fclose(f);
    return n;
}

/* A line of <dir>/<name>.trace (struct h_trace says what). */
static void trace_line(FILE *f, double t0, double t1, int rc, uint32_t rank,
                       const preduce_result_t *r)
{
    if (!f)
        return;
    if (!r) {
        fprintf(f, "%.6f %.6f %d 0 0 0 %u\n", t0, t1, rc, rank);
        return;
    }
    size_t k = preduce_result_size(r);
    fprintf(f, "%.6f %.6f 0 %llu %llu %zu %u", t0, t1,
            (unsigned long long)preduce_result_group(r),
            (unsigned long long)preduce_result_version(r), k, rank);
    for (size_t j = 0; j < k && j < H_TRACE_MAX_K; j++) {
        uint32_t m;
        preduce_result_member(r, j, &m, NULL, NULL);
        fprintf(f, " %u", m);
    }
    fputc('\n', f);
}

/*
 * o->strict: 0 when result r follows the last one (group, version). A
 * healing member's version may go back (its own weight 0: it took the
 * givers' model and their version, docs/algorithm.md 5.5): one marked
 * because it joined after the job's first group may have gone up alone,
 * in groups of its own under dynamic, before it met a giver.
 */
static int follows(const preduce_result_t *r, uint64_t version, uint64_t group,
                   char *why, size_t whylen)
{
    if (preduce_result_version(r) < version && preduce_result_weight(r) != 0.0)
        return snprintf(why, whylen, "version %llu after %llu",
                        (unsigned long long)preduce_result_version(r),
                        (unsigned long long)version),
               -1;
    if (preduce_result_group(r) <= group)
        return snprintf(why, whylen, "group %llu after group %llu",
                        (unsigned long long)preduce_result_group(r),
                        (unsigned long long)group),
               -1;
    return 0;
}

/*
 * A trainer process's state: its client and tensors, where its results
 * have got to, and the figures it writes at its end (trainer_finish).
 */
struct trainer {
    const struct h_cluster *c;
    const struct h_trainer_opts *o;
    FILE *tf; /* the trace, or NULL */
    preduce_client_t *cl;
    preduce_tensor_t *t[8];
    int nparts;
    uint32_t rank;
    uint64_t version, group; /* of the last result */
    double t0, worst;
    long steps, errors, nonuniform, maxk, after_err;
    long mink;      /* the smallest group after the warm-up */
    double slowest; /* the longest reduce after the warm-up, s */
    /* Warm-up: o->warmup steps, and until a group of o->join_k came. */
    int warm, joined;
    int s0; /* the step the figures count from */
};

/* Opens <dir>/<name>.trace if o->trace: 0, or the exit status 2. */
static int trainer_trace(struct trainer *tr)
{
    char tpath[400];

    if (!tr->o->trace)
        return 0;
    snprintf(tpath, sizeof(tpath), "%s/%s.trace", tr->c->dir, tr->o->name);
    tr->tf = fopen(tpath, "w");
    if (!tr->tf) {
        fprintf(stderr, "%s: %s: %s\n", tr->o->name, tpath, strerror(errno));
        return 2;
    }
    setvbuf(tr->tf, NULL, _IOLBF, 0); /* whole lines, also if killed */
    return 0;
}

/* Connects and makes the tensors: 0, or the exit status (2 or 3). */
static int trainer_open(struct trainer *tr)
{
    const struct h_trainer_opts *o = tr->o;
    int rc;
    /* A child of its own: the environment is the trainer's. */
    if (o->wire)
        setenv("PREDUCE_WIRE", o->wire, 1);
    if (o->job_key)
        setenv("PREDUCE_JOB_KEY", o->job_key, 1);
    if (o->scheduler)
        setenv("PREDUCE_SCHEDULER", o->scheduler, 1);
    if (o->job) {
        preduce_options_t *opts;
        if ((rc = preduce_options_create(&opts)) == 0) {
            rc = preduce_options_set(opts, "job", o->job);
            if (rc == 0)
                rc = preduce_connect_with(tr->c->sock[o->node], o->name, opts,
                                          5000, &tr->cl);
            preduce_options_destroy(opts);
        }
        in_salt = job_salt(o->job);
    } else {
        rc = preduce_connect(tr->c->sock[o->node], o->name, 5000, &tr->cl);
    }

    if (rc < 0) {
        const char *why = preduce_last_error(NULL);
        int same = !strcmp(why, preduce_strerror(rc));
        fprintf(stderr, "%s: connect: %s%s%s\n", o->name, preduce_strerror(rc),
                same ? "" : ": ", same ? "" : why);
        return 2;
    }
    if (o->in_place && (rc = preduce_set_in_place(tr->cl, 1)) < 0) {
        fprintf(stderr, "%s: set_in_place: %s\n", o->name,
                preduce_strerror(rc));
        return 2;
    }
    tr->nparts = o->nparts > 0 ? o->nparts : 1;
    size_t left = o->n;
    for (int p = 0; p < tr->nparts; p++) {
        size_t len = p == tr->nparts - 1 ? left : o->n / (size_t)tr->nparts;
        left -= len;
        rc = preduce_tensor_create(tr->cl, len, 5000, &tr->t[p]);
        if (rc < 0) {
            fprintf(stderr, "%s: tensor_create(%zu): %s\n", o->name, len,
                    preduce_strerror(rc));
            return 3;
        }
    }
    tr->rank = (uint32_t)preduce_rank(tr->cl);
    tr->t0 = now_s();
    tr->warm = o->warmup == 0 && o->join_k == 0;
    tr->joined = o->join_k == 0;
    return 0;
}

/* The warm-up is over at step s: the figures count from here. */
static void trainer_warm(struct trainer *tr, int s)
{
    char path[400];

    snprintf(path, sizeof(path), "%s/%s.warm", tr->c->dir, tr->o->name);
    FILE *wf = fopen(path, "w");
    if (wf)
        fclose(wf);
    tr->t0 = now_s();
    tr->steps = tr->errors = 0;
    tr->mink = 0;
    tr->slowest = 0;
    tr->s0 = s;
    tr->warm = 1;
}

/* Reduce of step s, begun at ts, failed with rc: 0 to go on, or a status. */
static int trainer_failed(struct trainer *tr, int s, int rc, double ts)
{
    const struct h_trainer_opts *o = tr->o;
    char why[200];

    tr->errors++;
    record_code(tr->c, o->name, rc);
    trace_line(tr->tf, ts, now_s(), rc, tr->rank, NULL);
    if (o->strict && rc != -ENOTCONN &&
        kept(tr->t, tr->nparts, tr->rank, tr->version + 1, why, sizeof(why)) <
            0) {
        fprintf(stderr, "%s: step %d: %s: %s\n", o->name, s,
                preduce_strerror(rc), why);
        return 7;
    }
    if (o->tolerate_errors) {
        if (o->retry_ms > 0)
            sleep_ms(o->retry_ms);
        return 0;
    }
    fprintf(stderr, "%s: step %d: reduce: %s\n", o->name, s,
            preduce_strerror(rc));
    return 4;
}

/* Counts result r's size and whether it is uniform over its givers. */
static void trainer_tally(struct trainer *tr, const preduce_result_t *r)
{
    size_t k = preduce_result_size(r);

    if ((long)k > tr->maxk)
        tr->maxk = (long)k;
    if (tr->mink == 0 || (long)k < tr->mink)
        tr->mink = (long)k;
    /* Uniform over the members that give (healers weigh 0). */
    size_t givers = 0;
    for (size_t j = 0; j < k; j++) {
        double w;
        preduce_result_member(r, j, NULL, NULL, &w);
        givers += w != 0.0;
    }
    for (size_t j = 0; j < k; j++) {
        double w;
        preduce_result_member(r, j, NULL, NULL, &w);
        if (w != 0.0 && fabs(w - 1.0 / (double)givers) > 1e-9) {
            tr->nonuniform++;
            break;
        }
    }
}

/* Reduce of step s, begun at ts, succeeded: 0, or a bad result's status. */
static int trainer_reduced(struct trainer *tr, int s, double ts)
{
    const struct h_trainer_opts *o = tr->o;
    const preduce_result_t *r = preduce_last_result(tr->cl);
    char why[200];

    trace_line(tr->tf, ts, now_s(), 0, tr->rank, r);
    if (!o->no_check && check(tr->t, tr->nparts, r, tr->rank, o, &tr->worst,
                              why, sizeof(why)) < 0) {
        fprintf(stderr, "%s: step %d group %llu: %s\n", o->name, s,
                (unsigned long long)preduce_result_group(r), why);
        return 5;
    }
    if (o->strict && follows(r, tr->version, tr->group, why, sizeof(why)) < 0) {
        fprintf(stderr, "%s: step %d: %s\n", o->name, s, why);
        return 8;
    }
    tr->version = preduce_result_version(r);
    tr->group = preduce_result_group(r);
    if ((long)preduce_result_size(r) >= o->join_k)
        tr->joined = 1;
    /* Ranks can change when the scheduler restarts (and a new worker
     * took this one's old rank): the next inputs follow the new one. */
    tr->rank = (uint32_t)preduce_rank(tr->cl);
    tr->steps++;
    tr->after_err += tr->errors > 0;
    trainer_tally(tr, r);
    return 0;
}

/* Step s: its inputs, its reduce and their checks; 0 or a status. */
static int trainer_step(struct trainer *tr, int s)
{
    const struct h_trainer_opts *o = tr->o;

    if (o->slow_ms > 0)
        sleep_ms(o->slow_ms);
    if (!o->no_check || s == 0)
        fill(tr->t, tr->nparts, tr->rank, tr->version + 1);
    double ts = now_s();
    int rc = preduce_reduce(tr->cl, tr->t, (size_t)tr->nparts,
                            o->timeout_ms ? o->timeout_ms : 20000);
    if (tr->warm && now_s() - ts > tr->slowest)
        tr->slowest = now_s() - ts;
    if (rc < 0)
        return trainer_failed(tr, s, rc, ts);
    return trainer_reduced(tr, s, ts);
}

/* The steps, warm-up first, until the run is done: 0 or a status. */
static int trainer_loop(struct trainer *tr)
{
    const struct h_trainer_opts *o = tr->o;

    for (int s = 0;; s++) {
        if (!tr->warm && s >= o->warmup && tr->joined)
            trainer_warm(tr, s);
        if (tr->warm && (o->run_s > 0 ? now_s() - tr->t0 >= o->run_s
                                      : s - tr->s0 >= o->steps))
            return 0;
        if (!tr->warm && now_s() - tr->t0 > 60) {
            fprintf(stderr, "%s: no group of %d members in 60 s\n", o->name,
                    o->join_k);
            return 6;
        }
        int status = trainer_step(tr, s);
        if (status != 0)
            return status;
    }
}

/* Writes <dir>/<name>.out (read_out reads it) and closes the client. */
static void trainer_finish(struct trainer *tr)
{
    double secs = now_s() - tr->t0;
    char path[400];

    snprintf(path, sizeof(path), "%s/%s.out", tr->c->dir, tr->o->name);
    FILE *f = fopen(path, "w");
    if (f) {
        fprintf(f, "%ld %.6f %ld %.3g %ld %ld %ld %ld %.6f\n", tr->steps, secs,
                tr->errors, tr->worst, tr->nonuniform, tr->maxk, tr->after_err,
                tr->mink, tr->slowest);
        fclose(f);
    }
    preduce_close(tr->cl);
    if (tr->tf)
        fclose(tr->tf);
}

/* A trainer process: its exit status (h_trainer_opts says which). */
static int trainer_main(const struct h_cluster *c,
                        const struct h_trainer_opts *o)
{
    struct trainer tr = {.c = c, .o = o};
    int status = trainer_trace(&tr);

    if (status == 0)
        status = trainer_open(&tr);
    if (status != 0)
        return status;
    status = trainer_loop(&tr);
    trainer_finish(&tr);
    return status;
}

pid_t h_trainer_spawn(const struct h_cluster *c, const struct h_trainer_opts *o)
{
    fflush(NULL);
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL); /* as spawn() */
        if (getppid() != parent)
            _exit(127);
        /* A trainer runs on its node's host. */
        int rc = enter_netns(c->node_at[o->node].netns);
        if (rc < 0) {
            fprintf(stderr, "%s: netns %s: %s\n", o->name,
                    c->node_at[o->node].netns, strerror(-rc));
            _exit(126);
        }
        pin_host(o->node);
        _exit(trainer_main(c, o));
    }
    return pid;
}

int h_trainer_warm(const struct h_cluster *c, const char *name, int timeout_ms)
{
    char path[400];
    snprintf(path, sizeof(path), "%s/%s.warm", c->dir, name);
    for (int waited = 0; waited <= timeout_ms; waited += 10) {
        if (access(path, F_OK) == 0)
            return 0;
        sleep_ms(10);
    }
    return -ETIMEDOUT;
}

/* What a trainer wrote at its end (see trainer_finish). */
struct trainer_out {
    long steps, errors, nonuniform, maxk, after, mink;
    double secs, worst, slowest;
};

static int read_out(const struct h_cluster *c, const char *name,
                    struct trainer_out *o)
{
    char path[400];
    snprintf(path, sizeof(path), "%s/%s.out", c->dir, name);
    FILE *f = fopen(path, "r");
    if (!f)
        return -ENOENT;
    int n = fscanf(f, "%ld %lf %ld %lf %ld %ld %ld %ld %lf", &o->steps,
                   &o->secs, &o->errors, &o->worst, &o->nonuniform, &o->maxk,
                   &o->after, &o->mink, &o->slowest);
    fclose(f);
    return n == 9 ? 0 : -EINVAL;
}

int h_trainer_figures(const struct h_cluster *c, const char *name, long *steps,
                      double *secs, long *errors)
{
    struct trainer_out o;
    int rc = read_out(c, name, &o);
    if (rc == 0) {
        *steps = o.steps;
        *secs = o.secs;
        *errors = o.errors;
    }
    return rc;
}

int h_trainer_slowest(const struct h_cluster *c, const char *name, double *secs)
{
    struct trainer_out o;
    int rc = read_out(c, name, &o);
    if (rc == 0)
        *secs = o.slowest;
    return rc;
}

int h_trainer_after_error(const struct h_cluster *c, const char *name,
                          long *after)
{
    struct trainer_out o;
    int rc = read_out(c, name, &o);
    if (rc == 0)
        *after = o.after;
    return rc;
}

int h_trainer_groups(const struct h_cluster *c, const char *name,
                     long *nonuniform, long *maxk)
{
    struct trainer_out o;
    int rc = read_out(c, name, &o);
    if (rc == 0) {
        *nonuniform = o.nonuniform;
        *maxk = o.maxk;
    }
    return rc;
}

int h_trainer_min_k(const struct h_cluster *c, const char *name, long *mink)
{
    struct trainer_out o;
    int rc = read_out(c, name, &o);
    if (rc == 0)
        *mink = o.mink;
    return rc;
}

int h_node_stop(struct h_cluster *c, int i)
{
    char who[16];
    snprintf(who, sizeof(who), "node%d", i);
    int bad = stop_pid(c, who, c->node_pid[i]);
    c->node_pid[i] = 0;
    return bad ? -EIO : 0;
}

/* The part from `key` on of the last line of node i's log that has it. */
static int node_log_last(const struct h_cluster *c, int i, const char *key,
                         char *out, size_t len)
{
    char path[400];
    snprintf(path, sizeof(path), "%s/node%d.log", c->dir, i);
    FILE *f = fopen(path, "r");
    if (!f)
        return -ENOENT;
    char line[2048];
    int found = 0;
    while (fgets(line, sizeof(line), f)) {
        const char *p = strstr(line, key);
        if (p) {
            snprintf(out, len, "%s", p);
            found = 1;
        }
    }
    fclose(f);
    return found ? 0 : -ENOENT;
}

int h_node_data_bytes(const struct h_cluster *c, int i, unsigned long long *tcp,
                      unsigned long long *rdma)
{
    char l[2048];
    if (node_log_last(c, i, "data sent: ", l, sizeof(l)) < 0 ||
        sscanf(l, "data sent: %llu bytes over tcp, %llu over rdma", tcp,
               rdma) != 2)
        return -ENOENT;
    return 0;
}

int h_node_rdma_counts(const struct h_cluster *c, int i,
                       unsigned long long n[3])
{
    char l[2048];
    const char *p;
    if (node_log_last(c, i, "data sent: ", l, sizeof(l)) < 0 ||
        !(p = strstr(l, "(rdma: ")) ||
        sscanf(p,
               "(rdma: %llu data writes, %llu credit messages, %llu "
               "completion events)",
               &n[0], &n[1], &n[2]) != 3)
        return -ENOENT;
    return 0;
}

int h_node_groups(const struct h_cluster *c, int i, unsigned long long *ok,
                  unsigned long long *in_place)
{
    char l[2048];
    if (node_log_last(c, i, "groups: ", l, sizeof(l)) < 0 ||
        sscanf(l, "groups: %llu ok (%llu in place)", ok, in_place) != 2)
        return -ENOENT;
    return 0;
}

int h_node_wire_groups(const struct h_cluster *c, int i,
                       unsigned long long groups[3])
{
    char l[2048];
    const char *w;
    if (node_log_last(c, i, "groups: ", l, sizeof(l)) < 0 ||
        !(w = strstr(l, "over the wire in ")) ||
        sscanf(w, "over the wire in fp32 %llu, bf16 %llu, int8 %llu",
               &groups[0], &groups[1], &groups[2]) != 3)
        return -ENOENT;
    return 0;
}

#define ANSWER_MAX (1u << 20)

/* GET /metrics on 127.0.0.1:port; the body (heap) or NULL. */
static char *metrics_fetch_once(uint16_t port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0)
        return NULL;
    struct timeval tv = {.tv_sec = 5};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    const char *req = "GET /metrics HTTP/1.0\r\n\r\n";
    char *buf = malloc(ANSWER_MAX);
    size_t n = 0;
    if (!buf || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 ||
        send(fd, req, strlen(req), MSG_NOSIGNAL) != (ssize_t)strlen(req))
        goto fail;
    for (;;) {
        ssize_t r = recv(fd, buf + n, ANSWER_MAX - 1 - n, 0);
        if (r < 0)
            goto fail;
        if (r == 0)
            break;
        n += (size_t)r;
    }
    buf[n] = '\0';
    close(fd);
    char *body = strstr(buf, "\r\n\r\n");
    if (strncmp(buf, "HTTP/1.0 200 ", 13) != 0 || !body) {
        fprintf(stderr, "metrics on port %u: %s\n", port, buf);
        free(buf);
        return NULL;
    }
    memmove(buf, body + 4, strlen(body + 4) + 1);
    return buf;
fail:
    fprintf(stderr, "metrics on port %u: %s\n", port, strerror(errno));
    free(buf);
    close(fd);
    return NULL;
}

/* metrics_fetch_once, tried three times: a loaded machine must not fail the
 * test. */
char *h_metrics_fetch(uint16_t port)
{
    char *body = NULL;
    for (int i = 0; i < 3 && !body; i++) {
        if (i > 0)
            sleep_ms(200);
        body = metrics_fetch_once(port);
    }
    return body;
}

double h_metric(const char *text, const char *prefix)
{
    size_t len = strlen(prefix);
    for (const char *p = text; *p;) {
        const char *eol = strchr(p, '\n');
        if (!eol)
            eol = p + strlen(p);
        if (!strncmp(p, prefix, len)) {
            const char *v = eol;
            while (v > p && v[-1] != ' ')
                v--;
            return strtod(v, NULL);
        }
        p = *eol ? eol + 1 : eol;
    }
    return NAN;
}

double h_metric_at(uint16_t port, const char *prefix)
{
    char *text = h_metrics_fetch(port);
    if (!text)
        return NAN;
    double v = h_metric(text, prefix);
    free(text);
    return v;
}

int h_node_wait_transfer(uint16_t port, const char *transport, int gap_ms)
{
    char rx[128];
    snprintf(
        rx, sizeof(rx),
        "preduce_node_bytes_total{transport=\"%s\",direction=\"received\"} ",
        transport);
    static const char running[] = "preduce_node_groups_running ";
    static const char done[] = "preduce_node_reduces_total{status=\"ok\"} ";
    double end = now_s() + 20.0;
    /*
     * prev: the last sample; base: the one in which a reduce had just
     * finished. The first sample after base that has data flowing into a
     * group (and no reduce finished since) is early in that group, so
     * the peers still have most of it to send (a socket buffer may hold
     * megabytes: late in a group a peer may have handed all its data to
     * the kernel already).
     */
    double prev_done = NAN, base_done = NAN, base_rx = 0;
    while (now_s() < end) {
        char *m = h_metrics_fetch(port);
        if (m) {
            double d = h_metric(m, done), r = h_metric(m, rx);
            double run = h_metric(m, running);
            free(m);
            if (!isnan(prev_done) && d > prev_done) {
                base_done = d;
                base_rx = r;
            } else if (!isnan(base_done) && d == base_done && run == 1 &&
                       r > base_rx) {
                return 0;
            } else if (d != base_done) {
                base_done = NAN;
            }
            prev_done = d;
        }
        sleep_ms(gap_ms);
    }
    return -ETIMEDOUT;
}

int h_survivors(const struct h_cluster *c, const char *const *names, int n,
                long *failed)
{
    int rc = 0;
    for (int i = 0; i < n; i++) {
        long steps, errors, after;
        double secs;
        if (h_trainer_figures(c, names[i], &steps, &secs, &errors) < 0 ||
            h_trainer_after_error(c, names[i], &after) < 0)
            return -ENOENT;
        printf("%s: %ld reduces, %ld failed, %ld after the failure, in "
               "%.1f s\n",
               names[i], steps, errors, after, secs);
        *failed += errors;
        if (errors > 0 && after == 0)
            rc = -EPROTO;
    }
    return rc;
}

int h_node_maps_tensor(const struct h_cluster *c, int node, const char *trainer,
                       uint32_t id)
{
    char path[64], want[96], line[512];
    snprintf(path, sizeof(path), "/proc/%d/maps", (int)c->node_pid[node]);
    snprintf(want, sizeof(want), "/memfd:preduce:%s:%u", trainer, id);
    FILE *f = fopen(path, "r");
    if (!f) {
        /* Neither answer would be true: end the test (it runs forked). */
        fprintf(stderr, "harness: open %s: %s\n", path, strerror(errno));
        abort();
    }
    int found = 0;
    size_t n = strlen(want);
    while (!found && fgets(line, sizeof(line), f)) {
        const char *p = strstr(line, want);
        found = p && (p[n] == ' ' || p[n] == '\n');
    }
    fclose(f);
    return found;
}

int h_node_wait_maps(const struct h_cluster *c, int node, const char *trainer,
                     uint32_t id, int mapped)
{
    for (int i = 0; i < 300; i++) {
        if (h_node_maps_tensor(c, node, trainer, id) == mapped)
            return 1;
        sleep_ms(10);
    }
    return 0;
}

int h_trace_read(const struct h_cluster *c, const char *name,
                 struct h_trace **out)
{
    char path[400];
    snprintf(path, sizeof(path), "%s/%s.trace", c->dir, name);
    FILE *f = fopen(path, "r");
    if (!f)
        return -errno;
    size_t n = 0, cap = 0;
    struct h_trace *v = NULL;
    char line[1024];
    int rc = 0;
    while (fgets(line, sizeof(line), f)) {
        if (n == cap) {
            cap = cap ? 2 * cap : 256;
            struct h_trace *nv = realloc(v, cap * sizeof(*v));
            if (!nv) {
                rc = -ENOMEM;
                break;
            }
            v = nv;
        }
        struct h_trace *t = &v[n];
        memset(t, 0, sizeof(*t));
        int used = 0;
        if (sscanf(line, "%lf %lf %d %llu %llu %d %u%n", &t->t0, &t->t1, &t->rc,
                   &t->group, &t->version, &t->k, &t->rank, &used) != 7 ||
            t->k < 0 || t->k > H_TRACE_MAX_K) {
            rc = -EPROTO;
            break;
        }
        const char *p = line + used;
        for (int j = 0; j < t->k; j++) {
            int m;
            if (sscanf(p, " %u%n", &t->members[j], &m) != 1) {
                rc = -EPROTO;
                break;
            }
            p += m;
        }
        if (rc < 0)
            break;
        n++;
    }
    fclose(f);
    if (rc < 0) {
        free(v);
        return rc;
    }
    *out = v;
    return (int)n;
}

int h_trace_has(const struct h_trace *t, uint32_t rank)
{
    for (int j = 0; j < t->k; j++)
        if (t->members[j] == rank)
            return 1;
    return 0;
}
