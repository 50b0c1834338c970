/* SPDX-License-Identifier: MIT */
/*
 * preduced's command line and SIGHUP reload (daemon/main.c), run on the
 * real binary: -t and -T on good and broken files and --set overrides,
 * security.encrypt's rules, --gen-key, -h, -V, bad options and arguments,
 * the default config path, and reloads of a running scheduler (a changed
 * reloadable key that /metrics shows, a key that needs a restart, the log
 * level, broken files that are refused while the daemon keeps serving, --set
 * overrides that outlive a reload, and a daemon without a file). Each test
 * works in its own mkdtemp directory, removed at the end; every wait has a
 * deadline.
 */
#include <check.h>
#include <fcntl.h>
#include <ftw.h>
#include <grp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "proto/frame.h"
#include "tests/integration/cli_fixture.h"
#include "tests/integration/harness.h"
#include "tests/check_run.h"

/* The path daemon/main.c falls back to without -c. */
#define DEFAULT_CONF "/etc/preduce/preduced.conf"

/* ---- -t: test a configuration ---- */

START_TEST(test_cli_test_good_file)
{
    const char *conf = cli_write_file("good.conf", "# a comment\n"
                                                   "role = scheduler\n"
                                                   "[scheduler]\n"
                                                   "policy = constant\n"
                                                   "group_size = 3\n"
                                                   "[log]\n"
                                                   "level = debug\n");
    char want[400];
    snprintf(want, sizeof(want),
             "preduced: configuration %s test is successful\n", conf);
    struct cli_result r;
    cli_run(&r, "-t", "-c", conf, NULL);
    ck_assert_msg(r.status == 0, "exit %d: %s", r.status, r.err);
    ck_assert_str_eq(r.out, want);
    ck_assert_str_eq(r.err, "");

    /* The long forms, and --set and --role on top of the file. */
    cli_run(&r, "--test", "--config", conf, "--set", "scheduler.group_size=4",
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
        const char *conf = cli_write_file("bad.conf", cases[i].text);
        char want[400];
        snprintf(want, sizeof(want), "preduced: %s%s", conf, cases[i].want);
        struct cli_result r;
        cli_run(&r, "-t", "-c", conf, NULL);
        cli_check_fails(&r, want);
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
         ": node.scheduler: 'localhost' is not a list of host:port, "
         "port 1..65535\n"},
        /* A rule relating two keys: no line, but the file and the key. */
        {"[scheduler]\ngroup_min = 5\ngroup_max = 3\n",
         ": scheduler.group_min: group_min 5 is above group_max 3\n"},
    };
    check_bad_files(cases, sizeof(cases) / sizeof(cases[0]));
}
END_TEST

START_TEST(test_cli_test_missing_file)
{
    const char *conf = cli_path("absent.conf");
    char want[700];
    snprintf(want, sizeof(want),
             "preduced: %s: fopen(%s): No such file or directory\n", conf,
             conf);
    struct cli_result r;
    cli_run(&r, "-t", "-c", conf, NULL);
    cli_check_fails(&r, want);
    /* Running (not -t) stops at the same check, before any socket. */
    cli_run(&r, "-c", conf, NULL);
    cli_check_fails(&r, want);
}
END_TEST

