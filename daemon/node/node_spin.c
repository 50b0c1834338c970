/* SPDX-License-Identifier: MIT */
/*
 * Busy polling while a reduce is in flight (node.busy_poll_us): the loop
 * polls without sleeping (an idle handle makes libuv's epoll_wait return
 * at once) for a while after each sign of progress, as long as a trainer
 * of this node waits for its reduce.
 *
 * Why: a reduce is a chain of messages between processes (trainer, node,
 * scheduler, peer nodes), each a wake-up of a sleeping process, and over
 * TCP every chunk is several more. A CPU that went idle to wait has to be
 * woken by an interrupt from another one, which on a virtual machine is a
 * trip through the hypervisor: tens of microseconds each time. Polling
 * keeps the CPU awake and the next message is seen at the next
 * epoll_wait, as MPI's progress engine and NCCL's proxy threads do.
 *
 * Bounded: polling stops when no trainer of this node has a reduce in
 * flight (its trainer then wants the CPU) and when nothing happened for
 * busy_poll_us, so a group that waits for a straggler or a slow link
 * costs at most that much CPU per wait. Progress is a trainer's Reduce,
 * the scheduler's Group (pr_node_spin) or bytes read on a peer link (the
 * transports' counters, read here). 0 turns it off.
 *
 * Only on a spare CPU: a spell starts only while fewer tasks are runnable
 * than the machine has CPUs (/proc/loadavg, looked at once per
 * SPARE_CHECK_NS). Trainers that compute on the CPU then keep every core:
 * on 2 cores with 4 CPU-bound trainers, polling took a tenth of their
 * step time (docs/benchmarks.md); trainers that wait for a GPU, or for
 * their reduce, leave CPUs idle, and polling runs.
 */
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include "daemon/node/node_int.h"
#include "daemon/xport/rdma/rdma.h"

/* How long a look at the runnable tasks holds (a spell starts per reduce). */
#define SPARE_CHECK_NS (5 * 1000 * 1000)

/*
 * 1 when a CPU is spare: the runnable tasks, this daemon among them, are
 * at most the CPUs online. 1 too when /proc/loadavg cannot be read (the
 * setting's word holds).
 */
static int spare_cpu(void)
{
    char buf[128];
    int fd = open("/proc/loadavg", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 1;
    ssize_t len = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (len <= 0)
        return 1;
    buf[len] = '\0';
    /* "0.52 0.58 0.59 3/278 4000": the fourth field is running/total. */
    char *p = buf;
    for (int field = 0; field < 3 && p; field++) {
        p = strchr(p, ' ');
        if (p)
            p++;
    }
    if (!p)
        return 1;
    long running = strtol(p, NULL, 10);
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    return cpus <= 0 || running <= cpus;
}

/* Changes whenever a peer link reads anything. */
static uint64_t rx_progress(const struct pr_node *n)
{
    uint64_t sum = 0;
    for (uint32_t i = 0; i < n->nsched; i++) {
        const struct node_sched *s = n->sched[i];
        if (!s || !s->xport)
            continue;
        sum += pr_tcp_xport_bytes_in(s->xport);
        if (s->rdma) {
            struct pr_rdma_stats rs;
            pr_rdma_stats(s->rdma, &rs);
            sum += rs.bytes_recv + rs.cq_events;
        }
    }
    return sum;
}

static void spin_stop(struct pr_node *n, uint64_t now)
{
    uv_idle_stop(&n->spin);
    n->spin_ns += now - n->spin_start_ns;
}

static void spin_cb(uv_idle_t *h)
{
    struct pr_node *n = h->data;
    uint64_t now = uv_hrtime();
    /* Nobody waits, or a reload turned polling off. */
    if (n->nreducing == 0 || n->conf->node_busy_poll_us == 0) {
        spin_stop(n, now);
        return;
    }
    uint64_t rx = rx_progress(n);
    if (rx != n->spin_rx) {
        n->spin_rx = rx;
        n->spin_until_ns = now + (uint64_t)n->conf->node_busy_poll_us * 1000;
    } else if (now >= n->spin_until_ns) {
        spin_stop(n, now);
    }
}

void pr_node_spin(struct pr_node *n)
{
    uint32_t us = n->conf->node_busy_poll_us;
    if (us == 0 || n->stopping || n->nreducing == 0)
        return;
    uint64_t now = uv_hrtime();
    n->spin_until_ns = now + (uint64_t)us * 1000;
    if (uv_is_active((uv_handle_t *)&n->spin))
        return;
    if (now - n->spin_check_ns >= SPARE_CHECK_NS || n->spin_check_ns == 0) {
        n->spin_spare = spare_cpu();
        n->spin_check_ns = now;
    }
    if (!n->spin_spare) {
        n->spins_skipped++;
        return;
    }
    n->spin_rx = rx_progress(n);
    n->spin_start_ns = now;
    n->spins++;
    uv_idle_start(&n->spin, spin_cb);
}

uint64_t pr_node_spin_ns(const struct pr_node *n)
{
    uint64_t ns = n->spin_ns;
    if (uv_is_active((const uv_handle_t *)&n->spin))
        ns += uv_hrtime() - n->spin_start_ns;
    return ns;
}

void pr_node_set_rstate(struct node_trainer *c, enum reduce_state s)
{
    struct pr_node *n = c->node;
    if (c->rstate == R_NONE && s != R_NONE)
        n->nreducing++;
    else if (c->rstate != R_NONE && s == R_NONE)
        n->nreducing--;
    c->rstate = s;
}

/*
 * The transports hand chunks to the engine through the node, which takes
 * each chunk's start as progress: polling that stopped during a long wait
 * (a slow link) starts again once data flows.
 */
static void spin_on_chunk(void *ctx, uint32_t node,
                          const struct pr_chunk_hdr *h, const void *data)
{
    struct node_sched *s = ctx;
    pr_node_spin(s->n);
    s->engine_sink.on_chunk(s->engine_sink.ctx, node, h, data);
}

static int spin_reserve(void *ctx, uint32_t node, const struct pr_chunk_hdr *h,
                        struct pr_landing *out)
{
    struct node_sched *s = ctx;
    pr_node_spin(s->n);
    return s->engine_sink.reserve(s->engine_sink.ctx, node, h, out);
}

static void spin_link_down(void *ctx, uint32_t node, int status)
{
    struct node_sched *s = ctx;
    s->engine_sink.on_link_down(s->engine_sink.ctx, node, status);
}

struct pr_link_sink pr_node_spin_sink(struct node_sched *s)
{
    s->engine_sink = pr_engine_sink(s->engine);
    return (struct pr_link_sink){.on_chunk = spin_on_chunk,
                                 .on_link_down = spin_link_down,
                                 .reserve = spin_reserve,
                                 .ctx = s};
}
