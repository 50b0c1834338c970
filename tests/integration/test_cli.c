/*
 * preduced's command line and SIGHUP reload (daemon/main.c), run on the
 * real binary: -t and -T on good and broken files and --set overrides, -h,
 * -V, bad options and arguments, the default config path, and reloads of a
 * running scheduler (a changed reloadable key that /metrics shows, a key
 * that needs a restart, the log level, broken files that are refused while
 * the daemon keeps serving, --set overrides that outlive a reload, and a
 * daemon without a file). Each test works in its own mkdtemp directory,
 * removed at the end; every wait has a deadline.
 */
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

#include "proto/frame.h"
#include "tests/integration/harness.h"

/* The path daemon/main.c falls back to without -c. */
#define DEFAULT_CONF   "/etc/preduce/preduced.conf"
#define RUN_TIMEOUT_MS 5000
#define OUT_MAX        (64 * 1024)
#define MAX_ARGV       160

/*
 * The tcase's directory (made and removed by the runner's process, so it
 * goes even after a failed test) and, inside it, the test's own directory
 * and the daemon the test started.
 */
static char top[64];
static char dir[96];
static pid_t daemon_pid;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static const char *preduced_path(void)
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

static void remove_tree(const char *path)
{
    nftw(path, remove_cb, 8, FTW_DEPTH | FTW_PHYS);
}

/* Unchecked fixture, in the runner's process. */
static void top_setup(void)
{
    snprintf(top, sizeof(top), "/tmp/preduce-cli-XXXXXX");
    if (!mkdtemp(top)) {
        perror("mkdtemp");
        exit(EXIT_FAILURE);
    }
}

static void top_teardown(void)
{
    remove_tree(top);
}

/*
 * Checked fixture, in the test's process. A failed assertion _exit()s
 * that process without the teardown: then the daemon dies with it
 * (PR_SET_PDEATHSIG) and top_teardown() removes the directory.
 */
static void setup(void)
{
    snprintf(dir, sizeof(dir), "%s/XXXXXX", top);
    ck_assert_ptr_nonnull(mkdtemp(dir));
}

static void teardown(void)
{
    if (daemon_pid > 0) {
        kill(daemon_pid, SIGKILL);
        waitpid(daemon_pid, NULL, 0);
        daemon_pid = 0;
    }
    remove_tree(dir);
}

/*
 * dir/name. The buffer is the name's own for the whole test, so paths
 * taken earlier stay valid.
 */
static const char *path_of(const char *name)
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
    snprintf(tab[used].path, sizeof(tab[used].path), "%s/%s", dir, name);
    return tab[used++].path;
}

/* Writes dir/name atomically (a new file, then rename); returns its path. */
static const char *write_file(const char *name, const char *text)
{
    char tmp[320];
    const char *path = path_of(name);
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    ck_assert_ptr_nonnull(f);
    ck_assert_int_eq(fputs(text, f) >= 0, 1);
    ck_assert_int_eq(fclose(f), 0);
    ck_assert_int_eq(rename(tmp, path), 0);
    return path;
}

