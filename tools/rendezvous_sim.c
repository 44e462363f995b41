/* rendezvous_sim: plays N ranks of libhvd's check-in against the rendezvous store's server,
 * to measure how the rendezvous scales without starting N processes.
 *
 *   rendezvous_sim [--ranks "1024 4096 16384"] [--per-host K] [--procs P] [--timeout S]
 *                  [--all-records]
 *
 * For each N: a child process runs the store's HTTP server exactly as horovodrun does (the same
 * code, limits, predefined scopes and published plan of N ranks, K per host), and P client
 * processes play the ranks, N/P each, on one epoll loop each (no thread per rank). Every
 * simulated rank makes the requests hvd_init's check-in makes (core/check_in.c), signed, with
 * the same record format:
 *  - planned (a static horovodrun launch above HVD_CHECK_IN_ALL_MAX ranks, the default): GET
 *    the plan and place every rank in it; PUT its record to its machine's scope and the
 *    job's; wait for the job's count (a held count-only GET); read its machine's records (one
 *    host a machine here).
 *  - --all-records (smaller jobs, elastic rounds, mpirun): PUT its record, then GET the whole
 *    scope held until it has N keys.
 * A rank is done when the last answer decodes to what it needs (its machine's records
 * including its own, or all N). Transient failures (refused or reset connections, 5xx) are
 * retried with the real client's growing pauses.
 *
 * One line per N: the time until every rank is through the check-in, the store process's peak
 * resident memory and CPU, the clients' CPU, the bytes the ranks received, and the retries.
 * Exit status 0 only when every rank of every N got through before the timeout. */
#include <hvd/hvd.h>

#include "common/clock.h"
#include "crypto/secret.h"
#include "http/http_client.h"
#include "os/socket.h"
#include "rendezvous/kv_auth.h"
#include "rendezvous/kv_protocol.h"
#include "runner/rendezvous/kv_server.h"
#include "rendezvous/rank_plan.h"
#include "runner/hosts/hosts.h"
#include "runner/hosts/store_scopes.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#define SCOPE "init.0"
#define MAX_PROCS 16
/* Largest answer read: a whole scope can be no larger than the store's byte limit */
#define MAX_RESPONSE ((size_t)2 * HVD_KV_DEFAULT_MAX_TOTAL)
/* connections a client process has in its connect/PUT phase at once (a launcher starts
 * ranks over seconds, not in one instant; this keeps the listen queue from overflowing) */
#define MAX_CONNECTING 256

static double cpu_s(const struct rusage *ru) {
    return (double)ru->ru_utime.tv_sec + ru->ru_utime.tv_usec / 1e6 + (double)ru->ru_stime.tv_sec +
           ru->ru_stime.tv_usec / 1e6;
}

static void raise_fd_limit(size_t need) {
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
        return;
    rl.rlim_cur = rl.rlim_max == RLIM_INFINITY || rl.rlim_max >= need ? need : rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
}

static long vm_hwm_kib(void) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long kib = -1;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "VmHWM: %ld", &kib) == 1)
            break;
    if (f)
        fclose(f);
    return kib;
}

/* The simulator's own reports between its processes (socketpairs), within a deadline: the
 * round's timeout and a margin, so that a stuck process fails the round instead of hanging. */
static int64_t report_deadline;

static int send_report(int fd, const void *buf, size_t n) {
    return hvd__socket_send_all(fd, buf, n, report_deadline, "rendezvous_sim") == HVD_OK ? 0 : -1;
}

static int recv_report(int fd, void *buf, size_t n) {
    for (size_t got = 0, k; got < n; got += k)
        if (hvd__socket_recv_some(fd, (char *)buf + got, n - got, report_deadline, "rendezvous_sim",
                                  &k) != HVD_OK ||
            k == 0)
            return -1;
    return 0;
}

/* ---- the store process ---- */

typedef struct {
    double cpu_s;
    long hwm_kib, base_kib;
} server_report_t;

