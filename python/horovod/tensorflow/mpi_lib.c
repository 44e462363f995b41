/* horovod.tensorflow's operations as TensorFlow kernels, written in C against TensorFlow's C
 * kernel API (tensorflow/c/kernels.h, ops.h), over libhvd's public API.
 *
 * The ops carry Horovod's names and attributes (HorovodAllreduce, HorovodAllgather, ...), so
 * graphs and SavedModels that name them keep working. Every collective is an asynchronous
 * kernel: ComputeAsync enqueues the named operation and returns; libhvd calls back
 * (hvd_on_done) from its background thread when the operation completes, and the callback
 * finishes the kernel. A graph of many collectives therefore never holds TensorFlow's
 * threads while the ranks negotiate, and all of them are negotiated and fused by the same
 * engine as the torch binding's.
 *
 * Outputs whose size only the negotiation knows (allgather, alltoall) are allocated from
 * libhvd's allocation callback, on the thread that runs the operation; TensorFlow allows an
 * asynchronous kernel's context to be used from any thread until its done callback runs.
 *
 * Errors map to TensorFlow's codes as Horovod's do: an argument this rank got wrong is
 * InvalidArgument, ranks that disagree is FailedPrecondition, a lost peer, a shutdown or a
 * timeout is Unknown (what horovod.tensorflow.elastic turns into HorovodInternalError), and
 * a host change announced by the elastic driver is Aborted. */
/* ops.h declares its types as C++ does (struct tags without typedefs): name them for C. */
typedef struct TF_DimensionHandle TF_DimensionHandle;
typedef struct TF_OpDefinitionBuilder TF_OpDefinitionBuilder;
typedef struct TF_ShapeHandle TF_ShapeHandle;
typedef struct TF_ShapeInferenceContext TF_ShapeInferenceContext;

#include <tensorflow/c/kernels.h>
#include <tensorflow/c/ops.h>
#include <tensorflow/c/tf_status.h>
#include <tensorflow/c/tf_tensor.h>

#include <hvd/hvd.h>

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_DIMS 32

/* mpi_lib_done.cc: the done callback moved out of ComputeAsync's parameter (why: there),
 * and run once. */
void *hvd_tf_keep_done(void *done);
void hvd_tf_run_kept_done(void *kept);

/* ---- status and types ------------------------------------------------------------------ */

static TF_Code tf_code(hvd_status_t st) {
    switch (st) {
    case HVD_OK:
        return TF_OK;
    case HVD_ERR_INVALID_ARG:
        return TF_INVALID_ARGUMENT;
    case HVD_ERR_MISMATCH:
        return TF_FAILED_PRECONDITION;
    case HVD_ERR_HOSTS_UPDATED:
        return TF_ABORTED;
    default:
        return TF_UNKNOWN;
    }
}

static void fail(TF_OpKernelContext *ctx, TF_Code code, const char *message) {
    TF_Status *s = TF_NewStatus();
    TF_SetStatus(s, code, message);
    TF_OpKernelContext_Failure(ctx, s);
    TF_DeleteStatus(s);
}

static void fail_hvd(TF_OpKernelContext *ctx, hvd_status_t st, const char *message) {
    fail(ctx, tf_code(st), message && *message ? message : hvd_status_str(st));
}

/* hvd's dtype of a TensorFlow type, or -1. */
static int hvd_dtype_of(TF_DataType t) {
    switch (t) {
    case TF_UINT8:
        return HVD_UINT8;
    case TF_INT8:
        return HVD_INT8;
    case TF_UINT16:
        return HVD_UINT16;
    case TF_INT16:
        return HVD_INT16;
    case TF_INT32:
        return HVD_INT32;
    case TF_INT64:
        return HVD_INT64;
    case TF_HALF:
        return HVD_FLOAT16;
    case TF_FLOAT:
        return HVD_FLOAT32;
    case TF_DOUBLE:
        return HVD_FLOAT64;
    case TF_BOOL:
        return HVD_BOOL;
    case TF_BFLOAT16:
        return HVD_BFLOAT16;
    default:
        return -1;
    }
}

/* ---- the kernel: attributes read once, at construction ---------------------------------- */

