/* SPDX-License-Identifier: MIT */
/*
 * preduced configuration: one INI file (conf/preduced.conf documents every
 * key), parsed with libinih through a single table of
 * {section, name, type, field offset, default, bounds, reloadable}.
 *
 * Loading never touches a live configuration: pr_conf_load() fills a fresh
 * struct, and pr_conf_reload() parses and validates a whole new file before
 * it copies the reloadable keys into the live one (the nginx way).
 *
 * Keys before any [section] belong to the global section "" (role, job).
 * Strings are heap copies owned by the struct; pr_conf_fini() frees them.
 */
#ifndef PR_CONF_H
#define PR_CONF_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "daemon/base/log.h"
#include "daemon/base/policy.h"

enum pr_role {
    PR_ROLE_NODE = 0,
    PR_ROLE_SCHEDULER = 1,
};

enum pr_xport_kind {
    PR_XPORT_AUTO = 0,
    PR_XPORT_RDMA = 1,
    PR_XPORT_TCP = 2,
};

/* security.encrypt: auto seals the links whenever a key is set. */
enum pr_encrypt {
    PR_ENCRYPT_AUTO = 0,
    PR_ENCRYPT_ON = 1,
    PR_ENCRYPT_OFF = 2,
};

/*
 * transport.io_thread: auto moves large chunks' bytes on the transport's
 * I/O thread while the daemon serves trainers of more than one job.
 */
enum pr_io_thread {
    PR_IO_THREAD_AUTO = 0,
    PR_IO_THREAD_ON = 1,
    PR_IO_THREAD_OFF = 2,
};

enum pr_reload_missing {
    PR_RELOAD_MISSING_REFUSE = 0,  /* a reload lacking keys set before fails */
    PR_RELOAD_MISSING_DEFAULT = 1, /* such keys return to their defaults */
};

/* The largest config file pr_conf_load() reads, bytes. */
#define PR_CONF_MAX_BYTES (1024 * 1024)

/*
 * Rows the key table may grow to (conf_table.c checks it at compile
 * time): the size of the per-key arrays below and in the parser.
 */
#define PR_CONF_KEYS_MAX 128

/* transport.streams' bound: TCP connections one peer link may have. */
#define PR_TCP_STREAMS_MAX 16

struct pr_conf {
    /* global */
    enum pr_role role;
    char *job; /* the job of a trainer that names none */
    enum pr_reload_missing reload_missing;

    /* [node] */
    char *node_name;         /* default: the host name */
    char *node_socket;       /* trainers' Unix socket path */
    char *node_socket_group; /* its group, name or id; "" = the daemon's */
    char *node_scheduler;    /* host:port of the scheduler, or a list */
    uint32_t node_sched_settle_ms; /* back to an earlier one after */
    char *node_data_listen;        /* host:port peers connect to */
    char *node_data_advertise;     /* host:port given to peers; "" = listen */
    uint32_t node_max_clients;
    uint32_t node_max_schedulers;      /* its own and its trainers' */
    uint32_t node_max_tensor_mb;       /* per tensor, MiB */
    uint32_t node_trainer_max_tensors; /* per trainer */
    uint32_t node_trainer_max_mb;      /* per trainer, all its tensors */
    uint32_t node_job_max_tensors;     /* all trainers of one job */
    uint32_t node_job_max_mb;          /* all trainers of one job */
    uint32_t node_max_tensors;         /* all trainers of this node */
    uint32_t node_reduce_timeout_ms;
    uint32_t node_reduce_threads; /* 0 = the CPUs it may use, at most 8 */
    uint32_t node_busy_poll_us;   /* 0 = sleep in epoll_wait at once */
    uint32_t node_connect_timeout_ms;

    /* [scheduler] */
    char *sched_listen;
    enum pr_policy sched_policy;
    uint32_t sched_group_size;  /* P for policy constant */
    uint32_t sched_min_workers; /* no group before this many joined */
    uint32_t sched_group_min;   /* dynamic: window grows below this */
    uint32_t sched_group_max;   /* dynamic: 0 = all live workers */
    double sched_window_ms;     /* dynamic: initial window */
    double sched_window_min_ms;
    double sched_window_max_ms;
    double sched_window_wait;
    enum pr_weighting sched_weighting;
    enum pr_ring_order sched_ring_order;
    double sched_staleness_alpha;
    uint32_t sched_isolation_bound; /* B; 0 turns the generator off */
    double sched_gen_hold_ms;       /* generator: fixed hold; 0 = adaptive */
    double sched_gen_hold_max_ms;   /* generator: the longest hold */
    uint32_t sched_heartbeat_ms;
    uint32_t sched_node_timeout_ms;
    uint32_t sched_group_timeout_ms;
    uint32_t sched_max_workers_node; /* registrations one node may hold */
    char *sched_job_settings;        /* keys a job may set, comma-separated */

