/* SPDX-License-Identifier: MIT */
/*
 * The scheduler's jobs. A job is a name its trainers give (PREDUCE_JOB;
 * the node's `job` when they give none): its first worker starts it, with
 * that worker's settings over this scheduler's values, and it ends when
 * its last worker leaves. Jobs share nothing but the nodes: each has its
 * own workers and ranks, layout, decision core and groups, so two jobs of
 * one model size are never averaged together.
 *
 * Ids are this scheduler's, from 1: a job that ends and starts again gets
 * a new id, so a message about the old one finds nothing. 0 on the wire
 * is a node from before jobs: its workers are in the default job (the
 * scheduler's `job`), which id 0 finds.
 *
 * A job's settings are "key=value" for keys of scheduler.job_settings.
 * They are parsed by the config's own table, pr_conf_set() on a copy of
 * this scheduler's config, so a job's value is checked as a file's would
 * be, cross-key rules included. The copy is shallow: only keys of
 * job_keys[], numbers and names, are set on it, by pr_conf_set_scalar(),
 * which neither allocates nor frees, so the copy owns no string and is
 * never finalised.
 */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/base/log.h"
#include "daemon/sched/sched_int.h"

/* The [scheduler] keys a job may ever set: all of them numbers or names. */
static const char *const job_keys[] = {
    "policy",      "group_size",    "group_min",       "group_max",
    "min_workers", "weighting",     "staleness_alpha", "isolation_bound",
    "window_ms",   "window_min_ms", "window_max_ms",   "window_wait",
    NULL};

void pr_sched_params_from_conf(const struct pr_conf *c,
                               struct pr_sched_params *p)
{
    memset(p, 0, sizeof(*p));
    p->policy = c->sched_policy;
    p->group_size = c->sched_group_size;
    p->min_workers = c->sched_min_workers;
    p->group_min = c->sched_group_min;
    p->group_max = c->sched_group_max;
    p->window_ms = c->sched_window_ms;
    p->window_min_ms = c->sched_window_min_ms;
    p->window_max_ms = c->sched_window_max_ms;
    p->window_wait = c->sched_window_wait;
    p->weighting = c->sched_weighting;
    p->staleness_alpha = c->sched_staleness_alpha;
    p->isolation_bound = c->sched_isolation_bound;
    p->gen_hold_ms = c->sched_gen_hold_ms;
    p->gen_hold_max_ms = c->sched_gen_hold_max_ms;
}

/* Whether the settings a and b make agree on every key a job may set. */
static int params_agree(const struct pr_sched_params *a,
                        const struct pr_sched_params *b)
{
    return a->policy == b->policy && a->group_size == b->group_size &&
           a->group_min == b->group_min && a->group_max == b->group_max &&
           a->min_workers == b->min_workers && a->weighting == b->weighting &&
           a->staleness_alpha == b->staleness_alpha &&
           a->isolation_bound == b->isolation_bound &&
           a->window_ms == b->window_ms &&
           a->window_min_ms == b->window_min_ms &&
           a->window_max_ms == b->window_max_ms &&
           a->window_wait == b->window_wait;
}

static int is_job_key(const char *key, size_t len)
{
    for (size_t i = 0; job_keys[i]; i++)
        if (strlen(job_keys[i]) == len && !strncmp(job_keys[i], key, len))
            return 1;
    return 0;
}

/*
 * The next item of a list separated by commas or spaces: *p moves past
 * it; its start, and its length in *n (0 at the end).
 */
static const char *next_item(const char **p, size_t *n)
{
    while (**p == ',' || isspace((unsigned char)**p))
        (*p)++;
    const char *item = *p;
    *n = strcspn(item, ", \t\n\r\f\v");
    *p += *n;
    return item;
}

/* Whether the comma-separated list `list` names key[0..len). */
static int listed(const char *list, const char *key, size_t len)
{
    size_t n;
    for (const char *p = list, *item; (item = next_item(&p, &n)), n > 0;)
        if (n == len && !strncmp(item, key, len))
            return 1;
    return 0;
}

