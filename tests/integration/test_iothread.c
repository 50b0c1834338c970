/* SPDX-License-Identifier: MIT */
/*
 * The transport's I/O thread (transport.io_thread, daemon/base/conn_io.h):
 * while it is on, the payloads of large data frames (PR_CONN_IO_MIN, 64
 * KiB, or more) on a peer link's bulk connections are read into place,
 * and large data frames written, by a thread of the transport's instead
 * of the daemon's loop. Two node daemons, with a trainer of each job on
 * each, reduce 4 MiB models in 1 MiB chunks for a few seconds; every
 * result is checked against the exact mean of its members (a job's inputs
 * differ from another job's, so a result that mixed two jobs fails) and
 * no reduce may fail. What must hold:
 *
 * - on: each node's preduce_node_io_thread_bytes_total is at least what
 *   the thread must have read of the chunks of its groups of two; so too
 *   over sealed links (a cluster key, every frame encrypted: the thread
 *   reads a payload and its tag into the bounce buffer) and over links of
 *   two streams (every bulk stream's socket on the thread);
 * - auto (the default), one job: the thread moves nothing although the
 *   chunks crossed TCP, and no node says it switched;
 * - auto, two jobs: each node switches the large chunks to the thread
 *   (its log says so and the thread moves bytes), and back to the loop
 *   once the trainers are gone;
 * - off, two jobs: the thread moves nothing.
 */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

#include "tests/integration/harness.h"
#include "tests/check_run.h"

/*
 * A model of 4 MiB: on two nodes, two segments of 2 MiB, each cut in
 * chunks of CHUNK_BYTES (transport.chunk_kb, set so even if its default
 * moves), far above the thread's 64 KiB.
 */
#define FLOATS      (1u << 20)
#define CHUNK_BYTES (1u << 20)
#define CHUNK_SET   "transport.chunk_kb=1024"
/*
 * The most of a chunk's payload the loop reads itself before it hands the
 * landing to the thread: outside a landing its reads take up to 64 KiB
 * (conn.c alloc_cb), the frame's header and the payload's start.
 */
#define LOOP_READ (64u << 10)
/* Each trainer's run after its warm-up, s: about a hundred reduces. */
#define RUN_S 2.0
/* Groups of two each trainer must have had: the chunks crossed the link. */
#define MIN_GROUPS   5
#define MAX_TRAINERS 4

static const char io_read[] =
    "preduce_node_io_thread_bytes_total{direction=\"received\"} ";
static const char io_written[] =
    "preduce_node_io_thread_bytes_total{direction=\"sent\"} ";
static const char tcp_received[] = "preduce_node_bytes_total{transport=\"tcp\","
                                   "direction=\"received\"} ";
static const char links_encrypted[] = "preduce_node_links_encrypted ";
/* The harness's names of the two node daemons, for their logs. */
static const char *const node_name[2] = {"node0", "node1"};
/*
 * What a node in auto logs when it switches (xport_tcp.c); a line with
 * on_thread, however it begins, is a switch to the thread.
 */
static const char to_thread[] = "large chunks' bytes now move on the I/O "
                                "thread";
static const char to_loop[] = "large chunks' bytes now move on the loop";
static const char on_thread[] = "now move on the I/O thread";

static char key_path[64], key_set[96];

/* The sealed case's cluster key, in a file of mode 0600. */
static void key_setup(void)
{
    static const char secret[] = "the I/O thread test's cluster key";
    snprintf(key_path, sizeof(key_path), "/tmp/preduce-itkey-XXXXXX");
    int fd = mkstemp(key_path);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(write(fd, secret, strlen(secret)),
                     (ssize_t)strlen(secret));
    close(fd);
    snprintf(key_set, sizeof(key_set), "security.key_file=%s", key_path);
}

static void key_teardown(void)
{
    unlink(key_path);
}

struct run {
    struct h_cluster c;
    uint16_t metrics[2];
    int nt;
    pid_t pids[MAX_TRAINERS];
    char names[MAX_TRAINERS][16];
    /* Per node: the groups of two its trainers were in. */
    long groups[2];
};

/*
 * A scheduler and two node daemons, each with a metrics port, CHUNK_SET,
 * the key when `keyed` and `sets` (NULL-terminated, may be NULL); then
 * waits until both ends have the link up. Only then may a group run: a
 * chunk that came before its node had put the link's sockets on the
 * thread would be read by the loop, and the lower bound below not hold.
 */
