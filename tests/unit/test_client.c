/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for libpreduce (suite "client"), without a daemon: argument
 * checks, connecting and the answers to a hello, the connect options,
 * error texts and the exported symbols. Tensors and reduces are tested in
 * test_client_tensor.c; the scripted server is client_fixture.h.
 */
#include <check.h>
#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "preduce.h"
#include "proto/frame.h"
#include "tests/unit/client_fixture.h"
#include "tests/check_run.h"

/* ---- argument validation ---------------------------------------------- */

START_TEST(test_client_connect_args)
{
    preduce_client_t *c = (preduce_client_t *)&c;
    char longname[65], longpath[200];
    memset(longname, 'a', 64);
    longname[64] = 0;
    memset(longpath, 'p', sizeof(longpath) - 1);
    longpath[sizeof(longpath) - 1] = 0;

    ck_assert_int_eq(preduce_connect(NULL, "w0", 100, &c), -EINVAL);
    ck_assert_ptr_null(c);
    ck_assert_int_eq(preduce_connect("/nonexistent", NULL, 100, &c), -EINVAL);
    ck_assert_int_eq(preduce_connect("/nonexistent", "w0", 100, NULL), -EINVAL);
    ck_assert_int_eq(preduce_connect("/nonexistent", "", 100, &c), -EINVAL);
    ck_assert_int_eq(preduce_connect("/nonexistent", longname, 100, &c),
                     -EINVAL);
    ck_assert_int_eq(preduce_connect("/nonexistent", "a\nb", 100, &c), -EINVAL);
    ck_assert_int_eq(preduce_connect("/nonexistent", "w0", -1, &c), -EINVAL);
    ck_assert_int_eq(preduce_connect("", "w0", 100, &c), -EINVAL);
    ck_assert_int_eq(preduce_connect(longpath, "w0", 100, &c), -EINVAL);
    /* 63 bytes is still a valid name: the socket is what is missing. */
    longname[63] = 0;
    ck_assert_int_eq(preduce_connect("/nonexistent", longname, 100, &c),
                     -ENOENT);
    ck_assert_ptr_null(c);
}
END_TEST

START_TEST(test_client_null_handles)
{
    preduce_tensor_t *t = (preduce_tensor_t *)&t;
    uint32_t rank;
    ck_assert_int_eq(preduce_close(NULL), 0);
    ck_assert_int_eq(preduce_rank(NULL), -EINVAL);
    ck_assert_int_eq(preduce_fd(NULL), -EINVAL);
    ck_assert_int_eq(preduce_tensor_create(NULL, 4, 100, &t), -EINVAL);
    ck_assert_ptr_null(t);
    ck_assert_ptr_null(preduce_tensor_data(NULL));
    ck_assert_uint_eq(preduce_tensor_len(NULL), 0);
    ck_assert_int_eq(preduce_tensor_destroy(NULL), -EINVAL);
    ck_assert_int_eq(preduce_reduce(NULL, &t, 1, 100), -EINVAL);
    ck_assert_int_eq(preduce_reduce_start(NULL, &t, 1, 100), -EINVAL);
    ck_assert_int_eq(preduce_reduce_wait(NULL, 0), -EINVAL);
    ck_assert_ptr_null(preduce_last_result(NULL));
    ck_assert_uint_eq(preduce_result_group(NULL), 0);
    ck_assert_uint_eq(preduce_result_size(NULL), 0);
    ck_assert_int_eq(preduce_result_member(NULL, 0, &rank, NULL, NULL),
                     -EINVAL);
    ck_assert_uint_eq(preduce_result_version(NULL), 0);
    ck_assert(preduce_result_weight(NULL) == 0.0);
    ck_assert_str_eq(preduce_result_wire(NULL), "");
    ck_assert_str_eq(preduce_wire(NULL), "");
}
END_TEST

static void script_two_tensors_idle(struct srv *s, int fd)
{
    if (cf_srv_welcome(s, fd) && cf_srv_tensor(s, fd, 1))
        cf_wait_eof(fd);
}

