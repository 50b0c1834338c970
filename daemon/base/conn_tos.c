/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <linux/pkt_sched.h>
#include <netinet/in.h>
#include <netinet/ip.h>
#include <sys/socket.h>

#include "daemon/base/conn.h"
#include "daemon/base/conn_int.h"

/*
 * IPTOS_LOWDELAY in the TOS byte (IPv4, and IPv4 through an IPv6 socket
 * of a dual-stack listener) or the traffic class (IPv6) of c's packets,
 * and the socket priority TC_PRIO_INTERACTIVE (Linux derives it from
 * IP_TOS, not from IPV6_TCLASS), which the host's pfifo_fast sends first;
 * routers and switches that honour the byte can do the same. Used for the
 * few messages a reduce waits on (the scheduler's, an express
 * connection's small chunks): where a slow link's queue is full of
 * another reduce's megabytes, they would otherwise wait the whole queue.
 */
int pr_conn_lowdelay(struct pr_conn *c)
{
    uv_os_fd_t fd;
    int rc = uv_fileno(&c->h.handle, &fd);
    if (rc < 0)
        return rc;
    struct sockaddr_storage ss;
    socklen_t len = sizeof(ss);
    if (getsockname(fd, (struct sockaddr *)&ss, &len) < 0)
        return -errno;
    int tos = IPTOS_LOWDELAY, prio = TC_PRIO_INTERACTIVE;
    if (ss.ss_family == AF_INET6) {
        const struct in6_addr *a = &((struct sockaddr_in6 *)&ss)->sin6_addr;
        if (setsockopt(fd, IPPROTO_IPV6, IPV6_TCLASS, &tos, sizeof(tos)) < 0)
            return -errno;
        /* An IPv4 peer's packets take the TOS byte, not the class. */
        if (IN6_IS_ADDR_V4MAPPED(a) &&
            setsockopt(fd, IPPROTO_IP, IP_TOS, &tos, sizeof(tos)) < 0)
            return -errno;
    } else if (ss.ss_family != AF_INET) {
        return -EAFNOSUPPORT;
    } else if (setsockopt(fd, IPPROTO_IP, IP_TOS, &tos, sizeof(tos)) < 0) {
        return -errno;
    }
    return setsockopt(fd, SOL_SOCKET, SO_PRIORITY, &prio, sizeof(prio)) < 0
               ? -errno
               : 0;
}
