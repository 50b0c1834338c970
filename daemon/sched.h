/*
 * The scheduler role: one per job. Node daemons connect over TCP; the
 * scheduler registers their workers, feeds READY events to the decision
 * core (sched_core.h), and sends each group it forms to the daemons that
 * host its members.
 *
 * Protocol with a node daemon, in order:
 *  1. node -> Hello{version, role NODE, name, data_addr}; scheduler ->
 *     Welcome{id = node id}, then PeerList to every node.
 *  2. node -> WorkerJoin{cookie, name} -> WorkerJoined{cookie, status, rank}
 *  3. node -> Ready{rank, version, nfloats, seq}: queued; or Reject.
 *  4. scheduler -> Group{id, members, ring, ...} to each daemon in the ring.
 *  5. node -> GroupDone{id, status}; a failure makes the scheduler send
 *     GroupAbort to the group's other daemons.
 *  6. node -> Cancel{rank, seq}: Reject(-ETIMEDOUT) if still queued.
 *  7. node -> WorkerLeave{rank}; Ping/Pong both ways every heartbeat_ms.
 * A node silent for node_timeout_ms, or whose connection drops, is removed
 * with its workers, and its groups in flight are aborted on the others.
 */
#ifndef PR_SCHED_H
#define PR_SCHED_H

#include <stdint.h>
#include <uv.h>

#include "daemon/conf.h"

struct pr_sched;

/* Listens on conf->sched_listen. *out on success. */
int pr_sched_create(uv_loop_t *loop, struct pr_conf *conf,
                    struct pr_sched **out);
/* Applies reloadable keys from the (already swapped) conf. */
int pr_sched_reload(struct pr_sched *s);
void pr_sched_destroy(struct pr_sched *s);
uint16_t pr_sched_port(const struct pr_sched *s);

#endif
