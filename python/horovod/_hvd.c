/* horovod._hvd: the package's only native code, a client of libhvd's public API (hvd.h) like
 * any user program. Tensors cross as data pointers, shapes and dtype codes, so the module
 * knows nothing of torch and needs no C++ build against libtorch. The interface is described
 * in _hvd_interface.md beside this file.
 *
 * Every call that may block (init, shutdown, wait, join, barrier, enqueue) releases the GIL,
 * so other Python threads, and the autograd engine's hooks in particular, run meanwhile.
 * Outputs whose size only the negotiation knows (allgather, alltoall) are allocated by this
 * module from the library's thread (malloc, no GIL needed) and handed to Python after the
 * wait as a Buffer object that owns the memory, so torch.frombuffer wraps it without a copy. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <hvd/hvd.h>

#include <stdlib.h>
#include <string.h>

/* The exception classes of horovod.common.exceptions (set_exceptions); RuntimeError until
 * then. */
static PyObject *internal_error_cls, *hosts_updated_cls, *init_lost_cls;

/* Raise the Python error of a libhvd status, with libhvd's message (which names the rank,
 * host and tensor). Returns NULL for the caller to return. */
static PyObject *raise_status(hvd_status_t st) {
    const char *msg = hvd_last_error();
    if (!msg || !*msg)
        msg = hvd_status_str(st);
    PyObject *cls = internal_error_cls ? internal_error_cls : PyExc_RuntimeError;
    if (st == HVD_ERR_INVALID_ARG)
        cls = PyExc_ValueError;
    if (st == HVD_ERR_HOSTS_UPDATED && hosts_updated_cls) {
        /* HostsUpdatedInterrupt(skip_sync) takes no message: the driver decides whether to
         * sync, so skip_sync is False; the message goes to args for str(). */
        PyObject *e = PyObject_CallFunctionObjArgs(hosts_updated_cls, Py_False, NULL);
        PyObject *a = e ? Py_BuildValue("(s)", msg) : NULL;
        if (a && PyObject_SetAttrString(e, "args", a) == 0)
            PyErr_SetObject(hosts_updated_cls, e);
        Py_XDECREF(a);
        Py_XDECREF(e);
        return NULL;
    }
    PyErr_SetString(cls, msg);
    return NULL;
}

/* ---- Buffer: memory the library filled, owned by a Python object ---- */

typedef struct {
    PyObject_HEAD void *data;
    Py_ssize_t len;
    Py_ssize_t exports;
} buffer_t;

static void buffer_dealloc(buffer_t *self) {
    free(self->data);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int buffer_get(buffer_t *self, Py_buffer *view, int flags) {
    /* an empty output still needs a valid address for the buffer protocol */
    static char empty;
    int rc = PyBuffer_FillInfo(view, (PyObject *)self, self->data ? self->data : &empty, self->len,
                               0, flags);
    if (rc == 0)
        self->exports++;
    return rc;
}

static void buffer_release(buffer_t *self, Py_buffer *view) {
    (void)view;
    self->exports--;
}

static Py_ssize_t buffer_length(buffer_t *self) {
    return self->len;
}

static PyBufferProcs buffer_procs = {(getbufferproc)buffer_get, (releasebufferproc)buffer_release};
static PySequenceMethods buffer_seq = {.sq_length = (lenfunc)buffer_length};

static PyTypeObject buffer_type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "horovod._hvd.Buffer",
    .tp_basicsize = sizeof(buffer_t),
    .tp_dealloc = (destructor)buffer_dealloc,
    .tp_as_buffer = &buffer_procs,
    .tp_as_sequence = &buffer_seq,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Memory holding the output of an allgather or alltoall, owned by this object.",
};

/* ---- outputs the library sizes ---- */

/* One operation's allocated output, filled by on_alloc on the library's thread and taken by
 * wait once the handle completed (the completion orders the two). */
typedef struct {
    size_t esize;
    void *data;
    size_t count;
    size_t *counts;
    int n;
} out_rec_t;

static void *on_alloc(void *user, size_t count, const size_t *counts, int n) {
    out_rec_t *r = user;
    r->count = count;
    r->n = n;
    r->counts = malloc((size_t)(n > 0 ? n : 1) * sizeof *r->counts);
    if (!r->counts)
        return NULL;
    memcpy(r->counts, counts, (size_t)n * sizeof *counts);
    r->data = count ? malloc(count * r->esize) : NULL;
    return r->data;
}

static void out_rec_free(out_rec_t *r) {
    if (!r)
        return;
    free(r->data);
    free(r->counts);
    free(r);
}

static void out_rec_capsule_free(PyObject *cap) {
    out_rec_free(PyCapsule_GetPointer(cap, "hvd.out"));
}

/* handle -> capsule of its out_rec_t, for operations with an allocated output */
static PyObject *pending_outputs;

/* ---- arguments ---- */

/* A tuple or list of ints into a malloc'd int64 array of exactly want entries (want < 0:
 * any length, stored in *n_p). */
static int64_t *int64_array(PyObject *seq, Py_ssize_t want, int *n_p, const char *what) {
    PyObject *fast; /* a tuple as it is (torch.Size is one): no copy on every operation's path */
    if (PyTuple_Check(seq)) {
        Py_INCREF(seq);
        fast = seq;
    } else if (!(fast = PySequence_Fast(seq, what))) {
        return NULL;
    }
    Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
    if (want >= 0 && n != want) {
        PyErr_Format(PyExc_ValueError, "%s has %zd entries, expected %zd", what, n, want);
        Py_DECREF(fast);
        return NULL;
    }
    int64_t *v = malloc((size_t)(n ? n : 1) * sizeof *v);
    if (!v) {
        Py_DECREF(fast);
        PyErr_NoMemory();
        return NULL;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        v[i] = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(fast, i));
        if (v[i] == -1 && PyErr_Occurred()) {
            free(v);
            Py_DECREF(fast);
            return NULL;
        }
    }
    Py_DECREF(fast);
    if (n_p)
        *n_p = (int)n;
    return v;
}

