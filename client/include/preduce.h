/* SPDX-License-Identifier: MIT */
/*
 * libpreduce: the trainer's side of preduce.
 *
 * A trainer connects to the preduced node daemon on its machine, creates its
 * model tensors as shared memory (the pointer it gets *is* the memory the
 * daemon reads and writes, so nothing is copied), and calls
 * preduce_reduce() after each optimizer step. The call returns when the
 * group the scheduler formed has averaged its members' tensors; the result
 * is then already in the trainer's tensors.
 *
 *     preduce_client_t *c;
 *     preduce_tensor_t *w;
 *     preduce_connect("/run/preduce/preduced.sock", "worker-0", 5000, &c);
 *     preduce_tensor_create(c, n, 5000, &w);
 *     float *x = preduce_tensor_data(w);
 *     for (;;) {
 *         sgd_step(x, n);
 *         int rc = preduce_reduce(c, &w, 1, 60000);
 *         if (rc < 0)
 *             fprintf(stderr, "%s\n", preduce_strerror(rc));
 *     }
 *
 * Every call returns 0 (or a documented non-negative value) or a negative
 * errno, returns within its timeout (a reduce within timeout_ms +
 * PREDUCE_REDUCE_SLACK_MS), and never prints or exits. A client handle is
 * not thread-safe: use it from one thread at a time. After a protocol error,
 * a lost daemon, an error message from the daemon or a reduce the daemon
 * never answered, the connection is broken: the call that found out
 * returns the reason (a reduce call one of its codes: -ENOTCONN, or
 * -ETIMEDOUT for no answer), later calls -ENOTCONN; close it and connect
 * again. (A reduce the daemon had answered before the break is still
 * delivered by preduce_reduce_wait.) A tensor the daemon refuses breaks
 * nothing.
 */
#ifndef PREDUCE_H
#define PREDUCE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define PREDUCE_API __attribute__((visibility("default")))
#else
#define PREDUCE_API
#endif

#define PREDUCE_VERSION_MAJOR 0
#define PREDUCE_VERSION_MINOR 3

/*
 * How long past its timeout_ms a reduce call takes at most. The daemon
 * ends every reduce (stops writing into the tensors and answers) within
 * 250 ms of its deadline; the rest is room for the answer to arrive on a
 * loaded machine. A daemon that has not answered by then is taken for
 * stopped or hung: the call returns -ETIMEDOUT and breaks the connection
 * (later calls -ENOTCONN), since what the tensors hold is then unknown.
 * A daemon states its grace in its welcome; the library waits at least
 * that plus 500 ms, and 10 s for a daemon older than this rule (no grace
 * stated).
 */
#define PREDUCE_REDUCE_SLACK_MS 1000

typedef struct preduce_client preduce_client_t;
typedef struct preduce_tensor preduce_tensor_t;
typedef struct preduce_result preduce_result_t;

/*
 * Connects to the daemon at `socket_path` as worker `name` (unique within
 * the job; 1 to 63 bytes, no control characters) and waits until the
 * scheduler has given it a rank. -ENOENT/-ECONNREFUSED: no daemon;
 * -ETIMEDOUT; -EPROTO: the daemon speaks another protocol version;
 * -EEXIST: name taken; -EUSERS: the node serves node.max_clients trainers
 * already; -EAGAIN: the node is flooded with new connections, try again;
 * -ENOTCONN: the node has no scheduler link and gave up waiting for one;
 * -EINVAL.
 */
PREDUCE_API int preduce_connect(const char *socket_path, const char *name,
                                int timeout_ms, preduce_client_t **out);

