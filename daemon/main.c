/* SPDX-License-Identifier: MIT */
/*
 * preduced: the preduce daemon. One binary, two roles (node, scheduler),
 * chosen by `role` in the config or --role.
 *
 *   preduced -c FILE            run
 *   preduced -t -c FILE         check the config and exit
 *   preduced --set key=value    override a key (repeatable)
 *
 * SIGHUP re-reads the config file and applies the reloadable keys only if
 * the whole new file is valid; SIGTERM/SIGINT stop cleanly. Under systemd
 * (Type=notify) it says READY=1, RELOADING=1 and STOPPING=1, and with
 * WatchdogSec= it sends WATCHDOG=1 from a timer on the loop, so a loop that
 * stops turning gets the daemon restarted.
 */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <systemd/sd-daemon.h>
#include <unistd.h>
#include <uv.h>

#include "daemon/base/auth.h"
#include "daemon/base/conf.h"
#include "daemon/base/fdlimit.h"
#include "daemon/base/log.h"
#include "daemon/node/node.h"
#include "daemon/sched/sched.h"
#include "preduce.h" /* the release's version, shared with libpreduce */
#include "proto/frame.h"

#define DEFAULT_CONF "/etc/preduce/preduced.conf"
#define MAX_SETS     64

struct daemon {
    uv_loop_t loop;
    struct pr_conf conf;
    const char *path;
    const char *sets[MAX_SETS];
    int nsets;
    char role_set[64]; /* "role=ROLE" from --role, one of sets[] */
    struct pr_node *node;
    struct pr_sched *sched;
    struct pr_auth_key key; /* the cluster key, when have_key */
    int have_key;
    uv_signal_t sigs[3];
    uv_timer_t watchdog; /* WATCHDOG=1 pings, when watchdog_on */
    int watchdog_on;
    uv_timer_t log_flush; /* the log limit's summaries, once a second */
};

static void usage(FILE *f)
{
    fprintf(f,
            "usage: preduced [-c FILE] [-t] [-T] [--role node|scheduler]\n"
            "                [--set section.key=value]...\n"
            "  -c, --config FILE  configuration file (default %s if it "
            "exists)\n"
            "  -t, --test         check the configuration and exit\n"
            "  -T, --dump         print the effective configuration and "
            "exit\n"
            "  -r, --role ROLE    node or scheduler (same as --set "
            "role=ROLE)\n"
            "  -s, --set K=V      override a key, e.g. --set "
            "scheduler.policy=constant\n"
            "      --gen-key FILE write a new cluster key to FILE and "
            "exit\n"
            "  -h, --help         this text\n"
            "  -V, --version      the version\n",
            DEFAULT_CONF);
}

/*
 * A config error for people: "WHERE:LINE: KEY: MSG", leaving out what the
 * error does not have (a syntax error has no key, a rule relating two keys
 * no line). WHERE is the file, "--set" or "--role"; without it the line is
 * written "line N: " (the reload message names the file itself).
 */
static void format_err(char *buf, size_t len, const char *where,
                       const struct pr_conf_err *e)
{
    int n = 0;
    if (where && e->line > 0)
        n = snprintf(buf, len, "%s:%d: ", where, e->line);
    else if (where)
        n = snprintf(buf, len, "%s: ", where);
    else if (e->line > 0)
        n = snprintf(buf, len, "line %d: ", e->line);
    if (n < 0 || (size_t)n >= len)
        return;
    snprintf(buf + n, len - (size_t)n, "%s%s%s", e->key, e->key[0] ? ": " : "",
             e->msg);
}

static void print_err(const char *where, const struct pr_conf_err *e)
{
    char buf[1024];
    format_err(buf, sizeof(buf), where, e);
    fprintf(stderr, "preduced: %s\n", buf);
}

/* Whether a --set (not only --role) was given. */
static int have_sets(const struct daemon *d)
{
    for (int i = 0; i < d->nsets; i++)
        if (d->sets[i] != d->role_set)
            return 1;
    return 0;
}

/*
 * The file (-c, else DEFAULT_CONF when it exists), then --set and --role in
 * order, then the rules between keys, then the cluster key it names. Each
 * failure is printed to stderr: 0 or a negative errno.
 */