static void start(struct run *r, const char *const *sets, int keyed)
{
    const char *const sched[] = {"scheduler.policy=allreduce",
                                 keyed ? key_set : NULL, NULL};
    memset(r, 0, sizeof(*r));
    int rc = h_cluster_start(&r->c, 0, sched, NULL);
    ck_assert_msg(rc == 0, "scheduler: %s", strerror(-rc));
    r->c.nnodes = 2;
    for (int i = 0; i < 2; i++) {
        char mset[64];
        r->metrics[i] = h_free_port();
        snprintf(mset, sizeof(mset), "metrics.listen=127.0.0.1:%u",
                 r->metrics[i]);
        const char *node[8] = {mset, CHUNK_SET};
        int n = 2;
        if (keyed)
            node[n++] = key_set;
        for (int k = 0; sets && sets[k]; k++) {
            ck_assert(n < 7);
            node[n++] = sets[k];
        }
        rc = h_node_start(&r->c, i, node);
        ck_assert_msg(rc == 0, "node%d: %s", i, strerror(-rc));
    }
    for (int i = 0; i < 2; i++) {
        const char *who = node_name[i];
        ck_assert_msg(h_log_wait(&r->c, who, "link up (tcp", 10000),
                      "%s: no link up", who);
    }
}

/* Results of a trainer's trace in groups of two (one member a node). */
static long groups_of_two(const struct h_cluster *c, const char *name)
{
    struct h_trace *t;
    int n = h_trace_read(c, name, &t);
    ck_assert_msg(n > 0, "%s: no trace (%d)", name, n);
    long k = 0;
    for (int i = 0; i < n; i++)
        k += t[i].rc == 0 && t[i].k == 2;
    free(t);
    return k;
}

/*
 * A trainer of each job of jobs[0..njobs) (NULL: the node's own) on each
 * node, for RUN_S after its first group of two. Each checks every result
 * and stops at the first failed reduce (no tolerate_errors): all must
 * exit 0, and each must have reduced over the link MIN_GROUPS times.
 */
static void trainers_run(struct run *r, const char *const *jobs, int njobs)
{
    ck_assert(2 * njobs <= MAX_TRAINERS);
    for (int j = 0; j < njobs; j++) {
        for (int i = 0; i < 2; i++) {
            char *name = r->names[r->nt];
            snprintf(name, sizeof(r->names[0]), "%s%d", jobs[j] ? jobs[j] : "w",
                     i);
            struct h_trainer_opts o = {.name = name,
                                       .node = i,
                                       .n = FLOATS,
                                       .uniform = 1,
                                       .run_s = RUN_S,
                                       .join_k = 2,
                                       .trace = 1,
                                       .strict = 1,
                                       .job = jobs[j]};
            r->pids[r->nt] = h_trainer_spawn(&r->c, &o);
            ck_assert_int_gt(r->pids[r->nt], 0);
            r->nt++;
        }
    }
    int failed = h_wait_trainers(r->pids, r->names, r->nt, 30000);
    if (failed) {
        h_log_dump(&r->c, "node0");
        h_log_dump(&r->c, "node1");
    }
    ck_assert_int_eq(failed, 0);
    for (int t = 0; t < r->nt; t++) {
        long steps, errors;
        double secs;
        ck_assert_int_eq(
            h_trainer_figures(&r->c, r->names[t], &steps, &secs, &errors), 0);
        ck_assert_int_eq(errors, 0);
        long g = groups_of_two(&r->c, r->names[t]);
        ck_assert_msg(g >= MIN_GROUPS, "%s: %ld groups of two, not %d",
                      r->names[t], g, MIN_GROUPS);
        r->groups[t % 2] += g;
    }
}

/* A metric of node i, which must be there. */
static double metric(const struct run *r, int i, const char *name)
{
    double v = h_metric_at(r->metrics[i], name);
    ck_assert_msg(v == v, "node%d: no %s in its metrics", i, name);
    return v;
}

/*
 * What the thread must have read on a node for `groups` groups of two:
 * in each, the node receives 4 FLOATS bytes (the peer's segment in the
 * reduce-scatter, its own final one in the all-gather), in chunks of
 * CHUNK_BYTES, of each of which the loop reads at most LOOP_READ (the
 * frame headers, which the thread does not read, are not counted).
 */
static double least_read(long groups)
{
    double chunks = 4.0 * FLOATS / CHUNK_BYTES;
    return (double)groups * chunks * (double)(CHUNK_BYTES - LOOP_READ);
}

/*
 * With the thread on: each node's count covers least_read() of its groups.
 * `label` names the case in the line printed.
 */
static void check_on_thread(const struct run *r, const char *label)
{
    for (int i = 0; i < 2; i++) {
        double io = metric(r, i, io_read), least = least_read(r->groups[i]);
        double wrote = metric(r, i, io_written);
        printf("iothread: %s: node%d: %ld groups of two, the thread read "
               "%.0f bytes (at least %.0f) and wrote %.0f\n",
               label, i, r->groups[i], io, least, wrote);
        ck_assert_msg(io >= least,
                      "node%d: the thread read %.0f bytes, less than the "
                      "%.0f it must have",
                      i, io, least);
        /*
         * Writes go to the thread only while libuv holds none of that
         * connection's: some, not a bound.
         */
        ck_assert_msg(wrote > 0, "node%d: the thread wrote nothing", i);
    }
}

/*
 * The thread moved nothing on either node, though the chunks crossed TCP
 * (so the zero is not for want of traffic), and no node switched.
 */
