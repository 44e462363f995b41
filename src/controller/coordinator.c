/* The coordinator's table (coordinator.h). */
#include "controller/coordinator.h"

#include "collectives/dtype.h"
#include "common/appendf.h"
#include "common/error.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct name_entry {
    char *name;
    hvd_request_t *reqs; /* one slot per rank; name == NULL while missing */
    int count;
    int64_t first_ms;    /* when the first request came (hvd__coord_set_now's clock) */
    uint32_t timeout_ms; /* the shortest deadline any request gave; 0: none */
    const char *key;     /* the first keyed request's key (in its slot), or NULL */
    char *error;         /* set: fails at once with this message (a key's two names, or the
                          * deadline passed), and status says which (HVD_NEG_FAIL_*) */
    uint8_t status;
    int32_t pset, pset_size; /* the first request's process set */
    int type;                /* the first request's */
    int ready_seq;           /* order of becoming ready; 0 while not ready */
    int pair[2];             /* a p2p name's two ranks (the first request's and its partner) */
    /* Another pending name with the same user's name (hvd__coord_user_name) but another
     * operation, and since when both are pending: a mismatch if the ranks stay apart. */
    const char *user; /* the user's name in name, or NULL */
    struct name_entry *rival;
    int64_t rival_ms;
    struct name_entry *next;
} name_entry_t;

/* Keys that failed lately, with their error: a rank that asks under one later (it arrived
 * after the others had been told) fails at once, with the same message, instead of waiting
 * for a deadline. A key is used once, so a ring of the last few is enough. */
#define FAILED_KEYS 64
typedef struct {
    int32_t pset;
    char *key, *error;
    uint8_t status;
} failed_key_t;

struct hvd_coord {
    int size;
    failed_key_t failed[FAILED_KEYS];
    unsigned nfailed; /* failures remembered so far; the ring holds the last FAILED_KEYS */
    name_entry_t *head;
    size_t pending;
    size_t timed;  /* entries with a deadline */
    size_t rivals; /* entries with a rival */
    int64_t now;
    const char *const *hosts;
    const long *pids;
    /* when each rank last finished a negotiated operation, and the last operation every rank
     * finished (a cached one never reaches the coordinator but as hvd__coord_done_by_all) */
    int64_t *last_ms, all_last_ms;
    char **last_name, *all_last_name;
    int next_seq;
    uint8_t *joined;
    int njoined, last_joined;
    hvd_pset_member_fn member;
    void *member_arg;
};

hvd_status_t hvd__coord_create(int size, hvd_coord_t **c_p) {
    hvd_coord_t *c = calloc(1, sizeof *c);
    size_t n = (size_t)(size > 0 ? size : 1);
    if (c) {
        c->joined = calloc(n, 1);
        c->last_ms = calloc(n, sizeof *c->last_ms);
        c->last_name = calloc(n, sizeof *c->last_name);
    }
    if (!c || !c->joined || !c->last_ms || !c->last_name) {
        if (c) {
            free(c->joined);
            free(c->last_ms);
            free(c->last_name);
        }
        free(c);
        return hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory for the coordinator");
    }
    c->size = size;
    c->last_joined = -1;
    *c_p = c;
    return HVD_OK;
}

static void entry_free(hvd_coord_t *c, name_entry_t *e) {
    for (int r = 0; r < c->size; r++) {
        free(e->reqs[r].name);
        free(e->reqs[r].key);
    }
    if (e->timeout_ms)
        c->timed--;
    if (e->rival) {
        e->rival->rival = NULL;
        c->rivals -= 2;
    }
    free(e->reqs);
    free(e->name);
    free(e->error);
    free(e);
}

void hvd__coord_destroy(hvd_coord_t *c) {
    if (!c)
        return;
    for (name_entry_t *e = c->head, *n; e; e = n) {
        n = e->next;
        entry_free(c, e);
    }
    for (int r = 0; r < c->size; r++)
        free(c->last_name[r]);
    for (int k = 0; k < FAILED_KEYS; k++) {
        free(c->failed[k].key);
        free(c->failed[k].error);
    }
    free(c->last_name);
    free(c->last_ms);
    free(c->all_last_name);
    free(c->joined);
    free(c);
}

void hvd__coord_set_now(hvd_coord_t *c, int64_t now_ms) {
    c->now = now_ms;
}

void hvd__coord_set_hosts(hvd_coord_t *c, const char *const *hosts, const long *pids) {
    c->hosts = hosts;
    c->pids = pids;
}

static const char *host_of(const hvd_coord_t *c, int r) {
    return c->hosts && c->hosts[r] ? c->hosts[r] : "?";
}

