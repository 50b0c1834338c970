/* SPDX-License-Identifier: MIT */
/*
 * The fixture of the client library's unit tests (test_client*.c), linked
 * into each of their binaries (and, unused, into every other unit binary:
 * hence the cf_ prefix).
 *
 * Every test that needs a daemon runs a scripted server thread on a Unix
 * socket in a fresh mkdtemp() directory. The script plays the daemon's side
 * of the protocol (client/client.c has the sketch) frame by frame, including
 * the memfd passed with SCM_RIGHTS, and records its first failed expectation
 * in the server struct; the test asserts on it after joining the thread
 * (cf_srv_stop), so Check assertions run only on the test's own thread.
 * The cf_srv_*() and cf_send_*() calls that take a socket run on the
 * script's thread; cf_srv_init/start/stop and cf_connect_ok on the test's.
 */
#ifndef CLIENT_FIXTURE_H
#define CLIENT_FIXTURE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <pthread.h>

#include "preduce.h"
#include "proto/frame.h"

#define IO_MS 5000 /* bound on every wait of the scripted server */

struct srv;
typedef void (*script_fn)(struct srv *s, int fd);

struct srv {
    char dir[64];
    char path[108];
    int lfd;
    pthread_t th;
    script_fn script;
    int variant;
    char fail[256]; /* first failed expectation, "" if none */

    /* The tensor the script created. */
    int memfd;
    float *map;
    size_t nfloats;
};

/* A wrong answer from the daemon, and the code it must produce. */
struct bad_answer {
    const char *what;
    int code;
    int alt; /* also acceptable */
};

/* Records a failed expectation in s, unless one is recorded already. */
__attribute__((format(printf, 2, 3))) void cf_srv_failf(struct srv *s,
                                                        const char *fmt, ...);

/* True if cond holds; otherwise false, and the failure is recorded in s. */
#define EXPECT(s, cond)                                                        \
    ((cond) ? true                                                             \
            : (cf_srv_failf((s), "%s:%d: expected %s", __FILE__, __LINE__,     \
                            #cond),                                            \
               false))

int64_t cf_now_ms(void);
void cf_sleep_ms(int ms);
/* Open file descriptors of this process; -1 if it cannot tell. */
int cf_count_fds(void);

/* 0 when n bytes were read, -1 on EOF, error or after IO_MS. */
int cf_read_full(int fd, void *buf, size_t n);
/* Blocks until the client closes its end (or timeout_ms passes). */
void cf_wait_eof_ms(int fd, int timeout_ms);
void cf_wait_eof(int fd); /* cf_wait_eof_ms(fd, IO_MS) */

/* Receives one Msg (the caller frees it); NULL and a failure otherwise. */
Pr__V1__Msg *cf_srv_recv(struct srv *s, int fd);
/* Receives one Msg and checks its case; NULL (and a failure) otherwise. */
Pr__V1__Msg *cf_srv_expect(struct srv *s, int fd, int body_case);
/* Sends n raw bytes, with pass_fd as SCM_RIGHTS if it is not -1. */
void cf_send_raw(int fd, const void *p, size_t n, int pass_fd);
/* Sends m as one frame, with pass_fd as for cf_send_raw(). */
void cf_srv_send(int fd, const Pr__V1__Msg *m, int pass_fd);
/* Welcome.grace_ms the fake daemon states (250; 0: an older daemon). */
extern uint32_t cf_welcome_grace_ms;
void cf_send_welcome(int fd, uint32_t version, uint32_t rank);
void cf_send_error(int fd, int code);
void cf_send_created(int fd, uint32_t id, uint64_t nfloats, int pass_fd);
/* On success, a group of one: the worker itself (rank 3). */
void cf_send_done(int fd, uint64_t seq, int status, uint64_t group,
                  uint64_t version);

/* Reads the hello of worker "w0" and welcomes it as rank 3. */
bool cf_srv_welcome(struct srv *s, int fd);
/* Answers one tensor_create with a real memfd of the size asked for. */
bool cf_srv_tensor(struct srv *s, int fd, uint32_t id);
/* Receives a reduce and checks seq, version and (if n > 0) the ids. */
bool cf_srv_reduce(struct srv *s, int fd, uint64_t seq, uint64_t version,
                   const uint32_t *ids, size_t n);

/*
 * Binds a socket in a fresh directory; listens if do_listen, and runs
 * script (with variant in s->variant) on a thread of its own if not NULL.
 */
void cf_srv_init(struct srv *s, script_fn script, int variant, bool do_listen);
void cf_srv_start(struct srv *s, script_fn script, int variant);
/* Joins the script, frees what it made, and fails on its verdict. */
void cf_srv_stop(struct srv *s);
/* Connects as worker "w0"; fails the test unless that succeeds. */
preduce_client_t *cf_connect_ok(struct srv *s);

#endif
