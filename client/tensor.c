/* SPDX-License-Identifier: MIT */
/*
 * libpreduce: shared tensors.
 *
 * The daemon creates each tensor as a memfd and passes it with the
 * tensor_created answer; the client maps it MAP_SHARED, so the pointer the
 * trainer gets is the very memory the daemon reduces in place. The mapping
 * holds the memory, so the memfd is closed right after mmap(): tensors cost
 * the trainer no descriptors. A tensor is owned by its client (on its list)
 * and freed by preduce_tensor_destroy() or preduce_close().
 *
 * A create the daemon refuses (too large, out of memory) or whose memfd
 * never reached this process (out of descriptors) fails alone: the
 * connection and the other tensors stay usable.
 */
#include "preduce.h"
#include "client/client_int.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* Maps the memfd of the answer `c` holds, then closes the descriptor. */
static int map_created(struct preduce_client *c, size_t nfloats,
                       struct preduce_tensor *t)
{
    int fd = c->created_fd;
    uint32_t id = c->created_id;
    c->created_fd = -1;
    c->created_ready = false;

    int rc = 0;
    if (c->created_nfloats != nfloats)
        rc = -EPROTO;
    for (struct preduce_tensor *o = c->tensors; o && rc == 0; o = o->next) {
        if (o->id == id)
            rc = -EPROTO;
    }
    /* Touching pages past the end of the file would raise SIGBUS. */
    struct stat st;
    if (rc == 0 && fstat(fd, &st) < 0)
        rc = -errno;
    if (rc == 0 && (st.st_size < 0 ||
                    (uint64_t)st.st_size < (uint64_t)nfloats * sizeof(float)))
        rc = -EPROTO;
    if (rc < 0) {
        close(fd);
        return pr_client_fail(c, rc);
    }
    void *p = mmap(NULL, nfloats * sizeof(float), PROT_READ | PROT_WRITE,
                   MAP_SHARED, fd, 0);
    rc = p == MAP_FAILED ? -errno : 0;
    /* Nothing needs the descriptor once mapped: the mapping holds the file. */
    close(fd);
    if (rc < 0) {
        /* The daemon's side of it would otherwise live until close. */
        (void)pr_client_send_destroy(c, id);
        return rc;
    }
    t->c = c;
    t->id = id;
    t->data = p;
    t->nfloats = nfloats;
    t->next = c->tensors;
    if (c->tensors)
        c->tensors->prev = t;
    c->tensors = t;
    return 0;
}

int preduce_tensor_create(preduce_client_t *c, size_t nfloats, int timeout_ms,
                          preduce_tensor_t **out)
{
    if (out)
        *out = NULL;
    if (c && !c->err)
        c->last_error[0] = '\0'; /* not an earlier call's reason */
    if (!c || !out || nfloats == 0 || nfloats > SIZE_MAX / sizeof(float) ||
        timeout_ms < 0)
        return -EINVAL;
    if (c->err)
        return pr_client_err(c);
    int64_t deadline = pr_client_deadline(timeout_ms);
    struct preduce_tensor *t = calloc(1, sizeof(*t));
    if (!t)
        return -ENOMEM;

    Pr__V1__TensorCreate tc = PR__V1__TENSOR_CREATE__INIT;
    tc.nfloats = nfloats;
    Pr__V1__Msg m = PR_MSG_OF(TENSOR_CREATE, tensor_create, &tc);
    int rc = pr_client_send(c, &m, deadline);
    if (rc == 0) {
        c->creates_pending++;
        rc = pr_client_pump(c, &c->created_ready, deadline);
        /* The answer may still come: it will be destroyed on arrival. */
        if (rc == -ETIMEDOUT)
            c->creates_orphaned++;
    }
    if (rc == 0 && c->created_err < 0) {
        /* Refused by the daemon, or its memfd was lost on the way. */
        rc = c->created_err;
        c->created_err = 0;
        c->created_ready = false;
    }
    if (rc == 0)
        rc = map_created(c, nfloats, t);
    if (rc < 0) {
        free(t);
        return rc;
    }
    *out = t;
    return 0;
}

float *preduce_tensor_data(preduce_tensor_t *t)
{
    return t ? t->data : NULL;
}

size_t preduce_tensor_len(const preduce_tensor_t *t)
{
    return t ? t->nfloats : 0;
}

int preduce_tensor_destroy(preduce_tensor_t *t)
{
    if (!t)
        return -EINVAL;
    if (t->busy)
        return -EBUSY;
    /*
     * A failed send breaks the connection, and the daemon frees the tensor
     * when it sees the client go; here it is released all the same.
     */
    if (!t->c->err)
        (void)pr_client_send_destroy(t->c, t->id);
    pr_client_tensor_release(t);
    return 0;
}
