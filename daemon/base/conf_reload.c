/* SPDX-License-Identifier: MIT */
/*
 * SIGHUP's reload (nginx's model): the new file, with the command line's
 * overrides, is parsed and checked whole into a fresh config; only then
 * are its changed reloadable keys swapped into the live one, which is
 * checked again as a whole (and by the daemon's accept callback), and on
 * any refusal the same swaps put every old value back.
 *
 * Single-threaded: the loop thread reloads; nothing here locks.
 */
#include "daemon/base/conf.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "daemon/base/conf_int.h"
#include "daemon/base/log.h"

/* Per key: 0 the same, SWAPPED, or RESTART (differs, not reloadable). */
enum { SWAPPED = 1, RESTART = 2 };

/*
 * A file that has lost keys its predecessor set is more likely truncated
 * (an editor's half-written save, a full disk) than meant: applied, it
 * would silently return them to their defaults. Refused unless the new
 * file says reload_missing = default; a key an override sets is not lost.
 */
static int check_missing(const struct pr_conf *live,
                         const struct pr_conf *fresh, struct pr_conf_err *err)
{
    const struct entry *e = NULL;
    int more = 0;

    if (fresh->reload_missing == PR_RELOAD_MISSING_DEFAULT)
        return 0;
    for (size_t i = 0; i < pr_conf_nkeys; i++) {
        if (live->file_keys[i] && !fresh->file_keys[i] && !fresh->set_keys[i]) {
            if (e)
                more++;
            else
                e = &pr_conf_keys[i];
        }
    }
    if (!e)
        return 0;
    char also[48] = "";
    if (more)
        snprintf(also, sizeof(also), " (and %d more key%s)", more,
                 more == 1 ? "" : "s");
    return bad(err, -EINVAL, e,
               "set by the file before, missing now%s: a truncated file? "
               "reload_missing = default returns such keys to defaults",
               also);
}

/*
 * The new file and overrides into *fresh, checked on their own and
 * against what *live's file set. 0, or an error with *fresh finished.
 */
static int load_fresh(const struct pr_conf *live, struct pr_conf *fresh,
                      const char *path, const char *const *overrides,
                      int noverrides, struct pr_conf_err *err)
{
    int rc = pr_conf_init(fresh);
    if (rc)
        return pr_conf_seterr(err, rc, "", "", "out of memory");
    rc = pr_conf_load(fresh, path, err);
    for (int i = 0; !rc && i < noverrides; i++)
        rc = pr_conf_set(fresh, overrides[i], err);
    if (!rc)
        rc = pr_conf_validate(fresh, err);
    if (!rc)
        rc = check_missing(live, fresh, err);
    if (rc)
        pr_conf_fini(fresh);
    return rc;
}

/*
 * Swaps the changed reloadable fields in (so that fini(fresh) frees the
 * strings *live gave up), marking each key in swapped; returns how many.
 */
static int swap_in(struct pr_conf *live, struct pr_conf *fresh,
                   unsigned char swapped[PR_CONF_KEYS_MAX])
{
    char was[PR_CONF_STR_MAX + 8], now[PR_CONF_STR_MAX + 8];
    int n = 0;
    memset(swapped, 0, PR_CONF_KEYS_MAX);
    for (size_t i = 0; i < pr_conf_nkeys; i++) {
        const struct entry *e = &pr_conf_keys[i];
        /* The text is exact: doubles print as the shortest round trip. */
        pr_conf_format_value(live, e, was, sizeof(was));
        pr_conf_format_value(fresh, e, now, sizeof(now));
        if (strcmp(was, now) == 0)
            continue;
        if (!(e->flags & F_RELOAD)) {
            swapped[i] = RESTART;
            continue;
        }
        pr_conf_swap_field(live, fresh, e);
        swapped[i] = SWAPPED;
        n++;
    }
    return n;
}

/*
 * After the check of the mix (rc): refused, the swaps are undone; else
 * each changed key is logged (a refused reload changes none).
 */
static void settle(struct pr_conf *live, struct pr_conf *fresh,
                   const unsigned char swapped[PR_CONF_KEYS_MAX], int rc)
{
    char was[PR_CONF_STR_MAX + 8], now[PR_CONF_STR_MAX + 8];
    char key[sizeof(((struct pr_conf_err *)0)->key)];
    for (size_t i = 0; i < pr_conf_nkeys; i++) {
        const struct entry *e = &pr_conf_keys[i];
        if (!swapped[i])
            continue;
        if (rc) {
            if (swapped[i] == SWAPPED)
                pr_conf_swap_field(live, fresh, e);
            continue;
        }
        pr_conf_keyname(key, sizeof(key), e->section, e->name);
        if (swapped[i] == RESTART) {
            pr_conf_format_value(live, e, was, sizeof(was));
            pr_conf_format_value(fresh, e, now, sizeof(now));
            pr_log_all(PR_LOG_WARN, "conf: %s: %s -> %s needs a restart", key,
                       was, now);
            continue;
        }
        /* Swapped: the old value is in fresh now. */
        pr_conf_format_value(fresh, e, was, sizeof(was));
        pr_conf_format_value(live, e, now, sizeof(now));
        pr_log_all(PR_LOG_INFO, "conf: %s: %s -> %s", key, was, now);
    }
}

int pr_conf_reload(struct pr_conf *live, const char *path,
                   const char *const *overrides, int noverrides,
                   pr_conf_accept_fn accept, void *ctx, struct pr_conf_err *err,
                   int *changed)
{
    struct pr_conf_err dummy;
    struct pr_conf fresh;
    unsigned char swapped[PR_CONF_KEYS_MAX];

    if (!err)
        err = &dummy;
    memset(err, 0, sizeof(*err));
    if (changed)
        *changed = 0;
    int rc = load_fresh(live, &fresh, path, overrides, noverrides, err);
    if (rc)
        return rc;
    int n = swap_in(live, &fresh, swapped);
    rc = pr_conf_validate(live, err);
    if (!rc && accept)
        rc = accept(live, ctx, err);
    settle(live, &fresh, swapped, rc);
    if (!rc)
        memcpy(live->file_keys, fresh.file_keys, sizeof(live->file_keys));
    pr_conf_fini(&fresh);
    if (rc)
        return rc;
    if (changed)
        *changed = n;
    return 0;
}