START_TEST(test_client_reduce_args)
{
    struct srv s1, s2;
    cf_srv_start(&s1, script_two_tensors_idle, 0);
    cf_srv_start(&s2, script_two_tensors_idle, 0);
    preduce_client_t *c1 = cf_connect_ok(&s1);
    preduce_client_t *c2 = cf_connect_ok(&s2);
    preduce_tensor_t *t1, *t2, *t;
    ck_assert_int_eq(preduce_tensor_create(c1, 16, 3000, &t1), 0);
    ck_assert_int_eq(preduce_tensor_create(c2, 16, 3000, &t2), 0);

    ck_assert_int_eq(preduce_tensor_create(c1, 0, 3000, &t), -EINVAL);
    ck_assert_ptr_null(t);
    ck_assert_int_eq(preduce_tensor_create(c1, 16, -1, &t), -EINVAL);
    ck_assert_int_eq(preduce_tensor_create(c1, SIZE_MAX, 100, &t), -EINVAL);
    ck_assert_int_eq(preduce_tensor_create(c1, 16, 100, NULL), -EINVAL);

    preduce_tensor_t *dup[] = {t1, t1};
    preduce_tensor_t *other[] = {t1, t2};
    preduce_tensor_t *null[] = {t1, NULL};
    ck_assert_int_eq(preduce_reduce(c1, NULL, 1, 100), -EINVAL);
    ck_assert_int_eq(preduce_reduce(c1, &t1, 0, 100), -EINVAL);
    ck_assert_int_eq(preduce_reduce(c1, &t1, 1, -5), -EINVAL);
    ck_assert_int_eq(preduce_reduce(c1, dup, 2, 100), -EINVAL);
    ck_assert_int_eq(preduce_reduce(c1, other, 2, 100), -EINVAL);
    ck_assert_int_eq(preduce_reduce(c1, null, 2, 100), -EINVAL);
    ck_assert_int_eq(preduce_reduce(c2, &t1, 1, 100), -EINVAL);
    ck_assert_int_eq(preduce_reduce_wait(c1, 0), -EINVAL); /* none started */
    ck_assert_int_eq(preduce_reduce_wait(c1, -1), -EINVAL);
    ck_assert_ptr_null(preduce_last_result(c1));

    ck_assert_int_eq(preduce_tensor_destroy(t1), 0);
    ck_assert_int_eq(preduce_close(c1), 0);
    ck_assert_int_eq(preduce_close(c2), 0); /* frees t2 */
    cf_srv_stop(&s1);
    cf_srv_stop(&s2);
}
END_TEST

/* ---- connecting ------------------------------------------------------- */

START_TEST(test_client_connect_missing)
{
    char dir[] = "/tmp/preduce-test-XXXXXX", path[64];
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(path, sizeof(path), "%s/none.sock", dir);
    preduce_client_t *c;
    ck_assert_int_eq(preduce_connect(path, "w0", 1000, &c), -ENOENT);
    ck_assert_ptr_null(c);
    rmdir(dir);
}
END_TEST

START_TEST(test_client_connect_refused)
{
    struct srv s;
    cf_srv_init(&s, NULL, 0, false); /* bound, nobody listening */
    preduce_client_t *c;
    ck_assert_int_eq(preduce_connect(s.path, "w0", 1000, &c), -ECONNREFUSED);
    ck_assert_ptr_null(c);
    cf_srv_stop(&s);
}
END_TEST

static void script_silent(struct srv *s, int fd)
{
    Pr__V1__Msg *m = cf_srv_expect(s, fd, PR__V1__MSG__BODY_HELLO);
    pr_msg_free(m);
    cf_wait_eof(fd);
}

START_TEST(test_client_connect_timeout)
{
    struct srv s;
    int fds = cf_count_fds();
    cf_srv_start(&s, script_silent, 0);
    preduce_client_t *c;
    int64_t t0 = cf_now_ms();
    ck_assert_int_eq(preduce_connect(s.path, "w0", 300, &c), -ETIMEDOUT);
    int64_t dt = cf_now_ms() - t0;
    ck_assert_ptr_null(c);
    ck_assert_int_ge(dt, 290);
    ck_assert_int_lt(dt, 300 + 1500);
    cf_srv_stop(&s);
    ck_assert_int_eq(cf_count_fds(), fds);
}
END_TEST

static void script_ping_first(struct srv *s, int fd)
{
    Pr__V1__Ping p = PR__V1__PING__INIT;
    Pr__V1__Msg m = PR__V1__MSG__INIT;
    p.nonce = 77;
    m.body_case = PR__V1__MSG__BODY_PING;
    m.ping = &p;
    Pr__V1__Msg *h = cf_srv_expect(s, fd, PR__V1__MSG__BODY_HELLO);
    if (!h)
        return;
    pr_msg_free(h);
    cf_srv_send(fd, &m, -1);
    Pr__V1__Msg *r = cf_srv_expect(s, fd, PR__V1__MSG__BODY_PONG);
    if (!r)
        return;
    bool ok = EXPECT(s, r->pong->nonce == 77);
    pr_msg_free(r);
    if (ok)
        cf_send_welcome(fd, PR_PROTO_VERSION, 3);
    cf_wait_eof(fd);
}

