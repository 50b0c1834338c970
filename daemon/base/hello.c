/* SPDX-License-Identifier: MIT */
#include "daemon/base/hello.h"

#include <errno.h>

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
    if (pr_auth_check_hello(key, challenge, &h->auth, proof, plen, &why) == 0)
        return 0;
    pr_warn("%s (%s): authentication failed: %s: closing", c->name, who, why);
    pr_conn_fail(c, -EACCES, "authentication failed");
    return -EACCES;
}