enum kind { K_ALLREDUCE, K_ALLGATHER, K_BROADCAST, K_ALLTOALL, K_REDUCESCATTER };

typedef struct {
    enum kind kind;
    char *name; /* the node's name (its last component with ignore_name_scope) */
    int reduce_op;
    float prescale, postscale;
    int root;
    int process_set;
} kernel_t;

/* An attribute's value, or def when the op has no such attribute. */
static int32_t attr_int(TF_OpKernelConstruction *c, const char *name, int32_t def) {
    TF_Status *s = TF_NewStatus();
    int32_t v = def;
    TF_OpKernelConstruction_GetAttrInt32(c, name, &v, s);
    if (TF_GetCode(s) != TF_OK)
        v = def;
    TF_DeleteStatus(s);
    return v;
}

static float attr_float(TF_OpKernelConstruction *c, const char *name, float def) {
    TF_Status *s = TF_NewStatus();
    float v = def;
    TF_OpKernelConstruction_GetAttrFloat(c, name, &v, s);
    if (TF_GetCode(s) != TF_OK)
        v = def;
    TF_DeleteStatus(s);
    return v;
}

static int attr_bool(TF_OpKernelConstruction *c, const char *name) {
    TF_Status *s = TF_NewStatus();
    TF_Bool v = 0;
    TF_OpKernelConstruction_GetAttrBool(c, name, &v, s);
    int r = TF_GetCode(s) == TF_OK && v;
    TF_DeleteStatus(s);
    return r;
}

static void *create(TF_OpKernelConstruction *c, enum kind kind) {
    kernel_t *k = calloc(1, sizeof *k);
    if (!k)
        return NULL;
    k->kind = kind;
    TF_StringView node = TF_OpKernelConstruction_GetName(c);
    const char *start = node.data;
    size_t len = node.len;
    if (attr_bool(c, "ignore_name_scope")) {
        for (size_t i = len; i > 0; i--) {
            if (node.data[i - 1] == '/') {
                start = node.data + i;
                len = node.len - i;
                break;
            }
        }
    }
    k->name = malloc(len + 1);
    if (!k->name) {
        free(k);
        return NULL;
    }
    memcpy(k->name, start, len);
    k->name[len] = '\0';
    k->reduce_op = attr_int(c, "reduce_op", HVD_SUM);
    k->prescale = attr_float(c, "prescale_factor", 1.0f);
    k->postscale = attr_float(c, "postscale_factor", 1.0f);
    k->root = attr_int(c, "root_rank", 0);
    k->process_set = attr_int(c, "process_set_id", 0);
    return k;
}

static void *create_allreduce(TF_OpKernelConstruction *c) {
    return create(c, K_ALLREDUCE);
}
static void *create_allgather(TF_OpKernelConstruction *c) {
    return create(c, K_ALLGATHER);
}
static void *create_broadcast(TF_OpKernelConstruction *c) {
    return create(c, K_BROADCAST);
}
static void *create_alltoall(TF_OpKernelConstruction *c) {
    return create(c, K_ALLTOALL);
}
static void *create_reducescatter(TF_OpKernelConstruction *c) {
    return create(c, K_REDUCESCATTER);
}

static void delete_kernel(void *p) {
    kernel_t *k = p;
    if (k)
        free(k->name);
    free(k);
}

/* ---- one execution of a kernel: its tensors and pending operations ---------------------- */

typedef struct job job_t;

typedef struct {
    job_t *job;
    int index; /* input and output index */
    TF_Tensor *in, *out;
    int ndim;
    int64_t dims[MAX_DIMS];
    TF_DataType dtype;
} slot_t;

struct job {
    TF_OpKernelContext *ctx;
    void *done; /* hvd_tf_keep_done's */
    enum kind kind;
    int n;
    int remaining; /* operations not yet completed (atomic) */
    pthread_mutex_t lock;
    hvd_status_t status; /* the first failure */
    char message[1024];
    TF_Tensor *splits_out; /* alltoall's received splits */
    slot_t slots[];
};

static void job_free(job_t *j) {
    for (int i = 0; i < j->n; i++) {
        if (j->slots[i].in)
            TF_DeleteTensor(j->slots[i].in);
        if (j->slots[i].out)
            TF_DeleteTensor(j->slots[i].out);
    }
    if (j->splits_out)
        TF_DeleteTensor(j->splits_out);
    pthread_mutex_destroy(&j->lock);
    free(j);
}