START_TEST(test_client_connect_ok)
{
    struct srv s;
    cf_srv_start(&s, script_ping_first, 0);
    preduce_client_t *c = cf_connect_ok(&s);
    ck_assert_int_eq(preduce_rank(c), 3);
    ck_assert_int_ge(preduce_fd(c), 0);
    struct pollfd pf = {.fd = preduce_fd(c), .events = POLLIN};
    ck_assert_int_eq(poll(&pf, 1, 0), 0); /* nothing to wait for */
    preduce_close(c);
    cf_srv_stop(&s);
}
END_TEST

static void script_welcome_then_close(struct srv *s, int fd)
{
    cf_srv_welcome(s, fd);
}

/* preduce_rank() on a broken connection is a negative errno, not a rank. */
START_TEST(test_client_rank_after_break)
{
    struct srv s;
    cf_srv_start(&s, script_welcome_then_close, 0);
    preduce_client_t *c = cf_connect_ok(&s);
    ck_assert_int_eq(preduce_rank(c), 3);
    cf_srv_stop(&s); /* the daemon has closed its end */
    preduce_tensor_t *t;
    int rc = preduce_tensor_create(c, 4, 1000, &t);
    ck_assert_msg(rc == -EPIPE || rc == -ECONNRESET, "got %d", rc);
    ck_assert_int_eq(preduce_rank(c), -ENOTCONN);
    preduce_close(c);
}
END_TEST

/* Wrong answers to a hello, and the code each must produce. */
static const struct bad_answer bad_answers[] = {
    {"length prefix 2 GiB", -EMSGSIZE, -EPROTO},
    {"length prefix over PR_CTRL_MAX_FRAME", -EMSGSIZE, -EPROTO},
    {"garbage payload", -EPROTO, -EPROTO},
    {"unknown frame type", -EPROTO, -EPROTO},
    {"data frame", -EPROTO, -EPROTO},
    {"empty Msg", -EPROTO, -EPROTO},
    {"welcome of version 2", -EPROTO, -EPROTO},
    {"welcome with a rank over INT_MAX", -EPROTO, -EPROTO},
    {"reduce_done before welcome", -EPROTO, -EPROTO},
    {"error with a positive code", -EPROTO, -EPROTO},
    {"error -EEXIST", -EEXIST, -EEXIST},
    {"close", -EPIPE, -ECONNRESET},
    {"close mid-frame", -EPIPE, -ECONNRESET},
};

static void script_bad_answer(struct srv *s, int fd)
{
    uint8_t buf[64];
    memset(buf, 0xff, sizeof(buf));
    Pr__V1__Msg *m = cf_srv_expect(s, fd, PR__V1__MSG__BODY_HELLO);
    if (!m)
        return;
    pr_msg_free(m);
    switch (s->variant) {
    case 0:
        pr_frame_hdr_encode(buf, 0x7fffffff, PR_FRAME_MSG, 0);
        cf_send_raw(fd, buf, PR_FRAME_HDR_LEN, -1);
        break;
    case 1:
        pr_frame_hdr_encode(buf, PR_CTRL_MAX_FRAME + 1, PR_FRAME_MSG, 0);
        cf_send_raw(fd, buf, PR_FRAME_HDR_LEN, -1);
        break;
    case 2:
        pr_frame_hdr_encode(buf, 16, PR_FRAME_MSG, 0);
        cf_send_raw(fd, buf, PR_FRAME_HDR_LEN + 16, -1);
        break;
    case 3:
        pr_frame_hdr_encode(buf, 4, 9, 0);
        cf_send_raw(fd, buf, PR_FRAME_HDR_LEN + 4, -1);
        break;
    case 4:
        pr_frame_hdr_encode(buf, 4, PR_FRAME_DATA, 0);
        cf_send_raw(fd, buf, PR_FRAME_HDR_LEN + 4, -1);
        break;
    case 5:
        pr_frame_hdr_encode(buf, 0, PR_FRAME_MSG, 0);
        cf_send_raw(fd, buf, PR_FRAME_HDR_LEN, -1);
        break;
    case 6:
        cf_send_welcome(fd, PR_PROTO_VERSION + 1, 3);
        break;
    case 7:
        cf_send_welcome(fd, PR_PROTO_VERSION, 0x80000000u);
        break;
    case 8:
        cf_send_done(fd, 1, 0, 1, 1);
        break;
    case 9:
        cf_send_error(fd, 5);
        break;
    case 10:
        cf_send_error(fd, -EEXIST);
        return; /* and close, as the daemon does */
    case 11:
        return;
    case 12:
        pr_frame_hdr_encode(buf, 40, PR_FRAME_MSG, 0);
        cf_send_raw(fd, buf, PR_FRAME_HDR_LEN + 10, -1);
        return;
    }
    cf_wait_eof(fd);
}

