/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * The loop's channel sources through the C ABI (D8 with D1-D3 through the
 * loop): per-message delivery from several producer threads, checked with
 * (producer id, sequence, body length, checksum) messages; four loops sharing
 * one channel, one leaving mid-stream; the per-iteration budget (eventq_source_set_budget); empty and
 * large messages; end of stream (data NULL) exactly once, then the source is
 * disabled; a negative return disabling the source (eventq_source_error); the
 * source's own reference to the channel; a lone busy source under
 * eventq_loop_run yielding to a post and a stop within two budgets.
 *
 * No sleeps and no timing assertions: every result is the same whatever the
 * interleaving. Readiness is checked only at quiescent points.
 */
#include "check.h" /* includes <eventq.h> */

#include <stdatomic.h>

/* ---- messages: (producer id, sequence, body length, checksum) + body ---- */

struct hdr {
    uint32_t pid;
    uint32_t seq;
    uint32_t body_len;
    uint32_t sum;
};

#define MAX_BODY 200
#define MAX_MSG (sizeof(struct hdr) + MAX_BODY)
#define MAX_PROD 8

static uint32_t body_len_of(uint32_t pid, uint32_t seq)
{
    uint32_t x = seq * 2654435761u ^ (pid + 1) * 40503u;
    x ^= x >> 13;
    return x % (MAX_BODY + 1);
}

static uint8_t body_byte(uint32_t pid, uint32_t seq, uint32_t i)
{
    return (uint8_t)(pid * 131u + seq * 7u + i * 13u + (i >> 8));
}

static size_t make_msg(uint8_t *buf, uint32_t pid, uint32_t seq)
{
    struct hdr h = { pid, seq, body_len_of(pid, seq), 0 };
    uint8_t *body = buf + sizeof h;
    for (uint32_t i = 0; i < h.body_len; i++)
        body[i] = body_byte(pid, seq, i);
    h.sum = check_fnv1a(body, h.body_len);
    memcpy(buf, &h, sizeof h);
    return sizeof h + h.body_len;
}

/* What one channel source saw. Written only by its loop's thread. */
struct rx {
    struct eventq_loop *lp;
    int producers;
    uint32_t per_producer;
    int64_t last_seq[MAX_PROD];
    uint64_t count[MAX_PROD];
    uint64_t got;        /* messages */
    uint64_t bad_len;    /* merged, split or truncated (D2) */
    uint64_t bad_sum;    /* body bytes or checksum wrong (D2) */
    uint64_t bad_pid;    /* unknown producer or sequence */
    uint64_t bad_order;  /* a producer's messages out of order (D3) */
    uint64_t eos;        /* data == NULL calls */
    uint64_t after_eos;  /* any call after end of stream */
    uint64_t iter_calls; /* messages in the current iteration */
    uint64_t max_per_iter;
    int stop_at_eos;
    /* Remove the source and stop the loop after this many messages (0:
     * never): a consumer that leaves with messages still queued. */
    uint64_t leave_at;
    int left;
};

static void rx_init(struct rx *r, struct eventq_loop *lp, int producers, uint32_t per)
{
    memset(r, 0, sizeof *r);
    r->lp = lp;
    r->producers = producers;
    r->per_producer = per;
    for (int i = 0; i < MAX_PROD; i++)
        r->last_seq[i] = -1;
}

static void rx_msg(struct rx *r, const uint8_t *p, size_t len)
{
    struct hdr h;
    if (len < sizeof h) {
        r->bad_len++;
        return;
    }
    memcpy(&h, p, sizeof h);
    if (h.pid >= (uint32_t)r->producers || h.seq >= r->per_producer) {
        r->bad_pid++;
        return;
    }
    if (h.body_len != body_len_of(h.pid, h.seq) || len != sizeof h + h.body_len) {
        r->bad_len++;
        return;
    }
    const uint8_t *body = p + sizeof h;
    int ok = check_fnv1a(body, h.body_len) == h.sum;
    for (uint32_t i = 0; ok && i < h.body_len; i++)
        ok = body[i] == body_byte(h.pid, h.seq, i);
    if (!ok)
        r->bad_sum++;
    if ((int64_t)h.seq <= r->last_seq[h.pid])
        r->bad_order++;
    r->last_seq[h.pid] = h.seq;
    r->count[h.pid]++;
    r->got++;
}