/* Everything one enqueue call allocated, freed whatever happened. A batch of one (every
 * operation but the grouped ones) lives in the inline slots: no allocation per call. */
typedef struct {
    hvd_tensor_op_t *ops;
    int64_t **shapes, **splits;
    out_rec_t **recs;
    Py_ssize_t n;
    hvd_tensor_op_t op1;
    int64_t *shape1, *splits1;
    out_rec_t *rec1;
} batch_t;

/* Point b's arrays at storage for n operations; 0, or -1 with MemoryError set. */
static int batch_init(batch_t *b, Py_ssize_t n) {
    *b = (batch_t){.n = n};
    if (n == 1) {
        b->ops = &b->op1;
        b->shapes = &b->shape1;
        b->splits = &b->splits1;
        b->recs = &b->rec1;
        return 0;
    }
    b->ops = calloc((size_t)n, sizeof *b->ops);
    b->shapes = calloc((size_t)n, sizeof *b->shapes);
    b->splits = calloc((size_t)n, sizeof *b->splits);
    b->recs = calloc((size_t)n, sizeof *b->recs);
    if (b->ops && b->shapes && b->splits && b->recs)
        return 0;
    PyErr_NoMemory();
    return -1;
}

static void batch_free(batch_t *b) {
    for (Py_ssize_t i = 0; i < b->n; i++) {
        if (b->shapes)
            free(b->shapes[i]);
        if (b->splits)
            free(b->splits[i]);
        if (b->recs)
            out_rec_free(b->recs[i]);
    }
    if (b->ops == &b->op1)
        return;
    free(b->ops);
    free(b->shapes);
    free(b->splits);
    free(b->recs);
}

static int parse_item(PyObject *item, hvd_tensor_op_t *o, int64_t **shape_p, int64_t **splits_p,
                      out_rec_t **rec_p) {
    const char *name;
    unsigned long long send, recv;
    int dtype, op, root, process_set, allocate;
    double prescale, postscale;
    PyObject *shape, *splits;
    if (!PyTuple_Check(item)) {
        PyErr_SetString(PyExc_TypeError, "enqueue: every item must be a tuple");
        return -1;
    }
    if (!PyArg_ParseTuple(item, "sKKiOiddiOip;enqueue item", &name, &send, &recv, &dtype, &shape,
                          &op, &prescale, &postscale, &root, &splits, &process_set, &allocate))
        return -1;
    hvd_tensor_op_init(o);
    o->name = name;
    o->send = (const void *)(uintptr_t)send;
    o->recv = (void *)(uintptr_t)recv;
    o->dtype = (hvd_dtype_t)dtype;
    o->op = (hvd_reduce_op_t)op;
    o->prescale = prescale;
    o->postscale = postscale;
    o->root = root;
    o->process_set = process_set;
    if (!(*shape_p = int64_array(shape, -1, &o->ndim, "shape")))
        return -1;
    o->shape = *shape_p;
    if (splits != Py_None) {
        int n;
        if (!(*splits_p = int64_array(splits, -1, &n, "splits")))
            return -1;
        int members = 0; /* one split per rank of the operation's process set */
        hvd_status_t st = hvd_process_set_info(process_set, NULL, &members);
        if (st != HVD_OK) {
            raise_status(st);
            return -1;
        }
        if (n != members) {
            PyErr_SetString(PyExc_ValueError,
                            "Number of entries in splits does not equal number of workers.");
            return -1;
        }
        o->splits = *splits_p;
    }
    if (allocate) {
        size_t es = hvd_dtype_size((hvd_dtype_t)dtype);
        if (!es) {
            PyErr_Format(PyExc_ValueError, "enqueue: unknown dtype %d", dtype);
            return -1;
        }
        out_rec_t *r = calloc(1, sizeof *r);
        if (!r) {
            PyErr_NoMemory();
            return -1;
        }
        r->esize = es;
        *rec_p = r;
        o->alloc = on_alloc;
        o->alloc_user = r;
        o->recv = NULL;
    }
    return 0;
}

/* Parse every item of b and enqueue them (the GIL released) with opts (NULL: none); 0, or
 * -1 with the error set. */
static int batch_enqueue(batch_t *b, int type, PyObject *const *items,
                         const hvd_enqueue_opts_t *opts, hvd_handle_t *handles) {
    for (Py_ssize_t i = 0; i < b->n; i++)
        if (parse_item(items[i], &b->ops[i], &b->shapes[i], &b->splits[i], &b->recs[i]) != 0)
            return -1;
    hvd_status_t st;
    Py_BEGIN_ALLOW_THREADS st =
        hvd_enqueue_ex((hvd_op_type_t)type, b->ops, (size_t)b->n, opts, handles);
    Py_END_ALLOW_THREADS if (st != HVD_OK) {
        raise_status(st);
        return -1;
    }
    return 0;
}

/* enqueue(type, items[, timeout_ms, keys]): keys a list of str (or None), one per item
 * (hvd_enqueue_ex). */