START_TEST(test_client_connect_bad_answer)
{
    const struct bad_answer *b = &bad_answers[_i];
    struct srv s;
    int fds = cf_count_fds();
    cf_srv_start(&s, script_bad_answer, _i);
    preduce_client_t *c;
    int rc = preduce_connect(s.path, "w0", 3000, &c);
    ck_assert_msg(rc == b->code || rc == b->alt, "%s: got %d (%s)", b->what, rc,
                  preduce_strerror(rc));
    ck_assert_ptr_null(c);
    cf_srv_stop(&s);
    ck_assert_int_eq(cf_count_fds(), fds);
}
END_TEST

/* ---- options ---------------------------------------------------------- */

/* "wire" takes the three encodings' names, as the daemon spells them. */
START_TEST(test_client_options_wire)
{
    preduce_options_t *o;
    ck_assert_int_eq(preduce_options_create(&o), 0);
    static const char *const good[] = {"fp32", "bf16", "int8"};
    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++)
        ck_assert_int_eq(preduce_options_set(o, "wire", good[i]), 0);
    static const char *const bad[] = {"", "fp16", "FP32", "int8 ", "default"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        ck_assert_msg(preduce_options_set(o, "wire", bad[i]) == -EINVAL, "%s",
                      bad[i]);
    ck_assert_int_eq(preduce_options_set(o, "wires", "fp32"), -EINVAL);
    ck_assert_int_eq(preduce_options_set(o, "wire", NULL), -EINVAL);
    preduce_options_destroy(o);
}
END_TEST

/*
 * Where each reduce's Reduce.wire comes from: the options' "wire", else
 * PREDUCE_WIRE, else 0 (the node's transport.wire); the encoding's
 * number is enum pr_wire + 1.
 */
static const struct {
    const char *option; /* NULL: not set */
    const char *env;    /* NULL: unset */
    uint32_t wire;      /* Reduce.wire the fake daemon must see */
} wire_cases[] = {
    {NULL, NULL, 0},   {NULL, "", 0},       {NULL, "bf16", 2},
    {"int8", NULL, 3}, {"fp32", "int8", 1}, {"bf16", "fp16", 2},
    {NULL, "fp32", 1},
};

static void script_wire(struct srv *s, int fd)
{
    if (!cf_srv_welcome(s, fd) || !cf_srv_tensor(s, fd, 1))
        return;
    for (uint64_t seq = 1; seq <= 2; seq++) {
        Pr__V1__Msg *m = cf_srv_expect(s, fd, PR__V1__MSG__BODY_REDUCE);
        if (!m)
            return;
        bool ok = EXPECT(s, m->reduce->wire == wire_cases[s->variant].wire);
        pr_msg_free(m);
        if (!ok)
            return;
        cf_send_done(fd, seq, 0, seq, seq);
    }
    cf_wait_eof(fd);
}

START_TEST(test_client_wire_sent)
{
    struct srv s;
    preduce_options_t *o;
    preduce_client_t *c = NULL;
    preduce_tensor_t *t;
    if (wire_cases[_i].env)
        setenv("PREDUCE_WIRE", wire_cases[_i].env, 1);
    else
        unsetenv("PREDUCE_WIRE");
    ck_assert_int_eq(preduce_options_create(&o), 0);
    if (wire_cases[_i].option)
        ck_assert_int_eq(preduce_options_set(o, "wire", wire_cases[_i].option),
                         0);
    cf_srv_start(&s, script_wire, _i);
    int rc = preduce_connect_with(s.path, "w0", o, 3000, &c);
    preduce_options_destroy(o);
    ck_assert_msg(rc == 0, "connect: %s (server: %s)", preduce_strerror(rc),
                  s.fail);
    ck_assert_int_eq(preduce_tensor_create(c, 16, 3000, &t), 0);
    /* Every reduce carries it, not only the first. */
    for (int i = 0; i < 2; i++) {
        rc = preduce_reduce(c, &t, 1, 3000);
        ck_assert_msg(rc == 0, "reduce %d: %s (server: %s)", i + 1,
                      preduce_strerror(rc), s.fail);
    }
    preduce_close(c);
    cf_srv_stop(&s);
}
END_TEST

