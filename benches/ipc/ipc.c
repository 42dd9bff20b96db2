/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * bench-ipc: libeventq's process-shared channel against the ways a C
 * programmer moves messages between processes on Linux: a Unix
 * SOCK_SEQPACKET socket, a pipe, ZeroMQ and nng over ipc://, with the
 * in-process libeventq channel (threads) as the reference.
 *
 * Configurations: 1P1C and 4P1C (producer processes, one consumer
 * process), 8-byte and 1 KiB messages (bench-peers' format and check,
 * ../peers/peers.h). Each run forks a consumer process, which sets its row
 * up and forks the producer processes (the in-process rows start threads
 * instead); see ipc.h. The method is the one every rate bench shares
 * (../peers/peers.h, struct method): a run lasts a time, not a count: the
 * producers send as fast as they can until the harness stops them, and
 * the rate is what the consumer received in a window of --row-time
 * seconds (default 0.5, longer if it got fewer than 1000 messages) after a
 * warm-up of a fifth of that which starts with its first message. The rows
 * of one configuration run repetition by repetition (--reps, default 5),
 * rep 1 of each row, then rep 2, in an order rotated per repetition; each
 * ratio is taken within a repetition and reported as the median and
 * inter-quartile range (min-max below 5 repetitions) of those
 * per-repetition ratios.
 *
 * Idle-gap ping: one producer process sleeps 1 ms (the consumer is asleep
 * in epoll_wait by then), stamps CLOCK_MONOTONIC into a 16-byte message
 * and sends it; the consumer reads CLOCK_MONOTONIC as soon as it holds the
 * message: the one-way latency, from the send call to the message in hand
 * after the wake-up. The consumer acknowledges through the shared page
 * (outside what is measured) before the next gap starts. The producer runs
 * on one CPU and the consumer on another, in every ping row.
 *
 * Targets, judged from the per-repetition ratios: met only if the
 * spread's worse end meets the target, MISSED if its better end misses,
 * unsettled if it straddles (the line format is shared with the other
 * benches: print_verdict). Nothing is asserted: the program exits 1 only
 * if a run failed to deliver (a lost, duplicated, reordered or damaged
 * message, a hang), 2 on an error of the bench itself.
 *
 *   ipc [--smoke] [--quick] [--reps N] [--row-time S] [--warm S] [--ping N]
 *       [--ping-reps N] [--filter TEXT]
 *
 * --smoke: a fixed tiny count per producer, one repetition, 20 pings, no
 * timing judged (make test's bench-ipc-smoke). --quick: 3 repetitions of
 * 0.2 s, 250 pings. --seconds S is --row-time S. --ping-reps N: the ping
 * rows in the first N repetitions only (make bench's slices run the rate
 * rows as more, shorter repetitions and the pings once). --filter: only rows whose
 * "<config> <size> B <label>" (ping rows: "ping <label>") contains TEXT or
 * one of its '|'-separated alternatives.
 */
#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <eventq.h>

#include "ipc.h"
#include "../probe/line_transfer.h"

const char *const bench_prog = "bench-ipc";

/* --- configuration ------------------------------------------------------------ */

#define MAX_REPS METHOD_MAX_REPS
#define MAX_ROWS 12
#define PING_SIZE 16
#define PING_WARM 20
/* A run that makes no progress for this long is a hang (a lost wake-up or
 * a lost end marker): its processes are killed and it fails. */
#define HANG_SECONDS 30

static struct {
    struct method m;
    int smoke, reps, ping, ping_reps;
    const char *filter;
} cfg;

static const struct row *rows[MAX_ROWS];
static int nrows;
/* The ping rows: per-message receive for libeventq. */
static const struct row *const PING_ROWS[] = {&eq_shared_recv, &eq_local_recv, &sys_pipe,
                                              &sys_seqpacket};
#define NPING (int)(sizeof PING_ROWS / sizeof PING_ROWS[0])
_Static_assert(NPING <= MAX_PATHS, "the ping rows take turns in one run");

static const struct lib *const LIBS[] = {
    &lib_eventq, &lib_sys,
#ifdef PEERS_HAVE_ZMQ
    &lib_zmq,
#endif
#ifdef PEERS_HAVE_NNG
    &lib_nng,
#endif
};
#define NLIBS (int)(sizeof LIBS / sizeof LIBS[0])

static int filtered_in(const char *name)
{
    return filter_match(cfg.filter, name);
}

static void usage(void)
{
    fprintf(stderr,
            "usage: ipc [--smoke] [--quick] [--reps N] [--row-time S] [--warm S] [--ping N] [--ping-reps N] "
            "[--filter TEXT]\n");
    exit(2);
}

static void parse_args(int argc, char **argv)
{
    cfg.ping = -1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--seconds"))
            argv[i] = "--row-time"; /* the older name */
        if (method_arg(&cfg.m, argc, argv, &i))
            continue;
        if (!strcmp(a, "--smoke"))
            cfg.m.smoke = 1;
        else if (!strcmp(a, "--ping") && i + 1 < argc)
            cfg.ping = atoi(argv[++i]);
        else if (!strcmp(a, "--ping-reps") && i + 1 < argc) {
            cfg.ping_reps = atoi(argv[++i]);
            if (cfg.ping_reps < 1 || cfg.ping_reps > METHOD_MAX_REPS)
                usage();
        }
        else if (!strcmp(a, "--filter") && i + 1 < argc)
            cfg.filter = argv[++i];
        else
            usage();
    }
    if (cfg.ping == 0 || cfg.ping > MAX_PING)
        usage();
    method_finish(&cfg.m);
    cfg.smoke = cfg.m.smoke;
    cfg.reps = cfg.m.reps;
    if (!cfg.ping_reps || cfg.ping_reps > cfg.reps)
        cfg.ping_reps = cfg.reps;
    if (cfg.ping < 0)
        cfg.ping = cfg.smoke ? 20 : cfg.m.quick ? 250 : 1000;
}

