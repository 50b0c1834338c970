/* SPDX-License-Identifier: MIT */
/*
 * The node role: one preduced per machine. Serves local trainers on a Unix
 * socket (node_ipc.c), keeps a control link to the scheduler (node.c), and
 * runs its part of every group through the reduce engine over peer links.
 */
#ifndef PR_NODE_H
#define PR_NODE_H

#include <sys/types.h>
#include <uv.h>

#include "daemon/base/auth.h"
#include "daemon/base/conf.h"

struct pr_node;

/* key: the cluster key (NULL: none); it must outlive the node. */
int pr_node_create(uv_loop_t *loop, struct pr_conf *conf,
                   const struct pr_auth_key *key, struct pr_node **out);
/* Applies reloadable keys from the (already swapped) conf. */
int pr_node_reload(struct pr_node *n);
void pr_node_destroy(struct pr_node *n);

/*
 * node.socket_group as a group id: a group name or a number, "" meaning
 * the daemon's own group (getegid()). main.c calls it for -t and before
 * starting, so an unknown group is a configuration error. 0, or -ENOENT
 * (no such group) or another negative errno from the lookup, with a
 * sentence for people in why[len].
 */
int pr_node_socket_gid(const struct pr_conf *c, gid_t *gid, char *why,
                       size_t len);

#endif