/* The plan's host list "sim00000:K,sim00001:K,...". */
static char *plan_hosts(int ranks, int per_host) {
    int hosts = (ranks + per_host - 1) / per_host;
    size_t cap = (size_t)hosts * 24 + 1, off = 0;
    char *s = malloc(cap);
    for (int h = 0; s && h < hosts; h++) {
        int slots = ranks - h * per_host < per_host ? ranks - h * per_host : per_host;
        off += (size_t)snprintf(s + off, cap - off, "%ssim%05d:%d", h ? "," : "", h, slots);
    }
    return s;
}

/* Runs in the child: serve until the parent writes to (or closes) ctl, then report. */
static int serve(int ranks, int per_host, int planned, const hvd_secret_t *secret, int ctl) {
    raise_fd_limit((size_t)ranks + 1024);
    server_report_t rep = {.base_kib = vm_hwm_kib()};
    char *hosts_text = plan_hosts(ranks, per_host);
    hvd_host_list_t hosts;
    hvd_slot_plan_t plan;
    if (!hosts_text || hvd__hosts_parse(hosts_text, &hosts) != HVD_OK ||
        hvd__slot_plan_create(&hosts, ranks, &plan) != HVD_OK) {
        fprintf(stderr, "rendezvous_sim: slot plan: %s\n", hvd_last_error());
        return 1;
    }
    hvd_kv_server_config_t kc = {.bind_addr = "127.0.0.1",
                                 .secret = secret,
                                 .max_connections = hvd__kv_server_connections_for(ranks)};
    hvd_kv_server_t *server = NULL;
    if (hvd__kv_server_start(&kc, &server) != HVD_OK ||
        hvd__store_scopes_declare(server, &plan, planned ? HVD_RANK_PLAN_STATIC_KEY : NULL) !=
            HVD_OK) {
        fprintf(stderr, "rendezvous_sim: store: %s\n", hvd_last_error());
        return 1;
    }
    int port = hvd__kv_server_port(server);
    if (send_report(ctl, &port, sizeof port) != 0)
        return 1;
    char stop;
    (void)recv_report(ctl, &stop, 1); /* the clients are done (or the deadline passed) */
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    rep.cpu_s = cpu_s(&ru);
    rep.hwm_kib = vm_hwm_kib();
    hvd__kv_server_stop(server);
    hvd__slot_plan_fini(&plan);
    hvd__hosts_fini(&hosts);
    free(hosts_text);
    return send_report(ctl, &rep, sizeof rep) == 0 ? 0 : 1;
}

/* ---- the simulated ranks ---- */

/* The requests of each way (the file's comment), in order; a rank's step indexes its way's. */
typedef enum {
    GET_PLAN,    /* GET plan/static */
    PUT_MACHINE, /* PUT init.0.m.<machine>/rank_r record */
    PUT_JOB,     /* PUT init.0/rank_r record */
    WAIT_COUNT,  /* GET init.0/ count-only, held until N */
    GET_MACHINE, /* GET init.0.m.<machine>/, held until the machine's ranks */
    WAIT_ALL,    /* GET init.0/, held until N */
    DONE
} step_t;

static const step_t planned_steps[] = {GET_PLAN,   PUT_MACHINE, PUT_JOB,
                                       WAIT_COUNT, GET_MACHINE, DONE};
static const step_t all_steps[] = {PUT_JOB, WAIT_ALL, DONE};

typedef struct {
    int rank, fd, step;
    char *req;
    size_t req_len, req_off;
    uint8_t *resp;
    size_t resp_len, resp_cap, head_len, body_len; /* head_len 0: head not complete yet */
    int status;
    int64_t retry_at, pause; /* retry_at 0: not waiting to retry */
} sim_rank_t;

typedef struct {
    int64_t last_done_ms; /* since the start of the round */
    long done, retries, failed;
    uint64_t bytes;
    double cpu_s;
} client_report_t;

typedef struct {
    int ranks, per_host, port, epfd, connecting;
    const step_t *steps;
    uint8_t *plan; /* the first plan received, once checked */
    size_t plan_len;
    long waiting; /* ranks pausing before a retry (retry_at set) */
    const hvd_secret_t *secret;
    int64_t start_ms, deadline_ms;
    client_report_t rep;
} sim_t;

