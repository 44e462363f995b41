/* The job of the fault matrix (tests/faults): N ranks under the real horovodrun, one of them
 * (the victim) hit by a signal in a chosen phase, the others recording what the library told
 * them and when, so the test script can check the message and the time to detection.
 *
 *   fault_worker --dir DIR --phase PHASE [--victim R] [--signal kill|stop|exit0|none]
 *                [--after K] [--seconds S] [--timeout S]
 *
 * Phases: init (the victim is hit before hvd_init, the others are in their check-in),
 * small / large (a loop of 8-byte / 16 MiB float32 allreduces), negotiate (a loop of 64
 * named asynchronous allreduces at a time, so the coordinator has many tensors to agree on),
 * shutdown (the others are in hvd_shutdown when the victim is hit). The victim strikes a few
 * milliseconds into its iteration --after (default 3) of the loop phases.
 *
 * --signal exit0: the victim calls exit(0) in the loop, without hvd_shutdown. --signal none:
 * nobody is hit; every rank runs the phase's loop for --seconds (default 4, rank 0 decides
 * when to stop) and ends normally; the test then signals horovodrun itself.
 *
 * --op allgather: the small and large phases run allgathers (of that size per rank) instead.
 * --init-delay S: the last rank sleeps S seconds before hvd_init (the others wait for it in
 * their check-in).
 * --linger S (phase shutdown, --signal none, --victim R): rank R goes on running for S seconds
 * after its hvd_shutdown (a long checkpoint write) while the others exit; it writes
 * DIR/victim when it starts to.
 * --signal exit0 in phase init: the victim returns 0 instead of calling hvd_init.
 *
 * Every rank writes DIR/pid.R at start, DIR/loop.R once it is in the loop and, with --signal
 * none, its iteration count to DIR/progress.R every 64 iterations; the victim
 * writes DIR/victim ("pid=P t_ns=T") just before its signal; every other rank writes
 * DIR/rank.R with status= (its first failure, or HVD_OK), call_ns= (when the failing call
 * began), err_ns= (when it returned), msg=, and then second= (a collective after the
 * failure), shutdown= and shutdown_ms=. Every rank ignores SIGTERM, so what the survivors
 * report is the library's doing, not horovodrun's (which SIGTERMs them once one fails). */
#include <hvd/hvd.h>

#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <unistd.h>

#include "../mrank/check_clock.h"

enum { PH_INIT, PH_SMALL, PH_LARGE, PH_NEGOTIATE, PH_SHUTDOWN };
static const char *const PHASES[] = {"init", "small", "large", "negotiate", "shutdown"};
#define NPHASES ((int)(sizeof PHASES / sizeof PHASES[0]))
#define NAMED 64 /* tensors per round of the negotiate phase */

static struct {
    const char *dir;
    int phase, victim, after, timeout, sig; /* sig: SIGKILL, SIGSTOP, 0 (exit0) or -1 (none) */
    double seconds, init_delay, linger;
    int allgather; /* --op allgather: the loop phases run allgathers */
} opt = {NULL, PH_SMALL, -1, 3, 0, SIGKILL, 4, 0, 0, 0};

static int g_rank = -1;

__attribute__((format(printf, 1, 2), noreturn)) static void die(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "fault_worker [rank %d]: ", g_rank);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(2);
}

/* DIR/NAME.R with one line of text, replaced whole (a reader never sees it half written) */
static void write_file(const char *name, int r, const char *text) {
    char path[600], tmp[610];
    snprintf(path, sizeof path, "%s/%s.%d", opt.dir, name, r);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0)
        return;
    ssize_t w = write(fd, text, strlen(text));
    (void)w;
    close(fd);
    rename(tmp, path);
}

