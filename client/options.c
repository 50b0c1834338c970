/* SPDX-License-Identifier: MIT */
/*
 * Connect options (preduce.h): the job a trainer joins, the settings it
 * asks for it, the encoding of its reduces' floats between daemons, the
 * job's key and its scheduler. Each comes from, in order:
 * preduce_options_set(), the environment (PREDUCE_JOB; PREDUCE_POLICY and
 * PREDUCE_JOB_SETTINGS; PREDUCE_WIRE; PREDUCE_JOB_KEY; PREDUCE_SCHEDULER),
 * or nothing, which leaves it to the daemon (its `job`, its
 * transport.wire, its node.scheduler) and the scheduler (its values). Checked
 * here for what the daemon would refuse anyway, so a typo fails at once:
 * preduce_options_set() returns -EINVAL, and a bad environment fails the
 * connect with -EINVAL and its reason in preduce_last_error(NULL).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "client/client_int.h"

static bool printable(const char *s, size_t n, bool spaces)
{
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (ch < 0x20 || ch == 0x7f || (!spaces && ch == ' '))
            return false;
    }
    return true;
}

/* A job name: 1..63 bytes, printable, no spaces or quotes. */
static bool valid_job(const char *s)
{
    size_t n = strnlen(s, PR_CLIENT_NAME_MAX + 1);
    return n > 0 && n <= PR_CLIENT_NAME_MAX && printable(s, n, false) &&
           !strpbrk(s, "\"\\");
}

/*
 * A scheduler: host:port, or standbys "a,b", 1..1023 printable bytes
 * with a ':' (the daemon checks each address).
 */
static bool valid_sched(const char *s)
{
    size_t n = strnlen(s, PR_CLIENT_SCHED_MAX + 1);
    return n > 0 && n <= PR_CLIENT_SCHED_MAX && printable(s, n, true) &&
           strchr(s, ':');
}

/* A setting: key=value, 3..127 bytes, printable. */
static bool valid_setting(const char *s)
{
    size_t n = strnlen(s, PR_CLIENT_SETTING_MAX + 1);
    const char *eq = strchr(s, '=');
    return n <= PR_CLIENT_SETTING_MAX && eq && eq != s && eq[1] &&
           printable(s, n, true);
}

/*
 * The encodings' names, in the order of the daemon's enum pr_wire
 * (daemon/engine/wire.h): Reduce.wire is a name's index + 1, 0 leaving
 * the choice to the node (proto/preduce.proto).
 */
static const char *const wires[] = {"fp32", "bf16", "int8"};

const char *pr_client_wire_name(uint32_t wire)
{
    return wire >= 1 && wire <= sizeof(wires) / sizeof(wires[0])
               ? wires[wire - 1]
               : "";
}

/* Reduce.wire for a name of wires[], or 0 for any other string. */
static uint32_t wire_of(const char *s)
{
    for (uint32_t i = 0; i < sizeof(wires) / sizeof(wires[0]); i++)
        if (!strcmp(s, wires[i]))
            return i + 1;
    return 0;
}

int preduce_options_create(preduce_options_t **out)
{
    if (!out)
        return -EINVAL;
    *out = calloc(1, sizeof(**out));
    return *out ? 0 : -ENOMEM;
}

void preduce_options_destroy(preduce_options_t *o)
{
    free(o);
}

static int add_setting(struct preduce_options *o, const char *s, size_t n)
{
    if (o->nsettings >= PR_CLIENT_SETTINGS_MAX)
        return -E2BIG;
    if (n > PR_CLIENT_SETTING_MAX)
        return -EINVAL;
    char *d = o->settings[o->nsettings];
    memcpy(d, s, n);
    d[n] = '\0';
    if (!valid_setting(d))
        return -EINVAL;
    o->nsettings++;
    return 0;
}

int preduce_options_set(preduce_options_t *o, const char *key,
                        const char *value)
{
    if (!o || !key || !value)
        return -EINVAL;
    if (!strcmp(key, "job")) {
        if (!valid_job(value))
            return -EINVAL;
        strcpy(o->job, value);
        o->has_job = true;
        return 0;
    }
    if (!strcmp(key, "setting")) {
        int rc = add_setting(o, value, strlen(value));
        if (rc == 0)
            o->has_settings = true;
        return rc;
    }
    if (!strcmp(key, "wire")) {
        uint32_t w = wire_of(value);
        if (!w)
            return -EINVAL;
        o->wire = w;
        return 0;
    }
    if (!strcmp(key, "job_key")) {
        /* Read at connect, where preduce_last_error() can say what failed. */
        size_t n = strlen(value);
        if (n == 0 || n > PR_CLIENT_KEY_PATH_MAX)
            return -EINVAL;
        memcpy(o->job_key, value, n + 1);
        return 0;
    }
    if (!strcmp(key, "scheduler")) {
        if (!valid_sched(value))
            return -EINVAL;
        strcpy(o->scheduler, value);
        return 0;
    }
    return -EINVAL;
}

