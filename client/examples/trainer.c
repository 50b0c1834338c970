/* SPDX-License-Identifier: MIT */
/*
 * preduce-trainer: an example P-Reduce worker that trains a real model.
 *
 * The model is softmax regression (multinomial logistic regression) over
 * CLASSES classes and FEATURES features: a weight matrix W (CLASSES x
 * FEATURES, row-major) followed by the biases b (CLASSES), all in ONE
 * preduce tensor, so the optimizer updates the shared memory the daemon
 * averages, and nothing is copied.
 *
 * The data set is synthetic and made from --seed: CLASSES gaussian class
 * centres, and --samples points, each its class centre plus gaussian noise.
 * Every worker generates the same set and keeps its shard: the samples i
 * with i % world == shard (shard = rank % world unless --shard is given).
 *
 * Each step: one minibatch SGD step on the shard, a simulated compute time
 * (--step-ms, --slow) and maybe a stall (--stall-prob, --stall-sec), then
 * preduce_reduce(). Every --print-every steps one line goes to stdout:
 *
 *   name=w0 rank=0 step=20 loss=1.2345 acc=0.812 group=2 version=37
 * steps/s=45.1
 *
 * with the loss and accuracy over the whole shard, the size of the last
 * reduce's group, and the worker's version after it.
 */
#include "preduce.h"

#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define CLASSES  10
#define FEATURES 64
#define NPARAMS  (CLASSES * FEATURES + CLASSES)
#define NOISE    3.0 /* sample noise, in units of the centres' spread */

struct opts {
    const char *socket;
    char name[64];
    long steps;
    double lr;
    long batch;
    unsigned long long seed;
    long samples;
    double slow;
    long step_ms;
    double stall_prob;
    double stall_sec;
    long print_every;
    long timeout_ms;
    long world;
    long shard; /* -1: rank % world */
    long retries;
    double target_loss; /* > 0: stop once the shard loss is this low */
    long eval_every;
    bool probe; /* --probe: only whether a daemon answers at socket */
};

/* The worker's shard: n samples of FEATURES floats and their labels. */
struct shard {
    size_t n;
    float *x;
    uint8_t *y;
};

/* splitmix64: small, fast, and the same sequence everywhere. */
struct rng {
    uint64_t s;
};