static step_t step_of(const sim_t *s, const sim_rank_t *r) {
    return s->steps[r->step];
}

/* Before the held wait: the phase the connection throttle counts (MAX_CONNECTING). */
static int before_wait(const sim_t *s, const sim_rank_t *r) {
    step_t st = step_of(s, r);
    return st != WAIT_COUNT && st != WAIT_ALL && st != GET_MACHINE && st != DONE;
}

/* The record hvd_init's check-in writes (core/check_in.c), with this rank's plan position. */
static int rank_record(const sim_t *s, int rank, char *out, size_t size) {
    int host = rank / s->per_host;
    return snprintf(out, size,
                    "host=sim%05d pid=%ld addr=10.%d.%d.1 port=%d local_rank=%d cross_rank=%d "
                    "machine=%032x",
                    host, 100000L + rank, host / 256, host % 256, 20000 + rank % s->per_host,
                    rank % s->per_host, host, host);
}

static int ranks_on_host(const sim_t *s, int host) {
    int left = s->ranks - host * s->per_host;
    return left < s->per_host ? left : s->per_host;
}

static int build_request(sim_t *s, sim_rank_t *r) {
    char target[96], auth[HVD_KV_AUTH_MAX], body[512], extra[160] = "";
    int body_len = 0, host = r->rank / s->per_host;
    step_t st = step_of(s, r);
    const char *method = st == PUT_MACHINE || st == PUT_JOB ? "PUT" : "GET";
    int64_t wait = s->deadline_ms - hvd__clock_now_ms();
    switch (st) {
    case GET_PLAN:
        snprintf(target, sizeof target, "/%s/%s", HVD_RANK_PLAN_SCOPE, HVD_RANK_PLAN_STATIC_KEY);
        break;
    case PUT_MACHINE:
        snprintf(target, sizeof target, "/%s.m.%032x/rank_%d", SCOPE, host, r->rank);
        body_len = rank_record(s, r->rank, body, sizeof body);
        break;
    case PUT_JOB:
        snprintf(target, sizeof target, "/%s/rank_%d", SCOPE, r->rank);
        body_len = rank_record(s, r->rank, body, sizeof body);
        break;
    case WAIT_COUNT:
    case WAIT_ALL:
        snprintf(target, sizeof target, "/%s/", SCOPE);
        snprintf(extra, sizeof extra, "%s: %lld\r\n%s: %d\r\n%s", HVD_KV_WAIT_HEADER,
                 (long long)(wait > 0 ? wait : 0), HVD_KV_COUNT_HEADER, s->ranks,
                 st == WAIT_COUNT ? HVD_KV_COUNT_ONLY_HEADER ": 1\r\n" : "");
        break;
    case GET_MACHINE:
        snprintf(target, sizeof target, "/%s.m.%032x/", SCOPE, host);
        snprintf(extra, sizeof extra, "%s: %lld\r\n%s: %d\r\n", HVD_KV_WAIT_HEADER,
                 (long long)(wait > 0 ? wait : 0), HVD_KV_COUNT_HEADER, ranks_on_host(s, host));
        break;
    case DONE:
        return -1;
    }
    if (hvd__kv_auth_sign(s->secret, method, target, body, (size_t)body_len, auth) != HVD_OK)
        return -1;
    size_t cap = 1024 + (size_t)body_len;
    free(r->req);
    if (!(r->req = malloc(cap)))
        return -1;
    int n = snprintf(r->req, cap,
                     "%s %s HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nConnection: close\r\n"
                     "Content-Length: %d\r\n%s: %s\r\n%s\r\n",
                     method, target, s->port, body_len, HVD_KV_AUTH_HEADER, auth, extra);
    memcpy(r->req + n, body, (size_t)body_len);
    r->req_len = (size_t)n + (size_t)body_len;
    r->req_off = 0;
    r->resp_len = r->head_len = r->body_len = 0;
    return 0;
}

