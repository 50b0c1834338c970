/* SPDX-License-Identifier: MIT */
/*
 * What the scheduler's two halves share: sched.c (the server: node
 * connections, hellos, heartbeats, metrics, create and reload) and
 * sched_work.c (the job: workers joining and leaving, READY and cancel,
 * groups dispatched, their outcomes). sched.c calls sched_work.c, never
 * the other way: the job reaches the nodes only through the node list and
 * pr_sched_send(). Private to the scheduler: other modules use sched.h.
 * All of it runs on the scheduler's loop thread.
 */
#ifndef PR_SCHED_INT_H
#define PR_SCHED_INT_H

#include <stdint.h>
#include <uv.h>

#include "daemon/base/auth.h"
#include "daemon/base/conf.h"
#include "daemon/base/conn.h"
#include "daemon/base/hello.h"
#include "daemon/base/metrics.h"
#include "daemon/sched/sched.h"
#include "daemon/sched/core/sched_core.h"
#include "daemon/base/stranger.h"

/*
 * Connections that have not said hello yet: their frames may be
 * PR_HELLO_MAX_FRAME (conn.h), not PR_CTRL_MAX_FRAME (anyone can connect, and a
 * reader buffers a whole frame); at most SCHED_STRANGERS_MAX at once,
 * SCHED_STRANGERS_PER_SOURCE of them from one IP address, each for
 * node_timeout_ms (stranger.h: a new connection takes the oldest one's
 * place). The transport's listener has limits of its own (xport_tcp_int.h).
 */
#define SCHED_STRANGERS_MAX        64
#define SCHED_STRANGERS_PER_SOURCE 32

/* A node daemon's connection, from accept to close (sched.c owns them). */
/* One Ping.rates entry: chunks from node `from` arrive at this rate. */
struct sched_rate {
    uint32_t from;
    uint64_t bytes_per_s;
    uint64_t age_ms;
};

struct sched_node {
    struct sched_node *next;
    struct pr_sched *s;
    struct pr_conn *conn;
    struct pr_stranger st; /* listed until its hello passes */
    uint32_t id;           /* 0 until the hello */
    char name[64];
    char data_addr[128];
    uint32_t workers; /* its live workers: scheduler.max_workers_per_node */
    uint8_t challenge[PR_AUTH_NONCE_LEN]; /* the nonce it was sent (auth.h) */
    /*
     * How fast its peers' chunks reach it, from its latest Ping (node =
     * the sender): for ring order (sched_ring.c). rates_ms: when that
     * Ping came; each entry's age_ms counts from then.
     */
    struct sched_rate *rates;
    size_t nrates;
    uint64_t rates_ms;
};

/* A worker, by rank in its job's workers (sched_work.c owns them). */
struct sched_worker {
    int live;
    uint32_t node;
    uint64_t nfloats; /* its layout: its last READY's, refused or not */
    uint32_t wire;    /* its last queued READY's encoding (enum pr_wire) */
    char name[64];
    struct pr_sched_wstats st;
};

/* A group in flight (sched_work.c owns them). */
struct sched_group;

/*
 * A job: the workers that named it, their layout and their decision core
 * (sched_job.c makes and frees them, sched_work.c runs them). A job starts
 * with its first worker and ends with its last; its groups still in
 * flight then finish without it (they name it by id).
 */
struct sched_job {
    struct sched_job *next;
    struct sched_job *id_next; /* its bucket's chain in s->by_id */
    struct pr_sched *s;
    uint32_t id; /* on the wire: WorkerJoined.job and every message after */
    char name[PR_JOB_NAME_MAX + 1];
    /* Its settings, "key=value" as the first worker gave them (checked). */
    char *settings[PR_JOB_SETTINGS_MAX];
    size_t nsettings;
    struct pr_sched_core *core;
    struct sched_worker *workers; /* by rank */
    uint32_t nworkers_cap;
    /*
     * The job's layout (floats per reduce) and how many live workers hold
     * it: the layout most live workers reduce (check_layout in
     * sched_work.c).
     */
    uint64_t nfloats;
    uint32_t holders;
    enum pr_policy policy; /* its core's, for the checks of a READY */
    /*
     * Its key, as its first worker proved it (WorkerJoin.job_proof,
     * proof_len bytes; 0: a job without a key); key_set once that worker
     * was seen. Every later worker must prove the same (pr_sched_job_key).
     */
    uint8_t proof[PR_AUTH_JOB_PROOF_LEN];
    size_t proof_len;
    int key_set;
    uint64_t groups_formed;
    int64_t due_us; /* its core's next due time; -1: none */
};

struct pr_sched {
    uv_loop_t *loop;
    struct pr_conf *conf;
    uv_tcp_t listener;
    uv_timer_t deadline; /* the jobs' earliest due time */
    int64_t deadline_us; /* what it is set for; -1: stopped (or fired) */
    uv_timer_t heartbeat;
    struct sched_job *jobs;
    uint32_t njobs;
    /*
     * The jobs by id, chained in nby_id buckets (a power of two, grown
     * with the jobs): every message after a worker's join names its job
     * by id, and a pass over the list per READY cost as much as the READY
     * itself at 64 jobs (make bench-jobs).
     */
    struct sched_job **by_id;
    uint32_t nby_id;
    uint32_t next_job_id;
    struct sched_node *nodes;
    /* Their messages (Groups, Rejects) coalesce per loop turn. */
    struct pr_conn_batch *batch;
    uint32_t next_node_id;
    struct sched_group *groups;
    uint16_t port;
    int handles;
    uint64_t last_beat_ms;    /* when heartbeat_cb last ran */
    uint64_t groups_formed;   /* all jobs', those ended included */
    uint64_t workers_refused; /* registrations past a node's cap */
    uint64_t key_refused;     /* registrations without the job's key */
    uint64_t id_base;         /* wire group id = id_base + group_seq */
    uint64_t group_seq;       /* groups dispatched, all jobs */
    int stopping;
    struct pr_metrics *metrics;
    const struct pr_auth_key *key;      /* NULL: no authentication */
    uint64_t sizes[PR_SCHED_SIZES + 1]; /* all jobs' groups by size;
                                           [0]: larger */
    uint64_t members; /* all jobs' member-updates: the sum of sizes */
    uint64_t rings_reordered;
    /*
     * The ids of nodes judged gone, newest last (at most
     * 64): one that comes back with its id is told its
     * peers dropped their links to it (Welcome.peers_dropped).
     */
    uint32_t forgotten[64];
    uint32_t nforgotten; /* rings not in node id order (sched_ring.c) */
    struct pr_strangers strangers; /* connections before their hello */
};

