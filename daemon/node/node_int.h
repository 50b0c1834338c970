/* SPDX-License-Identifier: MIT */
/*
 * State shared by the node role's files, each calling only those below it
 * but for one call up (node_ipc.c asks node_sched.c for the scheduler a
 * trainer's hello names, pr_node_sched_for):
 * node.c (the node) on top; node_sched.c (a scheduler it follows, and the
 * data plane of that scheduler's groups), node_standby.c (its address
 * list); node_group.c (the groups a scheduler sends); node_ipc.c (the
 * trainers' connections), calling
 * node_socket.c (the socket file), node_tensor.c (their shared tensors)
 * and node_feedback.c (int8's error feedback of their reduces).
 * node_metrics.c reads it all for metrics.h.
 * Everything here is owned by the loop thread.
 */
#ifndef PR_NODE_INT_H
#define PR_NODE_INT_H

#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <sys/types.h>
#include <uv.h>

#include "daemon/base/auth.h"
#include "daemon/base/conf.h"
#include "daemon/base/conn.h"
#include "daemon/base/hello.h"
#include "daemon/base/log.h"
#include "daemon/engine/engine.h"
#include "daemon/node/node_hello.h"
#include "daemon/base/stranger.h"
#include "daemon/xport/rdma/rdma.h"
#include "daemon/xport/tcp/xport_tcp.h"

/* The reduce latency histogram's bounds, 100 us .. 60 s (node_metrics.c). */
#define PR_NODE_REDUCE_BUCKETS 18

struct node_feedback; /* node_feedback.c */
struct node_sched;    /* below */

struct node_tensor {
    uint32_t id;
    float *data; /* the daemon's mapping of the trainer's memfd */
    size_t n;    /* floats */
    int busy;    /* used by the reduce in flight */
    int doomed;  /* destroyed by the trainer while busy: free after */
    /* The int8 error-feedback vector holding its loss, or NULL. */
    struct node_feedback *fb;
};

enum trainer_state {
    C_HELLO,   /* waiting for the trainer's hello */
    C_WAIT,    /* hello taken; the scheduler link is not up yet */
    C_JOINING, /* WorkerJoin sent to the scheduler */
    C_UP,
};

/* Where a trainer's current reduce is. */
enum reduce_state {
    R_NONE,
    R_QUEUED,     /* READY sent; waiting for a Group or a Reject */
    R_CANCELLING, /* deadline passed, Cancel sent */
    R_GROUPED,    /* its group is running in the engine */
};

struct node_trainer {
    struct node_trainer *next;
    struct pr_node *node;
    /* The scheduler it follows (n->sched[0] until its hello names one). */
    struct node_sched *s;
    int named_sched;      /* its hello named s (Welcome.own_scheduler) */
    struct pr_conn *conn; /* NULL once the trainer hung up */
    uint32_t cookie;
    char name[PR_NODE_WORKER_NAME_MAX + 1];
    /*
     * Its job (Hello.job, else the node's `job`) and settings, sent with
     * every WorkerJoin; job_id is the scheduler's id of it, which every
     * message about the worker carries with its rank.
     */
    char job[PR_JOB_NAME_MAX + 1];
    char **settings;
    size_t nsettings;
    /*
     * The proof of its job key for WorkerJoin (pr_node_hello_job_key),
     * job_proof_len bytes; 0: the trainer gave no key. The key itself is
     * not kept.
     */
    uint8_t job_proof[PR_AUTH_JOB_PROOF_LEN];
    size_t job_proof_len;
    uint32_t job_id;
    int64_t rank;      /* -1 until the scheduler answered */
    int64_t prev_rank; /* the rank of the last scheduler session, or -1 */
    enum trainer_state state;
    struct node_tensor *tensors;
    size_t ntensors, cap;
    uint32_t next_tensor_id;
    enum reduce_state rstate;
    uint64_t seq;
    uint64_t version;
    uint64_t deadline_ms; /* C_WAIT: when to give up on the scheduler */
    /*
     * The reduce's deadline on uv_hrtime()'s clock (CLOCK_MONOTONIC, ns):
     * the trainer's own, capped by node.reduce_timeout_ms (on_reduce).
     */
    uint64_t reduce_deadline_ns;
    struct pr_engine_part *parts;
    size_t nparts;
    int in_place;             /* of the reduce waiting: Reduce.in_place */
    uint64_t group_id;        /* R_GROUPED: the group it is in */
    uint32_t group_rank;      /* R_GROUPED: the rank that group knows it by */
    uint64_t reduce_start_us; /* uv_hrtime of the reduce request, in us */
    struct pr_stranger st;    /* listed until its hello is taken */
    int greeted;              /* its hello was taken: counted in ngreeted */
    /*
     * Of the reduce waiting: its encoding between daemons (enum pr_wire:
     * Reduce.wire - 1, or the node's transport.wire for 0), and under
     * int8 its error-feedback vector (one of `feedback`, its parts' total
     * floats), else NULL. Both go to the engine with the member.
     */
    uint32_t wire;
    float *err;
    struct node_feedback *feedback; /* int8's vectors (node_feedback.c) */
};

