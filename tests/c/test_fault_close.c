/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * Faults around the end of a channel's life and of its users:
 *
 *  - free with messages pending (D1): the drop hook gets each queued message
 *    once, whole, in order, on the thread that frees the last handle (also
 *    when that is a loop's channel source); `dropped` counts them; freeing
 *    a handle that is not the last drops nothing; a received eventq_msg
 *    outlives its channel.
 *  - close while threads block (D6): senders blocked on a full channel and
 *    receivers blocked on an empty one all wake with -EPIPE; what was
 *    accepted before stays receivable; nothing refused is queued.
 *  - close racing live producers and consumers: every accepted message is
 *    received exactly once, in per-producer order, however the close falls.
 *  - a consumer that exits mid-stream (a thread, and a loop thread): the
 *    others go on, nothing is lost, and what is left stays receivable.
 *
 * No sleeps: threads are known to be blocked by the kernel's view of them
 * (/proc/self/task/TID/syscall), everything else is counted.
 */
#include "check.h" /* includes <eventq.h> */

#include <sched.h>
#include <stdatomic.h>
#include <sys/syscall.h>

/* ---- messages: (producer, sequence) ---- */

struct tag {
    uint32_t pid, seq;
};

static size_t make_tag(uint8_t *buf, uint32_t pid, uint32_t seq)
{
    struct tag t = { pid, seq };
    memcpy(buf, &t, sizeof t);
    /* A body whose length and bytes depend on the tag. */
    size_t body = (seq * 7u + pid) % 48u;
    for (size_t i = 0; i < body; i++)
        buf[sizeof t + i] = (uint8_t)(pid ^ seq ^ i);
    return sizeof t + body;
}

/* 1 if m is a well-formed message; its tag in *t. */
static int read_tag(const uint8_t *m, size_t len, struct tag *t)
{
    if (len < sizeof *t)
        return 0;
    memcpy(t, m, sizeof *t);
    size_t body = (t->seq * 7u + t->pid) % 48u;
    if (len != sizeof *t + body)
        return 0;
    for (size_t i = 0; i < body; i++)
        if (m[sizeof *t + i] != (uint8_t)(t->pid ^ t->seq ^ i))
            return 0;
    return 1;
}

/* Counts per (producer, sequence), and order per reader. */
#define MAXP 8
#define MAXSEQ 20000

struct ledger {
    atomic_uchar seen[MAXP][MAXSEQ];
    atomic_ulong bad; /* malformed, duplicated, or out of order */
};

struct reader {
    int64_t last[MAXP];
};

static void reader_init(struct reader *r)
{
    for (int i = 0; i < MAXP; i++)
        r->last[i] = -1;
}

static void ledger_take(struct ledger *l, struct reader *r, const uint8_t *m, size_t len)
{
    struct tag t;
    if (!read_tag(m, len, &t) || t.pid >= MAXP || t.seq >= MAXSEQ) {
        atomic_fetch_add(&l->bad, 1);
        return;
    }
    if (atomic_fetch_add(&l->seen[t.pid][t.seq], 1) != 0)
        atomic_fetch_add(&l->bad, 1); /* duplicate */
    if ((int64_t)t.seq <= r->last[t.pid])
        atomic_fetch_add(&l->bad, 1); /* D3 */
    r->last[t.pid] = t.seq;
}

/* Messages 0..accepted[p]-1 of each producer seen exactly once, none past. */
static int ledger_exact(struct ledger *l, const uint32_t *accepted, int producers,
                        uint64_t *missing)
{
    uint64_t miss = 0, extra = 0;
    for (int p = 0; p < producers; p++)
        for (uint32_t s = 0; s < MAXSEQ; s++) {
            unsigned c = atomic_load(&l->seen[p][s]);
            if (s < accepted[p])
                miss += c == 0;
            else
                extra += c;
        }
    *missing = miss;
    return miss == 0 && extra == 0 && atomic_load(&l->bad) == 0;
}

/* ---- threads known to block ---- */

static int asleep(int tid)
{
    char path[64], line[64] = "";
    snprintf(path, sizeof path, "/proc/self/task/%d/syscall", tid);
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    if (!fgets(line, sizeof line, f))
        line[0] = 0;
    fclose(f);
    return line[0] >= '0' && line[0] <= '9' && strtol(line, NULL, 10) == SYS_futex;
}

struct blocked {
    pthread_t th;
    eventq_chan *ch;
    int kind;
    atomic_int tid;
    atomic_int done;
    int rc;
};

static void *blocked_main(void *arg)
{
    struct blocked *b = arg;
    uint8_t buf[64];
    size_t len, lens[2];
    eventq_msg *m = NULL;
    eventq_buf two[2] = { { "x1", 2 }, { "x2", 2 } };
    atomic_store(&b->tid, (int)gettid());
    switch (b->kind) {
    case 0: b->rc = eventq_chan_send(b->ch, "blocked", 7, EVENTQ_FOREVER); break;
    case 1: b->rc = eventq_chan_send(b->ch, "blocked", 7, 60000000000LL); break;
    case 2: b->rc = eventq_chan_send_batch(b->ch, two, 2, EVENTQ_FOREVER); break;
    case 3: b->rc = eventq_chan_recv(b->ch, buf, sizeof buf, &len, EVENTQ_FOREVER); break;
    case 4: b->rc = eventq_chan_recv(b->ch, buf, sizeof buf, &len, 60000000000LL); break;
    case 5: b->rc = eventq_chan_recv_msg(b->ch, &m, EVENTQ_FOREVER); break;
    default: b->rc = eventq_chan_recv_batch(b->ch, buf, sizeof buf, lens, 2, EVENTQ_FOREVER); break;
    }
    eventq_msg_free(m);
    atomic_store(&b->done, 1);
    return NULL;
}

/* Starts the threads and returns once each is asleep in the library. */
static void start_blocked(struct blocked *b, int n)
{
    for (int i = 0; i < n; i++)
        REQUIRE("pthread_create", pthread_create(&b[i].th, NULL, blocked_main, &b[i]) == 0);
    for (int i = 0; i < n; i++) {
        int tid;
        while ((tid = atomic_load(&b[i].tid)) == 0)
            sched_yield();
        while (!asleep(tid)) {
            REQUIRE("a blocked call returned early", !atomic_load(&b[i].done));
            sched_yield();
        }
    }
}

/* ---- free with messages pending ---- */

static int on_count(eventq_source *s, const void *data, size_t len, void *ud)
{
    (void)s;
    (void)len;
    if (data)
        (*(int *)ud)++;
    return 0;
}

struct drops {
    int calls;
    int in_order;
    int next;
    pthread_t thread;
    int right_thread;
};

static void on_drop(void *ud, const uint8_t *data, size_t len)
{
    struct drops *d = ud;
    struct tag t;
    d->calls++;
    if (!read_tag(data, len, &t) || t.seq != (uint32_t)d->next)
        d->in_order = 0;
    d->next++;
    if (!pthread_equal(pthread_self(), d->thread))
        d->right_thread = 0;
}

static void free_pending_case(void)
{
    struct drops d = { .in_order = 1, .right_thread = 1, .thread = pthread_self() };
    eventq_chan_opts o;
    eventq_chan_opts_init(&o, sizeof o);
    o.drop_fn = on_drop;
    o.drop_userdata = &d;
    eventq_chan *ch;
    REQUIRE("chan_new", eventq_chan_new(&o, &ch) == 0);
    uint8_t buf[64];
    for (uint32_t i = 0; i < 100; i++)
        REQUIRE("send", eventq_chan_send(ch, buf, make_tag(buf, 0, i), 0) == 0);
    /* Receive 30; keep one as an owned message past the channel's end. */
    size_t len;
    for (int i = 0; i < 29; i++)
        REQUIRE("recv", eventq_chan_recv(ch, buf, sizeof buf, &len, 0) == 0);
    eventq_msg *kept;
    REQUIRE("recv_msg", eventq_chan_recv_msg(ch, &kept, 0) == 0);
    eventq_chan *c2 = eventq_chan_clone(ch);
    eventq_chan_stats st;
    memset(&st, 0xab, sizeof st);
    CHECK_INT("free_final of a handle that is not the last returns 0", eventq_chan_free_final(ch, &st, sizeof st), 0);
    CHECK("... leaves *out alone", st.sent == 0xababababababababull);
    CHECK_INT("... and drops nothing", d.calls, 0);
    d.next = 30;
    CHECK_INT("free_final of the last handle returns 1", eventq_chan_free_final(c2, &st, sizeof st), 1);
    CHECK_U64("dropped counts the 70 pending messages", st.dropped, 70);
    CHECK("sent 100, received 30, pending 0 at the end",
          st.sent == 100 && st.received == 30 && st.pending == 0);
    CHECK_INT("the drop hook ran once per pending message", d.calls, 70);
    CHECK("... with each whole, in order (30..99)", d.in_order);
    CHECK("... on the thread that freed the last handle", d.right_thread);
    struct tag t;
    CHECK("a received eventq_msg outlives its channel",
          read_tag(eventq_msg_data(kept), eventq_msg_len(kept), &t) && t.seq == 29);
    eventq_msg_free(kept);

    /* Closed, then freed with messages pending: still dropped, counted. */
    struct drops d2 = { .in_order = 1, .right_thread = 1, .thread = pthread_self() };
    o.drop_userdata = &d2;
    REQUIRE("chan_new", eventq_chan_new(&o, &ch) == 0);
    for (uint32_t i = 0; i < 5; i++)
        REQUIRE("send", eventq_chan_send(ch, buf, make_tag(buf, 0, i), 0) == 0);
    eventq_chan_close(ch);
    CHECK_INT("closed channel: free_final returns 1", eventq_chan_free_final(ch, &st, sizeof st), 1);
    CHECK("closed channel: 5 dropped, hook ran 5 times in order",
          st.dropped == 5 && d2.calls == 5 && d2.in_order && st.closed == 1);

    /* A loop's channel source holds the last reference: the drop happens on
     * the thread that frees the loop. */
    struct drops d3 = { .in_order = 1, .right_thread = 1, .thread = pthread_self() };
    o.drop_userdata = &d3;
    REQUIRE("chan_new", eventq_chan_new(&o, &ch) == 0);
    eventq_loop *lp;
    REQUIRE("loop_new", eventq_loop_new(&lp) == 0);
    int n = 0;
    eventq_source *src;
    REQUIRE("add_chan", eventq_loop_add_chan(lp, ch, on_count, &n, NULL, &src) == 0);
    REQUIRE("budget 3", eventq_source_set_budget(src, 3) == 0);
    for (uint32_t i = 0; i < 7; i++)
        REQUIRE("send", eventq_chan_send(ch, buf, make_tag(buf, 0, i), 0) == 0);
    eventq_chan_free(ch); /* the source's reference remains */
    CHECK_INT("the user's last free drops nothing while a source holds the channel", d3.calls, 0);
    CHECK_INT("the source delivers its budget of 3", eventq_loop_run_once(lp, 0), 3);
    d3.next = 3;
    eventq_loop_free(lp);
    CHECK_INT("eventq_loop_free drops the other 4 through the hook", d3.calls, 4);
    CHECK("... in order, on the freeing thread", d3.in_order && d3.right_thread);
    CHECK_INT("the source handle outlives the loop: -ESTALE", eventq_source_remove(src), -ESTALE);
    eventq_source_free(src);
}

/* ---- close while threads block ---- */

static void close_blocked_senders_case(void)
{
    eventq_chan_opts o;
    eventq_chan_opts_init(&o, sizeof o);
    o.capacity = 3;
    eventq_chan *ch;
    REQUIRE("chan_new", eventq_chan_new(&o, &ch) == 0);
    for (int i = 0; i < 3; i++)
        REQUIRE("fill", eventq_chan_send(ch, "f", 1, 0) == 0);
    struct blocked b[6];
    for (int i = 0; i < 6; i++)
        b[i] = (struct blocked){ .ch = eventq_chan_clone(ch), .kind = i % 3 };
    start_blocked(b, 6);
    CHECK_INT("close while 6 senders block", eventq_chan_close(ch), 0);
    int epipe = 0;
    for (int i = 0; i < 6; i++) {
        pthread_join(b[i].th, NULL);
        epipe += b[i].rc == -EPIPE;
        eventq_chan_free(b[i].ch);
    }
    CHECK_INT("every blocked sender woke with -EPIPE", epipe, 6);
    uint8_t buf[8];
    size_t len;
    int got = 0;
    while (eventq_chan_recv(ch, buf, sizeof buf, &len, 0) == 0)
        got += len == 1 && buf[0] == 'f';
    CHECK_INT("the 3 accepted before the close are received, none of the refused", got, 3);
    CHECK_INT("then end of stream", eventq_chan_recv(ch, buf, sizeof buf, &len, 0), -EPIPE);
    CHECK("both fds readable after close",
          fd_readable(eventq_chan_recv_fd(ch)) == 1 && fd_readable(eventq_chan_send_fd(ch)) == 1);
    eventq_chan_stats st;
    eventq_chan_get_stats(ch, &st, sizeof st);
    CHECK("counters: sent 3, received 3", st.sent == 3 && st.received == 3 && st.pending == 0);
    eventq_chan_free(ch);
}

static void close_blocked_receivers_case(void)
{
    eventq_chan *ch;
    REQUIRE("chan_new", eventq_chan_new(NULL, &ch) == 0);
    struct blocked b[8];
    for (int i = 0; i < 8; i++)
        b[i] = (struct blocked){ .ch = eventq_chan_clone(ch), .kind = 3 + i % 4 };
    start_blocked(b, 8);
    CHECK_INT("close while 8 receivers block", eventq_chan_close(ch), 0);
    int epipe = 0;
    for (int i = 0; i < 8; i++) {
        pthread_join(b[i].th, NULL);
        epipe += b[i].rc == -EPIPE;
        eventq_chan_free(b[i].ch);
    }
    CHECK_INT("every blocked receiver woke with end of stream (-EPIPE)", epipe, 8);
    CHECK_INT("a send after close: -EPIPE", eventq_chan_send(ch, "x", 1, EVENTQ_FOREVER), -EPIPE);
    eventq_chan_free(ch);
}

/* ---- close racing live producers and consumers ---- */

struct racer {
    pthread_t th;
    eventq_chan *ch;
    struct ledger *l;
    uint32_t pid;
    uint32_t accepted; /* producers */
    int after_epipe;   /* producers: a send accepted after one got -EPIPE */
    int bad_rc;
    atomic_ulong *received;
    uint64_t close_at; /* consumers: close when the total reaches this */
    int kind;
};

static void *race_producer(void *arg)
{
    struct racer *r = arg;
    uint8_t buf[64];
    int closed = 0;
    for (uint32_t s = 0; s < MAXSEQ; s++) {
        size_t len = make_tag(buf, r->pid, r->accepted);
        int rc = r->kind ? eventq_chan_send(r->ch, buf, len, EVENTQ_FOREVER)
                         : eventq_chan_send(r->ch, buf, len, 1000000);
        if (rc == 0) {
            r->after_epipe |= closed;
            r->accepted++;
        } else if (rc == -EPIPE) {
            closed = 1;
            break;
        } else if (rc != -ETIMEDOUT) {
            r->bad_rc = rc;
            break;
        }
    }
    return NULL;
}

static void *race_consumer(void *arg)
{
    struct racer *r = arg;
    struct reader rd;
    uint8_t buf[16 * 64];
    size_t len, lens[16];
    reader_init(&rd);
    for (;;) {
        int rc;
        if (r->kind) {
            rc = eventq_chan_recv_batch(r->ch, buf, sizeof buf, lens, 16, EVENTQ_FOREVER);
            size_t off = 0;
            for (int i = 0; i < rc; i++) {
                ledger_take(r->l, &rd, buf + off, lens[i]);
                off += lens[i];
            }
            if (rc > 0) {
                if (atomic_fetch_add(r->received, (unsigned long)rc) + (unsigned long)rc >= r->close_at &&
                    r->close_at)
                    eventq_chan_close(r->ch);
                continue;
            }
        } else {
            rc = eventq_chan_recv(r->ch, buf, sizeof buf, &len, EVENTQ_FOREVER);
            if (rc == 0) {
                ledger_take(r->l, &rd, buf, len);
                if (atomic_fetch_add(r->received, 1) + 1 >= r->close_at && r->close_at)
                    eventq_chan_close(r->ch);
                continue;
            }
        }
        if (rc != -EPIPE)
            r->bad_rc = rc;
        break;
    }
    return NULL;
}

static struct ledger g_ledger;

static void close_race_case(uint64_t close_at, int capacity)
{
    struct ledger *l = &g_ledger;
    memset(l, 0, sizeof *l);
    eventq_chan_opts o;
    eventq_chan_opts_init(&o, sizeof o);
    o.capacity = (size_t)capacity;
    eventq_chan *ch;
    REQUIRE("chan_new", eventq_chan_new(&o, &ch) == 0);
    atomic_ulong received = 0;
    struct racer p[4], c[3];
    for (int i = 0; i < 3; i++) {
        c[i] = (struct racer){ .ch = eventq_chan_clone(ch), .l = l, .received = &received,
                               .close_at = i == 0 ? close_at : 0, .kind = i % 2 };
        pthread_create(&c[i].th, NULL, race_consumer, &c[i]);
    }
    for (int i = 0; i < 4; i++) {
        p[i] = (struct racer){ .ch = eventq_chan_clone(ch), .l = l, .pid = (uint32_t)i,
                               .kind = i % 2 };
        pthread_create(&p[i].th, NULL, race_producer, &p[i]);
    }
    uint32_t accepted[4];
    int after = 0, bad = 0;
    uint64_t total = 0;
    for (int i = 0; i < 4; i++) {
        pthread_join(p[i].th, NULL);
        accepted[i] = p[i].accepted;
        total += accepted[i];
        after |= p[i].after_epipe;
        bad |= p[i].bad_rc;
        eventq_chan_free(p[i].ch);
    }
    /* If the producers finished before the close point, close now. */
    eventq_chan_close(ch);
    for (int i = 0; i < 3; i++) {
        pthread_join(c[i].th, NULL);
        bad |= c[i].bad_rc;
        eventq_chan_free(c[i].ch);
    }
    uint64_t missing = 0;
    char what[160];
    snprintf(what, sizeof what,
             "close after %llu received (capacity %d): every accepted message received once, "
             "in order",
             (unsigned long long)close_at, capacity);
    CHECK_MSG(what, ledger_exact(l, accepted, 4, &missing) && !bad && !after,
              "missing %llu, bad %lu, rc %d, accepted after -EPIPE %d",
              (unsigned long long)missing, atomic_load(&l->bad), bad, after);
    eventq_chan_stats st;
    eventq_chan_get_stats(ch, &st, sizeof st);
    snprintf(what, sizeof what, "close after %llu: counters sent = received = accepted (%llu)",
             (unsigned long long)close_at, (unsigned long long)total);
    CHECK(what, st.sent == total && st.received == total && st.pending == 0);
    eventq_chan_free(ch);
}

/* ---- consumers exiting mid-stream ---- */

struct quitter {
    pthread_t th;
    eventq_chan *ch;
    struct ledger *l;
    uint64_t quota;
    uint64_t got;
    int kind; /* 0 recv, 1 recv_batch, 2 recv then pthread_exit */
    int bad_rc;
    atomic_int gone;
};

static void *quitter_main(void *arg)
{
    struct quitter *q = arg;
    struct reader rd;
    uint8_t buf[8 * 64];
    size_t len, lens[8];
    reader_init(&rd);
    while (q->got < q->quota) {
        int rc;
        if (q->kind == 1 && q->quota - q->got >= 8) {
            rc = eventq_chan_recv_batch(q->ch, buf, sizeof buf, lens, 8, EVENTQ_FOREVER);
            size_t off = 0;
            for (int i = 0; i < rc; i++) {
                ledger_take(q->l, &rd, buf + off, lens[i]);
                off += lens[i];
            }
            if (rc > 0) {
                q->got += (uint64_t)rc;
                continue;
            }
        } else {
            rc = eventq_chan_recv(q->ch, buf, sizeof buf, &len, EVENTQ_FOREVER);
            if (rc == 0) {
                ledger_take(q->l, &rd, buf, len);
                q->got++;
                continue;
            }
        }
        q->bad_rc = rc;
        break;
    }
    /* Gone mid-stream: the handle goes with the thread. */
    eventq_chan_free(q->ch);
    atomic_store(&q->gone, 1);
    if (q->kind == 2)
        pthread_exit(NULL);
    return NULL;
}

struct loop_quitter {
    pthread_t th;
    eventq_loop *lp;
    struct ledger *l;
    struct reader rd;
    uint64_t quota, got;
    atomic_int gone;
};

static int on_quit_msg(eventq_source *s, const void *data, size_t len, void *ud)
{
    struct loop_quitter *q = ud;
    (void)s;
    if (!data)
        return 0;
    ledger_take(q->l, &q->rd, data, len);
    if (++q->got == q->quota)
        eventq_loop_stop(q->lp);
    return 0;
}

static void *loop_quitter_main(void *arg)
{
    struct loop_quitter *q = arg;
    eventq_loop_run(q->lp);
    /* The loop thread ends mid-stream and frees its loop (and source). */
    eventq_loop_free(q->lp);
    atomic_store(&q->gone, 1);
    return NULL;
}

static void consumer_exit_case(void)
{
    struct ledger *l = &g_ledger;
    memset(l, 0, sizeof *l);
    enum { PER = 10000, PRODUCERS = 4, QUITTERS = 4 };
    eventq_chan_opts o;
    eventq_chan_opts_init(&o, sizeof o);
    o.capacity = 64; /* the sender needs the consumers to make room */
    eventq_chan *ch;
    REQUIRE("chan_new", eventq_chan_new(&o, &ch) == 0);

    /* Consumers that quit after 1, 999, 2000 (batches) and 5000 messages
     * (the last by pthread_exit), and a loop thread (budget 7) that stops
     * after 3001 and frees its loop: 11001 or a few more in all, of 40000. */
    static const uint64_t quota[QUITTERS] = { 1, 999, 2000, 5000 };
    struct quitter q[QUITTERS];
    for (int i = 0; i < QUITTERS; i++) {
        q[i] = (struct quitter){ .ch = eventq_chan_clone(ch), .l = l, .quota = quota[i],
                                 .kind = i == 2 ? 1 : i == 3 ? 2 : 0 };
        pthread_create(&q[i].th, NULL, quitter_main, &q[i]);
    }
    struct loop_quitter lq = { .l = l, .quota = 3001 };
    reader_init(&lq.rd);
    REQUIRE("loop_new", eventq_loop_new(&lq.lp) == 0);
    eventq_source *src;
    REQUIRE("add_chan", eventq_loop_add_chan(lq.lp, ch, on_quit_msg, &lq, NULL, &src) == 0);
    REQUIRE("budget", eventq_source_set_budget(src, 7) == 0);
    pthread_create(&lq.th, NULL, loop_quitter_main, &lq);

    /* This thread sends for 4 producers, interleaved, each in order. While
     * a consumer lives, a full channel means "wait for it" (yield and
     * retry); once all are gone, it takes one message itself per refused
     * send, so the rest ends up partly queued, partly taken here. */
    struct reader mine;
    reader_init(&mine);
    uint32_t next[PRODUCERS] = { 0 };
    uint64_t sent = 0, drained = 0;
    uint8_t buf[64], r[64];
    size_t rl;
    int bad = 0;
    for (uint32_t s = 0; s < PER && !bad; s++) {
        for (int i = 0; i < PRODUCERS && !bad; i++) {
            size_t len = make_tag(buf, (uint32_t)i, next[i]);
            int rc;
            while ((rc = eventq_chan_send(ch, buf, len, 0)) == -EAGAIN) {
                int all_gone = atomic_load(&lq.gone);
                for (int k = 0; k < QUITTERS; k++)
                    all_gone &= atomic_load(&q[k].gone);
                if (!all_gone) {
                    sched_yield();
                    continue;
                }
                if (eventq_chan_recv(ch, r, sizeof r, &rl, 0) == 0) {
                    ledger_take(l, &mine, r, rl);
                    drained++;
                }
            }
            if (rc != 0)
                bad = rc;
            else {
                next[i]++;
                sent++;
            }
        }
    }
    for (int i = 0; i < QUITTERS; i++)
        pthread_join(q[i].th, NULL);
    pthread_join(lq.th, NULL);
    uint64_t quit_got = 0;
    int qbad = 0;
    for (int i = 0; i < QUITTERS; i++) {
        quit_got += q[i].got;
        qbad |= q[i].bad_rc;
    }
    CHECK_MSG("every consumer got its quota, then quit mid-stream",
              !qbad && quit_got == 8000 && lq.got >= 3001, "rc %d, got %llu + loop %llu", qbad,
              (unsigned long long)quit_got, (unsigned long long)lq.got);
    eventq_chan_stats st;
    eventq_chan_get_stats(ch, &st, sizeof st);
    CHECK("what is left stays queued: pending = sent - received",
          st.pending == st.sent - st.received && st.sent == sent && st.pending > 0);
    CHECK_INT("... and the recv fd is readable", fd_readable(eventq_chan_recv_fd(ch)), 1);
    while (eventq_chan_recv(ch, r, sizeof r, &rl, 0) == 0) {
        ledger_take(l, &mine, r, rl);
        drained++;
    }
    CHECK_INT("then empty: recv fd down", fd_readable(eventq_chan_recv_fd(ch)), 0);
    uint64_t missing = 0;
    CHECK_MSG("consumers quitting mid-stream lose nothing: every message received once, in "
              "order per consumer",
              ledger_exact(l, next, PRODUCERS, &missing) && !bad,
              "missing %llu, bad %lu, send rc %d", (unsigned long long)missing,
              atomic_load(&l->bad), bad);
    CHECK_U64("all 40000 sent", sent, (uint64_t)PER * PRODUCERS);
    CHECK_U64("quitters + loop + the rest = sent", quit_got + lq.got + drained, sent);
    CHECK_INT("the loop's source handle is stale after its loop was freed",
              eventq_source_remove(src), -ESTALE);
    eventq_source_free(src);
    eventq_chan_free(ch);
}

int main(void)
{
    check_init();
    free_pending_case();
    close_blocked_senders_case();
    close_blocked_receivers_case();
    close_race_case(1, 1);
    close_race_case(100, 4);
    close_race_case(5000, 64);
    close_race_case(30000, 16);
    consumer_exit_case();
    return check_done();
}