void hvd__coord_done_by_all(hvd_coord_t *c, const char *name) {
    char *copy = strdup(name);
    if (!copy)
        return; /* (only a message's detail is lost) */
    free(c->all_last_name);
    c->all_last_name = copy;
    c->all_last_ms = c->now;
}

void hvd__coord_set_members(hvd_coord_t *c, hvd_pset_member_fn fn, void *arg) {
    c->member = fn;
    c->member_arg = arg;
}

/* How many of the ranks e waits for have joined: in the whole job, or among the members of
 * e's process set. */
static int joined_for(const hvd_coord_t *c, const name_entry_t *e) {
    if (e->type == HVD_REQ_P2P) /* only the pair takes part */
        return c->joined[e->pair[0]] + c->joined[e->pair[1]];
    if (!e->pset)
        return c->njoined;
    if (c->njoined == 0 || !c->member)
        return 0;
    int n = 0;
    for (int r = 0; r < e->pset_size; r++) {
        int g = c->member(c->member_arg, e->pset, r);
        n += g >= 0 && g < c->size && c->joined[g];
    }
    return n;
}

size_t hvd__coord_pending(const hvd_coord_t *c) {
    return c->pending;
}

/* Ready when every rank asked, joined ranks counting as asking, in the whole job or in a
 * process set they belong to. While a rank has joined, an operation that cannot run with Join
 * (anything but a reduction) and that waits for it is ready at its first request, to be
 * answered with build()'s error: waiting for every other rank to ask for the same name could
 * wait forever, since ranks that joined at different times have numbered their unnamed
 * operations differently (and a joined rank asks for nothing). A rank asking later gets the
 * same error from a new entry. */
static void mark_if_ready(hvd_coord_t *c, name_entry_t *e) {
    if (e->ready_seq || e->count == 0)
        return;
    int joined = joined_for(c, e);
    int members = e->type == HVD_REQ_P2P ? 2 : e->pset ? e->pset_size : c->size;
    int want = members - joined;
    int refused = joined > 0 && e->type != HVD_REQ_ALLREDUCE && e->type != HVD_REQ_ADASUM;
    if (e->count >= want || refused)
        e->ready_seq = ++c->next_seq;
}

static void shape_str(const hvd_request_t *r, char *out, size_t n);

/* "allreduce 'name' (FLOAT32 [4], SUM)": what q asked for, for messages. */
static void describe(const hvd_request_t *q, char *out, size_t n) {
    char shape[160];
    shape_str(q, shape, sizeof shape);
    int k = snprintf(out, n, "%s '%s' (%s %s", hvd__neg_type_name(q->type), q->name,
                     hvd__dtype_name((hvd_dtype_t)q->dtype), shape);
    if (k < 0 || (size_t)k >= n)
        return;
    if (q->type == HVD_REQ_ALLREDUCE || q->type == HVD_REQ_REDUCESCATTER)
        snprintf(out + k, n - (size_t)k, ", %s)", hvd__reduce_op_name((hvd_reduce_op_t)q->op));
    else if (q->type == HVD_REQ_BROADCAST)
        snprintf(out + k, n - (size_t)k, ", root %d)", q->root);
    else
        snprintf(out + k, n - (size_t)k, ")");
}

/* e fails with msg (status HVD_NEG_FAIL_*), at once; a keyed failure is remembered. */
static hvd_status_t fail_entry(hvd_coord_t *c, name_entry_t *e, const char *msg, uint8_t status) {
    if (e->error)
        return HVD_OK;
    if (!(e->error = strdup(msg)))
        return hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory in the coordinator");
    e->status = status;
    if (!e->ready_seq)
        e->ready_seq = ++c->next_seq;
    if (e->key) {
        failed_key_t *f = &c->failed[c->nfailed++ % FAILED_KEYS];
        free(f->key);
        free(f->error);
        f->key = strdup(e->key);
        f->error = strdup(msg);
        f->pset = e->pset;
        f->status = status;
        if (!f->key || !f->error) { /* (only the late ranks' shortcut is lost) */
            free(f->key);
            free(f->error);
            f->key = f->error = NULL;
        }
    }
    return HVD_OK;
}

/* e's first keyed request q took key: another name of e's process set under the same key
 * means the ranks disagree on what that place of their common order is (a key is used once
 * per process set): both names fail at once, each side named. */
