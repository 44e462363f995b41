/* One cycle of the engine (engine.h): intake, the cycle message, the response cache,
 * negotiation with the coordinator, then execution in the agreed order. */
#include "core/engine_impl.h"

#include "collectives/coll.h"
#include "collectives/control.h"
#include "collectives/dtype.h"
#include "common/appendf.h"
#include "common/clock.h"
#include "common/error.h"
#include "common/log.h"
#include "controller/fusion.h"
#include "os/stack_dump.h"
#include "wire/le.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Largest payload a blocking call carries inline: an allreduce's on any of the communicators
 * a blocking call may use, or a small allgather's or broadcast's block (engine.c, prepare).
 * As tight as that, since every rank checks each message it receives against the bound. */
static size_t payload_max(hvd_engine_t *e) {
    if (e->payload_max) /* (the groups are the engine's for its whole life) */
        return e->payload_max;
    const hvd_context_t *c = e->ctx;
    const hvd_group_t *groups[3] = {&c->global, &c->local, &c->cross};
    size_t most = HVD_SMALL_BYTES;
    for (int i = 0; i < 3; i++) {
        size_t ar = hvd__allreduce_inline_limit(groups[i]);
        most = ar > most ? ar : most;
    }
    return e->payload_max = most;
}
/* How long a cached operation with a key or a deadline waits for the other ranks' bits
 * before it goes to the coordinator (intake). */
#define KEYED_HIT_GRACE_MS 200
/* A hit whose name carries a user's name (hvd__coord_user_name) goes to the coordinator
 * after this long, where another rank may have asked for the same user's name under another
 * operation: the coordinator's rivals. (Longer than a keyed hit's: a rank more than this
 * late costs one uncached negotiation of each such name.) */
#define NAMED_HIT_GRACE_MS 1000
/* Bound on one rank's request list (every name at most 1 KiB). */
#define REQUESTS_MAX ((size_t)64 << 20)
#define RESPONSES_MAX ((size_t)256 << 20)

static hvd_status_t pend_add(hvd_pend_list_t *l, hvd_entry_t *x, uint32_t bit, int64_t since) {
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 64;
        hvd_pend_t *v = realloc(l->v, cap * sizeof *v);
        if (!v)
            return hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory in the engine");
        l->v = v;
        l->cap = cap;
    }
    l->v[l->n++] = (hvd_pend_t){.e = x, .bit = bit, .since_ms = since};
    return HVD_OK;
}

/* The request describing entry x. ALLGATHER and ALLTOALL are [1, count] so that the
 * coordinator checks count (a later dimension) while the first stays free. */
static void entry_request(const hvd_entry_t *x, int rank, hvd_request_t *r) {
    memset(r, 0, sizeof *r);
    r->rank = rank;
    r->type = (uint8_t)x->type;
    r->dtype = (uint8_t)x->dtype;
    r->op = (uint8_t)x->op;
    r->root = x->type == HVD_REQ_BROADCAST ? x->root : 0;
    r->pset = x->pset;
    r->pset_size = x->pset_size;
    r->prescale = x->prescale;
    r->postscale = x->postscale;
    r->name = x->name;
    r->key = x->key;
    r->timeout_ms = x->timeout_ms;
    if (x->type == HVD_REQ_P2P) {
        /* the pair must agree on bytes, not elements (hvd.h): both go to the coordinator */
        r->root = x->root;
        r->op = x->p2p_send ? HVD_P2P_SEND : HVD_P2P_RECV;
        r->ndims = 2;
        r->dims[0] = (int64_t)x->count;
        r->dims[1] = (int64_t)(x->count * hvd__dtype_size(x->dtype));
    } else if (x->ndims > 0 && x->type != HVD_REQ_JOIN) {
        r->ndims = (uint8_t)x->ndims;
        memcpy(r->dims, x->dims, (size_t)x->ndims * sizeof r->dims[0]);
    } else if (x->type == HVD_REQ_ALLGATHER || x->type == HVD_REQ_ALLTOALL) {
        r->ndims = 2;
        r->dims[0] = 1;
        r->dims[1] = (int64_t)x->count;
    } else if (x->type != HVD_REQ_JOIN) {
        r->ndims = 1;
        r->dims[0] = (int64_t)x->count;
    }
}

/* A point-to-point name is used once (its sequence number is in it), and the cache's bits
 * are agreed by every rank while only two take part in one: never cached. */
static int cacheable(int type) {
    return type != HVD_REQ_JOIN && type != HVD_REQ_BARRIER && type != HVD_REQ_P2P;
}

/* Classify a named operation against the cache into the hits, uncached or invalid list. */
static hvd_status_t classify(hvd_engine_t *e, hvd_entry_t *x, int64_t since) {
    /* A process set's names go through the coordinator every time: the cache's bits are
     * agreed by every rank of the job, and the others never set a set's bits. */
    if (!e->cache || !cacheable(x->type) || x->pset)
        return pend_add(&e->uncached, x, 0, since);
    hvd_request_t r;
    entry_request(x, e->ctx->global.rank, &r);
    uint32_t bit = 0;
    switch (hvd__cache_lookup(e->cache, &r, &bit)) {
    case HVD_CACHE_HIT:
        return pend_add(&e->hits, x, bit, since);
    case HVD_CACHE_INVALID:
        return pend_add(&e->invalid, x, bit, since);
    default:
        return pend_add(&e->uncached, x, 0, since);
    }
}

/* Take what was enqueued since the last cycle. */
static hvd_status_t intake(hvd_engine_t *e, int64_t now) {
    hvd_entry_t *batch[256];
    size_t n;
    while (hvd__tq_has_new(e->tq) && (n = hvd__tq_take(e->tq, batch, 256)) > 0) {
        for (size_t i = 0; i < n; i++) {
            hvd_entry_t *x = batch[i];
            if (x->type == HVD_REQ_JOIN) {
                e->join_entry = x;
                e->joined = 1;
                e->join_unsent = 1;
                continue;
            }
            hvd_status_t st = classify(e, x, now);
            if (st != HVD_OK)
                return st;
        }
    }
    /* A hit waiting longer than the stall warning is turned into a request the coordinator
     * sees, so the stall inspector can name the ranks that never submitted it; one with a
     * key or a deadline sooner (KEYED_HIT_GRACE_MS), so that the coordinator compares keys
     * and keeps the deadline; one with a user's name after NAMED_HIT_GRACE_MS, so that the
     * coordinator sees a rival under that name. (Every rank's hit on that bit then goes to full
     * negotiation in the same cycle: a late rank costs one uncached negotiation, not a wait.) */
    if (e->hits.n) {
        for (size_t i = 0; i < e->hits.n;) {
            hvd_pend_t *h = &e->hits.v[i];
            int64_t grace = e->stall_warn_ms;
            if ((h->e->key || h->e->timeout_ms) && (grace <= 0 || grace > KEYED_HIT_GRACE_MS))
                grace = KEYED_HIT_GRACE_MS;
            else if ((grace <= 0 || grace > NAMED_HIT_GRACE_MS) &&
                     now - h->since_ms >= NAMED_HIT_GRACE_MS && hvd__coord_user_name(h->e->name))
                grace = NAMED_HIT_GRACE_MS;
            if (grace <= 0 || now - h->since_ms < grace) {
                i++;
                continue;
            }
            hvd_status_t st = pend_add(&e->invalid, h->e, h->bit, h->since_ms);
            if (st != HVD_OK)
                return st;
            e->hits.v[i] = e->hits.v[--e->hits.n];
        }
    }
    return HVD_OK;
}

