/* SPDX-License-Identifier: MIT */
/*
 * Trainers' tensors on the node: shared memory (a sealed memfd, mapped here
 * and passed to the trainer on its TensorCreated frame), registered for
 * RDMA when there is a device, and freed once no reduce reads them.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include "daemon/base/log.h"
#include "daemon/node/node_int.h"
#include "daemon/xport/rdma/rdma.h"

/*
 * An Error frame answering the trainer's create; the connection stays
 * open. The create came on c->conn, so it is there to answer on.
 */
static void reply_error(struct node_trainer *c, int code, const char *reason)
{
    Pr__V1__Error e = PR__V1__ERROR__INIT;
    e.code = code;
    e.reason = (char *)reason;
    Pr__V1__Msg m = PR_MSG_OF(ERROR, error, &e);
    int rc = pr_conn_send(c->conn, &m);
    if (rc < 0)
        pr_warn("%s: send %s: %s", c->conn->name, pr_msg_name(&m),
                strerror(-rc));
}

void pr_node_tensor_free(struct node_trainer *c, struct node_tensor *t)
{
    if (t->data) {
        if (c->s && c->s->rdma)
            pr_rdma_unreg(c->s->rdma, t->data);
        munmap(t->data, t->n * sizeof(float));
        c->node->ntensors--;
    }
    t->data = NULL;
}

/*
 * The most tensors this node maps at once: node.max_tensors, but never so
 * many that the kernel's map count limit (vm.max_map_count) is reached,
 * where every mmap fails (trainers of any node would get -ENOMEM and time
 * out). PR_NODE_MAP_RESERVE maps are kept for the daemon's own (libraries,
 * scratch buffers, RDMA registrations).
 */
static uint64_t node_tensor_cap(const struct pr_node *n)
{
    uint64_t cap = n->conf->node_max_tensors;
    if (n->max_map_count > PR_NODE_MAP_RESERVE &&
        n->max_map_count - PR_NODE_MAP_RESERVE < cap)
        cap = n->max_map_count - PR_NODE_MAP_RESERVE;
    return cap;
}

/* The bytes of c's tensors. */
static uint64_t trainer_bytes(const struct node_trainer *c)
{
    uint64_t bytes = 0;
    for (size_t i = 0; i < c->ntensors; i++)
        bytes += (uint64_t)c->tensors[i].n * sizeof(float);
    return bytes;
}

/*
 * The limits of c's job on this node, over all its trainers (those that
 * left but whose tensors a reduce still reads among them): 0, or -EDQUOT
 * with why[] filled in.
 */
static int check_job(const struct node_trainer *c, uint64_t nfloats, char *why,
                     size_t why_len)
{
    const struct pr_conf *conf = c->node->conf;
    uint64_t count = 0, bytes = nfloats * sizeof(float);
    /* A job is a name on one scheduler: another's of that name is not it. */
    for (const struct node_trainer *t = c->node->trainers; t; t = t->next)
        if (t->s == c->s && !strcmp(t->job, c->job)) {
            count += t->ntensors;
            bytes += trainer_bytes(t);
        }
    if (count >= conf->node_job_max_tensors) {
        snprintf(why, why_len,
                 "job '%s' holds %llu tensors here, at most %u "
                 "(node.job_max_tensors)",
                 c->job, (unsigned long long)count, conf->node_job_max_tensors);
        return -EDQUOT;
    }
    if (bytes > (uint64_t)conf->node_job_max_mb << 20) {
        snprintf(why, why_len,
                 "job '%s' would hold %llu MiB here, at most %u "
                 "(node.job_max_mb)",
                 c->job, (unsigned long long)((bytes + (1 << 20) - 1) >> 20),
                 conf->node_job_max_mb);
        return -EDQUOT;
    }
    return 0;
}

/*
 * Per-trainer, per-job and per-node limits, checked before anything is
 * allocated: 0, or an errno with why[] filled in: -EDQUOT for the
 * trainer's own quota or its job's (count or MiB), -ENOSPC when the node
 * holds all it may.
 */
static int check_limits(const struct node_trainer *c, uint64_t nfloats,
                        char *why, size_t why_len)
{
    const struct pr_conf *conf = c->node->conf;
    if (c->ntensors >= conf->node_trainer_max_tensors) {
        snprintf(why, why_len,
                 "the trainer holds %zu tensors, at most %u "
                 "(node.trainer_max_tensors)",
                 c->ntensors, conf->node_trainer_max_tensors);
        return -EDQUOT;
    }
    uint64_t bytes = nfloats * sizeof(float) + trainer_bytes(c);
    uint64_t max_bytes = (uint64_t)conf->node_trainer_max_mb << 20;
    if (bytes > max_bytes) {
        snprintf(why, why_len,
                 "the trainer's tensors would take %llu MiB, at most %u "
                 "(node.trainer_max_mb)",
                 (unsigned long long)((bytes + (1 << 20) - 1) >> 20),
                 conf->node_trainer_max_mb);
        return -EDQUOT;
    }
    int rc = check_job(c, nfloats, why, why_len);
    if (rc < 0)
        return rc;
    uint64_t cap = node_tensor_cap(c->node);
    if (c->node->ntensors >= cap) {
        snprintf(why, why_len,
                 "this node holds %llu tensors, at most %llu "
                 "(node.max_tensors, vm.max_map_count)",
                 (unsigned long long)c->node->ntensors,
                 (unsigned long long)cap);
        return -ENOSPC;
    }
    return 0;
}