static hvd_status_t check_key(hvd_coord_t *c, name_entry_t *e, const hvd_request_t *q) {
    for (int k = 0; k < FAILED_KEYS; k++) {
        const failed_key_t *f = &c->failed[k];
        if (f->key && f->pset == e->pset && strcmp(f->key, e->key) == 0) {
            char msg[HVD_NEG_ERROR_MAX / 2];
            snprintf(msg, sizeof msg, "%s (rank %d asked for '%s' after that failure)", f->error,
                     q->rank, e->name);
            return fail_entry(c, e, msg, f->status);
        }
    }
    for (name_entry_t *f = c->head; f; f = f->next) {
        if (f == e || !f->key || f->pset != e->pset || strcmp(f->key, e->key) != 0)
            continue;
        const hvd_request_t *other = NULL;
        for (int r = 0; r < c->size && !other; r++)
            if (f->reqs[r].key && strcmp(f->reqs[r].key, e->key) == 0)
                other = &f->reqs[r];
        if (!other)
            continue;
        char a[600], b[600], msg[HVD_NEG_ERROR_MAX / 2];
        const hvd_request_t *lo = other->rank < q->rank ? other : q;
        const hvd_request_t *hi = lo == q ? other : q;
        describe(lo, a, sizeof a);
        describe(hi, b, sizeof b);
        snprintf(msg, sizeof msg,
                 "Mismatched operations at '%s': rank %d (host %s) asked for %s, but rank %d "
                 "(host %s) asked for %s.",
                 e->key, lo->rank, host_of(c, lo->rank), a, hi->rank, host_of(c, hi->rank), b);
        hvd_status_t st = fail_entry(c, e, msg, HVD_NEG_FAIL_MISMATCH);
        return st == HVD_OK ? fail_entry(c, f, msg, HVD_NEG_FAIL_MISMATCH) : st;
    }
    return HVD_OK;
}

const char *hvd__coord_user_name(const char *name) {
    static const char *const kinds[] = {"allreduce.", "allgather.",     "broadcast.",
                                        "alltoall.",  "reducescatter.", "adasum."};
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
        size_t n = strlen(kinds[i]);
        if (strncmp(name, kinds[i], n) == 0 && name[n])
            return name + n;
    }
    return NULL;
}

/* A new entry e whose name carries a user's name: another pending name of its process set
 * with the same user's name (another operation) becomes its rival. */
static void find_rival(hvd_coord_t *c, name_entry_t *e) {
    if (!(e->user = hvd__coord_user_name(e->name)))
        return;
    for (name_entry_t *f = c->head; f; f = f->next) {
        if (f == e || !f->user || f->rival || f->error || f->pset != e->pset)
            continue;
        if (strcmp(f->user, e->user) == 0) {
            e->rival = f;
            f->rival = e;
            e->rival_ms = f->rival_ms = c->now;
            c->rivals += 2;
            return;
        }
    }
}

/* Whether the ranks are apart on e and its rival: a rank asked for e and not for the
 * rival, and another for the rival and not for e (a rank that asked for both, or a rank
 * yet to ask, may simply submit in another order). */
static int apart(const hvd_coord_t *c, const name_entry_t *e, int *a, int *b) {
    *a = *b = -1;
    for (int r = 0; r < c->size; r++) {
        int mine = e->reqs[r].name != NULL, theirs = e->rival->reqs[r].name != NULL;
        if (mine && !theirs && *a < 0)
            *a = r;
        if (theirs && !mine && *b < 0)
            *b = r;
    }
    return *a >= 0 && *b >= 0;
}

static int rival_due(const name_entry_t *e, int64_t now_ms) {
    return e->rival && !e->ready_seq && now_ms - e->rival_ms >= HVD_COORD_RIVAL_GRACE_MS;
}

/* e and its rival have both been pending for the grace time: if the ranks are still apart,
 * both fail, each side named; if not, they are no longer rivals. */
static hvd_status_t settle_rival(hvd_coord_t *c, name_entry_t *e) {
    name_entry_t *f = e->rival;
    int a, b;
    int split = apart(c, e, &a, &b);
    e->rival = f->rival = NULL;
    c->rivals -= 2;
    if (!split)
        return HVD_OK;
    char da[600], db[600], msg[HVD_NEG_ERROR_MAX / 2];
    const hvd_request_t *qa = &e->reqs[a], *qb = &f->reqs[b];
    if (b < a) {
        const hvd_request_t *t = qa;
        qa = qb;
        qb = t;
    }
    describe(qa, da, sizeof da);
    describe(qb, db, sizeof db);
    snprintf(msg, sizeof msg,
             "Mismatched operations under the name '%s': rank %d (host %s) asked for %s, but "
             "rank %d (host %s) asked for %s. Every rank must submit the same operation under "
             "a name.",
             e->user, qa->rank, host_of(c, qa->rank), da, qb->rank, host_of(c, qb->rank), db);
    hvd_status_t st = fail_entry(c, e, msg, HVD_NEG_FAIL_MISMATCH);
    return st == HVD_OK ? fail_entry(c, f, msg, HVD_NEG_FAIL_MISMATCH) : st;
}

