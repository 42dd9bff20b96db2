/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * bench-peers: libeventq, through its C ABI, against the libraries a C
 * programmer would pick instead to move messages from threads into an event
 * loop: libuv (uv_async_send and a mutex-protected queue, bounded and
 * unbounded), ZeroMQ (inproc PUSH/PULL, ZMQ_FD in epoll), nng (inproc
 * push/pull, NNG_OPT_RECVFD in epoll) and GLib (GAsyncQueue and a GSource
 * on a GMainLoop), each built against the distribution's library.
 *
 * Configurations: 1P1C and 4P1C (producer threads in this process, one
 * consumer), 8-byte and 1 KiB messages. The method is the one every rate
 * bench shares (peers.h, struct method): a row runs for a time, not a
 * count (the producers send until told to stop; the rate is what the
 * consumer received in a window of --row-time seconds, default 0.5, after
 * a warm-up of a fifth of that); the rows of one configuration run
 * repetition by repetition (--reps, default 5), in an order rotated per
 * repetition. Each row reports the median rate and its inter-quartile
 * range; the ratios are libeventq/peer (> 1: libeventq is faster), taken
 * within each repetition. A summary at the end judges the loop's targets
 * on the spread of the per-repetition ratios: at least 0.8x the epoll path
 * and 1.5x libuv's bounded async queue (met, MISSED or unsettled).
 *
 * Every consumer checks every message (peers.h): exactly once, in
 * per-producer order, whole (length, header = trailer and a checksum of
 * the 1 KiB payload). The program exits 1 if any configuration failed to
 * deliver, 2 on an error of a library call; it never checks a timing.
 *
 *   peers [--smoke | --selftest] [--quick] [--reps N] [--row-time S] [--warm S] [--msgs N]
 *         [--filter TEXT]
 *
 * --smoke: a fixed tiny count (--msgs, default 4000), one repetition
 * (make test's bench-peers-smoke). --quick: 3 repetitions of 0.2 s.
 * --selftest: smoke counts, with faults injected into the streams (a lost,
 * duplicated, swapped, corrupted or short message): fails unless the
 * check reports every one.
 * --filter: only rows whose "<config> <size> B <label>" contains TEXT, or
 * one of its '|'-separated alternatives.
 */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include <eventq.h>

#include "peers.h"
#include "../probe/line_transfer.h"

const char *const bench_prog = "bench-peers";

/* --- the libraries --------------------------------------------------------- */

/* Every peer library, built in or not: a missing one is named with the
 * package that brings it, never left out silently. */
struct known {
    const char *name;
    const char *module; /* pkg-config module */
    const char *apt;    /* Debian package */
    const struct family *fam;
};

static const struct known KNOWN[] = {
    {"libuv", "libuv", "libuv1-dev",
#ifdef PEERS_HAVE_UV
     &family_uv
#else
     NULL
#endif
    },
    {"ZeroMQ", "libzmq", "libzmq3-dev",
#ifdef PEERS_HAVE_ZMQ
     &family_zmq
#else
     NULL
#endif
    },
    {"nng", "nng", "libnng-dev",
#ifdef PEERS_HAVE_NNG
     &family_nng
#else
     NULL
#endif
    },
    {"GLib", "glib-2.0", "libglib2.0-dev",
#ifdef PEERS_HAVE_GLIB
     &family_glib
#else
     NULL
#endif
    },
};
#define NKNOWN (int)(sizeof KNOWN / sizeof KNOWN[0])

#define MAX_ROWS 16
static const struct peer *rows[MAX_ROWS];
static int nrows;

static void add_family(const struct family *f)
{
    for (int i = 0; i < f->nrows; i++) {
        if (nrows == MAX_ROWS)
            die("too many rows");
        rows[nrows++] = f->rows[i];
    }
}

static int row_index(const struct peer *p)
{
    for (int i = 0; i < nrows; i++)
        if (rows[i] == p)
            return i;
    return -1;
}

/* --- configuration --------------------------------------------------------- */

#define MAX_REPS METHOD_MAX_REPS
/* The most producers of a configuration (GROUPS). */
#define MAX_PROD 4
/* The producers look at the stop flag once per this many messages. */
#define STOP_EVERY 64

static struct {
    struct method m;
    int smoke;
    int selftest;
    uint64_t msgs;
    int reps;
    const char *filter;
} cfg;

static int filtered_in(const char *name)
{
    return filter_match(cfg.filter, name);
}

static void usage(void)
{
    fprintf(stderr, "usage: peers [--smoke | --selftest] [--quick] [--reps N] [--row-time S] [--warm S] "
                    "[--msgs N] [--filter TEXT]\n");
    exit(2);
}

static void parse_args(int argc, char **argv)
{
    long long msgs = -1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (method_arg(&cfg.m, argc, argv, &i))
            continue;
        if (!strcmp(a, "--smoke"))
            cfg.m.smoke = 1;
        else if (!strcmp(a, "--selftest"))
            cfg.selftest = cfg.m.smoke = 1;
        else if (!strcmp(a, "--msgs") && i + 1 < argc)
            msgs = atoll(argv[++i]);
        else if (!strcmp(a, "--filter") && i + 1 < argc)
            cfg.filter = argv[++i];
        else
            usage();
    }
    if (msgs != -1 && msgs < 1)
        usage();
    method_finish(&cfg.m);
    cfg.smoke = cfg.m.smoke;
    cfg.reps = cfg.m.reps;
    cfg.msgs = msgs > 0 ? (uint64_t)msgs : 4000;
}

