/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target: the checks of a Hello and a WorkerJoin once they are
 * unpacked, the input being the packed Msg. A Hello is judged twice: as
 * a trainer's on a node (pr_node_hello_name, pr_node_hello_job, then
 * pr_node_hello_job_key, daemon/node/node_hello.c, as on_hello() in
 * node_ipc.c calls them), and as a node's on the scheduler
 * (pr_sched_hello_fields, sched.c). What the
 * node takes it passes on as send_join() does, packed and unpacked, to
 * the scheduler's checks of a WorkerJoin (pr_sched_worker_name, then
 * pr_sched_job_get, as pr_sched_on_worker_join() calls them); a
 * WorkerJoin in the input goes there directly, as from any node. It
 * aborts when an answer is not one the headers document, a refusal says
 * no reason, a check takes a field its header's rules refuse (or
 * refuses one they allow), a Hello passes both as a trainer's and as a
 * node's, or the scheduler refuses a worker name the node passed on.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/base/conf.h"
#include "daemon/base/log.h"
#include "daemon/node/node_hello.h"
#include "daemon/sched/sched_int.h"
#include "tests/fuzz/fuzz_input.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static struct pr_conf conf;

/* The rule the headers give: at most max bytes, none a control byte. */
static int fits(const char *s, size_t max)
{
    size_t n = strlen(s);
    if (n > max)
        return 0;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)s[i] < 0x20 || s[i] == 0x7f)
            return 0;
    return 1;
}

/* A reason written into why[why_len]: a string, not empty. */
static void said(const char *why, size_t why_len)
{
    if (!memchr(why, 0, why_len) || !why[0])
        abort();
}

/* A reason given as a constant string: there, not empty. */
static void given(const char *why)
{
    if (!why || !why[0])
        abort();
}

/* The scheduler judges a WorkerJoin: 1 if the worker joined its job. */
static int sched_join(const Pr__V1__WorkerJoin *wj)
{
    char why[384];
    memset(why, 0x55, sizeof(why));
    const char *name = wj->name ? wj->name : "";
    int rc = pr_sched_worker_name(name, why, sizeof(why));
    size_t n = strlen(name);
    if (rc != 0 && rc != -EINVAL)
        abort();
    if ((rc == 0) != (n >= 1 && n <= 63))
        abort();
    if (rc < 0) {
        said(why, sizeof(why));
        return 0;
    }
    struct pr_sched s;
    memset(&s, 0, sizeof(s));
    s.conf = &conf;
    const char *jobname = wj->job && wj->job[0] ? wj->job : conf.job;
    struct sched_job *j = NULL, *again = NULL;
    memset(why, 0x55, sizeof(why));
    rc = pr_sched_job_get(&s, jobname, wj->settings, wj->n_settings, &j, why,
                          sizeof(why));
    if (rc != 0 && rc != -EINVAL && rc != -EPERM && rc != -ENOMEM)
        abort();
    if (rc < 0)
        said(why, sizeof(why));
    if (rc == 0) {
        if (!j || strcmp(j->name, jobname) != 0 ||
            wj->n_settings > PR_JOB_SETTINGS_MAX)
            abort();
        /* A second worker with the same settings joins the same job. */
        if (pr_sched_job_get(&s, jobname, wj->settings, wj->n_settings, &again,
                             why, sizeof(why)) != 0 ||
            again != j)
            abort();
        /*
         * The job's key: the first proof of 0 or 32 bytes sets it, and
         * only an equal one passes after it; any other length is refused
         * and sets nothing.
         */
        size_t plen = wj->job_proof.len;
        int prc =
            pr_sched_job_key(j, wj->job_proof.data, plen, why, sizeof(why));
        int fits_len = plen == 0 || plen == PR_AUTH_JOB_PROOF_LEN;
        if (prc != (fits_len ? 0 : -EINVAL))
            abort();
        if (prc < 0)
            said(why, sizeof(why));
        else if (pr_sched_job_key(j, wj->job_proof.data, plen, why,
                                  sizeof(why)) != 0 ||
                 pr_sched_job_key(j, NULL, 0, why, sizeof(why)) !=
                     (plen ? -EACCES : 0))
            abort();
    }
    pr_sched_jobs_fini(&s);
    return rc == 0;
}