static void close_conn(sim_t *s, sim_rank_t *r) {
    if (r->fd < 0)
        return;
    epoll_ctl(s->epfd, EPOLL_CTL_DEL, r->fd, NULL);
    close(r->fd);
    r->fd = -1;
    if (before_wait(s, r))
        s->connecting--;
}

static void retry_later(sim_t *s, sim_rank_t *r) {
    close_conn(s, r);
    s->rep.retries++;
    r->retry_at = hvd__clock_now_ms() + r->pause;
    s->waiting++;
    if (r->pause < 500)
        r->pause *= 2;
}

static int start_request(sim_t *s, sim_rank_t *r) {
    if (build_request(s, r) != 0)
        return -1;
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    /* Each simulated host connects from its own loopback address (127.1.x.y), as real hosts
     * do from theirs: from one address, a hundred thousand connections in seconds leave the
     * kernel searching its ephemeral ports past closing ones (40% of the clients' CPU), which
     * no real job sees. The port is still picked at connect. */
    int host = r->rank / s->per_host;
    struct sockaddr_in src = {.sin_family = AF_INET};
    src.sin_addr.s_addr =
        htonl(0x7f010000u | (uint32_t)(host / 250) << 8 | (uint32_t)(1 + host % 250));
    setsockopt(fd, IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &one, sizeof one);
    if (bind(fd, (struct sockaddr *)&src, sizeof src) != 0) {
        close(fd);
        return -1;
    }
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)s->port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0 && errno != EINPROGRESS) {
        close(fd);
        return -1;
    }
    r->fd = fd;
    if (before_wait(s, r))
        s->connecting++;
    struct epoll_event ev = {.events = EPOLLOUT | EPOLLIN | EPOLLRDHUP, .data.ptr = r};
    return epoll_ctl(s->epfd, EPOLL_CTL_ADD, fd, &ev);
}