static void job_note_failure(job_t *j, hvd_status_t st, const char *message) {
    pthread_mutex_lock(&j->lock);
    if (j->status == HVD_OK) {
        j->status = st;
        snprintf(j->message, sizeof j->message, "%s", message && *message ? message : "");
    }
    pthread_mutex_unlock(&j->lock);
}

/* The kernel ends: report the first failure, if any, and hand control back to TensorFlow. */
static void job_finish(job_t *j) {
    if (j->status != HVD_OK)
        fail_hvd(j->ctx, j->status, j->message);
    void *done = j->done;
    job_free(j);
    hvd_tf_run_kept_done(done);
}

static void on_done(void *user, hvd_status_t st, const char *message) {
    job_t *j = user;
    if (st != HVD_OK)
        job_note_failure(j, st, message);
    if (__atomic_sub_fetch(&j->remaining, 1, __ATOMIC_ACQ_REL) == 0)
        job_finish(j);
}

/* libhvd's allocator of a negotiated output (allgather, alltoall): the output of count
 * elements, its first dimension the rows that came from every rank. */
static void *on_alloc(void *user, size_t count, const size_t *counts, int n) {
    slot_t *s = user;
    job_t *j = s->job;
    int64_t row = 1;
    for (int d = 1; d < s->ndim; d++)
        row *= s->dims[d];
    int64_t dims[MAX_DIMS];
    memcpy(dims, s->dims, sizeof dims);
    dims[0] = row > 0 ? (int64_t)count / row : 0;
    size_t width = TF_DataTypeSize(s->dtype);
    TF_Status *ts = TF_NewStatus();
    s->out =
        TF_AllocateOutput(j->ctx, s->index, s->dtype, dims, s->ndim, (size_t)count * width, ts);
    if (TF_GetCode(ts) == TF_OK && j->kind == K_ALLTOALL) {
        int64_t len = n;
        j->splits_out = TF_AllocateOutput(j->ctx, 1, TF_INT32, &len, 1, (size_t)n * 4, ts);
        if (TF_GetCode(ts) == TF_OK) {
            int32_t *rs = TF_TensorData(j->splits_out);
            for (int r = 0; r < n; r++)
                rs[r] = row > 0 ? (int32_t)((int64_t)counts[r] / row) : 0;
        }
    }
    void *data = NULL;
    if (TF_GetCode(ts) == TF_OK && s->out)
        data = TF_TensorData(s->out);
    if (TF_GetCode(ts) != TF_OK)
        job_note_failure(j, HVD_ERR_NO_MEMORY, TF_Message(ts));
    TF_DeleteStatus(ts);
    /* An empty output needs no memory; libhvd reads NULL with count 0 as that. */
    return count ? data : NULL;
}

/* A pointer libhvd accepts for an empty tensor's buffer (TensorFlow may give NULL). */
static char empty_buf[8];

static void *data_of(TF_Tensor *t) {
    void *d = t ? TF_TensorData(t) : NULL;
    return d ? d : empty_buf;
}

/* This rank's rows of a reducescatter of rows rows over the process set. */
static hvd_status_t scatter_rows(int pset, int64_t rows, int64_t *mine) {
    int rank = -1, size = 0;
    hvd_status_t st = hvd_process_set_info(pset, &rank, &size);
    if (st != HVD_OK)
        return st;
    if (rank < 0 || size <= 0)
        return HVD_ERR_INVALID_ARG;
    *mine = rows / size + (rank < rows % size ? 1 : 0);
    return HVD_OK;
}

static const char *op_word(enum kind kind) {
    static const char *words[] = {"allreduce", "allgather", "broadcast", "alltoall",
                                  "reducescatter"};
    return words[kind];
}

static hvd_op_type_t op_type(enum kind kind) {
    switch (kind) {
    case K_ALLREDUCE:
        return HVD_OP_ALLREDUCE;
    case K_ALLGATHER:
        return HVD_OP_ALLGATHER;
    case K_BROADCAST:
        return HVD_OP_BROADCAST;
    case K_ALLTOALL:
        return HVD_OP_ALLTOALL;
    default:
        return HVD_OP_REDUCESCATTER;
    }
}

