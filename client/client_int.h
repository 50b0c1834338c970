/* SPDX-License-Identifier: MIT */
/*
 * libpreduce internals shared by client.c (connection, frames, and the
 * tensor list and results it fills and breaks), tensor.c (shared tensors)
 * and result.c (reduce calls, results, error texts). tensor.c and result.c
 * call into client.c, never the other way round.
 *
 * Everything here is hidden: the library exports only what preduce.h marks
 * PREDUCE_API (hidden visibility plus client/libpreduce.map).
 *
 * A client is single-threaded and blocking: all I/O happens inside API calls,
 * on a non-blocking socket, and every wait is a poll() bounded by the call's
 * deadline on CLOCK_MONOTONIC (nanoseconds in an int64_t).
 */
#ifndef PR_CLIENT_INT_H
#define PR_CLIENT_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "preduce.h"
#include "proto/frame.h"

#define PR_CLIENT_HIDDEN __attribute__((visibility("hidden")))

/* Largest frame payload accepted from the daemon (and sent to it). */
#define PR_CLIENT_MAX_FRAME PR_CTRL_MAX_FRAME
/* Longest worker name in bytes, without the NUL. */
#define PR_CLIENT_NAME_MAX 63
/* Received descriptors not yet claimed by a tensor_created. */
#define PR_CLIENT_MAX_FDS 16
/* In the descriptor FIFO: one the kernel dropped in transit (MSG_CTRUNC). */
#define PR_CLIENT_FD_LOST (-2)
/* Bound for sends that belong to no call with a timeout (destroy, pong). */
#define PR_CLIENT_SEND_MS 2000

/*
 * The outcome of one reduce. The arrays are heap copies of the daemon's
 * ReduceDone (n entries each), owned by the struct.
 */
struct preduce_result {
    uint64_t group;
    uint64_t version; /* this worker's version after the reduce */
    double weight;    /* this worker's weight */
    uint32_t wire;    /* ReduceDone.wire: its encoding + 1, 0 not said */
    size_t n;
    uint32_t *ranks;
    uint64_t *versions;
    double *weights;
};

/*
 * One shared tensor: `data` maps the daemon's memfd (MAP_SHARED), so the
 * trainer and the daemon work on the same pages. The mapping keeps the
 * memory alive, so the memfd itself is closed once mapped: a trainer with
 * many tensors holds no descriptor for them. Owned by its client, which
 * keeps every live tensor on a doubly linked list.
 */
struct preduce_tensor {
    struct preduce_client *c;
    struct preduce_tensor *prev;
    struct preduce_tensor *next;
    uint32_t id; /* the daemon's tensor_id */
    float *data;
    size_t nfloats;
    uint64_t mark; /* duplicate check: the client's mark_gen when last seen */
    bool busy;     /* used by the reduce in flight */
};

/* Connect options (options.c): the job, its settings, the wire. */
#define PR_CLIENT_SETTINGS_MAX 16
#define PR_CLIENT_SETTING_MAX  127
/* A job key file: its path's most bytes, and its size's bounds. */
#define PR_CLIENT_KEY_PATH_MAX 1023
/* A scheduler list's most bytes (the daemon's PR_NODE_SCHED_SPEC_MAX). */
#define PR_CLIENT_SCHED_MAX 1023
#define PR_CLIENT_KEY_MIN   16
#define PR_CLIENT_KEY_MAX   4096
struct preduce_options {
    bool has_job, has_settings; /* set by preduce_options_set() */
    char job[PR_CLIENT_NAME_MAX + 1];
    char settings[PR_CLIENT_SETTINGS_MAX][PR_CLIENT_SETTING_MAX + 1];
    size_t nsettings;
    /* Reduce.wire: 0, the node's transport.wire; else its encoding + 1. */
    uint32_t wire;
    /* The job key file's path ("job_key", PREDUCE_JOB_KEY); "": none. */
    char job_key[PR_CLIENT_KEY_PATH_MAX + 1];
    /* The job's scheduler ("scheduler", PREDUCE_SCHEDULER); "": node's. */
    char scheduler[PR_CLIENT_SCHED_MAX + 1];
};
/*
 * The options a connect uses: `given` (NULL: none) with the environment
 * (PREDUCE_JOB, PREDUCE_POLICY, PREDUCE_JOB_SETTINGS, PREDUCE_WIRE,
 * PREDUCE_JOB_KEY, PREDUCE_SCHEDULER) where
 * it says nothing. 0, or -EINVAL / -E2BIG for a bad value in the
 * environment, with *why naming the variable and what it must be.
 */
int pr_client_options_resolve(const preduce_options_t *given,
                              struct preduce_options *o, const char **why);
/*
 * The job key the options name (o->job_key), read into buf (at least
 * PR_CLIENT_KEY_MAX bytes): *len 0 when they name none. The options must
 * name a job too, and the file must be a regular file of 16 to 4096 bytes
 * that neither group nor others may read or write, as the daemons'
 * cluster key. 0, or -ENOENT / -EACCES (cannot open it), -EPERM (its
 * mode), -EINVAL (no job named; its kind or size), with *why.
 */
int pr_client_job_key_read(const struct preduce_options *o, uint8_t *buf,
                           size_t *len, const char **why);
/* A Reduce.wire value's name ("fp32", "bf16", "int8"), "" for 0 or unknown. */
const char *pr_client_wire_name(uint32_t wire);