void endpoint_name(char *buf, size_t cap, const char *prefix)
{
    /* Rows make their state in the run's consumer process: its pid is
     * unique among the runs alive. */
    snprintf(buf, cap, "%seventq-bench-ipc-%d", prefix, (int)getpid());
}

/* --- the shared page and its signals ---------------------------------------------- */

static struct shared *sh;

static void futex_wake_all(_Atomic uint32_t *w)
{
    syscall(SYS_futex, w, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

static void futex_set(_Atomic uint32_t *w)
{
    atomic_store(w, 1);
    futex_wake_all(w);
}

/* Waits until *w is at least `want` (w only grows). */
static void futex_wait_at_least(_Atomic uint32_t *w, uint32_t want)
{
    for (uint32_t v; (v = atomic_load(w)) < want;)
        if (syscall(SYS_futex, w, FUTEX_WAIT, v, NULL, NULL, 0) < 0 && errno != EAGAIN &&
            errno != EINTR)
            die("futex: %s", strerror(errno));
}

/* Waits until futex_set(w). */
static void futex_wait_set(_Atomic uint32_t *w)
{
    futex_wait_at_least(w, 1);
}

static void sleep_sec(double s)
{
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
        ;
}

/* A child of the run: dies with its parent. */
static void child_of(pid_t parent)
{
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent)
        _exit(3);
}

/* --- producers and consumer ----------------------------------------------------------- */

struct prod_arg {
    const struct row *row;
    void *st;
    int p;
    enum mode mode;
    const struct run_info *ri;
    int path; /* ping: the row's index among those taking turns */
};

static void flood(const struct prod_arg *a, void *tx)
{
    uint64_t *k = checksum_k(a->ri->size);
    struct msgbuf m;
    msg_init(&m, a->ri->size, a->p, k);
    uint64_t seq = 0;
    for (;; seq++) {
        /* Timed: the stop flag looked at once per 64 messages. */
        if (a->ri->smoke ? seq == a->ri->per_prod
                         : seq % 64 == 0 &&
                               atomic_load_explicit(&sh->stop, memory_order_relaxed) != 0)
            break;
        msg_stamp(&m, a->p, seq);
        a->row->send(tx, m.d, m.size);
    }
    /* Before the end marker, which the consumer checks the count against. */
    atomic_store(&sh->sent[a->p], seq);
    msg_stamp(&m, a->p, SEQ_END);
    a->row->send(tx, m.d, m.size);
    free(m.d);
    free(k);
}

static uint32_t ping_total(void)
{
    return (uint32_t)sh->ping_warm + (uint32_t)sh->ping_n;
}

/* The producer of ping row a->path: its turns, each after the ping before
 * it was received (whichever row sent it) and a 1 ms idle gap; then, once
 * every row's pings are in, its end marker. */
static void ping(const struct prod_arg *a, void *tx)
{
    uint32_t total = ping_total();
    uint64_t msg[2];
    for (uint32_t i = 0; i < total; i++) {
        if (ping_owner(i, sh->npaths) != a->path)
            continue;
        futex_wait_at_least(&sh->acked, i);
        sleep_sec(0.001); /* the idle gap: the consumer is asleep in epoll_wait */
        msg[0] = i;
        msg[1] = mono_ns();
        a->row->send(tx, msg, sizeof msg);
    }
    futex_wait_at_least(&sh->acked, total);
    msg[0] = SEQ_END;
    msg[1] = 0;
    a->row->send(tx, msg, sizeof msg);
}

/* The CPUs the bench may use, as it started. */
static cpu_set_t all_cpus;
static int all_cpus_known;

/* Pins the calling thread to the nth CPU (0 the first) of those the bench
 * started with; nothing with fewer than two. The ping rows put their
 * consumer on the second and their producer on the first, so every row's
 * wake-up crosses between the same two CPUs: unpinned, the scheduler woke
 * some rows' consumers beside the producer and others across. */
static void pin_nth_cpu(int nth)
{
    if (!all_cpus_known || CPU_COUNT(&all_cpus) < 2)
        return;
    for (int c = 0, seen = 0; c < CPU_SETSIZE; c++) {
        if (!CPU_ISSET(c, &all_cpus) || seen++ != nth)
            continue;
        cpu_set_t one;
        CPU_ZERO(&one);
        CPU_SET(c, &one);
        if (sched_setaffinity(0, sizeof one, &one))
            die("sched_setaffinity: %s", strerror(errno));
        return;
    }
}

static void *producer_main(void *arg)
{
    struct prod_arg *a = arg;
    if (a->mode == MODE_PING)
        pin_nth_cpu(0); /* and the consumer on the second (pings_consumer_main) */
    void *tx = a->row->producer_open(a->st, a->p);
    atomic_fetch_add(&sh->ready, 1);
    futex_wait_set(&sh->go);
    if (a->mode == MODE_PING)
        ping(a, tx);
    else
        flood(a, tx);
    /* Whatever a library still buffers goes before its socket closes. */
    futex_wait_set(&sh->done);
    if (a->row->producer_close)
        a->row->producer_close(tx);
    return NULL;
}

/* The first ping from `from` on that row `path` sends; ping_total() if
 * none is left. */
static uint64_t ping_due(int path, uint64_t from)
{
    while (from < ping_total() && ping_owner(from, sh->npaths) != path)
        from++;
    return from;
}

int ping_msg(struct sink *k, const void *data, size_t len)
{
    uint64_t t1 = mono_ns();
    struct tally *t = k->t;
    atomic_store_explicit(&t->seen, atomic_load_explicit(&t->seen, memory_order_relaxed) + 1,
                          memory_order_relaxed);
    if (len != PING_SIZE) {
        tally_fail(t, "ping of %zu bytes, expected %d", len, PING_SIZE);
        return 0;
    }
    uint64_t seq = load64(data), t0 = load64((const unsigned char *)data + 8);
    if (seq == SEQ_END) {
        if (k->ping_next != ping_total())
            tally_fail(t, "ping end marker after ping %llu of %u",
                       (unsigned long long)k->ping_next, ping_total());
        t->next[0] = SEQ_END;
        return t->done = 1;
    }
    if (seq != k->ping_next)
        tally_fail(t, "ping %llu where %llu was due", (unsigned long long)seq,
                   (unsigned long long)k->ping_next);
    k->ping_next = ping_due(k->path, seq + 1);
    int p = k->path;
    if (seq >= (uint64_t)sh->ping_warm && sh->nlat[p] < MAX_PING)
        sh->lat[p][sh->nlat[p]++] = (double)(t1 - t0);
    /* The next row's turn; its producer's wake-up is not measured. */
    atomic_store(&sh->acked, (uint32_t)seq + 1);
    futex_wake_all(&sh->acked);
    return 0;
}

static uint64_t ctx_switches(int who)
{
    struct rusage ru;
    getrusage(who, &ru);
    return (uint64_t)ru.ru_nvcsw + (uint64_t)ru.ru_nivcsw;
}

/* Forks a producer process for args (a child of this process). */
static pid_t fork_producer(struct prod_arg *args)
{
    pid_t me = getpid(), kid = fork();
    if (kid < 0)
        die("fork: %s", strerror(errno));
    if (kid == 0) {
        child_of(me);
        producer_main(args);
        _exit(0);
    }
    return kid;
}

/* Waits for a producer process; writes the run's error if it failed and
 * none is written yet. Returns 0 if it ended well. */
static int reap_producer(pid_t kid, int p)
{
    int status;
    while (waitpid(kid, &status, 0) < 0)
        if (errno != EINTR)
            die("waitpid: %s", strerror(errno));
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
        return 0;
    if (!sh->error[0])
        snprintf(sh->error, sizeof sh->error, "producer process %d ended with status %#x", p,
                 status);
    return -1;
}

/* The consumer process of one throughput run; never returns. */
static void consumer_main(const struct row *row, const struct run_info *ri, pid_t harness)
{
    child_of(harness);
    setpgid(0, 0);
    int P = ri->producers;
    void *st = row->setup(ri);
    struct prod_arg args[MAX_PRODUCERS];
    pthread_t thr[MAX_PRODUCERS];
    pid_t kids[MAX_PRODUCERS];
    for (int p = 0; p < P; p++) {
        args[p] = (struct prod_arg){row, st, p, MODE_FLOOD, ri, 0};
        if (row->threads) {
            if (pthread_create(&thr[p], NULL, producer_main, &args[p]))
                die("pthread_create failed");
            continue;
        }
        kids[p] = fork_producer(&args[p]);
    }
    struct sink k = {.mode = MODE_FLOOD, .sh = sh, .t = &sh->tally};
    sh->tally.k = checksum_k(ri->size);
    atomic_fetch_add(&sh->ready, 1);
    futex_wait_set(&sh->go);
    row->consume(st, &k);
    futex_set(&sh->done);
    int bad_kid = 0;
    for (int p = 0; p < P; p++) {
        if (row->threads)
            pthread_join(thr[p], NULL);
        else
            bad_kid |= reap_producer(kids[p], p);
    }
    if (!bad_kid)
        tally_complete(&sh->tally, sh->error, sizeof sh->error);
    sh->ctxsw = (double)(ctx_switches(RUSAGE_SELF) + ctx_switches(RUSAGE_CHILDREN));
    row->teardown(st, sh->note, sizeof sh->note);
    _exit(0);
}

struct path_arg {
    const struct row *row;
    void *st;
    struct sink k;
};

static void *consume_path(void *arg)
{
    struct path_arg *a = arg;
    a->row->consume(a->st, &a->k);
    return NULL;
}

/* The consumer process of a ping run: the `n` rows of prow, each with its
 * producer and a consumer thread of its own, on the second CPU (the
 * producers on the first); never returns. */
static void pings_consumer_main(const struct row *const *prow, int n, const struct run_info *ri,
                                pid_t harness)
{
    child_of(harness);
    setpgid(0, 0);
    pin_nth_cpu(1);
    struct prod_arg args[MAX_PATHS];
    struct path_arg pa[MAX_PATHS];
    pthread_t prod_thr[MAX_PATHS], cons_thr[MAX_PATHS];
    pid_t kids[MAX_PATHS];
    for (int p = 0; p < n; p++) {
        pa[p] = (struct path_arg){prow[p], prow[p]->setup(ri), {0}};
        args[p] = (struct prod_arg){prow[p], pa[p].st, 0, MODE_PING, ri, p};
    }
    /* The processes first: a fork copies only the thread that calls it. */
    for (int p = 0; p < n; p++)
        if (!prow[p]->threads)
            kids[p] = fork_producer(&args[p]);
    for (int p = 0; p < n; p++)
        if (prow[p]->threads && pthread_create(&prod_thr[p], NULL, producer_main, &args[p]))
            die("pthread_create failed");
    for (int p = 0; p < n; p++) {
        sh->ptally[p] = (struct tally){
            .producers = 1, .size = PING_SIZE, .next = &sh->pnext[p], .wakes = -1};
        pa[p].k = (struct sink){.mode = MODE_PING, .sh = sh, .t = &sh->ptally[p], .path = p};
        pa[p].k.ping_next = ping_due(p, 0);
    }
    atomic_fetch_add(&sh->ready, 1);
    futex_wait_set(&sh->go);
    for (int p = 0; p < n; p++)
        if (pthread_create(&cons_thr[p], NULL, consume_path, &pa[p]))
            die("pthread_create failed");
    for (int p = 0; p < n; p++)
        pthread_join(cons_thr[p], NULL);
    futex_set(&sh->done);
    int bad_kid = 0;
    for (int p = 0; p < n; p++) {
        if (prow[p]->threads)
            pthread_join(prod_thr[p], NULL);
        else
            bad_kid |= reap_producer(kids[p], p);
    }
    for (int p = 0; p < n && !bad_kid && !sh->error[0]; p++) {
        char e[400];
        if (!tally_complete(&sh->ptally[p], e, sizeof e))
            snprintf(sh->error, sizeof sh->error, "%s: %s", prow[p]->label, e);
    }
    for (int p = 0; p < n; p++) {
        char note[160];
        prow[p]->teardown(pa[p].st, note, sizeof note);
    }
    _exit(0);
}

/* --- one run, from the harness ------------------------------------------------------------ */

struct result {
    double rate;  /* messages per second in the timed window */
    double ctxsw; /* per message, every process of the run, whole run */
    double wakes; /* consumer wake-ups per message, whole run */
    double p50, p99; /* ping, ns */
    double line[2]; /* the phase probe before and after the row; n_line of them */
    int n_line;
    char note[160];
    char error[600];
};

/* Messages received so far in the run, and processes set up: what the hang
 * guard watches. */
static uint64_t progress(void)
{
    uint64_t seen = atomic_load_explicit(&sh->tally.seen, memory_order_relaxed);
    for (int p = 0; p < MAX_PATHS; p++)
        seen += atomic_load_explicit(&sh->ptally[p].seen, memory_order_relaxed);
    return seen + (uint64_t)atomic_load(&sh->ready);
}

/* Waits for the run's consumer; a run with no progress for HANG_SECONDS
 * is killed. Returns 0, or -1 with the error written. */
static int wait_consumer(pid_t pid, int *status, const char *name, struct result *res)
{
    uint64_t last = UINT64_MAX;
    double since = now_sec();
    for (;;) {
        pid_t r = waitpid(pid, status, WNOHANG);
        if (r == pid)
            return 0;
        if (r < 0 && errno != EINTR)
            die("waitpid: %s", strerror(errno));
        uint64_t seen = progress();
        if (seen != last) {
            last = seen;
            since = now_sec();
        } else if (now_sec() - since > HANG_SECONDS) {
            kill(-pid, SIGKILL);
            kill(pid, SIGKILL);
            waitpid(pid, status, 0);
            snprintf(res->error, sizeof res->error,
                     "%s: no progress for %d s (%llu messages received): a hang (lost wake-up "
                     "or lost message?)",
                     name, HANG_SECONDS, (unsigned long long)progress());
            return -1;
        }
        sleep_sec(0.002);
    }
}

/* Starts the consumer process (made by the caller, pid) once it and its
 * `ready` producers are set up. Returns 0, or -1 with the error written. */
static int start_run(pid_t pid, int ready, const char *name, struct result *res)
{
    setpgid(pid, pid); /* also done by the child: whichever is first */
    double t = now_sec();
    while (atomic_load(&sh->ready) < ready) {
        int status;
        if (waitpid(pid, &status, WNOHANG) == pid) {
            snprintf(res->error, sizeof res->error,
                     "%s: the consumer process ended (status %#x) before the start", name,
                     status);
            return -1;
        }
        if (now_sec() - t > HANG_SECONDS) {
            kill(-pid, SIGKILL);
            waitpid(pid, NULL, 0);
            snprintf(res->error, sizeof res->error, "%s: not set up after %d s", name,
                     HANG_SECONDS);
            return -1;
        }
        sleep_sec(0.0005);
    }
    futex_set(&sh->go);
    return 0;
}

/* Waits for the consumer process to end. Returns 0 if the run delivered
 * everything, or -1 with the error written. */
static int end_run(pid_t pid, const char *name, struct result *res)
{
    int status;
    if (wait_consumer(pid, &status, name, res) < 0)
        return -1;
    if (!(WIFEXITED(status) && WEXITSTATUS(status) == 0)) {
        snprintf(res->error, sizeof res->error, "%s: the consumer process ended with status %#x",
                 name, status);
        return -1;
    }
    if (sh->error[0]) {
        snprintf(res->error, sizeof res->error, "%s: %s", name, sh->error);
        return -1;
    }
    return 0;
}

static pid_t fork_consumer(void)
{
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0)
        die("fork: %s", strerror(errno));
    return pid;
}

