/* SPDX-License-Identifier: MIT */
/*
 * Test harness for integration tests: starts real preduced processes (a
 * scheduler and node daemons) on loopback, or each in a network namespace
 * of its own (struct h_place, tests/hosts/), each with its own port,
 * socket directory and log file under a private temporary directory, and
 * stops them. Every wait here has a deadline.
 */
#ifndef PR_HARNESS_H
#define PR_HARNESS_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define H_MAX_NODES 8

/*
 * Where a daemon runs: a network namespace (/run/netns/NAME, made by the
 * test; its trainers run there too) and the address it binds and is
 * reached at. Empty strings: the test's own namespace and 127.0.0.1.
 */
struct h_place {
    char netns[48];
    char addr[48];
};

struct h_cluster {
    char dir[256];
    uint16_t sched_port;
    pid_t sched_pid;
    int nnodes;
    pid_t node_pid[H_MAX_NODES];
    uint16_t node_port[H_MAX_NODES]; /* data port */
    char sock[H_MAX_NODES][300];
    /*
     * When set, node daemons started after it read this file (-c), so a
     * test can change a key in it and reload (SIGHUP): --set keys would
     * override the file's on reload too.
     */
    char node_conf[300];
    struct h_place sched_at;
    struct h_place node_at[H_MAX_NODES];
};

/*
 * A port that was free a moment ago on 127.0.0.1, below the kernel's
 * ephemeral range (so no outgoing connection takes it meanwhile).
 */
uint16_t h_free_port(void);

/*
 * Every node daemon also gets the space-separated key=value settings in
 * $PREDUCE_TEST_NODE_SETS (e.g. "transport.type=rdma" in the RDMA guest).
 *
 * Starts a scheduler with `sets` (NULL-terminated "key=value" list, may be
 * NULL) and `nnodes` node daemons; waits until every trainer socket
 * accepts. 0 or -errno.
 */
int h_cluster_start(struct h_cluster *c, int nnodes,
                    const char *const *sched_sets,
                    const char *const *node_sets);
/*
 * h_cluster_start with the scheduler at `sched_at` and node i at
 * node_at[i] (tests/hosts/: each in a network namespace of its own). A
 * "scheduler.listen=ADDR:PORT" among sched_sets fixes the scheduler's port.
 */
int h_cluster_start_at(struct h_cluster *c, int nnodes,
                       const struct h_place *sched_at,
                       const struct h_place *node_at,
                       const char *const *sched_sets,
                       const char *const *node_sets);
/*
 * (Re)starts the scheduler on c->sched_port, logging to sched.log; the
 * space-separated key=value settings in $PREDUCE_TEST_SCHED_SETS come
 * before sched_sets (which win).
 */
int h_sched_start(struct h_cluster *c, const char *const *sched_sets);
/*
 * Stops the processes (SIGTERM, then SIGKILL after 5 s) and removes dir.
 * Returns how many did not exit 0 (a crash, a sanitizer report, a hang),
 * after printing their logs; a pid set to 0 is skipped (killed on purpose).
 */
int h_cluster_stop(struct h_cluster *c);
/* Starts one more node daemon at index i (after a kill, for example). */
int h_node_start(struct h_cluster *c, int i, const char *const *node_sets);
/* Returns 1 if the log of process `who` ("sched", "node0", ...) has `s`. */
int h_log_contains(const struct h_cluster *c, const char *who, const char *s);
/*
 * Polls the log of process `who` for `s` up to timeout_ms: 1 once it is
 * there, else 0 after printing the log (for a failing test).
 */
int h_log_wait(const struct h_cluster *c, const char *who, const char *s,
               int timeout_ms);
/* Prints a process's log to stderr (for a failing test). */
void h_log_dump(const struct h_cluster *c, const char *who);

/* Deterministic test input for worker `rank` at model version `v`. */
float h_input(uint32_t rank, uint64_t v, size_t i);

