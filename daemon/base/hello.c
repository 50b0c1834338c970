/* SPDX-License-Identifier: MIT */
#include "daemon/base/hello.h"

#include <errno.h>
#include <string.h>

#include "daemon/base/log.h"

int pr_hello_version(struct pr_conn *c, const Pr__V1__Hello *h)
{
    if (h->version == PR_PROTO_VERSION)
        return 0;
    pr_warn("%s: protocol version %u, this daemon speaks %u: closing", c->name,
            h->version, PR_PROTO_VERSION);
    pr_conn_fail(c, -EPROTO, "protocol version mismatch");
    return -EPROTO;
}

int pr_hello_auth(struct pr_conn *c, const struct pr_auth_key *key,
                  const uint8_t challenge[PR_AUTH_NONCE_LEN],
                  const Pr__V1__Hello *h, const char *who,
                  uint8_t proof[PR_AUTH_PROOF_LEN], size_t *plen)
{
    const char *why;
    if (pr_auth_check_hello(key, challenge, &h->auth, h->seal, proof, plen,
                            &why) == 0)
        return 0;
    pr_warn("%s (%s): authentication failed: %s: closing", c->name, who, why);
    pr_conn_fail(c, -EACCES, "authentication failed");
    return -EACCES;
}

int pr_hello_seal(struct pr_conn *c, const struct pr_auth_key *key,
                  const uint8_t challenge[PR_AUTH_NONCE_LEN],
                  const Pr__V1__Hello *h)
{
    if (!key || !key->seal)
        return 0;
    /* pr_hello_auth() checked both: a 64-byte auth, an offered cipher. */
    int rc = pr_conn_seal(c, h->seal, key, 'S', challenge, h->auth.data);
    if (rc < 0) {
        pr_err("%s: cannot encrypt the link: %s: closing", c->name,
               strerror(-rc));
        pr_conn_close(c, rc);
    }
    return rc;
}

int pr_hello_transcript(struct pr_conn *c, const struct pr_auth_key *key)
{
    if (!key || !key->seal)
        return 0;
    int rc = pr_conn_transcript_start(c);
    if (rc < 0) {
        pr_err("%s: cannot start the handshake's transcript: %s: closing",
               c->name, strerror(-rc));
        pr_conn_close(c, rc);
    }
    return rc;
}

int pr_hello_timing_differs(uint32_t my_heartbeat_ms, uint32_t my_timeout_ms,
                            uint32_t their_heartbeat_ms,
                            uint32_t their_timeout_ms, char *buf, size_t len)
{
    int n = 0;

    if (len)
        buf[0] = '\0';
    if (their_heartbeat_ms == 0 && their_timeout_ms == 0)
        return 0;
    if (their_heartbeat_ms != my_heartbeat_ms)
        n += snprintf(buf, len, "scheduler.heartbeat_ms %u here, %u there",
                      my_heartbeat_ms, their_heartbeat_ms);
    if (their_timeout_ms != my_timeout_ms && (size_t)n < len)
        snprintf(buf + n, len - (size_t)n,
                 "%sscheduler.node_timeout_ms %u here, %u there", n ? "; " : "",
                 my_timeout_ms, their_timeout_ms);
    return their_heartbeat_ms != my_heartbeat_ms ||
           their_timeout_ms != my_timeout_ms;
}
