/* The elastic agent's thread (elastic_agent.h). Its state is one static struct under one lock,
 * which the thread also holds while it interrupts the attached engine, so detach doubles as a
 * barrier. Each turn sends the heartbeat when due, else long-polls the round's event scope until
 * the next beat. */
#include "core/elastic_agent.h"

#include "common/clock.h"
#include "common/error.h"
#include "common/log.h"
#include "core/engine.h"
#include "crypto/hmac.h"
#include "os/socket.h"
#include "rendezvous/elastic_msg.h"
#include "rendezvous/store_client.h"

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#define BEAT_MS 1000

/* lock guards every field; the thread reads round and writes the event state under it, and
 * interrupts the attached engine while holding it, which is what makes detach a barrier. */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
    int running;
    pid_t pid; /* the process that started the thread (a forked child has no thread) */
    pthread_t thread;
    int stop_fd; /* eventfd: readable when the thread must stop (its cancel descriptor) */
    int stop;    /* atomic */
    hvd_store_client_t *store;
    char slot[HVD_ELASTIC_NAME_MAX];
    /* A heartbeat is sent every BEAT_MS but may take up to beat_wait_ms to get through: with
     * hundreds of workers on a few cores horovodrun's store answers in seconds, and a put
     * given up after one second, then sent again on a new connection, only added to its load
     * until no heartbeat of some worker got through for the driver's whole deadline (np 512
     * on 2 cores: 2 runs of 10 failed that way). */
    int beat_wait_ms;
    int round;
    hvd_engine_t *engine;
    int engine_round;
    int abort_round; /* the latest round whose abort key was seen, or -1 */
    char abort_text[HVD_ELASTIC_VALUE_MAX + 64];
    int hosts_round; /* the latest round whose hosts key was seen, or -1 */
} ag = {.stop_fd = -1, .abort_round = -1, .hosts_round = -1};

static int stopping(void) {
    return __atomic_load_n(&ag.stop, __ATOMIC_ACQUIRE);
}

static void beat(const char *pid) {
    hvd_status_t st = hvd__store_put(ag.store, HVD_ELASTIC_ALIVE_SCOPE, ag.slot, pid, strlen(pid),
                                     hvd__clock_deadline_ms(ag.beat_wait_ms));
    if (st != HVD_OK && !stopping())
        HVD_LOG_D("elastic agent: heartbeat of %s failed (retrying): %s", ag.slot,
                  hvd_last_error());
}

/* What the events scope of round holds (lock held). */
static void take_events(const hvd_store_scope_t *s, int round) {
    const hvd_store_entry_t *e = hvd__store_scope_find(s, HVD_ELASTIC_HOSTS_KEY);
    if (e && ag.hosts_round < round) {
        char what[64];
        hvd__elastic_msg_printable((const char *)e->value, e->value_len, what, sizeof what);
        HVD_LOG_I("elastic: the driver announced a host change (%s) in round %d", what, round);
        ag.hosts_round = round;
    }
    e = hvd__store_scope_find(s, HVD_ELASTIC_ABORT_KEY);
    if (e && ag.abort_round < round) {
        char text[HVD_ELASTIC_VALUE_MAX + 1];
        hvd__elastic_msg_printable((const char *)e->value, e->value_len, text, sizeof text);
        snprintf(ag.abort_text, sizeof ag.abort_text, "the elastic driver ended round %d: %s",
                 round, text);
        ag.abort_round = round;
        HVD_LOG_I("elastic: %s", ag.abort_text);
        if (ag.engine && ag.engine_round == round)
            hvd__engine_interrupt(ag.engine, HVD_ERR_PEER_LOST, ag.abort_text);
    }
}

static void *agent_main(void *arg) {
    (void)arg;
    hvd__socket_set_cancel_fd(ag.stop_fd);
    char pid[24];
    snprintf(pid, sizeof pid, "%ld", (long)getpid());
    int64_t next_beat = 0;
    int seen_round = -1;
    size_t seen = 0;
    while (!stopping()) {
        int64_t now = hvd__clock_now_ms();
        if (now >= next_beat) {
            beat(pid);
            next_beat = now + BEAT_MS;
            continue;
        }
        pthread_mutex_lock(&lock);
        int round = ag.round;
        pthread_mutex_unlock(&lock);
        if (round != seen_round) {
            seen_round = round;
            seen = 0;
        }
        char scope[HVD_ELASTIC_NAME_MAX];
        hvd__elastic_msg_scope(HVD_ELASTIC_SCOPE_EVENTS, round, scope);
        /* Held until the scope has a key more than seen, or until the next heartbeat is due;
         * short of the count it answers with what there is (entries set, HVD_ERR_TIMEOUT). */
        hvd_store_scope_t s = {0};
        hvd_status_t st = hvd__store_get_scope(ag.store, scope, seen + 1, next_beat, &s);
        /* a poll that ends at the next heartbeat without news is the usual case, not an
         * error: beat and poll again */
        if (st == HVD_OK || st == HVD_ERR_TIMEOUT) {
            if (s.count > seen) {
                seen = s.count;
                pthread_mutex_lock(&lock);
                take_events(&s, round);
                pthread_mutex_unlock(&lock);
            }
            hvd__store_scope_fini(&s);
            continue;
        }
        hvd__store_scope_fini(&s);
        if (stopping())
            break;
        HVD_LOG_D("elastic agent: reading %s failed (retrying): %s", scope, hvd_last_error());
        /* No busy loop against a store that refuses at once: wait for the next beat. */
        if (hvd__socket_pause(next_beat - hvd__clock_now_ms()) != HVD_OK)
            break;
    }
    return NULL;
}

