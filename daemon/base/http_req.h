/* SPDX-License-Identifier: MIT */
/*
 * The metrics port's HTTP request, judged from the bytes read so far: the
 * one decoder of that port's untrusted input, apart from the connection's
 * I/O (metrics.c) so that it is fuzzed and tested alone
 * (tests/fuzz/fuzz_http.c).
 */
#ifndef PR_HTTP_REQ_H
#define PR_HTTP_REQ_H

#include <stddef.h>

/*
 * What to do with a request of which `len` bytes of a `cap`-byte buffer
 * have arrived; `eof`: the client will send nothing more. Returns 0 to
 * wait for more, -ENODATA to close without an answer (nothing was sent),
 * or the HTTP status to answer: 200 for GET or HEAD of /metrics (with or
 * without a query; *head says HEAD), 404 for another path, 405 for
 * another method, 400 for a malformed or over-long request. With a
 * version ("HTTP/1.x") the answer waits for the headers' blank line. Reads
 * only req[0..len).
 */
int pr_http_request_status(const char *req, size_t len, size_t cap, int eof,
                           int *head);

#endif
