/* SPDX-License-Identifier: MIT */
/*
 * The fuzz targets' inputs replayed without libFuzzer: linked with one
 * target (tests/fuzz/fuzz_*.c), it feeds LLVMFuzzerTestOneInput every file
 * named on the command line or found in a directory named there, one
 * call a file, in name order. make check (and make asan, under the
 * sanitizers) runs it over each target's seeds and its regression inputs
 * (tests/fuzz/regress/TARGET/: inputs that once crashed a target, kept so
 * that the bug stays fixed). An input that crashes ends the process, as
 * it would under libFuzzer; otherwise it prints
 * "TARGET: N passed, 0 failed".
 */
#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/*
 * Under a sanitizer, a report ends the process before main() can say
 * which input caused it: the death callback names it, so the log holds
 * the reproducer's path.
 */
#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/common_interface_defs.h>
#define REPLAY_DEATH_CALLBACK 1
#endif

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Inputs larger than this are refused: libFuzzer's default max_len x 64. */
#define REPLAY_MAX_INPUT (4096 * 64)

/* The input being run, for the death callback. */
static const char *current;

#ifdef REPLAY_DEATH_CALLBACK
static void name_input(void)
{
    if (current)
        fprintf(stderr, "replay: the input that failed: %s\n", current);
}
#endif

static int run_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "replay: fopen(%s): %s\n", path, strerror(errno));
        return -1;
    }
    uint8_t *buf = malloc(REPLAY_MAX_INPUT);
    size_t n = buf ? fread(buf, 1, REPLAY_MAX_INPUT, f) : 0;
    int err = !buf || ferror(f) || !feof(f);
    fclose(f);
    if (err) {
        fprintf(stderr, "replay: %s: unreadable or over %d bytes\n", path,
                REPLAY_MAX_INPUT);
        free(buf);
        return -1;
    }
    /* A copy of the exact length, so that ASan sees a read past its end. */
    uint8_t *exact = malloc(n ? n : 1);
    if (!exact) {
        free(buf);
        return -1;
    }
    memcpy(exact, buf, n);
    free(buf);
    current = path;
    LLVMFuzzerTestOneInput(exact, n);
    current = NULL;
    free(exact);
    return 0;
}

static int by_name(const struct dirent **a, const struct dirent **b)
{
    return strcmp((*a)->d_name, (*b)->d_name);
}

/* Replays path (a file, or every regular file in a directory): count. */
static int run_path(const char *path, int *count)
{
    struct stat st;
    if (stat(path, &st) < 0)
        return errno == ENOENT ? 0 : -1; /* no regressions yet: fine */
    if (!S_ISDIR(st.st_mode)) {
        (*count)++;
        return run_file(path);
    }
    struct dirent **names;
    int k = scandir(path, &names, NULL, by_name);
    if (k < 0)
        return -1;
    int rc = 0;
    for (int i = 0; i < k; i++) {
        char full[4096];
        if (names[i]->d_name[0] != '.' &&
            snprintf(full, sizeof(full), "%s/%s", path, names[i]->d_name) <
                (int)sizeof(full) &&
            stat(full, &st) == 0 && S_ISREG(st.st_mode)) {
            (*count)++;
            if (run_file(full) < 0)
                rc = -1;
        }
        free(names[i]);
    }
    free(names);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: %s NAME FILE_OR_DIR...\n", argv[0]);
        return 2;
    }
#ifdef REPLAY_DEATH_CALLBACK
    __sanitizer_set_death_callback(name_input);
#endif
    int count = 0, failed = 0;
    for (int i = 2; i < argc; i++)
        if (run_path(argv[i], &count) < 0)
            failed++;
    printf("%s: %d passed, %d failed\n", argv[1], count - failed, failed);
    return failed ? 1 : 0;
}
