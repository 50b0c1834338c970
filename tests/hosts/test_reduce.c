/* SPDX-License-Identifier: MIT */
/*
 * The three policies across 4 hosts (network namespaces on a bridge, see
 * tests/hosts/hosts.h) with 2 trainers each, over capped links: hosts 0-2
 * at 200 Mbit/s, host 3 at a quarter of that; then two racks of two hosts
 * joined by a slower link (htb, a class per destination). Every result is
 * checked against the exact combination of the members and versions it
 * reports, and the data went over the hosts' links (the bridge's counters).
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/hosts/hosts.h"
#include "tests/check_run.h"

#define NHOSTS 4
#define PER    2
#define NTRAIN (NHOSTS * PER)
#define NFLOAT 100003

static struct hh h;

static void setup(void)
{
    ck_assert_int_eq(hh_up(&h, NHOSTS), 0);
}

static void teardown(void)
{
    ck_assert_int_eq(hh_down(&h), 0);
}

static void cap_links(void)
{
    for (int i = 0; i < NHOSTS; i++)
        ck_assert_int_eq(
            hh_net(&h, "cap %d %s", i, i == NHOSTS - 1 ? "50mbit" : "200mbit"),
            0);
}

/* A number from a file inside namespace ns (sysfs), or -1. */
static long long ns_read(const char *ns, const char *path)
{
    char cmd[256];
    snprintf(cmd, sizeof(cmd), "ip netns exec %s cat %s", ns, path);
    FILE *f = popen(cmd, "r");
    long long v = -1;
    if (f) {
        if (fscanf(f, "%lld", &v) != 1)
            v = -1;
        pclose(f);
    }
    return v;
}

/* Bytes host i sent into the bridge (its port's receive counter). */
static long long host_sent(int i)
{
    char ns[96], path[96];
    snprintf(ns, sizeof(ns), "%s-sw", h.prefix);
    snprintf(path, sizeof(path), "/sys/class/net/h%d/statistics/rx_bytes", i);
    return ns_read(ns, path);
}

/*
 * Runs NTRAIN trainers, PER on each host, for run_s after their warm-up
 * (a group of join_k), or for nsteps steps each when nsteps > 0; each
 * checks every result. Their steps in steps[].
 */
static void run(int join_k, double run_s, int nsteps, long *steps, long *maxk,
                long *mink)
{
    pid_t pids[NTRAIN];
    char names[NTRAIN][16];
    for (int i = 0; i < NTRAIN; i++) {
        snprintf(names[i], sizeof(names[i]), "t%d", i);
        struct h_trainer_opts o = {.name = names[i],
                                   .node = i % NHOSTS,
                                   .n = NFLOAT,
                                   .nparts = 2,
                                   .uniform = 1,
                                   .slow_ms = 1 + i % 3,
                                   .join_k = join_k,
                                   .run_s = nsteps > 0 ? 0 : run_s,
                                   .steps = nsteps,
                                   .strict = 1};
        pids[i] = h_trainer_spawn(&h.c, &o);
        ck_assert_int_gt(pids[i], 0);
    }
    int failed = h_wait_trainers(pids, names, NTRAIN, 60000);
    if (failed)
        h_log_dump(&h.c, "sched");
    ck_assert_int_eq(failed, 0);
    *maxk = 0;
    *mink = NTRAIN;
    for (int i = 0; i < NTRAIN; i++) {
        long errors, k, k0, nonuni;
        double secs;
        ck_assert_int_eq(
            h_trainer_figures(&h.c, names[i], &steps[i], &secs, &errors), 0);
        ck_assert_int_eq(errors, 0);
        ck_assert_int_eq(h_trainer_groups(&h.c, names[i], &nonuni, &k), 0);
        ck_assert_int_eq(h_trainer_min_k(&h.c, names[i], &k0), 0);
        ck_assert_int_gt(steps[i], 3);
        if (k > *maxk)
            *maxk = k;
        if (k0 < *mink)
            *mink = k0;
    }
}

static long sum(const long *v, int n)
{
    long s = 0;
    for (int i = 0; i < n; i++)
        s += v[i];
    return s;
}