static uint32_t u32le(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* The number of records in a scope body (HVD_KV_SCOPE_MAGIC encoding) when it is well formed
 * and holds this rank's, else -1. A walk over the entries, not a decode into allocations: the
 * clients of one process stand for N ranks, and what is measured is the store and the wire. */
static long scope_count(const uint8_t *b, size_t len, int rank) {
    char key[32];
    size_t key_len = (size_t)snprintf(key, sizeof key, "rank_%d", rank), off = 8;
    if (len < 8 || memcmp(b, HVD_KV_SCOPE_MAGIC, 4) != 0)
        return -1;
    uint32_t count = u32le(b + 4), kl, vl;
    int mine = 0;
    for (uint32_t i = 0; i < count; i++) {
        if (len - off < 8)
            return -1;
        kl = u32le(b + off);
        vl = u32le(b + off + 4);
        off += 8;
        if (len - off < (size_t)kl + vl)
            return -1;
        mine |= kl == key_len && !memcmp(b + off, key, key_len);
        off += (size_t)kl + vl;
    }
    return off == len && mine ? (long)count : -1;
}

/* The count a count-only answer gives (HVD_KV_COUNT_MAGIC), or -1 when malformed. */
static long count_answer(const uint8_t *b, size_t len) {
    if (len < 16 || memcmp(b, HVD_KV_COUNT_MAGIC, 4) != 0 || memcmp(b + 8, HVD_KV_SCOPE_MAGIC, 4))
        return -1;
    return (long)u32le(b + 4);
}

/* Whether the plan decodes to N ranks in which every rank has its place (what hvd_init does
 * with it). Decoded once per client process; every later copy must equal that one (the
 * decode costs each real rank about a millisecond on its own core, which N simulated ranks
 * on two cores would turn into the measurement). */
static int plan_ok(sim_t *s, const uint8_t *b, size_t len) {
    if (s->plan) {
        return len == s->plan_len && memcmp(b, s->plan, len) == 0;
    }
    hvd_rank_plan_t plan;
    if (hvd__rank_plan_decode((const char *)b, len, &plan) != HVD_OK)
        return 0;
    hvd_rank_place_t *places = calloc((size_t)plan.size, sizeof *places);
    int ok = plan.size == s->ranks && places && hvd__rank_plan_places(&plan, places) == HVD_OK;
    free(places);
    hvd__rank_plan_fini(&plan);
    if (ok && (s->plan = malloc(len))) {
        memcpy(s->plan, b, len);
        s->plan_len = len;
    }
    return ok;
}

/* Whether this answer completes the step: 1 yes, 0 ask again (a held request the server
 * ended short), -1 failed. */
static int step_done(sim_t *s, const sim_rank_t *r, const uint8_t *body, size_t len) {
    int host = r->rank / s->per_host;
    long n;
    switch (step_of(s, r)) {
    case GET_PLAN:
        return plan_ok(s, body, len) ? 1 : -1;
    case PUT_MACHINE:
    case PUT_JOB:
        return 1;
    case WAIT_COUNT:
        n = count_answer(body, len);
        return n < 0 ? -1 : n >= s->ranks;
    case WAIT_ALL:
        n = scope_count(body, len, r->rank);
        return n < 0 ? -1 : n >= s->ranks;
    case GET_MACHINE: /* (one host a machine here) */
        n = scope_count(body, len, r->rank);
        return n < 0 ? -1 : n >= ranks_on_host(s, host);
    case DONE:
        break;
    }
    return -1;
}

/* A complete response is in r->resp: act on it. */
static void on_response(sim_t *s, sim_rank_t *r, int status, const uint8_t *body, size_t len) {
    if (status >= 500 && status != 501 && status != 507) {
        retry_later(s, r);
        return;
    }
    close_conn(s, r);
    int done = status == 200 ? step_done(s, r, body, len) : -1;
    if (done == 0 && hvd__clock_now_ms() < s->deadline_ms) { /* the server's wait ended short */
        if (start_request(s, r) != 0)
            retry_later(s, r);
        return;
    }
    if (done == 1) {
        r->step++;
        r->pause = 20;
        if (step_of(s, r) == DONE) {
            free(r->resp);
            r->resp = NULL;
            r->resp_cap = 0;
            s->rep.done++;
            s->rep.last_done_ms = hvd__clock_now_ms() - s->start_ms;
        } else if (start_request(s, r) != 0) {
            retry_later(s, r);
        }
        return;
    }
    fprintf(stderr, "rendezvous_sim: rank %d: step %d answered %d\n", r->rank, (int)step_of(s, r),
            status);
    r->step = 0;
    while (step_of(s, r) != DONE)
        r->step++;
    s->rep.failed++;
}

/* Bytes arrived (or the peer closed): once the head and Content-Length body are in, act. */
static void on_readable(sim_t *s, sim_rank_t *r) {
    for (;;) {
        if (r->resp_cap - r->resp_len < 65536) {
            size_t cap = r->resp_cap ? r->resp_cap * 2 : 131072;
            if (cap > MAX_RESPONSE) { /* more than the store can hold: not its answer */
                retry_later(s, r);
                return;
            }
            uint8_t *p = realloc(r->resp, cap);
            if (!p)
                abort();
            r->resp = p;
            r->resp_cap = cap;
        }
        ssize_t n = recv(r->fd, r->resp + r->resp_len, r->resp_cap - r->resp_len, 0);
        if (n < 0 && errno == EAGAIN)
            return;
        if (n <= 0) { /* closed or reset before a whole response: transient */
            retry_later(s, r);
            return;
        }
        size_t from = r->resp_len > 3 ? r->resp_len - 3 : 0;
        r->resp_len += (size_t)n;
        s->rep.bytes += (uint64_t)n;
        if (!r->head_len) {
            uint8_t *end = memmem(r->resp + from, r->resp_len - from, "\r\n\r\n", 4);
            if (!end)
                continue;
            r->head_len = (size_t)(end - r->resp) + 4;
            long long clen;
            if (hvd__http_parse_head((const char *)r->resp, r->head_len, &r->status, &clen) !=
                HVD_OK) {
                retry_later(s, r);
                return;
            }
            r->body_len = clen > 0 ? (size_t)clen : 0;
        }
        if (r->resp_len - r->head_len >= r->body_len) {
            on_response(s, r, r->status, r->resp + r->head_len, r->body_len);
            return;
        }
    }
}

static void on_event(sim_t *s, sim_rank_t *r, uint32_t events) {
    if (r->req_off < r->req_len && (events & EPOLLOUT)) {
        ssize_t n = send(r->fd, r->req + r->req_off, r->req_len - r->req_off, MSG_NOSIGNAL);
        if (n < 0 && errno != EAGAIN) {
            retry_later(s, r);
            return;
        }
        if (n > 0 && (r->req_off += (size_t)n) == r->req_len) {
            struct epoll_event ev = {.events = EPOLLIN | EPOLLRDHUP, .data.ptr = r};
            epoll_ctl(s->epfd, EPOLL_CTL_MOD, r->fd, &ev);
        }
        return;
    }
    if (events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR))
        on_readable(s, r);
}

