#include "tests/hosts/hosts.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *net_sh(void)
{
    const char *p = getenv("PREDUCE_HOSTS_NET");
    return p ? p : "tests/hosts/net.sh";
}

int hh_net(const struct hh *h, const char *fmt, ...)
{
    char args[512], cmd[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof(args), fmt, ap);
    va_end(ap);
    /* The command's first word, then the prefix, then the rest. */
    const char *rest = strchr(args, ' ');
    int wlen = rest ? (int)(rest - args) : (int)strlen(args);
    snprintf(cmd, sizeof(cmd), "timeout 20 %s %.*s %s%s", net_sh(), wlen, args,
             h->prefix, rest ? rest : "");
    int rc = system(cmd);
    if (rc != 0) {
        fprintf(stderr, "hosts: '%s' failed (%d)\n", cmd, rc);
        return -EIO;
    }
    return 0;
}

void hh_addr(int i, char *buf, size_t len)
{
    snprintf(buf, len, "10.77.0.%d", i + 1);
}

int hh_up(struct hh *h, int nhosts)
{
    memset(h, 0, sizeof(*h));
    const char *pre = getenv("PREDUCE_HOSTS_PREFIX");
    char own[32];
    if (!pre) {
        snprintf(own, sizeof(own), "prh%d", (int)getpid());
        pre = own;
    }
    snprintf(h->prefix, sizeof(h->prefix), "%.20s-%d", pre, (int)getpid());
    h->nhosts = nhosts;
    hh_net(h, "down"); /* a previous test of the same pid */
    return hh_net(h, "up %d", nhosts);
}

int hh_start(struct hh *h, const char *const *sched_sets,
             const char *const *node_sets)
{
    struct h_place at[H_MAX_NODES];
    if (h->nhosts > H_MAX_NODES)
        return -EINVAL;
    memset(at, 0, sizeof(at));
    for (int i = 0; i < h->nhosts; i++) {
        snprintf(at[i].netns, sizeof(at[i].netns), "%s-h%d", h->prefix, i);
        hh_addr(i, at[i].addr, sizeof(at[i].addr));
    }
    return h_cluster_start_at(&h->c, h->nhosts, &at[0], at, sched_sets,
                              node_sets);
}

int hh_down(struct hh *h)
{
    int bad = h->c.dir[0] ? h_cluster_stop(&h->c) : 0;
    hh_net(h, "down");
    return bad;
}