static PyObject *py_enqueue(PyObject *self, PyObject *args) {
    int type, timeout_ms = 0;
    PyObject *items, *key_list = Py_None;
    if (!PyArg_ParseTuple(args, "iO!|iO", &type, &PyList_Type, &items, &timeout_ms, &key_list))
        return NULL;
    Py_ssize_t n = PyList_GET_SIZE(items);
    if (n == 0) {
        PyErr_SetString(PyExc_ValueError, "enqueue: no tensors");
        return NULL;
    }
    if (key_list != Py_None && (!PyList_Check(key_list) || PyList_GET_SIZE(key_list) != n)) {
        PyErr_SetString(PyExc_TypeError, "enqueue: keys must be a list of one str per item");
        return NULL;
    }
    batch_t b;
    hvd_handle_t handle1, *handles = n == 1 ? &handle1 : calloc((size_t)n, sizeof *handles);
    const char *key1, **keys = NULL;
    PyObject *result = NULL;
    if (key_list != Py_None && !(keys = n == 1 ? &key1 : calloc((size_t)n, sizeof *keys))) {
        PyErr_NoMemory();
        if (handles != &handle1)
            free(handles);
        return NULL;
    }
    hvd_enqueue_opts_t opts;
    hvd_enqueue_opts_init(&opts);
    opts.timeout_ms = timeout_ms;
    opts.keys = keys;
    if (batch_init(&b, n) != 0 || !handles) {
        if (!handles)
            PyErr_NoMemory();
        goto out;
    }
    /* (the list holds the str objects, and so their UTF-8, until the enqueue returns) */
    for (Py_ssize_t i = 0; keys && i < n; i++)
        if (!(keys[i] = PyUnicode_AsUTF8(PyList_GET_ITEM(key_list, i))))
            goto out;
    if (batch_enqueue(&b, type, &PyList_GET_ITEM(items, 0), &opts, handles) != 0)
        goto out;
    if (!(result = PyList_New(b.n)))
        goto out;
    for (Py_ssize_t i = 0; i < b.n; i++) {
        PyObject *h = PyLong_FromLongLong(handles[i]);
        if (!h) {
            Py_CLEAR(result);
            goto out;
        }
        PyList_SET_ITEM(result, i, h);
        if (b.recs[i]) {
            /* The library owns the record until the wait: hand it to the pending table. */
            PyObject *cap = PyCapsule_New(b.recs[i], "hvd.out", out_rec_capsule_free);
            if (!cap || PyDict_SetItem(pending_outputs, h, cap) != 0) {
                /* the operation is enqueued: its record must outlive it, whatever we lose */
                Py_XDECREF(cap);
                Py_CLEAR(result);
                b.recs[i] = NULL;
                goto out;
            }
            Py_DECREF(cap);
            b.recs[i] = NULL;
        }
    }
out:
    batch_free(&b);
    if (handles != &handle1)
        free(handles);
    if (keys != &key1)
        free(keys);
    return result;
}

/* The allocated output of a completed operation as (Buffer, counts); the Buffer takes r's
 * memory. */
static PyObject *take_output(out_rec_t *r) {
    buffer_t *buf = PyObject_New(buffer_t, &buffer_type);
    PyObject *counts = PyTuple_New(r->n);
    if (!buf || !counts) {
        Py_XDECREF(buf);
        Py_XDECREF(counts);
        return NULL;
    }
    for (int i = 0; i < r->n; i++) {
        PyObject *c = PyLong_FromSize_t(r->counts[i]);
        if (!c) {
            Py_DECREF(buf);
            Py_DECREF(counts);
            return NULL;
        }
        PyTuple_SET_ITEM(counts, i, c);
    }
    buf->data = r->data; /* the buffer owns the memory now */
    buf->len = (Py_ssize_t)(r->count * r->esize);
    buf->exports = 0;
    r->data = NULL;
    PyObject *out = Py_BuildValue("(NN)", (PyObject *)buf, counts);
    return out;
}

/* run(type, item[, timeout_ms, key]): enqueue one operation and wait for it, the GIL released once
 * for both: the blocking collectives' path, with no handle for Python to keep. Returns what wait
 * returns. */
static PyObject *py_run(PyObject *self, PyObject *args) {
    int type, timeout_ms = 0;
    PyObject *item;
    const char *key = NULL;
    if (!PyArg_ParseTuple(args, "iO|iz", &type, &item, &timeout_ms, &key))
        return NULL;
    hvd_enqueue_opts_t opts;
    hvd_enqueue_opts_init(&opts);
    opts.timeout_ms = timeout_ms;
    opts.keys = key ? &key : NULL;
    batch_t b;
    PyObject *result = NULL;
    if (batch_init(&b, 1) != 0)
        return NULL;
    if (parse_item(item, &b.op1, &b.shape1, &b.splits1, &b.rec1) != 0)
        goto out;
    hvd_handle_t h;
    hvd_status_t st;
    Py_BEGIN_ALLOW_THREADS st = hvd_enqueue_ex((hvd_op_type_t)type, &b.op1, 1, &opts, &h);
    if (st == HVD_OK)
        st = hvd_wait(h); /* the library is done with the record once this returns */
    Py_END_ALLOW_THREADS if (st != HVD_OK) {
        raise_status(st);
        goto out;
    }
    if (b.rec1) {
        result = take_output(b.rec1);
    } else {
        Py_INCREF(Py_None);
        result = Py_None;
    }
out:
    batch_free(&b);
    return result;
}