int pr_sched_job_settings_check(const struct pr_conf *conf, char *why,
                                size_t why_len)
{
    const char *p = conf->sched_job_settings ? conf->sched_job_settings : "";
    size_t n;
    for (const char *item; (item = next_item(&p, &n)), n > 0;) {
        if (!is_job_key(item, n)) {
            snprintf(why, why_len,
                     "scheduler.job_settings: '%.*s' is not a key a job may "
                     "set (policy, group_size, group_min, group_max, "
                     "min_workers, weighting, staleness_alpha, "
                     "isolation_bound, window_ms, window_min_ms, "
                     "window_max_ms, window_wait)",
                     (int)n, item);
            return -EINVAL;
        }
    }
    return 0;
}

/*
 * The config a job runs with: base, a shallow copy, with the settings
 * over it. 0, or -EINVAL / -EPERM with why[] filled in.
 */
static int job_conf(const struct pr_conf *base, char *const *settings, size_t n,
                    struct pr_conf *out, char *why, size_t why_len)
{
    struct pr_conf_err err;
    *out = *base;
    for (size_t i = 0; i < n; i++) {
        const char *set = settings[i] ? settings[i] : "";
        const char *eq = strchr(set, '=');
        const char *k = set;
        while (isspace((unsigned char)*k))
            k++;
        size_t len = eq ? (size_t)(eq - k) : 0;
        while (len > 0 && isspace((unsigned char)k[len - 1]))
            len--;
        if (!eq || len == 0) {
            snprintf(why, why_len, "job setting '%.64s' is not key=value", set);
            return -EINVAL;
        }
        if (!is_job_key(k, len)) {
            snprintf(why, why_len,
                     "job setting '%.*s' is not a key a job may set (see "
                     "scheduler.job_settings in preduced.conf(5))",
                     (int)(len > 64 ? 64 : len), k);
            return -EINVAL;
        }
        if (!listed(base->sched_job_settings ? base->sched_job_settings : "", k,
                    len)) {
            snprintf(why, why_len,
                     "job setting '%.*s': this scheduler's "
                     "scheduler.job_settings does not let a job set it",
                     (int)len, k);
            return -EPERM;
        }
        char assign[160];
        if (strlen(eq + 1) > 96) {
            snprintf(why, why_len,
                     "job setting '%.*s': a value of at most 96 "
                     "bytes",
                     (int)len, k);
            return -EINVAL;
        }
        snprintf(assign, sizeof(assign), "scheduler.%.*s=%s", (int)len, k,
                 eq + 1);
        if (pr_conf_set_scalar(out, assign, &err) < 0) {
            snprintf(why, why_len, "job setting %s: %s", err.key, err.msg);
            return -EINVAL;
        }
    }
    if (pr_conf_validate(out, &err) < 0) {
        snprintf(why, why_len, "job settings: %s: %s", err.key, err.msg);
        return -EINVAL;
    }
    return 0;
}

int pr_sched_job_params(const struct sched_job *j, struct pr_sched_params *p)
{
    struct pr_conf c;
    char why[256];
    int rc =
        job_conf(j->s->conf, j->settings, j->nsettings, &c, why, sizeof(why));
    if (rc < 0) {
        pr_warn("job '%s': %s", j->name, why);
        return rc;
    }
    pr_sched_params_from_conf(&c, p);
    return 0;
}

/* pr_conf_name_ok() (base, which knows no protocol) bounds names so. */
_Static_assert(PR_JOB_NAME_MAX == 63, "pr_conf_name_ok's length bound");

struct sched_job *pr_sched_job_by_name(struct pr_sched *s, const char *name)
{
    for (struct sched_job *j = s->jobs; j; j = j->next)
        if (!strcmp(j->name, name))
            return j;
    return NULL;
}

struct sched_job *pr_sched_job_by_id(struct pr_sched *s, uint32_t id)
{
    /* 0: a node from before jobs, whose workers joined the default job. */
    if (id == 0)
        return pr_sched_job_by_name(s, s->conf->job);
    if (!s->nby_id)
        return NULL;
    for (struct sched_job *j = s->by_id[id & (s->nby_id - 1)]; j;
         j = j->id_next)
        if (j->id == id)
            return j;
    return NULL;
}

