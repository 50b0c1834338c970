/* SPDX-License-Identifier: MIT */
#include "daemon/node/node_hello.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "daemon/base/conf.h"
#include "daemon/base/hello.h"

/* A control character in a name would forge or garble a log line. */
static int has_control_chars(const char *name, size_t len)
{
    for (size_t i = 0; i < len; i++) {
        unsigned char ch = (unsigned char)name[i];
        if (ch < 0x20 || ch == 0x7f)
            return 1;
    }
    return 0;
}

int pr_node_hello_name(const Pr__V1__Hello *h, const char **reason, char *why,
                       size_t why_len)
{
    size_t len = h->name ? strlen(h->name) : 0;
    if (h->role != PR__V1__ROLE__ROLE_CLIENT || len == 0 ||
        len > PR_NODE_WORKER_NAME_MAX) {
        snprintf(why, why_len, "hello with role %d and a name of %zu bytes",
                 (int)h->role, len);
        *reason = "expected a client hello with a name";
        return -EINVAL;
    }
    if (has_control_chars(h->name, len)) {
        snprintf(why, why_len,
                 "hello with a name of %zu bytes that has control characters",
                 len);
        *reason = "a worker name may not contain control characters";
        return -EINVAL;
    }
    return 0;
}

int pr_node_hello_job(const Pr__V1__Hello *h, const char *node_job,
                      const char **job, const char **why)
{
    const char *name = h->job && h->job[0] ? h->job : node_job;
    size_t len = strlen(name);
    if (len > PR_JOB_NAME_MAX || has_control_chars(name, len))
        return *why = "a job name has 1..63 bytes and no control characters",
               -EINVAL;
    if (h->n_settings > PR_JOB_SETTINGS_MAX)
        return *why = "a job has at most 16 settings", -EINVAL;
    for (size_t i = 0; i < h->n_settings; i++) {
        size_t k = strlen(h->settings[i]);
        if (k > PR_JOB_SETTING_MAX || has_control_chars(h->settings[i], k))
            return *why = "a job setting has at most 127 bytes and no "
                          "control characters",
                   -EINVAL;
    }
    *job = name;
    return 0;
}

int pr_node_hello_job_key(const Pr__V1__Hello *h, const char *job,
                          uint8_t proof[PR_AUTH_JOB_PROOF_LEN], size_t *len,
                          const char **why)
{
    *len = 0;
    if (h->job_key.len == 0)
        return 0;
    int rc =
        pr_auth_job_proof(h->job_key.data, h->job_key.len, job, proof, why);
    if (rc == 0)
        *len = PR_AUTH_JOB_PROOF_LEN;
    return rc;
}

int pr_node_sched_canon(const char *spec, char *out, size_t len)
{
    char addr[PR_SCHED_LIST_MAX][PR_CONF_ADDR_MAX];
    int k = pr_conf_addr_list(spec, addr, PR_SCHED_LIST_MAX);
    if (k <= 0)
        return -EINVAL;
    size_t used = 0;
    for (int i = 0; i < k; i++) {
        int w = snprintf(out + used, len - used, "%s%s", i ? "," : "", addr[i]);
        if (w < 0 || (size_t)w >= len - used)
            return -EINVAL;
        used += (size_t)w;
    }
    return 0;
}

int pr_node_hello_sched(const Pr__V1__Hello *h,
                        char out[PR_NODE_SCHED_SPEC_MAX + 1], const char **why)
{
    if (!h->scheduler || !h->scheduler[0])
        return 0;
    size_t len = strlen(h->scheduler);
    if (len > PR_NODE_SCHED_SPEC_MAX || has_control_chars(h->scheduler, len) ||
        pr_node_sched_canon(h->scheduler, out, PR_NODE_SCHED_SPEC_MAX + 1) < 0)
        return *why = "a scheduler is host:port, or a list of at most 8 "
                      "(standbys), port 1..65535",
               -EINVAL;
    return 1;
}