/* At exit: stop the thread (its request in flight is cancelled at once) and free what it
 * used, so that nothing runs or leaks while the process tears down. */
static void agent_atexit(void) {
    pthread_mutex_lock(&lock);
    int running = ag.running && ag.pid == getpid();
    ag.running = 0;
    pthread_mutex_unlock(&lock);
    if (!running)
        return;
    __atomic_store_n(&ag.stop, 1, __ATOMIC_RELEASE);
    uint64_t one = 1;
    if (write(ag.stop_fd, &one, sizeof one) < 0)
        HVD_LOG_D("elastic agent: cannot signal the thread to stop: %s", strerror(errno));
    pthread_join(ag.thread, NULL);
    pthread_mutex_lock(&lock);
    hvd__store_client_destroy(ag.store);
    ag.store = NULL;
    ag.engine = NULL;
    close(ag.stop_fd);
    ag.stop_fd = -1;
    pthread_mutex_unlock(&lock);
}

hvd_status_t hvd__elastic_agent_start(const char *addr, int port, const hvd_secret_t *secret,
                                      const char *slot, int round, int silence_s) {
    static int atexit_registered;
    pthread_mutex_lock(&lock);
    if (ag.running) {
        pthread_mutex_unlock(&lock);
        return HVD_OK;
    }
    hvd_status_t st = hvd__store_client_create(addr, port, secret, &ag.store);
    if (st != HVD_OK)
        goto err_unlock;
    ag.stop_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (ag.stop_fd < 0) {
        st = hvd__error_set(HVD_ERR_IO, "cannot create the elastic agent's descriptor: %s",
                            strerror(errno));
        goto err_destroy_store;
    }
    if (!atexit_registered) {
        /* libcrypto's own exit handler must run after ours, which stops a signing thread */
        if (hvd__crypto_init() != 0) {
            st = hvd__error_set(HVD_ERR_IO, "cannot initialise libcrypto");
            goto err_close_fd;
        }
        if (atexit(agent_atexit) != 0) {
            st = hvd__error_set(HVD_ERR_NO_MEMORY, "cannot register the elastic agent's exit");
            goto err_close_fd;
        }
        atexit_registered = 1;
    }
    snprintf(ag.slot, sizeof ag.slot, "%s", slot);
    ag.beat_wait_ms = silence_s / 3 * 1000 > BEAT_MS ? silence_s / 3 * 1000 : BEAT_MS;
    ag.round = round;
    ag.stop = 0;
    ag.pid = getpid();
    int rc = pthread_create(&ag.thread, NULL, agent_main, NULL);
    if (rc != 0) {
        st = hvd__error_set(HVD_ERR_IO, "cannot start the elastic agent thread: %s", strerror(rc));
        goto err_close_fd;
    }
    ag.running = 1;
    pthread_mutex_unlock(&lock);
    HVD_LOG_D("elastic agent started for %s (round %d)", slot, round);
    return HVD_OK;

err_close_fd:
    close(ag.stop_fd);
    ag.stop_fd = -1;
err_destroy_store:
    hvd__store_client_destroy(ag.store);
    ag.store = NULL;
err_unlock:
    pthread_mutex_unlock(&lock);
    return st;
}

void hvd__elastic_agent_set_round(int round) {
    pthread_mutex_lock(&lock);
    ag.round = round;
    pthread_mutex_unlock(&lock);
}

void hvd__elastic_agent_attach(hvd_engine_t *engine, int round) {
    pthread_mutex_lock(&lock);
    if (ag.running) {
        ag.engine = engine;
        ag.engine_round = round;
        if (ag.abort_round == round)
            hvd__engine_interrupt(engine, HVD_ERR_PEER_LOST, ag.abort_text);
    }
    pthread_mutex_unlock(&lock);
}

void hvd__elastic_agent_detach(void) {
    pthread_mutex_lock(&lock);
    ag.engine = NULL;
    pthread_mutex_unlock(&lock);
}

int hvd__elastic_agent_hosts_updated(int round) {
    pthread_mutex_lock(&lock);
    int v = ag.hosts_round == round;
    pthread_mutex_unlock(&lock);
    return v;
}