static int rx_cb(struct eventq_source *src, const void *data, size_t len, void *ud)
{
    struct rx *r = ud;
    (void)src;
    if (r->eos)
        r->after_eos++;
    if (data == NULL) {
        r->eos++;
        if (r->stop_at_eos)
            eventq_loop_stop(r->lp);
        return 0;
    }
    r->iter_calls++;
    rx_msg(r, data, len);
    if (r->leave_at && r->got == r->leave_at) {
        r->left = eventq_source_remove(src) == 0;
        eventq_loop_stop(r->lp);
    }
    return 0;
}

/* ---- producers ---- */

struct producer {
    pthread_t th;
    eventq_chan *ch; /* its own handle */
    uint32_t pid;
    uint32_t count;
    int batch;       /* use eventq_chan_send_batch */
    atomic_int *alive;
    uint32_t accepted;
    int bad_rc;
};

static void *producer_main(void *arg)
{
    struct producer *p = arg;
    uint8_t bufs[8][MAX_MSG];
    uint32_t seq = 0;
    while (seq < p->count) {
        if (p->batch) {
            eventq_buf b[8];
            uint32_t n = 0;
            for (; n < 8 && seq + n < p->count; n++) {
                b[n].data = bufs[n];
                b[n].len = make_msg(bufs[n], p->pid, seq + n);
            }
            int rc = eventq_chan_send_batch(p->ch, b, n, EVENTQ_FOREVER);
            if (rc <= 0) {
                p->bad_rc = rc ? rc : -1;
                break;
            }
            seq += (uint32_t)rc;
        } else {
            size_t len = make_msg(bufs[0], p->pid, seq);
            int rc = eventq_chan_send(p->ch, bufs[0], len, EVENTQ_FOREVER);
            if (rc != 0) {
                p->bad_rc = rc;
                break;
            }
            seq++;
        }
    }
    p->accepted = seq;
    /* The last producer to finish closes the channel: end of stream. */
    if (atomic_fetch_sub(p->alive, 1) == 1)
        eventq_chan_close(p->ch);
    eventq_chan_free(p->ch);
    return NULL;
}

static void start_producers(struct producer *ps, int n, eventq_chan *ch, uint32_t per,
                            atomic_int *alive)
{
    atomic_store(alive, n);
    for (int i = 0; i < n; i++) {
        ps[i] = (struct producer){ .ch = eventq_chan_clone(ch), .pid = (uint32_t)i,
                                   .count = per, .batch = i % 2, .alive = alive };
        REQUIRE("clone", ps[i].ch != NULL);
        REQUIRE("pthread_create", pthread_create(&ps[i].th, NULL, producer_main, &ps[i]) == 0);
    }
}

static void join_producers(const char *name, struct producer *ps, int n, uint32_t per)
{
    int bad = 0;
    for (int i = 0; i < n; i++) {
        pthread_join(ps[i].th, NULL);
        if (ps[i].bad_rc || ps[i].accepted != per)
            bad++;
    }
    CHECK_MSG(name, bad == 0, "%d producers failed to send all", bad);
}

static void check_rx(const char *what, const struct rx *r, uint64_t per)
{
    char name[160];
    int wrong = 0;
    for (int i = 0; i < r->producers; i++)
        wrong += r->count[i] != per;
    snprintf(name, sizeof name, "%s: D1 every message exactly once", what);
    CHECK_MSG(name, wrong == 0 && r->got == per * (uint64_t)r->producers && r->bad_pid == 0,
              "got %llu of %llu, %d producers with the wrong count, %llu unknown",
              (unsigned long long)r->got, (unsigned long long)(per * (uint64_t)r->producers),
              wrong, (unsigned long long)r->bad_pid);
    snprintf(name, sizeof name, "%s: D2 every message whole", what);
    CHECK_MSG(name, r->bad_len == 0 && r->bad_sum == 0, "%llu bad lengths, %llu bad bodies",
              (unsigned long long)r->bad_len, (unsigned long long)r->bad_sum);
    snprintf(name, sizeof name, "%s: D3 per-producer order", what);
    CHECK_U64(name, r->bad_order, 0);
    snprintf(name, sizeof name, "%s: end of stream exactly once, nothing after", what);
    CHECK_MSG(name, r->eos == 1 && r->after_eos == 0, "eos %llu, after %llu",
              (unsigned long long)r->eos, (unsigned long long)r->after_eos);
}

/* ---- a level-triggered pipe that is always readable: the "other source" ---- */

struct busy {
    int p[2];
    uint64_t calls;
    struct rx *r;             /* to close the per-iteration window */
};

static int busy_cb(struct eventq_source *src, int fd, uint32_t revents, void *ud)
{
    struct busy *b = ud;
    (void)src;
    (void)fd;
    (void)revents;
    b->calls++;
    return 0;
}