/*
 * Runs one trainer in a child process: connects to node `node` as `name`,
 * makes `nparts` tensors totalling `n` floats, runs `steps` reduces of
 * inputs h_input(rank, version, i) and checks every result against a
 * double-precision reference of the members and versions it reports (and
 * uniform weights when `uniform`). slow_ms sleeps before each step.
 * Returns the child's pid; the child exits 0 on success, 1..n on failure,
 * after writing a line of figures to c->dir/NAME.out.
 */
struct h_trainer_opts {
    const char *name;
    int node;
    size_t n;
    int nparts;
    int steps;
    int uniform;
    int personal; /* staleness weighting: personal results */
    int slow_ms;
    int timeout_ms;
    int tolerate_errors; /* reduces that may fail (peer loss tests) */
    double run_s;        /* if > 0: run for this long instead of `steps` */
    int no_check;        /* benchmarks: skip the reference check */
    /*
     * The trainer's wire encoding (PREDUCE_WIRE; NULL: the node's), and
     * the relative error its results may have against the reference (0:
     * 1e-6, float32's sums; bf16 and int8 lose more on each hop).
     */
    const char *wire;
    double tol;
    int in_place; /* preduce_set_in_place(c, 1) */
    /*
     * Benchmarks: steps before the figures start (first touch of the
     * tensors, memory registration); then the trainer creates
     * <dir>/<name>.warm, which h_trainer_warm() waits for.
     */
    int warmup;
    /*
     * Tests: the warm-up also lasts until a group of join_k members came
     * back (the rest of the job has joined; groups are smaller before).
     */
    int join_k;
    int retry_ms; /* with tolerate_errors: sleep after a failed reduce */
    /*
     * Each reduce appends a line to <dir>/<name>.trace: CLOCK_MONOTONIC
     * start and end (s), its code, and for a result its group, version,
     * size, the trainer's rank and the members' ranks (h_trace_read).
     */
    int trace;
    /*
     * Nothing lost or doubled: a result's version is never below the
     * previous one's and its group id is above the previous one's, and a
     * failed reduce (but -ENOTCONN) leaves the tensors holding its input.
     */
    int strict;
    /*
     * The job the trainer names (NULL: its node's). Its inputs then differ
     * from those of another job's trainer of the same rank and version,
     * so a result that mixed two jobs fails the check.
     */
    const char *job;
    const char *job_key; /* its key file (PREDUCE_JOB_KEY); NULL: none */
    /* Its job's scheduler (PREDUCE_SCHEDULER); NULL: its node's. */
    const char *scheduler;
};
pid_t h_trainer_spawn(const struct h_cluster *c,
                      const struct h_trainer_opts *o);
/* Waits for pid up to timeout_ms; its exit status, or -ETIMEDOUT (killed). */
int h_wait(pid_t pid, int timeout_ms);
/*
 * Waits for n trainers (each up to timeout_ms) and prints the name and
 * status of each that did not exit 0: how many did not.
 */
int h_wait_trainers(const pid_t *pids, char (*names)[16], int n,
                    int timeout_ms);
/* Waits up to timeout_ms for a trainer's warm-up to end: 0 or -ETIMEDOUT. */
int h_trainer_warm(const struct h_cluster *c, const char *name, int timeout_ms);
/*
 * The distinct codes of a trainer's failed reduces, warm-up included (its
 * .codes file has a line per failure): up to max of them into codes[], how
 * often each came into counts[]. The number of distinct codes (0 when none
 * failed), or -errno.
 */
int h_trainer_codes(const struct h_cluster *c, const char *name, int *codes,
                    long *counts, int max);
/* One line of a trainer's trace (h_trainer_opts.trace). */
#define H_TRACE_MAX_K 16
struct h_trace {
    double t0, t1; /* CLOCK_MONOTONIC, s */
    int rc;
    unsigned long long group, version;
    int k;
    uint32_t rank, members[H_TRACE_MAX_K];
};
/*
 * Reads trainer `name`'s trace into a malloc'd array (free it): its
 * length, or -errno.
 */
int h_trace_read(const struct h_cluster *c, const char *name,
                 struct h_trace **out);