/* One throughput run of row with P producers. */
static void run_one(const struct row *row, int P, size_t size, const char *name,
                    struct result *res)
{
    memset(res, 0, sizeof *res);
    memset(sh, 0, sizeof *sh);
    struct run_info ri = {
        .producers = P,
        .size = size,
        .per_prod = cfg.smoke ? 4000 / (uint64_t)P : 0,
        .smoke = cfg.smoke,
    };
    sh->tally = (struct tally){
        .producers = P,
        .size = size,
        .per_prod = ri.per_prod,
        .next = sh->next,
        .wakes = -1,
        .expect = sh->sent,
    };
    pid_t harness = getpid(), pid = fork_consumer();
    if (pid == 0)
        consumer_main(row, &ri, harness);
    if (start_run(pid, P + 1, name, res) < 0)
        return;

    /* The timed window: after a warm-up that starts with the first message. */
    uint64_t s0 = 0, s1 = 0;
    double t0 = 0, t1 = 0;
    if (!cfg.smoke) {
        _Atomic uint64_t *seen = &sh->tally.seen;
        double t = now_sec();
        while (atomic_load_explicit(seen, memory_order_relaxed) == 0 && now_sec() - t < 10)
            sleep_sec(0.0005);
        sleep_sec(cfg.m.warm);
        t0 = now_sec();
        s0 = atomic_load_explicit(seen, memory_order_relaxed);
        do {
            sleep_sec(0.05);
            t1 = now_sec();
            s1 = atomic_load_explicit(seen, memory_order_relaxed);
        } while (t1 - t0 < cfg.m.row_time || (s1 - s0 < 1000 && t1 - t0 < 10));
        atomic_store(&sh->stop, 1);
    }
    if (end_run(pid, name, res) < 0)
        return;
    snprintf(res->note, sizeof res->note, "%s", sh->note);
    uint64_t total = atomic_load(&sh->tally.seen);
    res->rate = t1 > t0 ? (double)(s1 - s0) / (t1 - t0) : 0;
    res->ctxsw = total ? sh->ctxsw / (double)total : 0;
    res->wakes = total && sh->tally.wakes >= 0 ? (double)sh->tally.wakes / (double)total : -1;
}