static void make_busy(struct busy *b)
{
    memset(b, 0, sizeof *b);
    REQUIRE("pipe2", pipe2(b->p, O_NONBLOCK | O_CLOEXEC) == 0);
    REQUIRE("write", write(b->p[1], "x", 1) == 1);
}

static void close_busy(struct busy *b)
{
    close(b->p[0]);
    close(b->p[1]);
}

/* D1-D3 through a loop run with eventq_loop_run: producers on their own
 * threads, the loop on this one, stopped by the end-of-stream callback. */
static void test_producers_run(void)
{
    enum { NPROD = 4, PER = 10000 };
    struct eventq_loop *lp;
    eventq_chan_opts o;
    eventq_chan *ch;
    struct eventq_source *src;
    struct producer ps[NPROD];
    atomic_int alive;
    struct rx r;

    REQUIRE("loop_new", eventq_loop_new(&lp) == 0);
    eventq_chan_opts_init(&o, sizeof o);
    o.capacity = 64; /* producers block on a full channel */
    REQUIRE("chan_new", eventq_chan_new(&o, &ch) == 0);
    rx_init(&r, lp, NPROD, PER);
    r.stop_at_eos = 1;
    REQUIRE("add_chan", eventq_loop_add_chan(lp, ch, rx_cb, &r, NULL, &src) == 0);

    start_producers(ps, NPROD, ch, PER, &alive);
    CHECK_INT("run: returns 0 when stopped at end of stream", eventq_loop_run(lp), 0);
    join_producers("run: every producer sent all", ps, NPROD, PER);
    check_rx("run, 4 producers", &r, PER);

    eventq_chan_stats st;
    REQUIRE("stats", eventq_chan_get_stats(ch, &st, sizeof st) == 0);
    CHECK_MSG("run: the channel counted every message received", st.sent == st.received &&
              st.sent == (uint64_t)NPROD * PER && st.pending == 0,
              "sent %llu received %llu pending %llu", (unsigned long long)st.sent,
              (unsigned long long)st.received, (unsigned long long)st.pending);
    CHECK_INT("run: after end of stream the source is disabled (no callback)",
              eventq_loop_run_once(lp, 0), 0);
    CHECK_INT("run: ...and the loop fd is not readable",
              fd_readable(eventq_loop_fd(lp)), 0);
    CHECK_INT("run: end of stream is not an error", eventq_source_error(src), 0);
    CHECK_U64("run: still exactly one end of stream", r.eos, 1);

    eventq_source_free(src);
    eventq_loop_free(lp);
    eventq_chan_free(ch);
}

/* D1-D3 with a small budget and a busy second source, driven by
 * eventq_loop_run_once: no iteration delivers more than the budget. */
static void test_producers_budget(void)
{
    enum { NPROD = 3, PER = 5000, BUDGET = 7 };
    struct eventq_loop *lp;
    eventq_chan_opts o;
    eventq_chan *ch;
    struct eventq_source *src, *bsrc;
    struct producer ps[NPROD];
    atomic_int alive;
    struct rx r;
    struct busy b;

    REQUIRE("loop_new", eventq_loop_new(&lp) == 0);
    eventq_chan_opts_init(&o, sizeof o);
    o.capacity = 256;
    REQUIRE("chan_new", eventq_chan_new(&o, &ch) == 0);
    rx_init(&r, lp, NPROD, PER);
    make_busy(&b);
    REQUIRE("add_chan", eventq_loop_add_chan(lp, ch, rx_cb, &r, NULL, &src) == 0);
    REQUIRE("add_fd", eventq_loop_add_fd(lp, b.p[0], EVENTQ_IN, busy_cb, &b, NULL, &bsrc) == 0);
    CHECK_INT("budget: set_budget(7)", eventq_source_set_budget(src, BUDGET), 0);

    start_producers(ps, NPROD, ch, PER, &alive);
    uint64_t iterations = 0, bad_rc = 0, starved = 0;
    while (r.eos == 0) {
        uint64_t before_busy = b.calls;
        r.iter_calls = 0;
        int n = eventq_loop_run_once(lp, EVENTQ_FOREVER);
        if (n < 0) {
            bad_rc++;
            break;
        }
        iterations++;
        if (r.iter_calls > r.max_per_iter)
            r.max_per_iter = r.iter_calls;
        /* the pipe is always readable: every iteration must serve it */
        if (b.calls != before_busy + 1)
            starved++;
    }
    join_producers("budget: every producer sent all", ps, NPROD, PER);
    CHECK_U64("budget: run_once never failed", bad_rc, 0);
    check_rx("budget 7 + busy pipe, 3 producers", &r, PER);
    CHECK_MSG("budget: no iteration delivered more than the budget", r.max_per_iter <= BUDGET,
              "an iteration delivered %llu messages, budget %d",
              (unsigned long long)r.max_per_iter, BUDGET);
    CHECK_MSG("budget: the other source ran in every iteration (not starved)", starved == 0,
              "%llu of %llu iterations skipped the pipe", (unsigned long long)starved,
              (unsigned long long)iterations);
    CHECK_MSG("budget: it took at least messages/budget iterations",
              iterations >= (uint64_t)NPROD * PER / BUDGET, "%llu iterations",
              (unsigned long long)iterations);
    CHECK_INT("budget: after end of stream only the pipe runs", eventq_loop_run_once(lp, 0), 1);

    eventq_source_free(src);
    eventq_source_free(bsrc);
    eventq_loop_free(lp);
    eventq_chan_free(ch);
    close_busy(&b);
}