static int load_config(struct daemon *d)
{
    struct pr_conf_err err;
    memset(&err, 0, sizeof(err));
    if (!d->path && access(DEFAULT_CONF, R_OK) == 0)
        d->path = DEFAULT_CONF;
    int rc = pr_conf_init(&d->conf);
    if (rc < 0)
        return rc;
    if (d->path) {
        rc = pr_conf_load(&d->conf, d->path, &err);
        if (rc < 0) {
            if (rc == -ENOENT && !err.msg[0])
                snprintf(err.msg, sizeof(err.msg), "%s", strerror(ENOENT));
            print_err(d->path, &err);
            return rc;
        }
    }
    for (int i = 0; i < d->nsets; i++) {
        rc = pr_conf_set(&d->conf, d->sets[i], &err);
        if (rc < 0) {
            print_err(d->sets[i] == d->role_set ? "--role" : "--set", &err);
            return rc;
        }
    }
    rc = pr_conf_validate(&d->conf, &err);
    if (rc < 0) {
        /* A rule relating keys: the file, --set or both broke it. */
        char where[1024];
        if (d->path && have_sets(d))
            snprintf(where, sizeof(where), "%s and --set", d->path);
        else
            snprintf(where, sizeof(where), "%s",
                     d->path        ? d->path
                     : have_sets(d) ? "--set"
                                    : "the defaults");
        print_err(where, &err);
        return rc;
    }
    if (d->conf.role == PR_ROLE_NODE) {
        char why[256];
        gid_t gid;
        rc = pr_node_socket_gid(&d->conf, &gid, why, sizeof(why));
        if (rc < 0) {
            fprintf(stderr, "preduced: node.socket_group: %s\n", why);
            return rc;
        }
    }
    if (d->conf.sec_key_file && d->conf.sec_key_file[0]) {
        const char *why = "";
        rc = pr_auth_load(d->conf.sec_key_file, &d->key, &why);
        if (rc < 0) {
            fprintf(stderr, "preduced: security.key_file: %s: %s (%s)\n",
                    d->conf.sec_key_file, why, strerror(-rc));
            return rc;
        }
        d->have_key = 1;
        /* Links are sealed unless security.encrypt = off. */
        if (!pr_conf_encrypts(&d->conf))
            d->key.seal = 0;
    }
    return 0;
}

static void log_flush_cb(uv_timer_t *t)
{
    (void)t;
    pr_log_limit_flush();
}

static void close_signals(struct daemon *d)
{
    for (int i = 0; i < 3; i++)
        uv_close((uv_handle_t *)&d->sigs[i], NULL);
    uv_close((uv_handle_t *)&d->log_flush, NULL);
    pr_log_limit_flush();
    if (d->watchdog_on)
        uv_close((uv_handle_t *)&d->watchdog, NULL);
    d->watchdog_on = 0;
}

static void watchdog_cb(uv_timer_t *t)
{
    (void)t;
    sd_notify(0, "WATCHDOG=1");
}

/*
 * With WatchdogSec= (WATCHDOG_USEC for this pid), a ping every half period
 * from the loop: it comes only while the loop turns.
 */
static void start_watchdog(struct daemon *d)
{
    uint64_t usec = 0;
    if (sd_watchdog_enabled(0, &usec) <= 0 || usec == 0)
        return;
    uint64_t period_ms = usec / 2000 ? usec / 2000 : 1;
    uv_timer_init(&d->loop, &d->watchdog);
    d->watchdog.data = d;
    uv_timer_start(&d->watchdog, watchdog_cb, period_ms, period_ms);
    d->watchdog_on = 1;
    pr_info("systemd watchdog: WATCHDOG=1 every %llu ms",
            (unsigned long long)period_ms);
}

static void stop(struct daemon *d)
{
    sd_notify(0, "STOPPING=1");
    pr_info("stopping");
    if (d->node)
        pr_node_destroy(d->node);
    if (d->sched)
        pr_sched_destroy(d->sched);
    d->node = NULL;
    d->sched = NULL;
    close_signals(d);
}

/* A reload's candidate must suit the scheduler before it is applied. */
static int sched_accepts(const struct pr_conf *merged, void *ctx,
                         struct pr_conf_err *err)
{
    (void)ctx;
    int rc = pr_sched_check_conf(merged);
    if (rc < 0) {
        snprintf(err->key, sizeof(err->key), "scheduler");
        snprintf(err->msg, sizeof(err->msg),
                 "the scheduler does not take these parameters");
    }
    return rc;
}

