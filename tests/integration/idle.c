/* SPDX-License-Identifier: MIT */
#include "tests/integration/idle.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

int h_idle_dial(const char *path, uint16_t port, int nonblock)
{
    int type = SOCK_STREAM | SOCK_CLOEXEC | (nonblock ? SOCK_NONBLOCK : 0);
    int fd = socket(path ? AF_UNIX : AF_INET, type, 0);
    if (fd < 0)
        return -errno;
    int rc;
    if (path) {
        struct sockaddr_un sa = {.sun_family = AF_UNIX};
        snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
        rc = connect(fd, (struct sockaddr *)&sa, sizeof(sa));
    } else {
        struct sockaddr_in sa = {.sin_family = AF_INET,
                                 .sin_port = htons(port)};
        sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        rc = connect(fd, (struct sockaddr *)&sa, sizeof(sa));
    }
    /* A Unix socket's EAGAIN is a full backlog: not connected at all. */
    if (rc < 0 && !(nonblock && errno == EINPROGRESS)) {
        rc = -errno;
        close(fd);
        return rc;
    }
    return fd;
}

int h_idle_open(const char *path, uint16_t port, int n, int *fds)
{
    for (int i = 0; i < n; i++)
        fds[i] = -1;
    for (int i = 0; i < n; i++) {
        fds[i] = h_idle_dial(path, port, 0);
        if (fds[i] < 0)
            return fds[i];
    }
    return 0;
}

int h_idle_closed(int fd)
{
    if (fd < 0)
        return 1;
    char buf[512];
    for (;;) {
        ssize_t r = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
        if (r > 0)
            continue;
        if (r == 0)
            return 1;
        return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR ? 0
                                                                         : 1;
    }
}

int h_idle_count_open(const int *fds, int n)
{
    int open = 0;
    for (int i = 0; i < n; i++)
        open += !h_idle_closed(fds[i]);
    return open;
}

int h_idle_wait_open_at_most(const int *fds, int n, int most, int timeout_ms)
{
    for (int waited = 0;; waited += 20) {
        if (h_idle_count_open(fds, n) <= most)
            return 0;
        if (waited >= timeout_ms)
            return -1;
        struct timespec ts = {0, 20000000};
        nanosleep(&ts, NULL);
    }
}

void h_idle_close(int *fds, int n)
{
    for (int i = 0; i < n; i++) {
        if (fds[i] >= 0)
            close(fds[i]);
        fds[i] = -1;
    }
}

long h_rss_kb(pid_t pid)
{
    char path[64], line[256];
    snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    long kb = -1;
    while (fgets(line, sizeof(line), f))
        if (sscanf(line, "VmRSS: %ld kB", &kb) == 1)
            break;
    fclose(f);
    return kb;
}

int h_fd_count(pid_t pid)
{
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/fd", (int)pid);
    DIR *d = opendir(path);
    if (!d)
        return -1;
    int n = 0;
    for (struct dirent *e; (e = readdir(d));)
        n += e->d_name[0] != '.';
    closedir(d);
    return n;
}

int h_raise_nofile(long want)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) < 0)
        return -errno;
    if (rl.rlim_cur != RLIM_INFINITY && (long)rl.rlim_cur < want) {
        rl.rlim_cur = rl.rlim_max == RLIM_INFINITY || (long)rl.rlim_max > want
                          ? (rlim_t)want
                          : rl.rlim_max;
        if (setrlimit(RLIMIT_NOFILE, &rl) < 0)
            return -errno;
    }
    return 0;
}
