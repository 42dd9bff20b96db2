/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * bench-peers: libeventq against the C libraries a programmer would pick
 * instead (libuv, ZeroMQ, nng, GLib), the same work through each.
 *
 * This header is the contract between the harness (peers.c) and the peer
 * files (peer_*.c): the message format, the consumer's check of every
 * message (the tally), and the operations each row implements.
 *
 * Message format, `size` bytes (8, or a multiple of 8 of at least 24):
 *   word 0      h = producer << 48 | sequence (little endian, as every word)
 *   (size >= 24)
 *   word 1      checksum: the sum over every other word i of (w[i] ^ K[i])
 *   words 2..   a fill that depends on the producer and the position
 *   last word   h again
 * Each producer sends sequences 0..per_prod-1, then one end marker
 * (sequence END). The consumer checks each message as it arrives: length,
 * header against trailer, checksum, and that the sequence is exactly the
 * next one of its producer (so a loss, a duplicate or a reordering shows at
 * the first message it affects); once every producer's end marker is in,
 * the run is over and every count must be complete.
 */
#ifndef BENCH_PEERS_H
#define BENCH_PEERS_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define SEQ_BITS 48
#define SEQ_MASK ((UINT64_C(1) << SEQ_BITS) - 1)
#define SEQ_END SEQ_MASK
/* The capacity of every bounded queue, in messages. */
#define CAPACITY 1024
/* Messages per libeventq batch receive. */
#define BATCH 64

/* What one consumer saw. Written by the consumer thread only, except
 * `seen`, which the hang guard reads. */
struct tally {
    int producers;
    size_t size;
    uint64_t per_prod;
    const uint64_t *k; /* checksum constants, one per word */
    uint64_t *next;    /* next expected sequence, per producer */
    int ends;          /* end markers received */
    int done;          /* every producer's end marker is in */
    uint64_t bad;
    char first_bad[256];
    _Atomic uint64_t seen; /* messages received so far (hang guard) */
    /* Consumer wake-ups (epoll_wait returns, async callbacks, GSource
     * dispatches), counted by peers that can; -1 when not counted. */
    int64_t wakes;
    /* Per producer, the count its end marker must follow; NULL: per_prod
     * for every producer. Read only at an end marker, so a producer that
     * runs for a time rather than a count stores its count just before
     * sending the marker (bench-ipc). */
    const _Atomic uint64_t *expect;
};