static void set_bit(uint8_t *words, uint32_t bit) {
    words[bit / 8] |= (uint8_t)(1u << (bit % 8));
}

static int get_bit(const uint8_t *words, uint32_t bit) {
    return (words[bit / 8] >> (bit % 8)) & 1;
}

/* The first set bit at or after bit `from` of nwords words, or UINT32_MAX. A word at a time
 * (a full cache is 1024 bits, most of them clear in any one cycle, and a bit-by-bit walk
 * cost microseconds per cycle): bit b is byte b/8, bit b%8, so word w read as a
 * little-endian u64 holds bits 64w..64w+63 in order. */
static uint32_t next_bit(const uint8_t *words, uint32_t nwords, uint32_t from) {
    for (uint32_t w = from / 64; w < nwords; w++) {
        uint64_t word = 0;
        for (int i = 7; i >= 0; i--) /* (a plain load where the machine is little-endian) */
            word = word << 8 | words[(size_t)w * 8 + (size_t)i];
        if (w == from / 64)
            word &= ~UINT64_C(0) << (from % 64);
        if (word)
            return w * 64 + (uint32_t)__builtin_ctzll(word);
    }
    return UINT32_MAX;
}

/* dst &= src (or, with or_them, dst |= src), n bytes (a multiple of 8), a word at a time;
 * src may be unaligned: it points into a message. */
static void combine_words(uint8_t *dst, const uint8_t *src, size_t n, int or_them) {
    for (size_t i = 0; i < n; i += 8) {
        uint64_t a, b;
        memcpy(&a, dst + i, 8);
        memcpy(&b, src + i, 8);
        a = or_them ? a | b : a & b;
        memcpy(dst + i, &a, 8);
    }
}

/* Encode this rank's cycle message into e->msg. Word areas in e->words: [0] hits,
 * [1] invalid, [2] AND of every rank's hits, [3] OR of every rank's invalid bits (the
 * bit-vectors are little-endian u64 words, i.e. bit b is byte b/8, bit b%8). */
static hvd_status_t build_message(hvd_engine_t *e, hvd_posted_t *p, uint32_t nwords,
                                  size_t *len_p) {
    size_t wbytes = (size_t)nwords * 8;
    hvd_status_t st = hvd__engine_reserve(&e->words, &e->words_cap, 4 * wbytes + 1);
    if (st != HVD_OK)
        return st;
    memset(e->words, 0, 4 * wbytes);
    uint8_t *hits = e->words, *inv = e->words + wbytes;
    for (size_t i = 0; i < e->hits.n; i++)
        set_bit(hits, e->hits.v[i].bit);
    if (e->joined) {
        /* A joined rank takes part in every cached allreduce, with zeros. */
        for (uint32_t b = 0; b < nwords * 64; b++) {
            const hvd_request_t *r = hvd__cache_get(e->cache, b);
            if (r && r->type == HVD_REQ_ALLREDUCE)
                set_bit(hits, b);
        }
    }
    for (size_t i = 0; i < e->invalid.n; i++)
        set_bit(inv, e->invalid.v[i].bit);
    hvd_cycle_msg_t m = {.nwords = nwords, .hits = hits, .invalid = e->invalid.n ? inv : NULL};
    /* (rank 0: a deadline that passed is answered in a negotiation round) */
    if (e->uncached.n || e->join_unsent ||
        (e->coord && hvd__coord_due(e->coord, hvd__engine_now_ms())))
        m.flags |= HVD_CYC_UNCACHED;
    if (e->ctx->global.ordered)
        m.flags |= HVD_CYC_ORDERED;
    if (e->shutdown_requested) {
        m.flags |= HVD_CYC_SHUTDOWN | (e->exiting ? HVD_CYC_EXITING : 0);
        m.reason = e->exiting ? "exited without calling hvd_shutdown" : "hvd_shutdown was called";
        m.reason_len = (uint16_t)strlen(m.reason);
    }
    if (e->tune_pending) {
        const hvd_tune_params_t *t = hvd__tune_params(e->tune);
        m.flags |= HVD_CYC_TUNE;
        m.tune_fusion = t->fusion_threshold;
        m.tune_cycle_us = (uint32_t)(t->cycle_time_ms * 1000);
        m.tune_knobs = (t->cache_enabled ? HVD_TUNE_KNOB_CACHE : 0u) |
                       (t->hierarchical_allreduce ? HVD_TUNE_KNOB_HIER_ALLREDUCE : 0u) |
                       (t->hierarchical_allgather ? HVD_TUNE_KNOB_HIER_ALLGATHER : 0u);
    }
    if (e->nstack_ranks) { /* (sent once: a later warning asks again) */
        m.ext |= HVD_CYC_EXT_STACKS;
        m.nstacks = e->nstack_ranks;
        m.stacks = e->stack_ranks;
        e->nstack_ranks = 0;
    }
    if (p) {
        m.flags |= HVD_CYC_BLOCKING | (p->payload_path ? HVD_CYC_PAYLOAD : 0);
        m.comm = (uint8_t)p->op.comm;
        m.sig = p->sig;
        m.payload = p->payload;
        m.payload_len = (uint32_t)p->payload_len;
    }
    size_t len = hvd__cycle_size(&m);
    st = hvd__engine_reserve(&e->msg, &e->msg_cap, len);
    if (st != HVD_OK)
        return st;
    hvd__cycle_encode(&m, e->msg);
    *len_p = len;
    return HVD_OK;
}

static const char *host_of(hvd_engine_t *e, int rank) {
    return e->ctx->hosts && e->ctx->hosts[rank] ? e->ctx->hosts[rank] : "?";
}

/* Erase, on every rank alike, the cache entries some rank found stale; move this rank's
 * operations whose entries are gone to the uncached list. */
static hvd_status_t erase_invalid(hvd_engine_t *e, uint32_t nwords, const uint8_t *stale) {
    for (uint32_t b = next_bit(stale, nwords, 0); b != UINT32_MAX;
         b = next_bit(stale, nwords, b + 1))
        hvd__cache_erase(e->cache, b);
    hvd_pend_list_t *lists[2] = {&e->hits, &e->invalid};
    for (int k = 0; k < 2; k++) {
        hvd_pend_list_t *l = lists[k];
        for (size_t i = 0; i < l->n;) {
            if (k == 1 || get_bit(stale, l->v[i].bit)) {
                hvd_status_t st = pend_add(&e->uncached, l->v[i].e, 0, l->v[i].since_ms);
                if (st != HVD_OK)
                    return st;
                l->v[i] = l->v[--l->n];
            } else {
                i++;
            }
        }
    }
    return HVD_OK;
}