/* A bad PREDUCE_WIRE fails the connect before it begins, and says why. */
START_TEST(test_client_wire_env_bad)
{
    preduce_client_t *c = (preduce_client_t *)&c;
    setenv("PREDUCE_WIRE", "fp16", 1);
    ck_assert_int_eq(preduce_connect("/nonexistent", "w0", 100, &c), -EINVAL);
    ck_assert_ptr_null(c);
    ck_assert_str_eq(preduce_last_error(NULL),
                     "PREDUCE_WIRE: not one of fp32, bf16, int8");
    /* Options that set it leave the environment unread. */
    preduce_options_t *o;
    ck_assert_int_eq(preduce_options_create(&o), 0);
    ck_assert_int_eq(preduce_options_set(o, "wire", "bf16"), 0);
    ck_assert_int_eq(preduce_connect_with("/nonexistent", "w0", o, 100, &c),
                     -ENOENT);
    preduce_options_destroy(o);
    /* Each variable's failure names it. */
    unsetenv("PREDUCE_WIRE");
    setenv("PREDUCE_JOB", "two words", 1);
    ck_assert_int_eq(preduce_connect("/nonexistent", "w0", 100, &c), -EINVAL);
    ck_assert_ptr_nonnull(strstr(preduce_last_error(NULL), "PREDUCE_JOB:"));
    unsetenv("PREDUCE_JOB");
    setenv("PREDUCE_JOB_SETTINGS", "novalue", 1);
    ck_assert_int_eq(preduce_connect("/nonexistent", "w0", 100, &c), -EINVAL);
    ck_assert_ptr_nonnull(
        strstr(preduce_last_error(NULL), "PREDUCE_JOB_SETTINGS"));
}
END_TEST

/* ---- job keys ---------------------------------------------------------- */

static char key_dir[64];
static char key_path[128];

/* A key file of n bytes (byte i: 'a' + i % 26) with the mode given. */
static void key_file(const char *name, size_t n, mode_t mode)
{
    if (!key_dir[0]) {
        snprintf(key_dir, sizeof(key_dir), "/tmp/preduce-key-XXXXXX");
        ck_assert_ptr_nonnull(mkdtemp(key_dir));
    }
    snprintf(key_path, sizeof(key_path), "%s/%s", key_dir, name);
    FILE *f = fopen(key_path, "w");
    ck_assert_ptr_nonnull(f);
    for (size_t i = 0; i < n; i++)
        fputc('a' + (int)(i % 26), f);
    fclose(f);
    ck_assert_int_eq(chmod(key_path, mode), 0);
}

static void key_dir_remove(void)
{
    char cmd[96];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", key_dir);
    ck_assert_int_eq(system(cmd), 0);
    key_dir[0] = '\0';
}

/*
 * Where Hello.job_key comes from: the "job_key" option, else
 * PREDUCE_JOB_KEY, else none; what goes is the file's bytes, all of them.
 */
static const struct {
    bool option, env_good, env_bad;
    size_t len; /* the key's bytes the fake daemon must see; 0: none */
} key_cases[] = {
    {true, false, false, 40},   {false, true, false, 40},
    {true, false, true, 40},    {false, false, false, 0},
    {true, false, false, 4096}, {true, false, false, 16},
};

/* A node's Welcome that says whether the trainer's key was proved. */
static void send_keyed_welcome(int fd, bool keyed)
{
    Pr__V1__Welcome w = PR__V1__WELCOME__INIT;
    w.version = PR_PROTO_VERSION;
    w.id = 3;
    w.grace_ms = 250;
    w.keyed = keyed;
    Pr__V1__Msg m = PR_MSG_OF(WELCOME, welcome, &w);
    cf_srv_send(fd, &m, -1);
}

static void script_job_key(struct srv *s, int fd)
{
    Pr__V1__Msg *m = cf_srv_expect(s, fd, PR__V1__MSG__BODY_HELLO);
    if (!m)
        return;
    size_t want = key_cases[s->variant].len;
    bool ok = EXPECT(s, m->hello->job_key.len == want);
    for (size_t i = 0; ok && i < want; i++)
        ok = EXPECT(s, m->hello->job_key.data[i] == 'a' + i % 26);
    pr_msg_free(m);
    if (ok)
        send_keyed_welcome(fd, want > 0);
    cf_wait_eof(fd);
}

START_TEST(test_client_job_key_sent)
{
    struct srv s;
    preduce_options_t *o;
    preduce_client_t *c = NULL;
    key_file("job.key", key_cases[_i].len ? key_cases[_i].len : 40, 0600);
    setenv("PREDUCE_JOB", "keyed", 1);
    unsetenv("PREDUCE_JOB_KEY");
    if (key_cases[_i].env_good)
        setenv("PREDUCE_JOB_KEY", key_path, 1);
    if (key_cases[_i].env_bad)
        setenv("PREDUCE_JOB_KEY", "/nonexistent/key", 1);
    ck_assert_int_eq(preduce_options_create(&o), 0);
    if (key_cases[_i].option)
        ck_assert_int_eq(preduce_options_set(o, "job_key", key_path), 0);
    cf_srv_start(&s, script_job_key, _i);
    int rc = preduce_connect_with(s.path, "w0", o, 3000, &c);
    preduce_options_destroy(o);
    ck_assert_msg(rc == 0, "connect: %s (server: %s)", preduce_strerror(rc),
                  s.fail);
    preduce_close(c);
    cf_srv_stop(&s);
    key_dir_remove();
}
END_TEST

