/* SPDX-License-Identifier: MIT */
/*
 * Cluster-key authentication with real processes: with the same key the
 * job runs; a node with another key, or with none, or that seals its
 * links when the scheduler does not (security.encrypt) or the other way
 * round, is refused with a logged reason while the others go on; and a
 * peer connection without a proof, or with the proof but in clear to a
 * node that seals, is refused by the node it dials.
 */
#include <arpa/inet.h>
#include <check.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "daemon/base/auth.h"
#include "proto/frame.h"
#include "tests/integration/harness.h"
#include "tests/check_run.h"

static char key_a[64], key_b[64], set_a[96], set_b[96];

static void make_key(char *path, char *set, const char *secret)
{
    snprintf(path, 64, "/tmp/preduce-itkey-XXXXXX");
    int fd = mkstemp(path); /* mode 0600 */
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(write(fd, secret, strlen(secret)),
                     (ssize_t)strlen(secret));
    close(fd);
    snprintf(set, 96, "security.key_file=%s", path);
}

static void setup(void)
{
    make_key(key_a, set_a, "the cluster key of this job");
    make_key(key_b, set_b, "some other cluster's key!!");
}

static void teardown(void)
{
    unlink(key_a);
    unlink(key_b);
}

static int logged(struct h_cluster *c, const char *who, const char *s)
{
    for (int i = 0; i < 300; i++) {
        if (h_log_contains(c, who, s))
            return 1;
        struct timespec ts = {0, 10000000};
        nanosleep(&ts, NULL);
    }
    h_log_dump(c, who);
    return 0;
}

static pid_t trainer(struct h_cluster *c, const char *name, int node)
{
    struct h_trainer_opts o = {
        .name = name, .node = node, .n = 1000, .steps = 5, .uniform = 1};
    return h_trainer_spawn(c, &o);
}

START_TEST(test_auth_same_key_runs)
{
    struct h_cluster c;
    const char *const sched[] = {"scheduler.policy=allreduce", set_a, NULL};
    const char *const node[] = {set_a, NULL};
    ck_assert_int_eq(h_cluster_start(&c, 2, sched, node), 0);
    pid_t p0 = trainer(&c, "a0", 0), p1 = trainer(&c, "a1", 1);
    ck_assert_int_eq(h_wait(p0, 30000), 0);
    ck_assert_int_eq(h_wait(p1, 30000), 0);
    ck_assert_int_eq(h_cluster_stop(&c), 0);
}
END_TEST

/*
 * With the key, links are encrypted (security.encrypt = auto): every
 * stream of a 3-stream link, and the scheduler links, carry sealed
 * frames, and the trainers' results, spread over several chunks per
 * stream and checked against their inputs, are exact. _i: 0 = encrypt
 * by default, 1 = security.encrypt = off (the same handshake, clear
 * text), whose logs must not claim encryption.
 */
START_TEST(test_auth_sealed_streams_exact)
{
    struct h_cluster c;
    const char *enc = _i ? "security.encrypt=off" : "security.encrypt=auto";
    const char *const sched[] = {"scheduler.policy=allreduce", set_a, enc,
                                 NULL};
    const char *const node[] = {set_a, enc, "transport.streams=3",
                                "transport.chunk_kb=64", NULL};
    ck_assert_int_eq(h_cluster_start(&c, 3, sched, node), 0);
    char names[3][16];
    pid_t pids[3];
    for (int i = 0; i < 3; i++) {
        snprintf(names[i], sizeof(names[i]), "e%d", i);
        struct h_trainer_opts o = {.name = names[i],
                                   .node = i,
                                   .n = 300001, /* 19 chunks a segment */
                                   .nparts = 2,
                                   .steps = 8,
                                   .uniform = 1};
        pids[i] = h_trainer_spawn(&c, &o);
    }
    int failed = h_wait_trainers(pids, names, 3, 60000);
    if (failed)
        h_log_dump(&c, "node0");
    ck_assert_int_eq(failed, 0);
    for (int i = 0; i < 3; i++) {
        char who[16];
        snprintf(who, sizeof(who), "node%d", i);
        int sealed = h_log_contains(&c, who, "encrypted with") &&
                     h_log_contains(&c, who, "3 streams, encrypted with");
        ck_assert_msg(_i ? !h_log_contains(&c, who, "encrypted") : sealed,
                      "%s: links %s", who,
                      _i ? "claim encryption" : "not all encrypted");
    }
    ck_assert_int_eq(h_cluster_stop(&c), 0);
}
END_TEST

