/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target: a config file and --set assignments (daemon/base/conf.c):
 * whatever the text, the parser either loads it or names the line and key
 * it refuses, and the struct it leaves can be validated, dumped and freed.
 * The input: the file's text, then after a NUL byte one --set per line.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "daemon/base/conf.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const uint8_t *nul = memchr(data, 0, size);
    size_t flen = nul ? (size_t)(nul - data) : size;
    /* The file, read back by its /proc path as pr_conf_load() opens it. */
    int fd = memfd_create("fuzz_conf", 0);
    if (fd < 0)
        return 0;
    if (write(fd, data, flen) != (ssize_t)flen) {
        close(fd);
        return 0;
    }
    char path[64];
    snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
    struct pr_conf c;
    struct pr_conf_err err;
    if (pr_conf_init(&c) == 0) {
        (void)pr_conf_load(&c, path, &err);
        if (nul) {
            char *sets = strndup((const char *)nul + 1, size - flen - 1);
            for (char *save = NULL, *line = strtok_r(sets, "\n", &save); line;
                 line = strtok_r(NULL, "\n", &save))
                (void)pr_conf_set(&c, line, &err);
            free(sets);
        }
        (void)pr_conf_validate(&c, &err);
        FILE *out = fopen("/dev/null", "w");
        if (out) {
            (void)pr_conf_dump(&c, out);
            fclose(out);
        }
        pr_conf_fini(&c);
    }
    close(fd);
    return 0;
}