/* ComputeAsync of every collective: inputs 0..n-1 are the tensors (alltoall: input 1 its
 * splits), outputs likewise. */
static void compute_async(void *kp, TF_OpKernelContext *ctx,
                          TF_AsyncOpKernelDoneCallback *tf_done) {
    kernel_t *k = kp;
    void *done = hvd_tf_keep_done(tf_done);
    if (!done) {
        fail(ctx, TF_RESOURCE_EXHAUSTED, "horovod: out of memory starting an operation");
        TF_RunAsyncOpKernelDoneCallback(tf_done);
        return;
    }
    int n = k->kind == K_ALLTOALL ? 1 : TF_NumInputs(ctx);
    char why[1200];
    job_t *j = calloc(1, sizeof *j + (size_t)(n > 0 ? n : 1) * sizeof(slot_t));
    hvd_tensor_op_t *ops = calloc((size_t)(n > 0 ? n : 1), sizeof *ops);
    hvd_handle_t *handles = calloc((size_t)(n > 0 ? n : 1), sizeof *handles);
    char **names = calloc((size_t)(n > 0 ? n : 1), sizeof *names);
    int64_t *splits = NULL;
    TF_Status *ts = TF_NewStatus();
    if (!j || !ops || !handles || !names || !ts) {
        fail(ctx, TF_RESOURCE_EXHAUSTED, "horovod: out of memory starting an operation");
        free(j);
        j = NULL;
        hvd_tf_run_kept_done(done);
        goto out;
    }
    pthread_mutex_init(&j->lock, NULL);
    j->ctx = ctx;
    j->done = done;
    j->kind = k->kind;
    j->n = n;
    if (!hvd_is_initialized()) {
        fail(ctx, TF_FAILED_PRECONDITION, "Horovod has not been initialized; use hvd.init().");
        goto fail_job;
    }
    for (int i = 0; i < n; i++) {
        slot_t *s = &j->slots[i];
        s->job = j;
        s->index = i;
        TF_GetInput(ctx, i, &s->in, ts);
        if (TF_GetCode(ts) != TF_OK) {
            fail(ctx, TF_GetCode(ts), TF_Message(ts));
            goto fail_job;
        }
        s->dtype = TF_TensorType(s->in);
        s->ndim = TF_NumDims(s->in);
        if (s->ndim > MAX_DIMS) {
            snprintf(why, sizeof why, "horovod %s: a tensor of %d dimensions (at most %d)",
                     op_word(k->kind), s->ndim, MAX_DIMS);
            fail(ctx, TF_INVALID_ARGUMENT, why);
            goto fail_job;
        }
        for (int d = 0; d < s->ndim; d++)
            s->dims[d] = TF_Dim(s->in, d);
        int dt = hvd_dtype_of(s->dtype);
        if (dt < 0) {
            snprintf(why, sizeof why, "horovod %s: TensorFlow type %d is not supported",
                     op_word(k->kind), (int)s->dtype);
            fail(ctx, TF_INVALID_ARGUMENT, why);
            goto fail_job;
        }
        size_t nbytes = TF_TensorByteSize(s->in);
        hvd_tensor_op_t *o = &ops[i];
        hvd_tensor_op_init(o);
        size_t nlen = strlen(k->name) + 16;
        if (!(names[i] = malloc(nlen))) {
            fail(ctx, TF_RESOURCE_EXHAUSTED, "horovod: out of memory starting an operation");
            goto fail_job;
        }
        if (n > 1)
            snprintf(names[i], nlen, "%s_%d", k->name, i);
        else
            snprintf(names[i], nlen, "%s", k->name);
        o->name = names[i];
        o->send = data_of(s->in);
        o->dtype = (hvd_dtype_t)dt;
        o->ndim = s->ndim;
        o->shape = s->dims;
        o->op = (hvd_reduce_op_t)k->reduce_op;
        o->prescale = k->prescale;
        o->postscale = k->postscale;
        o->root = k->root;
        o->process_set = k->process_set;
        switch (k->kind) {
        case K_ALLREDUCE:
        case K_BROADCAST:
            s->out = TF_AllocateOutput(ctx, i, s->dtype, s->dims, s->ndim, nbytes, ts);
            if (TF_GetCode(ts) != TF_OK)
                break;
            o->recv = data_of(s->out);
            if (k->kind == K_BROADCAST) {
                /* the buffer is the root's input and every other rank's output */
                if (hvd_rank() == k->root && nbytes)
                    memcpy(o->recv, data_of(s->in), nbytes);
                o->send = NULL;
            }
            break;
        case K_REDUCESCATTER: {
            if (s->ndim == 0) {
                fail(ctx, TF_INVALID_ARGUMENT,
                     "HorovodReducescatter does not support scalar inputs.");
                goto fail_job;
            }
            int64_t dims[MAX_DIMS], row = 1;
            memcpy(dims, s->dims, sizeof dims);
            for (int d = 1; d < s->ndim; d++)
                row *= dims[d];
            hvd_status_t st = scatter_rows(k->process_set, dims[0], &dims[0]);
            if (st != HVD_OK) {
                fail_hvd(ctx, st, hvd_last_error());
                goto fail_job;
            }
            s->out = TF_AllocateOutput(ctx, i, s->dtype, dims, s->ndim,
                                       (size_t)(dims[0] * row) * TF_DataTypeSize(s->dtype), ts);
            if (TF_GetCode(ts) == TF_OK)
                o->recv = data_of(s->out);
            break;
        }
        case K_ALLGATHER:
        case K_ALLTOALL:
            o->alloc = on_alloc;
            o->alloc_user = s;
            break;
        }
        if (TF_GetCode(ts) != TF_OK) {
            fail(ctx, TF_GetCode(ts), TF_Message(ts));
            goto fail_job;
        }
    }
    if (k->kind == K_ALLTOALL) {
        TF_Tensor *sp = NULL;
        TF_GetInput(ctx, 1, &sp, ts);
        if (TF_GetCode(ts) != TF_OK) {
            fail(ctx, TF_GetCode(ts), TF_Message(ts));
            goto fail_job;
        }
        int64_t m = TF_TensorElementCount(sp);
        if (m > 0) {
            splits = malloc((size_t)m * sizeof *splits);
            const int32_t *v = TF_TensorData(sp);
            for (int64_t r = 0; splits && r < m; r++)
                splits[r] = v[r];
            int me = -1, size = 0;
            hvd_process_set_info(k->process_set, &me, &size);
            if (m != size) {
                snprintf(why, sizeof why,
                         "horovod alltoall '%s': splits has %lld entries; the process set has "
                         "%d ranks",
                         k->name, (long long)m, size);
                TF_DeleteTensor(sp);
                fail(ctx, TF_INVALID_ARGUMENT, why);
                goto fail_job;
            }
            ops[0].splits = splits;
        }
        TF_DeleteTensor(sp);
    }
    j->remaining = n;
    hvd_status_t st = n ? hvd_enqueue(op_type(k->kind), ops, (size_t)n, handles) : HVD_OK;
    if (st != HVD_OK) {
        fail_hvd(ctx, st, hvd_last_error());
        goto fail_job;
    }
    if (n == 0) {
        job_finish(j);
        j = NULL;
        goto out;
    }
    /* From the first registration on, the callbacks own the job. */
    for (int i = 0; i < n; i++) {
        st = hvd_on_done(handles[i], on_done, j);
        if (st != HVD_OK) /* cannot happen for a fresh handle; never leave the kernel hanging */
            on_done(j, st, hvd_last_error());
    }
    j = NULL;
    goto out;
fail_job : {
    job_free(j);
    j = NULL;
    hvd_tf_run_kept_done(done);
}
out:
    for (int i = 0; names && i < n; i++)
        free(names[i]);
    free(names);
    free(ops);
    free(handles);
    free(splits);
    if (ts)
        TF_DeleteStatus(ts);
}