/* One ping run of the n rows of prow, sampled in turn: res[p] for row p
 * (a failure of the run is each row's). */
static void run_pings(const struct row *const *prow, int n, const char *name,
                      struct result *const *res)
{
    for (int p = 0; p < n; p++)
        memset(res[p], 0, sizeof *res[p]);
    memset(sh, 0, sizeof *sh);
    struct run_info ri = {.producers = 1, .size = PING_SIZE, .smoke = cfg.smoke};
    sh->ping_warm = cfg.smoke ? 2 : PING_WARM;
    sh->ping_n = cfg.ping;
    sh->npaths = n;
    pid_t harness = getpid(), pid = fork_consumer();
    if (pid == 0)
        pings_consumer_main(prow, n, &ri, harness);
    if (start_run(pid, n + 1, name, res[0]) < 0 || end_run(pid, name, res[0]) < 0) {
        for (int p = 1; p < n; p++)
            snprintf(res[p]->error, sizeof res[p]->error, "%s", res[0]->error);
        return;
    }
    for (int p = 0; p < n; p++) {
        res[p]->p50 = quantile(sh->lat[p], sh->nlat[p], 0.5);
        res[p]->p99 = quantile(sh->lat[p], sh->nlat[p], 0.99);
    }
}

/* --- report ----------------------------------------------------------------------------------- */

