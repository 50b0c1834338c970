/* SPDX-License-Identifier: MIT */
/*
 * A trainer as a user of an installed libpreduce writes it, built by
 * tests/ops/pkgconfig.sh with `pkg-config --cflags --libs preduce` only:
 * one tensor filled with VALUE, one reduce, and a check that every float
 * came back as EXPECT from a group of MEMBERS.
 *
 *   hello SOCKET NAME VALUE EXPECT MEMBERS
 *
 * Prints one line and exits 0 when all of it holds, 1 otherwise.
 */
#include <math.h>
#include <preduce.h>
#include <stdio.h>
#include <stdlib.h>

#define NFLOATS    4096
#define TIMEOUT_MS 10000

int main(int argc, char **argv)
{
    if (argc != 6) {
        fprintf(stderr, "usage: hello SOCKET NAME VALUE EXPECT MEMBERS\n");
        return 2;
    }
    float value = strtof(argv[3], NULL), expect = strtof(argv[4], NULL);
    size_t members = strtoul(argv[5], NULL, 10);
    preduce_client_t *c = NULL;
    preduce_tensor_t *t = NULL;
    int rc = preduce_connect(argv[1], argv[2], TIMEOUT_MS, &c);
    if (rc == 0)
        rc = preduce_tensor_create(c, NFLOATS, TIMEOUT_MS, &t);
    if (rc == 0) {
        float *x = preduce_tensor_data(t);
        for (size_t i = 0; i < NFLOATS; i++)
            x[i] = value;
        rc = preduce_reduce(c, &t, 1, TIMEOUT_MS);
    }
    if (rc < 0) {
        fprintf(stderr, "hello %s: %s\n", argv[2], preduce_strerror(rc));
        preduce_close(c);
        return 1;
    }
    const float *x = preduce_tensor_data(t);
    size_t bad = 0;
    for (size_t i = 0; i < NFLOATS; i++)
        if (fabsf(x[i] - expect) > 1e-6f)
            bad++;
    size_t size = preduce_result_size(preduce_last_result(c));
    printf("hello %s: rank %d, group of %zu, x[0] = %g, %zu of %d floats "
           "not %g\n",
           argv[2], preduce_rank(c), size, x[0], bad, NFLOATS, expect);
    preduce_close(c);
    return bad == 0 && size == members ? 0 : 1;
}