hvd_status_t hvd__coord_add(hvd_coord_t *c, const hvd_request_t *req) {
    if (req->rank < 0 || req->rank >= c->size)
        return hvd__error_set(HVD_ERR_INVALID_ARG, "request from rank %d in a group of %d",
                              req->rank, c->size);
    if (req->type == HVD_REQ_JOIN) {
        if (!c->joined[req->rank]) {
            c->joined[req->rank] = 1;
            c->njoined++;
            c->last_joined = req->rank;
            for (name_entry_t *e = c->head; e; e = e->next)
                mark_if_ready(c, e);
        }
        return HVD_OK;
    }
    /* (a partner outside the job would index joined[] out of bounds: a peer's bug, or a
     * forged message) */
    if (req->type == HVD_REQ_P2P &&
        (req->root < 0 || req->root >= c->size || req->root == req->rank ||
         (req->op != HVD_P2P_SEND && req->op != HVD_P2P_RECV)))
        return hvd__error_set(HVD_ERR_INVALID_ARG,
                              "rank %d's point-to-point request '%s' names partner %d (op %d) in "
                              "a group of %d",
                              req->rank, req->name, req->root, req->op, c->size);
    name_entry_t *e = c->head;
    while (e && strcmp(e->name, req->name) != 0)
        e = e->next;
    if (!e) {
        e = calloc(1, sizeof *e);
        if (e) {
            e->name = strdup(req->name);
            e->reqs = calloc((size_t)c->size, sizeof *e->reqs);
        }
        if (!e || !e->name || !e->reqs) {
            if (e) {
                free(e->name);
                free(e->reqs);
                free(e);
            }
            return hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory in the coordinator");
        }
        e->pset = req->pset;
        e->pset_size = req->pset_size;
        e->type = req->type;
        e->first_ms = c->now;
        e->pair[0] = req->rank;
        e->pair[1] = req->type == HVD_REQ_P2P ? req->root : req->rank;
        /* append: readiness ties resolve in first-request order */
        name_entry_t **pp = &c->head;
        while (*pp)
            pp = &(*pp)->next;
        *pp = e;
        c->pending++;
        if (req->type != HVD_REQ_P2P)
            find_rival(c, e);
    }
    hvd_request_t *slot = &e->reqs[req->rank];
    if (slot->name)
        return hvd__error_set(HVD_ERR_INVALID_ARG,
                              "rank %d requested '%s' twice before it was answered", req->rank,
                              req->name);
    *slot = *req;
    slot->name = strdup(req->name);
    slot->key = req->key && *req->key ? strdup(req->key) : NULL;
    if (!slot->name || (req->key && *req->key && !slot->key)) {
        free(slot->name);
        slot->name = NULL;
        return hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory in the coordinator");
    }
    e->count++;
    if (req->timeout_ms && (!e->timeout_ms || req->timeout_ms < e->timeout_ms)) {
        c->timed += !e->timeout_ms;
        e->timeout_ms = req->timeout_ms;
    }
    if (slot->key && !e->key) {
        e->key = slot->key;
        hvd_status_t st = check_key(c, e, slot);
        if (st != HVD_OK)
            return st;
    }
    mark_if_ready(c, e);
    return HVD_OK;
}

static void shape_str(const hvd_request_t *r, char *out, size_t n) {
    size_t k = (size_t)snprintf(out, n, "[");
    for (int d = 0; d < r->ndims && k < n; d++)
        k += (size_t)snprintf(out + k, n - k, "%s%lld", d ? ", " : "", (long long)r->dims[d]);
    if (k < n)
        snprintf(out + k, n - k, "]");
}