START_TEST(test_cli_test_bad_set)
{
    struct cli_result r;
    cli_run(&r, "-t", "--set", "scheduler.nope=1", NULL);
    cli_check_fails(&r, "preduced: --set: scheduler.nope: unknown key\n");
    cli_run(&r, "-t", "-s", "scheduler.group_size=x", NULL);
    cli_check_fails(
        &r,
        "preduced: --set: scheduler.group_size: 'x' is not a whole number\n");
    cli_run(&r, "-t", "--set", "scheduler.group_size", NULL);
    cli_check_fails(&r, "preduced: --set: scheduler.group_size: expected "
                        "section.name=value\n");
    cli_run(&r, "-t", "--role", "bogus", NULL);
    cli_check_fails(&r, "preduced: --role: role: 'bogus' is not one of: node, "
                        "scheduler\n");

    /* A --set breaks a rule with the file's value: both are named. */
    const char *conf = cli_write_file("rule.conf", "[scheduler]\n"
                                                   "group_max = 3\n");
    char want[400];
    snprintf(want, sizeof(want),
             "preduced: %s and --set: scheduler.group_min: group_min 5 is "
             "above group_max 3\n",
             conf);
    cli_run(&r, "-t", "-c", conf, "--set", "scheduler.group_min=5", NULL);
    cli_check_fails(&r, want);

    /* A --set fixes the file: the file alone fails, the two pass. */
    conf = cli_write_file("fixed.conf", "[scheduler]\n"
                                        "group_min = 5\n"
                                        "group_max = 3\n");
    cli_run(&r, "-t", "-c", conf, NULL);
    ck_assert_int_eq(r.status, 1);
    cli_run(&r, "-t", "-c", conf, "--set", "scheduler.group_max=0", NULL);
    ck_assert_msg(r.status == 0, "exit %d: %s", r.status, r.err);
}
END_TEST

START_TEST(test_cli_test_bad_key_file)
{
    const char *key = cli_path("no.key");
    char set[400], want[700];
    snprintf(set, sizeof(set), "security.key_file=%s", key);
    snprintf(want, sizeof(want),
             "preduced: security.key_file: %s: cannot open the key file (No "
             "such file or directory)\n",
             key);
    struct cli_result r;
    cli_run(&r, "-t", "--set", set, NULL);
    cli_check_fails(&r, want);
}
END_TEST

/* ---- security.encrypt and --gen-key ---- */

#define TEST_OK                                                                \
    "preduced: configuration (defaults and --set) test is successful\n"

/* -t failed on `key`: exit 1, nothing on stdout, a line naming it. */
static void check_fails_naming(const struct cli_result *r, const char *key)
{
    char want[128];
    snprintf(want, sizeof(want), "preduced: --set: %s: ", key);
    ck_assert_msg(r->status == 1, "exit status %d, stderr:\n%s", r->status,
                  r->err);
    ck_assert_str_eq(r->out, "");
    ck_assert_msg(!strncmp(r->err, want, strlen(want)) &&
                      strchr(r->err, '\n') == r->err + strlen(r->err) - 1,
                  "expected one line \"%s...\", got:\n%s", want, r->err);
}

/* A new key at cli_dir/name by --gen-key; its "security.key_file=" set. */
static const char *gen_key(const char *name, char *set, size_t len)
{
    const char *path = cli_path(name);
    struct cli_result r;
    cli_run(&r, "--gen-key", path, NULL);
    ck_assert_msg(r.status == 0, "exit %d: %s", r.status, r.err);
    ck_assert_str_eq(r.err, "");
    ck_assert_has(r.out, path);
    snprintf(set, len, "security.key_file=%s", path);
    return path;
}

START_TEST(test_cli_gen_key)
{
    char set[400], set2[400], text[128], again[128];
    const char *key = gen_key("cluster.key", set, sizeof(set));
    struct stat st;
    ck_assert_int_eq(stat(key, &st), 0);
    ck_assert(S_ISREG(st.st_mode));
    ck_assert_int_eq(st.st_size, 65);
    ck_assert_int_eq(st.st_mode & 07777, 0600);
    /* 32 random bytes in hex and a newline, which a daemon accepts. */
    cli_read_into(key, text, sizeof(text));
    ck_assert_uint_eq(strspn(text, "0123456789abcdef"), 64);
    ck_assert_str_eq(text + 64, "\n");
    struct cli_result r;
    cli_run(&r, "-t", "--set", set, NULL);
    ck_assert_msg(r.status == 0, "exit %d: %s", r.status, r.err);
    ck_assert_str_eq(r.out, TEST_OK);
    /* Another key is another key. */
    const char *other = gen_key("other.key", set2, sizeof(set2));
    ck_assert_str_ne(cli_read_into(other, again, sizeof(again)), text);

    /* An existing file is never replaced: the daemons that have it stay. */
    cli_run(&r, "--gen-key", key, NULL);
    ck_assert_msg(r.status == 2, "exit %d: %s", r.status, r.err);
    ck_assert_str_eq(r.out, "");
    ck_assert_has(r.err, key);
    ck_assert_has(r.err, "exists");
    ck_assert_str_eq(cli_read_into(key, again, sizeof(again)), text);
    ck_assert_int_eq(stat(key, &st), 0);
    ck_assert_int_eq(st.st_mode & 07777, 0600);
}
END_TEST

