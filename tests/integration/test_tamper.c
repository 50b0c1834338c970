/* SPDX-License-Identifier: MIT */
/*
 * A sealed peer link (security.encrypt, daemon/base/seal.h) through a
 * relay that tampers with one data frame (tests/integration/
 * tamper_relay.c): flips a bit of it, replays an earlier one before it,
 * drops it, or swaps it with the next frame, in one direction or the
 * other. Each time the link ends (the daemon that reads the frame logs
 * "failed authentication"), the reduces in flight fail cleanly, the
 * dialling daemon redials and reduces succeed again; no trainer ever gets
 * an altered float: each result is checked against the exact mean, and
 * after each failure the tensors must hold their inputs bit for bit
 * (h_trainer_opts.strict). Each connection, and each direction of it,
 * seals under keys of its own (check_keys_differ).
 *
 * Two controls: the same relay passing every frame (no reduce fails),
 * and the same flip on a link in clear (a trainer gets the altered float
 * and its check fails), so a sealed link that let it through would fail
 * here.
 *
 * Routing: node ids come from the scheduler in join order, and the node
 * with the higher id dials the lower. node0 joins first and advertises
 * the relay's port (node.data_advertise) as its data address; the relay
 * dials node0's real port; node1 joins next and dials the relay. "up" is
 * node1 -> node0, "down" node0 -> node1.
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "daemon/engine/xport.h"
#include "proto/frame.h"
#include "tests/integration/harness.h"
#include "tests/check_run.h"

/* Each trainer's run, s: hundreds of reduces of FLOATS on loopback. */
#define RUN_S 3.0
/* 400 KB a model; 64 KiB chunks: about 8 data frames a group each way. */
#define FLOATS   100000
#define CHUNK_KB "64"
/* A reduce's limit, ms: a frame dropped last in its group stalls it. */
#define REDUCE_TIMEOUT_MS 1500
/* The data frame tampered with: past the first few groups. */
#define FIRST_N   41
#define MAX_CONNS 32
#define TAG_LEN   16 /* an AEAD tag, PR_SEAL_TAG_LEN */

static char key_path[64], key_set[96];

struct tamper_case {
    const char *mode, *dir;
    int n;
};

/*
 * N moves within a group from case to case (FIRST_N is a group's first
 * data frame each way), so that the frame hit is in the reduce-scatter
 * (read into the daemon's scratch vector) or in the all-gather (read
 * into the trainer's own tensor, put back when the group fails). A group's
 * last frame dropped or held back stalls its reduce until the timeout;
 * the next group's first frame then ends the link.
 */
static const struct tamper_case cases[] = {
    {"flip", "up", FIRST_N + 2},   {"flip", "down", FIRST_N + 5},
    {"replay", "up", FIRST_N + 4}, {"replay", "down", FIRST_N + 1},
    {"drop", "up", FIRST_N + 3},   {"drop", "down", FIRST_N + 7},
    {"swap", "up", FIRST_N},       {"swap", "down", FIRST_N + 7},
};
#define NCASES ((int)(sizeof(cases) / sizeof(cases[0])))

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static void setup(void)
{
    static const char secret[] = "the sealed links' cluster key";
    snprintf(key_path, sizeof(key_path), "/tmp/preduce-itkey-XXXXXX");
    int fd = mkstemp(key_path); /* mode 0600 */
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(write(fd, secret, strlen(secret)),
                     (ssize_t)strlen(secret));
    close(fd);
    snprintf(key_set, sizeof(key_set), "security.key_file=%s", key_path);
}

static void teardown(void)
{
    unlink(key_path);
}

/* Polls a log up to timeout_ms for s. */
static int logged(const struct h_cluster *c, const char *who, const char *s,
                  int timeout_ms)
{
    for (int t = 0; t <= timeout_ms; t += 10) {
        if (h_log_contains(c, who, s))
            return 1;
        sleep_ms(10);
    }
    return 0;
}

/*
 * The relay with `mode` on the dir's Nth data frame, listening on
 * listen_port and dialling 127.0.0.1:target; its lines go to
 * c->dir/relay.out. Dies with the test.
 */