static inline uint64_t pr_sched_now_us(void)
{
    return uv_hrtime() / 1000;
}

/*
 * sched.c: a node's Hello, its fields past the protocol version and
 * before the key's proof: a node daemon's role and a data address of
 * host:port with a port above 0, a max_group_id below
 * PR_SCHED_GROUP_ID_MAX. 0, or -EPROTO with *why (the Error's
 * reason).
 */
int pr_sched_hello_fields(const Pr__V1__Hello *h, const char **why);
/* Above any group id a scheduler gives out (a microsecond clock's). */
#define PR_SCHED_GROUP_ID_MAX (1ull << 62)

/*
 * sched_job.c: the jobs, by name and by id. pr_sched_job_get() finds the
 * job `name` or starts it with `settings` (a worker's: "key=value", keys
 * of scheduler.job_settings); a worker whose settings differ from a
 * running job's is refused. 0 and *out, or -EINVAL / -EPERM with why[]
 * filled in, or -ENOMEM.
 */
/* Its params from a config (sched_job.c; the policy and window keys). */
void pr_sched_params_from_conf(const struct pr_conf *c,
                               struct pr_sched_params *p);
int pr_sched_job_get(struct pr_sched *s, const char *name,
                     char *const *settings, size_t nsettings,
                     struct sched_job **out, char *why, size_t why_len);
struct sched_job *pr_sched_job_by_id(struct pr_sched *s, uint32_t id);
/* The running job of that name, or NULL. */
struct sched_job *pr_sched_job_by_name(struct pr_sched *s, const char *name);
/* Ends job j if it has no live worker left. */
void pr_sched_job_end_if_idle(struct sched_job *j);
/*
 * A joining worker's proof of the job's key (WorkerJoin.job_proof, len
 * bytes): the job's first worker sets the job's (none, or one of
 * PR_AUTH_JOB_PROOF_LEN bytes); a later one must give an equal one. 0, or
 * -EACCES (a proof that differs, one missing or one too many) or -EINVAL
 * (a proof of another length) with why[] filled in.
 */
int pr_sched_job_key(struct sched_job *j, const uint8_t *proof, size_t len,
                     char *why, size_t why_len);
/* The scheduler's params with job j's settings over them. */
int pr_sched_job_params(const struct sched_job *j, struct pr_sched_params *p);
/* After a reload: every job's core takes the new params. */
int pr_sched_jobs_reload(struct pr_sched *s);
/* Whether scheduler.job_settings names only keys a job may set. */
int pr_sched_job_settings_check(const struct pr_conf *conf, char *why,
                                size_t why_len);
/* Frees every job (the scheduler's end). */
void pr_sched_jobs_fini(struct pr_sched *s);

/*
 * sched_work.c, which sched.c calls and which calls nothing in sched.c:
 * the jobs' workers and groups, and sending to a node.
 */
/* Sends m to node n; a failure closes n's connection (logged). */
void pr_sched_send(struct sched_node *n, Pr__V1__Msg *m);
/*
 * The checks of a WorkerJoin before its job's (pr_sched_job_get): a
 * worker name of 1..63 bytes (a sched_worker's name). 0, or -EINVAL with
 * why[] filled in.
 */
int pr_sched_worker_name(const char *name, char *why, size_t why_len);
void pr_sched_on_worker_join(struct sched_node *n, const Pr__V1__WorkerJoin *j);
/* A node's own worker left (a WorkerLeave for another node's is ignored). */
void pr_sched_on_worker_leave(struct sched_node *n,
                              const Pr__V1__WorkerLeave *l);
void pr_sched_on_ready(struct sched_node *n, const Pr__V1__Ready *r);
void pr_sched_on_cancel(struct sched_node *n, const Pr__V1__Cancel *c);
void pr_sched_drop_tagged(struct sched_job *j);
void pr_sched_on_group_done(struct sched_node *n, const Pr__V1__GroupDone *d);
/*
 * Node `node` is gone: its workers leave, and each group in flight on it is
 * aborted (GroupAbort -ECONNRESET) on its other nodes and forgotten.
 */
void pr_sched_forget_node(struct pr_sched *s, uint32_t node);
/* Forgets the groups whose daemons never answered by their expiry. */
void pr_sched_expire_groups(struct pr_sched *s, uint64_t now_ms);
/* Frees the groups in flight (the scheduler's end). */
void pr_sched_groups_fini(struct pr_sched *s);
uint32_t pr_sched_live_workers(const struct pr_sched *s);
/* Forms and dispatches every group of job j that is due; re-arms. */
void pr_sched_schedule(struct sched_job *j);
/* The same for every job (the deadline timer, a node gone, a reload). */
void pr_sched_schedule_all(struct pr_sched *s);

#endif
