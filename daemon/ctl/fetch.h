/* SPDX-License-Identifier: MIT */
/*
 * GET /metrics from one daemon over plain HTTP/1.0: a blocking client with
 * one deadline for connect, request and answer together. HOST is numeric
 * (IPv4, or IPv6 in brackets) or "localhost": no name is looked up, so the
 * only waits are on the network.
 */
#ifndef PR_CTL_FETCH_H
#define PR_CTL_FETCH_H

#include <stddef.h>

/* The largest answer read; a larger one fails with -EMSGSIZE. */
#define PR_CTL_MAX_ANSWER (16u << 20)

/*
 * Fetches http://hostport/metrics within timeout_ms. 0 and *body (the
 * answer's body: heap, NUL-terminated, the caller's to free), or a
 * negative errno with why[whylen] saying which step failed and how, for
 * a person: -EINVAL for a bad address, -ECONNREFUSED ("connection
 * refused": nothing listens there), -ETIMEDOUT, -EPROTO for an answer
 * that is not HTTP or not 200, -EMSGSIZE, -ENOMEM, or the socket's error.
 */
int pr_ctl_fetch(const char *hostport, int timeout_ms, char **body, char *why,
                 size_t whylen);

#endif
