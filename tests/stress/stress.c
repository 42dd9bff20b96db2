/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * libeventq stress: many producers and consumers moving millions of
 * self-checking messages through the C ABI, first through bare channels,
 * then through loop channel sources. Every message is verified: its length
 * (no merge, no split: D2), its checksum (no corruption), its producer's
 * sequence number (exactly once, D1, through an atomic bitmap; per-producer
 * order as seen by each consumer, D3). It prints messages per second and the
 * number of messages lost, and exits non-zero on any loss, duplicate,
 * corruption, reordering or unexpected return code.
 *
 * usage: stress [-n MESSAGES] [-p PRODUCERS] [-c CONSUMERS] [-s SEED]
 *               [-m bare|tight|loop|all] [-q] [-B]
 *
 *   -n  messages per phase (default 10,000,000)
 *   -p  producer threads (default 8), -c consumer threads (default 4)
 *   -m  which phase(s) to run (default all)
 *   -s  seed of the message sizes and of each thread's choice of call
 *   -q  only the result lines
 *   -B  blocking calls only (EVENTQ_FOREVER, no polls): no timeout can then
 *       rescue a lost wake-up, which shows as a hang (the Makefile's
 *       timeout turns it into a failure)
 *
 * Phase "bare": P producers send into one channel (capacity 128, byte limit
 * 192 KiB, so both limits bind), each message through a call picked at
 * random: blocking send, timed send (retried on -ETIMEDOUT), non-blocking
 * send with poll(2) on the send fd after -EAGAIN (D5), or a batch send of
 * 1..16 (blocking, timed or non-blocking; the refused rest is re-sent). C
 * consumers receive, each call picked at random: blocking, timed, or
 * non-blocking receive with poll(2) on the receive fd (D4), a batch receive,
 * a zero-copy receive, or a receive into a too-small buffer that must fail
 * with -EMSGSIZE, report the needed length and leave the message queued (D7).
 * When every producer is done, the channel is closed; consumers drain it and
 * stop at end of stream (D6).
 *
 * Phase "tight": the same with capacity 2 and an 8 KiB byte limit, for a
 * tenth of the messages: nearly every call is a doorbell transition.
 *
 * Phase "loop": the producers are split over two channels; C loop threads
 * each have a channel source on both channels (so several loops compete for
 * each channel), with budgets 1, 3, 10 and 64, run by eventq_loop_run,
 * eventq_loop_run_once(EVENTQ_FOREVER), or embedded (poll(2) on the loop fd,
 * then eventq_loop_run_once(0)). Each source must see end of stream exactly
 * once (D8) after its channel is closed and drained.
 *
 * Message sizes: 0 (1 in 64), else 16..4096 bytes. A non-empty message
 * carries a 16-byte header (producer, sequence, length, checksum) and a body
 * cut from a random pool; empty messages are counted (their number is known
 * from the seed). No sleeps and no timing conditions: the clock is read only
 * to print the rate.
 */
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <eventq.h>

#define HDR 16u
#define MAX_LEN 4096u
#define POOL_LEN (64u * 1024u)
#define BATCH_MAX 16
#define RBATCH_MAX 32

/* ---- configuration and shared state ---- */

static uint64_t g_seed = 0x5eed;
static uint64_t g_messages = 10000000;
static int g_producers = 8;
static int g_consumers = 4;
static int g_quiet;
static uint8_t g_pool[POOL_LEN + MAX_LEN];

static uint64_t splitmix(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static uint64_t mix3(uint64_t a, uint64_t b, uint64_t c)
{
    uint64_t s = a * 0x9e3779b97f4a7c15ull ^ (b + 0x632be59bd9b4e019ull) * 0xd6e8feb86659fd93ull ^ c;
    return splitmix(&s);
}

/* Length of producer p's message k: 0, or 16..4096. */
static uint32_t msg_len(uint32_t p, uint32_t k)
{
    uint64_t h = mix3(g_seed, p, k);
    if ((h & 63) == 0)
        return 0;
    return HDR + (uint32_t)((h >> 6) % (MAX_LEN - HDR + 1));
}

/* Where its body starts in the pool. */
static uint32_t msg_off(uint32_t p, uint32_t k)
{
    return (uint32_t)(mix3(g_seed ^ 0xb0d1, p, k) % POOL_LEN);
}

/* A checksum of the header fields and the body, 8 bytes at a time. */
static uint32_t msg_sum(uint32_t p, uint32_t k, const uint8_t *body, size_t n)
{
    uint64_t h = 0xcbf29ce484222325ull ^ ((uint64_t)p << 32 | k);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, body + i, 8);
        h = (h ^ w) * 0x100000001b3ull;
        h ^= h >> 29;
    }
    for (; i < n; i++)
        h = (h ^ body[i]) * 0x100000001b3ull;
    h ^= n;
    h *= 0xff51afd7ed558ccdull;
    return (uint32_t)(h ^ (h >> 32));
}

