/* SPDX-License-Identifier: MIT */
/*
 * Every configuration key, one row each (the row type is in conf_int.h).
 * A new key is a row here, a field in struct pr_conf and an entry in
 * conf/preduced.conf.
 */
#include "daemon/base/conf_int.h"

#include <stddef.h>

#include "daemon/base/log.h"
#include "daemon/base/policy.h"

static const struct pr_name roles[] = {
    {"node", PR_ROLE_NODE}, {"scheduler", PR_ROLE_SCHEDULER}, {NULL, 0}};

static const struct pr_name xports[] = {{"auto", PR_XPORT_AUTO},
                                        {"rdma", PR_XPORT_RDMA},
                                        {"tcp", PR_XPORT_TCP},
                                        {NULL, 0}};

/*
 * transport.wire: the values of enum pr_wire (daemon/engine/wire.h, whose
 * pr_wire_name() spells them too: the config, below the engine, cannot
 * include it). test_conf_wire_names_agree checks the two agree.
 */
static const struct pr_name wires[] = {
    {"fp32", 0}, {"bf16", 1}, {"int8", 2}, {NULL, 0}};

static const struct pr_name encrypts[] = {{"auto", PR_ENCRYPT_AUTO},
                                          {"on", PR_ENCRYPT_ON},
                                          {"off", PR_ENCRYPT_OFF},
                                          {NULL, 0}};

static const struct pr_name io_threads[] = {{"auto", PR_IO_THREAD_AUTO},
                                            {"on", PR_IO_THREAD_ON},
                                            {"off", PR_IO_THREAD_OFF},
                                            {NULL, 0}};

static const struct pr_name missing[] = {{"refuse", PR_RELOAD_MISSING_REFUSE},
                                         {"default", PR_RELOAD_MISSING_DEFAULT},
                                         {NULL, 0}};

#define OFF(field) offsetof(struct pr_conf, field)

/*
 * Grouped by section in file order: pr_conf_dump() relies on it. Columns:
 * section, name, type, field, default, lo, hi, enum names, flags, doc.
 */