static void group_name(const struct group *g, char *buf, size_t cap)
{
    snprintf(buf, cap, "%dP1C", g->producers);
}

/* --- one run ---------------------------------------------------------------- */

/* --selftest: faults one producer injects into its own stream, which the
 * consumer's check must report (a checker that sees nothing would let the
 * smoke stage pass whatever the queues did). */
enum fault { FAULT_NONE, FAULT_LOSE, FAULT_DUPLICATE, FAULT_REORDER, FAULT_CORRUPT, FAULT_TRUNCATE };
static const char *const FAULT_NAMES[] = {"none", "lose one message", "duplicate one message",
                                          "swap two messages", "flip a payload bit",
                                          "send one byte short"};
#define NFAULTS 6

struct run {
    const struct peer *peer;
    void *st;
    struct run_info ri;
    enum fault fault;
    uint64_t fault_at;
    const uint64_t *k;
    pthread_barrier_t start;
    /* Timed runs: the producers stop at this flag, and each stores how
     * many messages it sent before its end marker (the tally's expect). */
    _Atomic int stop;
    _Atomic uint64_t sent[MAX_PROD];
    struct tally tally;
    struct timespec done_at;
};

struct prod_arg {
    struct run *r;
    int p;
};

static void send_one(struct run *r, void *tx, struct msgbuf *m, int p, uint64_t seq)
{
    msg_stamp(m, p, seq);
    if (r->fault == FAULT_NONE || p != 0 || seq < r->fault_at || seq > r->fault_at + 1) {
        r->peer->send(tx, m->d, m->size);
        return;
    }
    int first = seq == r->fault_at;
    switch (r->fault) {
    case FAULT_LOSE:
        if (!first)
            r->peer->send(tx, m->d, m->size);
        break;
    case FAULT_DUPLICATE:
        r->peer->send(tx, m->d, m->size);
        if (first)
            r->peer->send(tx, m->d, m->size);
        break;
    case FAULT_REORDER: /* seq+1 goes first, then seq */
        if (first) {
            msg_stamp(m, p, seq + 1);
            r->peer->send(tx, m->d, m->size);
            msg_stamp(m, p, seq);
            r->peer->send(tx, m->d, m->size);
        }
        break;
    case FAULT_CORRUPT: /* a payload bit, or a bit of the header at 8 bytes */
        m->d[m->size >= 24 ? m->size / 2 : 5] ^= first ? 0x10 : 0;
        r->peer->send(tx, m->d, m->size);
        m->d[m->size >= 24 ? m->size / 2 : 5] ^= first ? 0x10 : 0;
        break;
    case FAULT_TRUNCATE:
        r->peer->send(tx, m->d, first ? m->size - 1 : m->size);
        break;
    case FAULT_NONE:
        break;
    }
}

