/* SPDX-License-Identifier: MIT */
/*
 * What the preduced command-line suites (test_cli: -t, -T, options;
 * test_reload: SIGHUP) share: a directory per tcase and per test, running
 * preduced to completion or as a daemon, and reading what it wrote. Every
 * wait has a deadline.
 */
#include "tests/integration/cli_fixture.h"

#include <check.h>
#include <fcntl.h>
#include <ftw.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

char cli_top[64];
char cli_dir[96];
pid_t cli_daemon_pid;

double cli_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

void cli_sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

const char *cli_preduced_path(void)
{
    const char *p = getenv("PREDUCED");
    return p ? p : "build/preduced";
}

static int remove_cb(const char *path, const struct stat *st, int flag,
                     struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    remove(path);
    return 0;
}

void cli_remove_tree(const char *path)
{
    nftw(path, remove_cb, 8, FTW_DEPTH | FTW_PHYS);
}

/* Unchecked fixture, in the runner's process. */
void cli_top_setup(void)
{
    snprintf(cli_top, sizeof(cli_top), "/tmp/preduce-cli-XXXXXX");
    if (!mkdtemp(cli_top)) {
        perror("mkdtemp");
        exit(EXIT_FAILURE);
    }
}

void cli_top_teardown(void)
{
    cli_remove_tree(cli_top);
}

/*
 * Checked fixture, in the test's process. A failed assertion _exit()s
 * that process without the teardown: then the daemon dies with it
 * (PR_SET_PDEATHSIG) and cli_top_teardown() removes the directory.
 */
void cli_setup(void)
{
    snprintf(cli_dir, sizeof(cli_dir), "%s/XXXXXX", cli_top);
    ck_assert_ptr_nonnull(mkdtemp(cli_dir));
}

void cli_teardown(void)
{
    if (cli_daemon_pid > 0) {
        kill(cli_daemon_pid, SIGKILL);
        waitpid(cli_daemon_pid, NULL, 0);
        cli_daemon_pid = 0;
    }
    cli_remove_tree(cli_dir);
}

/*
 * cli_dir/name. The buffer is the name's own for the whole test, so paths
 * taken earlier stay valid.
 */
const char *cli_path(const char *name)
{
    static struct {
        char name[32];
        char path[300];
    } tab[32];
    static int used;
    for (int i = 0; i < used; i++)
        if (strcmp(tab[i].name, name) == 0)
            return tab[i].path;
    ck_assert_int_lt(used, 32);
    snprintf(tab[used].name, sizeof(tab[used].name), "%s", name);
    snprintf(tab[used].path, sizeof(tab[used].path), "%s/%s", cli_dir, name);
    return tab[used++].path;
}

/* Writes cli_dir/name atomically (a new file, then rename); returns its path.
 */
const char *cli_write_file(const char *name, const char *text)
{
    char tmp[320];
    const char *path = cli_path(name);
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    ck_assert_ptr_nonnull(f);
    ck_assert_int_eq(fputs(text, f) >= 0, 1);
    ck_assert_int_eq(fclose(f), 0);
    ck_assert_int_eq(rename(tmp, path), 0);
    return path;
}

/* The whole of a file, NUL-terminated, in buf ("" if absent). */
char *cli_read_into(const char *path, char *buf, size_t cap)
{
    size_t n = 0;
    FILE *f = fopen(path, "r");
    if (f) {
        n = fread(buf, 1, cap - 1, f);
        fclose(f);
    }
    buf[n] = '\0';
    return buf;
}

/* Forks preduced with argv (NULL-terminated, argv[0] excluded). */
pid_t cli_spawn(const char *const *args, const char *out, const char *err)
{
    const char *argv[CLI_MAX_ARGV];
    int n = 0;
    argv[n++] = cli_preduced_path();
    for (; *args && n < CLI_MAX_ARGV - 1; args++)
        argv[n++] = *args;
    argv[n] = NULL;
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid > 0)
        return pid;
    /* Dies with the test even when a failed assertion skips the cleanup. */
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    int o = open(out, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND, 0644);
    int e = strcmp(out, err) == 0
                ? dup(o)
                : open(err, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND, 0644);
    if (o < 0 || e < 0 || dup2(o, STDOUT_FILENO) < 0 ||
        dup2(e, STDERR_FILENO) < 0)
        _exit(126);
    execv(argv[0], (char *const *)argv);
    _exit(127);
}