static pid_t relay_start(const struct h_cluster *c, uint16_t listen_port,
                         uint16_t target, const char *mode, const char *dir,
                         int n)
{
    const char *bin = getenv("PREDUCE_TAMPER_RELAY");
    char lp[16], tp[16], ns[16], out[400];
    snprintf(lp, sizeof(lp), "%u", listen_port);
    snprintf(tp, sizeof(tp), "%u", target);
    snprintf(ns, sizeof(ns), "%d", n);
    snprintf(out, sizeof(out), "%s/relay.out", c->dir);
    if (!bin)
        bin = "build/tests/tamper_relay";
    fflush(NULL);
    pid_t parent = getpid(), pid = fork();
    if (pid != 0)
        return pid;
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent)
        _exit(127);
    int fd = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
        dup2(fd, STDOUT_FILENO);
        dup2(fd, STDERR_FILENO);
        close(fd);
    }
    execl(bin, bin, lp, tp, mode, dir, ns, (char *)NULL);
    _exit(127);
}

/* A connection's first sealed frame one way (tamper_relay.c's "first"). */
struct first_frame {
    unsigned long conn;
    char dir[8];
    unsigned type;
    size_t len;
    char head[2 * PR_CHUNK_HDR_LEN + 2]; /* a data frame's chunk header */
    char tag[2 * TAG_LEN + 2];           /* its last 16 bytes (hex both) */
};

/* What the relay said (tamper_relay.c's lines). */
struct relay_log {
    int listening, opened, tampers;
    double tamper_t;
    /* Per connection (1-based), its first data frame's time, 0: none. */
    double data_t[MAX_CONNS + 1];
    int nfirst;
    struct first_frame first[2 * MAX_CONNS];
};

static void relay_read(const struct h_cluster *c, struct relay_log *r)
{
    char path[400], line[512];
    memset(r, 0, sizeof(*r));
    snprintf(path, sizeof(path), "%s/relay.out", c->dir);
    FILE *f = fopen(path, "r");
    if (!f)
        return;
    while (fgets(line, sizeof(line), f)) {
        unsigned long k;
        double t;
        struct first_frame *ff = &r->first[r->nfirst];
        if (!strncmp(line, "listening ", 10)) {
            r->listening = 1;
        } else if (sscanf(line, "open %lu", &k) == 1) {
            r->opened++;
        } else if (sscanf(line, "tamper %lu %*s %*s %*u %lf", &k, &t) == 2) {
            r->tampers++;
            r->tamper_t = t;
        } else if (sscanf(line, "data %lu %lf", &k, &t) == 2) {
            if (k <= MAX_CONNS)
                r->data_t[k] = t;
        } else if (r->nfirst < 2 * MAX_CONNS &&
                   sscanf(line, "first %lu %7s %u %zu %81s %33s", &ff->conn,
                          ff->dir, &ff->type, &ff->len, ff->head,
                          ff->tag) == 6) {
            r->nfirst++;
        }
    }
    fclose(f);
}

/* Prints the relay's lines to stderr (for a failing test). */
static void relay_dump(const struct h_cluster *c)
{
    char path[400], line[512];
    snprintf(path, sizeof(path), "%s/relay.out", c->dir);
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "test_tamper: no %s\n", path);
        return;
    }
    fprintf(stderr, "---- relay ----\n");
    while (fgets(line, sizeof(line), f))
        fputs(line, stderr);
    fclose(f);
}

/*
 * Starts node i with a metrics port, the key, `encrypt` and `extra` (each
 * may be NULL), and waits until it joined.
 */
