/* SPDX-License-Identifier: MIT */
/*
 * One HTTP/1.0 GET over a non-blocking socket, each wait a poll() bounded
 * by the deadline: connect, send the request, read until the daemon
 * closes (HTTP/1.0 without keep-alive), then check the status line and cut
 * the headers off.
 */
#include "daemon/ctl/fetch.h"

#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "daemon/base/conf.h"

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* Waits for `events` on fd until the deadline. 0, -ETIMEDOUT or -errno. */
static int wait_fd(int fd, short events, uint64_t deadline_ms)
{
    for (;;) {
        uint64_t now = now_ms();
        if (now >= deadline_ms)
            return -ETIMEDOUT;
        struct pollfd p = {.fd = fd, .events = events};
        int rc = poll(&p, 1, (int)(deadline_ms - now));
        if (rc > 0)
            return 0;
        if (rc == 0)
            return -ETIMEDOUT;
        if (errno != EINTR)
            return -errno;
    }
}

/* Connects to hostport: 0 and *out, or a negative errno. */
static int connect_to(const char *hostport, uint64_t deadline, int *out)
{
    char host[96], ports[8];
    uint16_t port;
    if (pr_conf_parse_hostport(hostport, host, sizeof(host), &port) < 0 ||
        port == 0)
        return -EINVAL;
    if (!strcmp(host, "localhost"))
        snprintf(host, sizeof(host), "127.0.0.1");
    snprintf(ports, sizeof(ports), "%u", port);
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_NUMERICHOST | AI_NUMERICSERV};
    struct addrinfo *ai;
    if (getaddrinfo(host, ports, &hints, &ai) != 0)
        return -EINVAL;
    int fd =
        socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    int rc = fd < 0 ? -errno : 0;
    if (rc == 0 && connect(fd, ai->ai_addr, ai->ai_addrlen) < 0) {
        rc = errno == EINPROGRESS ? wait_fd(fd, POLLOUT, deadline) : -errno;
        int err = 0;
        socklen_t len = sizeof(err);
        if (rc == 0 && getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0)
            rc = -errno;
        else if (rc == 0 && err)
            rc = -err;
    }
    freeaddrinfo(ai);
    if (rc < 0) {
        if (fd >= 0)
            close(fd);
        return rc;
    }
    *out = fd;
    return 0;
}

/* Sends all of req[len]. 0 or a negative errno. */
static int send_all(int fd, const char *req, int len, uint64_t deadline)
{
    int rc = 0;
    for (int off = 0; rc == 0 && off < len;) {
        ssize_t w = send(fd, req + off, (size_t)(len - off), MSG_NOSIGNAL);
        if (w > 0)
            off += (int)w;
        else if (errno == EAGAIN || errno == EINTR)
            rc = wait_fd(fd, POLLOUT, deadline);
        else
            rc = -errno;
    }
    return rc;
}

/*
 * Reads until the peer closes: 0 and *out (heap, NUL-terminated, *n bytes
 * before the NUL), or a negative errno.
 */
static int read_all(int fd, uint64_t deadline, char **out, size_t *outlen)
{
    char *buf = NULL;
    size_t n = 0, cap = 0;
    int rc = 0;
    while (rc == 0) {
        if (cap - n < 4096) {
            cap = cap ? cap * 2 : 65536;
            char *p = cap <= PR_CTL_MAX_ANSWER ? realloc(buf, cap + 1) : NULL;
            if (!p) {
                rc = cap > PR_CTL_MAX_ANSWER ? -EMSGSIZE : -ENOMEM;
                break;
            }
            buf = p;
        }
        ssize_t r = recv(fd, buf + n, cap - n, 0);
        if (r > 0)
            n += (size_t)r;
        else if (r == 0)
            break;
        else if (errno == EAGAIN || errno == EINTR)
            rc = wait_fd(fd, POLLIN, deadline);
        else
            rc = -errno;
    }
    if (rc < 0) {
        free(buf);
        return rc;
    }
    buf[n] = '\0';
    *out = buf;
    *outlen = n;
    return 0;
}

/* What a step's failure says: the step, then the cause. */
static int failed(int rc, const char *step, char *why, size_t whylen)
{
    snprintf(why, whylen, "%s: %s", step,
             rc == -ETIMEDOUT  ? "no answer in time"
             : rc == -EMSGSIZE ? "over 16 MiB"
                               : strerror(-rc));
    return rc;
}

int pr_ctl_fetch(const char *hostport, int timeout_ms, char **body, char *why,
                 size_t whylen)
{
    uint64_t deadline = now_ms() + (uint64_t)timeout_ms;
    int fd;
    int rc = connect_to(hostport, deadline, &fd);
    if (rc == -EINVAL) {
        snprintf(why, whylen,
                 "bad address (HOST:PORT, HOST numeric or localhost)");
        return rc;
    }
    if (rc == -ECONNREFUSED) {
        snprintf(why, whylen, "connection refused");
        return rc;
    }
    if (rc < 0)
        return failed(rc, "cannot connect", why, whylen);
    /* connect_to took hostport: a host of at most 95 bytes, so it fits. */
    char req[256];
    int len = snprintf(req, sizeof(req),
                       "GET /metrics HTTP/1.0\r\nHost: %s\r\n"
                       "User-Agent: preducectl\r\n\r\n",
                       hostport);
    rc = send_all(fd, req, len, deadline);
    const char *step = "sending the request";
    char *buf = NULL;
    size_t n = 0;
    if (rc == 0) {
        rc = read_all(fd, deadline, &buf, &n);
        step = "reading the answer";
    }
    close(fd);
    if (rc < 0)
        return failed(rc, step, why, whylen);
    char *end = strstr(buf, "\r\n\r\n");
    int code = 0;
    if (!end || sscanf(buf, "HTTP/1.%*d %d", &code) != 1)
        snprintf(why, whylen, "not an HTTP answer with metrics");
    else if (code == 404)
        snprintf(why, whylen, "HTTP 404: no /metrics there");
    else if (code != 200)
        snprintf(why, whylen, "the daemon answered with HTTP %d", code);
    if (!end || code != 200) {
        free(buf);
        return -EPROTO;
    }
    memmove(buf, end + 4, n - (size_t)(end + 4 - buf) + 1);
    *body = buf;
    return 0;
}