enum sched_state {
    S_DOWN,
    S_CONNECTING,
    S_CHALLENGE, /* connected; waiting for the scheduler's challenge */
    S_HELLO,
    S_UP,
};

/* The schedulers of node.scheduler and the probes of earlier ones. */
struct node_scheds {
    char addr[PR_SCHED_LIST_MAX][PR_CONF_ADDR_MAX];
    uint32_t n;          /* entries of addr */
    uint32_t cur;        /* the one followed, or being dialled */
    uint32_t tries;      /* dials since one came up; a round backs off */
    uint32_t backoff_ms; /* after a round of failed dials */
    int switch_to;       /* >= 0: the link is closing to follow this one */
    uv_timer_t probe_timer;
    struct pr_conn *probe; /* a probe's connection in flight */
    uint32_t probe_idx;    /* the earlier one it probes */
    uint64_t probe_start_ms;
    /* Since when each earlier one has answered every probe; 0: it did not. */
    uint64_t ok_since_ms[PR_SCHED_LIST_MAX];
};

/*
 * A scheduler this node follows, and the data plane of its groups: the
 * node's own (node.scheduler; n->sched[0], for the daemon's life), or one
 * a trainer named (Hello.scheduler), opened for the first trainer that
 * names it and closed once its last trainer is gone. Each has its own
 * peer listener, links, engine and ids, since node ids and group ids are
 * a scheduler's own: a group of one can never take a chunk of another's,
 * and a scheduler lost stops only the jobs that follow it. Owned by the
 * loop thread.
 */
struct node_sched {
    struct pr_node *n;
    uint32_t idx;           /* in n->sched[] */
    char *spec;             /* the address list it is known by */
    uint32_t users;         /* trainers following it; 0 closes one not idx 0 */
    uint64_t idle_since_ms; /* when users last fell to 0 (uv_now) */
    struct pr_conn *conn;
    /* Its messages (READYs of many trainers) coalesce per loop turn. */
    struct pr_conn_batch *batch;
    enum sched_state state;
    uv_timer_t retry;
    struct node_scheds list;
    uint64_t max_group_id; /* the highest id of a Group taken: for Hello */
    uint32_t self;         /* this node's id there; 0 before the first */
    uint64_t id_base;      /* the scheduler session last joined */
    char data_addr[128];   /* where its peers reach this node */
    struct pr_tcp_xport *xport;
    struct pr_rdma *rdma; /* NULL: no RDMA device, or transport = tcp */
    struct pr_engine *engine;
    struct pr_link_sink engine_sink; /* what its sink passes on to */
    struct node_group *groups;       /* running (node_group.c) */
    uint64_t last_ping_ms;
    /* Links ended by a sealed frame that did not open. */
    uint64_t auth_failures;
    uint8_t my_nonce[PR_AUTH_NONCE_LEN];  /* this node's nonce to it */
    uint8_t challenge[PR_AUTH_NONCE_LEN]; /* its challenge */
    uint32_t cipher;                      /* the link's, seal.h; 0: clear */
    int handles;                          /* its timers still open */
};

/* Schedulers one node follows at once, its own included. */
#define PR_NODE_SCHED_MAX 16
/*
 * How long a trainer's scheduler stays followed after its last trainer
 * left, ms: a trainer that reconnects (a restart) finds it up, with its
 * links and node id.
 */
#define PR_NODE_SCHED_LINGER_MS 2000