/*
 * Sends one frame with `fd` attached. libuv cannot pass an arbitrary fd on
 * a stream, so this writes the frame itself; it is only safe when nothing
 * is queued ahead of it on the stream, which holds for this request/answer
 * protocol (the trainer waits for this answer and reads meanwhile).
 */
static int send_with_fd(struct node_trainer *c, const Pr__V1__Msg *m, int fd)
{
    uint8_t *buf;
    size_t len;
    int rc = pr_msg_frame(m, PR_CTRL_MAX_FRAME, &buf, &len);
    if (rc < 0)
        return rc;
    uv_os_fd_t sock;
    if (pr_conn_write_queue(c->conn) != 0 ||
        uv_fileno(&c->conn->h.handle, &sock) < 0) {
        free(buf);
        return -EAGAIN;
    }
    char cbuf[CMSG_SPACE(sizeof(int))];
    memset(cbuf, 0, sizeof(cbuf));
    struct iovec iov = {.iov_base = buf, .iov_len = len};
    struct msghdr mh = {.msg_iov = &iov,
                        .msg_iovlen = 1,
                        .msg_control = cbuf,
                        .msg_controllen = sizeof(cbuf)};
    struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
    cm->cmsg_level = SOL_SOCKET;
    cm->cmsg_type = SCM_RIGHTS;
    cm->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(cm), &fd, sizeof(int));
    ssize_t w;
    do
        w = sendmsg(sock, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
    while (w < 0 && errno == EINTR);
    if (w < 0) {
        rc = -errno;
        free(buf);
        return rc;
    }
    if ((size_t)w < len) {
        /* The fd went with the first byte; the rest may queue normally. */
        uv_buf_t b = uv_buf_init((char *)buf + w, (unsigned)(len - (size_t)w));
        rc = uv_try_write(&c->conn->h.stream, &b, 1);
        if (rc < 0 || (size_t)rc < b.len) {
            free(buf);
            return -EAGAIN;
        }
    }
    free(buf);
    return 0;
}

/*
 * The tensor's size against node.max_tensor_mb: 0, or -EINVAL with why[]
 * filled in. Checked before the trainer's quotas, which count bytes.
 */
static int check_size(const struct node_trainer *c, uint64_t nfloats, char *why,
                      size_t why_len)
{
    uint64_t max = (uint64_t)c->node->conf->node_max_tensor_mb * 1024 * 1024 /
                   sizeof(float);
    if (nfloats != 0 && nfloats <= max)
        return 0;
    snprintf(why, why_len,
             "tensor of %llu floats: must be 1..%llu (max_tensor_mb)",
             (unsigned long long)nfloats, (unsigned long long)max);
    return -EINVAL;
}

/* Room for one more tensor in c->tensors: 0 or -ENOMEM. */
static int reserve_slot(struct node_trainer *c)
{
    if (c->ntensors < c->cap)
        return 0;
    size_t cap = c->cap ? c->cap * 2 : 8;
    struct node_tensor *nt = realloc(c->tensors, cap * sizeof(*nt));
    if (!nt)
        return -ENOMEM;
    c->tensors = nt;
    c->cap = cap;
    return 0;
}

/*
 * The shared memory of c's next tensor: a memfd of `bytes`, its size
 * sealed (a trainer that shrank it would SIGBUS the daemon), mapped here.
 * 0 with *fd and *data set, or -errno (logged) with nothing left open.
 */
static int map_shared(const struct node_trainer *c, size_t bytes, int *fd,
                      void **data)
{
    char label[96];
    snprintf(label, sizeof(label), "preduce:%s:%u", c->name,
             c->next_tensor_id + 1);
    int f = memfd_create(label, MFD_CLOEXEC | MFD_ALLOW_SEALING);
    void *p = MAP_FAILED;
    if (f < 0 || ftruncate(f, (off_t)bytes) < 0 ||
        fcntl(f, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) < 0 ||
        (p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, f, 0)) ==
            MAP_FAILED) {
        int rc = -errno;
        pr_err("%s: tensor of %zu bytes: memfd/ftruncate/mmap: %s",
               c->conn->name, bytes, strerror(-rc));
        if (f >= 0)
            close(f);
        return rc;
    }
    *fd = f;
    *data = p;
    return 0;
}