static PyObject *wait_for(PyObject *arg, int resting) {
    long long h = PyLong_AsLongLong(arg);
    if (h == -1 && PyErr_Occurred())
        return NULL;
    hvd_status_t st;
    Py_BEGIN_ALLOW_THREADS st = resting ? hvd_wait_resting(h) : hvd_wait(h);
    Py_END_ALLOW_THREADS PyObject *cap = PyDict_GetItemWithError(pending_outputs, arg);
    if (!cap && PyErr_Occurred())
        return NULL;
    PyObject *out = NULL;
    if (cap) {
        Py_INCREF(cap);
        if (PyDict_DelItem(pending_outputs, arg) != 0) {
            Py_DECREF(cap);
            return NULL;
        }
        if (st == HVD_OK)
            out = take_output(PyCapsule_GetPointer(cap, "hvd.out"));
        Py_DECREF(cap); /* frees the record (and the memory, unless the Buffer took it) */
        if (st == HVD_OK)
            return out;
    }
    if (st != HVD_OK)
        return raise_status(st);
    Py_RETURN_NONE;
}

static PyObject *py_wait(PyObject *self, PyObject *arg) {
    return wait_for(arg, 0);
}

static PyObject *py_wait_resting(PyObject *self, PyObject *arg) {
    return wait_for(arg, 1);
}

static PyObject *py_poll(PyObject *self, PyObject *arg) {
    long long h = PyLong_AsLongLong(arg);
    if (h == -1 && PyErr_Occurred())
        return NULL;
    int r = hvd_poll(h);
    if (r < 0) {
        PyErr_Format(PyExc_ValueError, "poll: handle %lld is unknown or already released", h);
        return NULL;
    }
    return PyBool_FromLong(r);
}

/* ---- life cycle and topology ---- */

static PyObject *py_set_exceptions(PyObject *self, PyObject *args) {
    PyObject *a, *b, *c = NULL;
    if (!PyArg_ParseTuple(args, "OO|O", &a, &b, &c))
        return NULL;
    Py_XINCREF(a);
    Py_XSETREF(internal_error_cls, a);
    Py_XINCREF(b);
    Py_XSETREF(hosts_updated_cls, b);
    Py_XINCREF(c);
    Py_XSETREF(init_lost_cls, c);
    Py_RETURN_NONE;
}

/* Elastic: the driver removed this worker or stopped the job (HVD_ERR_SHUT_DOWN from a new
 * round). Not this worker's failure: say why and leave with status 0 (SystemExit), as the C
 * workers do. */
static PyObject *worker_exits(const char *where) {
    PySys_WriteStderr("%s: %s; this worker exits\n", where, hvd_last_error());
    PyObject *zero = PyLong_FromLong(0);
    PyErr_SetObject(PyExc_SystemExit, zero);
    Py_XDECREF(zero);
    return NULL;
}

/* init(elastic=False). Elastic: the round this worker was started for may fail as it forms
 * (another worker died meanwhile); the next attempt joins the driver's next round. */
static PyObject *py_init(PyObject *self, PyObject *args) {
    int elastic = 0;
    if (!PyArg_ParseTuple(args, "|p", &elastic))
        return NULL;
    hvd_status_t st;
    for (;;) {
        Py_BEGIN_ALLOW_THREADS st = hvd_init();
        Py_END_ALLOW_THREADS if (!elastic ||
                                 (st != HVD_ERR_PEER_LOST && st != HVD_ERR_TIMEOUT)) break;
        PySys_WriteStderr("horovod: init: %s; trying again\n", hvd_last_error());
    }
    if (st == HVD_ERR_STATE)
        Py_RETURN_NONE; /* initialised already */
    if (st == HVD_ERR_SHUT_DOWN && elastic) {
        return worker_exits("horovod: init");
    }
    if (st != HVD_OK) {
        /* a lost peer (a rank died or left before it checked in): both the ValueError of a
         * failed init and the HorovodInternalError of a lost peer */
        PyObject *cls = st == HVD_ERR_PEER_LOST && init_lost_cls ? init_lost_cls : PyExc_ValueError;
        PyErr_Format(cls, "Horovod initialization failed: %s", hvd_last_error());
        return NULL;
    }
    Py_RETURN_NONE;
}

/* ---- init_store: hvd_init_store over a store written in Python ----
 *
 * The callbacks run on hvd_init_store's thread, which released the GIL: each takes it back
 * for its call. A Python exception becomes an error status, its text kept for the message;
 * TimeoutError from get means the key never came. */
typedef struct {
    PyObject *set, *get;
    char error[512];
} py_store_t;

/* The pending exception's text into s->error (then cleared); 1 when it was a TimeoutError. */
static int take_exception(py_store_t *s) {
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    PyErr_NormalizeException(&type, &value, &tb);
    int timeout = type && PyErr_GivenExceptionMatches(type, PyExc_TimeoutError);
    PyObject *text = value ? PyObject_Str(value) : NULL;
    const char *t = text ? PyUnicode_AsUTF8(text) : NULL;
    snprintf(s->error, sizeof s->error, "%s: %s", type ? ((PyTypeObject *)type)->tp_name : "error",
             t ? t : "?");
    PyErr_Clear();
    Py_XDECREF(text);
    Py_XDECREF(type);
    Py_XDECREF(value);
    Py_XDECREF(tb);
    return timeout;
}

static hvd_status_t py_store_set(void *user, const char *key, const void *value, size_t len) {
    py_store_t *s = user;
    PyGILState_STATE g = PyGILState_Ensure();
    PyObject *r = PyObject_CallFunction(s->set, "sy#", key, (const char *)value, (Py_ssize_t)len);
    hvd_status_t st = HVD_OK;
    if (!r) {
        take_exception(s);
        st = HVD_ERR_IO;
    }
    Py_XDECREF(r);
    PyGILState_Release(g);
    return st;
}