static void check_on_loop(const struct run *r)
{
    for (int i = 0; i < 2; i++) {
        const char *who = node_name[i];
        ck_assert_double_eq(metric(r, i, io_read), 0);
        ck_assert_double_eq(metric(r, i, io_written), 0);
        ck_assert(metric(r, i, tcp_received) >= 4.0 * FLOATS * r->groups[i]);
        ck_assert_msg(!h_log_contains(&r->c, who, on_thread),
                      "%s switched to the I/O thread", who);
    }
}

static void stop(struct run *r)
{
    ck_assert_int_eq(h_cluster_stop(&r->c), 0);
}

static const char *const one_job[] = {NULL};
static const char *const two_jobs[] = {"a", "b"};

START_TEST(test_iothread_on)
{
    static const char *const sets[] = {"transport.io_thread=on", NULL};
    struct run r;
    start(&r, sets, 0);
    trainers_run(&r, one_job, 1);
    check_on_thread(&r, "on");
    stop(&r);
}
END_TEST

/*
 * Sealed links: a sealed chunk lands in the bounce buffer and is opened
 * on the loop once the thread has read it and its tag; a byte wrong there
 * fails the frame's authentication, which ends the link and fails the
 * reduce.
 */
START_TEST(test_iothread_on_sealed)
{
    static const char *const sets[] = {"transport.io_thread=on",
                                       "security.encrypt=on", NULL};
    struct run r;
    start(&r, sets, 1);
    trainers_run(&r, one_job, 1);
    check_on_thread(&r, "on, sealed");
    for (int i = 0; i < 2; i++) {
        const char *who = node_name[i];
        ck_assert_double_eq(metric(&r, i, links_encrypted), 1);
        ck_assert(h_log_contains(&r.c, who, "link up (tcp, encrypted with"));
        ck_assert(!h_log_contains(&r.c, who, "failed authentication"));
    }
    stop(&r);
}
END_TEST

/*
 * Links of two bulk streams: a group's chunks spread over both, each
 * socket on the thread, each landing read there.
 */
START_TEST(test_iothread_on_streams)
{
    static const char *const sets[] = {"transport.io_thread=on",
                                       "transport.streams=2", NULL};
    struct run r;
    start(&r, sets, 0);
    trainers_run(&r, one_job, 1);
    check_on_thread(&r, "on, 2 streams");
    for (int i = 0; i < 2; i++)
        ck_assert(
            h_log_contains(&r.c, node_name[i], "link up (tcp, 2 streams"));
    stop(&r);
}
END_TEST

/* auto (not set: the default) with trainers of one job: the loop's. */
START_TEST(test_iothread_auto_one_job)
{
    struct run r;
    start(&r, NULL, 0);
    trainers_run(&r, one_job, 1);
    check_on_loop(&r);
    stop(&r);
}
END_TEST

/*
 * auto with trainers of jobs a and b on both nodes: the nodes switch the
 * large chunks to the thread while both jobs are there, in the middle of
 * reduces (one job's trainers may start reducing before the other's
 * connect), and every result is still its own job's exact mean. When the
 * trainers are gone, back to the loop.
 */
START_TEST(test_iothread_auto_two_jobs)
{
    struct run r;
    start(&r, NULL, 0);
    trainers_run(&r, two_jobs, 2);
    for (int i = 0; i < 2; i++) {
        const char *who = node_name[i];
        ck_assert_msg(h_log_wait(&r.c, who, to_thread, 5000),
                      "%s did not switch to the I/O thread", who);
        double io = metric(&r, i, io_read) + metric(&r, i, io_written);
        printf("iothread: auto, two jobs: node%d: %ld groups of two, the "
               "thread moved %.0f bytes\n",
               i, r.groups[i], io);
        ck_assert_msg(io > 0, "node%d: the thread moved nothing", i);
        /* Every trainer gone: no two jobs here any more. */
        ck_assert_msg(h_log_wait(&r.c, who, to_loop, 5000),
                      "%s did not switch back to the loop", who);
    }
    stop(&r);
}
END_TEST

/* off with trainers of two jobs: the loop's, whatever the jobs. */
START_TEST(test_iothread_off_two_jobs)
{
    static const char *const sets[] = {"transport.io_thread=off", NULL};
    struct run r;
    start(&r, sets, 0);
    trainers_run(&r, two_jobs, 2);
    check_on_loop(&r);
    stop(&r);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("integration_iothread");
    TCase *tc = tcase_create("iothread");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_iothread_on);
    tcase_add_test(tc, test_iothread_on_streams);
    tcase_add_test(tc, test_iothread_auto_one_job);
    tcase_add_test(tc, test_iothread_auto_two_jobs);
    tcase_add_test(tc, test_iothread_off_two_jobs);
    suite_add_tcase(s, tc);
    TCase *sealed = tcase_create("iothread_sealed");
    tcase_set_timeout(sealed, 60);
    tcase_add_checked_fixture(sealed, key_setup, key_teardown);
    tcase_add_test(sealed, test_iothread_on_sealed);
    suite_add_tcase(s, sealed);
    return s;
}

int main(void)
{
    return check_run(suite());
}
