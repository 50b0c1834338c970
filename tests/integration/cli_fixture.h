/* SPDX-License-Identifier: MIT */
/*
 * Shared by the preduced command-line suites (cli_fixture.c says what).
 * The tcase's directory cli_top is made and removed by the runner's
 * process (an unchecked fixture), so it goes even after a failed test;
 * inside it, cli_dir is the test's own, and cli_daemon_pid the daemon the
 * test started (killed by cli_teardown).
 */
#ifndef PR_CLI_FIXTURE_H
#define PR_CLI_FIXTURE_H

#include <stddef.h>
#include <sys/types.h>

#define CLI_RUN_TIMEOUT_MS 5000
#define CLI_OUT_MAX        (64 * 1024)
#define CLI_MAX_ARGV       160

extern char cli_top[64];
extern char cli_dir[96];
extern pid_t cli_daemon_pid;

struct cli_result {
    int status;
    char out[CLI_OUT_MAX];
    char err[CLI_OUT_MAX];
};

#define ck_assert_has(hay, needle)                                             \
    ck_assert_msg(strstr((hay), (needle)) != NULL, "expected \"%s\" in:\n%s",  \
                  (needle), (hay))

double cli_now_s(void);
void cli_sleep_ms(int ms);
const char *cli_preduced_path(void);
void cli_remove_tree(const char *path);
/* Unchecked fixture (cli_top), then checked fixture (cli_dir). */
void cli_top_setup(void);
void cli_top_teardown(void);
void cli_setup(void);
void cli_teardown(void);
/* cli_dir/name; the buffer stays the name's own for the whole test. */
const char *cli_path(const char *name);
/* Writes cli_dir/name atomically; returns its path. */
const char *cli_write_file(const char *name, const char *text);
/* The whole of a file, NUL-terminated, in buf ("" if absent). */
char *cli_read_into(const char *path, char *buf, size_t cap);
/* Forks preduced with args (NULL-terminated, argv[0] excluded). */
pid_t cli_spawn(const char *const *args, const char *out, const char *err);
/* pid's exit status, -SIGNUM, or -1000 after killing it at timeout_ms. */
int cli_wait_exit(pid_t pid, int timeout_ms);
/* Runs preduced to completion with the arguments (NULL-terminated). */
void cli_run(struct cli_result *r, ...);
/* Exit status 1, nothing on stdout and exactly `line` on stderr. */
void cli_check_fails(const struct cli_result *r, const char *line);
/* How many times s occurs in cli_dir/daemon.log. */
int cli_log_count(const char *s);
/* Waits up to 5 s for the log to hold s at least `times` times. */
void cli_wait_log(const char *s, int times);
/* Starts preduced with args, logging to daemon.log; waits until ready. */
void cli_daemon_start(const char *const *args);
/* SIGTERM: the daemon must exit 0 (it would not after dying of SIGHUP). */
void cli_daemon_stop(void);

#endif
