/* SPDX-License-Identifier: MIT */
/*
 * The Python binding (client/python/preduce/, ctypes over libpreduce.so)
 * with real daemons: three Python trainers on two daemons reduce numpy
 * arrays that live in the shared memory, and check every result against a
 * double-precision reference. Runs Debian's /usr/bin/python3 with numpy
 * (tests/install-deps.sh installs python3-numpy).
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

#include "tests/integration/harness.h"
#include "tests/check_run.h"

#define PYTHON "/usr/bin/python3"

/* Runs /usr/bin/python3 `script` with args (NULL-terminated, at most 6). */
static pid_t py_run(const char *script, const char *const *args)
{
    char lib[400], path[400];
    const char *build = getenv("PREDUCE_BUILD");
    snprintf(lib, sizeof(lib), "%s/libpreduce.so.1", build ? build : "build");
    snprintf(path, sizeof(path), "client/python");
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        setenv("PREDUCE_LIB", lib, 1);
        setenv("PYTHONPATH", path, 1);
        /*
         * Under `make asan` the library is instrumented and python is not:
         * the sanitizer runtime must be loaded first, and python's own
         * allocations at exit are not this project's leaks.
         */
        const char *rt = getenv("PREDUCE_ASAN_RUNTIME");
        if (rt && *rt) {
            setenv("LD_PRELOAD", rt, 1);
            setenv("ASAN_OPTIONS", "detect_leaks=0", 1);
        }
        const char *argv[9] = {PYTHON, script};
        for (int i = 0; i < 6 && args[i]; i++)
            argv[2 + i] = args[i];
        execv(PYTHON, (char *const *)argv);
        _exit(127);
    }
    return pid;
}

static pid_t py_worker(const struct h_cluster *c, int node, const char *name,
                       int in_place)
{
    const char *const args[] = {
        c->sock[node], name, "10007", "10", "3", in_place ? "in-place" : NULL,
        NULL};
    return py_run("tests/integration/py_worker.py", args);
}

START_TEST(test_python_binding_reduces)
{
    ck_assert_msg(access(PYTHON, X_OK) == 0,
                  PYTHON " is missing: run tests/install-deps.sh");
    struct h_cluster c;
    /* Groups of all three, so py0 never reduces alone (in place needs a
     * peer daemon). */
    const char *const sets[] = {"scheduler.policy=constant",
                                "scheduler.group_size=3", NULL};
    ck_assert_int_eq(h_cluster_start(&c, 2, sets, NULL), 0);
    pid_t p[3];
    /* py0, alone on node 0, asks for results in place. */
    p[0] = py_worker(&c, 0, "py0", 1);
    p[1] = py_worker(&c, 1, "py1", 0);
    p[2] = py_worker(&c, 1, "py2", 0);
    for (int i = 0; i < 3; i++)
        ck_assert_int_eq(h_wait(p[i], 60000), 0);
    unsigned long long ok = 0, inp = 0;
    ck_assert_int_eq(h_node_stop(&c, 0), 0);
    ck_assert_int_eq(h_node_groups(&c, 0, &ok, &inp), 0);
    /* Every group after all three joined: py0's 10 steps at least. */
    ck_assert_uint_ge(inp, 10);
    ck_assert_int_eq(h_cluster_stop(&c), 0);
}
END_TEST

/*
 * PreduceError.retryable: a reduce that times out (the job needs two
 * workers, one came) is worth a retry, a wrong call is not, and the rest
 * of the table agrees with the library's preduce_error_retryable().
 */
START_TEST(test_python_binding_retryable)
{
    ck_assert_msg(access(PYTHON, X_OK) == 0,
                  PYTHON " is missing: run tests/install-deps.sh");
    struct h_cluster c;
    const char *const sets[] = {"scheduler.policy=allreduce",
                                "scheduler.min_workers=2", NULL};
    ck_assert_int_eq(h_cluster_start(&c, 1, sets, NULL), 0);
    const char *const args[] = {c.sock[0], "pyerr", NULL};
    ck_assert_int_eq(
        h_wait(py_run("tests/integration/py_errors.py", args), 60000), 0);
    ck_assert_int_eq(h_cluster_stop(&c), 0);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("integration_python");
    TCase *tc = tcase_create("python");
    tcase_set_timeout(tc, 90);
    tcase_add_test(tc, test_python_binding_reduces);
    tcase_add_test(tc, test_python_binding_retryable);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return check_run(suite());
}
