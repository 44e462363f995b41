/* Data-parallel training on libhvd: a two-layer perceptron (784-128-10, ReLU, softmax
 * cross-entropy) on Fashion-MNIST, trained with SGD and momentum.
 *
 *   horovodrun -np 2 ./build/examples/train_fashion_mnist [--epochs 3] [--batch 128]
 *       [--lr 0.1] [--seed 1] [--train-limit N] [--data /usr/share/datasets/fashion-mnist]
 *       [--blocking] [--elastic-commit N]
 *
 * How the work is shared: every rank shuffles the training set with the same seed and walks
 * the same sequence of global batches; rank r takes the samples of each batch at positions
 * r, r + size, r + 2 size, ... The gradients of a batch are summed over all ranks and every
 * rank applies the same update, so the model stays identical everywhere. Rank 0's initial
 * parameters are broadcast at the start (here all ranks would compute the same ones from the
 * seed anyway; real models loaded from a checkpoint need the broadcast).
 *
 * How the gradients are summed, as Horovod's DistributedOptimizer does it: each parameter
 * tensor (W1, b1, W2, b2) has a gradient buffer of its own, and after the backward pass of a
 * batch one named asynchronous allreduce per tensor is enqueued ("grad.W2", "grad.b2",
 * "grad.W1", "grad.b1": the output layer first, the order in which backpropagation produces
 * them), followed by the batch's loss and accuracy counts ("stats"); the update waits for all
 * five handles. The names, shapes and buffers are the same at every step, so from the second
 * step on the core's response cache knows them and a rank announces a ready tensor with one
 * bit instead of a round trip through the coordinator; and because the five are ready
 * together, the core fuses them into one allreduce of one buffer instead of five small ones.
 * (In a framework the output layer's allreduce starts while earlier layers are still being
 * differentiated; here a batch's backward pass is one loop, so all five are ready at once.)
 * --blocking sums the same five tensors with five blocking hvd_allreduce calls instead, one
 * collective each, for comparison.
 *
 * Same seed, same result, for any number of ranks: per-sample gradients are added as 64-bit
 * fixed-point integers, whose sum does not depend on the order (floating-point sums do), so
 * np=1, 2 or 4 produce bit-identical weights and the same accuracy to the last digit, fused or
 * not, asynchronous or blocking.
 *
 * Elastic training (--elastic-commit N, under horovodrun --host-discovery-script ... or
 * --min-np): the training runs under hvd_elastic_run with the whole training state
 * registered with an hvd_elastic_state_t (parameters, momentum, the epoch's sample order and
 * the shuffle generator, epoch and position, the epoch's statistics) and committed every N
 * batches; rank 0 prints "commit <n> epoch <e> batch <b> size <world size>". When a worker
 * dies the others roll back to the last commit and go on in the driver's new world; when
 * hosts come or go they go on from the commit where they noticed. Since the global batch does
 * not depend on the number of ranks and the sums are exact, an elastic run ends with the same
 * weights digest as a static one, whatever happened on the way. Without a launcher's elastic
 * environment the same code runs and never re-initialises.
 *
 * The data are Debian's dataset-fashion-mnist files (gzip'd IDX), read with zlib. */
#include <hvd/hvd.h>

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <zlib.h>

#define IN 784
#define HID 128
#define OUT 10
/* Parameter layout in one vector: W1[HID][IN], b1[HID], W2[OUT][HID], b2[OUT]. */
#define P_W1 0
#define P_B1 (P_W1 + HID * IN)
#define P_W2 (P_B1 + HID)
#define P_B2 (P_W2 + OUT * HID)
#define NPARAM (P_B2 + OUT)
/* The parameter tensors, in the order backpropagation finishes their gradients (the output
 * layer first), which is the order their allreduces are enqueued in. Each gradient has a
 * buffer of its own, as in a framework, reduced under its own name. */