static void node_start(struct h_cluster *c, int i, const char *encrypt,
                       const char *extra, uint16_t *metrics)
{
    char mset[64], who[16];
    *metrics = h_free_port();
    snprintf(mset, sizeof(mset), "metrics.listen=127.0.0.1:%u", *metrics);
    snprintf(who, sizeof(who), "node%d", i);
    /*
     * One connection a link, as the relay's counts assume: without it the
     * reduce (400 KB) would go on the express connection, a link's second
     * (test_xport_streams tests that each of those seals on its own).
     */
    const char *sets[7] = {key_set, "transport.chunk_kb=" CHUNK_KB,
                           "transport.express_kb=0", mset};
    int n = 4;
    if (encrypt)
        sets[n++] = encrypt;
    if (extra)
        sets[n++] = extra;
    c->nnodes = i + 1;
    ck_assert_int_eq(h_node_start(c, i, sets), 0);
    if (!logged(c, who, "joined job", 5000)) {
        h_log_dump(c, who);
        ck_abort_msg("%s did not join within 5 s", who);
    }
}

/*
 * The cluster of the top comment, with the relay between its nodes doing
 * `mode` to the dir's Nth data frame, and the link up through it;
 * `encrypt` (NULL: the default) for every daemon. The relay's pid.
 */
static pid_t cluster_start(struct h_cluster *c, const char *encrypt,
                           const char *mode, const char *dir, int n,
                           uint16_t metrics[2])
{
    const char *const sched[] = {"scheduler.policy=allreduce", key_set, encrypt,
                                 NULL};
    /*
     * The relay's port is picked free before node 0 starts (node 0
     * advertises it), and bound only after: something may take it in
     * between (once in CI, under ASan: "Address already in use"; other
     * trees' suites on the same machine pick from h_free_port's range
     * too). Then all starts again on other ports, the relay's words
     * printed.
     */
    pid_t relay;
    uint16_t relay_port;
    for (int attempt = 0;; attempt++) {
        int rc = h_cluster_start(c, 0, sched, NULL);
        if (rc < 0) {
            h_log_dump(c, "sched");
            ck_abort_msg("scheduler: %s", strerror(-rc));
        }
        relay_port = h_free_port();
        char advertise[64];
        snprintf(advertise, sizeof(advertise),
                 "node.data_advertise=127.0.0.1:%u", relay_port);
        node_start(c, 0, encrypt, advertise, &metrics[0]);
        relay = relay_start(c, relay_port, c->node_port[0], mode, dir, n);
        ck_assert_int_gt(relay, 0);
        struct relay_log r = {0};
        for (int t = 0; t < 500 && !r.listening; t++) {
            sleep_ms(10);
            relay_read(c, &r);
        }
        if (r.listening)
            break;
        fprintf(stderr, "test_tamper: the relay did not listen on %u:\n",
                relay_port);
        relay_dump(c);
        kill(relay, SIGKILL);
        waitpid(relay, NULL, 0);
        ck_assert_msg(attempt < 2, "the relay did not listen on %u (3 tries)",
                      relay_port);
        h_cluster_stop(c);
    }
    node_start(c, 1, encrypt, NULL, &metrics[1]);
    for (int i = 0; i < 2; i++) {
        const char *who = i ? "node1" : "node0";
        if (!logged(c, who, "link up (tcp", 5000)) {
            h_log_dump(c, who);
            ck_abort_msg("%s: no link up through the relay", who);
        }
    }
    return relay;
}

static void relay_stop(pid_t relay)
{
    kill(relay, SIGKILL);
    waitpid(relay, NULL, 0);
}

static const char *const names[2] = {"t0", "t1"};

/*
 * A trainer on each node for RUN_S, every result and failure checked;
 * their exit statuses into st[] (5: a wrong result, 7: a failed reduce
 * that changed a float of the tensors).
 */
static void trainers_run(struct h_cluster *c, int st[2])
{
    pid_t pids[2];
    for (int i = 0; i < 2; i++) {
        struct h_trainer_opts o = {.name = names[i],
                                   .node = i,
                                   .n = FLOATS,
                                   .uniform = 1,
                                   .strict = 1,
                                   .trace = 1,
                                   .run_s = RUN_S,
                                   .timeout_ms = REDUCE_TIMEOUT_MS,
                                   .tolerate_errors = 1,
                                   .retry_ms = 10};
        pids[i] = h_trainer_spawn(c, &o);
        ck_assert_int_gt(pids[i], 0);
    }
    for (int i = 0; i < 2; i++)
        st[i] = h_wait(pids[i], 30000);
}