/* Loops on their own threads, each with a source on the same channel:
 * competing consumers. The loops register the fd with EPOLLEXCLUSIVE, so a
 * message wakes one of them: each must pass end of stream on to the next,
 * and one that leaves with messages queued (here the first, after LEAVE_AT
 * messages, from inside its callback) must wake another. Every message
 * reaches exactly one loop (D1), each sees each producer's messages in order
 * (D3), every loop still there sees end of stream once. A lost hand-on
 * leaves the others asleep over a full channel: the watchdog fails it. */
struct loop_thread {
    pthread_t th;
    struct eventq_loop *lp;
    int rc;
};

static void *loop_main(void *arg)
{
    struct loop_thread *t = arg;
    t->rc = eventq_loop_run(t->lp);
    return NULL;
}

enum { NLOOPS = 4, LOOP_ROUNDS = 40 };

static int loops_round(int round, int *left)
{
    enum { NPROD = 4, PER = 1000 };
    struct loop_thread lt[NLOOPS];
    struct rx r[NLOOPS];
    struct eventq_source *src[NLOOPS];
    eventq_chan *ch;
    struct producer ps[NPROD];
    atomic_int alive;
    eventq_chan_opts o;
    int bad = 0;

    eventq_chan_opts_init(&o, sizeof o);
    o.capacity = 64;
    REQUIRE("chan_new", eventq_chan_new(&o, &ch) == 0);
    for (int i = 0; i < NLOOPS; i++) {
        REQUIRE("loop_new", eventq_loop_new(&lt[i].lp) == 0);
        rx_init(&r[i], lt[i].lp, NPROD, PER);
        r[i].stop_at_eos = 1;
        r[i].leave_at = i == 0 && round % 2 ? 1 + (uint64_t)round % 50 : 0;
        REQUIRE("add_chan", eventq_loop_add_chan(lt[i].lp, ch, rx_cb, &r[i], NULL, &src[i]) == 0);
        REQUIRE("set_budget", eventq_source_set_budget(src[i], 1 + (size_t)(i + round) % 4) == 0);
    }
    for (int i = 0; i < NLOOPS; i++)
        REQUIRE("pthread_create", pthread_create(&lt[i].th, NULL, loop_main, &lt[i]) == 0);
    start_producers(ps, NPROD, ch, PER, &alive);
    for (int i = 0; i < NPROD; i++) {
        pthread_join(ps[i].th, NULL);
        if ((ps[i].bad_rc || ps[i].accepted != PER) && bad++ < 5)
            CHECK_MSG("loops: every producer sent all", 0, "round %d: producer %d", round, i);
    }
    for (int i = 0; i < NLOOPS; i++)
        pthread_join(lt[i].th, NULL);

    uint64_t total = 0, whole = 0, order = 0;
    int wrong = 0, rcs = 0, eos = 0;
    for (int i = 0; i < NLOOPS; i++) {
        whole += r[i].bad_len + r[i].bad_sum + r[i].bad_pid;
        order += r[i].bad_order;
        total += r[i].got;
        rcs += lt[i].rc != 0;
        /* A loop that left sees no end of stream; the others once each (a
         * loop that had fewer messages than it would leave at stays). */
        eos += r[i].eos != (r[i].left ? 0u : 1u) || r[i].after_eos != 0;
        *left += r[i].left;
        if (r[i].leave_at && r[i].got >= r[i].leave_at && !r[i].left && bad++ < 5)
            CHECK_MSG("loops: a source removes itself", 0, "round %d", round);
    }
    for (int p = 0; p < NPROD; p++) {
        uint64_t n = 0;
        for (int i = 0; i < NLOOPS; i++)
            n += r[i].count[p];
        wrong += n != PER;
    }
    if ((total != (uint64_t)NPROD * PER || wrong) && bad++ < 5)
        CHECK_MSG("loops: D1 each message reached exactly one loop", 0,
                  "round %d: total %llu, %d producers wrong", round, (unsigned long long)total,
                  wrong);
    if (whole && bad++ < 5)
        CHECK_MSG("loops: D2 every message whole", 0, "round %d: %llu bad", round,
                  (unsigned long long)whole);
    if (order && bad++ < 5)
        CHECK_MSG("loops: D3 order within each loop", 0, "round %d: %llu out of order", round,
                  (unsigned long long)order);
    if ((rcs || eos) && bad++ < 5)
        CHECK_MSG("loops: every run returned 0, end of stream once per loop still there", 0,
                  "round %d: %d runs failed, %d loops with the wrong end of stream", round, rcs,
                  eos);
    for (int i = 0; i < NLOOPS; i++) {
        eventq_source_free(src[i]);
        eventq_loop_free(lt[i].lp);
    }
    eventq_chan_free(ch);
    return bad;
}