enum { T_W2, T_B2, T_W1, T_B1, NTENSOR };
static const struct {
    const char *name; /* of its gradient's allreduce, the same at every step */
    size_t offset;    /* in the parameter vector */
    size_t count;
} TENSORS[NTENSOR] = {
    [T_W2] = {"grad.W2", P_W2, (OUT * HID)},
    [T_B2] = {"grad.b2", P_B2, OUT},
    [T_W1] = {"grad.W1", P_W1, (HID * IN)},
    [T_B1] = {"grad.b1", P_B1, HID},
};
/* Fixed-point scale of gradient contributions: 2^24 keeps ~7 digits of each contribution
 * and leaves 2^39 of headroom in an int64 for the sum over a batch. */
#define FIX_SCALE 16777216.0

typedef struct {
    uint8_t *pixels; /* n x 784 */
    uint8_t *labels;
    int n;
} dataset_t;

static int fail(const char *what) {
    fprintf(stderr, "train_fashion_mnist: rank %d: %s: %s\n", hvd_rank(), what, hvd_last_error());
    return 1;
}

/* fail() for the allreduce of a named tensor. */
static void fail_allreduce(const char *name) {
    char what[64];
    snprintf(what, sizeof what, "allreduce of %s", name);
    fail(what);
}

static uint32_t be32(const uint8_t *p) {
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* Read a gzip'd IDX file: magic 0x801 (labels) or 0x803 (28x28 images). Returns the item
 * count, or -1 with a message. *data_p is malloc'd. */
static int read_idx(const char *path, uint32_t magic, uint8_t **data_p) {
    gzFile f = gzopen(path, "rb");
    if (!f) {
        fprintf(stderr,
                "train_fashion_mnist: cannot open %s (apt-get install "
                "dataset-fashion-mnist, or pass --data DIR)\n",
                path);
        return -1;
    }
    uint8_t hdr[16];
    int hlen = magic == 0x803 ? 16 : 8;
    if (gzread(f, hdr, (unsigned)hlen) != hlen || be32(hdr) != magic ||
        (magic == 0x803 && (be32(hdr + 8) != 28 || be32(hdr + 12) != 28))) {
        fprintf(stderr, "train_fashion_mnist: %s is not an IDX file of the expected kind\n", path);
        gzclose(f);
        return -1;
    }
    uint32_t n = be32(hdr + 4);
    size_t item = magic == 0x803 ? IN : 1;
    if (n > 1000000) {
        fprintf(stderr, "train_fashion_mnist: %s claims %u items\n", path, n);
        gzclose(f);
        return -1;
    }
    uint8_t *data = malloc((size_t)n * item);
    if (!data || gzread(f, data, (unsigned)(n * item)) != (int)(n * item)) {
        fprintf(stderr, "train_fashion_mnist: %s is truncated\n", path);
        free(data);
        gzclose(f);
        return -1;
    }
    gzclose(f);
    *data_p = data;
    return (int)n;
}

static int load(const char *dir, const char *prefix, dataset_t *d) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s-images-idx3-ubyte.gz", dir, prefix);
    int n = read_idx(path, 0x803, &d->pixels);
    if (n < 0)
        return -1;
    snprintf(path, sizeof path, "%s/%s-labels-idx1-ubyte.gz", dir, prefix);
    int m = read_idx(path, 0x801, &d->labels);
    if (m != n) {
        if (m >= 0)
            fprintf(stderr, "train_fashion_mnist: %s: %d labels for %d images\n", path, m, n);
        return -1;
    }
    d->n = n;
    return 0;
}