static hvd_status_t py_store_get(void *user, const char *key, int timeout_ms, void *buf, size_t cap,
                                 size_t *len_p) {
    py_store_t *s = user;
    PyGILState_STATE g = PyGILState_Ensure();
    PyObject *r = PyObject_CallFunction(s->get, "si", key, timeout_ms);
    hvd_status_t st = HVD_OK;
    char *data;
    Py_ssize_t len;
    if (!r) {
        st = take_exception(s) ? HVD_ERR_TIMEOUT : HVD_ERR_IO;
    } else if (PyBytes_AsStringAndSize(r, &data, &len) != 0) {
        take_exception(s);
        st = HVD_ERR_PROTOCOL;
    } else {
        memcpy(buf, data, (size_t)len < cap ? (size_t)len : cap);
        *len_p = (size_t)len;
    }
    Py_XDECREF(r);
    PyGILState_Release(g);
    return st;
}

static const char *py_store_error(void *user) {
    return ((py_store_t *)user)->error;
}

static PyObject *py_init_store(PyObject *self, PyObject *args) {
    int rank, size, timeout_s;
    const char *route;
    py_store_t store = {0};
    if (!PyArg_ParseTuple(args, "iizOOi", &rank, &size, &route, &store.set, &store.get, &timeout_s))
        return NULL;
    if (!PyCallable_Check(store.set) || !PyCallable_Check(store.get)) {
        PyErr_SetString(PyExc_TypeError, "init_store: set and get must be callable");
        return NULL;
    }
    hvd_config_t config;
    hvd_config_init(&config);
    config.timeout_seconds = timeout_s;
    hvd_store_t hs = {.rank = rank,
                      .size = size,
                      .route_addr = route,
                      .set = py_store_set,
                      .get = py_store_get,
                      .last_error = py_store_error,
                      .user = &store};
    hvd_status_t st;
    Py_BEGIN_ALLOW_THREADS st = hvd_init_store(&config, &hs);
    Py_END_ALLOW_THREADS if (st != HVD_OK) return raise_status(st);
    Py_RETURN_NONE;
}

/* ---- point to point: (ptr, count, dtype, peer, tag) -> handle ---- */

/* send/recv(ptr, count, dtype, peer, tag[, timeout_ms]) */
static PyObject *p2p_post(PyObject *args, int send) {
    unsigned long long ptr;
    Py_ssize_t count;
    int dtype, peer, tag, timeout_ms = 0;
    if (!PyArg_ParseTuple(args, "Kniii|i", &ptr, &count, &dtype, &peer, &tag, &timeout_ms))
        return NULL;
    if (count < 0) {
        PyErr_SetString(PyExc_ValueError, "count is negative");
        return NULL;
    }
    hvd_handle_t h;
    hvd_status_t st = send ? hvd_send_async_ex((const void *)(uintptr_t)ptr, (size_t)count,
                                               (hvd_dtype_t)dtype, peer, tag, timeout_ms, &h)
                           : hvd_recv_async_ex((void *)(uintptr_t)ptr, (size_t)count,
                                               (hvd_dtype_t)dtype, peer, tag, timeout_ms, &h);
    if (st != HVD_OK)
        return raise_status(st);
    return PyLong_FromLongLong(h);
}

static PyObject *py_send(PyObject *self, PyObject *args) {
    return p2p_post(args, 1);
}

static PyObject *py_recv(PyObject *self, PyObject *args) {
    return p2p_post(args, 0);
}

static PyObject *py_shutdown(PyObject *self, PyObject *unused) {
    hvd_status_t st;
    Py_BEGIN_ALLOW_THREADS st = hvd_shutdown();
    Py_END_ALLOW_THREADS
        /* Operations never waited for will not call their allocators any more. */
        PyDict_Clear(pending_outputs);
    if (st != HVD_OK && st != HVD_ERR_SHUT_DOWN)
        return raise_status(st);
    Py_RETURN_NONE;
}

static PyObject *py_is_initialized(PyObject *self, PyObject *unused) {
    return PyBool_FromLong(hvd_is_initialized());
}

#define TOPOLOGY(fn)                                                                               \
    static PyObject *py_##fn(PyObject *self, PyObject *unused) {                                   \
        return PyLong_FromLong(hvd_##fn());                                                        \
    }
TOPOLOGY(rank)
TOPOLOGY(size)
TOPOLOGY(local_rank)
TOPOLOGY(local_size)
TOPOLOGY(cross_rank)
TOPOLOGY(cross_size)

static PyObject *py_is_homogeneous(PyObject *self, PyObject *unused) {
    return PyBool_FromLong(hvd_is_homogeneous() == 1);
}

static PyObject *py_version(PyObject *self, PyObject *unused) {
    return PyUnicode_FromString(hvd_version());
}

/* ---- blocking collectives without tensors ---- */

static PyObject *py_join(PyObject *self, PyObject *unused) {
    int last = -1;
    hvd_status_t st;
    Py_BEGIN_ALLOW_THREADS st = hvd_join(&last);
    Py_END_ALLOW_THREADS if (st != HVD_OK) return raise_status(st);
    return PyLong_FromLong(last);
}