/* After cache insertions (which may evict), re-check every waiting hit: its bit may now
 * name another tensor. */
static hvd_status_t recheck_hits(hvd_engine_t *e) {
    for (size_t i = 0; i < e->hits.n;) {
        hvd_request_t r;
        entry_request(e->hits.v[i].e, e->ctx->global.rank, &r);
        uint32_t bit;
        if (hvd__cache_lookup(e->cache, &r, &bit) == HVD_CACHE_HIT) {
            e->hits.v[i++].bit = bit;
            continue;
        }
        hvd_status_t st = pend_add(&e->uncached, e->hits.v[i].e, 0, e->hits.v[i].since_ms);
        if (st != HVD_OK)
            return st;
        e->hits.v[i] = e->hits.v[--e->hits.n];
    }
    return HVD_OK;
}

/* A one-tensor response reproducing the cached request r. An allgather is cached only when
 * every rank gave the same first dimension (cache_fresh), so that is every rank's size. */
static hvd_status_t response_of(const hvd_request_t *r, int p, hvd_response_t *out) {
    memset(out, 0, sizeof *out);
    out->type = r->type;
    out->dtype = r->dtype;
    out->op = r->op;
    out->prescale = r->prescale;
    out->postscale = r->postscale;
    out->last_joined_rank = -1;
    int gather = r->type == HVD_REQ_ALLGATHER;
    out->names = malloc(sizeof *out->names);
    out->sizes = malloc((gather ? (size_t)p : 1) * sizeof *out->sizes);
    out->error = strdup("");
    if (out->names)
        out->names[0] = strdup(r->name);
    if (!out->names || !out->sizes || !out->error || !out->names[0])
        return hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory in the engine");
    out->nnames = 1;
    if (gather) {
        for (int m = 0; m < p; m++)
            out->sizes[m] = r->ndims ? r->dims[0] : 0;
        out->nsizes = (uint32_t)p;
        return HVD_OK;
    }
    int64_t n = 1;
    for (int d = 0; d < r->ndims; d++)
        n *= r->dims[d];
    out->sizes[0] = n;
    out->nsizes = 1;
    return HVD_OK;
}

static hvd_status_t list_append(hvd_response_list_t *l, hvd_response_t **item_p) {
    hvd_response_t *items = realloc(l->items, (l->count + 1) * sizeof *items);
    if (!items)
        return hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory in the engine");
    l->items = items;
    *item_p = &l->items[l->count++];
    memset(*item_p, 0, sizeof **item_p);
    return HVD_OK;
}

/* ---- rank 0's timeline of negotiations: one NEGOTIATE_<TYPE> span per name, from the
 * first rank that asks (through the cache or the coordinator) until it is agreed, with a
 * mark per rank as it becomes ready. Tracked by name, so a name whose cache entry is evicted
 * or erased while it waits keeps its one open span. ---- */

void hvd__engine_tl_reset(hvd_engine_t *e) {
    for (size_t i = 0; i < e->tl_nopen; i++) {
        free(e->tl_open[i].name);
        free(e->tl_open[i].marked);
    }
    e->tl_nopen = 0;
}

static hvd_tl_open_t *tl_find(hvd_engine_t *e, const char *name) {
    for (size_t i = 0; i < e->tl_nopen; i++)
        if (strcmp(e->tl_open[i].name, name) == 0)
            return &e->tl_open[i];
    return NULL;
}

/* Rank `rank` is ready for name (of request type `type`): open the span if needed, mark. */
static void tl_ready(hvd_engine_t *e, const char *name, int type, int rank) {
    hvd_tl_open_t *o = tl_find(e, name);
    if (!o) {
        if (e->tl_nopen == e->tl_open_cap) {
            size_t cap = e->tl_open_cap ? 2 * e->tl_open_cap : 64;
            hvd_tl_open_t *v = realloc(e->tl_open, cap * sizeof *v);
            if (!v)
                return; /* the timeline is best effort */
            e->tl_open = v;
            e->tl_open_cap = cap;
        }
        o = &e->tl_open[e->tl_nopen];
        o->name = strdup(name);
        o->marked = calloc((size_t)e->ctx->global.size, 1);
        if (!o->name || !o->marked) {
            free(o->name);
            free(o->marked);
            return;
        }
        e->tl_nopen++;
        char act[48];
        snprintf(act, sizeof act, "NEGOTIATE_%s", hvd__neg_type_name(type));
        hvd__timeline_begin(e->tl, name, act);
    }
    if (!o->marked[rank]) {
        o->marked[rank] = 1;
        hvd__timeline_rank_ready(e->tl, name, rank);
    }
}

/* name was agreed (or failed): close its span. */
static void tl_agreed(hvd_engine_t *e, const char *name) {
    hvd_tl_open_t *o = tl_find(e, name);
    if (!o)
        return;
    hvd__timeline_end(e->tl, name, NULL);
    free(o->name);
    free(o->marked);
    *o = e->tl_open[--e->tl_nopen];
}

/* Rank 0, straggler report: each rank whose cycle message holds a cached name's bit has
 * arrived at that name (the first such cycle counts). Set bits only: a cycle's cost grows
 * with the names pending, not with the cache. */
static void straggler_hits(hvd_engine_t *e, uint32_t nwords) {
    if (!e->strag || !e->cache)
        return;
    uint32_t nbits = hvd__cache_nbits(e->cache);
    int64_t now_us = hvd__clock_now_us();
    for (int k = 0; k < e->ctx->global.size; k++) {
        const uint8_t *hits = e->msgs[k].hits;
        for (uint32_t b = next_bit(hits, nwords, 0); b < nbits; b = next_bit(hits, nwords, b + 1)) {
            const hvd_request_t *r = hvd__cache_get(e->cache, b);
            if (r)
                hvd__straggler_arrive(e->strag, r->name, k, now_us);
        }
    }
}

/* Rank 0, straggler report: the names agreed this cycle count in its window; a window that
 * closes is logged, and marked in the timeline. */
static void straggler_agreed(hvd_engine_t *e, const hvd_response_list_t *resp) {
    if (!e->strag)
        return;
    char msg[2048];
    for (uint32_t k = 0; k < resp->count; k++) {
        const hvd_response_t *r = &resp->items[k];
        for (uint32_t i = 0; i < r->nnames; i++) {
            if (r->type == HVD_RESP_ERROR) { /* (or it would stay pending for good) */
                hvd__straggler_forget(e->strag, r->names[i]);
                continue;
            }
            if (!hvd__straggler_done(e->strag, r->names[i], msg, sizeof msg))
                continue;
            HVD_LOG_W("%s", msg);
            if (e->tl)
                hvd__timeline_instant(e->tl, msg);
        }
    }
}

