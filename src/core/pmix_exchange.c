/* The check-in exchange over PMIx (pmix_exchange.h). libpmix.so.2 is opened with dlopen and its few
 * entry points looked up by name; it is never closed, since its threads and handlers outlive
 * PMIx_Finalize. Without HVD_HAVE_PMIX only a stub is built, which names the missing package. */
#include "core/pmix_exchange.h"

#include "common/error.h"

#include <stdlib.h>
#include <string.h>

#ifdef HVD_HAVE_PMIX
#include <dlfcn.h>
#include <pmix.h>

#define KEY_RECORD "hvd.checkin"
#define KEY_SECRET "hvd.secret"

typedef struct {
    void *lib;
    pmix_status_t (*init)(pmix_proc_t *, pmix_info_t[], size_t);
    pmix_status_t (*finalize)(const pmix_info_t[], size_t);
    pmix_status_t (*put)(pmix_scope_t, const char[], pmix_value_t *);
    pmix_status_t (*commit)(void);
    pmix_status_t (*fence)(const pmix_proc_t[], size_t, const pmix_info_t[], size_t);
    pmix_status_t (*get)(const pmix_proc_t *, const char[], const pmix_info_t[], size_t,
                         pmix_value_t **);
    const char *(*error_string)(pmix_status_t);
} api_t;

static hvd_status_t load(api_t *a) {
    memset(a, 0, sizeof *a);
    a->lib = dlopen("libpmix.so.2", RTLD_NOW | RTLD_LOCAL);
    if (!a->lib)
        return hvd__error_set(HVD_ERR_UNSUPPORTED,
                              "started by Open MPI's mpirun without horovodrun, and its PMIx "
                              "library cannot be loaded (%s): start the job with `horovodrun "
                              "--mpi`",
                              dlerror());
    struct {
        void **fn;
        const char *name;
    } syms[] = {{(void **)&a->init, "PMIx_Init"},
                {(void **)&a->finalize, "PMIx_Finalize"},
                {(void **)&a->put, "PMIx_Put"},
                {(void **)&a->commit, "PMIx_Commit"},
                {(void **)&a->fence, "PMIx_Fence"},
                {(void **)&a->get, "PMIx_Get"},
                {(void **)&a->error_string, "PMIx_Error_string"}};
    for (size_t i = 0; i < sizeof syms / sizeof syms[0]; i++)
        if (!(*syms[i].fn = dlsym(a->lib, syms[i].name))) {
            dlclose(a->lib);
            return hvd__error_set(HVD_ERR_UNSUPPORTED, "libpmix.so.2 has no %s", syms[i].name);
        }
    return HVD_OK;
}

static hvd_status_t failed(const api_t *a, const char *call, pmix_status_t rc) {
    return hvd__error_set(rc == PMIX_ERR_TIMEOUT ? HVD_ERR_TIMEOUT : HVD_ERR_PROTOCOL,
                          "PMIx: %s failed: %s", call, a->error_string(rc));
}

static pmix_status_t put_string(const api_t *a, const char *key, const char *value) {
    pmix_value_t v;
    memset(&v, 0, sizeof v);
    v.type = PMIX_STRING;
    v.data.string = (char *)value;
    return a->put(PMIX_GLOBAL, key, &v);
}

/* A string value of rank r's key, copied; NULL with the error set. */
static char *get_string(const api_t *a, const pmix_proc_t *me, int r, const char *key,
                        hvd_status_t *st_p) {
    pmix_proc_t p;
    memset(&p, 0, sizeof p);
    memcpy(p.nspace, me->nspace, sizeof p.nspace);
    p.rank = (pmix_rank_t)r;
    pmix_value_t *v = NULL;
    pmix_status_t rc = a->get(&p, key, NULL, 0, &v);
    char *out = NULL;
    if (rc != PMIX_SUCCESS) {
        *st_p = failed(a, "Get", rc);
    } else if (!v || v->type != PMIX_STRING || !v->data.string) {
        *st_p = hvd__error_set(HVD_ERR_PROTOCOL, "PMIx: rank %d's %s is not a string", r, key);
    } else if (!(out = strdup(v->data.string))) {
        *st_p = hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory");
    }
    if (v) { /* libpmix allocates with malloc; its release macro does just this */
        if (v->type == PMIX_STRING)
            free(v->data.string);
        free(v);
    }
    return out;
}