/* results[group][row][rep]; ping[row][rep] */
static struct result results[N_GROUPS][MAX_ROWS][MAX_REPS];
static struct result pings[NPING][MAX_REPS];
static int counts[N_GROUPS][MAX_ROWS], ping_counts[NPING];

static int row_index(const struct row *r)
{
    for (int i = 0; i < nrows; i++)
        if (rows[i] == r)
            return i;
    return -1;
}

static struct rep_view rep_at(int gi, int row, int rep)
{
    const struct result *r = &results[gi][row][rep];
    return (struct rep_view){!r->error[0], r->rate, r->line, r->n_line};
}

/* The spread of a/b over the repetitions in which both ran. */
static struct spread rate_ratio(int gi, int a, int b)
{
    double v[MAX_REPS];
    int n = a < 0 || b < 0 ? 0 : phased_ratios(rep_at, gi, a, counts[gi][a], b, counts[gi][b], v, NULL);
    return spread_of(v, n);
}

/* A target on the ratio a/b (at least `want`), with its figures by phase. */
static void judge_ratio(const char *what, int gi, int a, int b, double want)
{
    double v[MAX_REPS];
    enum phase ph[MAX_REPS];
    int n = a < 0 || b < 0 ? 0 : phased_ratios(rep_at, gi, a, counts[gi][a], b, counts[gi][b], v, ph);
    judge_phased(&cfg.m, what, v, ph, n, want);
}