START_TEST(test_cli_encrypt_rules)
{
    struct cli_result r;
    char set[400];
    /* on needs the key that the links' keys come from. */
    cli_run(&r, "-t", "--set", "security.encrypt=on", NULL);
    check_fails_naming(&r, "security.encrypt");
    gen_key("cluster.key", set, sizeof(set));
    cli_run(&r, "-t", "--set", "security.encrypt=on", "--set", set, NULL);
    ck_assert_msg(r.status == 0, "exit %d: %s", r.status, r.err);
    ck_assert_str_eq(r.out, TEST_OK);

    /*
     * RDMA would carry tensors in clear: refused while sealing is on,
     * which a key makes it by default.
     */
    cli_run(&r, "-t", "--set", "transport.type=rdma", "--set", set, NULL);
    check_fails_naming(&r, "transport.type");
    cli_run(&r, "-t", "--set", "transport.type=rdma", "--set", set, "--set",
            "security.encrypt=on", NULL);
    check_fails_naming(&r, "transport.type");
    cli_run(&r, "-t", "--set", "transport.type=rdma", "--set", set, "--set",
            "security.encrypt=off", NULL);
    ck_assert_msg(r.status == 0, "exit %d: %s", r.status, r.err);
    ck_assert_str_eq(r.out, TEST_OK);
}
END_TEST

/* ---- -T: dump the effective configuration ---- */