static const struct entry rows[] = {
    {"", "role", T_ENUM, OFF(role), "node", 0, 0, roles, 0,
     "node or scheduler"},
    {"", "job", T_STR, OFF(job), "default", 0, 0, NULL, F_NAME,
     "the job of a trainer that names none (PREDUCE_JOB)"},
    {"", "reload_missing", T_ENUM, OFF(reload_missing), "refuse", 0, 0, missing,
     F_RELOAD,
     "SIGHUP with a file lacking keys the last one set: refuse or default"},

    {"node", "name", T_STR, OFF(node_name), "", 0, 0, NULL, 0,
     "this node's name; empty = host name"},
    {"node", "socket", T_STR, OFF(node_socket), "/run/preduce/preduced.sock", 0,
     0, NULL, F_SOCKPATH, "Unix socket the local trainers connect to"},
    {"node", "socket_group", T_STR, OFF(node_socket_group), "", 0, 0, NULL, 0,
     "group (name or id) owning node.socket, mode 0660; empty = the "
     "daemon's"},
    {"node", "scheduler", T_STR, OFF(node_scheduler), "127.0.0.1:7070", 0, 0,
     NULL, F_ADDR | F_LIST,
     "host:port of the job's scheduler; a,b: standbys, tried in order"},
    {"node", "scheduler_settle_ms", T_U32, OFF(node_sched_settle_ms), "3000", 0,
     3600000, NULL, F_RELOAD,
     "an earlier scheduler reachable this long is followed again, ms"},
    {"node", "data_listen", T_STR, OFF(node_data_listen), "127.0.0.1:7071", 0,
     0, NULL, F_ADDR | F_PORT0,
     "host:port peer daemons connect to; port 0 = any free port"},
    {"node", "data_advertise", T_STR, OFF(node_data_advertise), "", 0, 0, NULL,
     F_ADDR | F_EMPTY, "host:port given to peers; empty = data_listen"},
    {"node", "max_clients", T_U32, OFF(node_max_clients), "64", 1, 4096, NULL,
     0, "trainers served at once"},
    {"node", "max_schedulers", T_U32, OFF(node_max_schedulers), "8", 1, 16,
     NULL, F_RELOAD,
     "schedulers followed at once: node.scheduler and those trainers name "
     "(PREDUCE_SCHEDULER); 1 = trainers may not name one"},
    {"node", "max_tensor_mb", T_U32, OFF(node_max_tensor_mb), "1024", 1, 65536,
     NULL, 0, "largest tensor, MiB"},
    {"node", "trainer_max_tensors", T_U32, OFF(node_trainer_max_tensors),
     "4096", 1, 65536, NULL, F_RELOAD, "tensors one trainer may hold"},
    {"node", "trainer_max_mb", T_U32, OFF(node_trainer_max_mb), "65536", 1,
     4194304, NULL, F_RELOAD, "MiB of tensors one trainer may hold"},
    {"node", "job_max_tensors", T_U32, OFF(node_job_max_tensors), "32768", 1,
     1048576, NULL, F_RELOAD,
     "tensors all trainers of one job may hold on this node"},
    {"node", "job_max_mb", T_U32, OFF(node_job_max_mb), "4194304", 1, 4194304,
     NULL, F_RELOAD, "MiB of tensors all trainers of one job may hold here"},
    {"node", "max_tensors", T_U32, OFF(node_max_tensors), "32768", 1, 1048576,
     NULL, F_RELOAD, "tensors all trainers of this node may hold"},
    {"node", "reduce_timeout_ms", T_U32, OFF(node_reduce_timeout_ms), "30000",
     100, 3600000, NULL, F_RELOAD,
     "longest a reduce may take, whatever its trainer asks for, ms"},
    {"node", "reduce_threads", T_U32, OFF(node_reduce_threads), "0", 0, 64,
     NULL, 0,
     "threads for sums, scaling and copies; 0 = the CPUs it may use, at "
     "most 8"},
    {"node", "busy_poll_us", T_U32, OFF(node_busy_poll_us), "200", 0, 100000,
     NULL, F_RELOAD,
     "poll without sleeping this long after progress while a reduce is in "
     "flight, us; 0 = off"},
    {"node", "connect_timeout_ms", T_U32, OFF(node_connect_timeout_ms), "5000",
     100, 600000, NULL, F_RELOAD,
     "give up connecting to scheduler or peer after, ms"},

    {"scheduler", "listen", T_STR, OFF(sched_listen), "127.0.0.1:7070", 0, 0,
     NULL, F_ADDR | F_PORT0,
     "host:port daemons connect to; port 0 = any free port"},
    {"scheduler", "policy", T_ENUM, OFF(sched_policy), "allreduce", 0, 0,
     pr_policy_names, F_RELOAD, "allreduce, constant or dynamic"},
    {"scheduler", "group_size", T_U32, OFF(sched_group_size), "2", 1, 65536,
     NULL, F_RELOAD, "constant: members per group (P)"},
    {"scheduler", "min_workers", T_U32, OFF(sched_min_workers), "0", 0, 65536,
     NULL, F_RELOAD,
     "no group forms before this many workers joined; 0 = at once"},
    {"scheduler", "group_min", T_U32, OFF(sched_group_min), "2", 1, 65536, NULL,
     F_RELOAD, "dynamic: the window grows after a group smaller than this"},
    {"scheduler", "group_max", T_U32, OFF(sched_group_max), "0", 0, 65536, NULL,
     F_RELOAD, "dynamic: a group closes at this size; 0 = all live workers"},
    {"scheduler", "window_ms", T_DBL, OFF(sched_window_ms), "5", 0.001, 10000,
     NULL, F_RELOAD, "dynamic: initial window, ms"},
    {"scheduler", "window_min_ms", T_DBL, OFF(sched_window_min_ms), "0.01",
     0.001, 10000, NULL, F_RELOAD, "dynamic: smallest window, ms"},
    {"scheduler", "window_max_ms", T_DBL, OFF(sched_window_max_ms), "10", 0.001,
     10000, NULL, F_RELOAD, "dynamic: largest window, ms"},
    {"scheduler", "window_wait", T_DBL, OFF(sched_window_wait), "0.5", 0, 1,
     NULL, F_RELOAD,
     "dynamic: wait for workers expected within this fraction of the "
     "opener's step; 0 = the adaptive window alone"},
    {"scheduler", "weighting", T_ENUM, OFF(sched_weighting), "uniform", 0, 0,
     pr_weighting_names, F_RELOAD, "uniform or staleness"},
    {"scheduler", "ring_order", T_ENUM, OFF(sched_ring_order), "measured", 0, 0,
     pr_ring_order_names, F_RELOAD,
     "measured (fewest slow links, from the nodes' link rates) or id"},
    {"scheduler", "staleness_alpha", T_DBL, OFF(sched_staleness_alpha), "0.9",
     0, 1, NULL, F_RELOAD,
     "staleness: decay per version behind, strictly in (0, 1)"},
    {"scheduler", "isolation_bound", T_U32, OFF(sched_isolation_bound), "10", 0,
     1000000, NULL, F_RELOAD,
     "B: connect all workers every B x N updates; 0 = off"},
    {"scheduler", "generator_hold_ms", T_DBL, OFF(sched_gen_hold_ms), "0", 0,
     600000, NULL, F_RELOAD,
     "generator: fixed hold for another component, ms; 0 = adaptive"},
    {"scheduler", "generator_hold_max_ms", T_DBL, OFF(sched_gen_hold_max_ms),
     "5000", 1, 3600000, NULL, F_RELOAD, "generator: the longest hold, ms"},
    {"scheduler", "heartbeat_ms", T_U32, OFF(sched_heartbeat_ms), "1000", 10,
     600000, NULL, 0, "heartbeat period, ms"},
    {"scheduler", "node_timeout_ms", T_U32, OFF(sched_node_timeout_ms), "5000",
     50, 3600000, NULL, 0,
     "a silent daemon is declared dead after, ms (>= 3 x heartbeat)"},
    {"scheduler", "group_timeout_ms", T_U32, OFF(sched_group_timeout_ms),
     "30000", 100, 3600000, NULL, F_RELOAD,
     "a group's time limit, ms: past it the nodes' engines fail it"},
    {"scheduler", "max_workers_per_node", T_U32, OFF(sched_max_workers_node),
     "1024", 1, 65536, NULL, F_RELOAD,
     "workers one node daemon may register; past it -EUSERS"},
    {"scheduler", "job_settings", T_STR, OFF(sched_job_settings),
     "policy,group_size,group_min,group_max,min_workers,weighting,"
     "staleness_alpha,isolation_bound",
     0, 0, NULL, 0,
     "scheduler keys a job may set when it starts; empty = none"},

    {"transport", "type", T_ENUM, OFF(xport_type), "auto", 0, 0, xports, 0,
     "auto, rdma or tcp"},
    {"transport", "wire", T_ENUM, OFF(xport_wire), "fp32", 0, 0, wires, 0,
     "floats between daemons: fp32, bf16 or int8; a trainer may choose"},
    {"transport", "chunk_kb", T_U32, OFF(xport_chunk_kb), "1024", 4, 65536,
     NULL, 0, "ring all-reduce chunk, KiB"},
    {"transport", "streams", T_U32, OFF(xport_streams), "1", 1,
     PR_TCP_STREAMS_MAX, NULL, 0, "TCP connections per peer link"},
    {"transport", "express_kb", T_U32, OFF(xport_express_kb), "256", 0, 65536,
     NULL, 0,
     "reduces up to this many KiB on the wire take a link's express "
     "connection; 0 = none"},
    {"transport", "io_thread", T_ENUM, OFF(xport_io_thread), "auto", 0, 0,
     io_threads, 0,
     "large chunks' bytes over TCP on a thread of their own: auto (while "
     "trainers of 2 or more jobs are here), on or off"},
    {"transport", "inflight", T_U32, OFF(xport_inflight), "8", 1, 1024, NULL, 0,
     "RDMA receive slots per peer (no effect on TCP)"},
    {"transport", "rdma_device", T_STR, OFF(xport_rdma_device), "", 0, 0, NULL,
     0, "verbs device name; empty = the first device"},
    {"transport", "rdma_port", T_U32, OFF(xport_rdma_port), "1", 1, 255, NULL,
     0, "port number on the device"},
    {"transport", "gid_index", T_U32, OFF(xport_gid_index), "1", 0, 255, NULL,
     0, "GID table index (RoCE v2 is usually 1 or 3)"},
    {"transport", "rdma_timeout", T_U32, OFF(xport_rdma_timeout), "18", 8, 24,
     NULL, 0, "RDMA ack timeout exponent: 4.096 us * 2^n"},

    {"security", "key_file", T_STR, OFF(sec_key_file), "", 0, 0, NULL, 0,
     "cluster key file; empty = no authentication"},
    {"security", "encrypt", T_ENUM, OFF(sec_encrypt), "auto", 0, 0, encrypts, 0,
     "encrypt every link: auto (= on with a key_file), on or off"},

    {"metrics", "listen", T_STR, OFF(metrics_listen), "", 0, 0, NULL,
     F_ADDR | F_EMPTY, "host:port of the Prometheus endpoint; empty = off"},

    {"log", "level", T_ENUM, OFF(log_level), "info", 0, 0, pr_log_level_names,
     F_RELOAD, "error, warn, info or debug"},
    {"log", "burst", T_U32, OFF(log_burst), "20", 0, 1000000, NULL, F_RELOAD,
     "lines of one message per burst_ms before the rest are counted; 0 = all"},
    {"log", "burst_ms", T_U32, OFF(log_burst_ms), "5000", 100, 3600000, NULL,
     F_RELOAD, "the interval of log.burst, ms"},
};

/* conf.c reads and writes a T_ENUM field as an int. */
#define INT_SIZED(f)                                                           \
    _Static_assert(sizeof(((struct pr_conf *)0)->f) == sizeof(int),            \
                   #f " is not int-sized")
INT_SIZED(role);
INT_SIZED(reload_missing);
INT_SIZED(sched_policy);
INT_SIZED(sched_weighting);
INT_SIZED(sched_ring_order);
INT_SIZED(xport_type);
INT_SIZED(xport_wire);
INT_SIZED(log_level);

_Static_assert(sizeof(rows) / sizeof(rows[0]) <= PR_CONF_KEYS_MAX,
               "raise PR_CONF_KEYS_MAX (conf.h): a key has no place in "
               "struct pr_conf's file_keys");

const struct entry *const pr_conf_keys = rows;
const size_t pr_conf_nkeys = sizeof(rows) / sizeof(rows[0]);