void tally_fail(struct tally *t, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static inline uint64_t load64(const unsigned char *p)
{
    uint64_t w;
    memcpy(&w, p, 8);
    return w;
}

/* Checks one received message; returns 1 once the run is complete (every
 * end marker received), else 0. Peers stop receiving when it returns 1. */
static inline int tally_msg(struct tally *t, const void *data, size_t len)
{
    const unsigned char *d = data;
    atomic_store_explicit(&t->seen, atomic_load_explicit(&t->seen, memory_order_relaxed) + 1,
                          memory_order_relaxed);
    if (len != t->size) {
        tally_fail(t, "message of %zu bytes, expected %zu", len, t->size);
        return t->done;
    }
    uint64_t h = load64(d);
    if (len >= 24) {
        size_t words = len / 8;
        uint64_t sum = 0;
        for (size_t i = 0; i < words; i++)
            sum += load64(d + 8 * i) ^ t->k[i];
        uint64_t c = load64(d + 8);
        sum -= c ^ t->k[1];
        if (load64(d + len - 8) != h) {
            tally_fail(t, "message %#llx: header and trailer differ", (unsigned long long)h);
            return t->done;
        }
        if (sum != c) {
            tally_fail(t, "message %#llx: checksum mismatch (payload corrupted)",
                       (unsigned long long)h);
            return t->done;
        }
    }
    uint64_t p = h >> SEQ_BITS, seq = h & SEQ_MASK;
    if (p >= (uint64_t)t->producers) {
        tally_fail(t, "message %#llx: no producer %llu", (unsigned long long)h,
                   (unsigned long long)p);
        return t->done;
    }
    if (seq == SEQ_END) {
        uint64_t want = t->expect ? atomic_load(&t->expect[p]) : t->per_prod;
        if (t->next[p] != want)
            tally_fail(t, "producer %llu: end marker after %llu of %llu messages",
                       (unsigned long long)p, (unsigned long long)t->next[p],
                       (unsigned long long)want);
        t->next[p] = SEQ_END; /* a second end marker is then out of order */
        if (++t->ends == t->producers)
            t->done = 1;
        return t->done;
    }
    if (seq != t->next[p]) {
        tally_fail(t, "producer %llu: sequence %llu where %llu was due (%s)",
                   (unsigned long long)p, (unsigned long long)seq,
                   (unsigned long long)t->next[p],
                   t->next[p] == SEQ_END ? "after its end marker"
                   : seq < t->next[p]    ? "duplicate or reordered"
                                         : "messages lost or reordered");
        if (t->next[p] != SEQ_END && seq > t->next[p])
            t->next[p] = seq + 1;
        return t->done;
    }
    t->next[p]++;
    return t->done;
}

/* tally_msg as a take_fn (drain.h). */
static inline int tally_take(void *t, const void *data, size_t len)
{
    return tally_msg(t, data, len);
}

/* The configurations: producers and message size. Sizes outer, topologies
 * inner, as the Rust bench orders its tables. */
struct group {
    int producers;
    size_t size;
};
static const struct group GROUPS[] = {{1, 8}, {4, 8}, {1, 1024}, {4, 1024}};
#define N_GROUPS (int)(sizeof GROUPS / sizeof GROUPS[0])

/* One configuration of one run, as a peer sees it. */
struct run_info {
    int producers;
    size_t size;
    uint64_t per_prod; /* messages per producer, end marker excluded */
    int smoke;
};

/* One row of the tables: how one library (one way of using it) moves the
 * messages. Every function but consume runs in the thread named. */
struct peer {
    const char *label;
    /* Main thread: the shared state of one run (queues, sockets, loops). */
    void *(*setup)(const struct run_info *ri);
    /* Producer thread p: its sending handle (or the state itself). */
    void *(*producer_open)(void *st, int p);
    /* Producer thread: sends one message, waiting while the queue is full
     * (bounded peers); exits the program on any error. */
    void (*send)(void *tx, const void *msg, size_t len);
    /* Producer thread, after its end marker was sent. May be NULL. */
    void (*producer_close)(void *tx);
    /* Consumer thread: receives, calling tally_msg for each message, until
     * it returns 1. */
    void (*consume)(void *st, struct tally *t);
    /* Main thread, after every thread has been joined: frees everything;
     * may write a note for the table (capacity, peak depth) into note. */
    void (*teardown)(void *st, char *note, size_t cap);
};

/* A library: its rows, its version, and how to install it. */
struct family {
    const char *name;
    const char *(*version)(void);
    const struct peer *const *rows;
    int nrows;
};

/* --- common.c: shared with bench-ipc (benches/ipc) ------------------------ */

/* The program's name in its error messages; each program defines it. */
extern const char *const bench_prog;
/* Prints the error and exits with status 2 (an error of the bench itself
 * or a library call, as opposed to a delivery failure). */
void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
void *xmalloc(size_t n);
/* Whether --filter TEXT (alternatives separated by '|'; NULL: no filter)
 * lets the row named `name` run: it contains one of them. */
int filter_match(const char *filter, const char *name);
/* EVENTQ_BENCH_SMOKE set and not "0": the smoke counts. */
int smoke_from_env(void);
struct epoll_event;
/* Adds fd to the epoll set ep for `events`, with `data` as its u64. */
void epoll_add(int ep, int fd, uint32_t events, uint64_t data);
/* A new epoll set watching fd for EPOLLIN (| extra), data.fd = fd. */
int epoll_for(int fd, uint32_t extra);
/* One blocking epoll_wait for at most max events, retried on EINTR. */
int epoll_waitn(int ep, struct epoll_event *evs, int max);
/* One epoll_wait for at most one event, retried on EINTR. */
void epoll_wait1(int ep);
/* After a run: 1 if every producer's end marker came in and nothing was
 * wrong, else 0 with the first fault written to error. */
int tally_complete(const struct tally *t, char *error, size_t cap);

/* The checksum constants of `size`-byte messages, one per word. */
uint64_t *checksum_k(size_t size);
/* A producer's message buffer: the fill, and the part of the checksum it
 * contributes (constant for the producer). */
struct msgbuf {
    unsigned char *d;
    size_t size;
    uint64_t base;
    const uint64_t *k;
};
void msg_init(struct msgbuf *m, size_t size, int p, const uint64_t *k);
/* Writes producer p's message `seq` (header, checksum, trailer). */
static inline void msg_stamp(struct msgbuf *m, int p, uint64_t seq)
{
    uint64_t h = (uint64_t)p << SEQ_BITS | seq;
    memcpy(m->d, &h, 8);
    if (m->size >= 24) {
        size_t last = m->size / 8 - 1;
        uint64_t c = m->base + (h ^ m->k[0]) + (h ^ m->k[last]);
        memcpy(m->d + 8, &c, 8);
        memcpy(m->d + 8 * last, &h, 8);
    }
}

struct timespec;
double ts_sec(const struct timespec *t);
/* CLOCK_MONOTONIC in seconds. */
double now_sec(void);
/* Sleeps s seconds (resumed after a signal). */
void sleep_for(double s);
/* The q-quantile (0..1, interpolated) and the median of v[0..n]; NaN for n 0. */
double quantile(const double *v, int n, double q);
double median(const double *v, int n);

/* The method every rate bench shares (the Rust benches' twin is
 * benches/method/mod.rs): each row runs for a time, not a count (a warm-up,
 * of --warm seconds, default a fifth of the window, then a window of
 * --row-time seconds); the rows compared with each other
 * (one configuration) run repetition by repetition, rep 1 of each row, then
 * rep 2, in an order rotated per repetition; a target is judged on the
 * per-repetition figures: their median and inter-quartile range (min-max
 * below 5 repetitions). --smoke stays count-based. */
struct method {
    int smoke, quick, reps;
    double row_time, warm; /* seconds */
};
#define METHOD_MAX_REPS 50
/* Consumes --reps N, --row-time S, --warm S, --quick at argv[*i] (advancing *i past
 * a value); returns 0 if argv[*i] is none of them. */
int method_arg(struct method *m, int argc, char **argv, int *i);
/* After the options: the defaults (5 reps of 0.5 s; --quick 3 of 0.2 s;
 * smoke 1), the smoke flag from EVENTQ_BENCH_SMOKE too. Exits 2 on a value
 * out of range. */
void method_finish(struct method *m);
/* Prints the plan and the time it should take: `rows` timed rows per
 * repetition, each costing about `per_row` seconds beyond its warm-up and
 * window, plus `extra` seconds per repetition (latency rows). */
void method_plan(const struct method *m, const char *prog, int rows, double per_row,
                 double extra);
/* The row at place i of repetition rep, among n: rotated, so no row always
 * goes first. */
static inline int method_order(int i, int rep, int n)
{
    return (i + rep) % n;
}
/* The spread of per-repetition figures: the median, and the inter-quartile
 * range (iqr) or, below 5 values, the min-max. n 0: nothing measured. */
struct spread {
    int n, iqr;
    double med, lo, hi;
};
struct spread spread_of(const double *v, int n);
/* "0.93 (0.90-0.97)" with `prec` decimals; "-" for none. */
void fmt_spread(char *buf, size_t cap, struct spread s, int prec);
/* met when the spread's worse end meets the goal, MISSED when its better
 * end misses, unsettled when it straddles. */
const char *verdict_of(struct spread s, int at_most, double goal);
/* One target's line, in the format every bench shares:
 *   target WHAT >= GOALx: median Mx (IQR a-b, N reps): met
 * unit "x" (a ratio) or "%" (the figures already in percent). */
void print_verdict(const struct method *m, const char *what, struct spread s, int at_most,
                   double goal, const char *unit);

/* Where the machine was while a figure was taken, by the phase probes
 * (benches/probe/line_transfer.h) before and after each of its rows: near
 * when every reading is under 60 ns, far when every one is over 110 ns,
 * turned otherwise (benches/method/mod.rs `Phase`, the same thresholds). */
enum phase { PHASE_NEAR, PHASE_FAR, PHASE_TURNED };
#define PHASE_NEAR_NS 60.0
#define PHASE_FAR_NS 110.0
/* The phase of a figure taken from two rows, by their readings. */
enum phase phase_of_rows(const double *a, int na, const double *b, int nb);
/* A target's per-repetition figures by phase, the line after its target
 * line for make bench's driver (method/mod.rs `phases_line`):
 *   phases WHAT: near 3.14 3.20; far 1.10; turned 2.00
 * A phase without figures is left out; nothing is printed for none. */
void print_phases(const char *what, const double *v, const enum phase *ph, int n);

/* One repetition of a row, as a ratio needs it (each bench keeps its own
 * struct result). */
struct rep_view {
    int ok; /* delivered */
    double rate;
    const double *line; /* the phase probe's readings, n_line of them */
    int n_line;
};
/* The per-repetition ratios of row a's rate over row b's in group gi, over
 * the first min(na, nb) repetitions in which both delivered, each with the
 * phase around both rows (ph may be NULL); `at` reads a repetition.
 * Returns the count. */
int phased_ratios(struct rep_view (*at)(int gi, int row, int rep), int gi, int a, int na, int b,
                  int nb, double *v, enum phase *ph);
/* A target on such ratios (at least `want`): its line, then its phases line. */
void judge_phased(const struct method *m, const char *what, const double *v,
                  const enum phase *ph, int n, double want);

/* The machine ("2 CPUs (model), Linux x.y") for the report's heading. */
void machine(char *buf, size_t cap);
/* The load around a whole run: watch_start before it, watch_stop after
 * (returns the seconds it took), watch_report prints the load averages and
 * the share of the CPUs other processes used, with a warning when the
 * machine was not quiet. */
struct ticks {
    int ok;
    unsigned long long busy, steal, own;
};
struct watch {
    char start[128], end[128];
    double load_start, t0, elapsed;
    struct ticks tk0, tk1;
};
void watch_start(struct watch *w);
double watch_stop(struct watch *w);
void watch_report(const struct watch *w);

/* --- peer files ----------------------------------------------------------- */

extern const struct family family_eventq;
/* The rows the ratios and targets are taken against. */
extern const struct peer eq_epoll, eq_loop;
#ifdef PEERS_HAVE_UV
extern const struct family family_uv;
extern const struct peer uv_bounded;
#endif
#ifdef PEERS_HAVE_ZMQ
extern const struct family family_zmq;
#endif
#ifdef PEERS_HAVE_NNG
extern const struct family family_nng;
#endif
#ifdef PEERS_HAVE_GLIB
extern const struct family family_glib;
#endif

#endif /* BENCH_PEERS_H */