static void reload(struct daemon *d)
{
    if (!d->path) {
        pr_warn("SIGHUP: no configuration file to reload");
        return;
    }
    sd_notify(0, "RELOADING=1");
    struct pr_conf_err err;
    memset(&err, 0, sizeof(err));
    int changed = 0;
    int rc = pr_conf_reload(&d->conf, d->path, d->sets, d->nsets,
                            d->sched ? sched_accepts : NULL, d, &err, &changed);
    if (rc < 0) {
        char why[1024];
        format_err(why, sizeof(why), NULL, &err);
        pr_err("reload of %s refused, old configuration kept: %s", d->path,
               why);
    } else {
        pr_log_set_level((enum pr_log_level)d->conf.log_level);
        pr_log_set_limit(d->conf.log_burst, d->conf.log_burst_ms);
        if (d->node)
            pr_node_reload(d->node);
        /* sched_accepts checked the same parameters: cannot fail now. */
        if (d->sched)
            rc = pr_sched_reload(d->sched);
        if (rc < 0)
            pr_err("reloaded %s, but the scheduler kept its old parameters: "
                   "%s",
                   d->path, strerror(-rc));
        else
            pr_info("reloaded %s: %d key%s changed", d->path, changed,
                    changed == 1 ? "" : "s");
    }
    sd_notify(0, "READY=1");
}

static void signal_cb(uv_signal_t *s, int signum)
{
    struct daemon *d = s->data;
    if (signum == SIGHUP)
        reload(d);
    else
        stop(d);
}

/* What the command line asks for. */
enum action {
    ACT_RUN,
    ACT_TEST,     /* -t: check the configuration */
    ACT_DUMP,     /* -T: print the effective configuration */
    ACT_EXIT_OK,  /* --help, --version: done */
    ACT_EXIT_BAD, /* a usage error: exit 2 */
};

/* --gen-key FILE: a new cluster key, readable by its owner alone. */
static enum action gen_key(const char *path)
{
    const char *why = "";
    int rc = pr_auth_generate(path, &why);
    if (rc < 0) {
        fprintf(stderr, "preduced: --gen-key %s: %s (%s)\n", path, why,
                strerror(-rc));
        return ACT_EXIT_BAD;
    }
    printf("preduced: wrote a new cluster key to %s (mode 0600); copy it to "
           "every daemon of the cluster and set security.key_file\n",
           path);
    return ACT_EXIT_OK;
}

/* Fills d->path and d->sets[] from argv; says what to do next. */
static enum action parse_options(struct daemon *d, int argc, char **argv)
{
    static const struct option opts[] = {
        {"config", required_argument, NULL, 'c'},
        {"test", no_argument, NULL, 't'},
        {"dump", no_argument, NULL, 'T'},
        {"role", required_argument, NULL, 'r'},
        {"set", required_argument, NULL, 's'},
        {"help", no_argument, NULL, 'h'},
        {"version", no_argument, NULL, 'V'},
        {"gen-key", required_argument, NULL, 'g'},
        {NULL, 0, NULL, 0},
    };
    int test = 0, dump = 0, c;
    while ((c = getopt_long(argc, argv, "c:tTr:s:hV", opts, NULL)) != -1) {
        switch (c) {
        case 'g':
            return gen_key(optarg);
        case 'c':
            d->path = optarg;
            break;
        case 't':
            test = 1;
            break;
        case 'T':
            dump = 1;
            break;
        case 'r':
        case 's':
            if (d->nsets == MAX_SETS) {
                fprintf(stderr,
                        "preduced: more than %d --set and --role options\n",
                        MAX_SETS);
                return ACT_EXIT_BAD;
            }
            if (c == 's') {
                d->sets[d->nsets++] = optarg;
                break;
            }
            /* A later --role rewrites the text the earlier ones point at. */
            snprintf(d->role_set, sizeof(d->role_set), "role=%s", optarg);
            d->sets[d->nsets++] = d->role_set;
            break;
        case 'h':
            usage(stdout);
            return ACT_EXIT_OK;
        case 'V':
            printf("preduced %d.%d (protocol %d)\n", PREDUCE_VERSION_MAJOR,
                   PREDUCE_VERSION_MINOR, PR_PROTO_VERSION);
            return ACT_EXIT_OK;
        default:
            usage(stderr);
            return ACT_EXIT_BAD;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "preduced: unexpected argument '%s'\n", argv[optind]);
        usage(stderr);
        return ACT_EXIT_BAD;
    }
    return test ? ACT_TEST : dump ? ACT_DUMP : ACT_RUN;
}