/* A trainer's figures, and from its trace when reduces came back. */
struct outcome {
    long ok, failed, after;
    double back_s; /* first failure's start to the next success's end */
};

static void outcome_read(const struct h_cluster *c, int i, struct outcome *o)
{
    long steps;
    double secs;
    memset(o, 0, sizeof(*o));
    ck_assert_int_eq(h_trainer_figures(c, names[i], &steps, &secs, &o->failed),
                     0);
    ck_assert_int_eq(h_trainer_after_error(c, names[i], &o->after), 0);
    o->ok = steps;
    struct h_trace *t;
    int n = h_trace_read(c, names[i], &t);
    ck_assert_int_ge(n, 0);
    int first_fail = -1;
    for (int j = 0; j < n; j++) {
        if (t[j].rc < 0 && first_fail < 0)
            first_fail = j;
        if (t[j].rc == 0 && first_fail >= 0) {
            o->back_s = t[j].t1 - t[first_fail].t0;
            break;
        }
    }
    free(t);
    /*
     * Clean failures are the group's (-ECONNRESET: the link went;
     * -ETIMEDOUT: a chunk that never came), never the trainer's own
     * connection to its daemon.
     */
    int codes[8];
    long counts[8];
    int k = h_trainer_codes(c, names[i], codes, counts, 8);
    ck_assert_int_ge(k, 0);
    for (int j = 0; j < k && j < 8; j++)
        ck_assert_msg(codes[j] == -ECONNRESET || codes[j] == -ETIMEDOUT,
                      "%s: %ld reduces failed with %d", names[i], counts[j],
                      codes[j]);
}

/*
 * The chunk header's total (bytes 8..16, daemon/engine/xport.c) in a first
 * frame's head: its 16 hex digits from the 16th.
 */
#define TOTAL_HEX(ff) ((ff)->head + 2 * 8)
#define TOTAL_HEX_LEN (2 * 8)

/*
 * Keys differ per connection, and per direction: the first sealed record
 * each way of every connection is record 0, under the same nonce, and a
 * data frame's chunk header holds the same total (bytes 8..16) in every
 * chunk of the job (test_tamper_clear_flip_reaches_trainer sees it in
 * clear). Under one key those bytes would be the same ciphertext in each;
 * they never are, and no two tags are alike.
 */
static void check_keys_differ(const struct relay_log *r)
{
    int compared = 0;
    for (int a = 0; a < r->nfirst; a++) {
        const struct first_frame *fa = &r->first[a];
        for (int b = a + 1; b < r->nfirst; b++) {
            const struct first_frame *fb = &r->first[b];
            ck_assert_msg(strcmp(fa->tag, fb->tag) != 0,
                          "conn %lu %s and conn %lu %s: the same tag %s",
                          fa->conn, fa->dir, fb->conn, fb->dir, fa->tag);
            if (fa->type != PR_FRAME_DATA || fb->type != PR_FRAME_DATA ||
                strlen(fa->head) < 2 * PR_CHUNK_HDR_LEN ||
                strlen(fb->head) < 2 * PR_CHUNK_HDR_LEN)
                continue;
            ck_assert_msg(
                strncmp(TOTAL_HEX(fa), TOTAL_HEX(fb), TOTAL_HEX_LEN) != 0,
                "conn %lu %s and conn %lu %s: the chunk header's "
                "total sealed alike (%.16s): one key",
                fa->conn, fa->dir, fb->conn, fb->dir, TOTAL_HEX(fa));
            compared++;
        }
    }
    /* Two connections, both ways: six pairs. */
    ck_assert_int_ge(compared, 6);
}

static double groups_restored(uint16_t port)
{
    return h_metric_at(port, "preduce_node_groups_restored_total ");
}

/* Peer links this node ended for a sealed frame that did not open. */
static double peer_auth_failures(uint16_t port)
{
    return h_metric_at(port,
                       "preduce_node_link_auth_failures_total{link=\"peer\"} ");
}