static void test_loops_one_channel(void)
{
    int bad = 0, left = 0;
    for (int i = 0; i < LOOP_ROUNDS && bad == 0; i++) {
        alarm(CHECK_WATCHDOG_SECONDS); /* per round: a hang fails the test */
        bad += loops_round(i, &left);
    }
    CHECK_MSG("loops: four loops share a channel, one leaving mid-stream, over rounds", bad == 0,
              "%d failures", bad);
    printf("# %d rounds of %d loops, a loop left mid-stream in %d\n", LOOP_ROUNDS, NLOOPS, left);
}

/* ---- exact budgets on a pre-filled channel ---- */

struct counter {
    uint64_t msgs, eos, empty_nonnull, empty_null;
    uint64_t ret_error_at; /* return -EIO at this message (1-based), 0: never */
    size_t last_len;
    uint32_t last_sum;
};

static int count_cb(struct eventq_source *src, const void *data, size_t len, void *ud)
{
    struct counter *c = ud;
    (void)src;
    if (data == NULL) {
        c->eos++;
        return 0;
    }
    c->msgs++;
    c->last_len = len;
    c->last_sum = check_fnv1a(data, len);
    if (len == 0)
        c->empty_nonnull++;
    if (c->ret_error_at && c->msgs == c->ret_error_at)
        return -EIO;
    return 0;
}

static void send_n(eventq_chan *ch, int n)
{
    for (int i = 0; i < n; i++) {
        uint32_t v = (uint32_t)i;
        REQUIRE("send", eventq_chan_send(ch, &v, sizeof v, 0) == 0);
    }
}

static void test_budget_exact(void)
{
    struct eventq_loop *lp;
    eventq_chan *ch, *ch2;
    struct eventq_source *src, *src2, *bsrc;
    struct counter c = { 0 }, c2 = { 0 };
    struct busy b;

    REQUIRE("loop_new", eventq_loop_new(&lp) == 0);
    REQUIRE("chan_new", eventq_chan_new(NULL, &ch) == 0);
    REQUIRE("chan_new", eventq_chan_new(NULL, &ch2) == 0);
    make_busy(&b);
    send_n(ch, 100);
    send_n(ch2, EVENTQ_DEFAULT_BUDGET + 50); /* more than one iteration takes */
    REQUIRE("add_chan", eventq_loop_add_chan(lp, ch, count_cb, &c, NULL, &src) == 0);
    REQUIRE("add_chan", eventq_loop_add_chan(lp, ch2, count_cb, &c2, NULL, &src2) == 0);
    REQUIRE("add_fd", eventq_loop_add_fd(lp, b.p[0], EVENTQ_IN, busy_cb, &b, NULL, &bsrc) == 0);

    CHECK_INT("budget exact: set_budget(3)", eventq_source_set_budget(src, 3), 0);
    CHECK_INT("budget exact: one iteration runs 3 + default budget + 1 callbacks",
              eventq_loop_run_once(lp, 0), 3 + EVENTQ_DEFAULT_BUDGET + 1);
    CHECK_U64("budget exact: budget 3 delivers exactly 3", c.msgs, 3);
    CHECK_U64("budget exact: the default budget delivers EVENTQ_DEFAULT_BUDGET", c2.msgs,
              EVENTQ_DEFAULT_BUDGET);
    CHECK_U64("budget exact: the other source ran once", b.calls, 1);
    eventq_loop_run_once(lp, 0);
    CHECK_U64("budget exact: the next iteration 3 more", c.msgs, 6);
    CHECK_INT("budget exact: set_budget(1)", eventq_source_set_budget(src, 1), 0);
    eventq_loop_run_once(lp, 0);
    CHECK_U64("budget exact: budget 1 delivers one", c.msgs, 7);
    CHECK_INT("budget exact: set_budget(1000)", eventq_source_set_budget(src, 1000), 0);
    eventq_loop_run_once(lp, 0);
    CHECK_U64("budget exact: a large budget drains the rest in one iteration", c.msgs, 100);
    CHECK_U64("budget exact: no end of stream while open", c.eos, 0);
    eventq_chan_close(ch);
    eventq_source_remove(src2);
    eventq_source_remove(bsrc);
    CHECK_INT("budget exact: closed and drained: one call, end of stream",
              eventq_loop_run_once(lp, 0), 1);
    CHECK_U64("budget exact: end of stream once", c.eos, 1);
    CHECK_INT("budget exact: then nothing", eventq_loop_run_once(lp, 0), 0);

    eventq_source_free(src);
    eventq_source_free(src2);
    eventq_source_free(bsrc);
    eventq_loop_free(lp);
    eventq_chan_free(ch);
    eventq_chan_free(ch2);
    close_busy(&b);
}

