/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target: the bytes a client sends the metrics port
 * (daemon/base/http_req.c), judged as they arrive. The first byte chooses
 * the reads' size; after each read the request so far is judged with and
 * without end of input, each from a copy of exactly that length so that a
 * read past it is seen, until an answer is due. The verdict must be one of
 * the documented ones, never "wait" at end of input, a silent close only
 * for a client that sent nothing, and HEAD only with 200.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/base/http_req.h"
#include "daemon/base/metrics.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int judge(const uint8_t *data, size_t len, int eof)
{
    char *copy = malloc(len ? len : 1);
    if (!copy)
        return 0;
    memcpy(copy, data, len);
    int head = -1;
    int code =
        pr_http_request_status(copy, len, PR_METRICS_MAX_REQUEST, eof, &head);
    free(copy);
    if (code != 0 && code != -ENODATA && code != 200 && code != 400 &&
        code != 404 && code != 405)
        abort();
    if (eof && code == 0)
        abort(); /* nothing more will come: it must be decided */
    if (code == -ENODATA && (!eof || len > 0))
        abort(); /* only a client that sent nothing is closed unanswered */
    if (head != 0 && head != 1)
        abort();
    if (head && code != 200)
        abort();
    return code;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    size_t piece = (size_t)data[0] % 97 + 1;
    data++;
    size--;
    if (size > PR_METRICS_MAX_REQUEST)
        size = PR_METRICS_MAX_REQUEST; /* what the connection's buffer holds */
    for (size_t len = 0;; len += piece) {
        if (len > size)
            len = size;
        judge(data, len, 1);
        if (judge(data, len, 0) != 0 || len == size)
            break; /* answered (or closed): the connection reads no more */
    }
    return 0;
}