    /* [transport] */
    enum pr_xport_kind xport_type;
    /*
     * The encoding of the floats a trainer's reduce sends to peers when it
     * names none (Reduce.wire 0): an enum pr_wire (daemon/engine/wire.h),
     * kept as an int here, the config being below the engine.
     */
    int xport_wire;
    uint32_t xport_chunk_kb;   /* ring chunk size, KiB */
    uint32_t xport_streams;    /* TCP connections per peer link, 1.. */
    uint32_t xport_express_kb; /* a link's express connection: up to; 0 off */
    int xport_io_thread;       /* enum pr_io_thread */
    uint32_t xport_inflight;   /* RDMA receive slots per peer */
    char *xport_rdma_device;   /* "" = first device */
    uint32_t xport_rdma_port;
    uint32_t xport_gid_index;
    uint32_t xport_rdma_timeout; /* ack timeout: 4.096 us * 2^n */

    /* [security] */
    char *sec_key_file; /* "" = no authentication */
    enum pr_encrypt sec_encrypt;

    /* [metrics] */
    char *metrics_listen; /* host:port for Prometheus text; "" = off */

    /* [log] */
    enum pr_log_level log_level;
    uint32_t log_burst; /* lines of one kind per log_burst_ms; 0 = all */
    uint32_t log_burst_ms;

    /*
     * Which keys (entry i: row i of the table) the last file loaded set, and
     * which a pr_conf_set() did: a reload refuses a file that lost keys
     * the previous one set (a truncated file would otherwise reset them).
     */
    unsigned char file_keys[PR_CONF_KEYS_MAX];
    unsigned char set_keys[PR_CONF_KEYS_MAX];
};

/* Where a file or --set failed, for "FILE:LINE: key: reason" messages. */
struct pr_conf_err {
    int line;     /* 0 when not from a file */
    char key[96]; /* "section.name" */
    char msg[160];
};

/* Fills every key with its default. 0 or -ENOMEM. */
int pr_conf_init(struct pr_conf *c);
void pr_conf_fini(struct pr_conf *c);

/*
 * Parses `path` over the current values of `c` (normally fresh defaults).
 * 0, or a negative errno with *err filled: -ENOENT (no file), -EINVAL (bad
 * value or unknown key), -ERANGE (out of bounds).
 */
int pr_conf_load(struct pr_conf *c, const char *path, struct pr_conf_err *err);

/* "section.name=value" (or "name=value" for global keys). */
int pr_conf_set(struct pr_conf *c, const char *assignment,
                struct pr_conf_err *err);

/*
 * pr_conf_set() for a key that holds a number or a name (-EINVAL for a
 * string key), without the defaults pr_conf_set() fills in after: it
 * neither allocates nor frees, so it may set a shallow copy of a live
 * config (a scheduler job's settings, daemon/sched/sched_job.c).
 */
int pr_conf_set_scalar(struct pr_conf *c, const char *assignment,
                       struct pr_conf_err *err);

/*
 * Whether s may name a job (the `job` key, F_NAME; a trainer's
 * PREDUCE_JOB): 1..63 printable bytes without spaces, quotes or
 * backslashes, since it appears in logs and metrics labels.
 */
int pr_conf_name_ok(const char *s);

/* Whether links are encrypted: a key_file and security.encrypt not off. */
int pr_conf_encrypts(const struct pr_conf *c);

/* Cross-key checks (group_min <= group_max, window bounds, ...). */
int pr_conf_validate(const struct pr_conf *c, struct pr_conf_err *err);

/*
 * Decides whether the configuration a reload would leave (`merged`: the
 * live one with the new reloadable values) may be applied; 0, or a
 * negative errno with *err filled (its key names what was refused).
 */
typedef int (*pr_conf_accept_fn)(const struct pr_conf *merged, void *ctx,
                                 struct pr_conf_err *err);

/*
 * Parses `path` into a new struct, applies the --set overrides given,
 * validates, then copies only reloadable keys into *live, provided the
 * result validates too and `accept` (if not NULL) takes it. A new file
 * that lacks a key the previous file set (and no override sets it) is
 * refused with -EINVAL unless it says reload_missing = default. On any
 * error, *live is untouched. 0 or negative errno; *changed counts keys
 * changed.
 */
int pr_conf_reload(struct pr_conf *live, const char *path,
                   const char *const *overrides, int noverrides,
                   pr_conf_accept_fn accept, void *ctx, struct pr_conf_err *err,
                   int *changed);

/* Writes every key and its current value as INI text (for -T). */
int pr_conf_dump(const struct pr_conf *c, FILE *out);

/*
 * "host:port" or "[v6addr]:port" -> host (copied into host[hostlen]) and
 * port 0..65535; host and port may be NULL. No name lookup is done. Port 0
 * is returned as is: callers that need a real port reject it (pr_conf_validate
 * allows it only for the listen addresses, meaning "any free port").
 * 0 or -EINVAL (malformed, empty host, or a host longer than hostlen - 1).
 */
int pr_conf_parse_hostport(const char *s, char *host, size_t hostlen,
                           uint16_t *port);

/* node.scheduler: the schedulers a node follows, in the order it tries them. */
#define PR_SCHED_LIST_MAX 8
#define PR_CONF_ADDR_MAX  128
/*
 * "a:7070,b:7070" (white space around the commas allowed) -> up to max
 * host:port entries into out (NULL: only checked), each a port 1..65535:
 * their count, or -EINVAL (an entry empty, too long or not host:port) or
 * -E2BIG (more than max).
 */
int pr_conf_addr_list(const char *s, char (*out)[PR_CONF_ADDR_MAX], size_t max);

#endif