static void timeline_hits(hvd_engine_t *e, uint32_t nwords, const uint8_t *common) {
    if (!e->tl || !e->cache)
        return;
    int p = e->ctx->global.size;
    for (uint32_t b = 0; b < nwords * 64; b++) {
        const hvd_request_t *r = hvd__cache_get(e->cache, b);
        if (!r)
            continue;
        for (int k = 0; k < p; k++)
            if (get_bit(e->msgs[k].hits, b))
                tl_ready(e, r->name, r->type, k);
        if (get_bit(common, b))
            tl_agreed(e, r->name);
    }
}

/* The slow path: every rank sends its uncached requests to rank 0, which records them,
 * takes what is ready everywhere and broadcasts that. Appends the new responses to out. */
static hvd_status_t negotiate(hvd_engine_t *e, hvd_response_list_t *out, int64_t now) {
    hvd_group_t *g = &e->ctx->global;
    int me = g->rank, p = g->size;
    size_t n = e->uncached.n + (e->join_unsent ? 1 : 0);
    hvd_request_list_t mine = {.count = (uint32_t)n};
    mine.items = calloc(n ? n : 1, sizeof *mine.items);
    if (!mine.items)
        return hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory in the engine");
    for (size_t i = 0; i < e->uncached.n; i++)
        entry_request(e->uncached.v[i].e, me, &mine.items[i]);
    if (e->join_unsent) {
        hvd_request_t *j = &mine.items[n - 1];
        j->rank = me;
        j->type = HVD_REQ_JOIN;
        j->name = "join.noname";
    }
    uint8_t *buf = NULL;
    size_t len = 0;
    hvd_status_t st = hvd__neg_requests_encode(&mine, &buf, &len);
    free(mine.items);
    if (st != HVD_OK)
        return st;
    uint8_t **bufs = NULL;
    size_t *lens = NULL;
    if (me == 0) {
        bufs = calloc((size_t)p, sizeof *bufs);
        lens = calloc((size_t)p, sizeof *lens);
        if (!bufs || !lens) {
            free(bufs);
            free(lens);
            free(buf);
            return hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory in the engine");
        }
    }
    st = hvd__control_gather(g, 0, buf, len, REQUESTS_MAX, bufs, lens, "negotiation (requests)");
    free(buf);
    buf = NULL;
    hvd_response_list_t fresh = {0};
    if (st == HVD_OK && me == 0) {
        hvd__coord_set_now(e->coord, now ? now : hvd__engine_now_ms());
        int64_t arrived_us = e->strag ? hvd__clock_now_us() : 0;
        for (int r = 0; r < p && st == HVD_OK; r++) {
            hvd_request_list_t l;
            st = hvd__neg_requests_decode(bufs[r], lens[r], &l);
            if (st != HVD_OK) {
                st = hvd__error_wrap(st, "requests of rank %d (%s)", r, host_of(e, r));
                break;
            }
            for (uint32_t i = 0; i < l.count && st == HVD_OK; i++) {
                hvd_request_t *q = &l.items[i];
                q->rank = r; /* a rank speaks for itself only */
                st = hvd__coord_add(e->coord, q);
                if (st != HVD_OK || q->type == HVD_REQ_JOIN)
                    continue;
                if (e->stall && q->type == HVD_REQ_P2P) {
                    int pair[2] = {r, q->root}; /* it waits for its partner alone */
                    hvd__stall_ready_among(e->stall, q->name, pair, 2, r, now);
                } else if (e->stall) {
                    hvd__stall_ready(e->stall, q->name, q->pset, r, now);
                    if (q->key && *q->key)
                        hvd__stall_key(e->stall, q->name, q->key);
                }
                if (e->tl)
                    tl_ready(e, q->name, q->type, r);
                if (e->strag)
                    hvd__straggler_arrive(e->strag, q->name, r, arrived_us);
            }
            hvd__neg_requests_fini(&l);
        }
        if (st == HVD_OK)
            st = hvd__coord_take_ready(e->coord, &fresh);
        for (uint32_t i = 0; st == HVD_OK && i < fresh.count; i++) {
            for (uint32_t k = 0; k < fresh.items[i].nnames; k++) {
                if (e->stall)
                    hvd__stall_done(e->stall, fresh.items[i].names[k]);
                if (e->tl)
                    tl_agreed(e, fresh.items[i].names[k]);
            }
        }
        if (st == HVD_OK)
            st = hvd__neg_responses_encode(&fresh, &buf, &len);
    }
    if (bufs)
        for (int r = 0; r < p; r++)
            free(bufs[r]);
    free(bufs);
    free(lens);
    if (st != HVD_OK) {
        /* Rank 0 cannot answer: the others wait in the broadcast until it fails the job. */
        hvd__neg_responses_fini(&fresh);
        return st;
    }
    st = hvd__control_bcast(g, 0, &buf, &len, RESPONSES_MAX, "negotiation (responses)");
    if (st == HVD_OK && me != 0)
        st = hvd__neg_responses_decode(buf, len, &fresh);
    free(buf);
    if (st != HVD_OK) {
        hvd__neg_responses_fini(&fresh);
        return st;
    }
    e->uncached.n = 0;
    e->join_unsent = 0;
    for (uint32_t i = 0; i < fresh.count && st == HVD_OK; i++) {
        hvd_response_t *item;
        st = list_append(out, &item);
        if (st == HVD_OK) {
            *item = fresh.items[i];
            memset(&fresh.items[i], 0, sizeof fresh.items[i]);
        }
    }
    hvd__neg_responses_fini(&fresh);
    return st;
}

static int same_sizes(const hvd_response_t *r) {
    for (uint32_t i = 1; i < r->nsizes; i++)
        if (r->sizes[i] != r->sizes[0])
            return 0;
    return 1;
}

/* Horovod names an unnamed operation "<kind>.noname.<n>", n counting up (the Python layer
 * does the same, per process set): such a name never comes back, so a cache entry for it
 * would only push out entries that do, one eviction (and a warning) per call. The rule is
 * the name's, so every rank decides alike. */
static int one_time_name(const char *name) {
    return strstr(name, ".noname.") != NULL;
}

/* Cache the new responses' requests (every rank alike, in order) before they run: their
 * entries may be released as soon as they complete. */
