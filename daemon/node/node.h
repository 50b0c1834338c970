/*
 * The node role: one preduced per machine. Serves local trainers on a Unix
 * socket (node_ipc.c), keeps a control link to the scheduler (node.c), and
 * runs its part of every group through the reduce engine over peer links.
 */
#ifndef PR_NODE_H
#define PR_NODE_H

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

#endif