/* End of stream comes after the last queued message, even when the close
 * came first; messages queued at close are all delivered (D6). */
static void test_close_with_queued(void)
{
    struct eventq_loop *lp;
    eventq_chan *ch;
    struct eventq_source *src;
    struct counter c = { 0 };

    REQUIRE("loop_new", eventq_loop_new(&lp) == 0);
    REQUIRE("chan_new", eventq_chan_new(NULL, &ch) == 0);
    send_n(ch, 25);
    eventq_chan_close(ch);
    REQUIRE("add_chan", eventq_loop_add_chan(lp, ch, count_cb, &c, NULL, &src) == 0);
    REQUIRE("budget 10", eventq_source_set_budget(src, 10) == 0);
    CHECK_INT("close with queued: 10 per iteration", eventq_loop_run_once(lp, 0), 10);
    CHECK_INT("close with queued: 10", eventq_loop_run_once(lp, 0), 10);
    CHECK_INT("close with queued: the last 5 then end of stream", eventq_loop_run_once(lp, 0), 6);
    CHECK_MSG("close with queued: 25 messages then one end of stream",
              c.msgs == 25 && c.eos == 1, "msgs %llu eos %llu", (unsigned long long)c.msgs,
              (unsigned long long)c.eos);
    CHECK_INT("close with queued: disabled afterwards", eventq_loop_run_once(lp, 0), 0);
    CHECK_INT("close with queued: loop fd idle", fd_readable(eventq_loop_fd(lp)), 0);
    eventq_source_free(src);
    eventq_loop_free(lp);
    eventq_chan_free(ch);
}

/* Empty messages arrive with a non-NULL data; a large message arrives whole. */
static void test_empty_and_large(void)
{
    struct eventq_loop *lp;
    eventq_chan *ch;
    struct eventq_source *src;
    struct counter c = { 0 };
    size_t big = (size_t)1 << 20;
    uint8_t *buf = malloc(big);

    REQUIRE("malloc", buf != NULL);
    for (size_t i = 0; i < big; i++)
        buf[i] = (uint8_t)(i * 31 + (i >> 12));
    REQUIRE("loop_new", eventq_loop_new(&lp) == 0);
    REQUIRE("chan_new", eventq_chan_new(NULL, &ch) == 0);
    REQUIRE("add_chan", eventq_loop_add_chan(lp, ch, count_cb, &c, NULL, &src) == 0);
    REQUIRE("send", eventq_chan_send(ch, NULL, 0, 0) == 0);
    REQUIRE("send", eventq_chan_send(ch, "", 0, 0) == 0);
    eventq_loop_run_once(lp, 0);
    CHECK_MSG("empty messages: two calls, len 0, data non-NULL", c.msgs == 2 &&
              c.empty_nonnull == 2 && c.eos == 0, "msgs %llu nonnull %llu eos %llu",
              (unsigned long long)c.msgs, (unsigned long long)c.empty_nonnull,
              (unsigned long long)c.eos);
    REQUIRE("send big", eventq_chan_send(ch, buf, 100000, 0) == 0);
    REQUIRE("send big", eventq_chan_send(ch, buf, big, 0) == 0);
    REQUIRE("send", eventq_chan_send(ch, "abc", 3, 0) == 0);
    CHECK_INT("large: three messages in one iteration", eventq_loop_run_once(lp, 0), 3);
    CHECK_U64("large: the last one is whole", c.last_sum, check_fnv1a("abc", 3));
    c.msgs = 0;
    REQUIRE("send big", eventq_chan_send(ch, buf, big, 0) == 0);
    eventq_loop_run_once(lp, 0);
    CHECK_MSG("large: a 1 MiB message arrives whole", c.msgs == 1 && c.last_len == big &&
              c.last_sum == check_fnv1a(buf, big), "msgs %llu len %zu",
              (unsigned long long)c.msgs, c.last_len);
    eventq_source_free(src);
    eventq_loop_free(lp);
    eventq_chan_free(ch);
    free(buf);
}

