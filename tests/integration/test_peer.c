/* SPDX-License-Identifier: MIT */
/*
 * The node daemons' peer data port (daemon/xport/tcp/, its accept and
 * handshake) driven by hand: the test speaks the peer protocol over a plain
 * socket to real daemons.
 *
 *  1. A connection that never says hello is closed once the handshake
 *     deadline (node.connect_timeout_ms) passes.
 *  2. A hello from a node that is not a peer that connects to this node
 *     fails the connection with an Error the sender can read.
 *  3. A second connection from a node already connected replaces the
 *     first; the real peer then reconnects and replaces it back.
 *  4. Chunks with a bad length close the link with a logged reason.
 *  5. Chunks whose payload lands at an odd address in the receive buffer
 *     are taken (copied to aligned memory), not refused.
 *  6. A data frame before the welcome closes the link (the test is a fake
 *     node the real daemon connects to).
 * After each, the daemons still reduce: one trainer on each of two nodes,
 * policy allreduce, results checked.
 *
 * Node ids come from the scheduler in the order the nodes joined; the node
 * with the higher id connects to the one with the lower (the accepting
 * side, "lo"), so that is the node whose port the test impersonates a peer
 * on.
 */
#include <arpa/inet.h>
#include <check.h>
#include <errno.h>
#include <math.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#include "daemon/engine/xport.h"
#include "proto/frame.h"
#include "tests/integration/harness.h"
#include "tests/check_run.h"

/*
 * node.connect_timeout_ms for the daemons here: the hello deadline, which
 * every handshake of these clusters must also meet on a loaded machine.
 */
#define HELLO_TIMEOUT_MS 1500
/* A node id no daemon in these clusters has. */
#define PHANTOM_ID 1000

static struct h_cluster c;
static uint16_t metrics_port[2];
static uint32_t node_id[2];
static int lo, hi; /* indexes of the nodes with the lower and higher id */

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static const char *who(int i)
{
    return i == 0 ? "node0" : "node1";
}

/* Lines of a process's log that contain s. */
static int log_count(const char *w, const char *s)
{
    char path[400];
    snprintf(path, sizeof(path), "%s/%s.log", c.dir, w);
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    char line[2048];
    int n = 0;
    while (fgets(line, sizeof(line), f))
        n += strstr(line, s) != NULL;
    fclose(f);
    return n;
}

/* Polls a log for up to 3 s until s appears at least `times` times. */
static int logged_n(const char *w, const char *s, int times)
{
    for (int i = 0; i < 300; i++) {
        if (log_count(w, s) >= times)
            return 1;
        sleep_ms(10);
    }
    fprintf(stderr, "not logged %d times: '%s'\n", times, s);
    h_log_dump(&c, w);
    return 0;
}

static int logged(const char *w, const char *s)
{
    return logged_n(w, s, 1);
}

/* The id node i got from the scheduler, from its log (waits up to 3 s). */
static uint32_t joined_id(int i)
{
    char path[400];
    snprintf(path, sizeof(path), "%s/%s.log", c.dir, who(i));
    for (int t = 0; t < 300; t++) {
        FILE *f = fopen(path, "r");
        char line[2048];
        unsigned id = 0;
        while (f && fgets(line, sizeof(line), f)) {
            const char *p = strstr(line, "joined job '");
            if (p && (p = strstr(p, "' as node ")))
                sscanf(p, "' as node %u", &id);
        }
        if (f)
            fclose(f);
        if (id)
            return id;
        sleep_ms(10);
    }
    h_log_dump(&c, who(i));
    ck_abort_msg("%s never joined", who(i));
    return 0;
}

/*
 * The test's sockets are close-on-exec: a daemon started while one is open
 * must not keep it open after the test closes it.
 */