static uint64_t rng_next(struct rng *r)
{
    uint64_t z = (r->s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Uniform in (0, 1]. */
static double rng_uniform(struct rng *r)
{
    return ((double)(rng_next(r) >> 11) + 1.0) * 0x1.0p-53;
}

static double rng_gauss(struct rng *r)
{
    double u = rng_uniform(r), v = rng_uniform(r);
    return sqrt(-2.0 * log(u)) * cos(2.0 * M_PI * v);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void sleep_s(double s)
{
    if (s <= 0)
        return;
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    while (nanosleep(&ts, &ts) < 0 && errno == EINTR) {
    }
}

/*
 * Generates the whole set from the seed (so every worker sees the same
 * one) and keeps samples i % world == index. Features are scaled to about
 * unit variance. 0, or -ENOMEM.
 */
static int make_shard(struct shard *sh, const struct opts *o, long index)
{
    struct rng r = {o->seed};
    float centres[CLASSES][FEATURES];
    for (int k = 0; k < CLASSES; k++) {
        for (int j = 0; j < FEATURES; j++)
            centres[k][j] = (float)rng_gauss(&r);
    }
    size_t cap = (size_t)(o->samples / o->world + 1);
    sh->n = 0;
    sh->x = malloc(cap * FEATURES * sizeof(float));
    sh->y = malloc(cap);
    if (!sh->x || !sh->y)
        return -ENOMEM;
    const double scale = 1.0 / sqrt(1.0 + NOISE * NOISE);
    for (long i = 0; i < o->samples; i++) {
        int label = (int)(rng_next(&r) % CLASSES);
        bool mine = i % o->world == index;
        float *x = sh->x + sh->n * FEATURES;
        for (int j = 0; j < FEATURES; j++) {
            double v = (centres[label][j] + NOISE * rng_gauss(&r)) * scale;
            if (mine)
                x[j] = (float)v;
        }
        if (mine)
            sh->y[sh->n++] = (uint8_t)label;
    }
    return 0;
}

/* Class probabilities of sample x under the model w. */
static void predict(const float *w, const float *x, double p[CLASSES])
{
    const float *b = w + CLASSES * FEATURES;
    double max = -INFINITY, sum = 0;
    for (int k = 0; k < CLASSES; k++) {
        double z = b[k];
        for (int j = 0; j < FEATURES; j++)
            z += (double)w[k * FEATURES + j] * x[j];
        p[k] = z;
        if (z > max)
            max = z;
    }
    for (int k = 0; k < CLASSES; k++) {
        p[k] = exp(p[k] - max);
        sum += p[k];
    }
    for (int k = 0; k < CLASSES; k++)
        p[k] /= sum;
}

/* One minibatch SGD step on the cross-entropy loss, in place. */
static void sgd_step(float *w, const struct shard *sh, long batch, double lr,
                     struct rng *r)
{
    double grad[NPARAMS], p[CLASSES];
    memset(grad, 0, sizeof(grad));
    for (long s = 0; s < batch; s++) {
        size_t i = (size_t)(rng_next(r) % sh->n);
        const float *x = sh->x + i * FEATURES;
        predict(w, x, p);
        p[sh->y[i]] -= 1.0;
        for (int k = 0; k < CLASSES; k++) {
            for (int j = 0; j < FEATURES; j++)
                grad[k * FEATURES + j] += p[k] * x[j];
            grad[CLASSES * FEATURES + k] += p[k];
        }
    }
    for (int i = 0; i < NPARAMS; i++)
        w[i] -= (float)(lr * grad[i] / (double)batch);
}

/* Mean cross-entropy and accuracy over the whole shard. */
static void evaluate(const float *w, const struct shard *sh, double *loss,
                     double *acc)
{
    double p[CLASSES], l = 0;
    size_t right = 0;
    for (size_t i = 0; i < sh->n; i++) {
        predict(w, sh->x + i * FEATURES, p);
        int best = 0;
        for (int k = 1; k < CLASSES; k++) {
            if (p[k] > p[best])
                best = k;
        }
        right += best == sh->y[i];
        l -= log(p[sh->y[i]] > 1e-300 ? p[sh->y[i]] : 1e-300);
    }
    *loss = l / (double)sh->n;
    *acc = (double)right / (double)sh->n;
}

/* Makes a step last as long as the options say (see usage()). */
static void simulate(const struct opts *o, double compute_s, struct rng *r)
{
    double target = o->step_ms > 0 ? (double)o->step_ms / 1000.0 * o->slow
                                   : compute_s * o->slow;
    sleep_s(target - compute_s);
    if (o->stall_prob > 0 && rng_uniform(r) <= o->stall_prob)
        sleep_s(o->stall_sec);
}

/*
 * Reduces, retrying a few times on the errors the library says the next
 * call may survive (a timeout, a lost peer: preduce_error_retryable). The
 * tensor then still holds this worker's model, so a retry loses nothing;
 * any other error ends training (-ENOTCONN: the daemon is gone).
 */
static int reduce(preduce_client_t *c, preduce_tensor_t *t,
                  const struct opts *o, long step)
{
    for (long attempt = 0;; attempt++) {
        int rc = preduce_reduce(c, &t, 1, (int)o->timeout_ms);
        if (rc == 0)
            return 0;
        bool again = preduce_error_retryable(rc) && attempt < o->retries;
        fprintf(stderr, "%s: step %ld: preduce_reduce: %s%s\n", o->name, step,
                preduce_strerror(rc), again ? " (retrying)" : "");
        if (!again)
            return rc;
    }
}

static int train(const struct opts *o)
{
    preduce_client_t *c;
    preduce_tensor_t *t;
    struct shard sh = {0};
    int rc = preduce_connect(o->socket, o->name, (int)o->timeout_ms, &c);
    if (rc < 0) {
        fprintf(stderr, "%s: preduce_connect(%s): %s\n", o->name, o->socket,
                preduce_strerror(rc));
        return 1;
    }
    int rank = preduce_rank(c);
    long index = o->shard >= 0 ? o->shard : rank % o->world;
    rc = preduce_tensor_create(c, NPARAMS, (int)o->timeout_ms, &t);
    if (rc < 0) {
        fprintf(stderr, "%s: preduce_tensor_create(%d): %s\n", o->name, NPARAMS,
                preduce_strerror(rc));
        preduce_close(c);
        return 1;
    }
    if (make_shard(&sh, o, index) < 0 || sh.n == 0) {
        fprintf(stderr, "%s: shard %ld of %ld: no samples (or no memory)\n",
                o->name, index, o->world);
        rc = -ENOMEM;
        goto out;
    }
    /* The tensor starts zero-filled: the same initial model everywhere. */
    float *w = preduce_tensor_data(t);
    struct rng r = {o->seed ^ (0x5851f42d4c957f2dull * (uint64_t)(rank + 1))};
    double start = now_s(), mark = start, loss = 0, acc = 0;
    long mark_step = 0, steps = 0;
    for (long step = 1; step <= o->steps; step++) {
        steps = step;
        double t0 = now_s();
        sgd_step(w, &sh, o->batch, o->lr, &r);
        simulate(o, now_s() - t0, &r);
        rc = reduce(c, t, o, step);
        if (rc < 0)
            goto out;
        if (step % o->print_every == 0 || step == o->steps) {
            const preduce_result_t *res = preduce_last_result(c);
            double now = now_s();
            evaluate(w, &sh, &loss, &acc);
            printf("name=%s rank=%d step=%ld loss=%.4f acc=%.3f group=%zu "
                   "version=%llu steps/s=%.1f\n",
                   o->name, rank, step, loss, acc, preduce_result_size(res),
                   (unsigned long long)preduce_result_version(res),
                   (double)(step - mark_step) / (now - mark));
            mark = now;
            mark_step = step;
        }
        if (o->target_loss > 0 && step % o->eval_every == 0) {
            evaluate(w, &sh, &loss, &acc);
            if (loss <= o->target_loss) {
                printf("name=%s rank=%d reached loss=%.4f target=%.4f "
                       "step=%ld time=%.3fs\n",
                       o->name, rank, loss, o->target_loss, step,
                       now_s() - start);
                break;
            }
        }
    }
    double total = now_s() - start;
    printf("name=%s rank=%d done steps=%ld time=%.2fs steps/s=%.1f "
           "loss=%.4f acc=%.3f version=%llu\n",
           o->name, rank, steps, total, (double)steps / total, loss, acc,
           (unsigned long long)preduce_result_version(preduce_last_result(c)));
out:
    free(sh.x);
    free(sh.y);
    preduce_close(c);
    return rc < 0 ? 1 : 0;
}

/*
 * --probe: 0 when a daemon accepts a connection at o->socket, else 1 with
 * the reason. A bare connect, no Hello: nothing registers, and the daemon
 * sees a trainer that left before it said anything.
 */
static int probe(const struct opts *o)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    if (strlen(o->socket) >= sizeof(sa.sun_path)) {
        fprintf(stderr, "preduce-trainer: socket path too long: %s\n",
                o->socket);
        return 1;
    }
    strcpy(sa.sun_path, o->socket);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
        fprintf(stderr, "preduce-trainer: no daemon answers at %s: %s\n",
                o->socket, strerror(errno));
        if (fd >= 0)
            close(fd);
        return 1;
    }
    close(fd);
    printf("preduce-trainer: a daemon answers at %s\n", o->socket);
    return 0;
}

static void usage(FILE *f)
{
    fprintf(f,
            "usage: preduce-trainer [options]\n"
            "Trains softmax regression (%d classes, %d features) on a "
            "synthetic set,\naveraging the model with preduce after every "
            "step.\n\n"
            "  --socket PATH       daemon socket ($PREDUCE_SOCKET, else "
            "/run/preduce/preduced.sock)\n"
            "  --name NAME         worker name, unique in the job "
            "(default trainer-PID)\n"
            "  --steps N           steps to train (200)\n"
            "  --lr X              learning rate (0.1)\n"
            "  --batch N           minibatch size (32)\n"
            "  --seed N            data set seed, same on every worker (1)\n"
            "  --samples N         data set size over all shards (8192)\n"
            "  --world W           number of shards (4)\n"
            "  --shard S           this worker's shard (rank %% world)\n"
            "  --step-ms MS        simulated compute time per step (0: the "
            "real one)\n"
            "  --slow FACTOR       each step takes FACTOR times as long (1)\n"
            "  --stall-prob P      probability per step of a stall (0)\n"
            "  --stall-sec H       length of a stall in seconds (0)\n"
            "  --print-every K     print a progress line every K steps (20)\n"
            "  --timeout-ms MS     timeout of every preduce call (60000;\n"
            "                      node.reduce_timeout_ms caps a reduce's)\n"
            "  --retries N         retries of a reduce after an error that\n"
            "                      preduce_error_retryable() calls worth\n"
            "                      one (-ETIMEDOUT, -ECONNRESET) (3)\n"
            "  --target-loss X     stop once the loss on the shard is at\n"
            "                      most X, and print when (0: off)\n"
            "  --eval-every K      check the target every K steps (5)\n"
            "  --probe             only say whether a daemon accepts\n"
            "                      connections at the socket: exit 0 if\n"
            "                      one does, 1 if not (scripts choose\n"
            "                      between a running service and their own)\n",
            CLASSES, FEATURES);
}

static bool parse_long(const char *s, long min, long max, long *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < min || v > max)
        return false;
    *out = v;
    return true;
}

