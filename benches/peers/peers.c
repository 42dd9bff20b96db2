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
 * consumer), 8-byte and 1 KiB messages; --msgs messages per configuration
 * (default 500,000, split among the producers; the first 10% are warm-up),
 * --reps repetitions (default 5), interleaved: every row of every
 * configuration once, then again, so a burst of load elsewhere spreads
 * over all rows. Each row reports the median rate and its spread; the
 * ratios are libeventq/peer (> 1: libeventq is faster). A summary at the
 * end judges the loop's targets from these medians: at least 0.8x the
 * epoll path and 1.5x libuv's bounded async queue.
 *
 * Every consumer checks every message (peers.h): exactly once, in
 * per-producer order, whole (length, header = trailer and a checksum of
 * the 1 KiB payload). The program exits 1 if any configuration failed to
 * deliver, 2 on an error of a library call; it never checks a timing.
 *
 *   peers [--smoke] [--msgs N] [--reps N] [--filter TEXT]
 *
 * --smoke: tiny counts, one repetition (make test's bench-peers-smoke).
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

#define MAX_REPS 100

static struct {
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
    fprintf(stderr, "usage: peers [--smoke | --selftest] [--msgs N] [--reps N] [--filter TEXT]\n");
    exit(2);
}

static void parse_args(int argc, char **argv)
{
    long long msgs = -1, reps = -1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--smoke"))
            cfg.smoke = 1;
        else if (!strcmp(a, "--selftest"))
            cfg.selftest = cfg.smoke = 1;
        else if (!strcmp(a, "--msgs") && i + 1 < argc)
            msgs = atoll(argv[++i]);
        else if (!strcmp(a, "--reps") && i + 1 < argc)
            reps = atoll(argv[++i]);
        else if (!strcmp(a, "--filter") && i + 1 < argc)
            cfg.filter = argv[++i];
        else
            usage();
    }
    cfg.smoke |= smoke_from_env();
    if ((msgs != -1 && msgs < 1) || (reps != -1 && (reps < 1 || reps > MAX_REPS)))
        usage();
    cfg.msgs = msgs > 0 ? (uint64_t)msgs : cfg.smoke ? 4000 : 500000;
    cfg.reps = reps > 0 ? (int)reps : cfg.smoke ? 1 : 5;
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
    uint64_t warm;
    const uint64_t *k;
    pthread_barrier_t start, warmed, go;
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
    for (uint64_t seq = 0; seq < r->warm; seq++)
        send_one(r, tx, &m, a->p, seq);
    pthread_barrier_wait(&r->warmed);
    pthread_barrier_wait(&r->go);
    for (uint64_t seq = r->warm; seq < r->ri.per_prod; seq++)
        send_one(r, tx, &m, a->p, seq);
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
    r->warm = r->ri.per_prod / 10;
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
    };
    for (int p = 0; p < P; p++)
        r->tally.next[p] = 0;
    pthread_barrier_init(&r->start, NULL, (unsigned)P + 2);
    pthread_barrier_init(&r->warmed, NULL, (unsigned)P + 1);
    pthread_barrier_init(&r->go, NULL, (unsigned)P + 1);
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
    pthread_barrier_wait(&r->warmed);
    struct timespec t0;
    uint64_t c0 = ctx_switches();
    clock_gettime(CLOCK_MONOTONIC, &t0);
    uint64_t seen0 = atomic_load_explicit(&r->tally.seen, memory_order_relaxed);
    pthread_barrier_wait(&r->go);
    for (int p = 0; p < P; p++)
        pthread_join(prods[p], NULL);
    pthread_join(cons, NULL);
    uint64_t c1 = ctx_switches();
    progress(name, NULL); /* teardown */

    /* Every message the consumer took after the clock started (the rest of
     * the warm-up included: what a queue holds is work it still has to
     * deliver), over the time until it had the last one. */
    uint64_t total = (uint64_t)P * (r->ri.per_prod + 1);
    uint64_t timed = total - seen0;
    double secs = ts_sec(&r->done_at) - ts_sec(&t0);
    res->rate = secs > 0 ? (double)timed / secs : 0;
    res->ctxsw = (double)(c1 - c0) / (double)timed;
    res->wakes = r->tally.wakes < 0 ? -1 : (double)r->tally.wakes / (double)total;

    struct tally *t = &r->tally;
    tally_complete(t, res->error, sizeof res->error);
    peer->teardown(r->st, res->note, sizeof res->note);
    pthread_barrier_destroy(&r->start);
    pthread_barrier_destroy(&r->warmed);
    pthread_barrier_destroy(&r->go);
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

static double median_rate(int gi, int ri)
{
    if (ri < 0)
        return NAN;
    double v[MAX_REPS];
    int n = counts[gi][ri];
    for (int i = 0; i < n; i++)
        v[i] = res_at(gi, ri, i)->rate;
    return median(v, n);
}