hvd_status_t hvd__pmix_exchange(int rank, int size, const char *record, const hvd_secret_t *secret,
                                int timeout_s, char ***records_p, hvd_secret_t *secret_p) {
    api_t a;
    hvd_status_t st = load(&a);
    if (st != HVD_OK)
        return st;
    pmix_proc_t me;
    memset(&me, 0, sizeof me);
    pmix_status_t rc = a.init(&me, NULL, 0);
    if (rc != PMIX_SUCCESS) {
        st = failed(&a, "Init (was this process started by mpirun?)", rc);
        dlclose(a.lib);
        return st;
    }
    char **records = calloc((size_t)size, sizeof *records);
    char hex[HVD_SECRET_HEX_LEN + 1] = "";
    if (!records)
        st = hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory");
    if (st == HVD_OK && (rc = put_string(&a, KEY_RECORD, record)) != PMIX_SUCCESS)
        st = failed(&a, "Put", rc);
    if (st == HVD_OK && rank == 0) {
        hvd__secret_to_hex(secret, hex);
        rc = put_string(&a, KEY_SECRET, hex);
        explicit_bzero(hex, sizeof hex);
        if (rc != PMIX_SUCCESS)
            st = failed(&a, "Put", rc);
    }
    if (st == HVD_OK && (rc = a.commit()) != PMIX_SUCCESS)
        st = failed(&a, "Commit", rc);
    if (st == HVD_OK) {
        /* every rank of the job, data collected, within the rendezvous deadline */
        pmix_proc_t all;
        memset(&all, 0, sizeof all);
        memcpy(all.nspace, me.nspace, sizeof all.nspace);
        all.rank = PMIX_RANK_WILDCARD;
        pmix_info_t info[2];
        memset(info, 0, sizeof info);
        strncpy(info[0].key, PMIX_COLLECT_DATA, PMIX_MAX_KEYLEN);
        info[0].value.type = PMIX_BOOL;
        info[0].value.data.flag = true;
        strncpy(info[1].key, PMIX_TIMEOUT, PMIX_MAX_KEYLEN);
        info[1].value.type = PMIX_INT;
        info[1].value.data.integer = timeout_s;
        if ((rc = a.fence(&all, 1, info, 2)) != PMIX_SUCCESS)
            st = failed(&a, "Fence (waiting for every rank to publish its address)", rc);
    }
    for (int r = 0; r < size && st == HVD_OK; r++)
        records[r] = get_string(&a, &me, r, KEY_RECORD, &st);
    if (st == HVD_OK) {
        char *s = get_string(&a, &me, 0, KEY_SECRET, &st);
        if (s && hvd__secret_from_hex(s, secret_p) != HVD_OK)
            st = hvd__error_set(HVD_ERR_PROTOCOL, "PMIx: rank 0's job secret is malformed");
        if (s) {
            explicit_bzero(s, strlen(s));
            free(s);
        }
    }
    a.finalize(NULL, 0);
    /* libpmix keeps threads and handlers it registered: unloading it could pull code from
     * under them, so it stays loaded for the life of the process */
    if (st != HVD_OK) {
        hvd__pmix_records_free(records, size);
        return st;
    }
    *records_p = records;
    return HVD_OK;
}

#else

hvd_status_t hvd__pmix_exchange(int rank, int size, const char *record, const hvd_secret_t *secret,
                                int timeout_s, char ***records_p, hvd_secret_t *secret_p) {
    (void)rank, (void)size, (void)record, (void)secret, (void)timeout_s, (void)records_p,
        (void)secret_p;
    return hvd__error_set(HVD_ERR_UNSUPPORTED,
                          "started by Open MPI's mpirun without horovodrun, but this libhvd was "
                          "built without PMIx support (libpmix-dev): start the job with "
                          "`horovodrun --mpi`");
}

#endif

void hvd__pmix_records_free(char **records, int size) {
    for (int r = 0; records && r < size; r++)
        free(records[r]);
    free(records);
}
