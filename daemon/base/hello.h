/* SPDX-License-Identifier: MIT */
/*
 * The checks every listener makes of a Hello, in one place: the protocol
 * version, and (on TCP links) the cluster key's proof. Each failure logs
 * one line naming the connection and the reason, fails the connection with
 * an Error the peer can read, and returns the errno; the caller then
 * returns without touching the connection further. Which roles and names
 * a listener accepts stays its own business (node_ipc.c, sched.c,
 * xport_handshake.c).
 */
#ifndef PR_HELLO_H
#define PR_HELLO_H

#include <stddef.h>
#include <stdint.h>

#include "daemon/base/auth.h"
#include "daemon/base/conn.h"

/*
 * A job as a trainer's Hello names it (Hello.job, Hello.settings) and a
 * node passes it on in WorkerJoin: a name of at most PR_JOB_NAME_MAX
 * printable bytes, and at most PR_JOB_SETTINGS_MAX "key=value" settings of
 * at most PR_JOB_SETTING_MAX bytes each.
 */
#define PR_JOB_NAME_MAX     63
#define PR_JOB_SETTINGS_MAX 16
#define PR_JOB_SETTING_MAX  127

/* 0, or -EPROTO: the peer speaks another protocol version. */
int pr_hello_version(struct pr_conn *c, const Pr__V1__Hello *h);

/*
 * The Hello's proof against `challenge` (the nonce this side sent) under
 * `key` (NULL: no authentication, always 0). On success proof[*plen] is
 * this side's answer for its Welcome. `who` names the peer in the log
 * line ("node 'a'", "node 3"). 0, or -EACCES.
 */
int pr_hello_auth(struct pr_conn *c, const struct pr_auth_key *key,
                  const uint8_t challenge[PR_AUTH_NONCE_LEN],
                  const Pr__V1__Hello *h, const char *who,
                  uint8_t proof[PR_AUTH_PROOF_LEN], size_t *plen);

/*
 * The accepting side, once its Welcome to h is sent: with a key that
 * seals, the connection is sealed from here on (seal.h). 0 (also without
 * sealing), or < 0 with c closed and the reason logged.
 */
int pr_hello_seal(struct pr_conn *c, const struct pr_auth_key *key,
                  const uint8_t challenge[PR_AUTH_NONCE_LEN],
                  const Pr__V1__Hello *h);
/*
 * Either side, before the handshake's first frame: with a key that seals,
 * the frames are hashed for the keys (pr_conn_transcript_start). 0, or
 * -ENOMEM with c closed.
 */
int pr_hello_transcript(struct pr_conn *c, const struct pr_auth_key *key);

/*
 * Whether this side's heartbeat settings (scheduler.heartbeat_ms and
 * node_timeout_ms) and the other side's, as its Hello or Welcome said
 * them, differ: 1 with what differs in buf ("heartbeat_ms 1000 here, 200
 * there"), 0 when they agree or the other side did not say (0s). Each
 * side judges the other dead after its own timeout of silence while the
 * other pings at its own period, so settings that differ make one side
 * drop a live link, or notice a dead one late.
 */
int pr_hello_timing_differs(uint32_t my_heartbeat_ms, uint32_t my_timeout_ms,
                            uint32_t their_heartbeat_ms,
                            uint32_t their_timeout_ms, char *buf, size_t len);

#endif