static void fmt_ratio(char *buf, size_t cap, double a, double b)
{
    if (isnan(a) || isnan(b) || b <= 0)
        snprintf(buf, cap, "-");
    else
        snprintf(buf, cap, "%.2f", a / b);
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

    struct watch w;
    watch_start(&w);

    int failures = 0;
    char errors[64][640];
    for (int rep = 0; rep < cfg.reps; rep++) {
        fprintf(stderr, "bench-peers: repetition %d/%d\n", rep + 1, cfg.reps);
        for (int gi = 0; gi < N_GROUPS; gi++) {
            char gname[16];
            group_name(&GROUPS[gi], gname, sizeof gname);
            for (int ri = 0; ri < nrows; ri++) {
                char name[256];
                snprintf(name, sizeof name, "%s %zu B %s", gname, GROUPS[gi].size,
                         rows[ri]->label);
                if (!filtered_in(name))
                    continue;
                struct result *res = res_at(gi, ri, counts[gi][ri]++);
                struct timespec a, b;
                clock_gettime(CLOCK_MONOTONIC, &a);
                run_one(rows[ri], &GROUPS[gi], name, FAULT_NONE, res);
                clock_gettime(CLOCK_MONOTONIC, &b);
                fprintf(stderr, "  %s: %.2f M msg/s, %.2f s%s\n", name, res->rate / 1e6,
                        ts_sec(&b) - ts_sec(&a), res->error[0] ? "  DELIVERY FAILED" : "");
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
    printf("build: %s; %llu messages per configuration (10%% warm-up), capacity %d for the "
           "bounded queues, median of %d run(s); %.0f s\n",
#ifdef __OPTIMIZE__
           "optimised",
#else
           "NOT OPTIMISED (figures not representative)",
#endif
           (unsigned long long)cfg.msgs, CAPACITY, cfg.reps, elapsed);
    watch_report(&w);
    printf("\n");
    printf("M msg/s, ns/msg: messages the consumer received in the timed window (after "
           "warm-up) over the time it took; median and min-max of the runs. ctxsw/msg: "
           "process context switches per message. wakes/msg: consumer wake-ups (epoll_wait "
           "returns, async callbacks, GSource dispatches) per message; - where the loop "
           "hides them. epoll/peer and loop/peer: the median rate of libeventq's epoll + "
           "eventq_chan_recv row and of its loop row (budget %d) over this row's: > 1 means "
           "libeventq is faster.\n",
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
        printf("%-50s %8s %8s %13s %9s %9s %10s %9s  %s\n", "peer", "M msg/s", "ns/msg",
               "min-max M/s", "ctxsw/msg", "wakes/msg", "epoll/peer", "loop/peer", "notes");
        double re = median_rate(gi, ref_epoll), rl = median_rate(gi, ref_loop);
        for (int ri = 0; ri < nrows; ri++) {
            int n = counts[gi][ri];
            if (!n)
                continue;
            double rates[MAX_REPS], cs[MAX_REPS], wk[MAX_REPS], lo = INFINITY, hi = 0;
            int failed = 0, wn = 0;
            for (int i = 0; i < n; i++) {
                struct result *r = res_at(gi, ri, i);
                rates[i] = r->rate;
                cs[i] = r->ctxsw;
                if (r->wakes >= 0)
                    wk[wn++] = r->wakes;
                lo = fmin(lo, r->rate);
                hi = fmax(hi, r->rate);
                failed |= r->error[0] != 0;
            }
            double rate = median(rates, n);
            char mm[32], w[16], e[16], l[16];
            snprintf(mm, sizeof mm, "%.2f-%.2f", lo / 1e6, hi / 1e6);
            if (wn)
                snprintf(w, sizeof w, "%.4f", median(wk, wn));
            else
                snprintf(w, sizeof w, "-");
            fmt_ratio(e, sizeof e, re, rate);
            fmt_ratio(l, sizeof l, rl, rate);
            printf("%-50s %8.2f %8.1f %13s %9.4f %9s %10s %9s  %s%s\n", rows[ri]->label,
                   rate / 1e6, 1e9 / rate, mm, median(cs, n), w, e, l,
                   res_at(gi, ri, n - 1)->note, failed ? "  DELIVERY FAILED" : "");
        }
    }

    /* Targets of libeventq's loop path, from the medians above: reported,
     * never asserted. Numbered as in side_by_side's summary, which judges
     * the others. */
    printf("\n");
    if (cfg.smoke) {
        printf("== targets: not evaluated in smoke mode ==\n");
    } else {
        printf("== targets (from the medians above; reported, never asserted) ==\n");
#ifdef PEERS_HAVE_UV
        int ref_uv = row_index(&uv_bounded);
#else
        int ref_uv = -1;
#endif
        for (int gi = 0; gi < N_GROUPS; gi++) {
            char gname[16], what[128];
            group_name(&GROUPS[gi], gname, sizeof gname);
            double rl = median_rate(gi, ref_loop);
            struct {
                const char *vs;
                double rate, want;
            } t[2] = {
                {"epoll + eventq_chan_recv", median_rate(gi, ref_epoll), 0.8},
                {"libuv bounded async queue", median_rate(gi, ref_uv), 1.5},
            };
            for (int i = 0; i < 2; i++) {
                snprintf(what, sizeof what, "(%d) %s %zu B: loop (add_chan, budget %d) / %s", i + 1,
                         gname, GROUPS[gi].size, EVENTQ_DEFAULT_BUDGET, t[i].vs);
                if (isnan(rl) || isnan(t[i].rate)) {
                    if (i == 1 && ref_uv < 0)
                        printf("%-72s   -      libuv left out\n", what);
                    continue;
                }
                double r = rl / t[i].rate;
                printf("%-72s %6.2fx  target >= %.1fx  %s\n", what, r, t[i].want,
                       r >= t[i].want ? "met" : "MISSED");
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