START_TEST(test_tamper_link_ends_floats_intact)
{
    const struct tamper_case *tc = &cases[_i];
    struct h_cluster c;
    uint16_t metrics[2];
    int st[2];
    pid_t relay = cluster_start(&c, NULL, tc->mode, tc->dir, tc->n, metrics);
    trainers_run(&c, st);
    for (int i = 0; i < 2; i++)
        ck_assert_msg(st[i] == 0, "trainer %s: exit status %d", names[i],
                      st[i]);
    struct relay_log r;
    relay_read(&c, &r);
    struct outcome o[2];
    for (int i = 0; i < 2; i++)
        outcome_read(&c, i, &o[i]);
    double restored[2] = {groups_restored(metrics[0]),
                          groups_restored(metrics[1])};
    /* The first connection after the tampered one to carry data. */
    double back_ms = -1;
    for (int k = 2; k <= r.opened && k <= MAX_CONNS && back_ms < 0; k++)
        if (r.data_t[k] > r.tamper_t)
            back_ms = (r.data_t[k] - r.tamper_t) * 1e3;
    printf("%s %s N=%d: %d connections; t0 %ld ok, %ld failed (%ld ok "
           "after), t1 %ld ok, %ld failed (%ld ok after); data on the new "
           "link %.0f ms after the tamper; a trainer's reduces back %.0f, "
           "%.0f ms after its first failure; groups put back %.0f, %.0f\n",
           tc->mode, tc->dir, tc->n, r.opened, o[0].ok, o[0].failed, o[0].after,
           o[1].ok, o[1].failed, o[1].after, back_ms, o[0].back_s * 1e3,
           o[1].back_s * 1e3, restored[0], restored[1]);
    /* Check's fork mode ends a failed case without flushing stdout. */
    fflush(stdout);
    if (r.tampers != 1)
        relay_dump(&c);
    ck_assert_int_eq(r.tampers, 1);
    /* The daemon that read the frame refused it, and the link ended. */
    const char *reader = !strcmp(tc->dir, "up") ? "node0" : "node1";
    if (!h_log_contains(&c, reader, "failed authentication")) {
        h_log_dump(&c, reader);
        ck_abort_msg("%s did not refuse the %s frame", reader, tc->mode);
    }
    ck_assert(h_log_contains(&c, "node0", "link down") ||
              h_log_contains(&c, "node1", "link down"));
    /* The reader counted it; the other side saw the link close, no more. */
    int ri = !strcmp(tc->dir, "up") ? 0 : 1;
    ck_assert_double_eq(peer_auth_failures(metrics[ri]), 1);
    ck_assert_double_eq(peer_auth_failures(metrics[1 - ri]), 0);
    /* Some reduce failed, and both went on reducing after it. */
    ck_assert_int_gt(o[0].failed + o[1].failed, 0);
    for (int i = 0; i < 2; i++)
        ck_assert_msg(o[i].failed == 0 || o[i].after > 0,
                      "%s: no reduce succeeded after its failure", names[i]);
    /* Redialled through the relay, and data moved on the new link. */
    ck_assert_int_ge(r.opened, 2);
    ck_assert_msg(back_ms >= 0, "no data on a connection after the tamper");
    check_keys_differ(&r);
    relay_stop(relay);
    ck_assert_int_eq(h_cluster_stop(&c), 0);
}
END_TEST