/* A negative return disables the source; eventq_source_error reports it;
 * re-enabling resumes delivery where it stopped and clears nothing. */
static void test_negative_return(void)
{
    struct eventq_loop *lp;
    eventq_chan *ch;
    struct eventq_source *src;
    struct counter c = { 0 };

    REQUIRE("loop_new", eventq_loop_new(&lp) == 0);
    REQUIRE("chan_new", eventq_chan_new(NULL, &ch) == 0);
    send_n(ch, 8);
    c.ret_error_at = 2;
    REQUIRE("add_chan", eventq_loop_add_chan(lp, ch, count_cb, &c, NULL, &src) == 0);
    CHECK_INT("negative return: no error before", eventq_source_error(src), 0);
    CHECK_INT("negative return: delivery stops at the failing message",
              eventq_loop_run_once(lp, 0), 2);
    CHECK_INT("negative return: eventq_source_error reports -EIO", eventq_source_error(src),
              -EIO);
    CHECK_INT("negative return: the source is disabled (messages still queued)",
              eventq_loop_run_once(lp, 0), 0);
    CHECK_INT("negative return: loop fd idle while disabled", fd_readable(eventq_loop_fd(lp)), 0);
    eventq_chan_stats st;
    eventq_chan_get_stats(ch, &st, sizeof st);
    CHECK_U64("negative return: nothing lost: 6 still queued", st.pending, 6);
    CHECK_INT("negative return: re-enable", eventq_source_set_enabled(src, 1), 0);
    CHECK_INT("negative return: the rest is delivered", eventq_loop_run_once(lp, 0), 6);
    CHECK_U64("negative return: 8 messages in all", c.msgs, 8);
    CHECK_INT("negative return: re-enabling clears nothing", eventq_source_error(src), -EIO);
    eventq_source_free(src);
    eventq_loop_free(lp);
    eventq_chan_free(ch);
}

/* The source holds its own reference: the caller may free its handle. */
static void test_source_holds_channel(void)
{
    struct eventq_loop *lp;
    eventq_chan *ch, *tx;
    struct eventq_source *src;
    struct counter c = { 0 };

    REQUIRE("loop_new", eventq_loop_new(&lp) == 0);
    REQUIRE("chan_new", eventq_chan_new(NULL, &ch) == 0);
    tx = eventq_chan_clone(ch);
    REQUIRE("clone", tx != NULL);
    REQUIRE("add_chan", eventq_loop_add_chan(lp, ch, count_cb, &c, NULL, &src) == 0);
    eventq_chan_free(ch);
    send_n(tx, 4);
    eventq_chan_close(tx);
    eventq_loop_run_once(lp, 0);
    CHECK_MSG("own reference: delivery after the caller freed its handle",
              c.msgs == 4 && c.eos == 1, "msgs %llu eos %llu", (unsigned long long)c.msgs,
              (unsigned long long)c.eos);
    /* Removing the source drops its reference: tx is now the last handle. */
    eventq_source_free(src);
    eventq_chan_stats st;
    CHECK_INT("own reference: tx is the last handle after remove",
              eventq_chan_free_final(tx, &st, sizeof st), 1);
    eventq_loop_free(lp);
}

/* The loop thread is a consumer among others: the seed's scenario, with the
 * loop on its own thread and the main thread as one of the producers. */
