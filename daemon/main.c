/*
 * preduced: the preduce daemon. One binary, two roles (node, scheduler),
 * chosen by `role` in the config or --role.
 *
 *   preduced -c FILE            run
 *   preduced -t -c FILE         check the config and exit
 *   preduced --set key=value    override a key (repeatable)
 *
 * SIGHUP re-reads the config file and applies the reloadable keys only if
 * the whole new file is valid; SIGTERM/SIGINT stop cleanly.
 */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <systemd/sd-daemon.h>
#include <unistd.h>
#include <uv.h>

#include "daemon/base/auth.h"
#include "daemon/base/conf.h"
#include "daemon/base/log.h"
#include "daemon/node/node.h"
#include "daemon/sched/sched.h"
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

static int load(struct daemon *d)
{
    struct pr_conf_err err;
    memset(&err, 0, sizeof(err));
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
    if (d->conf.sec_key_file && d->conf.sec_key_file[0]) {
        const char *why = "";
        rc = pr_auth_load(d->conf.sec_key_file, &d->key, &why);
        if (rc < 0) {
            fprintf(stderr, "preduced: security.key_file: %s: %s (%s)\n",
                    d->conf.sec_key_file, why, strerror(-rc));
            return rc;
        }
        d->have_key = 1;
    }
    return 0;
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
    for (int i = 0; i < 3; i++)
        uv_close((uv_handle_t *)&d->sigs[i], NULL);
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

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"config", required_argument, NULL, 'c'},
        {"test", no_argument, NULL, 't'},
        {"dump", no_argument, NULL, 'T'},
        {"role", required_argument, NULL, 'r'},
        {"set", required_argument, NULL, 's'},
        {"help", no_argument, NULL, 'h'},
        {"version", no_argument, NULL, 'V'},
        {NULL, 0, NULL, 0},
    };
    static struct daemon d;
    int test = 0, dump = 0, c;
    while ((c = getopt_long(argc, argv, "c:tTr:s:hV", opts, NULL)) != -1) {
        switch (c) {
        case 'c':
            d.path = optarg;
            break;
        case 't':
            test = 1;
            break;
        case 'T':
            dump = 1;
            break;
        case 'r':
        case 's':
            if (d.nsets == MAX_SETS) {
                fprintf(stderr,
                        "preduced: more than %d --set and --role options\n",
                        MAX_SETS);
                return 2;
            }
            if (c == 's') {
                d.sets[d.nsets++] = optarg;
                break;
            }
            /* A later --role rewrites the text the earlier ones point at. */
            snprintf(d.role_set, sizeof(d.role_set), "role=%s", optarg);
            d.sets[d.nsets++] = d.role_set;
            break;
        case 'h':
            usage(stdout);
            return 0;
        case 'V':
            printf("preduced 0.1 (protocol %d)\n", PR_PROTO_VERSION);
            return 0;
        default:
            usage(stderr);
            return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "preduced: unexpected argument '%s'\n", argv[optind]);
        usage(stderr);
        return 2;
    }
    if (!d.path && access(DEFAULT_CONF, R_OK) == 0)
        d.path = DEFAULT_CONF;
    if (load(&d) < 0)
        return 1;
    if (test) {
        printf("preduced: configuration %s test is successful\n",
               d.path          ? d.path
               : have_sets(&d) ? "(defaults and --set)"
                               : "(defaults)");
        pr_conf_fini(&d.conf);
        return 0;
    }
    if (dump) {
        pr_conf_dump(&d.conf, stdout);
        pr_conf_fini(&d.conf);
        return 0;
    }
    pr_log_set_level((enum pr_log_level)d.conf.log_level);
    pr_log_set_ident(d.conf.role == PR_ROLE_SCHEDULER ? "preduced-sched"
                                                      : "preduced");
    signal(SIGPIPE, SIG_IGN);
    uv_loop_init(&d.loop);
    static const int signums[3] = {SIGINT, SIGTERM, SIGHUP};
    for (int i = 0; i < 3; i++) {
        uv_signal_init(&d.loop, &d.sigs[i]);
        d.sigs[i].data = &d;
        uv_signal_start(&d.sigs[i], signal_cb, signums[i]);
    }
    int rc;
    if (d.conf.role == PR_ROLE_SCHEDULER)
        rc = pr_sched_create(&d.loop, &d.conf, d.have_key ? &d.key : NULL,
                             &d.sched);
    else
        rc = pr_node_create(&d.loop, &d.conf, d.have_key ? &d.key : NULL,
                            &d.node);
    if (rc < 0) {
        for (int i = 0; i < 3; i++)
            uv_close((uv_handle_t *)&d.sigs[i], NULL);
        uv_run(&d.loop, UV_RUN_DEFAULT);
        uv_loop_close(&d.loop);
        pr_conf_fini(&d.conf);
        return 1;
    }
    sd_notify(0, "READY=1");
    uv_run(&d.loop, UV_RUN_DEFAULT);
    rc = uv_loop_close(&d.loop);
    if (rc < 0)
        pr_warn("loop closed with handles open: %s", uv_strerror(rc));
    pr_conf_fini(&d.conf);
    return 0;
}