static struct spread ping_ratio(int a, int b)
{
    double v[MAX_REPS];
    int n = 0;
    for (int i = 0; i < ping_counts[a] && i < ping_counts[b]; i++) {
        const struct result *x = &pings[a][i], *y = &pings[b][i];
        if (!x->error[0] && !y->error[0] && y->p50 > 0)
            v[n++] = x->p50 / y->p50;
    }
    return spread_of(v, n);
}

static void judge(const char *what, struct spread s, double want, int at_most)
{
    print_verdict(&cfg.m, what, s, at_most, want, "x");
}

static void print_tables(void)
{
    int ref = row_index(&eq_shared_batch);
    printf("M msg/s, ns/msg: messages the consumer received in the timed window over its "
           "length; median and inter-quartile range (min-max below 5) of the repetitions. "
           "ctxsw/msg: context switches of every process of the run (consumer and producers), whole run, per message. "
           "wakes/msg: the consumer's epoll_wait returns per message. shared/row: libeventq "
           "shared (epoll + recv_batch) over this row, per repetition: median (spread); > 1 "
           "means the shared channel is faster.\n");
    for (int gi = 0; gi < N_GROUPS; gi++) {
        int any = 0;
        for (int ri = 0; ri < nrows; ri++)
            any |= counts[gi][ri] > 0;
        if (!any)
            continue;
        printf("\n== %dP1C, %zu-byte messages (%s) ==\n", GROUPS[gi].producers, GROUPS[gi].size,
               GROUPS[gi].producers == 1 ? "one producer process"
                                         : "four producer processes, one consumer process");
        printf("%-56s %8s %8s %13s %9s %9s %20s  %s\n", "row", "M msg/s", "ns/msg",
               cfg.reps >= 5 ? "IQR M/s" : "min-max M/s", "ctxsw/msg", "wakes/msg", "shared/row",
               "notes");
        for (int ri = 0; ri < nrows; ri++) {
            int n = counts[gi][ri], good = 0;
            if (!n)
                continue;
            double rates[MAX_REPS], cs[MAX_REPS], wk[MAX_REPS];
            for (int i = 0; i < n; i++) {
                const struct result *r = &results[gi][ri][i];
                if (r->error[0])
                    continue;
                rates[good] = r->rate;
                cs[good] = r->ctxsw;
                wk[good++] = r->wakes;
            }
            if (!good) {
                printf("%-56s  DELIVERY FAILED in every repetition\n", rows[ri]->label);
                continue;
            }
            struct spread s = spread_of(rates, good);
            char rate[16] = "-", ns[16] = "-", mm[32] = "-", ratio[48];
            if (s.med > 0) { /* not in smoke mode */
                snprintf(rate, sizeof rate, "%.2f", s.med / 1e6);
                snprintf(ns, sizeof ns, "%.1f", 1e9 / s.med);
                snprintf(mm, sizeof mm, "%.2f-%.2f", s.lo / 1e6, s.hi / 1e6);
            }
            fmt_spread(ratio, sizeof ratio, rate_ratio(gi, ref, ri), 2);
            printf("%-56s %8s %8s %13s %9.3f %9.4f %20s  %s%s\n", rows[ri]->label, rate, ns, mm,
                   median(cs, good), median(wk, good), ri == ref ? "-" : ratio,
                   results[gi][ri][n - 1].note,
                   good < n ? "  DELIVERY FAILED (some repetitions)" : "");
        }
    }
    int any = 0;
    for (int i = 0; i < NPING; i++)
        any |= ping_counts[i] > 0;
    if (!any)
        return;
    printf("\n== idle-gap ping, one way: 1 ms gap, then a 16-byte message stamped with "
           "CLOCK_MONOTONIC at the send; the consumer, asleep in epoll_wait, reads the clock "
           "when it holds the message. %d samples per repetition; median over repetitions, "
           "with their spread ==\n",
           cfg.ping);
    printf("%-56s %8s %15s %8s %15s %20s\n", "row", "p50 us", cfg.reps >= 5 ? "p50 IQR" : "p50 min-max",
           "p99 us", cfg.reps >= 5 ? "p99 IQR" : "p99 min-max", "shared/row p50");
    for (int i = 0; i < NPING; i++) {
        int n = ping_counts[i], good = 0;
        if (!n)
            continue;
        double p50[MAX_REPS], p99[MAX_REPS];
        for (int r = 0; r < n; r++)
            if (!pings[i][r].error[0]) {
                p50[good] = pings[i][r].p50 / 1e3;
                p99[good++] = pings[i][r].p99 / 1e3;
            }
        if (!good) {
            printf("%-56s  DELIVERY FAILED in every repetition\n", PING_ROWS[i]->label);
            continue;
        }
        struct spread a = spread_of(p50, good), b = spread_of(p99, good);
        char am[32], bm[32], ratio[48];
        snprintf(am, sizeof am, "%.1f-%.1f", a.lo, a.hi);
        snprintf(bm, sizeof bm, "%.1f-%.1f", b.lo, b.hi);
        fmt_spread(ratio, sizeof ratio, ping_ratio(0, i), 2);
        printf("%-56s %8.1f %15s %8.1f %15s %20s\n", PING_ROWS[i]->label, a.med, am, b.med, bm,
               i == 0 ? "-" : ratio);
    }
}