static PyObject *py_barrier(PyObject *self, PyObject *args) {
    int ps = 0;
    if (!PyArg_ParseTuple(args, "|i", &ps))
        return NULL;
    hvd_status_t st;
    if (ps == 0) {
        Py_BEGIN_ALLOW_THREADS st = hvd_barrier();
        Py_END_ALLOW_THREADS
    } else {
        /* A process set's barrier: an allreduce of one byte among its members, under one name
         * per set (a barrier waits, so the name is free again at the next one). */
        char name[64];
        snprintf(name, sizeof name, "barrier.process_set.%d", ps);
        uint8_t one = 1;
        hvd_tensor_op_t o;
        hvd_tensor_op_init(&o);
        o.name = name;
        o.send = o.recv = &one;
        o.dtype = HVD_UINT8;
        o.op = HVD_SUM;
        o.process_set = ps;
        hvd_handle_t h;
        Py_BEGIN_ALLOW_THREADS st = hvd_enqueue(HVD_OP_ALLREDUCE, &o, 1, &h);
        if (st == HVD_OK)
            st = hvd_wait(h);
        Py_END_ALLOW_THREADS
    }
    if (st != HVD_OK)
        return raise_status(st);
    Py_RETURN_NONE;
}

static PyObject *py_start_timeline(PyObject *self, PyObject *args) {
    const char *path;
    int mark_cycles = 0;
    if (!PyArg_ParseTuple(args, "s|p", &path, &mark_cycles))
        return NULL;
    hvd_status_t st = hvd_start_timeline(path, mark_cycles);
    if (st != HVD_OK)
        return raise_status(st);
    Py_RETURN_NONE;
}

static PyObject *py_report_stragglers(PyObject *self, PyObject *args) {
    int steps;
    if (!PyArg_ParseTuple(args, "i", &steps))
        return NULL;
    hvd_status_t st = hvd_report_stragglers(steps);
    if (st != HVD_OK)
        return raise_status(st);
    Py_RETURN_NONE;
}

static PyObject *py_stop_timeline(PyObject *self, PyObject *unused) {
    hvd_status_t st = hvd_stop_timeline();
    if (st != HVD_OK)
        return raise_status(st);
    Py_RETURN_NONE;
}

/* ---- process sets ---- */

static PyObject *py_add_process_set(PyObject *self, PyObject *arg) {
    int n;
    int64_t *v = int64_array(arg, -1, &n, "ranks");
    if (!v)
        return NULL;
    int *ranks = malloc((size_t)(n ? n : 1) * sizeof *ranks);
    if (!ranks) {
        free(v);
        return PyErr_NoMemory();
    }
    for (int i = 0; i < n; i++)
        ranks[i] = (int)v[i];
    free(v);
    int id = -1;
    hvd_status_t st;
    Py_BEGIN_ALLOW_THREADS st = hvd_add_process_set(ranks, n, &id);
    Py_END_ALLOW_THREADS free(ranks);
    if (st != HVD_OK)
        return raise_status(st);
    return PyLong_FromLong(id);
}

static PyObject *py_remove_process_set(PyObject *self, PyObject *arg) {
    int id = (int)PyLong_AsLong(arg);
    if (id == -1 && PyErr_Occurred())
        return NULL;
    hvd_status_t st;
    Py_BEGIN_ALLOW_THREADS st = hvd_remove_process_set(id);
    Py_END_ALLOW_THREADS if (st != HVD_OK) return raise_status(st);
    Py_RETURN_NONE;
}

/* rank (which_rank 1) or size (0) of a set */
static PyObject *set_info(PyObject *arg, int which_rank) {
    int id = (int)PyLong_AsLong(arg);
    if (id == -1 && PyErr_Occurred())
        return NULL;
    int rank, size;
    hvd_status_t st = hvd_process_set_info(id, &rank, &size);
    if (st != HVD_OK)
        return raise_status(st);
    return PyLong_FromLong(which_rank ? rank : size);
}

static PyObject *py_process_set_rank(PyObject *self, PyObject *arg) {
    return set_info(arg, 1);
}

static PyObject *py_process_set_size(PyObject *self, PyObject *arg) {
    return set_info(arg, 0);
}

static PyObject *py_process_set_included(PyObject *self, PyObject *arg) {
    PyObject *r = set_info(arg, 1);
    if (!r)
        return NULL;
    long rank = PyLong_AsLong(r);
    Py_DECREF(r);
    return PyBool_FromLong(rank >= 0);
}

static PyObject *int_list(const int *v, int n) {
    PyObject *l = PyList_New(n);
    for (int i = 0; l && i < n; i++) {
        PyObject *x = PyLong_FromLong(v[i]);
        if (!x) {
            Py_CLEAR(l);
            break;
        }
        PyList_SET_ITEM(l, i, x);
    }
    return l;
}

static PyObject *py_process_set_ids(PyObject *self, PyObject *unused) {
    int n = hvd_process_set_ids(NULL, 0);
    if (n < 0)
        return raise_status(n);
    int *ids = malloc((size_t)n * sizeof *ids);
    if (!ids)
        return PyErr_NoMemory();
    n = hvd_process_set_ids(ids, n);
    PyObject *l = n < 0 ? raise_status(n) : int_list(ids, n);
    free(ids);
    return l;
}

static PyObject *py_process_set_ranks(PyObject *self, PyObject *arg) {
    int id = (int)PyLong_AsLong(arg);
    if (id == -1 && PyErr_Occurred())
        return NULL;
    int size;
    hvd_status_t st = hvd_process_set_info(id, NULL, &size);
    if (st != HVD_OK)
        return raise_status(st);
    int *ranks = malloc((size_t)(size ? size : 1) * sizeof *ranks), n = 0;
    if (!ranks)
        return PyErr_NoMemory();
    st = hvd_process_set_ranks(id, ranks, size, &n);
    PyObject *l = st != HVD_OK ? raise_status(st) : int_list(ranks, n < size ? n : size);
    free(ranks);
    return l;
}