static void *producer_main(void *arg)
{
    struct prod_arg *a = arg;
    struct run *r = a->r;
    const struct peer *peer = r->peer;
    struct msgbuf m;
    msg_init(&m, r->ri.size, a->p, r->k);
    void *tx = peer->producer_open(r->st, a->p);
    pthread_barrier_wait(&r->start);
    /* Smoke: a fixed count. Timed: until the harness says stop, looked at
     * once per STOP_EVERY messages (off the per-message path). */
    uint64_t limit = r->ri.smoke ? r->ri.per_prod : UINT64_MAX, seq = 0;
    for (; seq < limit; seq++) {
        if (seq % STOP_EVERY == 0 && atomic_load_explicit(&r->stop, memory_order_relaxed))
            break;
        send_one(r, tx, &m, a->p, seq);
    }
    atomic_store(&r->sent[a->p], seq);
    msg_stamp(&m, a->p, SEQ_END);
    peer->send(tx, m.d, m.size);
    if (peer->producer_close)
        peer->producer_close(tx);
    free(m.d);
    return NULL;
}

static void *consumer_main(void *arg)
{
    struct run *r = arg;
    pthread_barrier_wait(&r->start);
    r->peer->consume(r->st, &r->tally);
    clock_gettime(CLOCK_MONOTONIC, &r->done_at);
    return NULL;
}

/* Hang guard: a run that makes no progress for this long is reported as a
 * hang (a lost wake-up or a lost end marker) and fails the program, instead
 * of a stuck make test. No figure depends on it. */
#define HANG_SECONDS 60
static _Atomic uint64_t g_phase;
static _Atomic(struct tally *) g_tally;
static char g_name[256];
static pthread_mutex_t g_name_mu = PTHREAD_MUTEX_INITIALIZER;

/* The guard reads the tally under g_name_mu, so once this returns with t
 * NULL the previous tally may be freed. */
static void progress(const char *name, struct tally *t)
{
    pthread_mutex_lock(&g_name_mu);
    snprintf(g_name, sizeof g_name, "%s", name);
    atomic_store(&g_tally, t);
    atomic_fetch_add(&g_phase, 1);
    pthread_mutex_unlock(&g_name_mu);
}

static void *hang_guard(void *arg)
{
    (void)arg;
    uint64_t last_phase = UINT64_MAX, last_seen = 0;
    int still = 0;
    for (;;) {
        sleep(1);
        pthread_mutex_lock(&g_name_mu);
        uint64_t phase = atomic_load(&g_phase);
        struct tally *t = atomic_load(&g_tally);
        uint64_t seen = t ? atomic_load_explicit(&t->seen, memory_order_relaxed) : 0;
        pthread_mutex_unlock(&g_name_mu);
        if (phase != last_phase || seen != last_seen) {
            last_phase = phase;
            last_seen = seen;
            still = 0;
            continue;
        }
        if (++still >= HANG_SECONDS) {
            pthread_mutex_lock(&g_name_mu);
            fprintf(stderr,
                    "bench-peers: no progress for %d s in %s (%llu messages received): "
                    "a hang (lost wake-up or lost message?)\n",
                    HANG_SECONDS, g_name, (unsigned long long)seen);
            fflush(stderr);
            _exit(1);
        }
    }
    return NULL;
}