/* The same relay passing every frame: not one reduce fails. */
START_TEST(test_tamper_pass_control)
{
    struct h_cluster c;
    uint16_t metrics[2];
    int st[2];
    pid_t relay = cluster_start(&c, NULL, "pass", "up", FIRST_N, metrics);
    trainers_run(&c, st);
    for (int i = 0; i < 2; i++)
        ck_assert_msg(st[i] == 0, "trainer %s: exit status %d", names[i],
                      st[i]);
    struct relay_log r;
    relay_read(&c, &r);
    struct outcome o[2];
    for (int i = 0; i < 2; i++)
        outcome_read(&c, i, &o[i]);
    printf("pass: %d connection; t0 %ld ok, %ld failed; t1 %ld ok, %ld "
           "failed\n",
           r.opened, o[0].ok, o[0].failed, o[1].ok, o[1].failed);
    ck_assert_int_eq(r.tampers, 0);
    ck_assert_int_eq(r.opened, 1);
    ck_assert_int_eq(o[0].failed + o[1].failed, 0);
    /*
     * Past the frame the others tamper with: a group of both moves about
     * 8 data frames each way.
     */
    ck_assert_int_gt(o[0].ok, FIRST_N);
    ck_assert_int_gt(o[1].ok, FIRST_N);
    ck_assert(!h_log_contains(&c, "node0", "failed authentication"));
    ck_assert(!h_log_contains(&c, "node1", "failed authentication"));
    /* Both ends count the link up and encrypted, and no failure. */
    for (int i = 0; i < 2; i++) {
        ck_assert_double_eq(
            h_metric_at(metrics[i], "preduce_node_links_encrypted "), 1);
        ck_assert_double_eq(peer_auth_failures(metrics[i]), 0);
    }
    relay_stop(relay);
    ck_assert_int_eq(h_cluster_stop(&c), 0);
}
END_TEST

/*
 * The other control: the same flip on a link in clear (security.encrypt
 * = off; the handshake is still keyed) reaches a trainer, whose check of
 * its result fails (exit status 5). So a sealed link that let a flipped
 * bit through would fail this suite. Also, in clear, the first data
 * frames each way carry the same total in their chunk headers: the
 * plaintext check_keys_differ relies on.
 */
START_TEST(test_tamper_clear_flip_reaches_trainer)
{
    struct h_cluster c;
    uint16_t metrics[2];
    int st[2];
    pid_t relay = cluster_start(&c, "security.encrypt=off", "flip", "up",
                                FIRST_N + 2, metrics);
    trainers_run(&c, st);
    struct relay_log r;
    relay_read(&c, &r);
    printf("clear flip: trainers' exit statuses %d, %d; %d connection\n", st[0],
           st[1], r.opened);
    ck_assert_int_eq(r.tampers, 1);
    ck_assert_msg(st[0] == 5 || st[1] == 5,
                  "the flipped bit reached no trainer (statuses %d, %d)", st[0],
                  st[1]);
    ck_assert_int_eq(r.opened, 1);
    ck_assert(!h_log_contains(&c, "node0", "failed authentication"));
    ck_assert_int_eq(r.nfirst, 2);
    for (int i = 0; i < 2; i++) {
        const struct first_frame *ff = &r.first[i];
        uint8_t hdr[PR_CHUNK_HDR_LEN];
        struct pr_chunk_hdr h;
        ck_assert_uint_eq(ff->type, PR_FRAME_DATA);
        ck_assert_uint_eq(strlen(ff->head), 2 * PR_CHUNK_HDR_LEN);
        for (size_t j = 0; j < PR_CHUNK_HDR_LEN; j++)
            ck_assert_int_eq(sscanf(ff->head + 2 * j, "%2hhx", &hdr[j]), 1);
        pr_chunk_hdr_decode(hdr, &h);
        ck_assert_uint_eq(h.total, FLOATS);
    }
    ck_assert(!strncmp(TOTAL_HEX(&r.first[0]), TOTAL_HEX(&r.first[1]),
                       TOTAL_HEX_LEN));
    relay_stop(relay);
    ck_assert_int_eq(h_cluster_stop(&c), 0);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("integration_tamper");
    TCase *tc = tcase_create("tamper");
    tcase_set_timeout(tc, 60);
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_tamper_pass_control);
    tcase_add_test(tc, test_tamper_clear_flip_reaches_trainer);
    tcase_add_loop_test(tc, test_tamper_link_ends_floats_intact, 0, NCASES);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    /* The relay reads the TCP peer protocol: no RDMA settings. */
    unsetenv("PREDUCE_TEST_NODE_SETS");
    return check_run(suite());
}