static bool parse_double(const char *s, double min, double max, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !(v >= min && v <= max))
        return false;
    *out = v;
    return true;
}

enum {
    OPT_SOCKET = 256,
    OPT_NAME,
    OPT_STEPS,
    OPT_LR,
    OPT_BATCH,
    OPT_SEED,
    OPT_SAMPLES,
    OPT_WORLD,
    OPT_SHARD,
    OPT_STEP_MS,
    OPT_SLOW,
    OPT_STALL_PROB,
    OPT_STALL_SEC,
    OPT_PRINT_EVERY,
    OPT_TIMEOUT_MS,
    OPT_RETRIES,
    OPT_TARGET_LOSS,
    OPT_EVAL_EVERY,
    OPT_PROBE,
};

/* In the order of the enum: the error message indexes it. */
static const struct option longopts[] = {
    {"socket", required_argument, NULL, OPT_SOCKET},
    {"name", required_argument, NULL, OPT_NAME},
    {"steps", required_argument, NULL, OPT_STEPS},
    {"lr", required_argument, NULL, OPT_LR},
    {"batch", required_argument, NULL, OPT_BATCH},
    {"seed", required_argument, NULL, OPT_SEED},
    {"samples", required_argument, NULL, OPT_SAMPLES},
    {"world", required_argument, NULL, OPT_WORLD},
    {"shard", required_argument, NULL, OPT_SHARD},
    {"step-ms", required_argument, NULL, OPT_STEP_MS},
    {"slow", required_argument, NULL, OPT_SLOW},
    {"stall-prob", required_argument, NULL, OPT_STALL_PROB},
    {"stall-sec", required_argument, NULL, OPT_STALL_SEC},
    {"print-every", required_argument, NULL, OPT_PRINT_EVERY},
    {"timeout-ms", required_argument, NULL, OPT_TIMEOUT_MS},
    {"retries", required_argument, NULL, OPT_RETRIES},
    {"target-loss", required_argument, NULL, OPT_TARGET_LOSS},
    {"eval-every", required_argument, NULL, OPT_EVAL_EVERY},
    {"probe", no_argument, NULL, OPT_PROBE},
    {"help", no_argument, NULL, 'h'},
    {NULL, 0, NULL, 0},
};

