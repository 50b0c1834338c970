/* SPDX-License-Identifier: MIT */
#include "daemon/base/http_req.h"

#include <errno.h>
#include <string.h>

#include "daemon/base/metrics.h"

/* Splits "METHOD SP TARGET [SP VERSION]"; 0, or -EINVAL if malformed. */
static int parse_line(char *line, char **method, char **target, char **version)
{
    for (char *p = line; *p; p++)
        if ((unsigned char)*p < 0x20 || (unsigned char)*p == 0x7f)
            return -EINVAL;
    *method = line;
    char *sp = strchr(line, ' ');
    if (!sp || sp == line)
        return -EINVAL;
    *sp = '\0';
    *target = sp + 1;
    *version = NULL;
    sp = strchr(*target, ' ');
    if (sp) {
        *sp = '\0';
        *version = sp + 1;
        if (strchr(*version, ' ') || strncmp(*version, "HTTP/1.", 7) != 0 ||
            (*version)[7] < '0' || (*version)[7] > '9' || (*version)[8])
            return -EINVAL;
    }
    for (char *p = *method; *p; p++)
        if (*p < 'A' || *p > 'Z')
            return -EINVAL;
    if ((*target)[0] != '/')
        return -EINVAL;
    return 0;
}

/* Where the blank line ending the headers starts, or NULL. */
static const char *headers_end(const char *p, const char *end)
{
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        if (!nl)
            return NULL;
        if (nl == p || (nl == p + 1 && *p == '\r'))
            return p;
        p = nl + 1;
    }
    return NULL;
}

int pr_http_request_status(const char *req, size_t len, size_t cap, int eof,
                           int *head)
{
    *head = 0;
    const char *nl = memchr(req, '\n', len);
    if (!nl) {
        if (len >= cap || (eof && len > 0))
            return 400;
        return eof ? -ENODATA : 0;
    }
    /* The request line, NUL-terminated for parse_line; a longer one than
     * the connection's buffer holds was refused above. */
    char line[PR_METRICS_MAX_REQUEST];
    size_t n = (size_t)(nl - req);
    if (n >= sizeof(line))
        return 400;
    memcpy(line, req, n);
    line[n] = '\0';
    if (n > 0 && line[n - 1] == '\r')
        line[n - 1] = '\0';
    char *method, *target, *version;
    if (parse_line(line, &method, &target, &version) < 0)
        return 400;
    /* With a version, headers follow: wait for the blank line. */
    if (version && !headers_end(nl + 1, req + len) && !eof)
        return len >= cap ? 400 : 0;
    int is_head = !strcmp(method, "HEAD");
    if (strcmp(method, "GET") != 0 && !is_head)
        return 405;
    size_t plen = strcspn(target, "?");
    if (plen != strlen("/metrics") || strncmp(target, "/metrics", plen) != 0)
        return 404;
    *head = is_head;
    return 200;
}