/* The first disagreement between a and b (in Horovod's order), or 0. */
static int disagree(const hvd_request_t *a, const hvd_request_t *b, char *msg, size_t n) {
    char sa[160], sb[160];
    if (a->dtype != b->dtype) {
        snprintf(msg, n,
                 "Mismatched data types: One rank had type %s, but another rank had type %s.",
                 hvd__dtype_name((hvd_dtype_t)a->dtype), hvd__dtype_name((hvd_dtype_t)b->dtype));
        return 1;
    }
    if (a->type != b->type) {
        snprintf(msg, n, "Mismatched operations: One rank did an %s, but another rank did an %s.",
                 hvd__neg_type_name(a->type), hvd__neg_type_name(b->type));
        return 1;
    }
    if (a->pset != b->pset) {
        snprintf(msg, n,
                 "Mismatched process sets: One rank used process set %d, but another rank used "
                 "process set %d.",
                 a->pset, b->pset);
        return 1;
    }
    int t = a->type;
    int shaped = t == HVD_REQ_ALLREDUCE || t == HVD_REQ_ADASUM || t == HVD_REQ_BROADCAST ||
                 t == HVD_REQ_REDUCESCATTER;
    if (shaped && (a->ndims != b->ndims ||
                   memcmp(a->dims, b->dims, (size_t)a->ndims * sizeof *a->dims) != 0)) {
        shape_str(a, sa, sizeof sa);
        shape_str(b, sb, sizeof sb);
        snprintf(msg, n,
                 "Mismatched %s tensor shapes: One rank sent a tensor of shape %s, but another "
                 "rank sent a tensor of shape %s.",
                 hvd__neg_type_name(t), sa, sb);
        return 1;
    }
    if (t == HVD_REQ_ALLGATHER || t == HVD_REQ_ALLTOALL) {
        /* the first dimension may differ; the rest may not */
        if (a->ndims != b->ndims) {
            snprintf(msg, n,
                     "Mismatched %s tensor shapes: One rank sent a tensor of rank %d, but another "
                     "rank sent a tensor of rank %d.",
                     hvd__neg_type_name(t), a->ndims, b->ndims);
            return 1;
        }
        for (int d = 1; d < a->ndims; d++) {
            if (a->dims[d] != b->dims[d]) {
                snprintf(msg, n,
                         "Mismatched %s tensor shapes: One rank sent a tensor with dimension %d "
                         "equal to %lld, but another rank sent a tensor with dimension %d equal "
                         "to %lld.",
                         hvd__neg_type_name(t), d, (long long)a->dims[d], d, (long long)b->dims[d]);
                return 1;
            }
        }
    }
    if ((t == HVD_REQ_ALLREDUCE || t == HVD_REQ_ADASUM || t == HVD_REQ_REDUCESCATTER) &&
        (a->prescale != b->prescale || a->postscale != b->postscale)) {
        snprintf(msg, n,
                 "Mismatched prescale and/or postscale factors: One rank sent factors (%g, %g), "
                 "but another rank sent factors (%g, %g).",
                 a->prescale, a->postscale, b->prescale, b->postscale);
        return 1;
    }
    if (t == HVD_REQ_ALLREDUCE && a->op != b->op) {
        snprintf(msg, n,
                 "Mismatched reduction operation: One rank sent reduction op %s, but another rank "
                 "sent reduction op %s.",
                 hvd__reduce_op_name((hvd_reduce_op_t)a->op),
                 hvd__reduce_op_name((hvd_reduce_op_t)b->op));
        return 1;
    }
    if (t == HVD_REQ_BROADCAST && a->root != b->root) {
        snprintf(msg, n,
                 "Mismatched BROADCAST root ranks: One rank specified root rank %d, but another "
                 "rank specified root rank %d.",
                 a->root, b->root);
        return 1;
    }
    return 0;
}

static int64_t elements(const hvd_request_t *r) {
    int64_t n = 1;
    for (int d = 0; d < r->ndims; d++)
        n *= r->dims[d];
    return n;
}

/* The response of a ready p2p name: the two ranks must be one send and one receive between
 * them that agree on the bytes (not on the dtype: as in MPI and torch.distributed, bytes are
 * bytes); anything else is an ERROR response naming both ranks and what each posted. */