/* ---- join: a thread per call, since hvd_join waits ----------------------------------------- */

typedef struct {
    TF_OpKernelContext *ctx;
    void *done; /* hvd_tf_keep_done's */
} join_call_t;

static void *join_thread(void *p) {
    join_call_t *c = p;
    int last = -1;
    hvd_status_t st = hvd_join(&last);
    if (st != HVD_OK) {
        fail_hvd(c->ctx, st, hvd_last_error());
    } else {
        TF_Status *ts = TF_NewStatus();
        TF_Tensor *out = TF_AllocateOutput(c->ctx, 0, TF_INT32, NULL, 0, 4, ts);
        if (TF_GetCode(ts) == TF_OK) {
            *(int32_t *)TF_TensorData(out) = last;
            TF_DeleteTensor(out);
        } else {
            fail(c->ctx, TF_GetCode(ts), TF_Message(ts));
        }
        TF_DeleteStatus(ts);
    }
    void *done = c->done;
    free(c);
    hvd_tf_run_kept_done(done);
    return NULL;
}

static void *create_plain(TF_OpKernelConstruction *c) {
    return create(c, K_ALLREDUCE);
}

static void join_async(void *kp, TF_OpKernelContext *ctx, TF_AsyncOpKernelDoneCallback *tf_done) {
    (void)kp;
    join_call_t *c = malloc(sizeof *c);
    void *done = c ? hvd_tf_keep_done(tf_done) : NULL;
    pthread_t t;
    pthread_attr_t attr;
    if (!c || !done) {
        free(c);
        fail(ctx, TF_RESOURCE_EXHAUSTED, "horovod join: out of memory");
        TF_RunAsyncOpKernelDoneCallback(tf_done);
        return;
    }
    c->ctx = ctx;
    c->done = done;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    if (pthread_create(&t, &attr, join_thread, c) != 0) {
        free(c);
        fail(ctx, TF_RESOURCE_EXHAUSTED, "horovod join: cannot start a thread");
        hvd_tf_run_kept_done(done);
    }
    pthread_attr_destroy(&attr);
}