static hvd_status_t cache_fresh(hvd_engine_t *e, const hvd_response_list_t *l, uint32_t from) {
    if (!e->cache)
        return HVD_OK;
    int puts = 0;
    for (uint32_t i = from; i < l->count; i++) {
        const hvd_response_t *r = &l->items[i];
        if (r->type == HVD_RESP_ERROR || !cacheable(r->type) || r->nnames != 1)
            continue;
        if (r->type == HVD_REQ_ALLGATHER && !same_sizes(r))
            continue; /* the cache reproduces one first dimension for every rank */
        if (r->pset)
            continue; /* see classify */
        if (one_time_name(r->names[0]))
            continue;
        hvd_request_t q;
        hvd_entry_t *x = hvd__tq_find(e->tq, r->names[0]);
        if (x && x->taken && x->type == r->type) {
            entry_request(x, -1, &q);
        } else if (r->type == HVD_REQ_ALLREDUCE && r->nsizes == 1) {
            /* a joined rank has no entry; an allreduce's response says it all */
            memset(&q, 0, sizeof q);
            q.type = r->type;
            q.dtype = r->dtype;
            q.op = r->op;
            q.prescale = r->prescale;
            q.postscale = r->postscale;
            q.ndims = 1;
            q.dims[0] = r->sizes[0];
            q.name = r->names[0];
        } else {
            continue; /* cannot happen: the coordinator errors such a response */
        }
        int evicted = 0;
        hvd_status_t st = hvd__cache_put(e->cache, &q, NULL, &evicted);
        if (st != HVD_OK)
            return st;
        if (evicted) {
            static int warned;
            if (!warned++)
                HVD_LOG_W("A response has been evicted from cache which may indicate reduced "
                          "performance. Better performance may be obtained by disabling caching "
                          "(HOROVOD_CACHE_CAPACITY=0) or increasing the cache capacity "
                          "(HOROVOD_CACHE_CAPACITY>%u).",
                          hvd__cache_capacity(e->cache));
        }
        puts = 1;
    }
    return puts ? recheck_hits(e) : HVD_OK;
}

/* The posted blocking call's readiness: 1 when every member of its group posted the same
 * call number on the same communicator; *inline_p when, moreover, every signature is the
 * same and marked for the payload path. *missing gets the members that have not. */
static int blocking_ready(hvd_engine_t *e, hvd_posted_t *p, int *inline_p, int *agreed_p,
                          char *missing, size_t missing_size) {
    hvd_group_t *g = p->g;
    int ready = 1, same = 1, agreed = 1;
    size_t n = 0;
    missing[0] = '\0';
    for (int m = 0; m < g->size; m++) {
        int r = g->members[m];
        const hvd_cycle_msg_t *x = &e->msgs[r];
        if (!(x->flags & HVD_CYC_BLOCKING) || x->comm != p->op.comm || x->sig.seq != p->sig.seq) {
            ready = 0;
            char call[200] = "no blocking call";
            if (x->flags & HVD_CYC_BLOCKING) {
                static const char *comms[] = {"global", "local", "cross"};
                char d[160];
                hvd__sig_describe(&x->sig, d, sizeof d);
                snprintf(call, sizeof call, "%s on the %s communicator", d,
                         x->comm < 3 ? comms[x->comm] : "?");
            }
            if (n < missing_size)
                n += (size_t)snprintf(missing + n, missing_size - n, "%srank %d (%s: %s)",
                                      n ? ", " : "", r, host_of(e, r), call);
            continue;
        }
        if (!hvd__sig_equal(&x->sig, &p->sig))
            agreed = 0;
        if (!(x->flags & HVD_CYC_PAYLOAD))
            same = 0;
    }
    *agreed_p = ready && agreed && !(p->sig.flags & HVD_SIG_INVALID);
    *inline_p = *agreed_p && same && p->payload_path;
    return ready;
}

static hvd_status_t decode_all(hvd_engine_t *e, uint32_t nwords, size_t max_payload) {
    hvd_group_t *g = &e->ctx->global;
    for (int r = 0; r < g->size; r++) {
        hvd_status_t st =
            hvd__cycle_decode(e->blocks[r], e->block_lens[r], nwords, max_payload, r, &e->msgs[r]);
        if (st != HVD_OK)
            return st;
        if (e->msgs[r].nwords != nwords)
            return hvd__error_set(HVD_ERR_PROTOCOL,
                                  "rank %d (%s) has %u cache words where rank %d has %u: the "
                                  "response caches are out of step",
                                  r, host_of(e, r), e->msgs[r].nwords, g->rank, nwords);
        /* (the two ways of summing would wait on each other's messages until the timeout) */
        int theirs = (e->msgs[r].flags & HVD_CYC_ORDERED) != 0;
        if (theirs != g->ordered)
            return hvd__error_set(HVD_ERR_MISMATCH,
                                  "rank %d (%s) runs with HVD_REPRODUCIBLE=%d but rank %d with "
                                  "%d: every rank must set the same value (mpirun forwards it "
                                  "to other hosts only with -x HVD_REPRODUCIBLE)",
                                  r, host_of(e, r), theirs, g->rank, g->ordered);
    }
    return HVD_OK;
}

/* Whether this rank's message (mine, len bytes) is plain: a blocking call on its payload and
 * nothing else (no hit, no request, no shutdown), so that everything before the payload
 * describes that call alone. Decided from the message only, as every rank decides on the
 * same messages. */
static int plain(const hvd_posted_t *p, const uint8_t *mine, size_t len) {
    if (!p || (mine[3] & ~HVD_CYC_ORDERED) != (HVD_CYC_BLOCKING | HVD_CYC_PAYLOAD) || mine[5])
        return 0; /* (ext sections follow the payload) */
    for (size_t b = HVD_CYC_HEADER_LEN; b < len - p->payload_len; b++)
        if (mine[b])
            return 0; /* a hit */
    return 1;
}

/* Whether every rank's message is this rank's plain one byte for byte but for the payload:
 * then every rank posted the very same call on its payload and has nothing else for this
 * cycle, whose whole outcome is that call. Its payloads are set up in e->msgs as decoding
 * would (the rest of each message equals this rank's own, valid one). */
static int uniform_blocking(hvd_engine_t *e, const hvd_posted_t *p, const uint8_t *mine,
                            size_t len) {
    if (!plain(p, mine, len))
        return 0;
    int n = e->ctx->global.size;
    size_t prefix = len - p->payload_len;
    for (int r = 0; r < n; r++) {
        if (e->block_lens[r] != len || memcmp(e->blocks[r], mine, prefix) != 0)
            return 0;
    }
    for (int r = 0; r < n; r++) {
        hvd_cycle_msg_t *m = &e->msgs[r];
        m->flags = mine[3];
        m->payload = e->blocks[r] + prefix;
        m->payload_len = (uint32_t)p->payload_len;
    }
    return 1;
}

/* The stall report's view of a missing rank: what the coordinator knows it does, and what
 * its latest cycle message says it waits in that never reaches the coordinator: a blocking
 * call, or operations in the response cache (its hits). */
void hvd__engine_describe_rank(void *engine, int rank, int64_t now_ms, char *buf, size_t n) {
    hvd_engine_t *e = engine;
    char also[700] = "";
    size_t k = 0;
    const hvd_cycle_msg_t *m = e->msgs ? &e->msgs[rank] : NULL;
    if (m && (m->flags & HVD_CYC_BLOCKING)) {
        char d[160];
        hvd__sig_describe(&m->sig, d, sizeof d);
        hvd__appendf(also, sizeof also, &k, "the blocking call %s", d);
    }
    uint32_t nbits = e->cache ? hvd__cache_nbits(e->cache) : 0;
    int listed = 0;
    for (uint32_t b = m && m->hits ? next_bit(m->hits, m->nwords, 0) : UINT32_MAX; b < nbits;
         b = next_bit(m->hits, m->nwords, b + 1)) {
        const hvd_request_t *r = hvd__cache_get(e->cache, b);
        if (!r)
            continue;
        if (listed++ == 3) {
            hvd__appendf(also, sizeof also, &k, " and more");
            break;
        }
        hvd__appendf(also, sizeof also, &k, "%s%s '%s' (cached)", k ? ", " : "",
                     hvd__neg_type_name(r->type), r->name);
    }
    hvd__coord_describe_rank(e->coord, rank, now_ms, also[0] ? also : NULL, buf, n);
}

