/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for the scheduler's jobs (daemon/sched/sched_job.c) over a
 * scheduler struct with no loop: a job starts with its first worker's
 * settings, a later worker's must agree, every kind of bad name and
 * setting is refused with a reason, and an idle job ends.
 */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/base/conf.h"
#include "daemon/base/log.h"
#include "daemon/sched/sched_int.h"
#include "tests/check_run.h"

static struct pr_conf conf;
static struct pr_sched sched;
/* Two workers' proofs of different job keys (setup()). */
static uint8_t k1[32], k2[32];

static void setup(void)
{
    pr_log_set_level(PR_LOG_ERROR);
    ck_assert_int_eq(pr_conf_init(&conf), 0);
    memset(&sched, 0, sizeof(sched));
    sched.conf = &conf;
    memset(k1, 1, sizeof(k1));
    memset(k2, 2, sizeof(k2));
}

static void teardown(void)
{
    pr_sched_jobs_fini(&sched);
    pr_conf_fini(&conf);
}

/* pr_sched_job_get() with settings s (NULL-terminated); why in why[]. */
static int get(const char *name, const char *const *s, struct sched_job **j,
               char *why)
{
    size_t n = 0;
    while (s && s[n])
        n++;
    why[0] = '\0';
    return pr_sched_job_get(&sched, name, (char *const *)s, n, j, why, 512);
}

START_TEST(test_job_started_with_its_settings)
{
    struct sched_job *a, *b;
    char why[512];
    const char *const s[] = {"policy=allreduce", " group_max = 4 ", NULL};
    ck_assert_int_eq(get("a", s, &a, why), 0);
    ck_assert_int_eq(get("b", NULL, &b, why), 0);
    ck_assert_ptr_ne(a, b);
    ck_assert_uint_ne(a->id, b->id);
    ck_assert_uint_ne(a->id, 0);
    ck_assert_int_eq(a->policy, PR_POLICY_ALLREDUCE);
    ck_assert_int_eq(b->policy, conf.sched_policy);
    struct pr_sched_params p;
    ck_assert_int_eq(pr_sched_job_params(a, &p), 0);
    ck_assert_uint_eq(p.group_max, 4);
    ck_assert_ptr_eq(pr_sched_job_by_id(&sched, a->id), a);
    ck_assert_ptr_null(pr_sched_job_by_id(&sched, 0));
    ck_assert_uint_eq(sched.njobs, 2);
}
END_TEST

START_TEST(test_job_later_worker_agrees_or_is_refused)
{
    struct sched_job *a, *again;
    char why[512];
    const char *const first[] = {"policy=dynamic", NULL};
    const char *const same[] = {"policy = dynamic", NULL};
    const char *const other[] = {"policy=constant", NULL};
    const char *const size7[] = {"group_size=7", NULL};
    ck_assert_int_eq(get("a", first, &a, why), 0);
    /* None given: the job's. The same, spelled otherwise: accepted. */
    ck_assert_int_eq(get("a", NULL, &again, why), 0);
    ck_assert_ptr_eq(again, a);
    ck_assert_int_eq(get("a", same, &again, why), 0);
    ck_assert_ptr_eq(again, a);
    ck_assert_int_eq(get("a", other, &again, why), -EINVAL);
    ck_assert_msg(strstr(why, "job 'a' runs with the settings of its first "
                              "worker (policy=dynamic)"),
                  "%s", why);
    /*
     * A job started without settings refuses a worker whose settings
     * differ from the scheduler's, not one whose agree.
     */
    struct sched_job *b;
    ck_assert_int_eq(get("b", NULL, &b, why), 0);
    ck_assert_int_eq(get("b", size7, &again, why), -EINVAL);
    ck_assert_msg(strstr(why, "none: the scheduler's"), "%s", why);
    ck_assert_uint_eq(sched.njobs, 2);
}
END_TEST