/* The wait past a deadline for a daemon that does not say its grace. */
#define PR_CLIENT_OLD_DAEMON_SLACK_MS 10000

struct preduce_client {
    int fd;   /* the Unix socket, non-blocking */
    int epfd; /* preduce_fd(): epoll over fd and evfd */
    int evfd; /* eventfd: signalled while an answer waits in memory */
    uint32_t rank;
    bool welcomed;
    bool sent_key; /* its Hello carried a job key: Welcome.keyed must say */
    /* Its Hello named a scheduler: Welcome.own_scheduler must say. */
    bool sent_sched;
    char job[PR_CLIENT_NAME_MAX + 1]; /* Welcome.job: the job joined */
    /* How long past a reduce's deadline it waits (Welcome.grace_ms). */
    int slack_ms;

    /*
     * A broken connection: err is -ENOTCONN, what later calls return. The
     * call that broke it returned the reason (the code of the daemon's
     * Msg.error, kept in daemon_err, or what failed). The socket is then
     * shut down; only a reduce_done that had already come (done_ready)
     * is still handed over, by the next wait.
     */
    int err;
    int daemon_err;

    struct pr_frame_reader rd;
    /*
     * FIFO of descriptors from SCM_RIGHTS, in the order their frames come.
     * PR_CLIENT_FD_LOST stands for one the kernel could not install here
     * (this process at RLIMIT_NOFILE): its tensor_created fails -EMFILE.
     */
    int fds[PR_CLIENT_MAX_FDS];
    unsigned fd_head;
    unsigned fd_count;

    /*
     * tensor_create requests sent and not answered yet, and of those how
     * many belong to calls that timed out. The daemon answers them in
     * order, each with tensor_created or with an error (a refused tensor:
     * the connection stays); the answer of an orphan is destroyed or
     * dropped at once. The answer of the current call waits in created_*:
     * created_err < 0 for a refusal, else the tensor.
     */
    unsigned creates_pending;
    unsigned creates_orphaned;
    bool created_ready;
    int created_err;
    uint32_t created_id;
    uint64_t created_nfloats;
    int created_fd;

    /* Reduce state: version and seq as in the protocol sketch. */
    uint64_t version;
    uint64_t seq; /* seq of the last reduce sent */
    bool inflight;
    bool in_place;           /* preduce_set_in_place() */
    bool heal;               /* preduce_set_heal(): until a reduce succeeds */
    uint32_t tag;            /* preduce_set_tag(): sent with each reduce */
    uint32_t wire;           /* the options' Reduce.wire, sent with each */
    uint32_t node_wire;      /* Welcome.wire: the node's transport.wire */
    int64_t reduce_deadline; /* the reduce's deadline + the slack */
    bool done_ready;         /* a reduce_done for seq waits in done_* */
    int done_status;
    /* The daemon's reason for the last failure it sent (preduce_last_error). */
    char last_error[256];
    struct preduce_result done;
    bool have_result;
    struct preduce_result result; /* preduce_last_result() */

    uint64_t mark_gen;
    struct preduce_tensor *tensors;
};

PR_CLIENT_HIDDEN int64_t pr_client_now(void);
/* The deadline `timeout_ms` (>= 0) from now. */
PR_CLIENT_HIDDEN int64_t pr_client_deadline(int timeout_ms);

/* What a call on a broken client returns (-ENOTCONN); 0 while usable. */
PR_CLIENT_HIDDEN int pr_client_err(const struct preduce_client *c);
/*
 * Breaks the connection (once): shuts the socket down and abandons what was
 * in flight, except a reduce_done already received, which the next wait
 * delivers. Returns the daemon's error code if it sent one, else rc.
 */
PR_CLIENT_HIDDEN int pr_client_fail(struct preduce_client *c, int rc);

/*
 * Packs and sends `m` before `deadline`. 0, or a negative errno; any failure
 * after the first byte could have left breaks the connection.
 */
PR_CLIENT_HIDDEN int pr_client_send(struct preduce_client *c,
                                    const Pr__V1__Msg *m, int64_t deadline);
/*
 * Reads and dispatches the daemon's frames until *flag is true. 0, or
 * -ETIMEDOUT at the deadline (the connection stays usable), or the error
 * that broke the connection.
 */
PR_CLIENT_HIDDEN int pr_client_pump(struct preduce_client *c, const bool *flag,
                                    int64_t deadline);

/* Clears preduce_fd()'s eventfd once the answer it announced is taken. */
PR_CLIENT_HIDDEN void pr_client_unnotify(struct preduce_client *c);
/* Sends tensor_destroy{id} (no answer comes). 0 or a negative errno. */
PR_CLIENT_HIDDEN int pr_client_send_destroy(struct preduce_client *c,
                                            uint32_t id);

/* Unlinks t from its client's list, unmaps it and frees it. */
PR_CLIENT_HIDDEN void pr_client_tensor_release(struct preduce_tensor *t);
/* Marks every tensor of c free of a reduce. */
PR_CLIENT_HIDDEN void pr_client_tensors_unbusy(struct preduce_client *c);
/*
 * Checks a successful ReduceDone for worker `rank` and copies it into *r
 * (whose old arrays are freed). 0, -EPROTO or -ENOMEM.
 */
PR_CLIENT_HIDDEN int pr_client_result_set(struct preduce_result *r,
                                          const Pr__V1__ReduceDone *d,
                                          uint32_t rank);
PR_CLIENT_HIDDEN void pr_client_result_fini(struct preduce_result *r);

#endif