/*
 * Jobs. One daemon serves many jobs; a trainer joins the job it names,
 * and only that job's workers are ever averaged with it. Without options
 * preduce_connect() takes them from the environment: PREDUCE_JOB (the
 * job's name; unset: the daemon's `job`), PREDUCE_POLICY (the job's
 * scheduler.policy) and PREDUCE_JOB_SETTINGS ("key=value,..." of the
 * scheduler keys preduced.conf(5) lets a job set). A job's first worker
 * starts it with its settings; a later worker that asks for others is
 * refused (-EINVAL, preduce_last_error() says why). Options set here
 * replace the environment's: a job set here ignores PREDUCE_JOB, any
 * setting set here ignores both PREDUCE_POLICY and PREDUCE_JOB_SETTINGS,
 * and a wire set here ignores PREDUCE_WIRE (fp32, bf16 or int8: the
 * encoding of this worker's reduces between daemons, below).
 */
typedef struct preduce_options preduce_options_t;
/* Empty options (all from the environment). 0, -EINVAL, -ENOMEM. */
PREDUCE_API int preduce_options_create(preduce_options_t **out);
/*
 * key "job": the job's name, 1..63 printable bytes without spaces or
 * quotes; key "setting": one "key=value" job setting, at most 127 bytes,
 * up to 16 (each call adds one); key "wire": how this worker's reduces
 * send their floats between daemons, "fp32" (exact), "bf16" (half the
 * bytes, about 3 significant digits) or "int8" (about a quarter of the
 * bytes; what rounding lost is kept by the daemon and added to the next
 * reduce of the same tensors), the sums being float32 in every case
 * (preduced.conf(5), transport.wire). Unset, PREDUCE_WIRE says, and
 * without it the node's transport.wire. Key "job_key": the path of the
 * job's key file (unset: PREDUCE_JOB_KEY's), read at connect: a regular
 * file of 16 to 4096 bytes (`preduced --gen-key FILE` writes one) that
 * group and others cannot read (mode 600). A job started by a worker with
 * a key admits only workers with the same key, a job started without one
 * only workers without: the others are refused with -EACCES. Key
 * "scheduler": the job's own scheduler, "host:port" or standbys "a,b"
 * (unset: PREDUCE_SCHEDULER's; neither: the daemon's node.scheduler). The
 * daemon follows it beside its own while a worker names it, with peer
 * links and ids of its own, so that this job does not share a scheduler
 * with the others: a job's scheduler lost stops only that job. 0, -EINVAL
 * (unknown key, bad value) or -E2BIG (too many settings).
 */
PREDUCE_API int preduce_options_set(preduce_options_t *o, const char *key,
                                    const char *value);
PREDUCE_API void preduce_options_destroy(preduce_options_t *o);
/*
 * preduce_connect() with options (NULL: as preduce_connect()). Also
 * -EINVAL for a bad PREDUCE_JOB, PREDUCE_POLICY, PREDUCE_JOB_SETTINGS,
 * PREDUCE_WIRE, PREDUCE_JOB_KEY or PREDUCE_SCHEDULER
 * (preduce_last_error(NULL) names it),
 * and whatever the scheduler refuses in a job's settings; for the job key
 * file -ENOENT or -EACCES (cannot open it), -EPERM (group or others may
 * read it), -EINVAL (not a regular file of 16 to 4096 bytes), and
 * -EACCES when the job's key is another (or it has one and this worker
 * none, or the other way round).
 */
PREDUCE_API int preduce_connect_with(const char *socket_path, const char *name,
                                     const preduce_options_t *options,
                                     int timeout_ms, preduce_client_t **out);
/* The job the worker joined, as its daemon named it; "" if c is NULL. */
PREDUCE_API const char *preduce_job(const preduce_client_t *c);

/*
 * Closes the connection. Tensors still open are unmapped and freed: their
 * data pointers become invalid. Always returns 0; NULL is a no-op.
 */
PREDUCE_API int preduce_close(preduce_client_t *c);

/*
 * The worker's rank in the job (>= 0), or a negative errno: -ENOTCONN once
 * the connection is broken.
 */
PREDUCE_API int preduce_rank(const preduce_client_t *c);

/*
 * A file descriptor that becomes readable when an asynchronous reduce has
 * an answer (for poll/epoll integration), or a negative errno.
 */
PREDUCE_API int preduce_fd(const preduce_client_t *c);