struct pr_node {
    uv_loop_t *loop;
    struct pr_conf *conf;
    /*
     * The schedulers followed: [0] is node.scheduler's, the others the
     * trainers' (NULL where none); nsched bounds the slots in use.
     */
    struct node_sched *sched[PR_NODE_SCHED_MAX];
    uint32_t nsched;
    /*
     * What the schedulers closed so far counted, so that the metrics'
     * totals never go back (node_metrics.c).
     */
    struct pr_engine_stats gone_engine;
    struct pr_tcp_xport_stats gone_tcp; /* links_up* stay 0 */
    struct pr_rdma_stats gone_rdma;
    uint64_t gone_auth_failures; /* their scheduler links' */
    uv_pipe_t ipc;
    int ipc_open;
    uint64_t ntensors;       /* trainers' tensors mapped now, all trainers */
    uint64_t feedback_bytes; /* int8's error feedback, all trainers */
    uint64_t max_map_count;  /* vm.max_map_count at start; 0 = unknown */
    /* The socket file this daemon bound (removed at close only if so). */
    dev_t ipc_dev;
    ino_t ipc_ino;
    /*
     * Accepts a trainer that cannot be served, only to close it (node_ipc.c
     * refuse()): busy while it closes; pending while a connection waits
     * for it.
     */
    uv_pipe_t refused;
    int refused_busy;
    int refused_pending;
    struct node_trainer *trainers;
    uint32_t ntrainers;
    /*
     * Trainers whose hello was taken: what max_clients bounds. Not
     * ntrainers - strangers.count: a stranger evicted or refused leaves
     * the list at once but ntrainers only at its close callback, a loop
     * phase later, so a flood would have counted against real trainers.
     */
    uint32_t ngreeted;
    /* Trainers of two or more jobs are here (pr_node_scheds_jobs). */
    int io_shared;
    uint32_t next_cookie;
    uv_timer_t tick;
    int stopping;
    int handles;
    uint64_t reduces_ok, reduces_failed;
    const struct pr_auth_key *key; /* NULL: no cluster key */
    /*
     * Successful reduces' latency (pr_node_reduce_observe): the sum, the
     * count, and per bucket of node_metrics.c's bounds the reduces that
     * fell in it (not cumulative; one past the last bound: only counted).
     */
    uint64_t reduce_us_sum, reduce_us_count;
    uint64_t reduce_us_buckets[PR_NODE_REDUCE_BUCKETS];
    struct pr_metrics *metrics; /* NULL: [metrics] listen off */
    /*
     * Trainer connections before their hello (node_ipc.c): they do not
     * count against max_clients; ngreeted does.
     */
    struct pr_strangers strangers;
    /*
     * Busy polling (node_spin.c): trainers whose reduce is in flight
     * (rstate not R_NONE, kept by pr_node_set_rstate), and the poll's
     * deadline and progress mark while it runs.
     */
    uint32_t nreducing;
    uv_idle_t spin;
    uint64_t spin_until_ns;
    uint64_t spin_rx;       /* the peer links' read counters when last seen */
    uint64_t spin_start_ns; /* when polling last started */
    uint64_t spins;         /* times polling started */
    uint64_t spin_ns;       /* time spent polling, spells that ended */
    uint64_t spin_check_ns; /* when the spare CPU was last looked for */
    uint64_t spins_skipped; /* spells not started: no spare CPU */
    int spin_spare;         /* that look's answer */
};

/*
 * How long past a trainer's reduce deadline the daemon may still end that
 * reduce: its group may run (and write the results) until then, a cancel
 * wait for the scheduler's answer until then. Well below the library's
 * PREDUCE_REDUCE_SLACK_MS (node.c checks), which leaves room for the answer
 * to come through a loaded machine: a trainer that gave up waiting finds
 * its tensors as they were, as long as the daemon was not held up itself.
 */
#define PR_NODE_GRACE_MS 250
/* Maps left to the daemon itself below vm.max_map_count (node_tensor.c). */
#define PR_NODE_MAP_RESERVE 4096

/*
 * A scheduler link, as every file of the node reads and uses it.
 * node_sched.c drives the link (connect, hello, retries); these two are
 * inline here, with the state they read, so that node_ipc.c and
 * node_metrics.c, below it, reach the link without calling up into it.
 */