/* The whole of a file, NUL-terminated, in buf ("" if absent). */
static char *read_into(const char *path, char *buf, size_t cap)
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
static pid_t spawn(const char *const *args, const char *out, const char *err)
{
    const char *argv[MAX_ARGV];
    int n = 0;
    argv[n++] = preduced_path();
    for (; *args && n < MAX_ARGV - 1; args++)
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
static int wait_exit(pid_t pid, int timeout_ms)
{
    double end = now_s() + timeout_ms / 1000.0;
    int st;
    for (;;) {
        pid_t r = waitpid(pid, &st, WNOHANG);
        if (r == pid)
            break;
        if (r < 0)
            return -2000;
        if (now_s() > end) {
            kill(pid, SIGKILL);
            waitpid(pid, &st, 0);
            return -1000;
        }
        sleep_ms(5);
    }
    return WIFEXITED(st) ? WEXITSTATUS(st) : -WTERMSIG(st);
}

struct result {
    int status;
    char out[OUT_MAX];
    char err[OUT_MAX];
};

/* Runs preduced to completion with the arguments (NULL-terminated). */
static void run(struct result *r, ...)
{
    const char *args[MAX_ARGV];
    int n = 0;
    va_list ap;
    va_start(ap, r);
    while (n < MAX_ARGV - 1 && (args[n] = va_arg(ap, const char *)) != NULL)
        n++;
    va_end(ap);
    args[n] = NULL;
    const char *out = path_of("run.out"), *err = path_of("run.err");
    r->status = wait_exit(spawn(args, out, err), RUN_TIMEOUT_MS);
    read_into(out, r->out, sizeof(r->out));
    read_into(err, r->err, sizeof(r->err));
}

#define ck_assert_has(hay, needle)                                             \
    ck_assert_msg(strstr((hay), (needle)) != NULL, "expected \"%s\" in:\n%s",  \
                  (needle), (hay))

/* Exit status 1, nothing on stdout and exactly `line` on stderr. */
static void check_fails(const struct result *r, const char *line)
{
    ck_assert_msg(r->status == 1, "exit status %d, stderr:\n%s", r->status,
                  r->err);
    ck_assert_str_eq(r->out, "");
    ck_assert_str_eq(r->err, line);
}

/* ---- -t: test a configuration ---- */

START_TEST(test_cli_test_good_file)
{
    const char *conf = write_file("good.conf", "# a comment\n"
                                               "role = scheduler\n"
                                               "[scheduler]\n"
                                               "policy = constant\n"
                                               "group_size = 3\n"
                                               "[log]\n"
                                               "level = debug\n");
    char want[400];
    snprintf(want, sizeof(want),
             "preduced: configuration %s test is successful\n", conf);
    struct result r;
    run(&r, "-t", "-c", conf, NULL);
    ck_assert_msg(r.status == 0, "exit %d: %s", r.status, r.err);
    ck_assert_str_eq(r.out, want);
    ck_assert_str_eq(r.err, "");

    /* The long forms, and --set and --role on top of the file. */
    run(&r, "--test", "--config", conf, "--set", "scheduler.group_size=4",
        "--role", "node", NULL);
    ck_assert_msg(r.status == 0, "exit %d: %s", r.status, r.err);
    ck_assert_str_eq(r.out, want);
}
END_TEST

/* A config file and the stderr line `-t` must fail with after its name. */
struct bad_file {
    const char *text, *want;
};

static void check_bad_files(const struct bad_file *cases, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        const char *conf = write_file("bad.conf", cases[i].text);
        char want[400];
        snprintf(want, sizeof(want), "preduced: %s%s", conf, cases[i].want);
        struct result r;
        run(&r, "-t", "-c", conf, NULL);
        check_fails(&r, want);
    }
}

START_TEST(test_cli_test_syntax_error)
{
    static const struct bad_file cases[] = {
        {"role = scheduler\n[scheduler]\npolicy constant\ngroup_size = 3\n",
         ":3: expected 'name = value' or '[section]'\n"},
        {"[scheduler]\npolicy = constant\n  group_size = 3\n",
         ":3: scheduler.policy: indented line (continuation lines are not "
         "supported)\n"},
    };
    check_bad_files(cases, sizeof(cases) / sizeof(cases[0]));
}
END_TEST

START_TEST(test_cli_test_unknown_key)
{
    static const struct bad_file cases[] = {
        {"[scheduler]\npolicy = dynamic\n\nwindw_ms = 3\n",
         ":4: scheduler.windw_ms: unknown key\n"},
        /* A key of another section gets a hint. */
        {"[node]\npolicy = dynamic\n",
         ":2: node.policy: unknown key (did you mean scheduler.policy?)\n"},
        {"[schedular]\npolicy = dynamic\n",
         ":2: schedular.policy: unknown section [schedular]\n"},
        {"[scheduler]\ngroup_size = 3\ngroup_size = 4\n",
         ":3: scheduler.group_size: already set on line 2\n"},
    };
    check_bad_files(cases, sizeof(cases) / sizeof(cases[0]));
}
END_TEST