/* Every refusal: its errno and the words of its reason; no job made. */
START_TEST(test_job_bad_input_refused)
{
    static const struct {
        const char *name;
        const char *settings[3];
        int rc;
        const char *why;
    } cases[] = {
        {"", {NULL}, -EINVAL, "job name ''"},
        {"has space", {NULL}, -EINVAL, "no spaces"},
        {"quo\"te", {NULL}, -EINVAL, "or quotes"},
        {"a", {"policy", NULL}, -EINVAL, "'policy' is not key=value"},
        {"a", {"=dynamic", NULL}, -EINVAL, "is not key=value"},
        {"a", {"heartbeat_ms=5", NULL}, -EINVAL, "not a key a job may set"},
        {"a", {"listen=1.2.3.4:5", NULL}, -EINVAL, "not a key a job may set"},
        {"a", {"policy=fastest", NULL}, -EINVAL, "'fastest' is not one of"},
        {"a", {"group_size=0", NULL}, -EINVAL, "out of range"},
        {"a",
         {"group_min=5", "group_max=3", NULL},
         -EINVAL,
         "group_min 5 is above group_max 3"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct sched_job *j = NULL;
        char why[512];
        ck_assert_int_eq(get(cases[i].name, cases[i].settings, &j, why),
                         cases[i].rc);
        ck_assert_msg(strstr(why, cases[i].why), "case %zu: %s", i, why);
        ck_assert_ptr_null(sched.jobs);
    }
    char name[PR_JOB_NAME_MAX + 2];
    memset(name, 'n', sizeof(name) - 1);
    name[sizeof(name) - 1] = '\0';
    struct sched_job *j;
    char why[512];
    ck_assert_int_eq(get(name, NULL, &j, why), -EINVAL);
    name[PR_JOB_NAME_MAX] = '\0';
    ck_assert_int_eq(get(name, NULL, &j, why), 0);
    const char *many[PR_JOB_SETTINGS_MAX + 2];
    for (int i = 0; i <= PR_JOB_SETTINGS_MAX; i++)
        many[i] = "policy=dynamic";
    many[PR_JOB_SETTINGS_MAX + 1] = NULL;
    ck_assert_int_eq(get("many", many, &j, why), -EINVAL);
    ck_assert_msg(strstr(why, "at most 16"), "%s", why);
}
END_TEST

/* scheduler.job_settings says which keys a job may set: -EPERM past it. */
START_TEST(test_job_settings_the_admin_allows)
{
    struct sched_job *j;
    char why[512];
    const char *const pol[] = {"policy=allreduce", NULL};
    const char *const win[] = {"window_ms=8", NULL};
    ck_assert_int_eq(
        pr_conf_set(&conf, "scheduler.job_settings=window_ms", NULL), 0);
    ck_assert_int_eq(get("a", pol, &j, why), -EPERM);
    ck_assert_msg(strstr(why, "does not let a job set it"), "%s", why);
    ck_assert_int_eq(get("a", win, &j, why), 0);
    ck_assert_int_eq(pr_conf_set(&conf, "scheduler.job_settings=", NULL), 0);
    ck_assert_int_eq(get("b", win, &j, why), -EPERM);
    ck_assert_int_eq(pr_sched_job_settings_check(&conf, why, sizeof(why)), 0);
    ck_assert_int_eq(
        pr_conf_set(&conf, "scheduler.job_settings=policy, listen", NULL), 0);
    ck_assert_int_eq(pr_sched_job_settings_check(&conf, why, sizeof(why)),
                     -EINVAL);
    ck_assert_msg(strstr(why, "'listen' is not a key a job may set"), "%s",
                  why);
}
END_TEST

/* A job with no live worker ends; another of its name is a new job. */
START_TEST(test_job_ends_when_idle)
{
    struct sched_job *a, *b;
    char why[512];
    ck_assert_int_eq(get("a", NULL, &a, why), 0);
    uint32_t id = a->id;
    ck_assert_int_eq(pr_sched_core_add_worker(a->core, 0, 1, 0), 0);
    pr_sched_job_end_if_idle(a);
    ck_assert_ptr_eq(pr_sched_job_by_id(&sched, id), a);
    ck_assert_int_eq(pr_sched_core_remove_worker(a->core, 0, 1), 0);
    pr_sched_job_end_if_idle(a);
    ck_assert_ptr_null(pr_sched_job_by_id(&sched, id));
    ck_assert_uint_eq(sched.njobs, 0);
    ck_assert_int_eq(get("a", NULL, &b, why), 0);
    ck_assert_uint_gt(b->id, id);
}
END_TEST

/*
 * A job's key: its first worker's proof, or none; later workers must
 * bring an equal one, and every refusal says which case it is and counts.
 */
START_TEST(test_job_key_set_by_first_worker)
{
    struct sched_job *a, *b;
    char why[512];
    ck_assert_int_eq(get("a", NULL, &a, why), 0);
    ck_assert_int_eq(pr_sched_job_key(a, k1, 32, why, 512), 0);
    ck_assert_uint_eq(a->proof_len, 32);
    ck_assert_int_eq(pr_sched_job_key(a, k1, 32, why, 512), 0);
    ck_assert_int_eq(pr_sched_job_key(a, k2, 32, why, 512), -EACCES);
    ck_assert_ptr_nonnull(strstr(why, "another key"));
    ck_assert_int_eq(pr_sched_job_key(a, NULL, 0, why, 512), -EACCES);
    ck_assert_ptr_nonnull(strstr(why, "gave none"));
    ck_assert_ptr_nonnull(strstr(why, "job 'a'"));
    ck_assert_int_eq(pr_sched_job_key(a, k1, 31, why, 512), -EINVAL);
    ck_assert_uint_eq(sched.key_refused, 2);
    /* Still keyed with k1 after the refusals. */
    ck_assert_int_eq(pr_sched_job_key(a, k1, 32, why, 512), 0);

    ck_assert_int_eq(get("b", NULL, &b, why), 0);
    ck_assert_int_eq(pr_sched_job_key(b, NULL, 0, why, 512), 0);
    ck_assert_int_eq(pr_sched_job_key(b, NULL, 0, why, 512), 0);
    ck_assert_int_eq(pr_sched_job_key(b, k1, 32, why, 512), -EACCES);
    ck_assert_ptr_nonnull(strstr(why, "has no key"));
    ck_assert_uint_eq(sched.key_refused, 3);
    ck_assert_uint_eq(b->proof_len, 0);
}
END_TEST

/* The key goes with its job: a job of that name started later sets its own. */
START_TEST(test_job_key_forgotten_when_job_ends)
{
    struct sched_job *a;
    char why[512];
    ck_assert_int_eq(get("a", NULL, &a, why), 0);
    ck_assert_int_eq(pr_sched_job_key(a, k1, 32, why, 512), 0);
    /* Its one worker joins and leaves: the job ends with it. */
    ck_assert_int_eq(pr_sched_core_add_worker(a->core, 0, 1, 0), 0);
    pr_sched_job_end_if_idle(a);
    ck_assert_uint_eq(sched.njobs, 1);
    ck_assert_int_eq(pr_sched_job_key(a, k2, 32, why, 512), -EACCES);
    ck_assert_int_eq(pr_sched_core_remove_worker(a->core, 0, 1), 0);
    pr_sched_job_end_if_idle(a);
    ck_assert_uint_eq(sched.njobs, 0);
    ck_assert_int_eq(get("a", NULL, &a, why), 0);
    ck_assert_int_eq(pr_sched_job_key(a, k2, 32, why, 512), 0);
    ck_assert_int_eq(pr_sched_job_key(a, k1, 32, why, 512), -EACCES);
}
END_TEST

/* A reload gives running jobs the new values, but not over their own. */
START_TEST(test_job_reload_keeps_its_settings)
{
    struct sched_job *a, *b;
    char why[512];
    const char *const win[] = {"window_ms=8", NULL};
    ck_assert_int_eq(
        pr_conf_set(&conf, "scheduler.job_settings=policy,window_ms", NULL), 0);
    ck_assert_int_eq(get("a", win, &a, why), 0);
    ck_assert_int_eq(get("b", NULL, &b, why), 0);
    ck_assert_int_eq(pr_conf_set(&conf, "scheduler.window_ms=3", NULL), 0);
    ck_assert_int_eq(pr_sched_jobs_reload(&sched), 0);
    struct pr_sched_params p;
    ck_assert_int_eq(pr_sched_job_params(a, &p), 0);
    ck_assert_double_eq(p.window_ms, 8);
    ck_assert_int_eq(pr_sched_job_params(b, &p), 0);
    ck_assert_double_eq(p.window_ms, 3);
}
END_TEST

/*
 * The id table: jobs found by id while it grows past its first buckets
 * (64), after others ended, and ended ones never.
 */
START_TEST(test_job_found_by_id_as_jobs_come_and_go)
{
    enum { N = 300 };
    struct sched_job *j[N];
    uint32_t id[N];
    char why[512], name[16];
    for (int i = 0; i < N; i++) {
        snprintf(name, sizeof(name), "j%d", i);
        ck_assert_int_eq(get(name, NULL, &j[i], why), 0);
        id[i] = j[i]->id;
    }
    ck_assert_uint_ge(sched.nby_id, N);
    for (int i = 0; i < N; i++)
        ck_assert_ptr_eq(pr_sched_job_by_id(&sched, id[i]), j[i]);
    /* Idle jobs end at once: every other one. */
    for (int i = 0; i < N; i += 2)
        pr_sched_job_end_if_idle(j[i]);
    ck_assert_uint_eq(sched.njobs, N / 2);
    for (int i = 0; i < N; i++)
        ck_assert_ptr_eq(pr_sched_job_by_id(&sched, id[i]),
                         i % 2 ? j[i] : NULL);
    /* New jobs take new ids, found as well. */
    struct sched_job *k;
    ck_assert_int_eq(get("later", NULL, &k, why), 0);
    ck_assert_uint_gt(k->id, id[N - 1]);
    ck_assert_ptr_eq(pr_sched_job_by_id(&sched, k->id), k);
    ck_assert_ptr_null(pr_sched_job_by_id(&sched, k->id + 1));
}
END_TEST

/*
 * Jobs that share a bucket: with 64 buckets and few jobs, ids that far
 * apart chain together, and each is found, and taken out, wherever it is
 * in its chain (its head, its middle, its end).
 */
START_TEST(test_job_found_by_id_in_a_shared_bucket)
{
    char why[512], name[16];
    struct sched_job *j[3], *tmp;
    /* Ids 1..129: the first three of bucket 1 are ids 1, 65 and 129. */
    for (int i = 0; i < 129; i++) {
        snprintf(name, sizeof(name), "t%d", i);
        ck_assert_int_eq(get(name, NULL, &tmp, why), 0);
        if (tmp->id % 64 == 1)
            j[tmp->id / 64] = tmp;
        else
            pr_sched_job_end_if_idle(tmp);
    }
    ck_assert_uint_eq(sched.njobs, 3);
    ck_assert_uint_eq(sched.nby_id, 64);
    for (int i = 0; i < 3; i++)
        ck_assert_ptr_eq(pr_sched_job_by_id(&sched, j[i]->id), j[i]);
    uint32_t mid = j[1]->id, first = j[0]->id, last = j[2]->id;
    pr_sched_job_end_if_idle(j[1]); /* from the middle of the chain */
    ck_assert_ptr_null(pr_sched_job_by_id(&sched, mid));
    ck_assert_ptr_eq(pr_sched_job_by_id(&sched, first), j[0]);
    ck_assert_ptr_eq(pr_sched_job_by_id(&sched, last), j[2]);
    pr_sched_job_end_if_idle(j[2]);
    ck_assert_ptr_null(pr_sched_job_by_id(&sched, last));
    ck_assert_ptr_eq(pr_sched_job_by_id(&sched, first), j[0]);
    ck_assert_uint_eq(sched.njobs, 1);
}
END_TEST

static Suite *sched_job_suite(void)
{
    Suite *s = suite_create("sched_job");
    TCase *tc = tcase_create("jobs");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_job_started_with_its_settings);
    tcase_add_test(tc, test_job_later_worker_agrees_or_is_refused);
    tcase_add_test(tc, test_job_bad_input_refused);
    tcase_add_test(tc, test_job_settings_the_admin_allows);
    tcase_add_test(tc, test_job_ends_when_idle);
    tcase_add_test(tc, test_job_key_set_by_first_worker);
    tcase_add_test(tc, test_job_key_forgotten_when_job_ends);
    tcase_add_test(tc, test_job_reload_keeps_its_settings);
    tcase_add_test(tc, test_job_found_by_id_as_jobs_come_and_go);
    tcase_add_test(tc, test_job_found_by_id_in_a_shared_bucket);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return check_run(sched_job_suite());
}