/*
 * The buckets for one more job: twice as many once the jobs outnumber
 * them (ids are handed out in turn, so id % buckets spreads them evenly).
 * 0, or -ENOMEM when there are none yet; a table that cannot grow keeps
 * working with longer chains.
 */
static int by_id_reserve(struct pr_sched *s)
{
    if (s->nby_id && s->njobs < s->nby_id)
        return 0;
    uint32_t cap = s->nby_id ? s->nby_id * 2 : 64;
    struct sched_job **b = calloc(cap, sizeof(*b));
    if (!b)
        return s->nby_id ? 0 : -ENOMEM;
    for (uint32_t i = 0; i < s->nby_id; i++)
        while (s->by_id[i]) {
            struct sched_job *j = s->by_id[i];
            s->by_id[i] = j->id_next;
            j->id_next = b[j->id & (cap - 1)];
            b[j->id & (cap - 1)] = j;
        }
    free(s->by_id);
    s->by_id = b;
    s->nby_id = cap;
    return 0;
}

static void by_id_remove(struct pr_sched *s, const struct sched_job *j)
{
    struct sched_job **pp = &s->by_id[j->id & (s->nby_id - 1)];
    while (*pp != j)
        pp = &(*pp)->id_next;
    *pp = j->id_next;
}

static void job_free(struct sched_job *j)
{
    explicit_bzero(j->proof, sizeof(j->proof));
    for (size_t i = 0; i < j->nsettings; i++)
        free(j->settings[i]);
    pr_sched_core_destroy(j->core);
    free(j->workers);
    free(j);
}

static int job_start(struct pr_sched *s, const char *name,
                     char *const *settings, size_t nsettings,
                     const struct pr_sched_params *p, struct sched_job **out)
{
    struct sched_job *j = calloc(1, sizeof(*j));
    if (!j || by_id_reserve(s) < 0) {
        free(j);
        return -ENOMEM;
    }
    j->s = s;
    snprintf(j->name, sizeof(j->name), "%s", name);
    for (size_t i = 0; i < nsettings; i++) {
        j->settings[i] = strdup(settings[i]);
        if (!j->settings[i]) {
            job_free(j);
            return -ENOMEM;
        }
        j->nsettings++;
    }
    /* The params were checked (job_conf): what fails here is memory. */
    j->core = pr_sched_core_create(p);
    if (!j->core) {
        job_free(j);
        return -ENOMEM;
    }
    j->policy = p->policy;
    j->due_us = -1;
    j->id = ++s->next_job_id;
    if (j->id == 0)
        j->id = ++s->next_job_id; /* wrapped: 0 is "no job" */
    j->next = s->jobs;
    s->jobs = j;
    s->njobs++;
    j->id_next = s->by_id[j->id & (s->nby_id - 1)];
    s->by_id[j->id & (s->nby_id - 1)] = j;
    char list[256] = "";
    size_t used = 0;
    for (size_t i = 0; i < nsettings && used < sizeof(list); i++)
        used += (size_t)snprintf(list + used, sizeof(list) - used, "%s%s",
                                 i ? ", " : "", settings[i]);
    pr_info("job '%s' started (id %u), policy %s%s%s", j->name, j->id,
            pr_policy_name(p->policy), nsettings ? "; its settings: " : "",
            list);
    *out = j;
    return 0;
}

