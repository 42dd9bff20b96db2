/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * The edge guarantee, with the waiting pattern of Go's netpoller, tokio and
 * every EPOLLET user: each thread waits with EPOLLET on its own dup of the
 * channel's fd, calls the non-blocking receive (or send) until -EAGAIN (or a
 * short batch), then waits for the next event. A lost edge leaves a thread
 * asleep with work to do; the watchdog (re-armed each round) turns that hang
 * into a failure.
 *
 * Each round: PRODUCERS threads send sequenced messages into a small
 * channel, CONSUMERS threads receive them, every one on its own dup and
 * epoll set. Half the rounds close the channel once everything is sent (the
 * consumers must all see end of stream), half close it in the middle of
 * traffic, from a consumer (the producers must all see -EPIPE). Odd rounds
 * use batches. Checked: every accepted message received exactly once, each
 * producer's messages in order at every consumer, nothing received that was
 * not accepted.
 *
 * Every other pair of rounds the consumers register level-triggered with
 * EPOLLEXCLUSIVE instead, the way several consumers avoid a herd: the kernel
 * wakes one of them per write. Close writes the fd once, so only one wakes
 * for it; each receive that reports end of stream writes the fd again,
 * waking the next. Without that, the others sleep on and the watchdog fires.
 */
#include "check.h"

#include <stdatomic.h>
#include <sys/epoll.h>

#define PRODUCERS 4
#define CONSUMERS 4
#define PER_PRODUCER 500
#define CAPACITY 8
#define BATCH 4
#define DEFAULT_ROUNDS 1000

struct round {
    struct eventq_chan *chan;
    int batches;
    /* Consumers wait level-triggered with EPOLLEXCLUSIVE, not EPOLLET. */
    int exclusive;
    /* Close once this many messages were received (0: after the sends). */
    long close_at;
    atomic_long received;
    /* Per producer: how many of its sends were accepted. */
    long accepted[PRODUCERS];
    /* Per producer and sequence number: how often it was received. */
    atomic_int seen[PRODUCERS][PER_PRODUCER];
    atomic_int failures;
};

struct worker {
    struct round *r;
    int id;
};

static void fail(struct round *r, const char *what, int rc)
{
    if (atomic_fetch_add(&r->failures, 1) < 5)
        CHECK_MSG("edge: worker error", 0, "%s: %d (%s)", what, rc, eventq_strerror(rc));
}

/* An epoll set watching a dup of fd for input with the given mode. */
static int waiter(int fd, uint32_t mode, int *dup_out)
{
    int d = fcntl(fd, F_DUPFD_CLOEXEC, 0);
    int ep = epoll_create1(EPOLL_CLOEXEC);
    struct epoll_event ev = { .events = EPOLLIN | mode, .data.u64 = 0 };
    if (d < 0 || ep < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, d, &ev) < 0)
        return -1;
    *dup_out = d;
    return ep;
}

/* Sleeps until the next event; only the watchdog ends a lost one. */
static void wait_edge(int ep)
{
    struct epoll_event ev;
    while (epoll_wait(ep, &ev, 1, -1) < 0 && errno == EINTR) {
    }
}

static void record(struct round *r, int consumer, const uint8_t *m, size_t len,
                   long last[PRODUCERS])
{
    uint32_t p, seq;
    if (len != 8) {
        fail(r, "message of the wrong length", (int)len);
        return;
    }
    memcpy(&p, m, 4);
    memcpy(&seq, m + 4, 4);
    if (p >= PRODUCERS || seq >= PER_PRODUCER) {
        fail(r, "message never sent", (int)p);
        return;
    }
    if ((long)seq <= last[p])
        fail(r, "D3: a producer's messages out of order at consumer", consumer);
    last[p] = seq;
    atomic_fetch_add(&r->seen[p][seq], 1);
    long n = atomic_fetch_add(&r->received, 1) + 1;
    if (r->close_at > 0 && n == r->close_at)
        eventq_chan_close(r->chan);
}

static void *consumer(void *arg)
{
    struct worker *w = arg;
    struct round *r = w->r;
    int d;
    int ep = waiter(eventq_chan_recv_fd(r->chan), r->exclusive ? EPOLLEXCLUSIVE : EPOLLET, &d);
    long last[PRODUCERS];
    uint8_t buf[8 * BATCH];
    size_t lens[BATCH];
    if (ep < 0) {
        fail(r, "epoll set-up", -errno);
        return NULL;
    }
    for (int p = 0; p < PRODUCERS; p++)
        last[p] = -1;
    for (;;) {
        int rc;
        if (r->batches) {
            rc = eventq_chan_recv_batch(r->chan, buf, sizeof buf, lens, BATCH, 0);
            for (int i = 0; i < rc; i++)
                record(r, w->id, buf + 8 * i, lens[i], last);
            if (rc == BATCH)
                continue;
            if (rc > 0)
                rc = -EAGAIN; /* short batch: wait for the next edge */
        } else {
            size_t len;
            rc = eventq_chan_recv(r->chan, buf, sizeof buf, &len, 0);
            if (rc == 0) {
                record(r, w->id, buf, len, last);
                continue;
            }
        }
        if (rc == -EAGAIN)
            wait_edge(ep);
        else if (rc == -EPIPE)
            break;
        else {
            fail(r, "receive", rc);
            break;
        }
    }
    close(ep);
    close(d);
    return NULL;
}