/* ---- elastic: libhvd's recovery loop driving a Python State ----
 *
 * hvd.elastic.run hands the State and the bound training function to elastic_run, which runs
 * them under hvd_elastic_run: the library owns the loop (leave the round, join the driver's
 * next one, retry while it forms, sync when the driver says so), Python owns the state
 * (save, restore, sync, on_reset are the State's methods). The callbacks run on the calling
 * thread with the GIL taken back for their duration; the loop itself runs without it.
 *
 * A Python exception becomes a status for the loop: HorovodInternalError a lost peer (restore
 * the last commit, re-initialise), HostsUpdatedInterrupt a host change (keep the state,
 * re-initialise), anything else PY_EXCEPTION, which no libhvd call returns, so the loop ends
 * and the exception itself is raised again to the caller. */
#define PY_EXCEPTION (-1000)

typedef struct {
    PyObject *state, *fn, *on_reinit;        /* borrowed from elastic_run's arguments */
    PyObject *result;                        /* fn's return value */
    PyObject *exc_type, *exc_value, *exc_tb; /* the last exception a callback raised */
    hvd_status_t exc_status;                 /* the status it was turned into */
} run_ctx_t;

static void ctx_clear_exc(run_ctx_t *c) {
    Py_CLEAR(c->exc_type);
    Py_CLEAR(c->exc_value);
    Py_CLEAR(c->exc_tb);
}

/* With the GIL: call obj.method() (method NULL: obj()), keep the result in *result_p (may
 * be NULL: dropped), and turn an exception into the loop's status. */
static hvd_status_t call_python(run_ctx_t *c, PyObject *obj, const char *method,
                                PyObject **result_p) {
    PyGILState_STATE g = PyGILState_Ensure();
    PyObject *r = method ? PyObject_CallMethod(obj, method, NULL) : PyObject_CallNoArgs(obj);
    hvd_status_t st = HVD_OK;
    if (r) {
        if (result_p)
            Py_XSETREF(*result_p, r);
        else
            Py_DECREF(r);
    } else {
        ctx_clear_exc(c);
        PyErr_Fetch(&c->exc_type, &c->exc_value, &c->exc_tb);
        PyErr_NormalizeException(&c->exc_type, &c->exc_value, &c->exc_tb);
        if (hosts_updated_cls && PyErr_GivenExceptionMatches(c->exc_type, hosts_updated_cls))
            st = HVD_ERR_HOSTS_UPDATED;
        else if (internal_error_cls && PyErr_GivenExceptionMatches(c->exc_type, internal_error_cls))
            st = HVD_ERR_PEER_LOST;
        else
            st = PY_EXCEPTION;
        c->exc_status = st;
    }
    PyGILState_Release(g);
    return st;
}

static hvd_status_t el_save(void *user) {
    run_ctx_t *c = user;
    return call_python(c, c->state, "save", NULL);
}

static hvd_status_t el_restore(void *user) {
    run_ctx_t *c = user;
    return call_python(c, c->state, "restore", NULL);
}

static hvd_status_t el_sync(void *user, int root) {
    (void)root; /* always rank 0, as Horovod's State.sync */
    run_ctx_t *c = user;
    return call_python(c, c->state, "sync", NULL);
}

/* After hvd_init in the new round: the package's own bookkeeping first (process sets and
 * handles of the old world are gone), then the State's reset callbacks. */
static hvd_status_t el_reset(void *user) {
    run_ctx_t *c = user;
    PyGILState_STATE g = PyGILState_Ensure();
    PyDict_Clear(pending_outputs); /* the old world's operations will not allocate any more */
    PyGILState_Release(g);
    hvd_status_t st = call_python(c, c->on_reinit, NULL, NULL);
    return st == HVD_OK ? call_python(c, c->state, "on_reset", NULL) : st;
}

static hvd_status_t el_fn(hvd_elastic_state_t *s, void *user) {
    (void)s;
    run_ctx_t *c = user;
    return call_python(c, c->fn, NULL, &c->result);
}

/* elastic_run(state, fn, on_reinit) -> fn's result (worker_exits when the driver removed this
 * worker or stopped the job). */
static PyObject *py_elastic_run(PyObject *self, PyObject *args) {
    run_ctx_t c = {0};
    if (!PyArg_ParseTuple(args, "OOO", &c.state, &c.fn, &c.on_reinit))
        return NULL;
    hvd_elastic_callbacks_t cb = {el_save, el_restore, el_sync, el_reset, &c};
    hvd_elastic_state_t *s;
    hvd_status_t st = hvd_elastic_state_create(&cb, &s);
    if (st != HVD_OK)
        return raise_status(st);
    Py_BEGIN_ALLOW_THREADS st = hvd_elastic_run(s, el_fn, &c);
    Py_END_ALLOW_THREADS hvd_elastic_state_destroy(s);
    if (st == HVD_OK) {
        ctx_clear_exc(&c);
        return c.result ? c.result : Py_NewRef(Py_None);
    }
    Py_CLEAR(c.result);
    /* The callback's own exception when the loop ended on it: a Python error, or a lost peer
     * or host change in a static job (hvd still initialised: no re-initialisation failed). */
    if (c.exc_type && st == c.exc_status && (st == PY_EXCEPTION || hvd_is_initialized())) {
        PyErr_Restore(c.exc_type, c.exc_value, c.exc_tb);
        return NULL;
    }
    ctx_clear_exc(&c);
    if (st == HVD_ERR_SHUT_DOWN && !hvd_is_initialized()) {
        return worker_exits("horovod.elastic.run");
    }
    return raise_status(st);
}