static hvd_status_t build_p2p(hvd_coord_t *c, name_entry_t *e, hvd_response_t *out) {
    out->names = malloc(sizeof *out->names);
    out->sizes = malloc(3 * sizeof *out->sizes);
    if (!out->names || !out->sizes || !(out->names[0] = strdup(e->name)))
        return hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory in the coordinator");
    out->nnames = 1;
    out->last_joined_rank = -1;
    out->prescale = out->postscale = 1.0;
    const hvd_request_t *snd = NULL, *rcv = NULL, *odd = NULL;
    for (int r = 0; r < c->size; r++) {
        const hvd_request_t *q = &e->reqs[r];
        if (!q->name)
            continue;
        if (q->type == HVD_REQ_P2P && q->op == HVD_P2P_SEND && !snd)
            snd = q;
        else if (q->type == HVD_REQ_P2P && q->op == HVD_P2P_RECV && !rcv)
            rcv = q;
        else if (!odd)
            odd = q;
    }
    char msg[HVD_NEG_ERROR_MAX / 2] = "";
    const hvd_request_t *any = snd ? snd : rcv ? rcv : odd;
    if (odd || (snd && rcv && (snd->root != rcv->rank || rcv->root != snd->rank))) {
        const hvd_request_t *b = odd && odd != any ? odd : snd == any ? rcv : snd;
        snprintf(msg, sizeof msg,
                 "Mismatched operations: rank %d did a %s and rank %d did a %s of '%s'; a "
                 "point-to-point message needs one send and one receive between the two ranks.",
                 any->rank, hvd__neg_type_name(any->type), b ? b->rank : -1,
                 b ? hvd__neg_type_name(b->type) : "nothing", e->name);
    } else if (!snd || !rcv) {
        /* ready with one side only: the partner has joined (mark_if_ready) */
        const hvd_request_t *q = snd ? snd : rcv;
        snprintf(msg, sizeof msg,
                 "Point-to-point send and receive are not supported with Join at this time: "
                 "rank %d %s rank %d, which has joined (tensor '%s').",
                 q->rank, snd ? "sends to" : "receives from", q->root, e->name);
    } else if (snd->dims[1] != rcv->dims[1]) {
        snprintf(msg, sizeof msg,
                 "Mismatched point-to-point sizes: rank %d sends %lld bytes (%lld x %s) to rank "
                 "%d, but rank %d receives %lld bytes (%lld x %s) from rank %d (message '%s').",
                 snd->rank, (long long)snd->dims[1], (long long)snd->dims[0],
                 hvd__dtype_name((hvd_dtype_t)snd->dtype), rcv->rank, rcv->rank,
                 (long long)rcv->dims[1], (long long)rcv->dims[0],
                 hvd__dtype_name((hvd_dtype_t)rcv->dtype), snd->rank, e->name);
    }
    if (msg[0]) {
        out->type = HVD_RESP_ERROR;
        out->error = strdup(msg);
        return out->error ? HVD_OK : hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory");
    }
    out->type = HVD_REQ_P2P;
    out->dtype = snd->dtype;
    out->sizes[0] = snd->dims[1];
    out->sizes[1] = snd->rank;
    out->sizes[2] = rcv->rank;
    out->nsizes = 3;
    out->error = strdup("");
    return out->error ? HVD_OK : hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory");
}

/* Build the response of a ready entry into *out. */
static hvd_status_t build(hvd_coord_t *c, name_entry_t *e, hvd_response_t *out) {
    memset(out, 0, sizeof *out);
    if (e->error) {
        out->type = HVD_RESP_ERROR;
        out->status = e->status;
        out->last_joined_rank = -1;
        out->pset = e->pset;
        out->prescale = out->postscale = 1.0;
        out->names = malloc(sizeof *out->names);
        if (!out->names || !(out->names[0] = strdup(e->name)))
            return hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory in the coordinator");
        out->nnames = 1;
        out->error = strdup(e->error);
        return out->error ? HVD_OK : hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory");
    }
    if (e->type == HVD_REQ_P2P)
        return build_p2p(c, e, out);
    out->names = malloc(sizeof *out->names);
    out->sizes = malloc((size_t)c->size * sizeof *out->sizes);
    if (!out->names || !out->sizes || !(out->names[0] = strdup(e->name)))
        return hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory in the coordinator");
    out->nnames = 1;
    const hvd_request_t *first = NULL;
    int first_rank = -1;
    char msg[HVD_NEG_ERROR_MAX / 2] = "";
    for (int r = 0; r < c->size; r++) {
        const hvd_request_t *q = &e->reqs[r];
        if (!q->name)
            continue; /* joined */
        if (!first) {
            first = q;
            first_rank = r;
        } else if (!msg[0] && disagree(first, q, msg, sizeof msg)) {
            size_t k = strlen(msg);
            snprintf(msg + k, sizeof msg - k, " (rank %d and rank %d, tensor '%s')", first_rank, r,
                     e->name);
        }
    }
    /* Joined ranks have no tensor to give to anything but a reduction (they contribute
     * zeros there): the reference's messages. */
    int present = 0;
    for (int r = 0; r < c->size; r++)
        present += e->reqs[r].name != NULL;
    if (!msg[0] && present < (e->pset ? e->pset_size : c->size) &&
        first->type != HVD_REQ_ALLREDUCE && first->type != HVD_REQ_ADASUM) {
        static const char *const join_errors[] = {
            [HVD_REQ_ALLGATHER] = "Allgather is not supported with Join at this time.",
            [HVD_REQ_BROADCAST] = "Broadcast is not supported with Join at this time.",
            [HVD_REQ_ALLTOALL] = "Alltoall is not supported with Join at this time.",
            [HVD_REQ_REDUCESCATTER] = "Reducescatter is not supported with Join at this time.",
        };
        const char *je = first->type < sizeof join_errors / sizeof *join_errors
                             ? join_errors[first->type]
                             : NULL;
        snprintf(msg, sizeof msg, "%s (tensor '%s')",
                 je ? je : "This operation is not supported with Join at this time.", e->name);
    }
    out->type = first->type;
    out->dtype = first->dtype;
    out->op = first->op;
    out->prescale = first->prescale;
    out->postscale = first->postscale;
    out->last_joined_rank = -1;
    out->pset = first->pset;
    if (msg[0]) {
        out->type = HVD_RESP_ERROR;
        out->error = strdup(msg);
        return out->error ? HVD_OK : hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory");
    }
    /* sizes: elements for reductions; for allgather every rank's first dimension (in a
     * process set, of its members: they are its ranks in order) */
    if (first->type == HVD_REQ_ALLGATHER) {
        uint32_t k = 0;
        for (int r = 0; r < c->size; r++)
            if (!e->pset || e->reqs[r].name)
                out->sizes[k++] = e->reqs[r].name && e->reqs[r].ndims ? e->reqs[r].dims[0] : 0;
        out->nsizes = k;
    } else {
        out->sizes[0] = elements(first);
        out->nsizes = 1;
    }
    out->error = strdup("");
    return out->error ? HVD_OK : hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory");
}

