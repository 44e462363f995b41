/* The check-in through the program's key-value store; see store_exchange.h. */
#include "core/store_exchange.h"

#include "core/pmix_exchange.h"

#include "common/clock.h"
#include "common/error.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The store's own words for a failed call, when it gives some. */
static const char *store_says(const hvd_store_t *s) {
    const char *m = s->last_error ? s->last_error(s->user) : NULL;
    return m && *m ? m : "no detail";
}

/* key's value (NUL-terminated) into buf[HVD_STORE_VALUE_MAX + 1], waiting until deadline. */
static hvd_status_t get_value(const hvd_store_t *s, const char *key, int64_t deadline, int whose,
                              char *buf) {
    size_t len = 0;
    int64_t left = hvd__clock_remaining_ms(deadline);
    hvd_status_t st =
        s->get(s->user, key, (int)(left > 0 ? left : 1), buf, HVD_STORE_VALUE_MAX, &len);
    if (st == HVD_ERR_TIMEOUT)
        return hvd__error_set(HVD_ERR_TIMEOUT,
                              "rank %d: rank %d never checked in: no %s in the store after the "
                              "rendezvous deadline (raise HOROVOD_GLOO_TIMEOUT_SECONDS, or "
                              "init_process_group's timeout, if ranks are slow to start)",
                              s->rank, whose, key);
    if (st != HVD_OK)
        return hvd__error_set(st < 0 ? st : HVD_ERR_IO, "rank %d: reading %s from the store: %s",
                              s->rank, key, store_says(s));
    if (len > HVD_STORE_VALUE_MAX)
        return hvd__error_set(HVD_ERR_PROTOCOL,
                              "rank %d: the store's %s is %zu bytes, more than the %d of a "
                              "check-in (another program's key?)",
                              s->rank, key, len, HVD_STORE_VALUE_MAX);
    buf[len] = '\0';
    if (strlen(buf) != len)
        return hvd__error_set(HVD_ERR_PROTOCOL, "rank %d: the store's %s is not text", s->rank,
                              key);
    return HVD_OK;
}

static hvd_status_t set_value(const hvd_store_t *s, const char *key, const char *value) {
    hvd_status_t st = s->set(s->user, key, value, strlen(value));
    if (st != HVD_OK)
        return hvd__error_set(st < 0 ? st : HVD_ERR_IO, "rank %d: writing %s to the store: %s",
                              s->rank, key, store_says(s));
    return HVD_OK;
}

hvd_status_t hvd__store_exchange(const hvd_store_t *s, unsigned generation, const char *record,
                                 const hvd_secret_t *secret, int publish_secret, int timeout_s,
                                 char ***records_p, hvd_secret_t *secret_p) {
    int64_t deadline = hvd__clock_deadline_ms((int64_t)timeout_s * 1000);
    char key[64], buf[HVD_STORE_VALUE_MAX + 1];
    char **records = calloc((size_t)s->size, sizeof *records);
    if (!records)
        return hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory");
    hvd_status_t st = HVD_OK;
    /* the secret before the record: a rank that sees rank 0's record finds its secret */
    if (publish_secret && s->rank == 0) {
        char hex[HVD_SECRET_HEX_LEN + 1];
        hvd__secret_to_hex(secret, hex);
        snprintf(key, sizeof key, "hvd.%u.secret", generation);
        st = set_value(s, key, hex);
        explicit_bzero(hex, sizeof hex);
    }
    snprintf(key, sizeof key, "hvd.%u.rank_%d", generation, s->rank);
    if (st == HVD_OK)
        st = set_value(s, key, record);
    for (int r = 0; r < s->size && st == HVD_OK; r++) {
        snprintf(key, sizeof key, "hvd.%u.rank_%d", generation, r);
        if ((st = get_value(s, key, deadline, r, buf)) == HVD_OK && !(records[r] = strdup(buf)))
            st = hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory");
    }
    if (st == HVD_OK && publish_secret) {
        snprintf(key, sizeof key, "hvd.%u.secret", generation);
        st = get_value(s, key, deadline, 0, buf);
        if (st == HVD_OK && hvd__secret_from_hex(buf, secret_p) != HVD_OK)
            st = hvd__error_set(HVD_ERR_PROTOCOL,
                                "rank %d: rank 0's job secret in the store is "
                                "malformed",
                                s->rank);
        explicit_bzero(buf, sizeof buf);
    } else if (st == HVD_OK) {
        *secret_p = *secret;
    }
    if (st != HVD_OK) {
        hvd__pmix_records_free(records, s->size);
        return st;
    }
    *records_p = records;
    return HVD_OK;
}