/* ---- rank and size: synchronous kernels of a scalar ------------------------------------ */

static void scalar_out(TF_OpKernelContext *ctx, int32_t v) {
    TF_Status *ts = TF_NewStatus();
    TF_Tensor *out = TF_AllocateOutput(ctx, 0, TF_INT32, NULL, 0, 4, ts);
    if (TF_GetCode(ts) == TF_OK) {
        *(int32_t *)TF_TensorData(out) = v;
        TF_DeleteTensor(out);
    } else {
        TF_OpKernelContext_Failure(ctx, ts);
    }
    TF_DeleteStatus(ts);
}

static int check_init(TF_OpKernelContext *ctx) {
    if (hvd_is_initialized())
        return 1;
    fail(ctx, TF_FAILED_PRECONDITION, "Horovod has not been initialized; use hvd.init().");
    return 0;
}

static void compute_rank(void *k, TF_OpKernelContext *ctx) {
    (void)k;
    if (check_init(ctx))
        scalar_out(ctx, hvd_rank());
}
static void compute_local_rank(void *k, TF_OpKernelContext *ctx) {
    (void)k;
    if (check_init(ctx))
        scalar_out(ctx, hvd_local_rank());
}
static void compute_local_size(void *k, TF_OpKernelContext *ctx) {
    (void)k;
    if (check_init(ctx))
        scalar_out(ctx, hvd_local_size());
}
/* The process set's size, or 1/0 for whether this rank belongs to it. */
static void set_info_out(void *kp, TF_OpKernelContext *ctx, int included) {
    kernel_t *k = kp;
    int rank = -1, size = 0;
    if (!check_init(ctx))
        return;
    hvd_status_t st = hvd_process_set_info(k->process_set, &rank, &size);
    if (st != HVD_OK)
        fail_hvd(ctx, st, hvd_last_error());
    else
        scalar_out(ctx, included ? rank >= 0 : size);
}
static void compute_size(void *k, TF_OpKernelContext *ctx) {
    set_info_out(k, ctx, 0);
}
static void compute_included(void *k, TF_OpKernelContext *ctx) {
    set_info_out(k, ctx, 1);
}

/* ---- registration ------------------------------------------------------------------------- */