/*
 * Creates a shared tensor of `nfloats` float32, zero-filled. The tensor
 * costs this process no file descriptor once created. Errors that fail
 * this call alone (the connection and other tensors stay usable):
 * -EINVAL: nfloats is 0 or over the daemon's limit (max_tensor_mb);
 * -ENOMEM (or another negative errno): the daemon could not allocate or
 * register the memory; -EMFILE: this process had no free descriptor to
 * receive it; -EDQUOT: over this trainer's quota (node.trainer_max_tensors,
 * node.trainer_max_mb); -ENOSPC: the node holds node.max_tensors already;
 * -ETIMEDOUT. preduce_last_error() then has the daemon's reason.
 */
PREDUCE_API int preduce_tensor_create(preduce_client_t *c, size_t nfloats,
                                      int timeout_ms, preduce_tensor_t **out);

/* The tensor's memory (shared with the daemon) and its length in floats. */
PREDUCE_API float *preduce_tensor_data(preduce_tensor_t *t);
PREDUCE_API size_t preduce_tensor_len(const preduce_tensor_t *t);

/* Releases a tensor; -EBUSY while a reduce that uses it is in flight. */
PREDUCE_API int preduce_tensor_destroy(preduce_tensor_t *t);

/*
 * Averages `n` tensors (one model, several parts) with the group the
 * scheduler assigns this step. All workers of a job must pass tensors of the
 * same total length. On success the tensors hold the result. On error they
 * hold what they held before the call (after preduce_set_in_place(c, 1):
 * each float its input or its result), unless the connection broke.
 * timeout_ms > 0 bounds the whole reduce; the node daemon's
 * node.reduce_timeout_ms caps it. The call returns 0 or one of these codes,
 * as do preduce_reduce_start and preduce_reduce_wait (docs/operations.md,
 * "Failure behaviour"); preduce_error_retryable() tells which are worth
 * a retry:
 *  -ETIMEDOUT   no group formed, or the group did not finish, in time:
 *               retry. If the daemon did not answer at all within
 *               timeout_ms + PREDUCE_REDUCE_SLACK_MS, the connection is
 *               broken too (a retry then returns -ENOTCONN).
 *  -ECONNRESET  the group failed or could not form because a peer daemon,
 *               a link to it or the scheduler was lost (or a peer sent data
 *               the daemon refused): retry.
 *  -ENOTCONN    this client's connection to its daemon is broken (the
 *               daemon died or closed it, or sent something this library
 *               refused): close, connect again; no retry on this client.
 *  -EINVAL      a wrong call: bad arguments, a tensor of another client or
 *               given twice, a total length other than the job's. No retry.
 *  -EBUSY       another reduce is in flight. No retry: wait for that one.
 *  -ENOMEM      out of memory, in this process or in the daemon. No retry.
 */
PREDUCE_API int preduce_reduce(preduce_client_t *c,
                               preduce_tensor_t *const *tensors, size_t n,
                               int timeout_ms);

/*
 * on = 1: the daemon may write results into the tensors as they arrive
 * and need not keep the inputs aside: a pass less over the model per
 * reduce when this worker is the only member of its group on its node
 * (otherwise nothing changes). Success looks the same; on error each float
 * holds either its input or its final result, so the tensors are no longer
 * guaranteed unchanged. Takes effect from the next reduce. Default 0.
 * 0, or -EINVAL (on not 0 or 1).
 */
PREDUCE_API int preduce_set_in_place(preduce_client_t *c, int on);

/*
 * on = 1: the next reduces, until one succeeds, take their group's model
 * and give none of their own (weight 0 in the mean, the other members'
 * weights over themselves): for a trainer restarted from an older
 * checkpoint, whose model should heal from its peers rather than pull
 * them back. A trainer whose first reduce brings a fresh model (version
 * 1) to a job that has gone past it heals without asking. 0, or -EINVAL
 * (on not 0 or 1).
 */
PREDUCE_API int preduce_set_heal(preduce_client_t *c, int on);