/* HVD_STALL_STACKS, rank 0: the ranks the stall warning named are asked for their stacks in
 * the next cycle message. */
static void ask_for_stacks(hvd_engine_t *e) {
    int ranks[HVD_CYC_STACKS_MAX];
    int n = hvd__stall_missing(e->stall, ranks, HVD_CYC_STACKS_MAX);
    for (int i = 0; i < n; i++)
        hvd__le32_put(e->stack_ranks + 4 * i, (uint32_t)ranks[i]);
    e->nstack_ranks = (uint16_t)n;
}

/* Every rank: rank 0's message may ask this rank for its stacks (ask_for_stacks). */
static void stacks_asked(hvd_engine_t *e) {
    const hvd_cycle_msg_t *m0 = &e->msgs[0];
    if (!(m0->ext & HVD_CYC_EXT_STACKS))
        return;
    for (uint16_t i = 0; i < m0->nstacks; i++) {
        if (hvd__cycle_stack_rank(m0, i) == e->ctx->global.rank) {
            if (!hvd__stack_dump_request())
                HVD_LOG_W("rank %d: the stall warning asked for this rank's stacks "
                          "(HVD_STALL_STACKS=1), but nothing handles SIGUSR2 here: a Python "
                          "program's horovod init registers faulthandler for it",
                          e->ctx->global.rank);
            return;
        }
    }
}

/* What follows the execution of every cycle: the background thread's interval, rank 0's
 * stall inspector. */
static hvd_status_t cycle_end(hvd_engine_t *e, int64_t now) {
    if (e->in_background)
        hvd__engine_note_idle(e, hvd__tq_in_flight(e->tq) == 0 && !e->joined);

    if (e->stall && !hvd__stall_idle(e->stall)) {
        if (!now) /* (an express cycle reads no clock of its own) */
            now = hvd__engine_now_ms();
        char msg[8192];
        int shut = 0;
        if (hvd__stall_check(e->stall, now, msg, sizeof msg, &shut)) {
            if (shut) /* logged once, by hvd__engine_cycle */
                return hvd__error_set(HVD_ERR_TIMEOUT, "%s", msg);
            HVD_LOG_W("%s", msg);
            if (e->ctx->params.stall_stacks)
                ask_for_stacks(e);
        }
    }
    return HVD_OK;
}

/* Bound on every rank's message (the same on every rank). */
static size_t message_max(uint32_t nwords, size_t pmax) {
    return HVD_CYC_HEADER_LEN + (size_t)nwords * 16 + pmax + HVD_CYC_REASON_MAX + HVD_CYC_TUNE_LEN +
           2 + 4 * HVD_CYC_STACKS_MAX;
}

/* Autotune at the end of an ordinary cycle: every rank applies the configuration rank 0's
 * message announced (all at the same cycle, so fusion plans never differ between ranks);
 * rank 0 counts what the cycle allreduced and reports a step to its parameter manager each
 * time the first allreduce it saw comes round again. */
/* Turn the response cache on or off, on every rank at the same cycle (tune). Off: every
 * operation waiting on a cache bit goes back to full negotiation, and the cache is gone, on
 * every rank alike. On: an empty cache of the job's capacity, filled again as operations are
 * negotiated. */
static hvd_status_t set_cache(hvd_engine_t *e, int on) {
    if (on && !e->cache)
        return hvd__cache_create((uint32_t)e->ctx->params.cache_capacity, &e->cache);
    if (on || !e->cache)
        return HVD_OK;
    hvd_pend_list_t *lists[2] = {&e->hits, &e->invalid};
    for (int k = 0; k < 2; k++) {
        for (size_t i = 0; i < lists[k]->n; i++) {
            hvd_status_t st = pend_add(&e->uncached, lists[k]->v[i].e, 0, lists[k]->v[i].since_ms);
            if (st != HVD_OK)
                return st;
        }
        lists[k]->n = 0;
    }
    hvd__cache_destroy(e->cache);
    e->cache = NULL;
    return HVD_OK;
}

static hvd_status_t tune(hvd_engine_t *e, const hvd_response_list_t *resp) {
    const hvd_cycle_msg_t *m0 = &e->msgs[0];
    if (m0->flags & HVD_CYC_TUNE) {
        hvd_status_t st = set_cache(e, (m0->tune_knobs & HVD_TUNE_KNOB_CACHE) != 0);
        if (st != HVD_OK)
            return st;
        e->fusion_threshold = (size_t)m0->tune_fusion;
        e->cycle_us = m0->tune_cycle_us ? (int64_t)m0->tune_cycle_us : 1;
        __atomic_store_n(&e->bg_interval_us, e->cycle_us, __ATOMIC_RELAXED);
        /* the collectives read these when they run: from the next one on, on every rank */
        hvd_group_t *g = &e->ctx->global;
        int har = (m0->tune_knobs & HVD_TUNE_KNOB_HIER_ALLREDUCE) != 0,
            hag = (m0->tune_knobs & HVD_TUNE_KNOB_HIER_ALLGATHER) != 0;
        if (g->hier_local)
            g->hier_min_bytes = har ? e->hier_ar_on_bytes : SIZE_MAX;
        if (g->hier_grid)
            g->hier_ag_min_bytes = hag ? e->hier_ag_on_bytes : SIZE_MAX;
        e->tune_pending = 0;
        HVD_LOG_I("autotune: fusion threshold %llu bytes, cycle time %.3f ms, response cache "
                  "%s, hierarchical allreduce %s, allgather %s from here on",
                  (unsigned long long)m0->tune_fusion, m0->tune_cycle_us / 1000.0,
                  e->cache ? "on" : "off",
                  g->hier_local && g->hier_min_bytes != SIZE_MAX ? "on" : "off",
                  g->hier_grid && g->hier_ag_min_bytes != SIZE_MAX ? "on" : "off");
    }
    if (!e->tune || hvd__tune_done(e->tune))
        return HVD_OK;
    for (uint32_t k = 0; k < resp->count; k++) {
        const hvd_response_t *r = &resp->items[k];
        if (r->type != HVD_REQ_ALLREDUCE && r->type != HVD_REQ_ADASUM)
            continue;
        size_t es = hvd__dtype_size((hvd_dtype_t)r->dtype);
        int step = 0;
        for (uint32_t i = 0; i < r->nnames; i++) {
            e->tune_bytes += (uint64_t)r->sizes[i < r->nsizes ? i : 0] * es;
            if (!e->tune_marker)
                e->tune_marker = strdup(r->names[i]);
            else if (!strcmp(e->tune_marker, r->names[i]))
                step = 1;
        }
        if (step) {
            if (hvd__tune_step(e->tune, e->tune_bytes, hvd__clock_now_us()))
                e->tune_pending = 1;
            e->tune_bytes = 0;
        }
    }
    return HVD_OK;
}