/* A throughput target for the shared channel over row `vs` in group gi:
 * judged on the level-triggered batch row, then shown for the EPOLLET row. */
static void judge_rate(const char *what, int gi, const struct row *vs, double want)
{
    char et[200];
    judge_ratio(what, gi, row_index(&eq_shared_batch), row_index(vs), want);
    snprintf(et, sizeof et, "%s, EPOLLET row", what);
    judge_ratio(et, gi, row_index(&eq_shared_et), row_index(vs), want);
}

static void print_targets(void)
{
    printf("\n== targets (per-repetition ratios: median and inter-quartile range, min-max "
           "below 5 repetitions; met only if the whole spread meets the target, MISSED if none "
           "of it does, unsettled if it straddles; reported, never asserted)%s. The shared "
           "channel: epoll (level-triggered) + recv_batch; its EPOLLET row below each, for "
           "comparison ==\n",
           cfg.m.quick ? " QUICK run: short rows, few repetitions" : "");
    char what[160];
    for (int gi = 0; gi < N_GROUPS; gi++) {
        if (GROUPS[gi].size != 8)
            continue;
        snprintf(what, sizeof what, "(1) %dP1C 8 B: shared / Unix SOCK_SEQPACKET",
                 GROUPS[gi].producers);
        judge_rate(what, gi, &sys_seqpacket, 5.0);
    }
    for (int gi = 0; gi < N_GROUPS; gi++) {
        if (GROUPS[gi].size != 8)
            continue;
        snprintf(what, sizeof what, "(2) %dP1C 8 B: shared / ZeroMQ ipc://",
                 GROUPS[gi].producers);
#ifdef PEERS_HAVE_ZMQ
        judge_rate(what, gi, &zmq_ipc, 2.0);
#else
        printf("target %s: ZeroMQ left out\n", what);
#endif
    }
    for (int gi = 0; gi < N_GROUPS; gi++) {
        snprintf(what, sizeof what, "(3) %dP1C %zu B: shared / in-process (recv_batch)",
                 GROUPS[gi].producers, GROUPS[gi].size);
        judge_rate(what, gi, &eq_local_batch, 0.7);
    }
    judge("(4) idle-gap ping p50: shared / in-process", ping_ratio(0, 1), 1.2, 1);
}