/* Play ranks first, first+step, ... below s->ranks. */
static void play(sim_t *s, int first, int step) {
    int mine = first < s->ranks ? (s->ranks - first + step - 1) / step : 0;
    sim_rank_t *rs = calloc((size_t)mine + 1, sizeof *rs);
    struct epoll_event evs[256];
    s->epfd = epoll_create1(EPOLL_CLOEXEC);
    for (int i = 0; i < mine; i++)
        rs[i] = (sim_rank_t){.rank = first + i * step, .fd = -1, .pause = 20};
    int next = 0; /* ranks below next have started */
    long finished = 0;
    while (finished < mine && hvd__clock_now_ms() < s->deadline_ms + 3000) {
        while (next < mine && s->connecting < MAX_CONNECTING) {
            if (start_request(s, &rs[next]) != 0)
                retry_later(s, &rs[next]);
            next++;
        }
        int64_t t = hvd__clock_now_ms();
        for (int i = 0; s->waiting && i < next; i++) /* retries whose pause is over */
            if (rs[i].retry_at && rs[i].retry_at <= t &&
                (!before_wait(s, &rs[i]) || s->connecting < MAX_CONNECTING)) {
                rs[i].retry_at = 0;
                s->waiting--;
                if (start_request(s, &rs[i]) != 0)
                    retry_later(s, &rs[i]);
            }
        int n = epoll_wait(s->epfd, evs, 256, 20);
        for (int i = 0; i < n; i++)
            on_event(s, evs[i].data.ptr, evs[i].events);
        finished = s->rep.done + s->rep.failed;
    }
    s->rep.failed += mine - finished;
    for (int i = 0; i < mine; i++) {
        close_conn(s, &rs[i]);
        free(rs[i].req);
        free(rs[i].resp);
    }
    free(rs);
    free(s->plan);
    close(s->epfd);
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    s->rep.cpu_s = cpu_s(&ru);
}

/* ---- one round: N ranks ---- */