START_TEST(test_cli_dump)
{
    const char *conf = cli_write_file("dump.conf", "role = scheduler\n"
                                                   "[scheduler]\n"
                                                   "policy = constant\n"
                                                   "group_size = 3\n");
    struct cli_result r;
    cli_run(&r, "-T", "-c", conf, "--set", "scheduler.policy=dynamic", "--set",
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
    char first[CLI_OUT_MAX];
    snprintf(first, sizeof(first), "%s", r.out);
    const char *again = cli_write_file("again.conf", first);
    cli_run(&r, "-T", "-c", again, NULL);
    ck_assert_msg(r.status == 0, "exit %d: %s", r.status, r.err);
    ck_assert_str_eq(r.out, first);

    /* A broken configuration dumps nothing. */
    cli_run(&r, "-T", "--set", "scheduler.group_size=0", NULL);
    cli_check_fails(&r, "preduced: --set: scheduler.group_size: 0 is out of "
                        "range 1..65536\n");
}
END_TEST

/* ---- -h, -V, bad options ---- */

START_TEST(test_cli_help_version)
{
    struct cli_result r;
    cli_run(&r, "-h", NULL);
    ck_assert_int_eq(r.status, 0);
    ck_assert_str_eq(r.err, "");
    ck_assert_msg(strncmp(r.out, "usage: preduced [-c FILE]", 25) == 0, "%s",
                  r.out);
    ck_assert_has(
        r.out, "  -c, --config FILE  configuration file (default " DEFAULT_CONF
               " if it exists)\n");
    ck_assert_has(r.out, "  -V, --version      the version\n");
    struct cli_result r2;
    cli_run(&r2, "--help", NULL);
    ck_assert_int_eq(r2.status, 0);
    ck_assert_str_eq(r2.out, r.out);

    cli_run(&r, "-V", NULL);
    ck_assert_int_eq(r.status, 0);
    ck_assert_str_eq(r.err, "");
    /* "preduced VERSION (protocol N)", N the protocol this tree speaks. */
    char version[32] = "", want[100];
    ck_assert_msg(sscanf(r.out, "preduced %31s (protocol", version) == 1,
                  "version line: %s", r.out);
    snprintf(want, sizeof(want), "preduced %s (protocol %d)\n", version,
             PR_PROTO_VERSION);
    ck_assert_str_eq(r.out, want);
    cli_run(&r2, "--version", NULL);
    ck_assert_int_eq(r2.status, 0);
    ck_assert_str_eq(r2.out, r.out);
}
END_TEST

/* Exit 2, nothing on stdout, `first` then the usage on stderr. */
static void check_usage_error(const struct cli_result *r, const char *first)
{
    ck_assert_msg(r->status == 2, "exit %d: %s", r->status, r->err);
    ck_assert_str_eq(r->out, "");
    ck_assert_has(r->err, first);
    ck_assert_has(r->err, "usage: preduced [-c FILE]");
    ck_assert_has(r->err, "  -V, --version      the version\n");
}

START_TEST(test_cli_bad_options)
{
    struct cli_result r;
    cli_run(&r, "--bogus", NULL);
    check_usage_error(&r, "unrecognized option '--bogus'\n");
    cli_run(&r, "-x", NULL);
    check_usage_error(&r, "invalid option -- 'x'\n");
    cli_run(&r, "-t", "-c", NULL);
    check_usage_error(&r, "option requires an argument -- 'c'\n");
    cli_run(&r, "-t", "--set", NULL);
    check_usage_error(&r, "option '--set' requires an argument\n");

    cli_run(&r, "-t", "extra.conf", NULL);
    check_usage_error(&r, "preduced: unexpected argument 'extra.conf'\n");
    ck_assert_msg(strncmp(r.err, "preduced: unexpected", 20) == 0, "%s", r.err);
}
END_TEST

START_TEST(test_cli_too_many_sets)
{
    /* 64 --set are fine; one more --set or --role is refused. */
    const char *args[CLI_MAX_ARGV];
    int n = 0;
    args[n++] = "-T";
    for (int i = 0; i < 64; i++) {
        args[n++] = "--set";
        args[n++] = i == 63 ? "job=last" : "job=x";
    }
    args[n] = NULL;
    const char *out = cli_path("cli_run.out"), *err = cli_path("cli_run.err");
    char o[CLI_OUT_MAX], e[CLI_OUT_MAX];
    ck_assert_int_eq(
        cli_wait_exit(cli_spawn(args, out, err), CLI_RUN_TIMEOUT_MS), 0);
    ck_assert_has(cli_read_into(out, o, sizeof(o)), "\njob = last\n");

    const char *extra[][2] = {{"--set", "job=y"}, {"--role", "scheduler"}};
    for (int k = 0; k < 2; k++) {
        args[n] = extra[k][0];
        args[n + 1] = extra[k][1];
        args[n + 2] = NULL;
        ck_assert_int_eq(
            cli_wait_exit(cli_spawn(args, out, err), CLI_RUN_TIMEOUT_MS), 2);
        ck_assert_str_eq(cli_read_into(out, o, sizeof(o)), "");
        ck_assert_str_eq(cli_read_into(err, e, sizeof(e)),
                         "preduced: more than 64 --set and --role options\n");
    }
}
END_TEST

/* ---- The default configuration file ---- */

START_TEST(test_cli_default_path)
{
    struct cli_result r;
    cli_run(&r, "-t", NULL);
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
    cli_run(&r, "-t", "--set", "scheduler.group_size=3", NULL);
    ck_assert_msg(r.status == 0, "exit %d: %s", r.status, r.err);
    ck_assert_str_eq(r.out, "preduced: configuration (defaults and --set) "
                            "test is successful\n");
    /* --role alone is not a --set. */
    cli_run(&r, "-t", "--role", "scheduler", NULL);
    ck_assert_msg(r.status == 0, "exit %d: %s", r.status, r.err);
    ck_assert_str_eq(r.out,
                     "preduced: configuration (defaults) test is successful\n");
}
END_TEST

/* ---- SIGHUP ---- */

/* ---- files and values -t refuses at once ---- */

START_TEST(test_cli_test_control_bytes)
{
    /* Written byte by byte: a NUL would end a C string literal. */
    static const struct {
        const char *text;
        size_t len;
        const char *want;
    } cases[] = {
        {"[scheduler]\npolicy = dyn\0amic\n", 30, ":2: NUL byte in the file\n"},
        {"[scheduler]\npolicy = dyn\001amic\n", 30,
         ":2: control character 0x01 in the file\n"},
        {"# \033[31m red\n[scheduler]\npolicy = dynamic\n", 42,
         ":1: control character 0x1b in the file\n"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const char *conf = cli_path("ctl.conf");
        FILE *f = fopen(conf, "w");
        ck_assert_ptr_nonnull(f);
        ck_assert_uint_eq(fwrite(cases[i].text, 1, cases[i].len, f),
                          cases[i].len);
        ck_assert_int_eq(fclose(f), 0);
        char want[400];
        snprintf(want, sizeof(want), "preduced: %s%s", conf, cases[i].want);
        struct cli_result r;
        cli_run(&r, "-t", "-c", conf, NULL);
        cli_check_fails(&r, want);
    }
}
END_TEST

/*
 * Not a regular file, or a huge one: refused before reading (-t on
 * /dev/zero read for ever, a FIFO blocked in open()).
 */
START_TEST(test_cli_test_not_a_file)
{
    const char *fifo = cli_path("fifo.conf");
    ck_assert_int_eq(mkfifo(fifo, 0600), 0);
    const char *paths[] = {"/dev/zero", fifo, cli_dir};
    for (size_t i = 0; i < 3; i++) {
        char want[400];
        snprintf(want, sizeof(want), "preduced: %s: not a regular file\n",
                 paths[i]);
        struct cli_result r;
        double t0 = cli_now_s();
        cli_run(&r, "-t", "-c", paths[i], NULL);
        cli_check_fails(&r, want);
        ck_assert_double_lt(cli_now_s() - t0, 2.0);
    }
    const char *big = cli_path("big.conf");
    FILE *f = fopen(big, "w");
    ck_assert_ptr_nonnull(f);
    for (int i = 0; i < 20000; i++)
        fputs("# a comment line that repeats, repeats, repeats ......\n", f);
    ck_assert_int_eq(fclose(f), 0);
    char want[400];
    snprintf(want, sizeof(want),
             "preduced: %s: 1100000 bytes: a config file may have 1048576 "
             "at most\n",
             big);
    struct cli_result r;
    cli_run(&r, "-t", "-c", big, NULL);
    cli_check_fails(&r, want);
}
END_TEST

/* A socket path longer than sockaddr_un holds: -t says so (was: passed). */
START_TEST(test_cli_test_socket_path_too_long)
{
    char set[256] = "node.socket=/tmp/";
    size_t n = strlen(set);
    memset(set + n, 'x', 120);
    set[n + 120] = '\0';
    struct cli_result r;
    cli_run(&r, "-t", "--set", set, NULL);
    cli_check_fails(&r, "preduced: --set: node.socket: 125 bytes: a Unix "
                        "socket path has at most 107\n");
    const char *conf = cli_write_file("sock.conf", "[node]\nsocket = \n");
    char want[400];
    snprintf(want, sizeof(want), "preduced: %s: node.socket: empty path\n",
             conf);
    cli_run(&r, "-t", "-c", conf, NULL);
    cli_check_fails(&r, want);
}
END_TEST

/* ---- the trainers' socket of a node daemon ---- */

/* Waits up to 5 s for the file at `path` to contain s. */
static int file_says(const char *path, const char *s)
{
    static char text[64 * 1024];
    for (double end = cli_now_s() + 5; cli_now_s() < end; cli_sleep_ms(10))
        if (strstr(cli_read_into(path, text, sizeof(text)), s))
            return 1;
    return 0;
}

/* Can a client connect to the Unix socket at path now? */
static int answers(const char *path)
{
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
    int rc = connect(fd, (struct sockaddr *)&sa, sizeof(sa));
    close(fd);
    return rc == 0;
}

/*
 * A second node daemon given a live daemon's socket refuses to start and
 * says why; the first stays reachable, also after the second is gone
 * (the second must not unlink the live socket and bind its own). A socket file
 * nobody answers on is replaced, with a log line.
 */
START_TEST(test_cli_socket_in_use)
{
    char sock[256], sched[64];
    snprintf(sock, sizeof(sock), "node.socket=%s/n.sock", cli_dir);
    const char *path = sock + strlen("node.socket=");
    /* No scheduler there: the daemons serve their socket all the same. */
    snprintf(sched, sizeof(sched), "node.scheduler=127.0.0.1:%u",
             h_free_port());
    const char *args[] = {
        "--role", "node", "--set", sock,
        "--set",  sched,  "--set", "node.data_listen=127.0.0.1:0",
        NULL};
    const char *log1 = cli_path("first.log"), *log2 = cli_path("second.log");
    cli_daemon_pid = cli_spawn(args, log1, log1);
    ck_assert(file_says(log1, "trainers connect to"));

    pid_t second = cli_spawn(args, log2, log2);
    ck_assert_int_eq(cli_wait_exit(second, CLI_RUN_TIMEOUT_MS), 1);
    char want[400];
    snprintf(want, sizeof(want),
             "trainer socket: %s is in use by a running daemon: not "
             "starting",
             path);
    ck_assert(file_says(log2, want));
    ck_assert(answers(path));

    /* Killed: its socket file stays, stale; the next daemon replaces it. */
    ck_assert_int_eq(kill(cli_daemon_pid, SIGKILL), 0);
    ck_assert_int_eq(cli_wait_exit(cli_daemon_pid, CLI_RUN_TIMEOUT_MS),
                     -SIGKILL);
    ck_assert(!answers(path));
    cli_daemon_pid = cli_spawn(args, log2, log2);
    snprintf(want, sizeof(want),
             "trainer socket: %s is stale (nobody answers): replacing it",
             path);
    ck_assert(file_says(log2, want));
    ck_assert(file_says(log2, "trainers connect to"));
    ck_assert(answers(path));
    cli_daemon_stop();
    ck_assert_int_eq(access(path, F_OK), -1);
}
END_TEST

/*
 * A daemon whose socket file was removed and taken by another daemon
 * leaves the other's file alone when it stops (libuv unlinked the path of
 * a pipe it bound, whatever file was there by then); the file is there
 * only once it accepts (bound beside it, renamed into place).
 */
START_TEST(test_cli_socket_replaced_left_alone)
{
    char sock[256], sched[64];
    snprintf(sock, sizeof(sock), "node.socket=%s/r.sock", cli_dir);
    const char *path = sock + strlen("node.socket=");
    snprintf(sched, sizeof(sched), "node.scheduler=127.0.0.1:%u",
             h_free_port());
    const char *args[] = {
        "--role", "node", "--set", sock,
        "--set",  sched,  "--set", "node.data_listen=127.0.0.1:0",
        NULL};
    const char *log1 = cli_path("a.log"), *log2 = cli_path("b.log");
    pid_t a = cli_spawn(args, log1, log1);
    ck_assert(file_says(log1, "trainers connect to"));
    ck_assert(answers(path));
    ck_assert_int_eq(unlink(path), 0);
    cli_daemon_pid = cli_spawn(args, log2, log2);
    ck_assert(file_says(log2, "trainers connect to"));
    ck_assert(answers(path));
    ck_assert_int_eq(kill(a, SIGTERM), 0);
    ck_assert_int_eq(cli_wait_exit(a, CLI_RUN_TIMEOUT_MS), 0);
    ck_assert(answers(path)); /* b's socket survived a's exit */
    /* No temporary name left beside it. */
    char tmp[300];
    snprintf(tmp, sizeof(tmp), "%s.%d", path, (int)a);
    ck_assert_int_eq(access(tmp, F_OK), -1);
    cli_daemon_stop();
    ck_assert_int_eq(access(path, F_OK), -1);
}
END_TEST

/*
 * node.socket_group: an unknown group fails -t and the start with one
 * line naming it (a scheduler, which has no such socket, does not care);
 * a known one, by name or by number, owns the socket file, whose mode is
 * 0660 with or without the key, whatever the umask.
 */
START_TEST(test_cli_socket_group)
{
    const char *bad = "node.socket_group=nosuch-prgrp";
    const char *line = "preduced: node.socket_group: no group named "
                       "'nosuch-prgrp' (getent group nosuch-prgrp)\n";
    struct cli_result r;
    cli_run(&r, "-t", "--set", bad, NULL);
    cli_check_fails(&r, line);
    cli_run(&r, "--role", "node", "--set", bad, NULL);
    cli_check_fails(&r, line);
    cli_run(&r, "-t", "--role", "scheduler", "--set", bad, NULL);
    ck_assert_msg(r.status == 0, "exit %d: %s", r.status, r.err);

    /* A group id without a name (some containers): by number twice. */
    struct group *g = getgrgid(getegid());
    char byname[128], bynum[64];
    snprintf(bynum, sizeof(bynum), "node.socket_group=%u", (unsigned)getegid());
    snprintf(byname, sizeof(byname), "%s", bynum);
    if (g)
        snprintf(byname, sizeof(byname), "node.socket_group=%s", g->gr_name);
    const char *groups[] = {byname, bynum, "node.socket_group="};
    /* As under the units (UMask=0077): the mode comes from the daemon. */
    umask(077);
    for (int i = 0; i < 3; i++) {
        char sock[256], sched[64];
        snprintf(sock, sizeof(sock), "node.socket=%s/g%d.sock", cli_dir, i);
        const char *path = sock + strlen("node.socket=");
        snprintf(sched, sizeof(sched), "node.scheduler=127.0.0.1:%u",
                 h_free_port());
        const char *args[] = {
            "--role", "node",    "--set", sock,
            "--set",  sched,     "--set", "node.data_listen=127.0.0.1:0",
            "--set",  groups[i], NULL};
        char logname[32];
        snprintf(logname, sizeof(logname), "group%d.log", i);
        const char *log = cli_path(logname);
        cli_daemon_pid = cli_spawn(args, log, log);
        ck_assert(file_says(log, "trainers connect to"));
        struct stat st;
        ck_assert_int_eq(stat(path, &st), 0);
        ck_assert_msg((st.st_mode & 07777) == 0660, "%s: mode %o", groups[i],
                      st.st_mode & 07777);
        ck_assert_uint_eq(st.st_gid, getegid());
        ck_assert(answers(path));
        cli_daemon_stop();
    }
}
END_TEST

int main(void)
{
    Suite *s = suite_create("cli");
    TCase *tc = tcase_create("options");
    tcase_add_unchecked_fixture(tc, cli_top_setup, cli_top_teardown);
    tcase_add_checked_fixture(tc, cli_setup, cli_teardown);
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, test_cli_test_good_file);
    tcase_add_test(tc, test_cli_test_syntax_error);
    tcase_add_test(tc, test_cli_test_unknown_key);
    tcase_add_test(tc, test_cli_test_bad_value);
    tcase_add_test(tc, test_cli_test_missing_file);
    tcase_add_test(tc, test_cli_test_bad_set);
    tcase_add_test(tc, test_cli_test_bad_key_file);
    tcase_add_test(tc, test_cli_gen_key);
    tcase_add_test(tc, test_cli_encrypt_rules);
    tcase_add_test(tc, test_cli_dump);
    tcase_add_test(tc, test_cli_help_version);
    tcase_add_test(tc, test_cli_bad_options);
    tcase_add_test(tc, test_cli_too_many_sets);
    tcase_add_test(tc, test_cli_default_path);
    tcase_add_test(tc, test_cli_test_control_bytes);
    tcase_add_test(tc, test_cli_test_not_a_file);
    tcase_add_test(tc, test_cli_test_socket_path_too_long);
    tcase_add_test(tc, test_cli_socket_in_use);
    tcase_add_test(tc, test_cli_socket_replaced_left_alone);
    tcase_add_test(tc, test_cli_socket_group);
    suite_add_tcase(s, tc);
    return check_run(s);
}