/* _i: 0 = node with another key, 1 = node with no key. */
START_TEST(test_auth_intruder_node_refused)
{
    struct h_cluster c;
    const char *const sched[] = {"scheduler.policy=constant",
                                 "scheduler.group_size=1", set_a, NULL};
    const char *const good[] = {set_a, NULL};
    const char *const other[] = {set_b, NULL};
    ck_assert_int_eq(h_cluster_start(&c, 1, sched, good), 0);
    ck_assert_int_eq(h_node_start(&c, 1, _i == 0 ? other : NULL), 0);
    c.nnodes = 2;
    if (_i == 0)
        ck_assert(logged(&c, "sched", "authentication failed: wrong proof"));
    else
        ck_assert(logged(&c, "node1", "requires a cluster key"));
    /* Its trainer cannot join: the node has no scheduler. */
    pid_t bad = trainer(&c, "intruder", 1);
    ck_assert_int_eq(h_wait(bad, 30000), 2);
    /* The job goes on. */
    pid_t ok = trainer(&c, "g0", 0);
    ck_assert_int_eq(h_wait(ok, 30000), 0);
    ck_assert_int_eq(h_cluster_stop(&c), 0);
}
END_TEST

START_TEST(test_auth_peer_without_proof_refused)
{
    struct h_cluster c;
    const char *const sched[] = {set_a, NULL};
    const char *const node[] = {set_a, NULL};
    ck_assert_int_eq(h_cluster_start(&c, 1, sched, node), 0);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET,
                             .sin_port = htons(c.node_port[0])};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ck_assert_int_eq(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    /* A hello that claims to be node 99, with no proof of the key. */
    Pr__V1__Msg m = PR__V1__MSG__INIT;
    Pr__V1__Hello h = PR__V1__HELLO__INIT;
    h.version = PR_PROTO_VERSION;
    h.role = PR__V1__ROLE__ROLE_NODE;
    h.node_id = 99;
    m.body_case = PR__V1__MSG__BODY_HELLO;
    m.hello = &h;
    uint8_t *buf;
    size_t len;
    ck_assert_int_eq(pr_msg_frame(&m, 1 << 20, &buf, &len), 0);
    ck_assert_int_eq(write(fd, buf, len), (ssize_t)len);
    free(buf);
    ck_assert(logged(&c, "node0", "(node 99): authentication failed"));
    close(fd);
    ck_assert_int_eq(h_cluster_stop(&c), 0);
}
END_TEST

/*
 * _i: 0 = the scheduler (and node0) seal, node1 has security.encrypt =
 * off; 1 = the other way round. Same key: node1 is refused, and says why.
 */
START_TEST(test_auth_encrypt_mismatch_refused)
{
    struct h_cluster c;
    const char *off = "security.encrypt=off";
    const char *const sched[] = {"scheduler.policy=constant",
                                 "scheduler.group_size=1", set_a,
                                 _i == 0 ? NULL : off, NULL};
    const char *const first[] = {set_a, _i == 0 ? NULL : off, NULL};
    const char *const second[] = {set_a, _i == 0 ? off : NULL, NULL};
    ck_assert_int_eq(h_cluster_start(&c, 1, sched, first), 0);
    ck_assert_int_eq(h_node_start(&c, 1, second), 0);
    c.nnodes = 2;
    if (_i == 0)
        ck_assert(logged(&c, "node1",
                         "this side does not (security.encrypt "
                         "= off)"));
    else
        ck_assert(logged(&c, "node1",
                         "this side encrypts its links "
                         "(security.encrypt) and the other "
                         "does not"));
    pid_t bad = trainer(&c, "unsealed", 1);
    ck_assert_int_eq(h_wait(bad, 30000), 2);
    pid_t ok = trainer(&c, "s0", 0);
    ck_assert_int_eq(h_wait(ok, 30000), 0);
    ck_assert_int_eq(h_cluster_stop(&c), 0);
}
END_TEST