int main(int argc, char **argv)
{
    parse_args(argc, argv);
    setvbuf(stdout, NULL, _IOLBF, 0);
    all_cpus_known = !sched_getaffinity(0, sizeof all_cpus, &all_cpus);
    for (int l = 0; l < NLIBS; l++)
        for (int i = 0; i < LIBS[l]->nrows; i++)
            rows[nrows++] = LIBS[l]->rows[i];
    sh = mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (sh == MAP_FAILED)
        die("mmap: %s", strerror(errno));

    int planned = 0, planned_pings = 0;
    for (int gi = 0; gi < N_GROUPS; gi++)
        for (int ri = 0; ri < nrows; ri++) {
            char name[256];
            snprintf(name, sizeof name, "%dP1C %zu B %s", GROUPS[gi].producers, GROUPS[gi].size,
                     rows[ri]->label);
            planned += filtered_in(name);
        }
    for (int i = 0; i < NPING; i++) {
        char name[256];
        snprintf(name, sizeof name, "ping %s", PING_ROWS[i]->label);
        planned_pings += filtered_in(name);
    }
    /* A run's processes cost about 0.15 s beyond its window; a ping (a
     * 1 ms sleep) about 1.5 ms. */
    method_plan(&cfg.m, bench_prog, planned, 0.15,
                planned_pings * (0.1 + (cfg.ping + PING_WARM) * 0.0015));
    struct watch w;
    watch_start(&w);
    int failures = 0;
    char errors[32][640];
    /* One configuration at a time: rep 1 of each of its rows, then rep 2,
     * ..., the rows' order rotated per repetition; then the pings so. */
    for (int gi = 0; gi < N_GROUPS; gi++) {
        for (int rep = 0; rep < cfg.reps; rep++) {
            fprintf(stderr, "bench-ipc: %dP1C %zu B, repetition %d/%d\n", GROUPS[gi].producers,
                    GROUPS[gi].size, rep + 1, cfg.reps);
            for (int i = 0; i < nrows; i++) {
                int ri = method_order(i, rep, nrows);
                char name[256];
                snprintf(name, sizeof name, "%dP1C %zu B %s", GROUPS[gi].producers,
                         GROUPS[gi].size, rows[ri]->label);
                if (!filtered_in(name))
                    continue;
                struct result *res = &results[gi][ri][counts[gi][ri]++];
                /* The phase just before and just after the row. */
                double before = cfg.smoke ? -1 : line_transfer_ns(LT_PER_BURST, LT_MIN_MS);
                double a = now_sec();
                run_one(rows[ri], GROUPS[gi].producers, GROUPS[gi].size, name, res);
                double took = now_sec() - a;
                char phase[64] = "";
                probe_after(res->line, &res->n_line, before, phase, sizeof phase);
                fprintf(stderr, "  %s: %.2f M msg/s, %.2f s%s%s\n", name, res->rate / 1e6, took,
                        phase, res->error[0] ? "  DELIVERY FAILED" : "");
                if (res->error[0] && failures++ < 32)
                    snprintf(errors[failures - 1], sizeof errors[0], "%s", res->error);
            }
        }
    }
    /* The ping rows in one run per repetition, sampled in turn. */
    const struct row *prow[MAX_PATHS];
    int pidx[MAX_PATHS], npings = 0;
    for (int i = 0; i < NPING; i++) {
        char name[256];
        snprintf(name, sizeof name, "ping %s", PING_ROWS[i]->label);
        if (filtered_in(name)) {
            prow[npings] = PING_ROWS[i];
            pidx[npings++] = i;
        }
    }
    for (int rep = 0; npings && rep < cfg.ping_reps; rep++) {
        fprintf(stderr, "bench-ipc: idle-gap ping, %d rows in turn, repetition %d/%d\n", npings,
                rep + 1, cfg.ping_reps);
        struct result *res[MAX_PATHS];
        for (int p = 0; p < npings; p++)
            res[p] = &pings[pidx[p]][ping_counts[pidx[p]]++];
        double a = now_sec();
        run_pings(prow, npings, "idle-gap ping", res);
        for (int p = 0; p < npings; p++)
            fprintf(stderr, "  ping %s: p50 %.1f us, p99 %.1f us%s\n", prow[p]->label,
                    res[p]->p50 / 1e3, res[p]->p99 / 1e3,
                    res[p]->error[0] ? "  DELIVERY FAILED" : "");
        fprintf(stderr, "  %.2f s\n", now_sec() - a);
        if (res[0]->error[0] && failures++ < 32)
            snprintf(errors[failures - 1], sizeof errors[0], "%s", res[0]->error);
    }
    double elapsed = watch_stop(&w);

    char mach[512];
    machine(mach, sizeof mach);
    printf("libeventq between processes (C, through libeventq's C ABI)%s\n",
           cfg.smoke ? " (SMOKE: tiny counts, figures meaningless)" : "");
    printf("machine: %s\n", mach);
    printf("libraries:");
    for (int l = 0; l < NLIBS; l++)
        printf("%s %s %s", l ? "," : "", LIBS[l]->name, LIBS[l]->version());
    printf("\n");
#ifndef PEERS_HAVE_ZMQ
    printf("LEFT OUT: ZeroMQ (pkg-config module libzmq not found when this was built); "
           "install it with: apt-get install libzmq3-dev, then make bench-ipc again\n");
#endif
#ifndef PEERS_HAVE_NNG
    printf("LEFT OUT: nng (<nng/nng.h> and -lnng not found when this was built); install it "
           "with: apt-get install libnng-dev, then make bench-ipc again\n");
#endif
    printf("iceoryx2: not a row here (a Rust library); benches/ipc-iceoryx2 measures it "
           "against the shared channel in the same way: make bench-ipc-iceoryx2\n");
    char window[64] = "a fixed count";
    if (!cfg.smoke)
        snprintf(window, sizeof window, "a %.2f s window", cfg.m.row_time);
    printf("build: %s; %s per row and repetition (after a %.2f s warm-up), capacity %d for "
           "libeventq, %d repetitions interleaved per configuration%s; %.0f s\n",
#ifdef __OPTIMIZE__
           "optimised",
#else
           "NOT OPTIMISED (figures not representative)",
#endif
           window, cfg.m.warm, CAPACITY, cfg.reps,
           cfg.m.quick ? " (QUICK: short rows, few repetitions)" : "", elapsed);
    watch_report(&w);
    printf("\n");
    print_tables();
    printf("\n");
    if (cfg.smoke)
        printf("== targets: not evaluated in smoke mode ==\n");
    else
        print_targets();
    if (failures) {
        printf("\nDELIVERY FAILURES (%d):\n", failures);
        for (int i = 0; i < failures && i < 32; i++)
            printf("  %s\n", errors[i]);
        return 1;
    }
    printf("delivery: every run delivered every message exactly once, whole and in order\n");
    return 0;
}