static void test_loop_thread_main_produces(void)
{
    enum { NPROD = 3, PER = 4000 };
    struct loop_thread lt;
    struct rx r;
    struct eventq_source *src;
    eventq_chan *ch;
    struct producer ps[NPROD];
    atomic_int alive;

    REQUIRE("loop_new", eventq_loop_new(&lt.lp) == 0);
    REQUIRE("chan_new", eventq_chan_new(NULL, &ch) == 0);
    rx_init(&r, lt.lp, NPROD + 1, PER);
    r.stop_at_eos = 1;
    REQUIRE("pthread_create", pthread_create(&lt.th, NULL, loop_main, &lt) == 0);
    /* added from another thread while the loop runs */
    CHECK_INT("loop thread: add_chan while the loop runs",
              eventq_loop_add_chan(lt.lp, ch, rx_cb, &r, NULL, &src), 0);
    start_producers(ps, NPROD, ch, PER, &alive);
    atomic_fetch_add(&alive, 1); /* main is a producer too */
    uint8_t buf[MAX_MSG];
    int bad = 0;
    for (uint32_t s = 0; s < PER; s++) {
        size_t len = make_msg(buf, NPROD, s);
        bad += eventq_chan_send(ch, buf, len, EVENTQ_FOREVER) != 0;
    }
    if (atomic_fetch_sub(&alive, 1) == 1)
        eventq_chan_close(ch);
    join_producers("loop thread: every producer sent all", ps, NPROD, PER);
    pthread_join(lt.th, NULL);
    CHECK_INT("loop thread: main's sends succeeded", bad, 0);
    CHECK_INT("loop thread: run returned 0", lt.rc, 0);
    check_rx("loop thread, 4 producers incl. main", &r, PER);
    eventq_source_free(src);
    eventq_loop_free(lt.lp);
    eventq_chan_free(ch);
}

/* ---- a lone busy source under eventq_loop_run ---- */

/* eventq_loop_run with one channel source goes from budget to budget without
 * waiting on epoll while nothing else can be ready; a post or a stop made by
 * a callback with thousands of messages still queued takes effect within
 * two budgets (the one running and one more that may come first in the next
 * epoll batch). */
enum { LONE_QUEUED = 5000, LONE_BUDGET = 16, LONE_AT = 100 };

struct lone {
    struct eventq_loop *lp;
    uint64_t msgs, eos, out_of_order, post_at;
};

static void lone_post(void *arg)
{
    struct lone *l = arg;
    l->post_at = l->msgs;
}

static int lone_cb(struct eventq_source *src, const void *data, size_t len, void *ud)
{
    struct lone *l = ud;
    uint32_t v;
    (void)src;
    if (data == NULL) {
        l->eos++;
        eventq_loop_stop(l->lp);
        return 0;
    }
    memcpy(&v, data, sizeof v);
    if (len != sizeof v || v != l->msgs)
        l->out_of_order++;
    l->msgs++;
    if (l->msgs == LONE_AT && eventq_loop_post(l->lp, lone_post, l, NULL) != 0)
        return -EIO;
    if (l->msgs == 4 * LONE_AT)
        eventq_loop_stop(l->lp);
    return 0;
}

static void test_lone_busy_source(void)
{
    struct lone l = { 0 };
    eventq_chan_opts o;
    eventq_chan *ch;
    struct eventq_source *src;

    REQUIRE("loop_new", eventq_loop_new(&l.lp) == 0);
    eventq_chan_opts_init(&o, sizeof o);
    o.capacity = LONE_QUEUED;
    REQUIRE("chan_new", eventq_chan_new(&o, &ch) == 0);
    send_n(ch, LONE_QUEUED);
    l.post_at = UINT64_MAX;
    REQUIRE("add_chan", eventq_loop_add_chan(l.lp, ch, lone_cb, &l, NULL, &src) == 0);
    CHECK_INT("lone: set_budget(16)", eventq_source_set_budget(src, LONE_BUDGET), 0);
    CHECK_INT("lone: run", eventq_loop_run(l.lp), 0);
    CHECK_MSG("lone: the post ran within two budgets",
              l.post_at >= LONE_AT && l.post_at <= LONE_AT + 2 * LONE_BUDGET,
              "the post ran after message %llu", (unsigned long long)l.post_at);
    CHECK_U64("lone: the stop ends the dispatch after its callback", l.msgs, 4 * LONE_AT);
    CHECK_INT("lone: source still healthy", eventq_source_error(src), 0);
    eventq_chan_close(ch);
    CHECK_INT("lone: run to end of stream", eventq_loop_run(l.lp), 0);
    CHECK_U64("lone: every message, past the budget in one run", l.msgs, LONE_QUEUED);
    CHECK_U64("lone: in order", l.out_of_order, 0);
    CHECK_U64("lone: end of stream once", l.eos, 1);
    CHECK_INT("lone: then nothing", eventq_loop_run_once(l.lp, 0), 0);
    eventq_source_free(src);
    eventq_loop_free(l.lp);
    eventq_chan_free(ch);
}

int main(void)
{
    check_init();
    test_producers_run();
    test_producers_budget();
    test_loops_one_channel();
    test_loop_thread_main_produces();
    test_budget_exact();
    test_close_with_queued();
    test_empty_and_large();
    test_negative_return();
    test_source_holds_channel();
    test_lone_busy_source();
    return check_done();
}