static inline int pr_node_sched_up(const struct node_sched *s)
{
    return s->state == S_UP && s->conn;
}

/* Sends m to the scheduler: 0, or -ENOTCONN before the hello, or why not. */
static inline int pr_node_send(struct node_sched *s, Pr__V1__Msg *m)
{
    if (!s->conn || s->state < S_HELLO)
        return -ENOTCONN;
    int rc = pr_conn_send(s->conn, m);
    if (rc < 0)
        pr_warn("scheduler %s: send %s: %s", s->spec, pr_msg_name(m),
                strerror(-rc));
    return rc;
}

/* node_sched.c */
/*
 * Opens a scheduler to follow at n->sched[idx], address list `spec`: its
 * peer listener (node.data_listen for idx 0; another port of that host
 * for the others), transports and engine, and dials it. 0, or the error,
 * logged, with nothing left open.
 */
int pr_node_sched_open(struct pr_node *n, uint32_t idx, const char *spec);
/*
 * Closes s and clears its slot: its groups fail, its links and scheduler
 * link close, what it counted goes into n's gone_* totals.
 */
void pr_node_sched_close(struct node_sched *s);
/*
 * The scheduler a trainer names, `spec` canonical (pr_node_sched_canon):
 * the node's own, one followed already, or one opened for it (at most
 * node.max_schedulers in all). 0 and *out, or a negative errno with *why
 * for the trainer: -EUSERS, none left; the open's error.
 */
int pr_node_sched_for(struct pr_node *n, const char *spec,
                      struct node_sched **out, const char **why);
/*
 * Closes the schedulers that trainers named and none follows any more;
 * called by the node's tick, never from a callback of theirs.
 */
void pr_node_scheds_reap(struct pr_node *n);
/*
 * Tells the transports whether the trainers here are of more than one
 * job (a job is a name on one scheduler): transport.io_thread = auto
 * moves large chunks' bytes off the loop then. Called by the tick.
 */
void pr_node_scheds_jobs(struct pr_node *n);
/* Heartbeats and the scheduler's silence; called by the node's tick. */
void pr_node_sched_tick(struct node_sched *s, uint64_t now_ms);
/* Applies the node's reloaded settings to s's engine. */
void pr_node_sched_reload(struct node_sched *s);

/* node_group.c */
/*
 * A Group from scheduler s: this node's members are matched to their
 * trainers' waiting reduces and the engine runs the node's part; or the
 * group is refused, failing the members matched (their READY is spent).
 */
void pr_node_on_group(struct node_sched *s, const Pr__V1__Group *gm);
/* Fails every group of s running here with status (done() runs later). */
void pr_node_groups_fail(struct node_sched *s, int status);

/* node_metrics.c: the Prometheus text for metrics.h (ctx: the node). */
struct pr_metrics_buf;
int pr_node_render_metrics(void *ctx, struct pr_metrics_buf *out);
/* Counts a successful reduce that took `us` microseconds. */
void pr_node_reduce_observe(struct pr_node *n, uint64_t us);
/*
 * The wire encodings' metrics (part of the above): the node's
 * transport.wire, the engine's groups and bytes sent per encoding (es),
 * and int8's error feedback kept.
 */
void pr_node_render_wire(struct pr_metrics_buf *b, const struct pr_node *n,
                         const struct pr_engine_stats *es);

/* node_spin.c */
/*
 * Progress on a reduce (a trainer's Reduce, the scheduler's Group): the
 * loop polls for node.busy_poll_us more while a trainer waits.
 */
void pr_node_spin(struct pr_node *n);
/* Time spent polling so far, the spell under way included. */
uint64_t pr_node_spin_ns(const struct pr_node *n);
/* Moves a trainer's reduce to state s, counting those in flight. */
void pr_node_set_rstate(struct node_trainer *c, enum reduce_state s);
/*
 * The sink the transports deliver to: the engine's, with each chunk
 * taken as progress (pr_node_spin). Call once the engine exists.
 */
struct pr_link_sink pr_node_spin_sink(struct node_sched *s);

/* node_ipc.c */
int pr_node_ipc_listen(struct pr_node *n);
void pr_node_ipc_close(struct pr_node *n);
struct node_trainer *pr_node_trainer_by_cookie(struct pr_node *n,
                                               uint32_t cookie);