/* A node judges a trainer's Hello: 1 if it took it (and passed it on). */
static int node_hello(const Pr__V1__Hello *h)
{
    const char *reason = NULL;
    char why[96];
    memset(why, 0x55, sizeof(why));
    int rc = pr_node_hello_name(h, &reason, why, sizeof(why));
    const char *name = h->name ? h->name : "";
    int ok = h->role == PR__V1__ROLE__ROLE_CLIENT && name[0] &&
             fits(name, PR_NODE_WORKER_NAME_MAX);
    if ((rc != 0 && rc != -EINVAL) || (rc == 0) != ok)
        abort();
    if (rc < 0) {
        given(reason);
        said(why, sizeof(why));
        /* The log line gives the name's length, never its bytes. */
        char shape[96], ctrl[96];
        size_t len = strlen(name);
        snprintf(shape, sizeof(shape),
                 "hello with role %d and a name of %zu bytes", (int)h->role,
                 len);
        snprintf(ctrl, sizeof(ctrl),
                 "hello with a name of %zu bytes that has control characters",
                 len);
        if (strcmp(why, shape) != 0 && strcmp(why, ctrl) != 0)
            abort();
        return 0;
    }
    const char *job = NULL, *jwhy = NULL;
    rc = pr_node_hello_job(h, conf.job, &job, &jwhy);
    const char *want = h->job && h->job[0] ? h->job : conf.job;
    ok = fits(want, PR_JOB_NAME_MAX) && h->n_settings <= PR_JOB_SETTINGS_MAX;
    for (size_t i = 0; ok && i < h->n_settings; i++)
        ok = fits(h->settings[i], PR_JOB_SETTING_MAX);
    if ((rc != 0 && rc != -EINVAL) || (rc == 0) != ok)
        abort();
    if (rc < 0) {
        given(jwhy);
        return 0;
    }
    if (job != want)
        abort();
    /* A key's bytes become a proof (key sizes as pr_auth_load's), or not. */
    uint8_t proof[PR_AUTH_JOB_PROOF_LEN];
    size_t plen = 99;
    rc = pr_node_hello_job_key(h, job, proof, &plen, &jwhy);
    size_t klen = h->job_key.len;
    if (rc != (klen == 0 || (klen >= 16 && klen <= 4096) ? 0 : -EINVAL) ||
        plen != (rc == 0 && klen ? PR_AUTH_JOB_PROOF_LEN : 0))
        abort();
    if (rc < 0) {
        given(jwhy);
        return 0;
    }
    /*
     * The scheduler it names: none (the node's), or a canonical list
     * that is canonical again and names only ports the node can dial.
     */
    char spec[PR_NODE_SCHED_SPEC_MAX + 1], again[PR_NODE_SCHED_SPEC_MAX + 1];
    memset(spec, 0x55, sizeof(spec));
    rc = pr_node_hello_sched(h, spec, &jwhy);
    int named = h->scheduler && h->scheduler[0];
    if (rc != 0 && rc != 1 && rc != -EINVAL)
        abort();
    if ((rc == 0) == named)
        abort();
    if (rc < 0) {
        given(jwhy);
        return 0;
    }
    if (rc == 1) {
        char addr[PR_SCHED_LIST_MAX][PR_CONF_ADDR_MAX];
        int k = pr_conf_addr_list(spec, addr, PR_SCHED_LIST_MAX);
        if (strlen(spec) > PR_NODE_SCHED_SPEC_MAX || strchr(spec, ' ') ||
            k < 1 || pr_node_sched_canon(spec, again, sizeof(again)) < 0 ||
            strcmp(spec, again))
            abort();
    }
    /* What send_join() sends, as the scheduler unpacks it. */
    Pr__V1__WorkerJoin j = PR__V1__WORKER_JOIN__INIT;
    j.cookie = 1;
    j.name = (char *)name;
    j.job = (char *)job;
    j.n_settings = h->n_settings;
    j.settings = h->settings;
    j.job_proof.data = proof;
    j.job_proof.len = plen;
    size_t len = pr__v1__worker_join__get_packed_size(&j);
    uint8_t *buf = malloc(len ? len : 1);
    if (!buf)
        return 0;
    pr__v1__worker_join__pack(&j, buf);
    Pr__V1__WorkerJoin *got = pr__v1__worker_join__unpack(NULL, len, buf);
    free(buf);
    if (!got)
        abort();
    /* Every name a node passes on fits the scheduler's. */
    char swhy[384];
    if (pr_sched_worker_name(got->name, swhy, sizeof(swhy)) != 0)
        abort();
    sched_join(got);
    pr__v1__worker_join__free_unpacked(got, NULL);
    return 1;
}

/* The scheduler judges a node's Hello: 1 if it took its fields. */
static int sched_hello(const Pr__V1__Hello *h)
{
    const char *why = NULL;
    int rc = pr_sched_hello_fields(h, &why);
    if (rc != 0 && rc != -EPROTO)
        abort();
    if (rc < 0) {
        given(why);
        return 0;
    }
    /* on_hello() copies the address whole, and logs it. */
    if (h->role != PR__V1__ROLE__ROLE_NODE || !h->data_addr ||
        !fits(h->data_addr, sizeof(((struct sched_node *)0)->data_addr) - 1) ||
        !strrchr(h->data_addr, ':'))
        abort();
    return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static int ready;
    if (!ready) {
        fuzz_sched_conf(&conf);
        ready = 1;
    }
    Pr__V1__Msg *m = pr_msg_unpack(data, size);
    if (!m)
        return 0;
    switch (m->body_case) {
    case PR__V1__MSG__BODY_HELLO:
        /* A trainer's hello is no node's, and the other way round. */
        if (node_hello(m->hello) + sched_hello(m->hello) > 1)
            abort();
        break;
    case PR__V1__MSG__BODY_WORKER_JOIN:
        sched_join(m->worker_join);
        break;
    default:
        break;
    }
    pr_msg_free(m);
    return 0;
}