/* "a=1,b=2" into o's settings; spaces around items are dropped. */
static int add_list(struct preduce_options *o, const char *list)
{
    const char *p = list;
    while (*p) {
        while (*p == ',' || *p == ' ')
            p++;
        size_t n = strcspn(p, ",");
        while (n > 0 && p[n - 1] == ' ')
            n--;
        if (n > 0) {
            int rc = add_setting(o, p, n);
            if (rc < 0)
                return rc;
        }
        p += strcspn(p, ",");
    }
    return 0;
}

/* PREDUCE_POLICY and PREDUCE_JOB_SETTINGS, unless options set settings. */
static int env_settings(struct preduce_options *o, const char **why)
{
    const char *env;
    if (o->has_settings)
        return 0;
    *why = "PREDUCE_POLICY, PREDUCE_JOB_SETTINGS: not key=value settings "
           "(at most 16 of 127 bytes)";
    if ((env = getenv("PREDUCE_POLICY")) && *env) {
        char s[PR_CLIENT_SETTING_MAX + 1];
        size_t n = strlen(env);
        if (n > PR_CLIENT_SETTING_MAX - 7)
            return -EINVAL;
        memcpy(s, "policy=", 7);
        memcpy(s + 7, env, n + 1);
        int rc = add_setting(o, s, n + 7);
        if (rc < 0)
            return rc;
    }
    if ((env = getenv("PREDUCE_JOB_SETTINGS")) && *env)
        return add_list(o, env);
    return 0;
}

int pr_client_options_resolve(const preduce_options_t *given,
                              struct preduce_options *o, const char **why)
{
    if (given)
        *o = *given;
    else
        memset(o, 0, sizeof(*o));
    const char *env;
    if (!o->has_job && (env = getenv("PREDUCE_JOB")) && *env) {
        *why = "PREDUCE_JOB: not a job name of 1..63 printable bytes "
               "without spaces or quotes";
        if (!valid_job(env))
            return -EINVAL;
        strcpy(o->job, env);
        o->has_job = true;
    }
    if (!o->job_key[0] && (env = getenv("PREDUCE_JOB_KEY")) && *env) {
        *why = "PREDUCE_JOB_KEY: a path of at most 1023 bytes";
        size_t n = strlen(env);
        if (n > PR_CLIENT_KEY_PATH_MAX)
            return -EINVAL;
        memcpy(o->job_key, env, n + 1);
    }
    if (!o->scheduler[0] && (env = getenv("PREDUCE_SCHEDULER")) && *env) {
        *why = "PREDUCE_SCHEDULER: not host:port or a list of them, at most "
               "1023 printable bytes";
        if (!valid_sched(env))
            return -EINVAL;
        strcpy(o->scheduler, env);
    }
    if (!o->wire && (env = getenv("PREDUCE_WIRE")) && *env) {
        *why = "PREDUCE_WIRE: not one of fp32, bf16, int8";
        o->wire = wire_of(env);
        if (!o->wire)
            return -EINVAL;
    }
    return env_settings(o, why);
}

int pr_client_job_key_read(const struct preduce_options *o, uint8_t *buf,
                           size_t *len, const char **why)
{
    *len = 0;
    if (!o->job_key[0])
        return 0;
    /* Whoever keys the node's default job locks out all who name none. */
    if (!o->has_job)
        return *why = "job key: name the job too (PREDUCE_JOB, or the "
                      "\"job\" option); a key on the node's default job "
                      "would lock out every trainer that names none",
               -EINVAL;
    /* O_NONBLOCK: a FIFO there must not hang the connect in open(). */
    int fd = open(o->job_key, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (fd < 0) {
        int e = errno;
        *why = "job key: cannot open the key file";
        return -e;
    }
    struct stat st;
    if (fstat(fd, &st) < 0) {
        int e = errno;
        close(fd);
        return *why = "job key: cannot stat the key file", -e;
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return *why = "job key: not a regular file", -EINVAL;
    }
    /* A key others can read is no key: the daemons' rule for theirs. */
    if (st.st_mode & 077) {
        close(fd);
        return *why = "job key: the file is readable or writable by group "
                      "or others (chmod 600 it)",
               -EPERM;
    }
    uint8_t one;
    size_t n = 0;
    ssize_t r = 0;
    while (n < PR_CLIENT_KEY_MAX &&
           (r = read(fd, buf + n, PR_CLIENT_KEY_MAX - n)) > 0)
        n += (size_t)r;
    /* One more byte read means the file is too long. */
    int more = r >= 0 && n == PR_CLIENT_KEY_MAX && read(fd, &one, 1) == 1;
    int e = r < 0 ? errno : 0;
    close(fd);
    explicit_bzero(&one, sizeof(one));
    if (e || n < PR_CLIENT_KEY_MIN || more) {
        explicit_bzero(buf, n);
        if (e)
            return *why = "job key: cannot read the key file", -e;
        return *why = "job key: the file must hold 16 to 4096 bytes", -EINVAL;
    }
    *len = n;
    return 0;
}
