/* SPDX-License-Identifier: MIT */
/*
 * The trainers' socket file (node.socket): its parent directories, a stale
 * file left by a daemon that died (replaced) or a live daemon's (refused:
 * taking its path would cut it off), the listener bound there, and at
 * close the removal of the file this daemon bound and no other. The
 * socket is bound under a temporary name beside node.socket, given its
 * owner and mode (node.socket_group, 0660), made to listen, and only then
 * linked into place: the file at node.socket accepts from the moment it
 * exists (a script that waits for the file may connect at once) and is
 * never open to more than those (bound under umask 0177, then chmod'ed);
 * the name is put in place with link(), which fails where another daemon
 * has bound the path in the meantime. The descriptor is this file's own, handed
 * to libuv with uv_pipe_open(): a pipe libuv bound itself is unlinked by
 * name when it closes, whatever file has that name by then (another
 * daemon's, after ours was replaced). What connects is node_ipc.c's,
 * through the callback it passes.
 */
#include <errno.h>
#include <grp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "daemon/base/log.h"
#include "daemon/node/node.h"
#include "daemon/node/node_int.h"

/* The trainers' socket: its owner and the group may connect. */
#define SOCKET_MODE    0660
#define SOCKET_BACKLOG 128

int pr_node_socket_gid(const struct pr_conf *c, gid_t *gid, char *why,
                       size_t len)
{
    const char *name = c->node_socket_group ? c->node_socket_group : "";
    if (!name[0]) {
        *gid = getegid();
        return 0;
    }
    char *end;
    errno = 0;
    unsigned long v = strtoul(name, &end, 10);
    if (name[0] >= '0' && name[0] <= '9' && *end == '\0' && errno == 0 &&
        v < (gid_t)-1) {
        *gid = (gid_t)v;
        return 0;
    }
    /* getgrnam_r wants room for the group's members: grow until it fits. */
    struct group gr, *found = NULL;
    size_t buflen = 16384;
    char *buf = NULL;
    int rc;
    for (;;) {
        char *nbuf = realloc(buf, buflen);
        if (!nbuf) {
            rc = ENOMEM;
            break;
        }
        buf = nbuf;
        rc = getgrnam_r(name, &gr, buf, buflen, &found);
        if (rc != ERANGE || buflen >= (1u << 24))
            break;
        buflen *= 2;
    }
    if (rc == 0 && found)
        *gid = found->gr_gid;
    free(buf);
    /* Some NSS modules say "no such group" with an errno (getgrnam_r(3)). */
    if (rc == ENOENT || rc == ESRCH)
        rc = 0;
    if (rc == 0 && !found) {
        snprintf(why, len, "no group named '%s' (getent group %s)", name, name);
        return -ENOENT;
    }
    if (rc != 0) {
        snprintf(why, len, "looking up group '%s': %s", name, strerror(rc));
        return -rc;
    }
    return 0;
}

/*
 * Gives the socket file its group and mode; 0 or the error, logged. Only
 * the group changes: the owner stays the daemon's user.
 */
static int set_access(const struct pr_node *n, const char *path)
{
    char why[256];
    gid_t gid;
    int rc = pr_node_socket_gid(n->conf, &gid, why, sizeof(why));
    if (rc < 0) {
        pr_err("trainer socket: node.socket_group: %s", why);
        return rc;
    }
    if (n->conf->node_socket_group[0] && chown(path, (uid_t)-1, gid) < 0) {
        rc = -errno;
        pr_err("trainer socket: chown(%s, -1, %u) for node.socket_group %s "
               "failed: %s (the daemon must be root or a member of the "
               "group)",
               path, (unsigned)gid, n->conf->node_socket_group, strerror(-rc));
        return rc;
    }
    if (chmod(path, SOCKET_MODE) < 0) {
        rc = -errno;
        pr_err("trainer socket: chmod(%s, %o) failed: %s", path, SOCKET_MODE,
               strerror(-rc));
        return rc;
    }
    return 0;
}

static int mkdir_parent(const char *path)
{
    char dir[256];
    snprintf(dir, sizeof(dir), "%s", path);
    char *slash = strrchr(dir, '/');
    if (!slash || slash == dir)
        return 0;
    *slash = '\0';
    for (char *p = dir + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        if (mkdir(dir, 0755) < 0 && errno != EEXIST)
            return -errno;
        *p = '/';
    }
    if (mkdir(dir, 0755) < 0 && errno != EEXIST)
        return -errno;
    return 0;
}

/*
 * What is at the socket path before this daemon binds it: 0 when nothing
 * is, or a stale socket file that nobody answers on (removed, with a log
 * line); -EADDRINUSE when a daemon answers there (taking its path would
 * leave it running but unreachable); -EEXIST when it is no socket.
 */