START_TEST(test_cli_test_bad_value)
{
    static const struct bad_file cases[] = {
        {"[scheduler]\ngroup_size = 0\n",
         ":2: scheduler.group_size: 0 is out of range 1..65536\n"},
        {"[scheduler]\ngroup_size = 3x\n",
         ":2: scheduler.group_size: junk after the number in '3x'\n"},
        {"[scheduler]\npolicy = fastest\n",
         ":2: scheduler.policy: 'fastest' is not one of: allreduce, "
         "constant, dynamic\n"},
        {"role = worker\n",
         ":1: role: 'worker' is not one of: node, scheduler\n"},
        {"[scheduler]\nwindow_ms = inf\n",
         ":2: scheduler.window_ms: 'inf' is not a decimal number\n"},
        {"[node]\nscheduler = localhost\n",
         ": node.scheduler: 'localhost' is not host:port, port 1..65535\n"},
        /* A rule relating two keys: no line, but the file and the key. */
        {"[scheduler]\ngroup_min = 5\ngroup_max = 3\n",
         ": scheduler.group_min: group_min 5 is above group_max 3\n"},
    };
    check_bad_files(cases, sizeof(cases) / sizeof(cases[0]));
}
END_TEST

START_TEST(test_cli_test_missing_file)
{
    const char *conf = path_of("absent.conf");
    char want[700];
    snprintf(want, sizeof(want),
             "preduced: %s: fopen(%s): No such file or directory\n", conf,
             conf);
    struct result r;
    run(&r, "-t", "-c", conf, NULL);
    check_fails(&r, want);
    /* Running (not -t) stops at the same check, before any socket. */
    run(&r, "-c", conf, NULL);
    check_fails(&r, want);
}
END_TEST

START_TEST(test_cli_test_bad_set)
{
    struct result r;
    run(&r, "-t", "--set", "scheduler.nope=1", NULL);
    check_fails(&r, "preduced: --set: scheduler.nope: unknown key\n");
    run(&r, "-t", "-s", "scheduler.group_size=x", NULL);
    check_fails(
        &r,
        "preduced: --set: scheduler.group_size: 'x' is not a whole number\n");
    run(&r, "-t", "--set", "scheduler.group_size", NULL);
    check_fails(&r, "preduced: --set: scheduler.group_size: expected "
                    "section.name=value\n");
    run(&r, "-t", "--role", "bogus", NULL);
    check_fails(&r, "preduced: --role: role: 'bogus' is not one of: node, "
                    "scheduler\n");

    /* A --set breaks a rule with the file's value: both are named. */
    const char *conf = write_file("rule.conf", "[scheduler]\n"
                                               "group_max = 3\n");
    char want[400];
    snprintf(want, sizeof(want),
             "preduced: %s and --set: scheduler.group_min: group_min 5 is "
             "above group_max 3\n",
             conf);
    run(&r, "-t", "-c", conf, "--set", "scheduler.group_min=5", NULL);
    check_fails(&r, want);

    /* A --set fixes the file: the file alone fails, the two pass. */
    conf = write_file("fixed.conf", "[scheduler]\n"
                                    "group_min = 5\n"
                                    "group_max = 3\n");
    run(&r, "-t", "-c", conf, NULL);
    ck_assert_int_eq(r.status, 1);
    run(&r, "-t", "-c", conf, "--set", "scheduler.group_max=0", NULL);
    ck_assert_msg(r.status == 0, "exit %d: %s", r.status, r.err);
}
END_TEST

START_TEST(test_cli_test_bad_key_file)
{
    const char *key = path_of("no.key");
    char set[400], want[700];
    snprintf(set, sizeof(set), "security.key_file=%s", key);
    snprintf(want, sizeof(want),
             "preduced: security.key_file: %s: cannot open the key file (No "
             "such file or directory)\n",
             key);
    struct result r;
    run(&r, "-t", "--set", set, NULL);
    check_fails(&r, want);
}
END_TEST

/* ---- -T: dump the effective configuration ---- */