/* Whether rank r is one that e waits for (a member of its process set, or of its pair). */
static int waits_for(const hvd_coord_t *c, const name_entry_t *e, int r) {
    if (e->type == HVD_REQ_P2P)
        return r == e->pair[0] || r == e->pair[1];
    if (!e->pset)
        return 1;
    if (!c->member)
        return 0;
    for (int k = 0; k < e->pset_size; k++)
        if (c->member(c->member_arg, e->pset, k) == r)
            return 1;
    return 0;
}

/* Whether e still waits for rank r (r never asked, has not joined, and takes part). */
static int absent(const hvd_coord_t *c, const name_entry_t *e, int r) {
    return !e->reqs[r].name && !c->joined[r] && waits_for(c, e, r);
}

/* Whether e's deadline has passed at now_ms while it still waits. */
static int expired(const name_entry_t *e, int64_t now_ms) {
    return e->timeout_ms && !e->ready_seq && now_ms - e->first_ms >= (int64_t)e->timeout_ms;
}

/* Append to msg (of n bytes, at *k) what rank r does other than asking for e (NULL: for
 * anything): the names it waits in, or that it waits in none; and the last operation it
 * finished and how long ago, when it waits in none or always_last is set. */
static void activity(const hvd_coord_t *c, const name_entry_t *e, int r, int always_last,
                     const char *blocking, char *msg, size_t n, size_t *k) {
    int shown = 0;
    if (blocking) {
        hvd__appendf(msg, n, k, "waits in %s", blocking);
        shown++;
    }
    for (const name_entry_t *f = c->head; f; f = f->next) {
        const hvd_request_t *q = &f->reqs[r];
        if (f == e || !q->name)
            continue;
        if (shown == 3) {
            hvd__appendf(msg, n, k, " and more");
            break;
        }
        char d[600];
        describe(q, d, sizeof d);
        hvd__appendf(msg, n, k, "%s %s (for %.1f s)", shown ? "," : "waits in", d,
                     (double)(c->now - f->first_ms) / 1e3);
        shown++;
    }
    if (!shown)
        hvd__appendf(msg, n, k,
                     "waits in no operation (it runs its own code, or has left the training loop)");
    if (shown && !always_last)
        return;
    int64_t when = c->last_ms[r] > c->all_last_ms ? c->last_ms[r] : c->all_last_ms;
    const char *what = c->last_ms[r] > c->all_last_ms ? c->last_name[r] : c->all_last_name;
    if (what)
        hvd__appendf(msg, n, k, "; its last, '%s', ended %.1f s ago", what,
                     (double)(c->now - when) / 1e3);
    else
        hvd__appendf(msg, n, k, " and has finished none");
}

/* Append to msg what rank r is doing instead of asking for e, after its host and pid. */
static void doing_instead(const hvd_coord_t *c, const name_entry_t *e, int r, char *msg, size_t n,
                          size_t *k) {
    if (c->pids && c->pids[r] > 0)
        hvd__appendf(msg, n, k, "rank %d (host %s, pid %ld) ", r, host_of(c, r), c->pids[r]);
    else
        hvd__appendf(msg, n, k, "rank %d (host %s) ", r, host_of(c, r));
    activity(c, e, r, 0, NULL, msg, n, k);
}