/* A key file that cannot serve fails the connect before it begins. */
static const struct {
    const char *what;
    size_t len;
    mode_t mode;
    int code;
    const char *says;
} bad_keys[] = {
    {"missing", 0, 0, -ENOENT, "cannot open"},
    {"readable by group", 32, 0640, -EPERM, "chmod 600"},
    {"writable by others", 32, 0602, -EPERM, "chmod 600"},
    {"15 bytes", 15, 0600, -EINVAL, "16 to 4096"},
    {"4097 bytes", 4097, 0600, -EINVAL, "16 to 4096"},
    {"a directory", 0, 0700, -EINVAL, "not a regular file"},
};

START_TEST(test_client_job_key_file_bad)
{
    preduce_client_t *c = (preduce_client_t *)&c;
    key_file("placeholder", 16, 0600);
    if (!strcmp(bad_keys[_i].what, "missing"))
        snprintf(key_path, sizeof(key_path), "%s/none", key_dir);
    else if (!strcmp(bad_keys[_i].what, "a directory"))
        snprintf(key_path, sizeof(key_path), "%s", key_dir);
    else
        key_file("job.key", bad_keys[_i].len, bad_keys[_i].mode);
    setenv("PREDUCE_JOB_KEY", key_path, 1);
    setenv("PREDUCE_JOB", "keyed", 1);
    /* Refused before the socket is tried: no daemon needed. */
    int rc = preduce_connect("/nonexistent", "w0", 100, &c);
    ck_assert_msg(rc == bad_keys[_i].code, "%s: got %d", bad_keys[_i].what, rc);
    ck_assert_ptr_null(c);
    ck_assert_msg(strstr(preduce_last_error(NULL), bad_keys[_i].says) &&
                      strstr(preduce_last_error(NULL), key_path),
                  "%s: %s", bad_keys[_i].what, preduce_last_error(NULL));
    key_dir_remove();
}
END_TEST

/*
 * A node older than job keys drops the key and welcomes the trainer
 * without keyed: the connect fails rather than run in an open job. A key
 * without a job name is refused before anything is sent.
 */
static void script_unkeyed_welcome(struct srv *s, int fd)
{
    Pr__V1__Msg *m = cf_srv_expect(s, fd, PR__V1__MSG__BODY_HELLO);
    if (!m)
        return;
    bool ok = EXPECT(s, m->hello->job_key.len == 40);
    pr_msg_free(m);
    if (ok)
        send_keyed_welcome(fd, false);
    cf_wait_eof(fd);
}

START_TEST(test_client_job_key_needs_a_keyed_welcome)
{
    struct srv s;
    preduce_client_t *c = (preduce_client_t *)&c;
    key_file("job.key", 40, 0600);
    setenv("PREDUCE_JOB_KEY", key_path, 1);
    unsetenv("PREDUCE_JOB");
    ck_assert_int_eq(preduce_connect("/nonexistent", "w0", 100, &c), -EINVAL);
    ck_assert_ptr_nonnull(strstr(preduce_last_error(NULL), "name the job"));
    setenv("PREDUCE_JOB", "keyed", 1);
    cf_srv_start(&s, script_unkeyed_welcome, 0);
    ck_assert_int_eq(preduce_connect(s.path, "w0", 3000, &c), -EPROTO);
    ck_assert_ptr_null(c);
    ck_assert_ptr_nonnull(
        strstr(preduce_last_error(NULL), "older than job keys"));
    cf_srv_stop(&s);
    key_dir_remove();
}
END_TEST

START_TEST(test_client_options_job_key)
{
    preduce_options_t *o;
    char longer[1100];
    memset(longer, 'x', sizeof(longer) - 1);
    longer[sizeof(longer) - 1] = '\0';
    ck_assert_int_eq(preduce_options_create(&o), 0);
    ck_assert_int_eq(preduce_options_set(o, "job_key", ""), -EINVAL);
    ck_assert_int_eq(preduce_options_set(o, "job_key", longer), -EINVAL);
    ck_assert_int_eq(preduce_options_set(o, "job_key", "/etc/hostname"), 0);
    preduce_options_destroy(o);
}
END_TEST

/*
 * Where Hello.scheduler comes from: the "scheduler" option, else
 * PREDUCE_SCHEDULER, else none (the daemon's own); and a daemon that
 * does not say it took one (older than job schedulers) is refused.
 */