START_TEST(test_cli_dump)
{
    const char *conf = write_file("dump.conf", "role = scheduler\n"
                                               "[scheduler]\n"
                                               "policy = constant\n"
                                               "group_size = 3\n");
    struct result r;
    run(&r, "-T", "-c", conf, "--set", "scheduler.policy=dynamic", "--set",
        "metrics.listen=127.0.0.1:9188", NULL);
    ck_assert_msg(r.status == 0, "exit %d: %s", r.status, r.err);
    ck_assert_str_eq(r.err, "");
    /* The file's keys, --set over the file, and defaults for the rest. */
    ck_assert_has(r.out, "; node or scheduler\nrole = scheduler\n");
    ck_assert_has(r.out, "\ngroup_size = 3\n");
    ck_assert_has(r.out, "; allreduce, constant or dynamic (reloadable)\n"
                         "policy = dynamic\n");
    ck_assert_has(r.out, "\nheartbeat_ms = 1000\n");
    const char *metrics = strstr(r.out, "\n[metrics]\n");
    ck_assert_ptr_nonnull(metrics);
    ck_assert_has(metrics, "\nlisten = 127.0.0.1:9188\n");

    /* The dump is a config file that reads back to the same dump. */
    char first[OUT_MAX];
    snprintf(first, sizeof(first), "%s", r.out);
    const char *again = write_file("again.conf", first);
    run(&r, "-T", "-c", again, NULL);
    ck_assert_msg(r.status == 0, "exit %d: %s", r.status, r.err);
    ck_assert_str_eq(r.out, first);

    /* A broken configuration dumps nothing. */
    run(&r, "-T", "--set", "scheduler.group_size=0", NULL);
    check_fails(&r, "preduced: --set: scheduler.group_size: 0 is out of "
                    "range 1..65536\n");
}
END_TEST

/* ---- -h, -V, bad options ---- */

START_TEST(test_cli_help_version)
{
    struct result r;
    run(&r, "-h", NULL);
    ck_assert_int_eq(r.status, 0);
    ck_assert_str_eq(r.err, "");
    ck_assert_msg(strncmp(r.out, "usage: preduced [-c FILE]", 25) == 0, "%s",
                  r.out);
    ck_assert_has(
        r.out, "  -c, --config FILE  configuration file (default " DEFAULT_CONF
               " if it exists)\n");
    ck_assert_has(r.out, "  -V, --version      the version\n");
    struct result r2;
    run(&r2, "--help", NULL);
    ck_assert_int_eq(r2.status, 0);
    ck_assert_str_eq(r2.out, r.out);

    run(&r, "-V", NULL);
    ck_assert_int_eq(r.status, 0);
    ck_assert_str_eq(r.err, "");
    /* "preduced VERSION (protocol N)", N the protocol this tree speaks. */
    char version[32] = "", want[100];
    ck_assert_msg(sscanf(r.out, "preduced %31s (protocol", version) == 1,
                  "version line: %s", r.out);
    snprintf(want, sizeof(want), "preduced %s (protocol %d)\n", version,
             PR_PROTO_VERSION);
    ck_assert_str_eq(r.out, want);
    run(&r2, "--version", NULL);
    ck_assert_int_eq(r2.status, 0);
    ck_assert_str_eq(r2.out, r.out);
}
END_TEST

/* Exit 2, nothing on stdout, `first` then the usage on stderr. */
static void check_usage_error(const struct result *r, const char *first)
{
    ck_assert_msg(r->status == 2, "exit %d: %s", r->status, r->err);
    ck_assert_str_eq(r->out, "");
    ck_assert_has(r->err, first);
    ck_assert_has(r->err, "usage: preduced [-c FILE]");
    ck_assert_has(r->err, "  -V, --version      the version\n");
}

START_TEST(test_cli_bad_options)
{
    struct result r;
    run(&r, "--bogus", NULL);
    check_usage_error(&r, "unrecognized option '--bogus'\n");
    run(&r, "-x", NULL);
    check_usage_error(&r, "invalid option -- 'x'\n");
    run(&r, "-t", "-c", NULL);
    check_usage_error(&r, "option requires an argument -- 'c'\n");
    run(&r, "-t", "--set", NULL);
    check_usage_error(&r, "option '--set' requires an argument\n");

    run(&r, "-t", "extra.conf", NULL);
    check_usage_error(&r, "preduced: unexpected argument 'extra.conf'\n");
    ck_assert_msg(strncmp(r.err, "preduced: unexpected", 20) == 0, "%s", r.err);
}
END_TEST

