/* SPDX-License-Identifier: MIT */
/*
 * Idle connections for the strangers tests and the load test: sockets that
 * connect to a daemon's listener and never send a byte, as a client that
 * never says hello (or never sends its HTTP request) would.
 */
#ifndef PR_TEST_IDLE_H
#define PR_TEST_IDLE_H

#include <stdint.h>
#include <sys/types.h>

/*
 * One connection to the Unix socket at `path` (path != NULL) or to
 * 127.0.0.1:port. With `nonblock` the connect may still be in progress.
 * The descriptor, or -errno.
 */
int h_idle_dial(const char *path, uint16_t port, int nonblock);
/* n blocking connections into fds[]; 0, or -errno (those made are open). */
int h_idle_open(const char *path, uint16_t port, int n, int *fds);
/*
 * Reads and drops what each fds[i] has (a challenge), without blocking:
 * 1 if the daemon has closed it, 0 if it is still open.
 */
int h_idle_closed(int fd);
/* How many of fds[0..n) the daemon still holds open. */
int h_idle_count_open(const int *fds, int n);
/* Polls up to timeout_ms until at most `most` of fds[] are open: 0/-1. */
int h_idle_wait_open_at_most(const int *fds, int n, int most, int timeout_ms);
void h_idle_close(int *fds, int n);

/* VmRSS of a process in KiB (/proc/PID/status), or -1. */
long h_rss_kb(pid_t pid);
/* Open descriptors of a process (/proc/PID/fd), or -1. */
int h_fd_count(pid_t pid);
/* Raises RLIMIT_NOFILE's soft limit to at least `want` (or the hard one). */
int h_raise_nofile(long want);

#endif