int pr_node_tensor_create(struct node_trainer *c, const Pr__V1__TensorCreate *t)
{
    struct pr_node *n = c->node;
    char why[160];
    int rc = check_size(c, t->nfloats, why, sizeof(why));
    if (rc < 0) {
        pr_warn("%s: %s", c->conn->name, why);
        reply_error(c, rc, why);
        return 0;
    }
    rc = check_limits(c, t->nfloats, why, sizeof(why));
    if (rc < 0) {
        pr_warn("%s: tensor of %llu floats refused: %s", c->conn->name,
                (unsigned long long)t->nfloats, why);
        reply_error(c, rc, why);
        return 0;
    }
    if (reserve_slot(c) < 0) {
        reply_error(c, -ENOMEM, "out of memory");
        return 0;
    }
    size_t bytes = (size_t)t->nfloats * sizeof(float);
    int fd = -1;
    void *p = NULL;
    rc = map_shared(c, bytes, &fd, &p);
    if (rc < 0) {
        reply_error(c, rc, "cannot allocate shared memory");
        return 0;
    }
    /*
     * With RDMA the tensor is registered once, here, so a group can post it
     * to the wire as it is (engine.c direct sends).
     */
    if (c->s->rdma && (rc = pr_rdma_reg(c->s->rdma, p, bytes)) < 0) {
        munmap(p, bytes);
        close(fd);
        reply_error(c, rc, "cannot register the tensor for RDMA");
        return 0;
    }
    struct node_tensor *nt = &c->tensors[c->ntensors];
    *nt = (struct node_tensor){
        .id = ++c->next_tensor_id, .data = p, .n = t->nfloats};
    n->ntensors++; /* pr_node_tensor_free() takes it back */
    Pr__V1__TensorCreated r = PR__V1__TENSOR_CREATED__INIT;
    r.tensor_id = nt->id;
    r.nfloats = t->nfloats;
    Pr__V1__Msg m = PR_MSG_OF(TENSOR_CREATED, tensor_created, &r);
    rc = send_with_fd(c, &m, fd);
    close(fd);
    if (rc < 0) {
        pr_warn("%s: passing the tensor's memfd: %s", c->conn->name,
                strerror(-rc));
        pr_node_tensor_free(c, nt);
        return rc;
    }
    c->ntensors++;
    return 0;
}

struct node_tensor *pr_node_tensor_by_id(struct node_trainer *c, uint32_t id)
{
    for (size_t i = 0; i < c->ntensors; i++)
        if (c->tensors[i].id == id && !c->tensors[i].doomed)
            return &c->tensors[i];
    return NULL;
}

void pr_node_tensor_destroy(struct node_trainer *c, uint32_t id)
{
    struct node_tensor *t = pr_node_tensor_by_id(c, id);
    if (!t)
        return;
    if (t->busy) {
        t->doomed = 1;
        return;
    }
    pr_node_feedback_forget(c, t);
    pr_node_tensor_free(c, t);
    *t = c->tensors[--c->ntensors];
}

int pr_node_tensors_take(struct node_trainer *c, const uint32_t *ids, size_t n,
                         int int8, struct pr_engine_part **parts,
                         uint64_t *total, float **err, const char **why)
{
    struct pr_engine_part *p = calloc(n, sizeof(*p));
    /* int8's error feedback is kept per list of tensors: it needs them. */
    struct node_tensor **ts = int8 ? calloc(n, sizeof(*ts)) : NULL;
    int rc = 0;
    *why = NULL;
    *total = 0;
    *err = NULL;
    if (!p || (int8 && !ts)) {
        rc = -ENOMEM;
        *why = "out of memory";
    }
    for (size_t i = 0; rc == 0 && i < n; i++) {
        struct node_tensor *t = pr_node_tensor_by_id(c, ids[i]);
        if (!t || t->busy) {
            rc = -EINVAL;
            *why = t ? "a tensor appears twice" : "unknown tensor id";
            break;
        }
        t->busy = 1;
        p[i] = (struct pr_engine_part){.data = t->data, .len = t->n};
        *total += t->n;
        if (ts)
            ts[i] = t;
    }
    if (rc == 0 && int8 &&
        (rc = pr_node_feedback_get(c, ts, n, *total, err)) < 0)
        *why = "out of memory for int8's error feedback";
    free(ts);
    if (rc < 0) {
        /* None was busy before: the trainer had no reduce in flight. */
        for (size_t i = 0; i < c->ntensors; i++)
            c->tensors[i].busy = 0;
        free(p);
        return rc;
    }
    *parts = p;
    return 0;
}