static void shape_same(TF_ShapeInferenceContext *c, TF_Status *s) {
    TF_ShapeHandle *h = TF_NewShapeHandle();
    int64_t n = TF_ShapeInferenceContextNumInputs(c);
    for (int64_t i = 0; i < n && TF_GetCode(s) == TF_OK; i++) {
        TF_ShapeInferenceContextGetInput(c, (int)i, h, s);
        if (TF_GetCode(s) == TF_OK)
            TF_ShapeInferenceContextSetOutput(c, (int)i, h, s);
    }
    TF_DeleteShapeHandle(h);
}

/* Outputs whose first dimension the negotiation decides: unknown here; the Python layer
 * sets what it knows (every dimension but the first) on graph tensors. */
static void shape_unknown(TF_ShapeInferenceContext *c, TF_Status *s) {
    TF_ShapeInferenceContextSetUnknownShape(c, s);
}

static void shape_reducescatter(TF_ShapeInferenceContext *c, TF_Status *s) {
    TF_ShapeHandle *h = TF_NewShapeHandle();
    int64_t n = TF_ShapeInferenceContextNumInputs(c);
    for (int64_t i = 0; i < n && TF_GetCode(s) == TF_OK; i++) {
        TF_ShapeInferenceContextGetInput(c, (int)i, h, s);
        if (TF_GetCode(s) == TF_OK && TF_ShapeInferenceContextRankKnown(c, h) &&
            TF_ShapeInferenceContextRank(c, h) == 0)
            TF_SetStatus(s, TF_INVALID_ARGUMENT,
                         n > 1 ? "HorovodGroupedReducescatter does not support scalar inputs."
                               : "HorovodReducescatter does not support scalar inputs.");
    }
    TF_DeleteShapeHandle(h);
    if (TF_GetCode(s) == TF_OK)
        TF_ShapeInferenceContextSetUnknownShape(c, s);
}

static void shape_scalar(TF_ShapeInferenceContext *c, TF_Status *s) {
    TF_ShapeHandle *h = TF_ShapeInferenceContextScalar(c);
    TF_ShapeInferenceContextSetOutput(c, 0, h, s);
    TF_DeleteShapeHandle(h);
}

typedef void (*shape_fn)(TF_ShapeInferenceContext *, TF_Status *);

/* Register an op from its attributes, inputs and outputs (NULL-terminated lists), and its
 * CPU kernel: asynchronous when compute_async is set. */
static void register_op(const char *name, const char *const *attrs, const char *const *inputs,
                        const char *const *outputs, int stateful, shape_fn shape,
                        void *(*create_fn)(TF_OpKernelConstruction *),
                        void (*compute_fn)(void *, TF_OpKernelContext *),
                        void (*async_fn)(void *, TF_OpKernelContext *,
                                         TF_AsyncOpKernelDoneCallback *)) {
    TF_Status *s = TF_NewStatus();
    TF_OpDefinitionBuilder *b = TF_NewOpDefinitionBuilder(name);
    for (; attrs && *attrs; attrs++)
        TF_OpDefinitionBuilderAddAttr(b, *attrs);
    for (; inputs && *inputs; inputs++)
        TF_OpDefinitionBuilderAddInput(b, *inputs);
    for (; outputs && *outputs; outputs++)
        TF_OpDefinitionBuilderAddOutput(b, *outputs);
    if (stateful)
        TF_OpDefinitionBuilderSetIsStateful(b, 1);
    TF_OpDefinitionBuilderSetShapeInferenceFunction(b, shape);
    TF_RegisterOpDefinition(b, s);
    if (TF_GetCode(s) != TF_OK)
        fprintf(stderr, "horovod.tensorflow: cannot register op %s: %s\n", name, TF_Message(s));
    TF_KernelBuilder *kb =
        async_fn ? TF_NewAsyncKernelBuilder(name, "CPU", create_fn, async_fn, delete_kernel)
                 : TF_NewKernelBuilder(name, "CPU", create_fn, compute_fn, delete_kernel);
    TF_RegisterKernelBuilder(name, kb, s);
    if (TF_GetCode(s) != TF_OK)
        fprintf(stderr, "horovod.tensorflow: cannot register the kernel of %s: %s\n", name,
                TF_Message(s));
    TF_DeleteStatus(s);
}

#define LIST(...)                                                                                  \
    (const char *const[]) {                                                                        \
        __VA_ARGS__, NULL                                                                          \
    }

