/* SPDX-License-Identifier: MIT */
/*
 * What a node judges of a trainer's Hello itself, apart from the
 * connection it came on, so that tests and the fuzz target (fuzz_hello)
 * call it without a loop: the worker's name, then the job it names and
 * that job's settings (node_ipc.c calls one, checks the trainer count,
 * then the other, and fails the connection on a refusal). The scheduler
 * judges the rest of a job (daemon/sched/sched_job.c). Names and
 * settings go into log lines and metrics, so no control characters.
 */
#ifndef PR_NODE_HELLO_H
#define PR_NODE_HELLO_H

#include <stddef.h>
#include <stdint.h>

#include "daemon/base/auth.h"
#include "proto/frame.h"

/* A worker name's most bytes (libpreduce's bound too). */
#define PR_NODE_WORKER_NAME_MAX 63
/* A scheduler list's most bytes, as a trainer names it (and canonical). */
#define PR_NODE_SCHED_SPEC_MAX 1023

/*
 * Hello h is a client's with a worker name of 1..PR_NODE_WORKER_NAME_MAX
 * bytes and no control characters: 0, or -EINVAL with *reason (for the
 * trainer's Error) and why[] (for the log line: it gives the name's
 * length, never the name).
 */
int pr_node_hello_name(const Pr__V1__Hello *h, const char **reason, char *why,
                       size_t why_len);

/*
 * The job Hello h names (its own, else `node_job`, the node's `job`) has
 * at most PR_JOB_NAME_MAX bytes, and h at most PR_JOB_SETTINGS_MAX
 * settings of at most PR_JOB_SETTING_MAX bytes, none with control
 * characters: 0 and *job, or -EINVAL with *why (for the log line and the
 * trainer's Error).
 */
int pr_node_hello_job(const Pr__V1__Hello *h, const char *node_job,
                      const char **job, const char **why);

/*
 * The proof of the job key Hello h carries for job `job`, for WorkerJoin
 * (auth.h, pr_auth_job_proof): *len PR_AUTH_JOB_PROOF_LEN, or 0 when h
 * carries none. 0, or -EINVAL with *why (a key of the wrong size).
 */
int pr_node_hello_job_key(const Pr__V1__Hello *h, const char *job,
                          uint8_t proof[PR_AUTH_JOB_PROOF_LEN], size_t *len,
                          const char **why);

/*
 * A scheduler list ("host:port", or standbys "a, b") in canonical form,
 * the addresses joined by "," without spaces, into out[len]: 0, or
 * -EINVAL (not a list of 1..PR_SCHED_LIST_MAX host:port with a port
 * above 0, or longer than len allows).
 */
int pr_node_sched_canon(const char *spec, char *out, size_t len);

/*
 * The scheduler Hello h names (Hello.scheduler), canonical into
 * out[PR_NODE_SCHED_SPEC_MAX + 1]: 1, or 0 when it names none (the node's
 * own), or -EINVAL with *why (for the log line and the trainer's Error).
 */
int pr_node_hello_sched(const Pr__V1__Hello *h,
                        char out[PR_NODE_SCHED_SPEC_MAX + 1], const char **why);

#endif