static hvd_status_t run_uniform(hvd_engine_t *e, hvd_posted_t *posted, int64_t now);
static hvd_status_t process(hvd_engine_t *e, hvd_posted_t *posted, uint32_t nwords, size_t pmax,
                            int64_t now, hvd_response_list_t *resp);

/* Every rank's cycle message arrived: note when the job first got that far (formed_ms). */
static void formed(hvd_engine_t *e) {
    if (!e->formed_ms)
        e->formed_ms = hvd__engine_now_ms();
}

static hvd_status_t run_cycle(hvd_engine_t *e, hvd_posted_t *posted, hvd_response_list_t *resp) {
    hvd_group_t *g = &e->ctx->global;
    int64_t now = hvd__engine_now_ms();
    if (e->tl && e->mark_cycles)
        hvd__timeline_instant(e->tl, "CYCLE_START");
    hvd_status_t st = intake(e, now);
    if (st != HVD_OK)
        return st;
    if (!posted) {
        pthread_mutex_lock(&e->state_lock);
        posted = e->posted;
        pthread_mutex_unlock(&e->state_lock);
    }

    uint32_t nbits = e->cache ? hvd__cache_nbits(e->cache) : 0, nwords = (nbits + 63) / 64;
    size_t len;
    st = build_message(e, posted, nwords, &len);
    if (st != HVD_OK)
        return st;
    size_t pmax = payload_max(e);
    st = hvd__group_allgather_var(g, e->msg, len, message_max(nwords, pmax), e->blocks,
                                  e->block_lens, "cycle");
    if (st != HVD_OK)
        return st;
    formed(e);
    if (uniform_blocking(e, posted, e->msg, len))
        return run_uniform(e, posted, now);
    return process(e, posted, nwords, pmax, now, resp);
}

/* A uniform cycle: the posted call, and nothing else. */
static hvd_status_t run_uniform(hvd_engine_t *e, hvd_posted_t *posted, int64_t now) {
    /* (the data moves at full speed, as in process) */
    if (e->ctx->tp && !e->resting)
        __atomic_store_n(&e->ctx->tp->quiet, 0, __ATOMIC_RELAXED);
    hvd_status_t st = hvd__engine_run_blocking(e, posted, 1);
    return st != HVD_OK ? st : cycle_end(e, now);
}

/* Everything an ordinary cycle does once every rank's message is in e->blocks. */
static hvd_status_t process(hvd_engine_t *e, hvd_posted_t *posted, uint32_t nwords, size_t pmax,
                            int64_t now, hvd_response_list_t *resp) {
    hvd_group_t *g = &e->ctx->global;
    int p = g->size;
    uint32_t nbits = e->cache ? hvd__cache_nbits(e->cache) : 0;
    if (posted && !posted->posted_ms)
        posted->posted_ms = now; /* an express call's first ordinary cycle */
    hvd_status_t st = decode_all(e, nwords, pmax);
    if (st != HVD_OK)
        return st;
    stacks_asked(e);

    /* Combine the bit-vectors: AND of hits, OR of invalid bits. */
    size_t wbytes = (size_t)nwords * 8;
    uint8_t *common = e->words + 2 * wbytes, *stale = e->words + 3 * wbytes;
    int any_uncached = 0, any_invalid = 0, shut_rank = -1;
    memset(common, 0xff, wbytes);
    memset(stale, 0, wbytes);
    for (int r = 0; r < p; r++) {
        const hvd_cycle_msg_t *m = &e->msgs[r];
        combine_words(common, m->hits, wbytes, 0);
        if (m->invalid)
            combine_words(stale, m->invalid, wbytes, 1);
        any_uncached |= (m->flags & HVD_CYC_UNCACHED) != 0;
        any_invalid |= m->invalid != NULL;
        if ((m->flags & HVD_CYC_SHUTDOWN) && (shut_rank < 0 || r == g->rank))
            shut_rank = r;
    }
    if (any_invalid)
        for (size_t b = 0; b < wbytes; b++)
            common[b] &= (uint8_t)~stale[b];
    if (e->tl)
        timeline_hits(e, nwords, common);
    straggler_hits(e, nwords);
    if (any_invalid) {
        st = erase_invalid(e, nwords, stale);
        if (st != HVD_OK)
            return st;
    }

    /* Responses: the common hits in bit order, then what the coordinator found ready. */
    for (uint32_t b = next_bit(common, nwords, 0); b < nbits; b = next_bit(common, nwords, b + 1)) {
        const hvd_request_t *r = hvd__cache_get(e->cache, b);
        if (!r)
            return hvd__error_set(HVD_ERR_PROTOCOL, "cache bit %u is set but empty", b);
        hvd_response_t *item;
        st = list_append(resp, &item);
        if (st == HVD_OK)
            st = response_of(r, e->ctx->global.size, item);
        if (st != HVD_OK)
            return st;
        hvd__cache_touch(e->cache, b);
        if (e->coord) /* (what the coordinator says a rank last finished) */
            hvd__coord_done_by_all(e->coord, r->name);
        for (size_t i = 0; i < e->hits.n; i++) {
            if (e->hits.v[i].bit == b) {
                e->hits.v[i] = e->hits.v[--e->hits.n];
                break;
            }
        }
    }
    uint32_t cached = resp->count;
    if (any_uncached) {
        st = negotiate(e, resp, now);
        if (st == HVD_OK)
            st = cache_fresh(e, resp, cached);
        if (st != HVD_OK)
            return st;
    }

    /* Execute: the blocking call first, then the responses, fused. Only the background
     * thread's wait for the cycle messages is quiet: data moves at full speed, whichever
     * thread moves it, unless that thread rests (hvd_wait_resting). */
    if (e->ctx->tp && !e->resting)
        __atomic_store_n(&e->ctx->tp->quiet, 0, __ATOMIC_RELAXED);
    if (posted) {
        char missing[1024];
        int inline_path, agreed;
        if (blocking_ready(e, posted, &inline_path, &agreed, missing, sizeof missing)) {
            posted->payload_path = inline_path;
            st = hvd__engine_run_blocking(e, posted, agreed);
            if (st != HVD_OK)
                return st;
        } else if (shut_rank < 0 && e->formed_ms &&
                   now - (posted->posted_ms > e->formed_ms ? posted->posted_ms : e->formed_ms) >
                       e->timeout_ms) {
            char call[160];
            hvd__sig_describe(&posted->sig, call, sizeof call);
            return hvd__error_set(HVD_ERR_TIMEOUT,
                                  "rank %d (%s) waited %lld s (HOROVOD_GLOO_TIMEOUT_SECONDS) for "
                                  "the %s communicator to call %s; still missing: %s",
                                  g->rank, host_of(e, g->rank),
                                  (long long)(now - posted->posted_ms) / 1000, posted->g->name,
                                  call, missing);
        }
    }
    if (resp->count) {
        st = hvd__fuse_responses(resp, e->fusion_threshold);
        if (st == HVD_OK)
            st = hvd__engine_execute(e, resp);
        if (st != HVD_OK)
            return st;
    }

    st = tune(e, resp);
    if (st != HVD_OK)
        return st;
    straggler_agreed(e, resp);
    st = cycle_end(e, now);
    if (st != HVD_OK)
        return st;
    if (shut_rank >= 0) {
        char msg[1024];
        /* a peer whose program ended without hvd_shutdown is lost to the job, not shut down */
        int exited = (e->msgs[shut_rank].flags & HVD_CYC_EXITING) != 0;
        hvd_status_t why = exited && shut_rank != g->rank ? HVD_ERR_PEER_LOST : HVD_ERR_SHUT_DOWN;
        /* this rank waits in an operation the other left before: most often uneven inputs */
        char waiting[200], where[240] = "", uneven[512] = ""; /* (cut: this is a message) */
        if (hvd__tq_in_flight_name(e->tq, waiting, sizeof waiting)) {
            snprintf(where, sizeof where, "'%s'%s", waiting,
                     hvd__tq_in_flight(e->tq) > 1 ? " and more" : "");
        } else if (posted) { /* a blocking call (the backend's small synchronous ones) */
            hvd__sig_describe(&posted->sig, waiting, sizeof waiting);
            snprintf(where, sizeof where, "the blocking call %s", waiting);
        }
        if (where[0])
            hvd__engine_uneven_hint(where, uneven, sizeof uneven);
        if (shut_rank == g->rank)
            snprintf(msg, sizeof msg, "%s on rank %d",
                     exited ? "the program exited without calling hvd_shutdown"
                            : "hvd_shutdown was called",
                     g->rank);
        else if (exited)
            snprintf(msg, sizeof msg,
                     "rank %d (%s) exited without calling hvd_shutdown (its program ended while "
                     "this rank still ran collectives)%s",
                     shut_rank, host_of(e, shut_rank), uneven);
        else
            snprintf(msg, sizeof msg,
                     "rank %d (%s) has shut down (it called hvd_shutdown), so no collective can "
                     "run any more%s; call hvd_shutdown here too",
                     shut_rank, host_of(e, shut_rank), uneven);
        if (shut_rank != g->rank && !where[0]) {
            /* this rank waits in nothing yet: the operation it asks for next is the one to
             * name (the same message with it, hvd__engine_dead_error_for) */
            pthread_mutex_lock(&e->state_lock);
            if (exited)
                snprintf(e->dead_uneven_head, sizeof e->dead_uneven_head,
                         "rank %d (%s) exited without calling hvd_shutdown (its program ended "
                         "while this rank still ran collectives)",
                         shut_rank, host_of(e, shut_rank));
            else
                snprintf(e->dead_uneven_head, sizeof e->dead_uneven_head,
                         "rank %d (%s) has shut down (it called hvd_shutdown), so no collective "
                         "can run any more",
                         shut_rank, host_of(e, shut_rank));
            snprintf(e->dead_uneven_tail, sizeof e->dead_uneven_tail, "%s",
                     exited ? "" : "; call hvd_shutdown here too");
            pthread_mutex_unlock(&e->state_lock);
        }
        hvd__engine_fail(e, why, msg, 0);
        return hvd__error_set(why, "%s", msg);
    }
    return HVD_OK;
}