void hvd__coord_describe_rank(hvd_coord_t *c, int r, int64_t now_ms, const char *blocking,
                              char *msg, size_t n) {
    size_t written = 0, *k = &written;
    if (n)
        msg[0] = '\0';
    if (r < 0 || r >= c->size)
        return;
    c->now = now_ms;
    if (c->pids && c->pids[r] > 0)
        hvd__appendf(msg, n, k, "pid %ld, ", c->pids[r]);
    activity(c, NULL, r, 1, blocking, msg, n, k);
}

/* e's deadline passed: its error names the ranks that never asked and what they do. */
static hvd_status_t expire(hvd_coord_t *c, name_entry_t *e) {
    char msg[HVD_NEG_ERROR_MAX / 2], d[600];
    const hvd_request_t *asked = NULL;
    for (int r = 0; r < c->size && !asked; r++)
        if (e->reqs[r].name)
            asked = &e->reqs[r];
    describe(asked, d, sizeof d);
    size_t k = 0, n = sizeof msg;
    int missing = 0;
    for (int r = 0; r < c->size; r++)
        missing += absent(c, e, r);
    int w = snprintf(msg, n,
                     "Timed out%s%s%s: %s waited %.1f s, its deadline, for %d rank%s that never "
                     "asked for it: ",
                     e->key ? " at '" : "", e->key ? e->key : "", e->key ? "'" : "", d,
                     (double)(c->now - e->first_ms) / 1e3, missing, missing == 1 ? "" : "s");
    k = w > 0 ? (size_t)w : 0;
    int listed = 0;
    for (int r = 0; r < c->size && k < n; r++) {
        if (!absent(c, e, r))
            continue;
        if (listed == 8) {
            snprintf(msg + k, n - k, "; and %d more", missing - listed);
            break;
        }
        if (listed && k + 2 < n) {
            memcpy(msg + k, "; ", 2);
            k += 2;
            msg[k] = '\0';
        }
        doing_instead(c, e, r, msg, n, &k);
        listed++;
    }
    return fail_entry(c, e, msg, HVD_NEG_FAIL_TIMEOUT);
}

int hvd__coord_due(const hvd_coord_t *c, int64_t now_ms) {
    if (!c->timed && !c->rivals)
        return 0;
    for (const name_entry_t *e = c->head; e; e = e->next)
        if (expired(e, now_ms) || rival_due(e, now_ms))
            return 1;
    return 0;
}

/* A response went out for e: every rank that asked for it has finished an operation. */
static void note_done(hvd_coord_t *c, const name_entry_t *e) {
    for (int r = 0; r < c->size; r++) {
        if (!e->reqs[r].name)
            continue;
        char *copy = strdup(e->name);
        if (!copy)
            continue; /* (only a message's detail is lost) */
        free(c->last_name[r]);
        c->last_name[r] = copy;
        c->last_ms[r] = c->now;
    }
}

hvd_status_t hvd__coord_take_ready(hvd_coord_t *c, hvd_response_list_t *out) {
    for (name_entry_t *e = c->head; e && c->rivals; e = e->next) {
        if (rival_due(e, c->now)) {
            hvd_status_t st = settle_rival(c, e);
            if (st != HVD_OK)
                return st;
        }
    }
    for (name_entry_t *e = c->head; e && c->timed; e = e->next) {
        if (expired(e, c->now)) {
            hvd_status_t st = expire(c, e);
            if (st != HVD_OK)
                return st;
        }
    }
    for (;;) {
        name_entry_t **best = NULL;
        for (name_entry_t **pp = &c->head; *pp; pp = &(*pp)->next)
            if ((*pp)->ready_seq && (!best || (*pp)->ready_seq < (*best)->ready_seq))
                best = pp;
        if (!best)
            break;
        hvd_response_t *items = realloc(out->items, (out->count + 1) * sizeof *items);
        if (!items)
            return hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory in the coordinator");
        out->items = items;
        name_entry_t *e = *best;
        hvd_status_t st = build(c, e, &out->items[out->count]);
        out->count++; /* even half-built: hvd__neg_responses_fini frees it */
        if (st != HVD_OK)
            return st;
        if (!e->error)
            note_done(c, e);
        *best = e->next;
        entry_free(c, e);
        c->pending--;
    }
    if (c->njoined == c->size) {
        hvd_response_t *items = realloc(out->items, (out->count + 1) * sizeof *items);
        if (!items)
            return hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory in the coordinator");
        out->items = items;
        hvd_response_t *j = &out->items[out->count++];
        memset(j, 0, sizeof *j);
        j->type = HVD_REQ_JOIN;
        j->last_joined_rank = c->last_joined;
        j->error = strdup("");
        memset(c->joined, 0, (size_t)c->size);
        c->njoined = 0;
        c->last_joined = -1;
        if (!j->error)
            return hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory");
    }
    return HVD_OK;
}