START_TEST(test_cli_too_many_sets)
{
    /* 64 --set are fine; one more --set or --role is refused. */
    const char *args[MAX_ARGV];
    int n = 0;
    args[n++] = "-T";
    for (int i = 0; i < 64; i++) {
        args[n++] = "--set";
        args[n++] = i == 63 ? "job=last" : "job=x";
    }
    args[n] = NULL;
    const char *out = path_of("run.out"), *err = path_of("run.err");
    char o[OUT_MAX], e[OUT_MAX];
    ck_assert_int_eq(wait_exit(spawn(args, out, err), RUN_TIMEOUT_MS), 0);
    ck_assert_has(read_into(out, o, sizeof(o)), "\njob = last\n");

    const char *extra[][2] = {{"--set", "job=y"}, {"--role", "scheduler"}};
    for (int k = 0; k < 2; k++) {
        args[n] = extra[k][0];
        args[n + 1] = extra[k][1];
        args[n + 2] = NULL;
        ck_assert_int_eq(wait_exit(spawn(args, out, err), RUN_TIMEOUT_MS), 2);
        ck_assert_str_eq(read_into(out, o, sizeof(o)), "");
        ck_assert_str_eq(read_into(err, e, sizeof(e)),
                         "preduced: more than 64 --set and --role options\n");
    }
}
END_TEST

/* ---- The default configuration file ---- */

START_TEST(test_cli_default_path)
{
    struct result r;
    run(&r, "-t", NULL);
    if (access(DEFAULT_CONF, R_OK) == 0) {
        /* Installed here: -t checks it, and says so either way. */
        char want[200];
        snprintf(want, sizeof(want), "preduced: %s", DEFAULT_CONF);
        if (r.status == 0)
            ck_assert_str_eq(r.out, "preduced: configuration " DEFAULT_CONF
                                    " test is successful\n");
        else
            ck_assert_msg(strncmp(r.err, want, strlen(want)) == 0, "%s", r.err);
        return;
    }
    ck_assert_msg(r.status == 0, "exit %d: %s", r.status, r.err);
    ck_assert_str_eq(r.out,
                     "preduced: configuration (defaults) test is successful\n");
    ck_assert_str_eq(r.err, "");
    /* --set alone: the defaults are not all that was tested. */
    run(&r, "-t", "--set", "scheduler.group_size=3", NULL);
    ck_assert_msg(r.status == 0, "exit %d: %s", r.status, r.err);
    ck_assert_str_eq(r.out, "preduced: configuration (defaults and --set) "
                            "test is successful\n");
    /* --role alone is not a --set. */
    run(&r, "-t", "--role", "scheduler", NULL);
    ck_assert_msg(r.status == 0, "exit %d: %s", r.status, r.err);
    ck_assert_str_eq(r.out,
                     "preduced: configuration (defaults) test is successful\n");
}
END_TEST

/* ---- SIGHUP ---- */

/* How many times s occurs in the daemon's log. */
static int log_count(const char *s)
{
    static char text[256 * 1024];
    int n = 0;
    read_into(path_of("daemon.log"), text, sizeof(text));
    for (const char *p = text; (p = strstr(p, s)) != NULL; p += strlen(s))
        n++;
    return n;
}

/* Waits up to 5 s for the log to hold s at least `times` times. */
static void wait_log(const char *s, int times)
{
    double end = now_s() + 5.0;
    while (log_count(s) < times && now_s() < end)
        sleep_ms(10);
    if (log_count(s) < times) {
        static char text[256 * 1024];
        ck_abort_msg("no %d x \"%s\" in the log:\n%s", times, s,
                     read_into(path_of("daemon.log"), text, sizeof(text)));
    }
}

/* Starts preduced with args, logging to dir/daemon.log; waits until ready. */
static void daemon_start(const char *const *args)
{
    const char *log = path_of("daemon.log");
    daemon_pid = spawn(args, log, log);
    ck_assert_int_gt(daemon_pid, 0);
    /* The scheduler logs this after its signal handlers are in place. */
    wait_log("listening on", 1);
}

