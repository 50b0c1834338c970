/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target: chunks from peers, as a transport hands them to the
 * reduce engine (pr_engine_on_chunk), against a running group and the
 * stash. The bytes choose each chunk's header fields (mostly near valid
 * ones, so the checks past the first are reached) and its sender; groups
 * start, links go down and the loop runs in between. Nothing a peer sends
 * may crash the daemon, read or write outside the tensors, or leak
 * (AddressSanitizer and UBSan watch); what the engine accepts it must
 * also finish. The groups run in fp32, bf16 or int8 (with an err vector):
 * chunks mostly in the group's encoding, some in another or in one that
 * is none, their payloads decoded from whatever bytes they carry.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "daemon/engine/engine.h"
#include "daemon/base/log.h"
#include "tests/fuzz/fuzz_input.h"
#include "tests/fuzz/fuzz_links.h"

#define TOTAL 1000
#define CHUNK 64
#define NPEER 3

static struct fuzz_link links[NPEER];

static struct pr_link *resolve(void *ctx, uint32_t node)
{
    (void)ctx;
    return node >= 100 && node < 100 + NPEER ? &links[node - 100].base : NULL;
}

/* done() calls per group (arg points at its counter). */
static int calls[2];

static void done_cb(void *arg, uint64_t id, int status)
{
    (void)id;
    (void)status;
    ++*(int *)arg;
}

/* Starts group `id` at position 1 of the ring 100, 101, 102: 1 if so. */
static uint32_t wire; /* the groups' encoding */
static float err[2][TOTAL];

static int start_group(struct pr_engine *e, uint64_t id, float *x,
                       struct pr_engine_part *part, int in_place, int *calls_of)
{
    static const uint32_t ring[3] = {100, 101, 102};
    part->data = x;
    part->len = TOTAL;
    struct pr_engine_member mb = {.rank = 1,
                                  .weight = 1.0 / 3.0,
                                  .parts = part,
                                  .nparts = 1,
                                  .in_place = in_place,
                                  .err = err[id == 12]};
    struct pr_engine_group g = {.id = id,
                                .total = TOTAL,
                                .k = 3,
                                .m = 3,
                                .pos = 1,
                                .ring = ring,
                                .local = &mb,
                                .nlocal = 1,
                                .timeout_ms = 1000,
                                .wire = wire,
                                .done = done_cb,
                                .arg = calls_of};
    return pr_engine_start(e, &g) == 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static float x[2][TOTAL], payload[2 * TOTAL];
    static struct pr_engine_part parts[2];
    pr_log_set_level(PR_LOG_ERROR);
    uv_loop_t loop;
    uv_loop_init(&loop);
    for (int i = 0; i < NPEER; i++) {
        links[i].base.ops = &fuzz_link_ops;
        links[i].base.node_id = 100 + (uint32_t)i;
        links[i].base.kind = "fuzz";
        links[i].q = NULL;
    }
    for (size_t i = 0; i < 2 * TOTAL; i++)
        payload[i] = (float)i;
    memset(err, 0, sizeof(err));
    struct pr_engine *e =
        pr_engine_create(&loop, CHUNK, 64 * 1024, resolve, NULL);
    pr_engine_set_direct(e, 1);
    struct fuzz_cursor c = {data, size};
    uint32_t first = fuzz_take(&c, 1);
    int in_place = (int)first & 1;
    wire = (first >> 1) % PR_WIRE_COUNT;
    calls[0] = calls[1] = 0;
    int started[2] = {start_group(e, 10, x[0], &parts[0], in_place, &calls[0]),
                      0};
    int started2 = 0;
    while (c.n > 0) {
        uint32_t op = fuzz_take(&c, 1);
        if (op >= 0xf8) {
            /* A second group (replays what was stashed for it). */
            if (!started2) {
                started[1] =
                    start_group(e, 12, x[1], &parts[1], !in_place, &calls[1]);
                started2 = 1;
            }
            continue;
        }
        if (op >= 0xf4) {
            pr_engine_link_down(e, 100 + op % NPEER, -ECONNRESET);
            continue;
        }
        if (op >= 0xf0) {
            fuzz_links_complete(links, NPEER, op & 1 ? 0 : -EIO);
            uv_run(&loop, UV_RUN_NOWAIT);
            continue;
        }
        struct pr_chunk_hdr h;
        h.group_id = 9 + (op & 3); /* 9 stale, 10 running, 11 early, 12 */
        uint32_t from = 100 + fuzz_take(&c, 1) % 4; /* 103: no such peer */
        h.step = fuzz_take(&c, 1) % 6;
        h.seg = fuzz_take(&c, 1) % 4;
        h.total = op & 4 ? fuzz_take(&c, 4) : TOTAL;
        h.off = fuzz_take(&c, 2);
        h.nfloats = op & 8 ? fuzz_take(&c, 4) : fuzz_take(&c, 1);
        uint32_t enc = fuzz_take(&c, 1);
        h.enc = enc < 0xc0 ? wire : enc % (PR_WIRE_COUNT + 1);
        if (op & 16)
            h.off = (uint64_t)fuzz_take(&c, 4) << 32 | fuzz_take(&c, 4);
        /* The payload: at most what a transport could have received. */
        if (h.nfloats > TOTAL)
            h.nfloats = op & 32 ? h.nfloats % (TOTAL + 1) : TOTAL;
        pr_engine_on_chunk(e, from, &h, payload + (op >> 6) % 4);
    }
    fuzz_links_complete(links, NPEER, 0);
    uv_run(&loop, UV_RUN_NOWAIT);
    pr_engine_destroy(e);
    fuzz_links_complete(links, NPEER, -ECANCELED);
    uv_run(&loop, UV_RUN_DEFAULT);
    uv_loop_close(&loop);
    /* Every group started was answered, once; no other. */
    for (int i = 0; i < 2; i++)
        if (calls[i] != started[i])
            abort();
    return 0;
}