static int round_n(int ranks, int per_host, int procs, int timeout_s, int planned) {
    report_deadline = hvd__clock_deadline_ms((int64_t)(timeout_s + 60) * 1000);
    hvd_secret_t secret;
    if (hvd__secret_generate(&secret) != HVD_OK)
        return 1;
    int ctl[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, ctl) != 0)
        return 1;
    pid_t server = fork();
    if (server == 0) {
        close(ctl[0]);
        _exit(serve(ranks, per_host, planned, &secret, ctl[1]));
    }
    close(ctl[1]);
    int port;
    if (server < 0 || recv_report(ctl[0], &port, sizeof port) != 0) {
        fprintf(stderr, "rendezvous_sim: the store did not start\n");
        return 1;
    }
    int64_t start = hvd__clock_now_ms();
    int pipes[MAX_PROCS];
    pid_t kids[MAX_PROCS];
    for (int p = 0; p < procs; p++) {
        int fds[2];
        if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0)
            return 1;
        if ((kids[p] = fork()) == 0) {
            close(fds[0]);
            raise_fd_limit((size_t)ranks / (size_t)procs + 1024);
            sim_t s = {.ranks = ranks,
                       .per_host = per_host,
                       .port = port,
                       .steps = planned ? planned_steps : all_steps,
                       .secret = &secret,
                       .start_ms = start,
                       .deadline_ms = start + timeout_s * 1000LL};
            play(&s, p, procs);
            _exit(send_report(fds[1], &s.rep, sizeof s.rep) == 0 ? 0 : 1);
        }
        close(fds[1]);
        pipes[p] = fds[0];
    }
    client_report_t all = {0};
    int ok = 1;
    for (int p = 0; p < procs; p++) {
        client_report_t rep;
        if (recv_report(pipes[p], &rep, sizeof rep) != 0) {
            ok = 0;
            rep = (client_report_t){0};
        }
        close(pipes[p]);
        waitpid(kids[p], NULL, 0);
        if (rep.last_done_ms > all.last_done_ms)
            all.last_done_ms = rep.last_done_ms;
        all.done += rep.done;
        all.failed += rep.failed;
        all.retries += rep.retries;
        all.bytes += rep.bytes;
        all.cpu_s += rep.cpu_s;
    }
    server_report_t srep = {0};
    if (send_report(ctl[0], "x", 1) != 0 || recv_report(ctl[0], &srep, sizeof srep) != 0)
        ok = 0;
    close(ctl[0]);
    int status = 0;
    waitpid(server, &status, 0);
    hvd__secret_wipe(&secret);
    ok = ok && all.done == ranks && WIFEXITED(status) && WEXITSTATUS(status) == 0;
    printf("%6d ranks  %s  %s %7.2f s  store: peak RSS %6.1f MiB (%+.1f), "
           "CPU %6.2f s  clients: CPU %6.2f s, %8.1f MiB received, %ld retries\n",
           ranks, ok ? "ok    " : "FAILED", planned ? "checked in after " : "all records after",
           all.last_done_ms / 1000.0, srep.hwm_kib / 1024.0,
           (srep.hwm_kib - srep.base_kib) / 1024.0, srep.cpu_s, all.cpu_s,
           (double)all.bytes / (1 << 20), all.retries);
    if (!ok)
        printf("        %ld of %d ranks got through, %ld failed\n", all.done, ranks, all.failed);
    fflush(stdout);
    return ok ? 0 : 1;
}

static void usage(void) {
    fprintf(stderr, "usage: rendezvous_sim [--ranks \"N ...\"] [--per-host K] [--procs P] "
                    "[--timeout S] [--all-records]\n");
    exit(2);
}

int main(int argc, char **argv) {
    const char *ranks = "1024 4096 16384";
    int per_host = 8, procs = 1, timeout_s = 60, planned = 1;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--all-records")) {
            planned = 0;
            continue;
        }
        if (i + 1 >= argc)
            usage();
        if (!strcmp(argv[i], "--ranks"))
            ranks = argv[++i];
        else if (!strcmp(argv[i], "--per-host"))
            per_host = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--procs"))
            procs = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--timeout"))
            timeout_s = atoi(argv[++i]);
        else
            usage();
    }
    if (per_host < 1 || procs < 1 || procs > MAX_PROCS || timeout_s < 1)
        usage();
    signal(SIGPIPE, SIG_IGN);
    int counts[64], n = 0;
    char *list = strdup(ranks), *save = NULL;
    for (char *tok = strtok_r(list, " ,", &save); tok; tok = strtok_r(NULL, " ,", &save)) {
        char *end;
        long v = strtol(tok, &end, 10);
        if (*end || v < 1 || v > (1 << 20) || n == 64) {
            fprintf(stderr, "rendezvous_sim: bad rank count '%s' (1 to 1048576, 64 at most)\n",
                    tok);
            return 2;
        }
        counts[n++] = (int)v;
    }
    free(list);
    int rc = 0;
    for (int i = 0; i < n; i++)
        rc |= round_n(counts[i], per_host, procs, timeout_s, planned);
    return rc;
}