static const struct {
    const char *option, *env, *sent; /* sent: "" for none */
    bool old;                        /* the Welcome lacks own_scheduler */
    int rc;
} sched_cases[] = {
    {"a:1", NULL, "a:1", false, 0},      {NULL, "b:2,c:3", "b:2,c:3", false, 0},
    {"a:1", "b:2", "a:1", false, 0},     {NULL, NULL, "", false, 0},
    {"a:1", NULL, "a:1", true, -EPROTO}, {NULL, NULL, "", true, 0},
};

static void script_scheduler(struct srv *s, int fd)
{
    Pr__V1__Msg *m = cf_srv_expect(s, fd, PR__V1__MSG__BODY_HELLO);
    if (!m)
        return;
    const char *got = m->hello->scheduler ? m->hello->scheduler : "";
    bool ok = EXPECT(s, !strcmp(got, sched_cases[s->variant].sent));
    bool named = got[0] != '\0';
    pr_msg_free(m);
    if (ok) {
        Pr__V1__Welcome w = PR__V1__WELCOME__INIT;
        w.version = PR_PROTO_VERSION;
        w.id = 3;
        w.grace_ms = 250;
        w.own_scheduler = named && !sched_cases[s->variant].old;
        Pr__V1__Msg out = PR_MSG_OF(WELCOME, welcome, &w);
        cf_srv_send(fd, &out, -1);
    }
    cf_wait_eof(fd);
}

START_TEST(test_client_scheduler_sent)
{
    struct srv s;
    preduce_options_t *o;
    preduce_client_t *c = NULL;
    unsetenv("PREDUCE_SCHEDULER");
    if (sched_cases[_i].env)
        setenv("PREDUCE_SCHEDULER", sched_cases[_i].env, 1);
    ck_assert_int_eq(preduce_options_create(&o), 0);
    if (sched_cases[_i].option)
        ck_assert_int_eq(
            preduce_options_set(o, "scheduler", sched_cases[_i].option), 0);
    cf_srv_start(&s, script_scheduler, _i);
    int rc = preduce_connect_with(s.path, "w0", o, 3000, &c);
    preduce_options_destroy(o);
    unsetenv("PREDUCE_SCHEDULER");
    ck_assert_msg(rc == sched_cases[_i].rc, "connect: %s (server: %s)",
                  preduce_strerror(rc), s.fail);
    if (rc < 0)
        ck_assert_msg(
            strstr(preduce_last_error(NULL), "older than job schedulers"), "%s",
            preduce_last_error(NULL));
    preduce_close(c);
    cf_srv_stop(&s);
}
END_TEST

START_TEST(test_client_options_scheduler)
{
    preduce_options_t *o;
    char longer[1100];
    memset(longer, 'x', sizeof(longer) - 1);
    longer[5] = ':';
    longer[sizeof(longer) - 1] = '\0';
    ck_assert_int_eq(preduce_options_create(&o), 0);
    ck_assert_int_eq(preduce_options_set(o, "scheduler", ""), -EINVAL);
    ck_assert_int_eq(preduce_options_set(o, "scheduler", "host"), -EINVAL);
    ck_assert_int_eq(preduce_options_set(o, "scheduler", "a:1\n"), -EINVAL);
    ck_assert_int_eq(preduce_options_set(o, "scheduler", longer), -EINVAL);
    ck_assert_int_eq(preduce_options_set(o, "scheduler", "h:7070, s:7070"), 0);
    preduce_options_destroy(o);
    /* A bad PREDUCE_SCHEDULER fails the connect before the socket. */
    setenv("PREDUCE_SCHEDULER", "nocolon", 1);
    preduce_client_t *c = NULL;
    ck_assert_int_eq(preduce_connect("/nonexistent", "w0", 100, &c), -EINVAL);
    ck_assert_msg(strstr(preduce_last_error(NULL), "PREDUCE_SCHEDULER"), "%s",
                  preduce_last_error(NULL));
    unsetenv("PREDUCE_SCHEDULER");
}
END_TEST

/* ---- error texts and the exported symbols ----------------------------- */

START_TEST(test_client_strerror)
{
    for (int e = -300; e <= 300; e++) {
        const char *s = preduce_strerror(e);
        ck_assert_ptr_nonnull(s);
        ck_assert_int_gt((int)strlen(s), 0);
    }
    int odd[] = {INT_MIN, INT_MIN + 1, INT_MAX, -4095, -100000};
    for (size_t i = 0; i < sizeof(odd) / sizeof(odd[0]); i++) {
        ck_assert_ptr_nonnull(preduce_strerror(odd[i]));
        ck_assert_int_gt((int)strlen(preduce_strerror(odd[i])), 0);
    }
    /* The documented codes have texts of their own. */
    ck_assert_str_ne(preduce_strerror(-EPROTO), preduce_strerror(-EEXIST));
    ck_assert_str_ne(preduce_strerror(-ETIMEDOUT), preduce_strerror(-EBUSY));
}
END_TEST