struct result {
    double rate; /* messages per second, consumer side, timed window */
    double ctxsw;
    double wakes; /* per message; < 0: not counted */
    double line[2]; /* the phase probe before and after the row; n_line of them */
    int n_line;
    char note[128];
    char error[320];
};

static uint64_t ctx_switches(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (uint64_t)ru.ru_nvcsw + (uint64_t)ru.ru_nivcsw;
}

static void run_one(const struct peer *peer, const struct group *g, const char *name,
                    enum fault fault, struct result *res)
{
    struct run *r = xmalloc(sizeof *r);
    memset(r, 0, sizeof *r);
    memset(res, 0, sizeof *res);
    int P = g->producers;
    r->peer = peer;
    r->ri = (struct run_info){
        .producers = P,
        .size = g->size,
        .per_prod = cfg.msgs / (uint64_t)P < 20 ? 20 : cfg.msgs / (uint64_t)P,
        .smoke = cfg.smoke,
    };
    r->fault = fault;
    r->fault_at = r->ri.per_prod / 2;
    r->k = checksum_k(g->size);
    r->tally = (struct tally){
        .producers = P,
        .size = g->size,
        .per_prod = r->ri.per_prod,
        .k = r->k,
        .next = xmalloc(P * sizeof(uint64_t)),
        .wakes = -1,
        .expect = r->sent,
    };
    for (int p = 0; p < P; p++)
        r->tally.next[p] = 0;
    pthread_barrier_init(&r->start, NULL, (unsigned)P + 2);
    progress(name, &r->tally);

    r->st = peer->setup(&r->ri);
    pthread_t cons, prods[P];
    struct prod_arg args[P];
    if (pthread_create(&cons, NULL, consumer_main, r))
        die("pthread_create failed");
    for (int p = 0; p < P; p++) {
        args[p] = (struct prod_arg){r, p};
        if (pthread_create(&prods[p], NULL, producer_main, &args[p]))
            die("pthread_create failed");
    }
    pthread_barrier_wait(&r->start);
    /* The window: what the consumer received between two readings of its
     * count, a warm-up after the start, row_time apart; then stop. */
    _Atomic uint64_t *seen = &r->tally.seen;
    double t0 = now_sec(), t1 = t0;
    uint64_t c0 = ctx_switches(), c1 = c0, s0 = 0, s1 = 0;
    if (!cfg.smoke) {
        sleep_for(cfg.m.warm);
        c0 = ctx_switches();
        t0 = now_sec();
        s0 = atomic_load_explicit(seen, memory_order_relaxed);
        sleep_for(cfg.m.row_time);
        t1 = now_sec();
        s1 = atomic_load_explicit(seen, memory_order_relaxed);
        c1 = ctx_switches();
        atomic_store(&r->stop, 1);
    }
    for (int p = 0; p < P; p++)
        pthread_join(prods[p], NULL);
    pthread_join(cons, NULL);
    progress(name, NULL); /* teardown */
    uint64_t total = atomic_load(seen);
    if (cfg.smoke) { /* the whole run: figures meaningless, never judged */
        t1 = ts_sec(&r->done_at);
        s1 = total;
        c1 = ctx_switches();
    }
    double secs = t1 - t0;
    uint64_t timed = s1 - s0;
    res->rate = secs > 0 ? (double)timed / secs : 0;
    res->ctxsw = timed ? (double)(c1 - c0) / (double)timed : 0;
    res->wakes = r->tally.wakes < 0 ? -1 : (double)r->tally.wakes / (double)total;

    struct tally *t = &r->tally;
    tally_complete(t, res->error, sizeof res->error);
    peer->teardown(r->st, res->note, sizeof res->note);
    pthread_barrier_destroy(&r->start);
    free(t->next);
    free((void *)r->k);
    free(r);
}

/* --- report -------------------------------------------------------------------- */

/* results[group][row][rep] */
static struct result *results;
static int counts[N_GROUPS][MAX_ROWS];

static struct result *res_at(int gi, int ri, int rep)
{
    return &results[((size_t)gi * MAX_ROWS + ri) * MAX_REPS + rep];
}