static int clear_socket_path(const char *path)
{
    struct stat st;
    if (lstat(path, &st) < 0)
        return errno == ENOENT ? 0 : -errno;
    if (!S_ISSOCK(st.st_mode)) {
        pr_err("trainer socket: %s exists and is not a socket: not "
               "starting",
               path);
        return -EEXIST;
    }
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    memcpy(sa.sun_path, path, strlen(path) + 1);
    int rc = connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0 ? 0 : -errno;
    close(fd);
    /* EAGAIN: its backlog is full, so a daemon is there (and busy). */
    if (rc == 0 || rc == -EAGAIN) {
        pr_err("trainer socket: %s is in use by a running daemon: not "
               "starting (give this one another node.socket)",
               path);
        return -EADDRINUSE;
    }
    if (rc != -ECONNREFUSED) {
        pr_err("trainer socket: probing %s: connect: %s", path, strerror(-rc));
        return rc;
    }
    pr_info("trainer socket: %s is stale (nobody answers): replacing it", path);
    if (unlink(path) < 0 && errno != ENOENT) {
        rc = -errno;
        pr_err("trainer socket: unlink %s: %s", path, strerror(-rc));
        return rc;
    }
    return 0;
}

/*
 * A socket listening at `path` (see the top of this file): its descriptor,
 * or a negative errno (logged).
 */
static int bind_listen(struct pr_node *n, const char *path)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    char tmp[sizeof(sa.sun_path)];
    /* Beside it; a path too long for a suffix is bound where it goes. */
    int len = snprintf(tmp, sizeof(tmp), "%s.%ld", path, (long)getpid());
    const char *at = len > 0 && (size_t)len < sizeof(tmp) ? tmp : path;
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        int rc = -errno;
        pr_err("trainer socket: socket: %s", strerror(-rc));
        return rc;
    }
    memcpy(sa.sun_path, at, strlen(at) + 1);
    if (at != path)
        unlink(at); /* a temporary name a dead daemon of this pid left */
    /* Created 0600: nobody else may connect before set_access(). */
    mode_t old = umask(0177);
    int rc = bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0 ? 0 : -errno;
    umask(old);
    if (rc < 0) {
        pr_err("trainer socket: bind %s: %s", at, strerror(-rc));
        close(fd);
        return rc;
    }
    rc = set_access(n, at);
    if (rc == 0 && listen(fd, SOCKET_BACKLOG) < 0) {
        rc = -errno;
        pr_err("trainer socket: listen on %s: %s", at, strerror(-rc));
    }
    /*
     * link(), not rename(): a daemon that bound `path` since
     * clear_socket_path() looked is not replaced (EEXIST).
     */
    if (rc == 0 && at != path && link(at, path) < 0) {
        rc = errno == EEXIST ? -EADDRINUSE : -errno;
        pr_err("trainer socket: %s: %s", path,
               rc == -EADDRINUSE ? "another daemon bound it meanwhile"
                                 : strerror(-rc));
    }
    if (at != path || rc < 0)
        unlink(at);
    if (rc < 0) {
        close(fd);
        return rc;
    }
    return fd;
}

/* Only the file this daemon bound: another's would be cut off. */
static void socket_unlink(struct pr_node *n)
{
    struct stat st;
    if (n->ipc_ino && stat(n->conf->node_socket, &st) == 0 &&
        st.st_dev == n->ipc_dev && st.st_ino == n->ipc_ino)
        unlink(n->conf->node_socket);
    n->ipc_ino = 0;
}

int pr_node_socket_open(struct pr_node *n, uv_connection_cb on_connection)
{
    const char *path = n->conf->node_socket;
    struct sockaddr_un sa;
    if (strlen(path) >= sizeof(sa.sun_path)) {
        pr_err("trainer socket: %s: %zu bytes, a Unix socket path holds "
               "%zu at most",
               path, strlen(path), sizeof(sa.sun_path) - 1);
        return -ENAMETOOLONG;
    }
    int rc = mkdir_parent(path);
    if (rc < 0) {
        pr_err("trainer socket: mkdir for %s: %s", path, strerror(-rc));
        return rc;
    }
    rc = clear_socket_path(path);
    if (rc < 0)
        return rc;
    uv_pipe_init(n->loop, &n->ipc, 0);
    n->ipc.data = n;
    n->ipc_open = 1;
    int fd = bind_listen(n, path);
    if (fd < 0)
        return fd;
    struct stat st;
    if (stat(path, &st) == 0) {
        n->ipc_dev = st.st_dev;
        n->ipc_ino = st.st_ino;
    }
    rc = uv_pipe_open(&n->ipc, fd);
    if (rc < 0) {
        close(fd);
    } else {
        rc = uv_listen((uv_stream_t *)&n->ipc, SOCKET_BACKLOG, on_connection);
    }
    if (rc < 0) {
        pr_err("trainer socket: listen on %s: %s", path, uv_strerror(rc));
        socket_unlink(n);
        return rc;
    }
    pr_info("trainers connect to %s (mode %o%s%s)", path, SOCKET_MODE,
            n->conf->node_socket_group[0] ? ", group " : "",
            n->conf->node_socket_group);
    return 0;
}

static void ipc_closed_cb(uv_handle_t *h)
{
    struct pr_node *n = h->data;
    if (--n->handles == 0)
        free(n);
}

void pr_node_socket_close(struct pr_node *n)
{
    if (!n->ipc_open)
        return;
    n->handles++;
    uv_close((uv_handle_t *)&n->ipc, ipc_closed_cb);
    socket_unlink(n);
}