int pr_sched_job_get(struct pr_sched *s, const char *name,
                     char *const *settings, size_t nsettings,
                     struct sched_job **out, char *why, size_t why_len)
{
    if (!pr_conf_name_ok(name)) {
        snprintf(why, why_len,
                 "job name '%.64s': 1..%d printable characters, no spaces "
                 "or quotes",
                 name, PR_JOB_NAME_MAX);
        return -EINVAL;
    }
    if (nsettings > PR_JOB_SETTINGS_MAX) {
        snprintf(why, why_len, "%zu job settings: at most %d", nsettings,
                 PR_JOB_SETTINGS_MAX);
        return -EINVAL;
    }
    struct pr_conf c;
    int rc = job_conf(s->conf, settings, nsettings, &c, why, why_len);
    if (rc < 0)
        return rc;
    struct pr_sched_params want;
    pr_sched_params_from_conf(&c, &want);
    struct sched_job *j = pr_sched_job_by_name(s, name);
    if (!j) {
        rc = job_start(s, name, settings, nsettings, &want, out);
        if (rc < 0)
            snprintf(why, why_len, "job '%s': no memory to start it", name);
        return rc;
    }
    /* No settings: the job's as they are. Others must be the job's. */
    struct pr_sched_params have;
    if (nsettings > 0 &&
        (pr_sched_job_params(j, &have) < 0 || !params_agree(&want, &have))) {
        size_t used = (size_t)snprintf(
            why, why_len,
            "job '%s' runs with the settings of its first worker (", name);
        for (size_t i = 0; i < j->nsettings && used < why_len; i++)
            used += (size_t)snprintf(why + used, why_len - used, "%s%s",
                                     i ? ", " : "", j->settings[i]);
        if (used < why_len)
            snprintf(why + used, why_len - used,
                     "%s), not this worker's: name another job, or start "
                     "this one's workers alike",
                     j->nsettings ? "" : "none: the scheduler's");
        return -EINVAL;
    }
    *out = j;
    return 0;
}

int pr_sched_job_key(struct sched_job *j, const uint8_t *proof, size_t len,
                     char *why, size_t why_len)
{
    if (len != 0 && len != PR_AUTH_JOB_PROOF_LEN) {
        snprintf(why, why_len, "a job key's proof of %zu bytes (%d or none)",
                 len, PR_AUTH_JOB_PROOF_LEN);
        return -EINVAL;
    }
    if (!j->key_set) {
        /* Its first worker: the job is keyed as that worker is. */
        if (len)
            memcpy(j->proof, proof, len);
        j->proof_len = len;
        j->key_set = 1;
        if (len)
            pr_info("job '%s' has a key: only workers with it may join",
                    j->name);
        return 0;
    }
    if (pr_auth_job_proof_equal(j->proof, j->proof_len, proof, len))
        return 0;
    j->s->key_refused++;
    snprintf(why, why_len,
             !len ? "job '%s' has a key and this worker gave none "
                    "(PREDUCE_JOB_KEY)"
             : !j->proof_len
                 ? "job '%s' has no key and this worker gave one: its "
                   "workers started without PREDUCE_JOB_KEY"
                 : "job '%s' has another key than this worker's "
                   "(PREDUCE_JOB_KEY names another file?)",
             j->name);
    return -EACCES;
}

void pr_sched_job_end_if_idle(struct sched_job *j)
{
    if (pr_sched_core_live(j->core) > 0)
        return;
    struct pr_sched *s = j->s;
    struct sched_job **pp = &s->jobs;
    while (*pp != j)
        pp = &(*pp)->next;
    *pp = j->next;
    s->njobs--;
    by_id_remove(s, j);
    pr_info("job '%s' ended: its last worker left (%llu groups)", j->name,
            (unsigned long long)j->groups_formed);
    job_free(j);
}

int pr_sched_jobs_reload(struct pr_sched *s)
{
    for (struct sched_job *j = s->jobs; j; j = j->next) {
        struct pr_sched_params p;
        /* Settings the new file makes invalid: the job keeps its values. */
        if (pr_sched_job_params(j, &p) < 0)
            continue;
        int rc = pr_sched_core_set_params(j->core, &p);
        if (rc < 0) {
            pr_warn("job '%s': the reloaded values do not fit it: it keeps "
                    "its own",
                    j->name);
            continue;
        }
        j->policy = p.policy;
        pr_sched_drop_tagged(j);
    }
    return 0;
}

void pr_sched_jobs_fini(struct pr_sched *s)
{
    while (s->jobs) {
        struct sched_job *j = s->jobs;
        s->jobs = j->next;
        job_free(j);
    }
    s->njobs = 0;
    free(s->by_id);
    s->by_id = NULL;
    s->nby_id = 0;
}