/* Is `rank` among the members of trace line t? */
int h_trace_has(const struct h_trace *t, uint32_t rank);
/* CLOCK_MONOTONIC in seconds, the clock of the traces. */
double h_now(void);

/* Reads the figures line a trainer wrote: steps done and seconds. */
int h_trainer_figures(const struct h_cluster *c, const char *name, long *steps,
                      double *secs, long *errors);

/*
 * Node i's data bytes by transport, from the line its log ends with after
 * h_cluster_stop (kept with PREDUCE_KEEP_LOGS) or h_node_stop.
 */
int h_node_data_bytes(const struct h_cluster *c, int i, unsigned long long *tcp,
                      unsigned long long *rdma);
/* From the same line: RDMA data writes, credit messages, completion events. */
int h_node_rdma_counts(const struct h_cluster *c, int i,
                       unsigned long long n[3]);
/*
 * Node i's groups that ended ok, and of those the ones written in place,
 * from its log's last lines (after h_node_stop).
 */
int h_node_groups(const struct h_cluster *c, int i, unsigned long long *ok,
                  unsigned long long *in_place);
/*
 * Groups over the wire in fp32, bf16 and int8 (enum pr_wire's order),
 * from the same line of a stopped node's log: 0, or -ENOENT.
 */
int h_node_wire_groups(const struct h_cluster *c, int i,
                       unsigned long long groups[3]);
/* Stops node i alone (SIGTERM); 0 when it exited 0. */
int h_node_stop(struct h_cluster *c, int i);

/* A trainer's longest single reduce after the warm-up, in seconds. */
int h_trainer_slowest(const struct h_cluster *c, const char *name,
                      double *secs);
/* Successful reduces after the trainer's first failed one. */
int h_trainer_after_error(const struct h_cluster *c, const char *name,
                          long *after);

/* How many results had non-uniform weights; the largest group seen. */
int h_trainer_groups(const struct h_cluster *c, const char *name,
                     long *nonuniform, long *maxk);
/* The smallest group a trainer was in (after its warm-up). */
int h_trainer_min_k(const struct h_cluster *c, const char *name, long *mink);

/*
 * GET /metrics from 127.0.0.1:port (tried three times, so a loaded machine
 * does not fail a test): the body (free it), or NULL after printing why.
 */
char *h_metrics_fetch(uint16_t port);
/*
 * The value (after the line's last space) of the first line of `text` that
 * starts with `prefix`, or NAN.
 */
double h_metric(const char *text, const char *prefix);
/* h_metric of what the endpoint on `port` serves now (NAN: no answer). */
double h_metric_at(uint16_t port, const char *prefix);
/*
 * Waits (up to 20 s) until the node whose metrics listen on `port` (polled
 * every gap_ms) has just finished a reduce and then started receiving the
 * next group's data over `transport` ("tcp", "rdma"): a kill that follows
 * lands early inside a transfer, not in the gap between groups (where the
 * scheduler would just leave the dead node out and nothing would fail) nor
 * at its end. 0, or -ETIMEDOUT.
 */
int h_node_wait_transfer(uint16_t port, const char *transport, int gap_ms);
/*
 * Is tensor `id` of trainer `trainer` mapped in node `node`'s daemon (its
 * memfd in /proc/PID/maps)? 1 or 0; aborts (the forked test errors) when
 * that file cannot be read.
 */
int h_node_maps_tensor(const struct h_cluster *c, int node, const char *trainer,
                       uint32_t id);
/* Polls h_node_maps_tensor() up to 3 s until it says `mapped`: 1, or 0. */
int h_node_wait_maps(const struct h_cluster *c, int node, const char *trainer,
                     uint32_t id, int mapped);
/*
 * The trainers names[0..n) that outlived a killed node: prints each one's
 * reduces and failures and adds its failed reduces to *failed. 0; -EPROTO
 * when one that failed made no good reduce after it; -ENOENT when one's
 * figures are missing.
 */
int h_survivors(const struct h_cluster *c, const char *const *names, int n,
                long *failed);

#endif