/* The trainer that is worker `rank` of job `job` of s here, or NULL. */
struct node_trainer *pr_node_trainer_by_rank(struct node_sched *s, uint32_t job,
                                             uint32_t rank);
/* The scheduler's WorkerJoined for trainer c (reason: a refusal's why). */
void pr_node_trainer_joined(struct node_trainer *c,
                            const Pr__V1__WorkerJoined *j);
/*
 * Answers the trainer's reduce (its status through pr_reduce_status) and
 * releases its tensors.
 */
void pr_node_reduce_reply(struct node_trainer *c, const Pr__V1__ReduceDone *d);
void pr_node_reduce_fail(struct node_trainer *c, int status);
/* Deadlines of queued reduces; called by the node's tick. */
void pr_node_ipc_tick(struct pr_node *n, uint64_t now_ms);
/* s's link went down: fail what waited on it. */
void pr_node_ipc_sched_lost(struct node_sched *s);
/* s's link came (back) up: join every trainer of s again. */
void pr_node_ipc_sched_up(struct node_sched *s);

/* node_socket.c */
/*
 * Binds node.socket (after clearing a stale file there) and listens, each
 * trainer's connection going to on_connection (server->data is n): 0 or
 * the error, logged.
 */
int pr_node_socket_open(struct pr_node *n, uv_connection_cb on_connection);
/* Closes the listener and removes the socket file if this daemon bound it. */
void pr_node_socket_close(struct pr_node *n);

/* node_tensor.c */
/*
 * TensorCreate: a shared tensor, or an Error frame when it cannot be made
 * (0 either way); a negative errno when the connection must close.
 */
int pr_node_tensor_create(struct node_trainer *c,
                          const Pr__V1__TensorCreate *t);
/* TensorDestroy: now, or when the reduce that reads it ends (doomed). */
void pr_node_tensor_destroy(struct node_trainer *c, uint32_t id);
/* A live tensor of c's by id, or NULL. */
struct node_tensor *pr_node_tensor_by_id(struct node_trainer *c, uint32_t id);
/* Unmaps c's tensor t (and unregisters it from RDMA); the slot stays. */
void pr_node_tensor_free(struct node_trainer *c, struct node_tensor *t);
/*
 * A Reduce's tensors ids[0..n), marked busy, as the engine's parts
 * (*parts, n of them, the caller's to free) and their floats (*total);
 * with int8, their error-feedback vector too (*err, else NULL). Only
 * while c has no reduce in flight. 0, or -EINVAL (an unknown tensor, or
 * one given twice) or -ENOMEM, with *why for the trainer and no tensor
 * left busy.
 */
int pr_node_tensors_take(struct node_trainer *c, const uint32_t *ids, size_t n,
                         int int8, struct pr_engine_part **parts,
                         uint64_t *total, float **err, const char **why);

/*
 * node_feedback.c: int8's error feedback, kept per trainer and list of
 * tensors reduced. get: the vector of a reduce of tensors ts[0..n) in
 * that order (total floats): the one kept for this list, else a new one
 * of zeros, dropping any kept one that holds one of these tensors; 0
 * with *err set, or -ENOMEM with nothing changed. Call it only while c
 * has no reduce in flight. forget: drops the vector that holds t's loss
 * (t destroyed, no reduce reading it). free: drops all of c's.
 */
int pr_node_feedback_get(struct node_trainer *c, struct node_tensor *const *ts,
                         size_t n, size_t total, float **err);
void pr_node_feedback_forget(struct node_trainer *c, struct node_tensor *t);
void pr_node_feedback_free(struct node_trainer *c);

/*
 * node_standby.c: a scheduler's address list. init parses s->spec (the
 * probe timer it starts counts in s->handles); sched_addr is the one
 * followed or dialled; next picks the one to dial after a link ended and
 * returns how long to wait first, ms; up starts probing the earlier ones
 * once the link is up; stop ends the probes (link lost, closing).
 */
int pr_node_scheds_init(struct node_sched *s);
const char *pr_node_sched_addr(const struct node_sched *s);
uint32_t pr_node_scheds_next(struct node_sched *s, int was_up);
void pr_node_scheds_up(struct node_sched *s);
void pr_node_scheds_stop(struct node_sched *s);

#endif