/* SIGTERM: the daemon must exit 0 (it would not after dying of SIGHUP). */
static void daemon_stop(void)
{
    ck_assert_int_eq(kill(daemon_pid, SIGTERM), 0);
    int st = wait_exit(daemon_pid, 5000);
    daemon_pid = 0;
    ck_assert_msg(st == 0, "daemon exit status %d", st);
}

/* The dynamic policy's window from /metrics, in ms. */
static double window_ms(uint16_t port)
{
    char *m = h_metrics_fetch(port);
    ck_assert_ptr_nonnull(m);
    double w = h_metric(m, "preduce_sched_window_seconds ") * 1000;
    free(m);
    return w;
}

/* A scheduler config with a dynamic window and metrics on port. */
static const char *sched_conf(uint16_t port, const char *window,
                              const char *extra)
{
    char text[1024];
    snprintf(text, sizeof(text),
             "role = scheduler\n"
             "[scheduler]\n"
             "listen = 127.0.0.1:0\n"
             "policy = dynamic\n"
             "window_ms = %s\n"
             "%s"
             "[metrics]\n"
             "listen = 127.0.0.1:%u\n",
             window, extra, port);
    return write_file("sched.conf", text);
}

START_TEST(test_cli_reload)
{
    uint16_t port = h_free_port();
    const char *conf = sched_conf(port, "5", "");
    const char *args[] = {"-c", conf, NULL};
    daemon_start(args);
    ck_assert_double_eq_tol(window_ms(port), 5, 1e-6);

    char reloaded[400], refused[400], want[700];
    snprintf(reloaded, sizeof(reloaded), "reloaded %s: ", conf);
    snprintf(refused, sizeof(refused),
             "reload of %s refused, old configuration kept: ", conf);

    /* A reloadable key takes effect; one that needs a restart does not. */
    sched_conf(port, "7", "heartbeat_ms = 1500\n");
    ck_assert_int_eq(kill(daemon_pid, SIGHUP), 0);
    snprintf(want, sizeof(want), "reloaded %s: 1 key changed\n", conf);
    wait_log(want, 1);
    ck_assert_int_eq(log_count("conf: scheduler.window_ms: 5 -> 7\n"), 1);
    ck_assert_int_eq(
        log_count("conf: scheduler.heartbeat_ms: 1000 -> 1500 needs a "
                  "restart\n"),
        1);
    ck_assert_double_eq_tol(window_ms(port), 7, 1e-6);

    /*
     * log.level = warn: the change is logged at the old level, then the
     * "reloaded" line (info) is not. The next reload's error line shows
     * that this one was done by then.
     */
    sched_conf(port, "7", "heartbeat_ms = 1500\n[log]\nlevel = warn\n");
    ck_assert_int_eq(kill(daemon_pid, SIGHUP), 0);
    wait_log("conf: log.level: info -> warn\n", 1);

    /* Broken files: refused with the reason; the old values stay. */
    write_file("sched.conf", "role = scheduler\n"
                             "[scheduler]\n"
                             "policy = dynamic\n"
                             "window_ms 9\n");
    ck_assert_int_eq(kill(daemon_pid, SIGHUP), 0);
    snprintf(want, sizeof(want),
             "%sline 4: expected 'name = value' or '[section]'\n", refused);
    wait_log(want, 1);
    ck_assert_int_eq(log_count(reloaded), 1);

    sched_conf(port, "20", "[log]\nlevel = warn\n");
    ck_assert_int_eq(kill(daemon_pid, SIGHUP), 0);
    snprintf(want, sizeof(want),
             "%sscheduler.window_ms: window_ms 20 is above window_max_ms "
             "10\n",
             refused);
    wait_log(want, 1);

    ck_assert_int_eq(unlink(conf), 0);
    ck_assert_int_eq(kill(daemon_pid, SIGHUP), 0);
    snprintf(want, sizeof(want), "%sfopen(%s): No such file or directory\n",
             refused, conf);
    wait_log(want, 1);

    /* Still running, still serving, still at the last good values. */
    ck_assert_int_eq(waitpid(daemon_pid, NULL, WNOHANG), 0);
    ck_assert_double_eq_tol(window_ms(port), 7, 1e-6);

    /* Back to info: this reload's own line shows again. */
    sched_conf(port, "7", "heartbeat_ms = 1500\n[log]\nlevel = info\n");
    ck_assert_int_eq(kill(daemon_pid, SIGHUP), 0);
    snprintf(want, sizeof(want), "reloaded %s: 1 key changed\n", conf);
    wait_log(want, 2);
    ck_assert_int_eq(log_count(reloaded), 2);
    daemon_stop();
}
END_TEST