/*
 * Waits up to timeout_ms for pid: its exit status, -SIGNUM if a signal
 * ended it, or -1000 after killing it for taking too long.
 */
int cli_wait_exit(pid_t pid, int timeout_ms)
{
    double end = cli_now_s() + timeout_ms / 1000.0;
    int st;
    for (;;) {
        pid_t r = waitpid(pid, &st, WNOHANG);
        if (r == pid)
            break;
        if (r < 0)
            return -2000;
        if (cli_now_s() > end) {
            kill(pid, SIGKILL);
            waitpid(pid, &st, 0);
            return -1000;
        }
        cli_sleep_ms(5);
    }
    return WIFEXITED(st) ? WEXITSTATUS(st) : -WTERMSIG(st);
}

/* Runs preduced to completion with the arguments (NULL-terminated). */
void cli_run(struct cli_result *r, ...)
{
    const char *args[CLI_MAX_ARGV];
    int n = 0;
    va_list ap;
    va_start(ap, r);
    while (n < CLI_MAX_ARGV - 1 && (args[n] = va_arg(ap, const char *)) != NULL)
        n++;
    va_end(ap);
    args[n] = NULL;
    const char *out = cli_path("cli_run.out"), *err = cli_path("cli_run.err");
    r->status = cli_wait_exit(cli_spawn(args, out, err), CLI_RUN_TIMEOUT_MS);
    cli_read_into(out, r->out, sizeof(r->out));
    cli_read_into(err, r->err, sizeof(r->err));
}

/* Exit status 1, nothing on stdout and exactly `line` on stderr. */
void cli_check_fails(const struct cli_result *r, const char *line)
{
    ck_assert_msg(r->status == 1, "exit status %d, stderr:\n%s", r->status,
                  r->err);
    ck_assert_str_eq(r->out, "");
    ck_assert_str_eq(r->err, line);
}

/* How many times s occurs in the daemon's log. */
int cli_log_count(const char *s)
{
    static char text[256 * 1024];
    int n = 0;
    cli_read_into(cli_path("daemon.log"), text, sizeof(text));
    for (const char *p = text; (p = strstr(p, s)) != NULL; p += strlen(s))
        n++;
    return n;
}

/* Waits up to 5 s for the log to hold s at least `times` times. */
void cli_wait_log(const char *s, int times)
{
    double end = cli_now_s() + 5.0;
    while (cli_log_count(s) < times && cli_now_s() < end)
        cli_sleep_ms(10);
    if (cli_log_count(s) < times) {
        static char text[256 * 1024];
        ck_abort_msg("no %d x \"%s\" in the log:\n%s", times, s,
                     cli_read_into(cli_path("daemon.log"), text, sizeof(text)));
    }
}

/* Starts preduced with args, logging to cli_dir/daemon.log; waits until ready.
 */
void cli_daemon_start(const char *const *args)
{
    const char *log = cli_path("daemon.log");
    cli_daemon_pid = cli_spawn(args, log, log);
    ck_assert_int_gt(cli_daemon_pid, 0);
    /* The scheduler logs this after its signal handlers are in place. */
    cli_wait_log("listening on", 1);
}

/* SIGTERM: the daemon must exit 0 (it would not after dying of SIGHUP). */
void cli_daemon_stop(void)
{
    ck_assert_int_eq(kill(cli_daemon_pid, SIGTERM), 0);
    int st = cli_wait_exit(cli_daemon_pid, 5000);
    cli_daemon_pid = 0;
    ck_assert_msg(st == 0, "daemon exit status %d", st);
}