/* Horovod's type lists, per collective. */
#define T_REDUCE "T: {uint8, int8, int32, int64, float16, float32, float64}"
#define T_ANY "T: {uint8, int8, uint16, int16, int32, int64, float16, float32, float64, bool}"
#define T_SCATTER "T: {int32, int64, float16, float32, float64}"

__attribute__((constructor)) static void register_ops(void) {
    register_op(
        "HorovodAllreduce",
        LIST(T_REDUCE, "reduce_op: int", "prescale_factor: float", "postscale_factor: float",
             "ignore_name_scope: bool = False", "process_set_id: int = 0"),
        LIST("tensor: T"), LIST("sum: T"), 0, shape_same, create_allreduce, NULL, compute_async);
    register_op("HorovodGroupedAllreduce",
                LIST(T_REDUCE, "reduce_op: int", "prescale_factor: float",
                     "postscale_factor: float", "ignore_name_scope: bool = False",
                     "num_tensors: int", "process_set_id: int = 0"),
                LIST("tensors: num_tensors*T"), LIST("sum: num_tensors*T"), 0, shape_same,
                create_allreduce, NULL, compute_async);
    register_op("HorovodAllgather",
                LIST(T_ANY, "ignore_name_scope: bool = False", "process_set_id: int = 0"),
                LIST("tensor: T"), LIST("output: T"), 0, shape_unknown, create_allgather, NULL,
                compute_async);
    register_op("HorovodGroupedAllgather",
                LIST(T_ANY, "ignore_name_scope: bool = False", "num_tensors: int",
                     "process_set_id: int = 0"),
                LIST("tensors: num_tensors*T"), LIST("outputs: num_tensors*T"), 0, shape_unknown,
                create_allgather, NULL, compute_async);
    register_op(
        "HorovodBroadcast",
        LIST(T_ANY, "root_rank: int", "ignore_name_scope: bool = False", "process_set_id: int = 0"),
        LIST("tensor: T"), LIST("output: T"), 0, shape_same, create_broadcast, NULL, compute_async);
    register_op("HorovodReducescatter",
                LIST(T_SCATTER, "reduce_op: int", "ignore_name_scope: bool = False",
                     "prescale_factor: float", "postscale_factor: float",
                     "process_set_id: int = 0"),
                LIST("tensor: T"), LIST("output: T"), 0, shape_reducescatter, create_reducescatter,
                NULL, compute_async);
    register_op("HorovodGroupedReducescatter",
                LIST(T_SCATTER, "reduce_op: int", "ignore_name_scope: bool = False",
                     "num_tensors: int", "process_set_id: int = 0", "prescale_factor: float",
                     "postscale_factor: float"),
                LIST("tensors: num_tensors*T"), LIST("outputs: num_tensors*T"), 0,
                shape_reducescatter, create_reducescatter, NULL, compute_async);
    register_op("HorovodAlltoall",
                LIST(T_ANY, "ignore_name_scope: bool = False", "process_set_id: int = 0"),
                LIST("tensor: T", "splits: int32"), LIST("output: T", "received_splits: int32"), 0,
                shape_unknown, create_alltoall, NULL, compute_async);
    register_op("HorovodJoin", NULL, NULL, LIST("output: int32"), 1, shape_scalar, create_plain,
                NULL, join_async);
    register_op("HorovodSize", LIST("process_set_id: int = 0"), NULL, LIST("size: int32"), 1,
                shape_scalar, create_plain, compute_size, NULL);
    register_op("HorovodProcessSetIncluded", LIST("process_set_id: int = 0"), NULL,
                LIST("included: int32"), 1, shape_scalar, create_plain, compute_included, NULL);
    register_op("HorovodLocalSize", NULL, NULL, LIST("local_size: int32"), 1, shape_scalar,
                create_plain, compute_local_size, NULL);
    register_op("HorovodRank", NULL, NULL, LIST("rank: int32"), 1, shape_scalar, create_plain,
                compute_rank, NULL);
    register_op("HorovodLocalRank", NULL, NULL, LIST("local_rank: int32"), 1, shape_scalar,
                create_plain, compute_local_rank, NULL);
}