/* The defaults, before any option: PREDUCE_SOCKET names the socket. */
static void set_defaults(struct opts *o)
{
    const char *env = getenv("PREDUCE_SOCKET");
    *o = (struct opts){
        .socket = env && *env ? env : "/run/preduce/preduced.sock",
        .steps = 200,
        .lr = 0.1,
        .batch = 32,
        .samples = 8192,
        .slow = 1.0,
        .print_every = 20,
        .timeout_ms = 60000,
        .world = 4,
        .shard = -1,
        .retries = 3,
        .eval_every = 5,
    };
    snprintf(o->name, sizeof(o->name), "trainer-%ld", (long)getpid());
}

/*
 * One option's value into *o (the seed into *seed, which o keeps unsigned):
 * false when it is out of its bounds. ch is one of the OPT_* values.
 */
static bool set_opt(int ch, const char *arg, struct opts *o, long *seed)
{
    switch (ch) {
    case OPT_SOCKET:
        o->socket = arg;
        return true;
    case OPT_NAME:
        if (strlen(arg) == 0 || strlen(arg) >= sizeof(o->name))
            return false;
        strcpy(o->name, arg);
        return true;
    case OPT_STEPS:
        return parse_long(arg, 1, LONG_MAX, &o->steps);
    case OPT_LR:
        return parse_double(arg, 0, 1e6, &o->lr);
    case OPT_BATCH:
        return parse_long(arg, 1, 1 << 20, &o->batch);
    case OPT_SEED:
        return parse_long(arg, 0, LONG_MAX, seed);
    case OPT_SAMPLES:
        return parse_long(arg, 1, 1 << 26, &o->samples);
    case OPT_WORLD:
        return parse_long(arg, 1, 1 << 20, &o->world);
    case OPT_SHARD:
        return parse_long(arg, 0, LONG_MAX, &o->shard);
    case OPT_STEP_MS:
        return parse_long(arg, 0, 3600000, &o->step_ms);
    case OPT_SLOW:
        return parse_double(arg, 1.0, 1e6, &o->slow);
    case OPT_STALL_PROB:
        return parse_double(arg, 0, 1, &o->stall_prob);
    case OPT_STALL_SEC:
        return parse_double(arg, 0, 86400, &o->stall_sec);
    case OPT_PRINT_EVERY:
        return parse_long(arg, 1, LONG_MAX, &o->print_every);
    case OPT_TIMEOUT_MS:
        return parse_long(arg, 0, INT_MAX, &o->timeout_ms);
    case OPT_RETRIES:
        return parse_long(arg, 0, 1000, &o->retries);
    case OPT_TARGET_LOSS:
        return parse_double(arg, 0, 1e9, &o->target_loss);
    case OPT_EVAL_EVERY:
        return parse_long(arg, 1, 1000000, &o->eval_every);
    case OPT_PROBE:
        o->probe = true;
        return true;
    default:
        return false;
    }
}

/* 0, or 2 (usage error, message printed). */
static int parse_opts(int argc, char **argv, struct opts *o)
{
    long seed = 1;
    set_defaults(o);
    int ch;
    while ((ch = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        if (ch == 'h') {
            usage(stdout);
            exit(0);
        }
        if (ch < OPT_SOCKET || ch > OPT_PROBE) {
            usage(stderr);
            return 2;
        }
        if (!set_opt(ch, optarg, o, &seed)) {
            fprintf(stderr, "preduce-trainer: bad value for --%s: '%s'\n",
                    longopts[ch - OPT_SOCKET].name, optarg);
            return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "preduce-trainer: unexpected argument '%s'\n",
                argv[optind]);
        return 2;
    }
    if (o->shard >= o->world) {
        fprintf(stderr, "preduce-trainer: --shard must be below --world\n");
        return 2;
    }
    o->seed = (unsigned long long)seed;
    return 0;
}

int main(int argc, char **argv)
{
    struct opts o;
    int rc = parse_opts(argc, argv, &o);
    if (rc)
        return rc;
    setvbuf(stdout, NULL, _IOLBF, 0);
    return o.probe ? probe(&o) : train(&o);
}