/* The host-update check of State.commit and State.check_host_updates (collective). */
static PyObject *py_elastic_check_host_updates(PyObject *self, PyObject *unused) {
    static hvd_elastic_state_t *any; /* the check looks at no state but needs one */
    hvd_status_t st = any ? HVD_OK : hvd_elastic_state_create(NULL, &any);
    if (st == HVD_OK) {
        Py_BEGIN_ALLOW_THREADS st = hvd_elastic_check_host_updates(any);
        Py_END_ALLOW_THREADS
    }
    if (st != HVD_OK)
        return raise_status(st);
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"set_exceptions", py_set_exceptions, METH_VARARGS,
     "Register HorovodInternalError and "
     "HostsUpdatedInterrupt."},
    {"init", py_init, METH_VARARGS, "hvd_init (elastic: retried while the round forms)."},
    {"init_store", py_init_store, METH_VARARGS,
     "hvd_init_store(rank, size, route_addr, set, get, timeout_s) over Python callables."},
    {"send", py_send, METH_VARARGS, "hvd_send_async(ptr, count, dtype, dst, tag) -> handle."},
    {"recv", py_recv, METH_VARARGS, "hvd_recv_async(ptr, count, dtype, src, tag) -> handle."},
    {"shutdown", py_shutdown, METH_NOARGS, "hvd_shutdown (no-op when not initialised)."},
    {"is_initialized", py_is_initialized, METH_NOARGS, NULL},
    {"rank", py_rank, METH_NOARGS, NULL},
    {"size", py_size, METH_NOARGS, NULL},
    {"local_rank", py_local_rank, METH_NOARGS, NULL},
    {"local_size", py_local_size, METH_NOARGS, NULL},
    {"cross_rank", py_cross_rank, METH_NOARGS, NULL},
    {"cross_size", py_cross_size, METH_NOARGS, NULL},
    {"is_homogeneous", py_is_homogeneous, METH_NOARGS, NULL},
    {"version", py_version, METH_NOARGS, NULL},
    {"enqueue", py_enqueue, METH_VARARGS, "Enqueue a group of operations; returns handles."},
    {"run", py_run, METH_VARARGS,
     "Enqueue one operation and wait for it; returns what wait returns."},
    {"wait", py_wait, METH_O, "Wait for a handle; (Buffer, counts) for allocated outputs."},
    {"wait_resting", py_wait_resting, METH_O,
     "wait, without busy-polling (hvd_wait_resting): for a completion thread."},
    {"poll", py_poll, METH_O, NULL},
    {"join", py_join, METH_NOARGS, NULL},
    {"barrier", py_barrier, METH_VARARGS, NULL},
    {"start_timeline", py_start_timeline, METH_VARARGS, NULL},
    {"report_stragglers", py_report_stragglers, METH_VARARGS, NULL},
    {"stop_timeline", py_stop_timeline, METH_NOARGS, NULL},
    {"add_process_set", py_add_process_set, METH_O, NULL},
    {"remove_process_set", py_remove_process_set, METH_O, NULL},
    {"process_set_rank", py_process_set_rank, METH_O, NULL},
    {"process_set_size", py_process_set_size, METH_O, NULL},
    {"process_set_included", py_process_set_included, METH_O, NULL},
    {"process_set_ids", py_process_set_ids, METH_NOARGS, NULL},
    {"process_set_ranks", py_process_set_ranks, METH_O, NULL},
    {"elastic_run", py_elastic_run, METH_VARARGS,
     "Run fn under libhvd's elastic recovery with a Python State."},
    {"elastic_check_host_updates", py_elastic_check_host_updates, METH_NOARGS, NULL},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "horovod._hvd",
                                    "libhvd for the horovod package.", -1, methods};

PyMODINIT_FUNC PyInit__hvd(void);
PyMODINIT_FUNC PyInit__hvd(void) {
    if (PyType_Ready(&buffer_type) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (!m)
        return NULL;
    if (!(pending_outputs = PyDict_New()))
        goto err;
    Py_INCREF(&buffer_type);
    if (PyModule_AddObject(m, "Buffer", (PyObject *)&buffer_type) < 0) {
        Py_DECREF(&buffer_type);
        goto err;
    }
    static const struct {
        const char *name;
        int value;
    } consts[] = {
        {"UINT8", HVD_UINT8},
        {"INT8", HVD_INT8},
        {"UINT16", HVD_UINT16},
        {"INT16", HVD_INT16},
        {"INT32", HVD_INT32},
        {"INT64", HVD_INT64},
        {"FLOAT16", HVD_FLOAT16},
        {"FLOAT32", HVD_FLOAT32},
        {"FLOAT64", HVD_FLOAT64},
        {"BOOL", HVD_BOOL},
        {"BFLOAT16", HVD_BFLOAT16},
        {"AVERAGE", HVD_AVERAGE},
        {"SUM", HVD_SUM},
        {"ADASUM", HVD_ADASUM},
        {"MIN", HVD_MIN},
        {"MAX", HVD_MAX},
        {"PRODUCT", HVD_PRODUCT},
        {"ALLREDUCE", HVD_OP_ALLREDUCE},
        {"ALLGATHER", HVD_OP_ALLGATHER},
        {"BROADCAST", HVD_OP_BROADCAST},
        {"ALLTOALL", HVD_OP_ALLTOALL},
        {"REDUCESCATTER", HVD_OP_REDUCESCATTER},
    };
    for (size_t i = 0; i < sizeof consts / sizeof consts[0]; i++)
        if (PyModule_AddIntConstant(m, consts[i].name, consts[i].value) < 0)
            goto err;
    return m;
err:
    Py_DECREF(m);
    return NULL;
}