/* Decimal of v into p, async-signal-safe; returns the length. */
static size_t fmt_ll(char *p, long long v) {
    char tmp[24];
    size_t n = 0, k = 0;
    do {
        tmp[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    while (n)
        p[k++] = tmp[--n];
    return k;
}

/* The strike: record the time in DIR/victim, then die or stop. Async-signal-safe, as it
 * also runs from SIGALRM in the middle of a collective. */
static char g_victim_path[600];
static volatile sig_atomic_t g_struck;
static void strike_victim_file(void) {
    char buf[80] = "pid=";
    size_t k = 4;
    k += fmt_ll(buf + k, (long long)getpid());
    memcpy(buf + k, " t_ns=", 6);
    k += 6;
    k += fmt_ll(buf + k, real_ns());
    buf[k++] = '\n';
    int fd = open(g_victim_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
        ssize_t w = write(fd, buf, k);
        (void)w;
        close(fd);
    }
}

static void strike(int unused) {
    (void)unused;
    strike_victim_file();
    g_struck = 1;
    raise(opt.sig);
}

static int is_victim(void) {
    return opt.sig >= 0 && g_rank == opt.victim;
}

/* Strike a few milliseconds from now, inside whatever call comes next. */
static void strike_soon(void) {
    struct itimerval tv = {{0, 0}, {0, 3000}};
    setitimer(ITIMER_REAL, &tv, NULL);
}

static hvd_status_t init(void) {
    hvd_config_t cfg;
    hvd_config_init(&cfg);
    cfg.timeout_seconds = opt.timeout;
    return hvd_init_ex(&cfg);
}

static hvd_status_t one_round(float *a, float *b, size_t count) {
    if (opt.phase != PH_NEGOTIATE)
        return opt.allgather ? hvd_allgather(a, count, b, HVD_FLOAT32)
                             : hvd_allreduce(a, b, count, HVD_FLOAT32, HVD_SUM);
    hvd_handle_t h[NAMED];
    hvd_status_t first = HVD_OK;
    int n = 0;
    for (int k = 0; k < NAMED; k++) {
        char name[32];
        snprintf(name, sizeof name, "grad.%d", k);
        hvd_status_t s =
            hvd_allreduce_async(name, a + 16 * k, b + 16 * k, 16, HVD_FLOAT32, HVD_SUM, &h[n]);
        if (s == HVD_OK)
            n++;
        else if (first == HVD_OK)
            first = s;
    }
    for (int k = 0; k < n; k++) {
        hvd_status_t s = hvd_wait(h[k]);
        if (s != HVD_OK && first == HVD_OK)
            first = s;
    }
    return first;
}

/* The survivor's report: its failure (or HVD_OK) and what came after it. */
static void report(hvd_status_t s, long long call_ns, long long err_ns, int iter, int again) {
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", s != HVD_OK ? hvd_last_error() : "");
    for (char *p = msg; *p; p++)
        if (*p == '\n')
            *p = ' ';
    char path[600];
    snprintf(path, sizeof path, "%s/rank.%d", opt.dir, g_rank);
    FILE *f = fopen(path, "w");
    if (!f)
        die("cannot write %s", path);
    fprintf(f, "status=%s\ncall_ns=%lld\nerr_ns=%lld\niter=%d\nmsg=%s\n", hvd_status_str(s),
            call_ns, err_ns, iter, msg);
    fflush(f);
    if (again) { /* the failure is sticky: the next collective fails at once, the same way */
        double t1 = now_s();
        int32_t x = 1, y = 0;
        hvd_status_t s2 = hvd_allreduce(&x, &y, 1, HVD_INT32, HVD_SUM);
        fprintf(f, "second=%s\nsecond_ms=%.1f\n", hvd_status_str(s2), (now_s() - t1) * 1e3);
        fflush(f);
        double t2 = now_s();
        hvd_status_t s3 = hvd_shutdown();
        fprintf(f, "shutdown=%s\nshutdown_ms=%.1f\n", hvd_status_str(s3), (now_s() - t2) * 1e3);
    }
    fclose(f);
    printf("rank %d: %s after %d iterations: %s\n", g_rank, hvd_status_str(s), iter, msg);
}

static int run(void) {
    char text[64];
    snprintf(text, sizeof text, "%d\n", (int)getpid());
    const char *r = getenv("HOROVOD_RANK"), *sz = getenv("HOROVOD_SIZE");
    g_rank = r ? atoi(r) : -1;
    int size = sz ? atoi(sz) : 0;
    if (g_rank < 0 || size <= g_rank)
        die("HOROVOD_RANK / HOROVOD_SIZE are not set (run under horovodrun)");
    write_file("pid", g_rank, text);
    snprintf(g_victim_path, sizeof g_victim_path, "%s/victim", opt.dir);

    if (opt.phase == PH_INIT && is_victim()) {
        /* the others are in their check-in: they have written their pid files, and then some */
        double give_up = now_s() + 20;
        for (int k = 0; k < size && now_s() < give_up; k++) {
            char path[600];
            snprintf(path, sizeof path, "%s/pid.%d", opt.dir, k);
            while (access(path, F_OK) != 0 && now_s() < give_up)
                usleep(10 * 1000);
        }
        usleep(300 * 1000);
        if (opt.sig == 0) { /* returns instead of calling hvd_init */
            strike_victim_file();
            exit(0);
        }
        strike(0);
        /* a stopped victim goes on here after SIGCONT: its peers have given up */
        hvd_status_t s = init();
        printf("victim rank %d resumed: hvd_init %s\n", g_rank, hvd_status_str(s));
        if (s == HVD_OK)
            hvd_shutdown();
        return 0;
    }
    if (opt.init_delay > 0 && g_rank == size - 1)
        usleep((useconds_t)(opt.init_delay * 1e6)); /* the others wait in their check-in */
    long long call_ns = real_ns();
    hvd_status_t s = init();
    if (s != HVD_OK) {
        if (opt.phase != PH_INIT)
            die("hvd_init: %s: %s", hvd_status_str(s), hvd_last_error());
        report(s, call_ns, real_ns(), 0, 0);
        return 3;
    }
    if (opt.phase == PH_INIT) { /* the job formed without the victim: that is a failure */
        report(s, call_ns, real_ns(), 0, 0);
        hvd_shutdown();
        return 1;
    }
    if (opt.victim >= size)
        die("--victim %d: the job has %d ranks", opt.victim, size);
    size_t count = opt.phase == PH_LARGE ? (size_t)4 << 20 : opt.phase == PH_SMALL ? 2 : 16 * NAMED;
    float *a = malloc(count * sizeof *a),
          *b = malloc(count * sizeof *b * (opt.allgather ? (size_t)size : 1));
    if (!a || !b)
        die("out of memory");
    for (size_t i = 0; i < count; i++)
        a[i] = (float)(i % 7);
    if (is_victim()) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = strike;
        sa.sa_flags = SA_RESTART;
        sigaction(SIGALRM, &sa, NULL);
    }
    int loops = opt.phase == PH_SHUTDOWN ? opt.after : -1, it;
    double t0 = now_s(), deadline = t0 + 60;
    long long t_err = 0;
    for (it = 0; now_s() < deadline && it != loops; it++) {
        if (it == 1)
            write_file("loop", g_rank, "1\n");
        if (opt.sig < 0 && it % 64 == 0) { /* progress, for a test that stops horovodrun */
            snprintf(text, sizeof text, "%d\n", it);
            write_file("progress", g_rank, text);
        }
        if (is_victim() && it == opt.after) {
            if (opt.sig == 0) { /* a normal exit, atexit handlers and all */
                strike_victim_file();
                exit(0);
            }
            strike_soon();
        }
        call_ns = real_ns();
        s = one_round(a, b, count);
        if (s != HVD_OK) {
            t_err = real_ns();
            break;
        }
        if (opt.sig < 0) { /* nobody is hit: rank 0 ends the loop after --seconds */
            int32_t stop = g_rank == 0 && now_s() - t0 > opt.seconds;
            if ((s = hvd_broadcast(&stop, 1, HVD_INT32, 0)) != HVD_OK) {
                t_err = real_ns();
                break;
            }
            if (stop)
                break;
        }
    }
    free(a);
    free(b);
    if (opt.phase == PH_SHUTDOWN && s == HVD_OK) {
        if (is_victim()) { /* struck within a few milliseconds of its own hvd_shutdown */
            strike_soon();
            hvd_shutdown();
            while (!g_struck)
                pause();
            printf("victim rank %d resumed after hvd_shutdown\n", g_rank);
            return 0;
        }
        call_ns = real_ns();
        s = hvd_shutdown();
        report(s, call_ns, real_ns(), it, 0);
        if (g_rank == opt.victim && opt.linger > 0) { /* still running after the others end */
            strike_victim_file();
            usleep((useconds_t)(opt.linger * 1e6));
        }
        return s == HVD_OK ? 0 : 3;
    }
    if (is_victim()) { /* a stopped victim goes on here after SIGCONT */
        printf("victim rank %d resumed: %s\n", g_rank, hvd_status_str(s));
        hvd_shutdown();
        return 0;
    }
    report(s, call_ns, t_err, it, 1);
    /* horovodrun names the first rank it sees fail: let it see the victim's end before this
     * rank's exit status */
    if (opt.sig >= 0)
        usleep(300 * 1000);
    return s == HVD_OK ? 0 : 3;
}

static void usage(void) {
    fprintf(stderr, "usage: fault_worker --dir DIR --phase init|small|large|negotiate|shutdown\n"
                    "  [--victim R] [--signal kill|stop|exit0|none] [--after K] [--seconds S]\n"
                    "  [--timeout S] [--init-delay S] [--linger S] [--op allreduce|allgather]\n");
    exit(2);
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v)
            usage();
        i++;
        if (!strcmp(a, "--dir"))
            opt.dir = v;
        else if (!strcmp(a, "--phase")) {
            opt.phase = -1;
            for (int p = 0; p < NPHASES; p++)
                if (!strcmp(v, PHASES[p]))
                    opt.phase = p;
            if (opt.phase < 0)
                usage();
        } else if (!strcmp(a, "--victim"))
            opt.victim = atoi(v);
        else if (!strcmp(a, "--signal")) {
            opt.sig = !strcmp(v, "kill")    ? SIGKILL
                      : !strcmp(v, "stop")  ? SIGSTOP
                      : !strcmp(v, "exit0") ? 0
                      : !strcmp(v, "none")  ? -1
                                            : -2;
            if (opt.sig == -2)
                usage();
        } else if (!strcmp(a, "--after"))
            opt.after = atoi(v);
        else if (!strcmp(a, "--seconds"))
            opt.seconds = atof(v);
        else if (!strcmp(a, "--timeout"))
            opt.timeout = atoi(v);
        else if (!strcmp(a, "--init-delay"))
            opt.init_delay = atof(v);
        else if (!strcmp(a, "--linger"))
            opt.linger = atof(v);
        else if (!strcmp(a, "--op") && (!strcmp(v, "allreduce") || !strcmp(v, "allgather")))
            opt.allgather = !strcmp(v, "allgather");
        else
            usage();
    }
    if (!opt.dir)
        usage();
    if (opt.sig >= 0 && opt.victim < 0)
        die("--signal %s needs --victim", opt.sig == SIGKILL ? "kill" : "stop/exit0");
    /* horovodrun ends the others with SIGTERM as soon as the victim dies: ignoring it keeps
     * what the survivors report the library's doing */
    signal(SIGTERM, SIG_IGN);
    signal(SIGPIPE, SIG_IGN);
    return run();
}