START_TEST(test_cli_reload_keeps_set)
{
    /* A --set still beats the file after a reload. */
    uint16_t port = h_free_port();
    const char *conf = sched_conf(port, "5", "");
    const char *args[] = {"-c", conf, "--set", "scheduler.window_ms=3", NULL};
    daemon_start(args);
    ck_assert_double_eq_tol(window_ms(port), 3, 1e-6);

    sched_conf(port, "7", "group_size = 4\n");
    ck_assert_int_eq(kill(daemon_pid, SIGHUP), 0);
    char want[400];
    snprintf(want, sizeof(want), "reloaded %s: 1 key changed\n", conf);
    wait_log(want, 1);
    ck_assert_int_eq(log_count("conf: scheduler.group_size: 2 -> 4\n"), 1);
    ck_assert_int_eq(log_count("scheduler.window_ms"), 0);
    ck_assert_double_eq_tol(window_ms(port), 3, 1e-6);
    daemon_stop();
}
END_TEST

START_TEST(test_cli_reload_without_file)
{
    if (access(DEFAULT_CONF, R_OK) == 0) {
        fprintf(stderr,
                "test_cli_reload_without_file: skipped, %s exists "
                "(preduced would reload it)\n",
                DEFAULT_CONF);
        return;
    }
    uint16_t port = h_free_port();
    char metrics[64];
    snprintf(metrics, sizeof(metrics), "metrics.listen=127.0.0.1:%u", port);
    const char *args[] = {"--role", "scheduler",
                          "--set",  "scheduler.listen=127.0.0.1:0",
                          "--set",  "scheduler.policy=dynamic",
                          "--set",  metrics,
                          NULL};
    daemon_start(args);
    ck_assert_int_eq(kill(daemon_pid, SIGHUP), 0);
    wait_log("SIGHUP: no configuration file to reload\n", 1);
    ck_assert_int_eq(log_count("reloaded"), 0);
    ck_assert_double_eq_tol(window_ms(port), 5, 1e-6);
    daemon_stop();
}
END_TEST

int main(void)
{
    Suite *s = suite_create("cli");
    TCase *tc = tcase_create("options");
    tcase_add_unchecked_fixture(tc, top_setup, top_teardown);
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, test_cli_test_good_file);
    tcase_add_test(tc, test_cli_test_syntax_error);
    tcase_add_test(tc, test_cli_test_unknown_key);
    tcase_add_test(tc, test_cli_test_bad_value);
    tcase_add_test(tc, test_cli_test_missing_file);
    tcase_add_test(tc, test_cli_test_bad_set);
    tcase_add_test(tc, test_cli_test_bad_key_file);
    tcase_add_test(tc, test_cli_dump);
    tcase_add_test(tc, test_cli_help_version);
    tcase_add_test(tc, test_cli_bad_options);
    tcase_add_test(tc, test_cli_too_many_sets);
    tcase_add_test(tc, test_cli_default_path);
    suite_add_tcase(s, tc);
    TCase *hup = tcase_create("sighup");
    tcase_add_unchecked_fixture(hup, top_setup, top_teardown);
    tcase_add_checked_fixture(hup, setup, teardown);
    tcase_set_timeout(hup, 30);
    tcase_add_test(hup, test_cli_reload);
    tcase_add_test(hup, test_cli_reload_keeps_set);
    tcase_add_test(hup, test_cli_reload_without_file);
    suite_add_tcase(s, hup);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