START_TEST(test_hosts_allreduce)
{
    cap_links();
    const char *const sets[] = {"scheduler.policy=allreduce",
                                "scheduler.min_workers=8", NULL};
    ck_assert_int_eq(hh_start(&h, sets, NULL), 0);
    long long sent0[NHOSTS];
    for (int i = 0; i < NHOSTS; i++)
        ck_assert_int_ge(sent0[i] = host_sent(i), 0);
    long steps[NTRAIN], maxk, mink;
    /*
     * A fixed number of steps each: with a time limit a trainer that ends
     * first leaves, and the last groups of the others are smaller.
     */
    run(NTRAIN, 0, 30, steps, &maxk, &mink);
    /* min_workers = N: every group, warm-up included, is all 8. */
    ck_assert_int_eq(maxk, NTRAIN);
    ck_assert_int_eq(mink, NTRAIN);
    /*
     * Each group sends at least 2 (H - 1) / H of the model from every
     * host of the ring: the data crossed the bridge, not a loopback.
     */
    for (int i = 0; i < NHOSTS; i++) {
        long long sent = host_sent(i) - sent0[i];
        long long floor = (long long)steps[i] * NFLOAT * 4 * 3 / 2;
        printf("allreduce: host %d sent %lld bytes for %ld groups (at least "
               "%lld)\n",
               i, sent, steps[i], floor);
        ck_assert_int_ge(sent, floor);
    }
    printf("allreduce: %ld checked results, all groups of %ld\n",
           sum(steps, NTRAIN), maxk);
}
END_TEST

START_TEST(test_hosts_constant)
{
    cap_links();
    const char *const sets[] = {"scheduler.policy=constant",
                                "scheduler.group_size=4", NULL};
    ck_assert_int_eq(hh_start(&h, sets, NULL), 0);
    long steps[NTRAIN], maxk, mink;
    run(0, 3.0, 0, steps, &maxk, &mink);
    ck_assert_int_eq(maxk, 4);
    printf("constant: %ld checked results, groups of %ld to %ld\n",
           sum(steps, NTRAIN), mink, maxk);
}
END_TEST

START_TEST(test_hosts_dynamic)
{
    cap_links();
    const char *const sets[] = {"scheduler.policy=dynamic",
                                "scheduler.window_ms=5", NULL};
    ck_assert_int_eq(hh_start(&h, sets, NULL), 0);
    long steps[NTRAIN], maxk, mink;
    run(0, 3.0, 0, steps, &maxk, &mink);
    ck_assert_int_gt(maxk, 1);
    printf("dynamic: %ld checked results, groups of %ld to %ld\n",
           sum(steps, NTRAIN), mink, maxk);
}
END_TEST

/* Bytes through class 1:20 (across racks) of dev in namespace ns. */
static long long cross_bytes(const char *ns, const char *dev)
{
    char cmd[256];
    snprintf(cmd, sizeof(cmd),
             "ip netns exec %s tc -s class show dev %s classid 1:20", ns, dev);
    FILE *f = popen(cmd, "r");
    long long v = -1;
    char line[512];
    while (f && fgets(line, sizeof(line), f)) {
        const char *p = strstr(line, "Sent ");
        if (p && sscanf(p, "Sent %lld bytes", &v) == 1)
            break;
    }
    if (f)
        pclose(f);
    return v;
}

START_TEST(test_hosts_racks)
{
    /* Hosts 0, 1 in one rack, 2, 3 in the other, 400 against 50 Mbit/s. */
    ck_assert_int_eq(hh_net(&h, "racks 400mbit 50mbit 0 0 1 1"), 0);
    const char *const sets[] = {"scheduler.policy=dynamic",
                                "scheduler.window_ms=5", NULL};
    ck_assert_int_eq(hh_start(&h, sets, NULL), 0);
    long steps[NTRAIN], maxk, mink;
    run(0, 3.0, 0, steps, &maxk, &mink);
    ck_assert_int_gt(maxk, 1);
    /* Traffic to the other rack went through its own class, on every host. */
    for (int i = 0; i < NHOSTS; i++) {
        char ns[96];
        snprintf(ns, sizeof(ns), "%s-h%d", h.prefix, i);
        long long b = cross_bytes(ns, "eth0");
        printf("racks: host %d sent %lld bytes across racks\n", i, b);
        ck_assert_int_gt(b, NFLOAT * 4);
    }
    printf("racks: %ld checked results, groups of %ld to %ld\n",
           sum(steps, NTRAIN), mink, maxk);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("hosts_reduce");
    TCase *tc = tcase_create("policies");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 90);
    tcase_add_test(tc, test_hosts_allreduce);
    tcase_add_test(tc, test_hosts_constant);
    tcase_add_test(tc, test_hosts_dynamic);
    tcase_add_test(tc, test_hosts_racks);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return check_run(suite());
}