/* -t and -T: what the loaded configuration says, on stdout. */
static void report_config(const struct daemon *d, enum action a)
{
    if (a == ACT_TEST)
        printf("preduced: configuration %s test is successful\n",
               d->path        ? d->path
               : have_sets(d) ? "(defaults and --set)"
                              : "(defaults)");
    else
        pr_conf_dump(&d->conf, stdout);
}

/*
 * Descriptors this daemon lets itself hold (fdlimit.h): the soft limit is
 * raised to this, or to the hard limit where that is lower. Below
 * FDS_ENOUGH a warning says where connections will run short.
 */
#define FDS_WANT   65536
#define FDS_ENOUGH 4096

static void raise_fd_limit(void)
{
    uint64_t before, after;
    int rc = pr_fdlimit_raise(FDS_WANT, &before, &after);
    if (rc < 0)
        pr_warn("file descriptors: cannot raise the limit from %llu: %s",
                (unsigned long long)before, strerror(-rc));
    else if (after != before)
        pr_info("file descriptors: limit raised from %llu to %llu",
                (unsigned long long)before, (unsigned long long)after);
    if (after < FDS_ENOUGH)
        pr_warn("file descriptors: only %llu (RLIMIT_NOFILE): "
                "many trainers, peer streams or idle connections may be "
                "refused; raise it (LimitNOFILE= in the unit, ulimit -Hn)",
                (unsigned long long)after);
}

/*
 * The loop, its signal handlers and the configured role (node or
 * scheduler). On failure everything it opened is closed again: 0 or a
 * negative errno.
 */
static int start_role(struct daemon *d)
{
    pr_log_set_level((enum pr_log_level)d->conf.log_level);
    pr_log_set_limit(d->conf.log_burst, d->conf.log_burst_ms);
    pr_log_set_ident(d->conf.role == PR_ROLE_SCHEDULER ? "preduced-sched"
                                                       : "preduced");
    signal(SIGPIPE, SIG_IGN);
    raise_fd_limit();
    uv_loop_init(&d->loop);
    static const int signums[3] = {SIGINT, SIGTERM, SIGHUP};
    for (int i = 0; i < 3; i++) {
        uv_signal_init(&d->loop, &d->sigs[i]);
        d->sigs[i].data = d;
        uv_signal_start(&d->sigs[i], signal_cb, signums[i]);
    }
    /* A flood that stopped still gets its "suppressed" line. */
    uv_timer_init(&d->loop, &d->log_flush);
    uv_timer_start(&d->log_flush, log_flush_cb, 1000, 1000);
    uv_unref((uv_handle_t *)&d->log_flush);
    const struct pr_auth_key *key = d->have_key ? &d->key : NULL;
    int rc;
    if (d->conf.role == PR_ROLE_SCHEDULER)
        rc = pr_sched_create(&d->loop, &d->conf, key, &d->sched);
    else
        rc = pr_node_create(&d->loop, &d->conf, key, &d->node);
    if (rc < 0) {
        close_signals(d);
        uv_run(&d->loop, UV_RUN_DEFAULT);
        uv_loop_close(&d->loop);
        return rc;
    }
    start_watchdog(d);
    return 0;
}

/* Until stop() (SIGTERM, SIGINT) has closed every handle. */
static void run(struct daemon *d)
{
    sd_notify(0, "READY=1");
    uv_run(&d->loop, UV_RUN_DEFAULT);
    int rc = uv_loop_close(&d->loop);
    if (rc < 0)
        pr_warn("loop closed with handles open: %s", uv_strerror(rc));
}

int main(int argc, char **argv)
{
    static struct daemon d;
    enum action a = parse_options(&d, argc, argv);
    if (a == ACT_EXIT_OK || a == ACT_EXIT_BAD)
        return a == ACT_EXIT_OK ? 0 : 2;
    if (load_config(&d) < 0)
        return 1;
    int rc = 0;
    if (a != ACT_RUN)
        report_config(&d, a);
    else if ((rc = start_role(&d)) == 0)
        run(&d);
    pr_conf_fini(&d.conf);
    return rc < 0 ? 1 : 0;
}