/* The cycle of an express call p (engine.c), when this rank has nothing else for it (no named
 * operation new or pending, no join, no shutdown, no timeline) and the job's cycles go
 * through its one host arena: the message is written straight into this rank's box (or
 * slot) and the others' are read where they arrived. A uniform cycle runs p from there; any other
 * is kept and goes on as every cycle does. Else a whole cycle. */
static hvd_status_t run_express(hvd_engine_t *e, hvd_posted_t *p, hvd_response_list_t *resp) {
    hvd_group_t *g = &e->ctx->global;
    uint32_t nbits = e->cache ? hvd__cache_nbits(e->cache) : 0, nwords = (nbits + 63) / 64;
    size_t wbytes = (size_t)nwords * 8, len = HVD_CYC_HEADER_LEN + wbytes + p->payload_len,
           pmax = payload_max(e);
    uint8_t *box = NULL;
    if (p->payload_path && !e->tl && !e->tune_pending && !e->hits.n && !e->uncached.n &&
        !e->invalid.n && !e->joined && !e->join_unsent && !e->shutdown_requested &&
        !hvd__tq_has_new(e->tq))
        box = hvd__group_box(g, len, message_max(nwords, pmax));
    if (!box)
        return run_cycle(e, p, resp);
    hvd_cycle_msg_t m;
    memset(&m, 0, sizeof m);
    m.flags = HVD_CYC_BLOCKING | HVD_CYC_PAYLOAD | (g->ordered ? HVD_CYC_ORDERED : 0);
    m.comm = (uint8_t)p->op.comm;
    m.sig = p->sig;
    m.nwords = nwords;
    m.payload = p->payload;
    m.payload_len = (uint32_t)p->payload_len;
    /* no hits: zero words, as build_message writes them (and the areas process combines
     * the others' words in, should the cycle not be uniform) */
    hvd_status_t st = hvd__engine_reserve(&e->words, &e->words_cap, 4 * wbytes + 1);
    if (st != HVD_OK)
        return st;
    if (wbytes) {
        memset(e->words, 0, wbytes);
        m.hits = e->words;
    }
    hvd__cycle_encode(&m, box);
    st = hvd__group_box_exchange(g, len, message_max(nwords, pmax), e->blocks, e->block_lens,
                                 "cycle");
    if (st != HVD_OK)
        return st;
    formed(e);
    if (uniform_blocking(e, p, box, len))
        return run_uniform(e, p, 0);
    /* An ordinary cycle: its messages must outlive the steps it runs. */
    st = hvd__group_box_keep(g, e->blocks, e->block_lens);
    return st != HVD_OK ? st : process(e, p, nwords, pmax, hvd__engine_now_ms(), resp);
}

hvd_status_t hvd__engine_cycle(hvd_engine_t *e, hvd_posted_t *express) {
    hvd_response_list_t resp = {0};
    hvd_status_t st = express ? run_express(e, express, &resp) : run_cycle(e, NULL, &resp);
    hvd__neg_responses_fini(&resp);
    if (st != HVD_OK && st != HVD_ERR_SHUT_DOWN) {
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", hvd_last_error());
        /* In elastic mode a lost peer is an expected event the run wrapper recovers from
         * (Horovod issue #2652: not an error to alarm users with). */
        if (e->ctx->elastic && (st == HVD_ERR_PEER_LOST || st == HVD_ERR_TIMEOUT))
            HVD_LOG_W("%s", msg);
        else
            HVD_LOG_E("%s", msg);
        hvd__engine_fail(e, st, msg, 1);
    }
    return st;
}