static int dial(uint16_t port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    ck_assert_int_ge(fd, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
        ck_abort_msg("connect port %u: %s", port, strerror(errno));
    return fd;
}

static void send_all(int fd, const void *p, size_t n)
{
    ck_assert_int_eq(write(fd, p, n), (ssize_t)n);
}

/*
 * Reads exactly n bytes before the deadline: n, 0 on EOF (or a reset),
 * -ETIMEDOUT.
 */
static int read_full(int fd, void *p, size_t n, double deadline_ms)
{
    size_t got = 0;
    while (got < n) {
        int left = (int)(deadline_ms - now_ms());
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        if (left <= 0 || poll(&pfd, 1, left) == 0)
            return -ETIMEDOUT;
        ssize_t r = read(fd, (char *)p + got, n - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return 0;
        got += (size_t)r;
    }
    return (int)n;
}

/* The next message frame within timeout_ms, or NULL (EOF, timeout). */
static Pr__V1__Msg *recv_msg(int fd, int timeout_ms)
{
    double end = now_ms() + timeout_ms;
    uint8_t h[PR_FRAME_HDR_LEN];
    struct pr_frame_hdr fh;
    if (read_full(fd, h, sizeof(h), end) != (int)sizeof(h) ||
        pr_frame_hdr_decode(h, 1 << 20, &fh) < 0 || fh.type != PR_FRAME_MSG)
        return NULL;
    uint8_t *b = malloc(fh.len ? fh.len : 1);
    ck_assert_ptr_nonnull(b);
    Pr__V1__Msg *m = NULL;
    if (read_full(fd, b, fh.len, end) == (int)fh.len)
        m = pr_msg_unpack(b, fh.len);
    free(b);
    return m;
}

/* Reads a message and checks its kind; the caller frees it. */
static Pr__V1__Msg *expect_msg(int fd, Pr__V1__Msg__BodyCase kind)
{
    Pr__V1__Msg *m = recv_msg(fd, 3000);
    ck_assert_msg(m != NULL, "no message (expected case %d)", (int)kind);
    ck_assert_msg(m->body_case == kind, "got %s, expected case %d",
                  pr_msg_name(m), (int)kind);
    return m;
}

/*
 * Discards whatever the daemon still sends until it closes: 0 once the
 * connection ended (EOF or reset), -ETIMEDOUT if it is still open after
 * timeout_ms.
 */
static int wait_closed(int fd, int timeout_ms)
{
    double end = now_ms() + timeout_ms;
    char buf[4096];
    for (;;) {
        int left = (int)(end - now_ms());
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        if (left <= 0 || poll(&pfd, 1, left) == 0)
            return -ETIMEDOUT;
        ssize_t r = read(fd, buf, sizeof(buf));
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return 0;
    }
}

static void send_msg(int fd, const Pr__V1__Msg *m)
{
    uint8_t *buf;
    size_t len;
    ck_assert_int_eq(pr_msg_frame(m, 1 << 20, &buf, &len), 0);
    send_all(fd, buf, len);
    free(buf);
}

/*
 * A peer's hello frame (no cluster key, no RDMA) into out; its length.
 * `name` only pads the message to the length a test needs.
 */
static size_t hello_frame(uint8_t *out, size_t cap, Pr__V1__Role role,
                          uint32_t id, const char *name)
{
    Pr__V1__Msg m = PR__V1__MSG__INIT;
    Pr__V1__Hello h = PR__V1__HELLO__INIT;
    h.version = PR_PROTO_VERSION;
    h.role = role;
    h.node_id = id;
    h.name = (char *)name;
    m.body_case = PR__V1__MSG__BODY_HELLO;
    m.hello = &h;
    uint8_t *buf;
    size_t len;
    ck_assert_int_eq(pr_msg_frame(&m, 1 << 20, &buf, &len), 0);
    ck_assert_uint_le(len, cap);
    memcpy(out, buf, len);
    free(buf);
    return len;
}

/*
 * A data frame with a chunk header saying `nfloats` floats for group `gid`
 * and `payload` bytes after the header (value 1.5f where they make
 * floats); `hdr_len` bytes of chunk header (PR_CHUNK_HDR_LEN normally).
 */
static size_t chunk_frame_enc(uint8_t *out, size_t cap, uint64_t gid,
                              uint32_t nfloats, uint32_t enc, size_t payload,
                              size_t hdr_len)
{
    size_t n = hdr_len + payload;
    ck_assert_uint_le(PR_FRAME_HDR_LEN + n, cap);
    pr_frame_hdr_encode(out, (uint32_t)n, PR_FRAME_DATA, 0);
    uint8_t hdr[PR_CHUNK_HDR_LEN];
    struct pr_chunk_hdr h = {.group_id = gid,
                             .total = nfloats,
                             .off = 0,
                             .nfloats = nfloats,
                             .step = 0,
                             .seg = 0,
                             .enc = enc};
    pr_chunk_hdr_encode(hdr, &h);
    memcpy(out + PR_FRAME_HDR_LEN, hdr,
           hdr_len < sizeof(hdr) ? hdr_len : sizeof(hdr));
    uint8_t *p = out + PR_FRAME_HDR_LEN + hdr_len;
    const float v = 1.5f;
    for (size_t i = 0; i < payload; i++)
        p[i] = ((const uint8_t *)&v)[i % sizeof(v)];
    return PR_FRAME_HDR_LEN + n;
}

/* An fp32 chunk's frame. */
static size_t chunk_frame(uint8_t *out, size_t cap, uint64_t gid,
                          uint32_t nfloats, size_t payload, size_t hdr_len)
{
    return chunk_frame_enc(out, cap, gid, nfloats, 0, payload, hdr_len);
}

/*
 * Connects to node i's data port as peer `id`, reads its challenge, sends
 * the hello and checks the welcome: the link is up on the daemon's side.
 */
static int join_as_peer(int i, uint32_t id)
{
    int fd = dial(c.node_port[i]);
    Pr__V1__Msg *m = expect_msg(fd, PR__V1__MSG__BODY_CHALLENGE);
    ck_assert_int_eq(m->challenge->required, 0);
    pr_msg_free(m);
    uint8_t b[512];
    send_all(fd, b, hello_frame(b, sizeof(b), PR__V1__ROLE__ROLE_NODE, id, ""));
    m = expect_msg(fd, PR__V1__MSG__BODY_WELCOME);
    ck_assert_uint_eq(m->welcome->version, PR_PROTO_VERSION);
    ck_assert_uint_eq(m->welcome->id, node_id[i]);
    ck_assert_ptr_null(m->welcome->rdma);
    pr_msg_free(m);
    return fd;
}

/* A counter from node i's /metrics. */
static double node_metric(int i, const char *prefix)
{
    char *body = h_metrics_fetch(metrics_port[i]);
    ck_assert_ptr_nonnull(body);
    double v = h_metric(body, prefix);
    free(body);
    ck_assert_msg(!isnan(v), "no metric %s", prefix);
    return v;
}

#define STASHED "preduce_node_stash_chunks_total{result=\"stashed\"} "
#define TCP_RECV                                                               \
    "preduce_node_bytes_total{transport=\"tcp\",direction=\"received\"} "

/* Starts node i with its own metrics port and a hello deadline. */
static void start_node(int i, int timeout_ms)
{
    char mset[64], tset[64];
    metrics_port[i] = h_free_port();
    snprintf(mset, sizeof(mset), "metrics.listen=127.0.0.1:%u",
             metrics_port[i]);
    snprintf(tset, sizeof(tset), "node.connect_timeout_ms=%d", timeout_ms);
    const char *const sets[] = {mset, tset, NULL};
    if (c.nnodes < i + 1)
        c.nnodes = i + 1;
    ck_assert_int_eq(h_node_start(&c, i, sets), 0);
    node_id[i] = joined_id(i);
}

static const char *const sched_sets[] = {"scheduler.policy=allreduce", NULL};

/* Two nodes, and the link between them up. */
static void setup(void)
{
    ck_assert_int_eq(h_cluster_start(&c, 0, sched_sets, NULL), 0);
    start_node(0, HELLO_TIMEOUT_MS);
    start_node(1, HELLO_TIMEOUT_MS);
    lo = node_id[0] < node_id[1] ? 0 : 1;
    hi = 1 - lo;
    ck_assert(logged(who(lo), "link up (tcp)"));
    ck_assert(logged(who(hi), "link up (tcp)"));
}

static void teardown(void)
{
    ck_assert_int_eq(h_cluster_stop(&c), 0);
}

/* The cluster still reduces: a trainer on each node, 5 checked steps. */
static void still_serving(void)
{
    static int round;
    pid_t pids[2];
    char names[2][16];
    round++;
    for (int i = 0; i < 2; i++) {
        snprintf(names[i], sizeof(names[i]), "r%dt%d", round, i);
        struct h_trainer_opts o = {
            .name = names[i], .node = i, .n = 1000, .steps = 5, .uniform = 1};
        pids[i] = h_trainer_spawn(&c, &o);
    }
    for (int i = 0; i < 2; i++)
        ck_assert_int_eq(h_wait(pids[i], 20000), 0);
}

START_TEST(test_peer_stranger_expires)
{
    double t0 = now_ms();
    int fd = dial(c.node_port[lo]);
    Pr__V1__Msg *m = expect_msg(fd, PR__V1__MSG__BODY_CHALLENGE);
    pr_msg_free(m);
    /* No hello: the daemon gives up after the deadline and a sweep. */
    ck_assert_int_eq(wait_closed(fd, HELLO_TIMEOUT_MS + 4000), 0);
    double waited = now_ms() - t0;
    close(fd);
    ck_assert_msg(waited >= HELLO_TIMEOUT_MS - 100,
                  "closed after %.0f ms, before the %d ms deadline", waited,
                  HELLO_TIMEOUT_MS);
    char s[96];
    snprintf(s, sizeof(s), "peer link from 127.0.0.1: no hello within %d ms",
             HELLO_TIMEOUT_MS);
    ck_assert(logged(who(lo), s));
    still_serving();
}
END_TEST

/*
 * Hellos that are not from a peer that connects to the node dialled: a
 * trainer's role, the node's own id, and a lower id (a node this one
 * connects to itself).
 */
START_TEST(test_peer_not_a_peer)
{
    int target;
    Pr__V1__Role role = PR__V1__ROLE__ROLE_NODE;
    uint32_t id;
    if (_i == 0) {
        target = lo;
        role = PR__V1__ROLE__ROLE_CLIENT;
        id = PHANTOM_ID;
    } else if (_i == 1) {
        target = hi;
        id = node_id[hi];
    } else {
        target = hi;
        id = node_id[lo];
    }
    int fd = dial(c.node_port[target]);
    pr_msg_free(expect_msg(fd, PR__V1__MSG__BODY_CHALLENGE));
    uint8_t b[512];
    send_all(fd, b, hello_frame(b, sizeof(b), role, id, "intruder"));
    Pr__V1__Msg *m = expect_msg(fd, PR__V1__MSG__BODY_ERROR);
    ck_assert_int_eq(m->error->code, -EPROTO);
    ck_assert_str_eq(m->error->reason, "not a peer of this node");
    pr_msg_free(m);
    ck_assert_int_eq(wait_closed(fd, HELLO_TIMEOUT_MS + 4000), 0);
    close(fd);
    char s[160];
    snprintf(s, sizeof(s),
             "hello from role %d node %u is not a peer that connects to "
             "node %u: closing",
             (int)role, id, node_id[target]);
    ck_assert(logged(who(target), s));
    /* Refused before it could touch the real link. */
    ck_assert_int_eq(log_count(who(target), "replaces the old one"), 0);
    still_serving();
}
END_TEST

/*
 * A restarted daemon cannot do this: the scheduler gives it a new id. So
 * the test connects as the node already linked.
 */
START_TEST(test_peer_second_connection_replaces)
{
    char replaced[96], down[96];
    snprintf(replaced, sizeof(replaced),
             "peer node %u: new connection replaces the old one", node_id[hi]);
    snprintf(down, sizeof(down), "peer node %u (127.0.0.1:%u): link down",
             node_id[lo], c.node_port[lo]);
    ck_assert_int_eq(log_count(who(lo), replaced), 0);
    /* The test says it is node hi while the real one is connected. */
    int fd = join_as_peer(lo, node_id[hi]);
    ck_assert(logged(who(lo), replaced));
    /* The real hi lost its link, reconnects, and replaces the test's. */
    ck_assert(logged(who(hi), down));
    ck_assert_int_eq(wait_closed(fd, HELLO_TIMEOUT_MS + 4000), 0);
    close(fd);
    ck_assert(logged_n(who(lo), replaced, 2));
    ck_assert(logged_n(who(hi), "link up (tcp)", 2));
    still_serving();
}
END_TEST

/*
 * Data frames on a link that is up, with bad chunk lengths: shorter than a
 * chunk header; a header whose float count disagrees with the payload
 * (also by a count that would wrap a 32-bit size); a payload that is not
 * whole floats; a bf16 chunk of fp32's size; an encoding that is none.
 */
START_TEST(test_peer_bad_chunk_closes)
{
    int fd = join_as_peer(lo, PHANTOM_ID);
    uint8_t b[256];
    size_t n;
    char s[160];
    switch (_i) {
    case 0:
        n = chunk_frame(b, sizeof(b), 1, 0, 0, 20);
        snprintf(s, sizeof(s),
                 "peer node %u: data frame of 20 bytes before the link was "
                 "up or shorter than a chunk header: closing",
                 PHANTOM_ID);
        break;
    case 1:
        n = chunk_frame(b, sizeof(b), 1, 3, 16, PR_CHUNK_HDR_LEN);
        snprintf(s, sizeof(s),
                 "peer node %u: chunk says 3 floats in fp32 but carries 16 "
                 "bytes: closing",
                 PHANTOM_ID);
        break;
    case 2:
        n = chunk_frame(b, sizeof(b), 1, 0x40000001u, 4, PR_CHUNK_HDR_LEN);
        snprintf(s, sizeof(s),
                 "peer node %u: chunk says 1073741825 floats in fp32 but "
                 "carries 4 bytes: closing",
                 PHANTOM_ID);
        break;
    case 3:
        n = chunk_frame(b, sizeof(b), 1, 3, 13, PR_CHUNK_HDR_LEN);
        snprintf(s, sizeof(s),
                 "peer node %u: chunk says 3 floats in fp32 but carries 13 "
                 "bytes: closing",
                 PHANTOM_ID);
        break;
    case 4:
        /* bf16's 6 bytes, sent as fp32's 12. */
        n = chunk_frame_enc(b, sizeof(b), 1, 3, 1, 12, PR_CHUNK_HDR_LEN);
        snprintf(s, sizeof(s),
                 "peer node %u: chunk says 3 floats in bf16 but carries 12 "
                 "bytes: closing",
                 PHANTOM_ID);
        break;
    default:
        n = chunk_frame_enc(b, sizeof(b), 1, 3, 7, 12, PR_CHUNK_HDR_LEN);
        snprintf(s, sizeof(s),
                 "peer node %u: chunk in encoding 7, which is none: closing",
                 PHANTOM_ID);
        break;
    }
    send_all(fd, b, n);
    ck_assert_int_eq(wait_closed(fd, HELLO_TIMEOUT_MS + 4000), 0);
    close(fd);
    ck_assert(logged(who(lo), s));
    /* Nothing of it reached the engine. */
    ck_assert(node_metric(lo, STASHED) == 0);
    still_serving();
}
END_TEST

/*
 * The hello and the chunks after it go out in one write, so the daemon
 * reads them into its buffer together: with a hello frame of a length that
 * is not a multiple of 4, every chunk payload behind it sits at an odd
 * address. The first chunk is empty: nothing to copy and no copy buffer
 * yet (the daemon once passed memcpy that NULL buffer, which UBSan stops
 * in `make asan`); the next ones make the buffer grow and then fit. They are
 * for a group far in the future, so the engine keeps them in its stash, where
 * the metrics count them and their bytes; the link stays up until the test
 * closes it.
 */
START_TEST(test_peer_unaligned_chunks_taken)
{
    double stashed0 = node_metric(lo, STASHED);
    double recv0 = node_metric(lo, TCP_RECV);
    int fd = dial(c.node_port[lo]);
    pr_msg_free(expect_msg(fd, PR__V1__MSG__BODY_CHALLENGE));
    uint8_t b[2048];
    size_t n = 0;
    /*
     * An empty name is left out of the message, so names of 0, 1, 2, ...
     * letters give lengths L, L+3, L+4, ...: up to 7 letters reach every
     * residue whatever L is.
     */
    char name[9] = "";
    for (int pad = 0;; pad++) {
        ck_assert_int_lt(pad, 8);
        name[pad] = '\0';
        n = hello_frame(b, sizeof(b), PR__V1__ROLE__ROLE_NODE, PHANTOM_ID,
                        name);
        if ((n - PR_FRAME_HDR_LEN) % 4 == 2)
            break;
        name[pad] = 'x';
        name[pad + 1] = '\0';
    }
    static const uint32_t counts[] = {0, 3, 100, 2};
    size_t bytes = 0;
    for (size_t k = 0; k < sizeof(counts) / sizeof(counts[0]); k++) {
        n += chunk_frame(b + n, sizeof(b) - n, UINT64_MAX - 10 + k, counts[k],
                         counts[k] * sizeof(float), PR_CHUNK_HDR_LEN);
        bytes += counts[k] * sizeof(float);
    }
    send_all(fd, b, n);
    pr_msg_free(expect_msg(fd, PR__V1__MSG__BODY_WELCOME));
    double stashed = stashed0;
    for (int t = 0; t < 300 && stashed < stashed0 + 4; t++) {
        sleep_ms(10);
        stashed = node_metric(lo, STASHED);
    }
    ck_assert_msg(stashed == stashed0 + 4, "stashed %.0f, expected %.0f",
                  stashed, stashed0 + 4);
    ck_assert(node_metric(lo, TCP_RECV) == recv0 + (double)bytes);
    /* The link was still up: the daemon sees the test close it. */
    char s[96];
    snprintf(s, sizeof(s), "peer node %u:", PHANTOM_ID);
    ck_assert_int_eq(log_count(who(lo), s), 0);
    close(fd);
    snprintf(s, sizeof(s), "peer node %u (): link down: closed", PHANTOM_ID);
    ck_assert(logged(who(lo), s));
    still_serving();
}
END_TEST

/*
 * The test registers with the scheduler as a node before the real ones
 * join, so it gets the lowest id and they connect to its listener. It
 * answers node0's hello with a data frame instead of a welcome.
 */
START_TEST(test_peer_data_before_welcome)
{
    ck_assert_int_eq(h_cluster_start(&c, 0, sched_sets, NULL), 0);
    int lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t slen = sizeof(sa);
    ck_assert_int_eq(bind(lfd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    ck_assert_int_eq(listen(lfd, 8), 0);
    ck_assert_int_eq(getsockname(lfd, (struct sockaddr *)&sa, &slen), 0);
    char addr[64];
    snprintf(addr, sizeof(addr), "127.0.0.1:%u", ntohs(sa.sin_port));

    int sfd = dial(c.sched_port);
    pr_msg_free(expect_msg(sfd, PR__V1__MSG__BODY_CHALLENGE));
    Pr__V1__Msg m = PR__V1__MSG__INIT;
    Pr__V1__Hello h = PR__V1__HELLO__INIT;
    h.version = PR_PROTO_VERSION;
    h.role = PR__V1__ROLE__ROLE_NODE;
    h.name = "fake";
    h.data_addr = addr;
    m.body_case = PR__V1__MSG__BODY_HELLO;
    m.hello = &h;
    send_msg(sfd, &m);
    Pr__V1__Msg *w = expect_msg(sfd, PR__V1__MSG__BODY_WELCOME);
    uint32_t fake_id = w->welcome->id;
    pr_msg_free(w);

    /* The default deadline: node0's connect waits for the test's accept. */
    start_node(0, 5000);
    ck_assert_uint_gt(node_id[0], fake_id);
    struct pollfd pfd = {.fd = lfd, .events = POLLIN};
    ck_assert_int_eq(poll(&pfd, 1, 3000), 1);
    int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
    ck_assert_int_ge(fd, 0);
    Pr__V1__Msg cm = PR__V1__MSG__INIT;
    Pr__V1__Challenge ch = PR__V1__CHALLENGE__INIT;
    uint8_t nonce[32] = {1, 2, 3};
    ch.nonce.data = nonce;
    ch.nonce.len = sizeof(nonce);
    cm.body_case = PR__V1__MSG__BODY_CHALLENGE;
    cm.challenge = &ch;
    send_msg(fd, &cm);
    Pr__V1__Msg *hm = expect_msg(fd, PR__V1__MSG__BODY_HELLO);
    ck_assert_uint_eq(hm->hello->node_id, node_id[0]);
    pr_msg_free(hm);
    /* A whole chunk, where the welcome should be. */
    uint8_t b[256];
    send_all(
        fd, b,
        chunk_frame(b, sizeof(b), 1, 4, 4 * sizeof(float), PR_CHUNK_HDR_LEN));
    ck_assert_int_eq(wait_closed(fd, HELLO_TIMEOUT_MS + 4000), 0);
    close(fd);
    char s[160];
    snprintf(s, sizeof(s),
             "peer node %u: data frame of %zu bytes before the link was up "
             "or shorter than a chunk header: closing",
             fake_id, PR_CHUNK_HDR_LEN + 4 * sizeof(float));
    ck_assert(logged("node0", s));

    /* The fake node leaves the job; node0 forgets it. */
    close(lfd);
    close(sfd);
    snprintf(s, sizeof(s), "peer node %u (%s) left the job", fake_id, addr);
    ck_assert(logged("node0", s));
    start_node(1, HELLO_TIMEOUT_MS);
    still_serving();
    ck_assert_int_eq(h_cluster_stop(&c), 0);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("integration_peer");
    TCase *tc = tcase_create("peer");
    tcase_set_timeout(tc, 60);
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_peer_stranger_expires);
    tcase_add_loop_test(tc, test_peer_not_a_peer, 0, 3);
    tcase_add_test(tc, test_peer_second_connection_replaces);
    tcase_add_loop_test(tc, test_peer_bad_chunk_closes, 0, 6);
    tcase_add_test(tc, test_peer_unaligned_chunks_taken);
    suite_add_tcase(s, tc);
    TCase *tf = tcase_create("fake_node");
    tcase_set_timeout(tf, 60);
    tcase_add_test(tf, test_peer_data_before_welcome);
    suite_add_tcase(s, tf);
    return s;
}

int main(void)
{
    /* These tests speak the TCP peer protocol: no RDMA settings. */
    unsetenv("PREDUCE_TEST_NODE_SETS");
    return check_run(suite());
}