struct hdr {
    uint32_t pid, seq, len, sum;
};

/* Builds message (p, k) into buf; returns its length. */
static size_t make_msg(uint8_t *buf, uint32_t p, uint32_t k)
{
    uint32_t len = msg_len(p, k);
    if (len == 0)
        return 0;
    const uint8_t *body = g_pool + msg_off(p, k);
    struct hdr h = { p, k, len, msg_sum(p, k, body, len - HDR) };
    memcpy(buf, &h, HDR);
    memcpy(buf + HDR, body, len - HDR);
    return len;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ---- the verifier, shared by every consumer of a phase ---- */

struct verifier {
    uint32_t producers;
    uint32_t *per_producer;     /* messages producer p sends */
    _Atomic uint64_t **seen;    /* per producer, a bitmap over sequences */
    _Atomic uint64_t received;  /* messages received (empties included) */
    _Atomic uint64_t bytes;
    _Atomic uint64_t empties;
    _Atomic uint64_t dup;
    _Atomic uint64_t corrupt;   /* bad header, length or checksum */
    _Atomic uint64_t reordered; /* a producer's sequence went back (D3) */
    _Atomic uint64_t bad_rc;    /* unexpected return codes */
    _Atomic int last_bad_rc;
    uint64_t empties_expected;
    uint64_t bytes_expected;
};

static void verifier_init(struct verifier *v, uint64_t total, uint32_t producers)
{
    memset(v, 0, sizeof *v);
    v->producers = producers;
    v->per_producer = calloc(producers, sizeof *v->per_producer);
    v->seen = calloc(producers, sizeof *v->seen);
    if (!v->per_producer || !v->seen) {
        perror("calloc");
        exit(2);
    }
    for (uint32_t p = 0; p < producers; p++) {
        uint32_t n = (uint32_t)(total / producers + (p < total % producers));
        v->per_producer[p] = n;
        v->seen[p] = calloc(n / 64 + 1, sizeof(uint64_t));
        if (!v->seen[p]) {
            perror("calloc");
            exit(2);
        }
        for (uint32_t k = 0; k < n; k++) {
            uint32_t len = msg_len(p, k);
            v->empties_expected += len == 0;
            v->bytes_expected += len;
        }
    }
}

static void verifier_free(struct verifier *v)
{
    for (uint32_t p = 0; p < v->producers; p++)
        free((void *)v->seen[p]);
    free(v->seen);
    free(v->per_producer);
}

static void bad_rc(struct verifier *v, int rc)
{
    atomic_fetch_add(&v->bad_rc, 1);
    atomic_store(&v->last_bad_rc, rc);
}

/* What one consumer saw last of each producer (for D3). */
struct order {
    int64_t last[64];
};

static void order_init(struct order *o)
{
    for (int i = 0; i < 64; i++)
        o->last[i] = -1;
}

static void check_msg(struct verifier *v, struct order *o, const uint8_t *m, size_t len)
{
    atomic_fetch_add_explicit(&v->received, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&v->bytes, len, memory_order_relaxed);
    if (len == 0) {
        atomic_fetch_add_explicit(&v->empties, 1, memory_order_relaxed);
        return;
    }
    struct hdr h;
    if (len < HDR) {
        atomic_fetch_add(&v->corrupt, 1);
        return;
    }
    memcpy(&h, m, HDR);
    if (h.pid >= v->producers || h.seq >= v->per_producer[h.pid] || h.len != len ||
        msg_len(h.pid, h.seq) != len || msg_sum(h.pid, h.seq, m + HDR, len - HDR) != h.sum) {
        atomic_fetch_add(&v->corrupt, 1);
        return;
    }
    uint64_t bit = 1ull << (h.seq % 64);
    if (atomic_fetch_or_explicit(&v->seen[h.pid][h.seq / 64], bit, memory_order_relaxed) & bit)
        atomic_fetch_add(&v->dup, 1);
    if ((int64_t)h.seq <= o->last[h.pid])
        atomic_fetch_add(&v->reordered, 1);
    o->last[h.pid] = h.seq;
}

static uint64_t count_lost(const struct verifier *v)
{
    uint64_t lost = 0;
    for (uint32_t p = 0; p < v->producers; p++)
        for (uint32_t k = 0; k < v->per_producer[p]; k++)
            if (msg_len(p, k) != 0 &&
                !(atomic_load_explicit(&v->seen[p][k / 64], memory_order_relaxed) &
                  (1ull << (k % 64))))
                lost++;
    uint64_t e = atomic_load(&v->empties);
    if (e < v->empties_expected)
        lost += v->empties_expected - e;
    return lost;
}

/* ---- producers ---- */

struct producer {
    pthread_t th;
    eventq_chan *ch;
    struct verifier *v;
    uint32_t pid;
    uint64_t rng;
    uint64_t timeouts, eagains, polls, batches, partial;
};


static int g_blocking; /* -B: every call waits without limit */

static int64_t pick_timeout(uint64_t r)
{
    if (g_blocking)
        return EVENTQ_FOREVER;
    switch (r % 3) {
    case 0: return EVENTQ_FOREVER;
    case 1: return 0;
    default: return 1000 + (int64_t)((r >> 8) % 2000000); /* 1 us .. 2 ms */
    }
}

static int wait_fd(int fd, struct verifier *v)
{
    struct pollfd pf = { .fd = fd, .events = POLLIN, .revents = 0 };
    for (;;) {
        int n = poll(&pf, 1, -1);
        if (n >= 0)
            return 0;
        if (errno != EINTR) {
            bad_rc(v, -errno);
            return -1;
        }
    }
}

static void *producer_main(void *arg)
{
    struct producer *p = arg;
    struct verifier *v = p->v;
    uint32_t n = v->per_producer[p->pid];
    uint8_t *bufs = malloc((size_t)BATCH_MAX * MAX_LEN);
    eventq_buf b[BATCH_MAX];
    int sfd = eventq_chan_send_fd(p->ch);
    if (!bufs || sfd < 0) {
        bad_rc(v, sfd < 0 ? sfd : -ENOMEM);
        free(bufs);
        return NULL;
    }
    uint32_t k = 0;
    while (k < n) {
        uint64_t r = splitmix(&p->rng);
        int rc;
        if ((r & 3) == 3) {
            /* A batch of 1..16; the refused rest is sent again. */
            uint32_t cnt = 1 + (uint32_t)((r >> 2) % BATCH_MAX);
            if (cnt > n - k)
                cnt = n - k;
            for (uint32_t i = 0; i < cnt; i++) {
                b[i].data = bufs + (size_t)i * MAX_LEN;
                b[i].len = make_msg(bufs + (size_t)i * MAX_LEN, p->pid, k + i);
            }
            int64_t t = pick_timeout(r >> 8);
            p->batches++;
            for (;;) {
                rc = eventq_chan_send_batch(p->ch, b, cnt, t);
                if (rc > 0)
                    break;
                if (rc == -ETIMEDOUT) {
                    p->timeouts++;
                } else if (rc == -EAGAIN) {
                    p->eagains++;
                    p->polls++;
                    if (wait_fd(sfd, v))
                        goto out;
                } else {
                    bad_rc(v, rc);
                    goto out;
                }
            }
            if ((uint32_t)rc > cnt) {
                bad_rc(v, rc);
                goto out;
            }
            p->partial += (uint32_t)rc < cnt;
            k += (uint32_t)rc;
            continue;
        }
        size_t len = make_msg(bufs, p->pid, k);
        int64_t t = (r & 3) == 0 || g_blocking ? EVENTQ_FOREVER
                    : (r & 3) == 1             ? 0
                                               : 1000 + (int64_t)((r >> 8) % 2000000);
        for (;;) {
            /* An empty message is sent with a NULL or a non-NULL pointer. */
            rc = eventq_chan_send(p->ch, len || (r & 16) ? bufs : NULL, len, t);
            if (rc == 0)
                break;
            if (rc == -ETIMEDOUT) {
                p->timeouts++;
            } else if (rc == -EAGAIN) {
                /* D5: the send fd is down after a refused send and comes back
                 * when the queue drains to low water; a lost wake-up hangs
                 * here. */
                p->eagains++;
                p->polls++;
                if (wait_fd(sfd, v))
                    goto out;
            } else {
                bad_rc(v, rc);
                goto out;
            }
        }
        k++;
    }
out:
    free(bufs);
    return NULL;
}

/* ---- bare-channel consumers ---- */

struct consumer {
    pthread_t th;
    eventq_chan *ch;
    struct verifier *v;
    uint64_t rng;
    uint64_t timeouts, eagains, spurious, emsgsize, batches, msgs;
};

static void *consumer_main(void *arg)
{
    struct consumer *c = arg;
    struct verifier *v = c->v;
    struct order o;
    size_t bcap = (size_t)RBATCH_MAX * MAX_LEN;
    uint8_t *buf = malloc(bcap);
    size_t lens[RBATCH_MAX];
    int rfd = eventq_chan_recv_fd(c->ch);
    order_init(&o);
    if (!buf || rfd < 0) {
        bad_rc(v, rfd < 0 ? rfd : -ENOMEM);
        free(buf);
        return NULL;
    }
    for (;;) {
        uint64_t r = splitmix(&c->rng);
        int rc;
        size_t len = 0;
        int64_t t = pick_timeout(r >> 8);
        switch (r % 6) {
        case 0: /* plain receive, blocking, timed or non-blocking */
        case 1:
            rc = eventq_chan_recv(c->ch, buf, MAX_LEN + (r >> 40) % 64, &len, t);
            if (rc == 0)
                check_msg(v, &o, buf, len);
            break;
        case 2: { /* zero-copy */
            eventq_msg *m = NULL;
            rc = eventq_chan_recv_msg(c->ch, &m, t);
            if (rc == 0) {
                check_msg(v, &o, eventq_msg_data(m), eventq_msg_len(m));
                eventq_msg_free(m);
            }
            c->msgs++;
            break;
        }
        case 3: { /* batch; the buffer is sometimes only a few messages big */
            size_t cap = (r >> 32) & 1 ? bcap : MAX_LEN + (r >> 40) % (3 * MAX_LEN);
            size_t max = 1 + (r >> 20) % RBATCH_MAX;
            rc = eventq_chan_recv_batch(c->ch, buf, cap, lens, max, t);
            c->batches++;
            if (rc > 0) {
                size_t off = 0;
                if ((size_t)rc > max) {
                    bad_rc(v, rc);
                    goto out;
                }
                for (int i = 0; i < rc; i++) {
                    check_msg(v, &o, buf + off, lens[i]);
                    off += lens[i];
                }
                if (off > cap) {
                    bad_rc(v, -EOVERFLOW);
                    goto out;
                }
                rc = 0;
            } else if (rc == 0) {
                bad_rc(v, -EIO); /* max >= 1: never 0 */
                goto out;
            }
            break;
        }
        case 4: { /* a buffer too small for most messages (D7) */
            size_t cap = (r >> 40) % 64;
            rc = eventq_chan_recv(c->ch, cap ? buf : NULL, cap, &len, t);
            if (rc == 0) {
                if (len > cap) {
                    bad_rc(v, -EOVERFLOW);
                    goto out;
                }
                check_msg(v, &o, buf, len);
            } else if (rc == -EMSGSIZE) {
                /* The message stayed at the head; `len` is what it needs. */
                c->emsgsize++;
                if (len <= cap || len > MAX_LEN) {
                    bad_rc(v, -EMSGSIZE);
                    goto out;
                }
                rc = 0;
            }
            break;
        }
        default: /* non-blocking, then poll(2) the receive fd (D4) */
            rc = eventq_chan_recv(c->ch, buf, MAX_LEN, &len, g_blocking ? EVENTQ_FOREVER : 0);
            if (rc == 0) {
                check_msg(v, &o, buf, len);
            } else if (rc == -EAGAIN) {
                c->eagains++;
                if (wait_fd(rfd, v))
                    goto out;
                rc = eventq_chan_recv(c->ch, buf, MAX_LEN, &len, 0);
                if (rc == 0)
                    check_msg(v, &o, buf, len);
                else if (rc == -EAGAIN)
                    c->spurious++; /* another consumer was faster: allowed */
                if (rc == -EAGAIN)
                    rc = 0;
            }
            break;
        }
        if (rc == -EPIPE)
            break; /* end of stream */
        if (rc == -ETIMEDOUT) {
            c->timeouts++;
            continue;
        }
        if (rc == -EAGAIN) {
            c->eagains++;
            continue;
        }
        if (rc != 0) {
            bad_rc(v, rc);
            break;
        }
    }
out:
    free(buf);
    return NULL;
}

/* ---- reporting ---- */

struct totals {
    uint64_t timeouts, eagains, polls, batches, partial, spurious, emsgsize, rbatches;
};

static int report(const char *phase, struct verifier *v, double secs, const struct totals *t,
                  const eventq_chan_stats *st, int nst, uint64_t extra_bad, const char *extra)
{
    uint64_t lost = count_lost(v);
    uint64_t received = atomic_load(&v->received);
    uint64_t total = 0;
    for (uint32_t p = 0; p < v->producers; p++)
        total += v->per_producer[p];
    uint64_t sent = 0, got = 0, pending = 0, peak = 0, rr = 0, sr = 0, dropped = 0;
    for (int i = 0; i < nst; i++) {
        sent += st[i].sent;
        got += st[i].received;
        pending += st[i].pending;
        dropped += st[i].dropped;
        rr += st[i].recv_doorbell_rings;
        sr += st[i].send_doorbell_rings;
        if (st[i].peak_depth > peak)
            peak = st[i].peak_depth;
    }
    int bad = lost || atomic_load(&v->dup) || atomic_load(&v->corrupt) ||
              atomic_load(&v->reordered) || atomic_load(&v->bad_rc) || received != total ||
              atomic_load(&v->empties) != v->empties_expected ||
              atomic_load(&v->bytes) != v->bytes_expected || sent != total || got != total ||
              pending || dropped || extra_bad;
    printf("%s: %" PRIu64 " messages (%.2f GB) in %.2f s: %.3f M msg/s, %.2f GB/s\n", phase,
           received, (double)atomic_load(&v->bytes) / 1e9, secs,
           (double)received / secs / 1e6, (double)atomic_load(&v->bytes) / secs / 1e9);
    printf("%s: lost %" PRIu64 ", duplicated %" PRIu64 ", corrupt %" PRIu64
           ", reordered %" PRIu64 ", empty %" PRIu64 "/%" PRIu64 ", bad returns %" PRIu64,
           phase, lost, atomic_load(&v->dup), atomic_load(&v->corrupt),
           atomic_load(&v->reordered), atomic_load(&v->empties), v->empties_expected,
           atomic_load(&v->bad_rc));
    if (atomic_load(&v->bad_rc))
        printf(" (last %d: %s)", atomic_load(&v->last_bad_rc),
               eventq_strerror(atomic_load(&v->last_bad_rc)));
    printf("%s\n", extra ? extra : "");
    printf("%s: stats sent %" PRIu64 " received %" PRIu64 " pending %" PRIu64
           " dropped %" PRIu64 " peak depth %" PRIu64 "; doorbell rings: receive %" PRIu64
           ", send %" PRIu64 "\n",
           phase, sent, got, pending, dropped, peak, rr, sr);
    if (!g_quiet)
        printf("%s: calls: %" PRIu64 " batch sends (%" PRIu64 " partial), %" PRIu64
               " timeouts, %" PRIu64 " EAGAIN, %" PRIu64 " send-fd polls, %" PRIu64
               " readable-but-EAGAIN, %" PRIu64 " EMSGSIZE (message kept), %" PRIu64
               " batch receives\n",
               phase, t->batches, t->partial, t->timeouts, t->eagains, t->polls, t->spurious,
               t->emsgsize, t->rbatches);
    printf("%s: %s\n", phase, bad ? "FAILED" : "ok");
    fflush(stdout);
    return bad;
}

/* ---- phase: bare channels ---- */

static int phase_bare(const char *phase, uint64_t messages, size_t capacity, size_t max_bytes)
{
    struct verifier v;
    verifier_init(&v, messages, (uint32_t)g_producers);
    eventq_chan_opts o;
    eventq_chan_opts_init(&o, sizeof o);
    o.capacity = capacity;
    o.max_bytes = max_bytes;
    o.max_msg_size = MAX_LEN;
    eventq_chan *ch;
    int rc = eventq_chan_new(&o, &ch);
    if (rc) {
        fprintf(stderr, "eventq_chan_new: %s\n", eventq_strerror(rc));
        return 1;
    }
    if (!g_quiet)
        printf("%s: %d producers x %d consumers, %" PRIu64
               " messages of 0 or 16..4096 bytes, one channel (capacity %zu, max_bytes %zu KiB)\n",
               phase, g_producers, g_consumers, messages, capacity, max_bytes / 1024);
    struct producer *pr = calloc((size_t)g_producers, sizeof *pr);
    struct consumer *co = calloc((size_t)g_consumers, sizeof *co);
    uint64_t rng = g_seed ^ 0xba4e;
    double t0 = now_s();
    for (int i = 0; i < g_consumers; i++) {
        co[i].ch = eventq_chan_clone(ch);
        co[i].v = &v;
        co[i].rng = splitmix(&rng);
        pthread_create(&co[i].th, NULL, consumer_main, &co[i]);
    }
    for (int i = 0; i < g_producers; i++) {
        pr[i].ch = eventq_chan_clone(ch);
        pr[i].v = &v;
        pr[i].pid = (uint32_t)i;
        pr[i].rng = splitmix(&rng);
        pthread_create(&pr[i].th, NULL, producer_main, &pr[i]);
    }
    struct totals t = { 0 };
    for (int i = 0; i < g_producers; i++) {
        pthread_join(pr[i].th, NULL);
        t.timeouts += pr[i].timeouts;
        t.eagains += pr[i].eagains;
        t.polls += pr[i].polls;
        t.batches += pr[i].batches;
        t.partial += pr[i].partial;
        eventq_chan_free(pr[i].ch);
    }
    /* Every producer is done: close, and the consumers drain to end of
     * stream (D6). */
    eventq_chan_close(ch);
    for (int i = 0; i < g_consumers; i++) {
        pthread_join(co[i].th, NULL);
        t.timeouts += co[i].timeouts;
        t.eagains += co[i].eagains;
        t.spurious += co[i].spurious;
        t.emsgsize += co[i].emsgsize;
        t.rbatches += co[i].batches;
        eventq_chan_free(co[i].ch);
    }
    double secs = now_s() - t0;
    eventq_chan_stats st;
    int last = eventq_chan_free_final(ch, &st, sizeof st);
    char extra[128] = "";
    uint64_t extra_bad = 0;
    if (last != 1) {
        snprintf(extra, sizeof extra, "; free_final returned %d, want 1", last);
        extra_bad = 1;
        memset(&st, 0, sizeof st);
    } else if (st.peak_depth > o.capacity) {
        snprintf(extra, sizeof extra, "; peak depth %" PRIu64 " above capacity (D5)",
                 (uint64_t)st.peak_depth);
        extra_bad = 1;
    }
    int bad = report(phase, &v, secs, &t, &st, 1, extra_bad, extra);
    free(pr);
    free(co);
    verifier_free(&v);
    return bad;
}

/* ---- phase: loop channel sources ---- */

#define LOOP_CHANS 2

struct looper;

struct lsrc {
    struct looper *l;
    eventq_source *handle;
    int chan;
    uint64_t msgs;
    int eos; /* end-of-stream calls seen */
    uint64_t after_eos; /* messages after end of stream (a bug) */
};

struct looper {
    pthread_t th;
    eventq_loop *lp;
    struct verifier *v;
    struct order o;
    int how; /* 0 run, 1 run_once(FOREVER), 2 embedded */
    struct lsrc src[LOOP_CHANS];
    int eos_total;
    uint64_t idle_iterations;
};

static int on_msg(eventq_source *s, const void *data, size_t len, void *ud)
{
    struct lsrc *ls = ud;
    struct looper *l = ls->l;
    (void)s;
    if (data == NULL) {
        ls->eos++;
        if (++l->eos_total == LOOP_CHANS && l->how == 0)
            eventq_loop_stop(l->lp);
        return 0;
    }
    if (ls->eos)
        ls->after_eos++;
    ls->msgs++;
    check_msg(l->v, &l->o, data, len);
    return 0;
}

static void *looper_main(void *arg)
{
    struct looper *l = arg;
    int rc = 0;
    if (l->how == 0) {
        rc = eventq_loop_run(l->lp);
    } else if (l->how == 1) {
        while (l->eos_total < LOOP_CHANS) {
            rc = eventq_loop_run_once(l->lp, EVENTQ_FOREVER);
            if (rc < 0)
                break;
            l->idle_iterations += rc == 0;
            rc = 0;
        }
    } else {
        int fd = eventq_loop_fd(l->lp);
        while (l->eos_total < LOOP_CHANS) {
            if (wait_fd(fd, l->v))
                return NULL;
            rc = eventq_loop_run_once(l->lp, 0);
            if (rc < 0)
                break;
            l->idle_iterations += rc == 0;
            rc = 0;
        }
    }
    if (rc)
        bad_rc(l->v, rc);
    return NULL;
}

static int phase_loop(void)
{
    struct verifier v;
    verifier_init(&v, g_messages, (uint32_t)g_producers);
    eventq_chan_opts o;
    eventq_chan_opts_init(&o, sizeof o);
    o.capacity = 256;
    o.max_bytes = 512 * 1024;
    o.max_msg_size = MAX_LEN;
    eventq_chan *ch[LOOP_CHANS];
    for (int c = 0; c < LOOP_CHANS; c++) {
        int rc = eventq_chan_new(&o, &ch[c]);
        if (rc) {
            fprintf(stderr, "eventq_chan_new: %s\n", eventq_strerror(rc));
            return 1;
        }
    }
    if (!g_quiet)
        printf("loop: %d producers over %d channels (capacity 256, max_bytes 512 KiB), %d loop "
               "threads with a source on each channel, %" PRIu64 " messages\n",
               g_producers, LOOP_CHANS, g_consumers, g_messages);
    struct producer *pr = calloc((size_t)g_producers, sizeof *pr);
    struct looper *lo = calloc((size_t)g_consumers, sizeof *lo);
    static const size_t budgets[] = { 1, 3, 10, 64 };
    uint64_t rng = g_seed ^ 0x1009;
    for (int i = 0; i < g_consumers; i++) {
        struct looper *l = &lo[i];
        l->v = &v;
        l->how = i % 3;
        order_init(&l->o);
        int rc = eventq_loop_new(&l->lp);
        if (rc) {
            fprintf(stderr, "eventq_loop_new: %s\n", eventq_strerror(rc));
            return 1;
        }
        for (int c = 0; c < LOOP_CHANS; c++) {
            l->src[c].l = l;
            l->src[c].chan = c;
            rc = eventq_loop_add_chan(l->lp, ch[c], on_msg, &l->src[c], NULL, &l->src[c].handle);
            if (rc == 0)
                rc = eventq_source_set_budget(l->src[c].handle, budgets[(size_t)(i + c) % 4]);
            if (rc) {
                fprintf(stderr, "add_chan: %s\n", eventq_strerror(rc));
                return 1;
            }
        }
    }
    double t0 = now_s();
    for (int i = 0; i < g_consumers; i++)
        pthread_create(&lo[i].th, NULL, looper_main, &lo[i]);
    for (int i = 0; i < g_producers; i++) {
        pr[i].ch = eventq_chan_clone(ch[i % LOOP_CHANS]);
        pr[i].v = &v;
        pr[i].pid = (uint32_t)i;
        pr[i].rng = splitmix(&rng);
        pthread_create(&pr[i].th, NULL, producer_main, &pr[i]);
    }
    struct totals t = { 0 };
    for (int i = 0; i < g_producers; i++) {
        pthread_join(pr[i].th, NULL);
        t.timeouts += pr[i].timeouts;
        t.eagains += pr[i].eagains;
        t.polls += pr[i].polls;
        t.batches += pr[i].batches;
        t.partial += pr[i].partial;
        eventq_chan_free(pr[i].ch);
    }
    for (int c = 0; c < LOOP_CHANS; c++)
        eventq_chan_close(ch[c]);
    uint64_t extra_bad = 0;
    for (int i = 0; i < g_consumers; i++)
        pthread_join(lo[i].th, NULL);
    double secs = now_s() - t0;
    for (int i = 0; i < g_consumers; i++) {
        for (int c = 0; c < LOOP_CHANS; c++)
            extra_bad += (lo[i].src[c].eos != 1) + lo[i].src[c].after_eos;
        eventq_loop_free(lo[i].lp);
        /* The handles outlive their loop: calls on them give -ESTALE. */
        for (int c = 0; c < LOOP_CHANS; c++) {
            extra_bad += eventq_source_remove(lo[i].src[c].handle) != -ESTALE;
            eventq_source_free(lo[i].src[c].handle);
        }
    }
    eventq_chan_stats st[LOOP_CHANS];
    for (int c = 0; c < LOOP_CHANS; c++) {
        if (eventq_chan_free_final(ch[c], &st[c], sizeof st[c]) != 1) {
            extra_bad++;
            memset(&st[c], 0, sizeof st[c]);
        }
        if (st[c].peak_depth > o.capacity)
            extra_bad++;
    }
    char extra[160];
    snprintf(extra, sizeof extra, "; sources with end of stream != 1 or messages after it: %" PRIu64,
             extra_bad);
    if (!g_quiet) {
        printf("loop: messages per loop thread:");
        for (int i = 0; i < g_consumers; i++)
            printf(" %" PRIu64 "%s", lo[i].src[0].msgs + lo[i].src[1].msgs,
                   lo[i].how == 0 ? " (run)" : lo[i].how == 1 ? " (run_once)" : " (embedded)");
        printf("\n");
    }
    int bad = report("loop", &v, secs, &t, st, LOOP_CHANS, extra_bad, extra);
    free(pr);
    free(lo);
    verifier_free(&v);
    return bad;
}

int main(int argc, char **argv)
{
    const char *mode = "all";
    int opt;
    while ((opt = getopt(argc, argv, "n:p:c:s:m:qB")) != -1) {
        switch (opt) {
        case 'B': g_blocking = 1; break;
        case 'n': g_messages = strtoull(optarg, NULL, 0); break;
        case 'p': g_producers = atoi(optarg); break;
        case 'c': g_consumers = atoi(optarg); break;
        case 's': g_seed = strtoull(optarg, NULL, 0); break;
        case 'm': mode = optarg; break;
        case 'q': g_quiet = 1; break;
        default:
            fprintf(stderr, "usage: %s [-n MESSAGES] [-p PRODUCERS] [-c CONSUMERS] [-s SEED] "
                            "[-m bare|tight|loop|all] [-q] [-B]\n", argv[0]);
            return 2;
        }
    }
    if (g_producers < 1 || g_producers > 64 || g_consumers < 1 || g_messages < 1 ||
        g_messages / (uint64_t)g_producers >= UINT32_MAX) {
        fprintf(stderr, "stress: bad arguments\n");
        return 2;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    uint64_t s = g_seed;
    for (size_t i = 0; i < sizeof g_pool; i += 8) {
        uint64_t w = splitmix(&s);
        memcpy(g_pool + i, &w, 8);
    }
    printf("stress: libeventq %s, seed %#" PRIx64 "%s\n", eventq_version_string(), g_seed,
           g_blocking ? ", blocking calls only" : "");
    int bad = 0, ran = 0;
    if (!strcmp(mode, "bare") || !strcmp(mode, "all")) {
        bad |= phase_bare("bare", g_messages, 128, 192 * 1024);
        ran = 1;
    }
    if (!strcmp(mode, "tight") || !strcmp(mode, "all")) {
        /* Capacity 2: nearly every send and receive is a doorbell
         * transition (empty<->non-empty, full<->low water), the ground of
         * lost wake-ups. A tenth of the messages: each costs a hand-off. */
        bad |= phase_bare("tight", g_messages / 10 ? g_messages / 10 : 1, 2, 8 * 1024);
        ran = 1;
    }
    if (!strcmp(mode, "loop") || !strcmp(mode, "all")) {
        bad |= phase_loop();
        ran = 1;
    }
    if (!ran) {
        fprintf(stderr, "stress: unknown mode %s\n", mode);
        return 2;
    }
    printf("stress: %s\n", bad ? "FAILED" : "passed: 0 messages lost");
    return bad ? 1 : 0;
}
