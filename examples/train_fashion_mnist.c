/* Data-parallel training on libhvd: a two-layer perceptron (784-128-10, ReLU, softmax
 * cross-entropy) on Fashion-MNIST, trained with SGD and momentum.
 *
 *   horovodrun -np 2 ./build/examples/train_fashion_mnist [--epochs 3] [--batch 128]
 *       [--lr 0.1] [--seed 1] [--train-limit N] [--data /usr/share/datasets/fashion-mnist]
 *       [--blocking]
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

int main(int argc, char **argv) {
    int epochs = 3, batch = 128, train_limit = 0, blocking = 0;
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
        else {
            fprintf(stderr, "train_fashion_mnist: unknown option %s\n", a);
            return 2;
        }
        i++;
    }
    if (epochs < 1 || batch < 1 || lr <= 0) {
        fprintf(stderr, "train_fashion_mnist: need --epochs >= 1, --batch >= 1, --lr > 0\n");
        return 2;
    }
    if (hvd_init() != HVD_OK)
        return fail("hvd_init");
    int rank = hvd_rank(), size = hvd_size();
    dataset_t train, test;
    if (load(dir, "train", &train) != 0 || load(dir, "t10k", &test) != 0) {
        hvd_shutdown();
        return 1;
    }
    if (train_limit > 0 && train_limit < train.n)
        train.n = train_limit;

    float *w = malloc(NPARAM * sizeof *w), *vel = calloc(NPARAM, sizeof *vel);
    int64_t *g[NTENSOR];
    int nomem = 0;
    for (int t = 0; t < NTENSOR; t++)
        nomem |= !(g[t] = malloc(TENSORS[t].count * sizeof *g[t]));
    int *idx = malloc((size_t)train.n * sizeof *idx);
    if (!w || !vel || nomem || !idx) {
        fprintf(stderr, "train_fashion_mnist: out of memory\n");
        return 1;
    }
    if (rank == 0)
        init_params(w, seed);
    hvd_handle_t bh;
    if (hvd_broadcast_async("params.init", w, NPARAM, HVD_FLOAT32, 0, &bh) != HVD_OK)
        return fail("broadcast of the initial parameters");
    if (hvd_wait(bh) != HVD_OK)
        return fail("broadcast of the initial parameters");
    if (rank == 0)
        printf("training a 784-128-10 perceptron on %d Fashion-MNIST images with %d rank%s, "
               "global batch %d\n",
               train.n, size, size > 1 ? "s" : "", batch);

    uint64_t shuffle_state = seed ^ 0x5bd1e995ull;
    for (int i = 0; i < train.n; i++)
        idx[i] = i;
    for (int e = 1; e <= epochs; e++) {
        double t0 = now_s();
        shuffle(idx, train.n, &shuffle_state);
        int64_t total[NSTATS] = {0, 0, 0}; /* the epoch's sums over all ranks */
        for (int start = 0; start < train.n; start += batch) {
            int n = train.n - start < batch ? train.n - start : batch;
            int64_t stats[NSTATS] = {0, 0, 0}; /* this rank's share of the batch */
            for (int t = 0; t < NTENSOR; t++)
                memset(g[t], 0, TENSORS[t].count * sizeof *g[t]);
            for (int pos = rank; pos < n; pos += size) {
                int s = idx[start + pos], ok;
                stats[0] += backward(w, train.pixels + (size_t)s * IN, train.labels[s], g, &ok);
                stats[1] += ok;
                stats[2]++;
            }
            if (reduce_batch(g, stats, blocking) != HVD_OK)
                return 1;
            for (int k = 0; k < NSTATS; k++)
                total[k] += stats[k];
            float step = (float)(lr / (n * FIX_SCALE));
            for (int t = 0; t < NTENSOR; t++) {
                float *wt = w + TENSORS[t].offset, *vt = vel + TENSORS[t].offset;
                for (size_t i = 0; i < TENSORS[t].count; i++) {
                    vt[i] = (float)momentum * vt[i] + (float)g[t][i] * step;
                    wt[i] -= vt[i];
                }
            }
        }
        double secs = now_s() - t0;
        if (rank == 0) {
            printf("epoch %d/%d: loss %.4f, train accuracy %.2f%%, %.0f images/s\n", e, epochs,
                   (double)total[0] / FIX_SCALE / (double)total[2],
                   100.0 * (double)total[1] / (double)total[2], (double)total[2] / secs);
            fflush(stdout);
        }
    }

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
    free(w);
    free(vel);
    for (int t = 0; t < NTENSOR; t++)
        free(g[t]);
    free(idx);
    free(train.pixels);
    free(train.labels);
    free(test.pixels);
    free(test.labels);
    return hvd_shutdown() == HVD_OK ? 0 : 1;
}
