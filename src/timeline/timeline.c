/* The timeline writer (timeline.h). */
#include "timeline/timeline.h"

#include "common/clock.h"
#include "common/error.h"
#include "common/log.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <unistd.h>

#define EVENT_MAX 1024

typedef struct {
    char *name;
    int pid;
} tensor_t;

struct hvd_timeline {
    pthread_mutex_t lock;
    int fd;
    off_t end;  /* where the closing bracket is: the next event overwrites it */
    int events; /* written so far (the first has no leading comma) */
    int64_t start_us;
    tensor_t *tensors; /* in order of first appearance; pid = index + 1 */
    int ntensors, cap;
    char path[256];
};

size_t hvd__json_escape(const char *s, char *out, size_t out_size) {
    size_t n = 0;
    for (; *s && n + 7 < out_size; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') {
            out[n++] = '\\';
            out[n++] = (char)c;
        } else if (c < 0x20) {
            n += (size_t)snprintf(out + n, out_size - n, "\\u%04x", c);
        } else {
            out[n++] = (char)c;
        }
    }
    out[n] = '\0';
    return n;
}

/* Append one event (locked). A failed write turns the timeline off with one warning. */
static void put(hvd_timeline_t *tl, const char *event) {
    if (tl->fd < 0)
        return;
    char buf[EVENT_MAX + 8];
    int n = snprintf(buf, sizeof buf, "%s%s\n]\n", tl->events ? ",\n" : "", event);
    if (n < 0 || (size_t)n >= sizeof buf)
        return; /* cannot happen with the bounded fields below */
    ssize_t w = pwrite(tl->fd, buf, (size_t)n, tl->end);
    if (w != n) {
        HVD_LOG_W("timeline %s: write failed (%s); timeline disabled", tl->path,
                  w < 0 ? strerror(errno) : "short write");
        close(tl->fd);
        tl->fd = -1;
        return;
    }
    tl->end += n - 2; /* the next event overwrites the closing "]\n" */
    tl->events++;
}

__attribute__((format(printf, 2, 3))) static void putf(hvd_timeline_t *tl, const char *fmt, ...) {
    char event[EVENT_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(event, sizeof event, fmt, ap);
    va_end(ap);
    put(tl, event);
}

hvd_status_t hvd__timeline_open(const char *path, hvd_timeline_t **tl_p) {
    hvd_timeline_t *tl = calloc(1, sizeof *tl);
    if (!tl)
        return hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory for the timeline");
    tl->fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (tl->fd < 0) {
        int e = errno;
        free(tl);
        return hvd__error_set(HVD_ERR_IO, "cannot create the timeline file %s: %s", path,
                              strerror(e));
    }
    pthread_mutex_init(&tl->lock, NULL);
    snprintf(tl->path, sizeof tl->path, "%s", path);
    if (pwrite(tl->fd, "[\n", 2, 0) != 2) {
        hvd__timeline_close(tl);
        return hvd__error_set(HVD_ERR_IO, "cannot write the timeline file %s", path);
    }
    tl->end = 2;
    tl->start_us = hvd__clock_now_us();
    struct timeval tv;
    gettimeofday(&tv, NULL);
    putf(tl,
         "{\"name\": \"process_name\", \"ph\": \"M\", \"pid\": 0, \"args\": "
         "{\"start_time_since_epoch_in_micros\": %lld}}",
         (long long)tv.tv_sec * 1000000 + tv.tv_usec);
    put(tl, "{\"name\": \"process_sort_index\", \"ph\": \"M\", \"pid\": 0, \"args\": "
            "{\"sort_index\": 0}}");
    *tl_p = tl;
    return HVD_OK;
}

void hvd__timeline_close(hvd_timeline_t *tl) {
    if (!tl)
        return;
    if (tl->fd >= 0)
        close(tl->fd);
    for (int i = 0; i < tl->ntensors; i++)
        free(tl->tensors[i].name);
    free(tl->tensors);
    pthread_mutex_destroy(&tl->lock);
    free(tl);
}

int64_t hvd__timeline_now(const hvd_timeline_t *tl) {
    return hvd__clock_now_us() - tl->start_us;
}

/* The pid of tensor, announcing it on first use (locked). 0 when out of memory. */
static int tensor_pid(hvd_timeline_t *tl, const char *tensor) {
    for (int i = tl->ntensors - 1; i >= 0; i--)
        if (strcmp(tl->tensors[i].name, tensor) == 0)
            return tl->tensors[i].pid;
    if (tl->ntensors == tl->cap) {
        int cap = tl->cap ? 2 * tl->cap : 64;
        tensor_t *t = realloc(tl->tensors, (size_t)cap * sizeof *t);
        if (!t)
            return 0;
        tl->tensors = t;
        tl->cap = cap;
    }
    char *copy = strdup(tensor);
    if (!copy)
        return 0;
    int pid = tl->ntensors + 1;
    tl->tensors[tl->ntensors++] = (tensor_t){.name = copy, .pid = pid};
    char esc[512];
    hvd__json_escape(tensor, esc, sizeof esc);
    putf(tl,
         "{\"name\": \"process_name\", \"ph\": \"M\", \"pid\": %d, \"args\": {\"name\": \"%s\"}}",
         pid, esc);
    putf(tl,
         "{\"name\": \"process_sort_index\", \"ph\": \"M\", \"pid\": %d, \"args\": "
         "{\"sort_index\": %d}}",
         pid, pid);
    return pid;
}

void hvd__timeline_begin(hvd_timeline_t *tl, const char *tensor, const char *activity) {
    pthread_mutex_lock(&tl->lock);
    int pid = tensor_pid(tl, tensor);
    char esc[128];
    hvd__json_escape(activity, esc, sizeof esc);
    putf(tl, "{\"ph\": \"B\", \"name\": \"%s\", \"ts\": %lld, \"pid\": %d, \"tid\": 0}", esc,
         (long long)hvd__timeline_now(tl), pid);
    pthread_mutex_unlock(&tl->lock);
}

void hvd__timeline_end(hvd_timeline_t *tl, const char *tensor, const char *args_json) {
    pthread_mutex_lock(&tl->lock);
    int pid = tensor_pid(tl, tensor);
    if (args_json && strlen(args_json) < EVENT_MAX / 2)
        putf(tl, "{\"ph\": \"E\", \"ts\": %lld, \"pid\": %d, \"tid\": 0, \"args\": %s}",
             (long long)hvd__timeline_now(tl), pid, args_json);
    else
        putf(tl, "{\"ph\": \"E\", \"ts\": %lld, \"pid\": %d, \"tid\": 0}",
             (long long)hvd__timeline_now(tl), pid);
    pthread_mutex_unlock(&tl->lock);
}

void hvd__timeline_rank_ready(hvd_timeline_t *tl, const char *tensor, int rank) {
    pthread_mutex_lock(&tl->lock);
    int pid = tensor_pid(tl, tensor);
    putf(tl, "{\"ph\": \"X\", \"name\": \"%d\", \"ts\": %lld, \"dur\": 0, \"pid\": %d, \"tid\": 0}",
         rank, (long long)hvd__timeline_now(tl), pid);
    pthread_mutex_unlock(&tl->lock);
}

void hvd__timeline_instant(hvd_timeline_t *tl, const char *name) {
    pthread_mutex_lock(&tl->lock);
    char esc[128];
    hvd__json_escape(name, esc, sizeof esc);
    putf(tl, "{\"ph\": \"i\", \"name\": \"%s\", \"ts\": %lld, \"s\": \"g\"}", esc,
         (long long)hvd__timeline_now(tl));
    pthread_mutex_unlock(&tl->lock);
}