/* Which codes of a reduce are worth calling it again (preduce.h's table). */
START_TEST(test_client_error_retryable)
{
    ck_assert_int_eq(preduce_error_retryable(-ETIMEDOUT), 1);
    ck_assert_int_eq(preduce_error_retryable(-ECONNRESET), 1);
    int no[] = {0,       -ENOTCONN, -EINVAL,   -EBUSY,     -ENOMEM, -EAGAIN,
                -EPROTO, -EPIPE,    ETIMEDOUT, ECONNRESET, INT_MIN};
    for (size_t i = 0; i < sizeof(no) / sizeof(no[0]); i++)
        ck_assert_msg(!preduce_error_retryable(no[i]), "%d", no[i]);
}
END_TEST

START_TEST(test_client_exports)
{
    const char *build = getenv("PREDUCE_BUILD");
    char lib[PATH_MAX], cmd[PATH_MAX + 64], line[512];
    snprintf(lib, sizeof(lib), "%s/libpreduce.so", build ? build : "build");
    if (access(lib, R_OK) != 0) {
        printf("test_client_exports: %s not built, skipped\n", lib);
        return;
    }
    snprintf(cmd, sizeof(cmd), "nm -D --defined-only '%s'", lib);
    FILE *p = popen(cmd, "r");
    ck_assert_ptr_nonnull(p);
    int public = 0;
    char bad[300] = "";
    while (fgets(line, sizeof(line), p)) {
        char addr[64], type[8], name[256];
        if (sscanf(line, "%63s %7s %255s", addr, type, name) != 3)
            continue;
        name[strcspn(name, "@")] = 0; /* drop @@PREDUCE_0.1 */
        if (strncmp(name, "preduce_", 8) == 0)
        public++;
        else if (strncmp(name, "PREDUCE_0.", 10) != 0 && /* versions */
                 strcmp(name, "_init") != 0 && strcmp(name, "_fini") != 0 &&
                 !bad[0]) snprintf(bad, sizeof(bad), "%s (%s)", name, type);
    }
    ck_assert_int_eq(pclose(p), 0);
    ck_assert_msg(!bad[0], "%s exports %s", lib, bad);
    ck_assert_int_ge(public, 18);
}
END_TEST

static Suite *client_suite(void)
{
    Suite *s = suite_create("client");
    TCase *tc;

    tc = tcase_create("args");
    tcase_set_timeout(tc, 10);
    tcase_add_test(tc, test_client_connect_args);
    tcase_add_test(tc, test_client_null_handles);
    tcase_add_test(tc, test_client_reduce_args);
    tcase_add_test(tc, test_client_strerror);
    tcase_add_test(tc, test_client_error_retryable);
    tcase_add_test(tc, test_client_exports);
    suite_add_tcase(s, tc);

    tc = tcase_create("connect");
    tcase_set_timeout(tc, 10);
    tcase_add_test(tc, test_client_connect_missing);
    tcase_add_test(tc, test_client_connect_refused);
    tcase_add_test(tc, test_client_connect_timeout);
    tcase_add_test(tc, test_client_connect_ok);
    tcase_add_test(tc, test_client_rank_after_break);
    tcase_add_loop_test(tc, test_client_connect_bad_answer, 0,
                        sizeof(bad_answers) / sizeof(bad_answers[0]));
    suite_add_tcase(s, tc);

    tc = tcase_create("options");
    tcase_set_timeout(tc, 10);
    tcase_add_test(tc, test_client_options_wire);
    tcase_add_loop_test(tc, test_client_wire_sent, 0,
                        sizeof(wire_cases) / sizeof(wire_cases[0]));
    tcase_add_test(tc, test_client_wire_env_bad);
    tcase_add_loop_test(tc, test_client_job_key_sent, 0,
                        sizeof(key_cases) / sizeof(key_cases[0]));
    tcase_add_loop_test(tc, test_client_job_key_file_bad, 0,
                        sizeof(bad_keys) / sizeof(bad_keys[0]));
    tcase_add_test(tc, test_client_options_job_key);
    tcase_add_loop_test(tc, test_client_scheduler_sent, 0,
                        (int)(sizeof(sched_cases) / sizeof(sched_cases[0])));
    tcase_add_test(tc, test_client_options_scheduler);
    tcase_add_test(tc, test_client_job_key_needs_a_keyed_welcome);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return check_run(client_suite());
}