static void *producer(void *arg)
{
    struct worker *w = arg;
    struct round *r = w->r;
    int d;
    int ep = waiter(eventq_chan_send_fd(r->chan), EPOLLET, &d);
    if (ep < 0) {
        fail(r, "epoll set-up", -errno);
        return NULL;
    }
    uint32_t p = (uint32_t)w->id;
    long seq = 0;
    while (seq < PER_PRODUCER) {
        uint8_t m[8 * BATCH];
        struct eventq_buf bufs[BATCH];
        size_t n = r->batches ? BATCH : 1;
        if (seq + (long)n > PER_PRODUCER)
            n = (size_t)(PER_PRODUCER - seq);
        for (size_t i = 0; i < n; i++) {
            uint32_t s = (uint32_t)(seq + (long)i);
            memcpy(m + 8 * i, &p, 4);
            memcpy(m + 8 * i + 4, &s, 4);
            bufs[i].data = m + 8 * i;
            bufs[i].len = 8;
        }
        int rc = eventq_chan_send_batch(r->chan, bufs, n, 0);
        if (rc > 0) {
            seq += rc;
            if ((size_t)rc == n)
                continue;
            rc = -EAGAIN; /* short batch: wait for the next edge */
        }
        if (rc == -EAGAIN)
            wait_edge(ep);
        else if (rc == -EPIPE)
            break;
        else {
            fail(r, "send", rc);
            break;
        }
    }
    r->accepted[p] = seq;
    close(ep);
    close(d);
    return NULL;
}

static int run_round(int round, int batches, int exclusive, long close_at)
{
    static struct round r;
    memset(&r, 0, sizeof r);
    r.batches = batches;
    r.exclusive = exclusive;
    r.close_at = close_at;
    struct eventq_chan_opts o;
    eventq_chan_opts_init(&o, sizeof o);
    o.capacity = CAPACITY;
    REQUIRE("edge: channel", eventq_chan_new(&o, &r.chan) == 0);

    pthread_t pt[PRODUCERS], ct[CONSUMERS];
    struct worker pw[PRODUCERS], cw[CONSUMERS];
    for (int i = 0; i < CONSUMERS; i++) {
        cw[i] = (struct worker){ &r, i };
        REQUIRE("edge: consumer thread", pthread_create(&ct[i], NULL, consumer, &cw[i]) == 0);
    }
    for (int i = 0; i < PRODUCERS; i++) {
        pw[i] = (struct worker){ &r, i };
        REQUIRE("edge: producer thread", pthread_create(&pt[i], NULL, producer, &pw[i]) == 0);
    }
    for (int i = 0; i < PRODUCERS; i++)
        pthread_join(pt[i], NULL);
    eventq_chan_close(r.chan); /* a no-op if a consumer closed it already */
    for (int i = 0; i < CONSUMERS; i++)
        pthread_join(ct[i], NULL);

    int bad = atomic_load(&r.failures);
    long total = 0;
    for (int p = 0; p < PRODUCERS; p++) {
        total += r.accepted[p];
        for (int s = 0; s < PER_PRODUCER; s++) {
            int want = s < r.accepted[p] ? 1 : 0;
            int got = atomic_load(&r.seen[p][s]);
            if (got != want && bad++ < 5)
                CHECK_MSG("edge: D1 exactly once", 0,
                          "round %d: producer %d message %d received %d times, want %d",
                          round, p, s, got, want);
        }
    }
    if (total != atomic_load(&r.received) && bad++ < 5)
        CHECK_MSG("edge: D1 count", 0, "round %d: %ld accepted, %ld received", round, total,
                  atomic_load(&r.received));
    eventq_chan_free(r.chan);
    return bad;
}

int main(int argc, char **argv)
{
    check_init();
    int rounds = argc > 1 ? atoi(argv[1]) : DEFAULT_ROUNDS;
    int failed = 0, mid_closes = 0, exclusive_rounds = 0;
    for (int i = 0; i < rounds && failed == 0; i++) {
        alarm(CHECK_WATCHDOG_SECONDS); /* per round: a hang fails the test */
        int mid = i % 4 >= 2;
        /* Mid-traffic closes at varying points of the stream. */
        long close_at = mid ? 1 + (long)(i * 997) % (PRODUCERS * PER_PRODUCER - 1) : 0;
        int exclusive = i % 8 >= 4;
        mid_closes += mid;
        exclusive_rounds += exclusive;
        failed += run_round(i, i % 2, exclusive, close_at);
    }
    CHECK_MSG("edge: EPOLLET (or EPOLLEXCLUSIVE) consumers and EPOLLET producers on their own "
              "dups lose no wake-up",
              failed == 0, "%d failures", failed);
    printf("# %d rounds of %d producers x %d consumers, capacity %d, %d closed mid-traffic, "
           "%d with EPOLLEXCLUSIVE consumers\n",
           rounds, PRODUCERS, CONSUMERS, CAPACITY, mid_closes, exclusive_rounds);
    return check_done();
}