/*
 * The reduces started after this call carry `tag` (0, the default: none).
 * A group forms only of reduces with the same tag, so a trainer that
 * reduces its model or gradients in several parts, one after another (the
 * buckets of preduce.torch), never has part k averaged with a peer's
 * part j, even after one of its reduces failed. Tags need the allreduce
 * policy: under another policy a reduce with a tag other than 0 fails
 * with -EINVAL, preduce_last_error() saying why. 0, or -EINVAL (c NULL).
 */
PREDUCE_API int preduce_set_tag(preduce_client_t *c, uint32_t tag);

/*
 * The same in two halves: start sends the request and returns at once; the
 * tensors must not be touched until wait returned something other than
 * -EAGAIN. wait with timeout_ms 0 only polls (-EAGAIN: not yet, also when
 * wait's own timeout_ms passes first; start's timeout_ms still bounds the
 * reduce). Both return preduce_reduce's codes, and wait -EINVAL with no
 * reduce started.
 */
PREDUCE_API int preduce_reduce_start(preduce_client_t *c,
                                     preduce_tensor_t *const *tensors, size_t n,
                                     int timeout_ms);
PREDUCE_API int preduce_reduce_wait(preduce_client_t *c, int timeout_ms);

/*
 * The outcome of the last successful reduce; valid until the next reduce or
 * close. NULL before the first success.
 */
PREDUCE_API const preduce_result_t *
preduce_last_result(const preduce_client_t *c);
PREDUCE_API uint64_t preduce_result_group(const preduce_result_t *r);
/* Number of members in the group (1 means the worker kept its own model). */
PREDUCE_API size_t preduce_result_size(const preduce_result_t *r);
/* Member i: rank, version it brought, weight in the group's mean. */
PREDUCE_API int preduce_result_member(const preduce_result_t *r, size_t i,
                                      uint32_t *rank, uint64_t *version,
                                      double *weight);
/* This worker's own weight and its version after the reduce. */
PREDUCE_API double preduce_result_weight(const preduce_result_t *r);
PREDUCE_API uint64_t preduce_result_version(const preduce_result_t *r);
/*
 * How the group's floats travelled between daemons: "fp32", "bf16" or
 * "int8" (the most precise encoding its members asked for; "fp32" for a
 * group whose members are all on one daemon: nothing travelled), "" when
 * the daemon did not say (one older than this library) or r is NULL.
 * Under int8 a tensor's values come back rounded to its block's 255
 * steps.
 */
PREDUCE_API const char *preduce_result_wire(const preduce_result_t *r);
/*
 * The encoding c's reduces ask for: the "wire" option or PREDUCE_WIRE as
 * connect read them, else the node's transport.wire; "" when neither was
 * set and the daemon did not say (an older one), or c is NULL. A group
 * travels in the most precise encoding its members ask for, so a result
 * may say a more precise one (preduce_result_wire()).
 */
PREDUCE_API const char *preduce_wire(const preduce_client_t *c);

/*
 * The daemon's own explanation of the last failure it reported to c (a
 * refused reduce or tensor create: say, "reduce of 300 floats, but this
 * job reduces 200 (...)"), or "" when it gave none. Each reduce or tensor
 * create clears it (a failure the library found itself, -EBUSY or
 * -EINVAL, has none). Valid until the next call on c; never NULL.
 * With c NULL: why this thread's last preduce_connect() or
 * preduce_connect_with() failed (the daemon's or the scheduler's reason,
 * say a job's settings that differ), "" after one that succeeded.
 */
PREDUCE_API const char *preduce_last_error(const preduce_client_t *c);
/* A short English text for a return code (never NULL). */
PREDUCE_API const char *preduce_strerror(int err);

/*
 * 1 when a reduce that returned `err` may succeed if called again on the
 * same client: -ETIMEDOUT and -ECONNRESET. 0 for every other code, and for
 * success. (A -ETIMEDOUT that broke the connection is retried into
 * -ENOTCONN, which is not retryable: connect again.)
 */
PREDUCE_API int preduce_error_retryable(int err);

#ifdef __cplusplus
}
#endif

#endif