/* splitmix64: a small, well-mixed generator, identical on every rank for the same seed. */
static uint64_t next_rand(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static double uniform(uint64_t *s) {
    return (double)(next_rand(s) >> 11) / 9007199254740992.0;
}

static void init_params(float *w, uint64_t seed) {
    uint64_t s = seed;
    double a1 = sqrt(6.0 / (IN + HID)), a2 = sqrt(6.0 / (HID + OUT)); /* Glorot uniform */
    memset(w, 0, NPARAM * sizeof *w);
    for (int i = 0; i < HID * IN; i++)
        w[P_W1 + i] = (float)((2 * uniform(&s) - 1) * a1);
    for (int i = 0; i < OUT * HID; i++)
        w[P_W2 + i] = (float)((2 * uniform(&s) - 1) * a2);
}

/* Forward pass of one image: hidden activations h, softmax probabilities prob. Returns the
 * predicted class. */
static int forward(const float *w, const uint8_t *px, float *h, float *prob) {
    float x[IN];
    for (int i = 0; i < IN; i++)
        x[i] = px[i] * (1.0f / 255.0f);
    for (int j = 0; j < HID; j++) {
        const float *row = w + P_W1 + j * IN;
        float z = w[P_B1 + j];
        for (int i = 0; i < IN; i++)
            z += row[i] * x[i];
        h[j] = z > 0 ? z : 0;
    }
    float zmax = -1e30f, z[OUT];
    for (int k = 0; k < OUT; k++) {
        const float *row = w + P_W2 + k * HID;
        float v = w[P_B2 + k];
        for (int j = 0; j < HID; j++)
            v += row[j] * h[j];
        z[k] = v;
        zmax = v > zmax ? v : zmax;
    }
    float sum = 0;
    int best = 0;
    for (int k = 0; k < OUT; k++) {
        prob[k] = expf(z[k] - zmax);
        sum += prob[k];
        best = z[k] > z[best] ? k : best;
    }
    for (int k = 0; k < OUT; k++)
        prob[k] /= sum;
    return best;
}

static int64_t fix(double v) {
    return (int64_t)llrint(v * FIX_SCALE);
}

/* Add one sample's gradient of the cross-entropy loss to the gradient buffers g[T_*] (fixed
 * point). Returns the sample's loss in fixed point. */
static int64_t backward(const float *w, const uint8_t *px, int label, int64_t *const *g,
                        int *correct) {
    float h[HID], prob[OUT];
    *correct = forward(w, px, h, prob) == label;
    float dz[OUT];
    for (int k = 0; k < OUT; k++)
        dz[k] = prob[k] - (k == label ? 1.0f : 0.0f);
    int64_t qdh[HID];
    for (int j = 0; j < HID; j++) {
        float d = 0;
        for (int k = 0; k < OUT; k++)
            d += w[P_W2 + k * HID + j] * dz[k];
        /* ReLU passes the gradient where the unit was active. The input is px / 255, so the
         * 1/255 is folded into the scale and the pixel stays an exact integer. */
        qdh[j] = h[j] > 0 ? fix(d / 255.0) : 0;
        g[T_B1][j] += h[j] > 0 ? fix(d) : 0;
    }
    for (int k = 0; k < OUT; k++) {
        g[T_B2][k] += fix(dz[k]);
        for (int j = 0; j < HID; j++)
            g[T_W2][k * HID + j] += fix((double)dz[k] * h[j]);
    }
    for (int j = 0; j < HID; j++) {
        if (!qdh[j])
            continue;
        int64_t *row = g[T_W1] + j * IN;
        int64_t q = qdh[j];
        for (int i = 0; i < IN; i++)
            row[i] += q * px[i];
    }
    return fix(-log(prob[label] > 1e-30f ? prob[label] : 1e-30f));
}

static void shuffle(int *idx, int n, uint64_t *s) {
    for (int i = n - 1; i > 0; i--) {
        int j = (int)(next_rand(s) % (uint64_t)(i + 1));
        int t = idx[i];
        idx[i] = idx[j];
        idx[j] = t;
    }
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

#define NSTATS 3 /* loss (fixed point), correct, samples */

/* Sum the batch's gradient buffers g[T_*] and statistics stats over all ranks, in place.
 * Asynchronous: enqueue each tensor as soon as it is ready (all at once here, in backprop
 * order) and wait for all of them before the update, so the core negotiates and fuses them
 * together. Blocking: one collective per tensor. Either way the sums are exact integers, so
 * the result is the same to the bit. Reports its failure. */
static hvd_status_t reduce_batch(int64_t *const *g, int64_t *stats, int blocking) {
    hvd_handle_t h[NTENSOR + 1];
    int n = 0;
    hvd_status_t st = HVD_OK;
    for (int t = 0; t <= NTENSOR && st == HVD_OK; t++) {
        const char *name = t < NTENSOR ? TENSORS[t].name : "stats";
        int64_t *buf = t < NTENSOR ? g[t] : stats;
        size_t count = t < NTENSOR ? TENSORS[t].count : NSTATS;
        st = blocking ? hvd_allreduce(buf, buf, count, HVD_INT64, HVD_SUM)
                      : hvd_allreduce_async(name, buf, buf, count, HVD_INT64, HVD_SUM, &h[n]);
        if (st != HVD_OK)
            fail_allreduce(name);
        else if (!blocking)
            n++;
    }
    /* Whatever was enqueued before a failure must finish before the buffers are reused. */
    for (int i = 0; i < n; i++) {
        hvd_status_t wst = hvd_wait(h[i]);
        if (wst != HVD_OK && st == HVD_OK) {
            fail_allreduce(i < NTENSOR ? TENSORS[i].name : "stats");
            st = wst;
        }
    }
    return st;
}

/* The training: its state (every field up to the configuration is what a commit saves in
 * elastic mode) and how to run it. */
typedef struct {
    float *w, *vel;         /* parameters and momentum */
    int *idx;               /* the current epoch's sample order */
    uint64_t shuffle_state; /* the generator that shuffles the next epoch */
    int64_t epoch;          /* 1-based */
    int64_t start;          /* position of the next batch in idx */
    int64_t totals[NSTATS]; /* the epoch's sums over all ranks so far */
    int64_t commits;        /* commits made (elastic) */
    /* configuration */
    const dataset_t *train;
    int epochs, batch, blocking, commit_every;
    double lr, momentum;
    int64_t *g[NTENSOR];
} trainer_t;

_Static_assert(sizeof(int) == 4, "the sample order is registered as HVD_INT32");

/* Train until the last epoch is done: called once in a static job, and again by
 * hvd_elastic_run (state non-NULL) after every re-initialisation, perhaps with another rank
 * and size, from where the state says. Returns the status of a failed collective. */
static hvd_status_t train_loop(hvd_elastic_state_t *state, void *arg) {
    trainer_t *t = arg;
    const dataset_t *train = t->train;
    int rank = hvd_rank(), size = hvd_size();
    int64_t per_epoch = (train->n + t->batch - 1) / t->batch;
    double t0 = now_s();
    while (t->epoch <= t->epochs) {
        int start = (int)t->start;
        int n = train->n - start < t->batch ? train->n - start : t->batch;
        int64_t stats[NSTATS] = {0, 0, 0}; /* this rank's share of the batch */
        for (int k = 0; k < NTENSOR; k++)
            memset(t->g[k], 0, TENSORS[k].count * sizeof *t->g[k]);
        for (int pos = rank; pos < n; pos += size) {
            int s = t->idx[start + pos], ok;
            stats[0] += backward(t->w, train->pixels + (size_t)s * IN, train->labels[s], t->g, &ok);
            stats[1] += ok;
            stats[2]++;
        }
        hvd_status_t st = reduce_batch(t->g, stats, t->blocking);
        if (st != HVD_OK)
            return st;
        for (int k = 0; k < NSTATS; k++)
            t->totals[k] += stats[k];
        float step = (float)(t->lr / (n * FIX_SCALE));
        for (int k = 0; k < NTENSOR; k++) {
            float *wt = t->w + TENSORS[k].offset, *vt = t->vel + TENSORS[k].offset;
            for (size_t i = 0; i < TENSORS[k].count; i++) {
                vt[i] = (float)t->momentum * vt[i] + (float)t->g[k][i] * step;
                wt[i] -= vt[i];
            }
        }
        t->start += t->batch;
        int64_t done = (t->epoch - 1) * per_epoch + t->start / t->batch; /* batches so far */
        int64_t batch_no = (t->start + t->batch - 1) / t->batch;         /* in this epoch */
        int64_t epoch_done = t->epoch;
        if (t->start >= train->n) {
            double secs = now_s() - t0;
            if (rank == 0) {
                printf("epoch %lld/%d: loss %.4f, train accuracy %.2f%%, %.0f images/s\n",
                       (long long)t->epoch, t->epochs,
                       (double)t->totals[0] / FIX_SCALE / (double)t->totals[2],
                       100.0 * (double)t->totals[1] / (double)t->totals[2],
                       (double)t->totals[2] / secs);
                fflush(stdout);
            }
            t->epoch++;
            t->start = 0;
            memset(t->totals, 0, sizeof t->totals);
            if (t->epoch <= t->epochs)
                shuffle(t->idx, train->n, &t->shuffle_state);
            t0 = now_s();
        }
        if (state && t->commit_every > 0 && done % t->commit_every == 0) {
            t->commits++;
            if ((st = hvd_elastic_commit(state)) != HVD_OK)
                return st;
            if (rank == 0) {
                printf("commit %lld epoch %lld batch %lld size %d\n", (long long)t->commits,
                       (long long)epoch_done, (long long)batch_no, size);
                fflush(stdout);
            }
        }
    }
    return HVD_OK;
}

/* Elastic mode: hvd_init, retried while the round this process was started for fails as it
 * forms (the next attempt joins the driver's next round). */
static hvd_status_t init_elastic(void) {
    hvd_status_t st;
    while ((st = hvd_init()) == HVD_ERR_PEER_LOST || st == HVD_ERR_TIMEOUT)
        fprintf(stderr, "train_fashion_mnist: hvd_init: %s; trying again\n", hvd_last_error());
    return st;
}

/* Run the training under hvd_elastic_run with the whole trainer state registered. */
static hvd_status_t train_elastic(trainer_t *t) {
    hvd_elastic_state_t *state;
    hvd_status_t st = hvd_elastic_state_create(NULL, &state);
    if (st != HVD_OK)
        return st;
    struct {
        const char *name;
        void *buf;
        size_t count;
        hvd_dtype_t dtype;
    } parts[] = {
        {"w", t->w, NPARAM, HVD_FLOAT32},
        {"vel", t->vel, NPARAM, HVD_FLOAT32},
        {"idx", t->idx, (size_t)t->train->n, HVD_INT32},
        {"shuffle_state", &t->shuffle_state, 1, HVD_INT64}, /* 8 bytes, copied as they are */
        {"epoch", &t->epoch, 1, HVD_INT64},
        {"start", &t->start, 1, HVD_INT64},
        {"totals", t->totals, NSTATS, HVD_INT64},
        {"commits", &t->commits, 1, HVD_INT64},
    };
    for (size_t i = 0; i < sizeof parts / sizeof parts[0] && st == HVD_OK; i++)
        st = hvd_elastic_state_add(state, parts[i].name, parts[i].buf, parts[i].count,
                                   parts[i].dtype);
    if (st == HVD_OK)
        st = hvd_elastic_run(state, train_loop, t);
    if (st == HVD_OK && hvd_elastic_resets(state) > 0 && hvd_rank() == 0)
        printf("recovered from %d re-initialisation%s\n", hvd_elastic_resets(state),
               hvd_elastic_resets(state) > 1 ? "s" : "");
    hvd_elastic_state_destroy(state);
    return st;
}

int main(int argc, char **argv) {
    int epochs = 3, batch = 128, train_limit = 0, blocking = 0, elastic_commit = 0;
    double lr = 0.1, momentum = 0.9;
    uint64_t seed = 1;
    const char *dir = "/usr/share/datasets/fashion-mnist";
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--blocking") == 0) {
            blocking = 1;
            continue;
        }
        if (!v) {
            fprintf(stderr, "train_fashion_mnist: %s needs a value\n", a);
            return 2;
        }
        if (strcmp(a, "--epochs") == 0)
            epochs = atoi(v);
        else if (strcmp(a, "--batch") == 0)
            batch = atoi(v);
        else if (strcmp(a, "--lr") == 0)
            lr = atof(v);
        else if (strcmp(a, "--seed") == 0)
            seed = strtoull(v, NULL, 10);
        else if (strcmp(a, "--train-limit") == 0)
            train_limit = atoi(v);
        else if (strcmp(a, "--data") == 0)
            dir = v;
        else if (strcmp(a, "--elastic-commit") == 0)
            elastic_commit = atoi(v);
        else {
            fprintf(stderr, "train_fashion_mnist: unknown option %s\n", a);
            return 2;
        }
        i++;
    }
    if (epochs < 1 || batch < 1 || lr <= 0 || elastic_commit < 0) {
        fprintf(stderr, "train_fashion_mnist: need --epochs >= 1, --batch >= 1, --lr > 0, "
                        "--elastic-commit >= 0\n");
        return 2;
    }
    hvd_status_t ist = elastic_commit ? init_elastic() : hvd_init();
    if (ist == HVD_ERR_SHUT_DOWN && elastic_commit) { /* removed before it began */
        fprintf(stderr, "train_fashion_mnist: %s\n", hvd_last_error());
        return 0;
    }
    if (ist != HVD_OK)
        return fail("hvd_init");
    int rank = hvd_rank(), size = hvd_size();
    dataset_t train, test;
    if (load(dir, "train", &train) != 0 || load(dir, "t10k", &test) != 0) {
        hvd_shutdown();
        return 1;
    }
    if (train_limit > 0 && train_limit < train.n)
        train.n = train_limit;

    trainer_t t = {.train = &train,
                   .epochs = epochs,
                   .batch = batch,
                   .blocking = blocking,
                   .commit_every = elastic_commit,
                   .lr = lr,
                   .momentum = momentum,
                   .epoch = 1,
                   .shuffle_state = seed ^ 0x5bd1e995ull};
    t.w = calloc(NPARAM, sizeof *t.w);
    t.vel = calloc(NPARAM, sizeof *t.vel);
    int nomem = 0;
    for (int k = 0; k < NTENSOR; k++)
        nomem |= !(t.g[k] = malloc(TENSORS[k].count * sizeof *t.g[k]));
    t.idx = malloc((size_t)train.n * sizeof *t.idx);
    if (!t.w || !t.vel || nomem || !t.idx) {
        fprintf(stderr, "train_fashion_mnist: out of memory\n");
        return 1;
    }
    float *w = t.w;
    if (rank == 0)
        init_params(w, seed);
    /* Elastic mode: hvd_elastic_run's first sync broadcasts the whole state from rank 0. */
    if (!elastic_commit) {
        hvd_handle_t bh;
        if (hvd_broadcast_async("params.init", w, NPARAM, HVD_FLOAT32, 0, &bh) != HVD_OK)
            return fail("broadcast of the initial parameters");
        if (hvd_wait(bh) != HVD_OK)
            return fail("broadcast of the initial parameters");
    }
    if (rank == 0)
        printf("training a 784-128-10 perceptron on %d Fashion-MNIST images with %d rank%s, "
               "global batch %d%s\n",
               train.n, size, size > 1 ? "s" : "", batch, elastic_commit ? " (elastic)" : "");

    for (int i = 0; i < train.n; i++)
        t.idx[i] = i;
    shuffle(t.idx, train.n, &t.shuffle_state);
    hvd_status_t st = elastic_commit ? train_elastic(&t) : train_loop(NULL, &t);
    if (st == HVD_ERR_SHUT_DOWN && elastic_commit) {
        /* removed from the job, or the job stopped: not a failure of this worker */
        fprintf(stderr, "train_fashion_mnist: %s\n", hvd_last_error());
        return 0;
    }
    if (st != HVD_OK)
        return fail("training");
    rank = hvd_rank(); /* elastic: the latest world's */
    size = hvd_size();

    int64_t correct[2] = {0, 0};
    for (int s = rank; s < test.n; s += size) {
        float h[HID], prob[OUT];
        correct[0] += forward(w, test.pixels + (size_t)s * IN, h, prob) == test.labels[s];
        correct[1]++;
    }
    if (hvd_allreduce(correct, correct, 2, HVD_INT64, HVD_SUM) != HVD_OK)
        return fail("allreduce of the test accuracy");
    /* A digest of the final weights, so runs with different rank counts can be compared. */
    uint64_t digest = 1469598103934665603ull;
    const uint8_t *wb = (const uint8_t *)w;
    for (size_t i = 0; i < NPARAM * sizeof *w; i++)
        digest = (digest ^ wb[i]) * 1099511628211ull;
    if (rank == 0)
        printf("test accuracy %.2f%% (%lld of %lld images), weights digest %016llx\n",
               100.0 * (double)correct[0] / (double)correct[1], (long long)correct[0],
               (long long)correct[1], (unsigned long long)digest);
    free(t.w);
    free(t.vel);
    for (int k = 0; k < NTENSOR; k++)
        free(t.g[k]);
    free(t.idx);
    free(train.pixels);
    free(train.labels);
    free(test.pixels);
    free(test.labels);
    return hvd_shutdown() == HVD_OK ? 0 : 1;
}