static struct rep_view rep_at(int gi, int row, int rep)
{
    const struct result *r = res_at(gi, row, rep);
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

/* Every fault through every row of every configuration (smoke counts): each
 * must be reported as a delivery failure. Returns the exit status. */
static int selftest(void)
{
    int missed = 0, runs = 0;
    for (int gi = 0; gi < N_GROUPS; gi++) {
        char gname[16];
        group_name(&GROUPS[gi], gname, sizeof gname);
        for (int ri = 0; ri < nrows; ri++) {
            for (int f = 1; f < NFAULTS; f++) {
                char name[320];
                snprintf(name, sizeof name, "%s %zu B %s, fault: %s", gname, GROUPS[gi].size,
                         rows[ri]->label, FAULT_NAMES[f]);
                if (!filtered_in(name))
                    continue;
                struct result res;
                run_one(rows[ri], &GROUPS[gi], name, (enum fault)f, &res);
                runs++;
                if (res.error[0]) {
                    printf("  caught  %s: %s\n", name, res.error);
                } else {
                    printf("  MISSED  %s: delivery reported as correct\n", name);
                    missed++;
                }
            }
        }
    }
    if (missed) {
        printf("selftest: the check missed %d of %d injected faults\n", missed, runs);
        return 1;
    }
    printf("selftest: the check caught all %d injected faults\n", runs);
    return 0;
}

int main(int argc, char **argv)
{
    parse_args(argc, argv);
    setvbuf(stdout, NULL, _IOLBF, 0);
    add_family(&family_eventq);
    for (int i = 0; i < NKNOWN; i++)
        if (KNOWN[i].fam)
            add_family(KNOWN[i].fam);
    results = calloc((size_t)N_GROUPS * MAX_ROWS * MAX_REPS, sizeof *results);
    if (!results)
        die("out of memory");
    pthread_t guard;
    if (pthread_create(&guard, NULL, hang_guard, NULL))
        die("pthread_create failed");
    pthread_detach(guard);
    if (cfg.selftest)
        return selftest();

    int planned = 0;
    for (int gi = 0; gi < N_GROUPS; gi++)
        for (int ri = 0; ri < nrows; ri++) {
            char gname[16], name[256];
            group_name(&GROUPS[gi], gname, sizeof gname);
            snprintf(name, sizeof name, "%s %zu B %s", gname, GROUPS[gi].size, rows[ri]->label);
            planned += filtered_in(name);
        }
    method_plan(&cfg.m, bench_prog, planned, 0.05, 0);
    struct watch w;
    watch_start(&w);

    /* One configuration at a time: rep 1 of each of its rows, then rep 2,
     * ..., the rows' order rotated per repetition. */
    int failures = 0;
    char errors[64][640];
    for (int gi = 0; gi < N_GROUPS; gi++) {
        char gname[16];
        group_name(&GROUPS[gi], gname, sizeof gname);
        for (int rep = 0; rep < cfg.reps; rep++) {
            fprintf(stderr, "bench-peers: %s %zu B, repetition %d/%d\n", gname, GROUPS[gi].size,
                    rep + 1, cfg.reps);
            for (int i = 0; i < nrows; i++) {
                int ri = method_order(i, rep, nrows);
                char name[256];
                snprintf(name, sizeof name, "%s %zu B %s", gname, GROUPS[gi].size,
                         rows[ri]->label);
                if (!filtered_in(name))
                    continue;
                struct result *res = res_at(gi, ri, counts[gi][ri]++);
                /* The phase just before and just after the row. */
                double before = cfg.smoke ? -1 : line_transfer_ns(LT_PER_BURST, LT_MIN_MS);
                struct timespec a, b;
                clock_gettime(CLOCK_MONOTONIC, &a);
                run_one(rows[ri], &GROUPS[gi], name, FAULT_NONE, res);
                clock_gettime(CLOCK_MONOTONIC, &b);
                char phase[64] = "";
                probe_after(res->line, &res->n_line, before, phase, sizeof phase);
                fprintf(stderr, "  %s: %.2f M msg/s, %.2f s%s%s\n", name, res->rate / 1e6,
                        ts_sec(&b) - ts_sec(&a), phase,
                        res->error[0] ? "  DELIVERY FAILED" : "");
                if (res->error[0]) {
                    if (failures < 64)
                        snprintf(errors[failures], sizeof errors[0], "%s: %s", name,
                                 res->error);
                    failures++;
                }
            }
        }
    }
    double elapsed = watch_stop(&w);

    char mach[512];
    machine(mach, sizeof mach);
    printf("libeventq peer benchmark (C, through libeventq's C ABI)%s\n",
           cfg.smoke ? " (SMOKE: tiny counts, figures meaningless)" : "");
    printf("machine: %s\n", mach);
    printf("libraries: libeventq %s", family_eventq.version());
    for (int i = 0; i < NKNOWN; i++)
        if (KNOWN[i].fam)
            printf(", %s %s", KNOWN[i].name, KNOWN[i].fam->version());
    printf("\n");
#ifdef PEERS_NNG_NO_PC
    printf("(nng: the distribution's libnng-dev has no pkg-config module; found by compiling "
           "against <nng/nng.h> and -lnng)\n");
#endif
    int missing = 0;
    for (int i = 0; i < NKNOWN; i++)
        if (!KNOWN[i].fam) {
            printf("LEFT OUT: %s (pkg-config module %s not found when this was built); "
                   "install it with: apt-get install %s, then make bench-peers again\n",
                   KNOWN[i].name, KNOWN[i].module, KNOWN[i].apt);
            missing++;
        }
    if (cfg.smoke)
        printf("build: %s; %llu messages per configuration (smoke), capacity %d; %.0f s\n",
#ifdef __OPTIMIZE__
               "optimised",
#else
               "NOT OPTIMISED (figures not representative)",
#endif
               (unsigned long long)cfg.msgs, CAPACITY, elapsed);
    else
        printf("build: %s; each row a %.2f s window after a %.2f s warm-up, capacity %d for "
               "the bounded queues, %d repetitions interleaved per configuration%s; %.0f s\n",
#ifdef __OPTIMIZE__
               "optimised",
#else
               "NOT OPTIMISED (figures not representative)",
#endif
               cfg.m.row_time, cfg.m.warm, CAPACITY, cfg.reps,
               cfg.m.quick ? " (QUICK: short rows, few repetitions)" : "", elapsed);
    watch_report(&w);
    printf("\n");
    printf("M msg/s, ns/msg: messages the consumer received in the timed window over its "
           "length; median of the repetitions, with their inter-quartile range (min-max below "
           "5 repetitions). ctxsw/msg: process context switches per message in the window. "
           "wakes/msg: consumer wake-ups (epoll_wait returns, async callbacks, GSource "
           "dispatches) per message; - where the loop hides them. epoll/peer and loop/peer: "
           "the rate of libeventq's epoll + eventq_chan_recv row and of its loop row (budget "
           "%d) over this row's, per repetition: median (spread); > 1 means libeventq is "
           "faster.\n",
           EVENTQ_DEFAULT_BUDGET);

    int ref_epoll = row_index(&eq_epoll), ref_loop = row_index(&eq_loop);
    for (int gi = 0; gi < N_GROUPS; gi++) {
        int any = 0;
        for (int ri = 0; ri < nrows; ri++)
            any |= counts[gi][ri] > 0;
        if (!any)
            continue;
        char gname[16];
        group_name(&GROUPS[gi], gname, sizeof gname);
        printf("\n== %s, %zu-byte messages ==\n", gname, GROUPS[gi].size);
        printf("%-50s %8s %8s %13s %9s %9s %18s %18s  %s\n", "peer", "M msg/s", "ns/msg",
               cfg.reps >= 5 ? "IQR M/s" : "min-max M/s", "ctxsw/msg", "wakes/msg",
               "epoll/peer", "loop/peer", "notes");
        for (int ri = 0; ri < nrows; ri++) {
            int n = counts[gi][ri];
            if (!n)
                continue;
            double rates[MAX_REPS], cs[MAX_REPS], wk[MAX_REPS];
            int failed = 0, wn = 0;
            for (int i = 0; i < n; i++) {
                struct result *r = res_at(gi, ri, i);
                rates[i] = r->rate;
                cs[i] = r->ctxsw;
                if (r->wakes >= 0)
                    wk[wn++] = r->wakes;
                failed |= r->error[0] != 0;
            }
            struct spread rs = spread_of(rates, n);
            char mm[32], w[16], e[48], l[48];
            snprintf(mm, sizeof mm, "%.2f-%.2f", rs.lo / 1e6, rs.hi / 1e6);
            if (wn)
                snprintf(w, sizeof w, "%.4f", median(wk, wn));
            else
                snprintf(w, sizeof w, "-");
            fmt_spread(e, sizeof e, rate_ratio(gi, ref_epoll, ri), 2);
            fmt_spread(l, sizeof l, rate_ratio(gi, ref_loop, ri), 2);
            printf("%-50s %8.2f %8.1f %13s %9.4f %9s %18s %18s  %s%s\n", rows[ri]->label,
                   rs.med / 1e6, 1e9 / rs.med, mm, median(cs, n), w, ri == ref_epoll ? "-" : e,
                   ri == ref_loop ? "-" : l, res_at(gi, ri, n - 1)->note,
                   failed ? "  DELIVERY FAILED" : "");
        }
    }

    /* Targets of libeventq's loop path, on the per-repetition ratios:
     * reported, never asserted. Numbered as in side_by_side's summary,
     * which judges the others. */
    printf("\n");
    if (cfg.smoke) {
        printf("== targets: not evaluated in smoke mode ==\n");
    } else {
        printf("== targets (per-repetition ratios: median and inter-quartile range, min-max "
               "below 5 repetitions; met when the whole spread meets the goal, MISSED when "
               "none of it does, unsettled when it straddles; reported, never asserted)%s ==\n",
               cfg.m.quick ? " QUICK run: short rows, few repetitions" : "");
#ifdef PEERS_HAVE_UV
        int ref_uv = row_index(&uv_bounded);
#else
        int ref_uv = -1;
#endif
        for (int gi = 0; gi < N_GROUPS; gi++) {
            char gname[16], what[160];
            group_name(&GROUPS[gi], gname, sizeof gname);
            struct {
                const char *vs;
                int row;
                double want;
            } t[2] = {
                {"epoll + eventq_chan_recv", ref_epoll, 0.8},
                {"libuv bounded async queue", ref_uv, 1.5},
            };
            for (int i = 0; i < 2; i++) {
                snprintf(what, sizeof what, "(%d) %s %zu B: loop (add_chan, budget %d) / %s", i + 1,
                         gname, GROUPS[gi].size, EVENTQ_DEFAULT_BUDGET, t[i].vs);
                if (i == 1 && ref_uv < 0) {
                    printf("target %s: libuv left out\n", what);
                    continue;
                }
                judge_ratio(what, gi, ref_loop, t[i].row, t[i].want);
            }
        }
    }

    if (missing)
        printf("\n%d peer librar%s left out (see LEFT OUT above): their rows are missing\n",
               missing, missing == 1 ? "y" : "ies");
    if (failures) {
        printf("\nDELIVERY FAILURES (%d):\n", failures);
        for (int i = 0; i < failures && i < 64; i++)
            printf("  %s\n", errors[i]);
        return 1;
    }
    printf("delivery: every configuration delivered every message exactly once, whole and in "
           "order\n");
    return 0;
}