/* n bytes from fd, each read within 3 s: 0, or -1 (EOF, error, silence). */
static int read_full(int fd, uint8_t *p, size_t n)
{
    while (n > 0) {
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        ssize_t r = poll(&pfd, 1, 3000) == 1 ? read(fd, p, n) : -1;
        if (r <= 0)
            return -1;
        p += r;
        n -= (size_t)r;
    }
    return 0;
}

/* The next frame on fd, a message in clear; NULL if none came. */
static Pr__V1__Msg *read_msg(int fd)
{
    uint8_t hdr[PR_FRAME_HDR_LEN];
    struct pr_frame_hdr fh;
    if (read_full(fd, hdr, sizeof(hdr)) < 0 ||
        pr_frame_hdr_decode(hdr, 1 << 20, &fh) < 0 || fh.type != PR_FRAME_MSG)
        return NULL;
    uint8_t *body = malloc(fh.len + 1);
    Pr__V1__Msg *m = NULL;
    if (body && read_full(fd, body, fh.len) == 0)
        m = pr_msg_unpack(body, fh.len);
    free(body);
    return m;
}

/*
 * A peer that proves the key but picks no cipher (Hello.seal 0), to a
 * node that seals: refused at its hello, for that reason.
 */
START_TEST(test_auth_peer_in_clear_refused)
{
    struct h_cluster c;
    const char *const sched[] = {set_a, NULL};
    const char *const node[] = {set_a, NULL};
    ck_assert_int_eq(h_cluster_start(&c, 1, sched, node), 0);
    struct pr_auth_key key;
    const char *why = "";
    ck_assert_msg(pr_auth_load(key_a, &key, &why) == 0, "%s", why);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET,
                             .sin_port = htons(c.node_port[0])};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ck_assert_int_eq(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    Pr__V1__Msg *ch = read_msg(fd);
    ck_assert_ptr_nonnull(ch);
    ck_assert_int_eq(ch->body_case, PR__V1__MSG__BODY_CHALLENGE);
    ck_assert_uint_ne(ch->challenge->seal, 0);
    ck_assert_uint_eq(ch->challenge->nonce.len, PR_AUTH_NONCE_LEN);
    uint8_t auth[PR_AUTH_NONCE_LEN + PR_AUTH_PROOF_LEN];
    pr_auth_nonce(auth);
    pr_auth_prove(&key, 'C', ch->challenge->nonce.data, auth,
                  auth + PR_AUTH_NONCE_LEN);
    pr_msg_free(ch);
    Pr__V1__Msg m = PR__V1__MSG__INIT;
    Pr__V1__Hello h = PR__V1__HELLO__INIT;
    h.version = PR_PROTO_VERSION;
    h.role = PR__V1__ROLE__ROLE_NODE;
    h.node_id = 99;
    h.auth.data = auth;
    h.auth.len = sizeof(auth);
    h.seal = 0;
    m.body_case = PR__V1__MSG__BODY_HELLO;
    m.hello = &h;
    uint8_t *buf;
    size_t len;
    ck_assert_int_eq(pr_msg_frame(&m, 1 << 20, &buf, &len), 0);
    ck_assert_int_eq(write(fd, buf, len), (ssize_t)len);
    free(buf);
    ck_assert(logged(&c, "node0",
                     "(node 99): authentication failed: it does not encrypt "
                     "its links and this side does (security.encrypt)"));
    close(fd);
    ck_assert_int_eq(h_cluster_stop(&c), 0);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("integration_auth");
    TCase *tc = tcase_create("auth");
    tcase_set_timeout(tc, 60);
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_auth_same_key_runs);
    tcase_add_loop_test(tc, test_auth_sealed_streams_exact, 0, 2);
    tcase_add_loop_test(tc, test_auth_intruder_node_refused, 0, 2);
    tcase_add_test(tc, test_auth_peer_without_proof_refused);
    tcase_add_loop_test(tc, test_auth_encrypt_mismatch_refused, 0, 2);
    tcase_add_test(tc, test_auth_peer_in_clear_refused);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return check_run(suite());
}
