/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * The channel's C ABI under real threads: D1 (exactly once), D2 (whole),
 * D3 (per-producer order) with several producers and consumers, each thread
 * on its own handle from eventq_chan_clone, mixing every send and receive
 * call; zero-length messages; an epoll consumer (the seed's scenario done
 * right); D5 blocked and event-loop senders; D6 close waking blocked threads
 * and racing live senders.
 *
 * No sleeps and no timing assertions: every result checked here is the same
 * whatever the interleaving. Readiness is polled only at quiescent points.
 */
#include "check.h" /* includes <eventq.h> */

#include <stdatomic.h>
#include <sys/epoll.h>

/* ---- messages: (producer id, sequence, body length, checksum) + body ---- */

struct hdr {
    uint32_t pid;
    uint32_t seq;
    uint32_t body_len;
    uint32_t sum;
};

#define MAX_BODY 300
#define MAX_MSG (sizeof(struct hdr) + MAX_BODY)

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

/* Builds message (pid, seq) into buf; returns its length. */
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

/* What a consumer saw. */
struct seen {
    uint32_t pid, seq;
};

struct tally {
    struct seen *v;
    size_t n, cap;
    uint64_t empties;   /* zero-length messages */
    uint64_t bad_len;   /* length disagrees with the header (merge/split) */
    uint64_t bad_sum;   /* checksum or body bytes wrong */
    uint64_t bad_pid;   /* unknown producer or sequence */
    uint64_t bad_order; /* a producer's messages out of order (D3) */
    uint64_t bad_rc;    /* an unexpected return code */
    int last_bad_rc;
    int64_t *last_seq;  /* per producer, the last sequence seen */
};

static void tally_init(struct tally *t, int producers)
{
    memset(t, 0, sizeof *t);
    t->last_seq = malloc(sizeof(int64_t) * (size_t)producers);
    REQUIRE("malloc", t->last_seq != NULL);
    for (int i = 0; i < producers; i++)
        t->last_seq[i] = -1;
}

static void tally_free(struct tally *t)
{
    free(t->v);
    free(t->last_seq);
}

static void tally_rc(struct tally *t, int rc)
{
    t->bad_rc++;
    t->last_bad_rc = rc;
}

/* Checks one received message. */
static void tally_msg(struct tally *t, const uint8_t *p, size_t len, int producers,
                      uint32_t max_seq)
{
    if (len == 0) {
        t->empties++;
        return;
    }
    struct hdr h;
    if (len < sizeof h) {
        t->bad_len++;
        return;
    }
    memcpy(&h, p, sizeof h);
    if (h.pid >= (uint32_t)producers || h.seq >= max_seq) {
        t->bad_pid++;
        return;
    }
    if (h.body_len != body_len_of(h.pid, h.seq) || len != sizeof h + h.body_len) {
        t->bad_len++;
        return;
    }
    const uint8_t *body = p + sizeof h;
    int body_ok = check_fnv1a(body, h.body_len) == h.sum;
    for (uint32_t i = 0; body_ok && i < h.body_len; i++)
        body_ok = body[i] == body_byte(h.pid, h.seq, i);
    if (!body_ok)
        t->bad_sum++;
    if ((int64_t)h.seq <= t->last_seq[h.pid])
        t->bad_order++;
    t->last_seq[h.pid] = h.seq;
    if (t->n == t->cap) {
        t->cap = t->cap ? t->cap * 2 : 4096;
        t->v = realloc(t->v, t->cap * sizeof *t->v);
        REQUIRE("realloc", t->v != NULL);
    }
    t->v[t->n].pid = h.pid;
    t->v[t->n].seq = h.seq;
    t->n++;
}

/* ---- producers ---- */

enum send_mode {
    SEND_FOREVER,   /* eventq_chan_send, blocking */
    SEND_BATCH,     /* eventq_chan_send_batch, blocking, resends the rest */
    SEND_POLL,      /* timeout 0; on -EAGAIN poll the send fd (event loop) */
    SEND_TIMED,     /* 1 ms timeout, retried on -ETIMEDOUT */
    SEND_MODES
};

struct producer {
    pthread_t th;
    eventq_chan *ch; /* its own handle */
    uint32_t pid;
    enum send_mode mode;
    uint32_t count;       /* messages to send; UINT32_MAX: until -EPIPE */
    uint32_t zero_every;  /* if k > 0, every k-th message is empty */
    uint32_t accepted;    /* messages accepted (sends that returned 0) */
    uint64_t empties;     /* empty messages accepted */
    uint64_t bad_rc;
    int last_bad_rc;
    uint64_t polls;       /* send fd waits (SEND_POLL) */
};

static int is_empty_seq(uint32_t zero_every, uint32_t seq)
{
    return zero_every && seq % zero_every == zero_every - 1;
}

static void *producer_main(void *arg)
{
    struct producer *p = arg;
    uint8_t (*bufs)[MAX_MSG] = malloc(8 * MAX_MSG);
    eventq_buf b[8];
    uint32_t seq = 0;
    int sfd = eventq_chan_send_fd(p->ch);
    REQUIRE("malloc", bufs != NULL);

    while (seq < p->count) {
        int rc;
        if (p->mode == SEND_BATCH) {
            uint32_t n = 0;
            for (; n < 8 && seq + n < p->count; n++) {
                b[n].data = bufs[n];
                b[n].len = is_empty_seq(p->zero_every, seq + n) ? 0 : make_msg(bufs[n], p->pid, seq + n);
                if (b[n].len == 0 && n % 2)
                    b[n].data = NULL; /* NULL with length 0 is allowed */
            }
            rc = eventq_chan_send_batch(p->ch, b, n, EVENTQ_FOREVER);
            if (rc > 0) {
                for (int i = 0; i < rc; i++)
                    p->empties += b[i].len == 0;
                seq += (uint32_t)rc;
                continue;
            }
            if (rc == -EPIPE)
                break;
            p->bad_rc++;
            p->last_bad_rc = rc;
            break;
        }
        size_t len = is_empty_seq(p->zero_every, seq) ? 0 : make_msg(bufs[0], p->pid, seq);
        int64_t t = p->mode == SEND_FOREVER ? EVENTQ_FOREVER
                    : p->mode == SEND_TIMED ? (int64_t)1000000
                                            : 0;
        rc = eventq_chan_send(p->ch, len ? bufs[0] : NULL, len, t);
        if (rc == 0) {
            p->empties += len == 0;
            seq++;
        } else if (rc == -EPIPE) {
            break;
        } else if (rc == -ETIMEDOUT && p->mode == SEND_TIMED) {
            continue;
        } else if (rc == -EAGAIN && p->mode == SEND_POLL) {
            /* D5: after a refused send the send fd is down until the queue
             * drains to low water; a lost wake-up would hang here (the
             * watchdog catches that). */
            struct pollfd pf = { .fd = sfd, .events = POLLIN, .revents = 0 };
            p->polls++;
            if (poll(&pf, 1, -1) < 0 && errno != EINTR) {
                p->bad_rc++;
                p->last_bad_rc = -errno;
                break;
            }
        } else {
            p->bad_rc++;
            p->last_bad_rc = rc;
            break;
        }
    }
    p->accepted = seq;
    free(bufs);
    return NULL;
}

/* ---- consumers ---- */

enum recv_mode {
    RECV_COPY,  /* eventq_chan_recv, blocking */
    RECV_MSG,   /* eventq_chan_recv_msg, blocking */
    RECV_BATCH, /* eventq_chan_recv_batch, blocking */
    RECV_POLL,  /* poll the recv fd, then eventq_chan_recv with timeout 0 */
    RECV_MODES
};

struct consumer {
    pthread_t th;
    eventq_chan *ch;
    enum recv_mode mode;
    int producers;
    uint32_t max_seq;
    struct tally t;
    uint64_t spurious; /* RECV_POLL: readable but -EAGAIN (allowed, transient) */
};

static void *consumer_main(void *arg)
{
    struct consumer *c = arg;
    size_t bcap = 8 * MAX_MSG;
    uint8_t *buf = malloc(bcap);
    size_t lens[16];
    int rfd = eventq_chan_recv_fd(c->ch);
    REQUIRE("malloc", buf != NULL);

    for (;;) {
        int rc;
        size_t len = 0;
        if (c->mode == RECV_COPY) {
            rc = eventq_chan_recv(c->ch, buf, MAX_MSG, &len, EVENTQ_FOREVER);
            if (rc == 0)
                tally_msg(&c->t, buf, len, c->producers, c->max_seq);
        } else if (c->mode == RECV_MSG) {
            eventq_msg *m = NULL;
            rc = eventq_chan_recv_msg(c->ch, &m, EVENTQ_FOREVER);
            if (rc == 0) {
                tally_msg(&c->t, eventq_msg_data(m), eventq_msg_len(m), c->producers,
                          c->max_seq);
                eventq_msg_free(m);
            }
        } else if (c->mode == RECV_BATCH) {
            rc = eventq_chan_recv_batch(c->ch, buf, bcap, lens, 16, EVENTQ_FOREVER);
            if (rc > 0) {
                size_t off = 0;
                for (int i = 0; i < rc; i++) {
                    tally_msg(&c->t, buf + off, lens[i], c->producers, c->max_seq);
                    off += lens[i];
                }
                rc = 0;
            } else if (rc == 0) {
                rc = -EIO; /* a blocking batch must return at least one */
            }
        } else {
            struct pollfd pf = { .fd = rfd, .events = POLLIN, .revents = 0 };
            if (poll(&pf, 1, -1) < 0) {
                if (errno == EINTR)
                    continue;
                rc = -errno;
            } else {
                /* Drain what is there, then wait again. */
                int got = 0;
                for (;;) {
                    rc = eventq_chan_recv(c->ch, buf, MAX_MSG, &len, 0);
                    if (rc != 0)
                        break;
                    got = 1;
                    tally_msg(&c->t, buf, len, c->producers, c->max_seq);
                }
                if (rc == -EAGAIN) {
                    c->spurious += !got;
                    rc = 0;
                }
            }
        }
        if (rc == -EPIPE)
            break; /* end of stream */
        if (rc != 0) {
            tally_rc(&c->t, rc);
            break;
        }
    }
    free(buf);
    return NULL;
}

/* ---- the MPMC scenario ---- */

struct mpmc_cfg {
    const char *name;
    int producers, consumers;
    uint32_t per_producer; /* UINT32_MAX: send until -EPIPE */
    uint32_t zero_every;
    size_t capacity;
    size_t max_bytes;
    uint64_t close_after; /* if > 0: main receives this many, then closes */
};

static int cmp_seen(const void *a, const void *b)
{
    const struct seen *x = a, *y = b;
    if (x->pid != y->pid)
        return x->pid < y->pid ? -1 : 1;
    return x->seq < y->seq ? -1 : x->seq > y->seq;
}

static void run_mpmc(const struct mpmc_cfg *cfg)
{
    char name[200];
#define NAME(s) (snprintf(name, sizeof name, "%s: %s", cfg->name, (s)), name)
    eventq_chan_opts o;
    eventq_chan *ch = NULL;
    eventq_chan_opts_init(&o, sizeof o);
    o.capacity = cfg->capacity;
    o.max_bytes = cfg->max_bytes;
    REQUIRE("chan_new", eventq_chan_new(&o, &ch) == 0);

    uint32_t max_seq = cfg->per_producer == UINT32_MAX ? UINT32_MAX - 1 : cfg->per_producer;
    struct producer *prod = calloc((size_t)cfg->producers, sizeof *prod);
    struct consumer *cons = calloc((size_t)cfg->consumers + 1, sizeof *cons);
    REQUIRE("calloc", prod && cons);

    for (int i = 0; i < cfg->consumers; i++) {
        cons[i].ch = eventq_chan_clone(ch);
        cons[i].mode = (enum recv_mode)(i % RECV_MODES);
        cons[i].producers = cfg->producers;
        cons[i].max_seq = max_seq;
        tally_init(&cons[i].t, cfg->producers);
        REQUIRE("clone", cons[i].ch != NULL);
        REQUIRE("pthread_create", pthread_create(&cons[i].th, NULL, consumer_main, &cons[i]) == 0);
    }
    for (int i = 0; i < cfg->producers; i++) {
        prod[i].ch = eventq_chan_clone(ch);
        prod[i].pid = (uint32_t)i;
        prod[i].mode = (enum send_mode)(i % SEND_MODES);
        prod[i].count = cfg->per_producer;
        prod[i].zero_every = cfg->zero_every;
        REQUIRE("clone", prod[i].ch != NULL);
        REQUIRE("pthread_create", pthread_create(&prod[i].th, NULL, producer_main, &prod[i]) == 0);
    }

    /* The main thread is one more consumer (RECV_MSG) when it closes mid-way:
     * it receives close_after messages, closes while producers still send,
     * then drains to end of stream with the others. */
    struct consumer *mc = &cons[cfg->consumers];
    mc->ch = ch;
    mc->mode = RECV_MSG;
    mc->producers = cfg->producers;
    mc->max_seq = max_seq;
    tally_init(&mc->t, cfg->producers);
    if (cfg->close_after) {
        for (uint64_t i = 0; i < cfg->close_after; i++) {
            eventq_msg *m = NULL;
            int rc = eventq_chan_recv_msg(ch, &m, EVENTQ_FOREVER);
            if (rc != 0) {
                tally_rc(&mc->t, rc);
                break;
            }
            tally_msg(&mc->t, eventq_msg_data(m), eventq_msg_len(m), cfg->producers, max_seq);
            eventq_msg_free(m);
        }
        CHECK_INT(NAME("close while producers send"), eventq_chan_close(ch), 0);
        consumer_main(mc);
    }

    uint64_t accepted = 0, empties_sent = 0, prod_bad = 0;
    int prod_last_bad = 0;
    for (int i = 0; i < cfg->producers; i++) {
        pthread_join(prod[i].th, NULL);
        accepted += prod[i].accepted;
        empties_sent += prod[i].empties;
        prod_bad += prod[i].bad_rc;
        if (prod[i].bad_rc)
            prod_last_bad = prod[i].last_bad_rc;
    }
    CHECK_MSG(NAME("producers: every send returned 0 (or -EPIPE after close)"), prod_bad == 0,
              "%llu unexpected codes, last %d", (unsigned long long)prod_bad, prod_last_bad);
    if (!cfg->close_after) {
        CHECK_U64(NAME("all messages accepted"), accepted,
                  (uint64_t)cfg->producers * cfg->per_producer);
        eventq_chan_stats s;
        eventq_chan_get_stats(ch, &s, sizeof s);
        CHECK_U64(NAME("stats.sent after producers joined"), s.sent, accepted);
        CHECK_INT(NAME("close after producers joined"), eventq_chan_close(ch), 0);
    }
    for (int i = 0; i < cfg->consumers; i++)
        pthread_join(cons[i].th, NULL);

    /* Merge what every consumer saw. */
    uint64_t total = 0, empties = 0, bad_len = 0, bad_sum = 0, bad_pid = 0, bad_order = 0,
             bad_rc = 0;
    int last_rc = 0;
    int nc = cfg->consumers + 1;
    for (int i = 0; i < nc; i++) {
        struct tally *t = &cons[i].t;
        total += t->n + t->empties;
        empties += t->empties;
        bad_len += t->bad_len;
        bad_sum += t->bad_sum;
        bad_pid += t->bad_pid;
        bad_order += t->bad_order;
        bad_rc += t->bad_rc;
        if (t->bad_rc)
            last_rc = t->last_bad_rc;
    }
    CHECK_MSG(NAME("consumers: every receive returned a message or -EPIPE"), bad_rc == 0,
              "%llu unexpected codes, last %d", (unsigned long long)bad_rc, last_rc);
    CHECK_U64(NAME("D2 whole: no length mismatch (merge/split)"), bad_len, 0);
    CHECK_U64(NAME("D2 whole: checksums and bodies match"), bad_sum, 0);
    CHECK_U64(NAME("no unknown producer/sequence"), bad_pid, 0);
    CHECK_U64(NAME("D3 per-producer order within every consumer"), bad_order, 0);
    CHECK_U64(NAME("D1 received count == accepted count"), total, accepted);
    CHECK_U64(NAME("D1 zero-length messages received == accepted"), empties, empties_sent);

    /* Exactly once: the non-empty messages received are, per producer, the
     * accepted sequence numbers minus the empty ones, each once. */
    size_t nonempty = 0;
    for (int i = 0; i < nc; i++)
        nonempty += cons[i].t.n;
    struct seen *all = malloc((nonempty + 1) * sizeof *all);
    REQUIRE("malloc", all != NULL);
    size_t k = 0;
    for (int i = 0; i < nc; i++) {
        if (cons[i].t.n)
            memcpy(all + k, cons[i].t.v, cons[i].t.n * sizeof *all);
        k += cons[i].t.n;
    }
    qsort(all, nonempty, sizeof *all, cmp_seen);
    uint64_t dup = 0, missing = 0;
    size_t j = 0;
    for (int pi = 0; pi < cfg->producers; pi++) {
        for (uint32_t seq = 0; seq < prod[pi].accepted; seq++) {
            if (is_empty_seq(cfg->zero_every, seq))
                continue;
            if (j < nonempty && all[j].pid == (uint32_t)pi && all[j].seq == seq) {
                j++;
                while (j < nonempty && all[j].pid == (uint32_t)pi && all[j].seq == seq) {
                    dup++;
                    j++;
                }
            } else {
                missing++;
            }
        }
    }
    CHECK_MSG(NAME("D1 exactly once: none missing, none duplicated, nothing unaccepted"),
              missing == 0 && dup == 0 && j == nonempty,
              "missing %llu, duplicated %llu, extra %zu", (unsigned long long)missing,
              (unsigned long long)dup, nonempty - j);
    free(all);

    eventq_chan_stats s;
    eventq_chan_get_stats(ch, &s, sizeof s);
    CHECK(NAME("stats: sent == received == accepted, pending 0, closed"),
          s.sent == accepted && s.received == accepted && s.pending == 0 &&
              s.pending_bytes == 0 && s.closed == 1);
    CHECK(NAME("stats: peak depth within capacity"), s.peak_depth >= 1 && s.peak_depth <= cfg->capacity);
    CHECK(NAME("stats: recv doorbell rings <= messages"), s.recv_doorbell_rings <= accepted + 1);
    CHECK_INT(NAME("D4 after end of stream: recv fd readable"), fd_readable(eventq_chan_recv_fd(ch)), 1);
    CHECK_INT(NAME("D6 after end of stream: send fd readable"), fd_readable(eventq_chan_send_fd(ch)), 1);

    for (int i = 0; i < cfg->producers; i++)
        eventq_chan_free(prod[i].ch);
    for (int i = 0; i < cfg->consumers; i++) {
        eventq_chan_free(cons[i].ch);
        tally_free(&cons[i].t);
    }
    tally_free(&mc->t);
    eventq_chan_stats fin;
    CHECK_INT(NAME("free_final on the last handle: 1, nothing dropped"),
              eventq_chan_free_final(ch, &fin, sizeof fin) == 1 && fin.dropped == 0, 1);
    free(prod);
    free(cons);
#undef NAME
}

/* ---- the seed's scenario done right: an epoll consumer ---- */

struct epoll_consumer {
    eventq_chan *ch;
    int producers;
    uint32_t per_producer;
    int edge; /* EPOLLET */
    uint32_t *next_seq;
    uint64_t received, wakeups, spurious, bad, bad_order;
    int last_bad;
};

static void *epoll_consumer_main(void *arg)
{
    struct epoll_consumer *c = arg;
    uint8_t buf[MAX_MSG];
    int ep = epoll_create1(EPOLL_CLOEXEC);
    struct epoll_event ev = { .events = EPOLLIN | (c->edge ? EPOLLET : 0), .data.u32 = 7 };
    if (ep < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, eventq_chan_recv_fd(c->ch), &ev) != 0) {
        c->bad++;
        c->last_bad = -errno;
        return NULL;
    }
    for (;;) {
        struct epoll_event got[4];
        int n = epoll_wait(ep, got, 4, -1);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            c->bad++;
            c->last_bad = -errno;
            break;
        }
        c->wakeups++;
        /* Drain with timeout 0 until the channel says "try again". */
        uint64_t before = c->received;
        int rc;
        for (;;) {
            size_t len = 0;
            rc = eventq_chan_recv(c->ch, buf, sizeof buf, &len, 0);
            if (rc != 0)
                break;
            struct hdr h;
            memcpy(&h, buf, sizeof h);
            int ok = len >= sizeof h && h.pid < (uint32_t)c->producers &&
                     len == sizeof h + body_len_of(h.pid, h.seq) && h.body_len == len - sizeof h &&
                     check_fnv1a(buf + sizeof h, h.body_len) == h.sum;
            if (!ok) {
                c->bad++;
                c->last_bad = 0;
                continue;
            }
            /* One consumer: each producer's sequence arrives exactly 0,1,2,... */
            if (h.seq != c->next_seq[h.pid])
                c->bad_order++;
            c->next_seq[h.pid] = h.seq + 1;
            c->received++;
        }
        c->spurious += c->received == before && rc == -EAGAIN;
        if (rc == -EPIPE)
            break;
        if (rc != -EAGAIN) {
            c->bad++;
            c->last_bad = rc;
            break;
        }
    }
    close(ep);
    return NULL;
}

static void test_epoll_consumer(int edge)
{
    char name[120];
#define NAME(s) (snprintf(name, sizeof name, "epoll consumer (%s): %s", edge ? "EPOLLET" : "level", (s)), name)
    enum { P = 3, N = 20000 };
    eventq_chan *ch = NULL;
    REQUIRE("chan_new", eventq_chan_new(NULL, &ch) == 0);
    struct producer prod[P];
    uint32_t next_seq[P] = { 0 };
    struct epoll_consumer c = { .ch = eventq_chan_clone(ch), .producers = P, .per_producer = N,
                                .edge = edge, .next_seq = next_seq };
    pthread_t cth;
    REQUIRE("pthread_create", pthread_create(&cth, NULL, epoll_consumer_main, &c) == 0);
    memset(prod, 0, sizeof prod);
    for (int i = 0; i < P; i++) {
        prod[i].ch = eventq_chan_clone(ch);
        prod[i].pid = (uint32_t)i;
        /* A per-message sender, a burst (batch) sender, an event-loop sender. */
        prod[i].mode = i == 0 ? SEND_FOREVER : i == 1 ? SEND_BATCH : SEND_POLL;
        prod[i].count = N;
        REQUIRE("pthread_create", pthread_create(&prod[i].th, NULL, producer_main, &prod[i]) == 0);
    }
    uint64_t bad = 0;
    for (int i = 0; i < P; i++) {
        pthread_join(prod[i].th, NULL);
        bad += prod[i].bad_rc + (prod[i].accepted != N);
        eventq_chan_free(prod[i].ch);
    }
    CHECK_U64(NAME("producers sent everything"), bad, 0);
    CHECK_INT(NAME("close"), eventq_chan_close(ch), 0);
    pthread_join(cth, NULL);
    CHECK_MSG(NAME("no bad message or code"), c.bad == 0, "%llu, last %d",
              (unsigned long long)c.bad, c.last_bad);
    CHECK_U64(NAME("every message received (none merged or lost)"), c.received, (uint64_t)P * N);
    CHECK_U64(NAME("each producer's messages in order, none skipped"), c.bad_order, 0);
    int all_seen = 1;
    for (int i = 0; i < P; i++)
        all_seen &= next_seq[i] == N;
    CHECK(NAME("each producer's last sequence seen"), all_seen);
    eventq_chan_stats s;
    eventq_chan_get_stats(ch, &s, sizeof s);
    CHECK(NAME("stats sent == received"), s.sent == (uint64_t)P * N && s.received == (uint64_t)P * N);
    CHECK(NAME("wake-ups <= doorbell rings + 1 <= messages + 1"),
          c.wakeups <= s.recv_doorbell_rings + 1 + c.spurious && s.recv_doorbell_rings <= s.sent + 1);
    printf("# epoll consumer (%s): %llu messages, %llu wake-ups (%llu found nothing), %llu doorbell rings\n",
           edge ? "EPOLLET" : "level", (unsigned long long)c.received,
           (unsigned long long)c.wakeups, (unsigned long long)c.spurious,
           (unsigned long long)s.recv_doorbell_rings);
    eventq_chan_free(c.ch);
    eventq_chan_free(ch);
#undef NAME
}

/* ---- D5: a blocked sender completes once a receive makes room ---- */

struct sender_arg {
    eventq_chan *ch;
    const char *msg;
    int batch;
    int64_t timeout;
    pthread_barrier_t *start;
    int rc;
};

static void *sender_main(void *arg)
{
    struct sender_arg *a = arg;
    if (a->start)
        pthread_barrier_wait(a->start);
    if (a->batch) {
        eventq_buf b[2] = { { a->msg, strlen(a->msg) }, { "tail", 4 } };
        a->rc = eventq_chan_send_batch(a->ch, b, 2, a->timeout);
    } else {
        a->rc = eventq_chan_send(a->ch, a->msg, strlen(a->msg), a->timeout);
    }
    return NULL;
}

static uint64_t pending_of(const eventq_chan *ch)
{
    eventq_chan_stats s;
    if (eventq_chan_get_stats(ch, &s, sizeof s) != 0)
        return UINT64_MAX;
    return s.pending;
}

static int recv_is(const eventq_chan *ch, const char *want, int64_t t)
{
    char buf[64];
    size_t len = 0;
    int rc = eventq_chan_recv(ch, buf, sizeof buf, &len, t);
    return rc == 0 && len == strlen(want) && memcmp(buf, want, len) == 0;
}

static void test_blocked_sender(void)
{
    eventq_chan_opts o;
    eventq_chan *ch = NULL;
    eventq_chan_opts_init(&o, sizeof o);
    o.capacity = 2;
    REQUIRE("chan_new", eventq_chan_new(&o, &ch) == 0);
    CHECK("fill A B", eventq_chan_send(ch, "A", 1, 0) == 0 && eventq_chan_send(ch, "B", 1, 0) == 0);

    /* Whether the sender blocks before or after the receive below, it must
     * return 0 with C queued after B. */
    struct sender_arg a = { .ch = eventq_chan_clone(ch), .msg = "C", .timeout = EVENTQ_FOREVER };
    pthread_t th;
    REQUIRE("pthread_create", pthread_create(&th, NULL, sender_main, &a) == 0);
    CHECK("D5 receive A makes room", recv_is(ch, "A", EVENTQ_FOREVER));
    pthread_join(th, NULL);
    CHECK_INT("D5 blocked sender (FOREVER) completes", a.rc, 0);
    CHECK("D5 order kept: B", recv_is(ch, "B", 0));
    CHECK("D5 order kept: C", recv_is(ch, "C", 0));

    /* The same with a batch: it waits for room for the first, queues what
     * fits (here both, after a 2-message batch receive). */
    CHECK("fill D E", eventq_chan_send(ch, "D", 1, 0) == 0 && eventq_chan_send(ch, "E", 1, 0) == 0);
    struct sender_arg b = { .ch = a.ch, .msg = "F", .batch = 1, .timeout = EVENTQ_FOREVER };
    REQUIRE("pthread_create", pthread_create(&th, NULL, sender_main, &b) == 0);
    char buf[8];
    size_t lens[2];
    CHECK_INT("D5 batch receive of 2 makes room",
              eventq_chan_recv_batch(ch, buf, sizeof buf, lens, 2, EVENTQ_FOREVER), 2);
    pthread_join(th, NULL);
    CHECK_MSG("D5 blocked send_batch completes with 1 or 2 queued", b.rc == 1 || b.rc == 2, "rc=%d", b.rc);
    CHECK("D5 batch order kept: F", recv_is(ch, "F", 0));
    if (b.rc == 2)
        CHECK("D5 batch order kept: tail", recv_is(ch, "tail", 0));
    CHECK_U64("D5 nothing else queued", pending_of(ch), 0);

    /* A sender with a long (finite) timeout also completes. */
    CHECK("fill G H", eventq_chan_send(ch, "G", 1, 0) == 0 && eventq_chan_send(ch, "H", 1, 0) == 0);
    struct sender_arg c = { .ch = a.ch, .msg = "I", .timeout = INT64_MAX };
    REQUIRE("pthread_create", pthread_create(&th, NULL, sender_main, &c) == 0);
    eventq_msg *m = NULL;
    CHECK_INT("D5 recv_msg G makes room", eventq_chan_recv_msg(ch, &m, EVENTQ_FOREVER), 0);
    eventq_msg_free(m);
    pthread_join(th, NULL);
    CHECK_INT("D5 blocked sender (timeout INT64_MAX ns) completes", c.rc, 0);
    CHECK("D5 then H, I", recv_is(ch, "H", 0) && recv_is(ch, "I", 0));
    eventq_chan_free(a.ch);
    eventq_chan_free(ch);
}

/* ---- D6: close wakes blocked receivers and senders ---- */

struct receiver_arg {
    eventq_chan *ch;
    int mode;
    pthread_barrier_t *start;
    int rc;
};

static void *receiver_main(void *arg)
{
    struct receiver_arg *a = arg;
    char buf[64];
    size_t len, lens[4];
    eventq_msg *m = NULL;
    pthread_barrier_wait(a->start);
    switch (a->mode) {
    case 0:
        a->rc = eventq_chan_recv(a->ch, buf, sizeof buf, &len, EVENTQ_FOREVER);
        break;
    case 1:
        a->rc = eventq_chan_recv_msg(a->ch, &m, EVENTQ_FOREVER);
        eventq_msg_free(m);
        break;
    case 2:
        a->rc = eventq_chan_recv_batch(a->ch, buf, sizeof buf, lens, 4, EVENTQ_FOREVER);
        break;
    default:
        a->rc = eventq_chan_recv(a->ch, buf, sizeof buf, &len, INT64_MAX);
        break;
    }
    return NULL;
}

static void test_close_wakes_blocked(void)
{
    enum { R = 4, S = 3 };
    eventq_chan *empty = NULL, *full = NULL;
    eventq_chan_opts o;
    eventq_chan_opts_init(&o, sizeof o);
    o.capacity = 1;
    REQUIRE("chan_new", eventq_chan_new(&o, &empty) == 0 && eventq_chan_new(&o, &full) == 0);
    CHECK_INT("fill the full channel", eventq_chan_send(full, "queued", 6, 0), 0);

    pthread_barrier_t start;
    pthread_barrier_init(&start, NULL, R + S + 1);
    struct receiver_arg ra[R];
    struct sender_arg sa[S];
    pthread_t rt[R], st[S];
    for (int i = 0; i < R; i++) {
        ra[i] = (struct receiver_arg){ .ch = eventq_chan_clone(empty), .mode = i, .start = &start };
        REQUIRE("pthread_create", pthread_create(&rt[i], NULL, receiver_main, &ra[i]) == 0);
    }
    for (int i = 0; i < S; i++) {
        sa[i] = (struct sender_arg){ .ch = eventq_chan_clone(full), .msg = "late", .batch = i == 2,
                                     .timeout = i == 1 ? INT64_MAX : EVENTQ_FOREVER, .start = &start };
        REQUIRE("pthread_create", pthread_create(&st[i], NULL, sender_main, &sa[i]) == 0);
    }
    /* All threads are at (or past) their blocking call; whether they are
     * already asleep in it or not, the result after close is -EPIPE. */
    pthread_barrier_wait(&start);
    CHECK_INT("close the empty channel", eventq_chan_close(empty), 0);
    CHECK_INT("close the full channel", eventq_chan_close(full), 0);
    int rok = 1, sok = 1;
    for (int i = 0; i < R; i++) {
        pthread_join(rt[i], NULL);
        rok &= ra[i].rc == -EPIPE;
        eventq_chan_free(ra[i].ch);
    }
    for (int i = 0; i < S; i++) {
        pthread_join(st[i], NULL);
        sok &= sa[i].rc == -EPIPE;
        eventq_chan_free(sa[i].ch);
    }
    pthread_barrier_destroy(&start);
    CHECK_MSG("D6 close wakes blocked receivers with -EPIPE", rok, "rc %d %d %d %d", ra[0].rc,
              ra[1].rc, ra[2].rc, ra[3].rc);
    CHECK_MSG("D6 close wakes blocked senders with -EPIPE", sok, "rc %d %d %d", sa[0].rc, sa[1].rc,
              sa[2].rc);
    CHECK_U64("D6 woken senders queued nothing", pending_of(full), 1);
    CHECK("D6 the message queued before close is received", recv_is(full, "queued", 0));
    size_t len = 0;
    CHECK_INT("D6 then end of stream", eventq_chan_recv(full, NULL, 0, &len, 0), -EPIPE);
    CHECK_INT("D4 closed: recv fd readable", fd_readable(eventq_chan_recv_fd(empty)), 1);
    CHECK_INT("D6 closed: send fd readable", fd_readable(eventq_chan_send_fd(full)), 1);
    eventq_chan_free(empty);
    eventq_chan_free(full);
}

/* ---- D1 at free: handles freed concurrently, exactly one is the last ---- */

struct drop_count {
    _Atomic unsigned calls;
    _Atomic unsigned bad;
};

static void count_drop(void *userdata, const uint8_t *data, size_t len)
{
    struct drop_count *d = userdata;
    /* Messages are "k<digit>", k0..k6. */
    if (len != 2 || data[0] != 'k' || data[1] < '0' || data[1] > '6')
        atomic_fetch_add(&d->bad, 1);
    atomic_fetch_add(&d->calls, 1);
}

struct freer {
    pthread_t th;
    eventq_chan *ch;
    pthread_barrier_t *start;
    int rc;
    eventq_chan_stats st;
};

static void *freer_main(void *arg)
{
    struct freer *f = arg;
    pthread_barrier_wait(f->start);
    f->rc = eventq_chan_free_final(f->ch, &f->st, sizeof f->st);
    return NULL;
}

static void test_concurrent_free_final(void)
{
    enum { T = 6, ROUNDS = 40, K = 7 };
    int one_last = 1, dropped_ok = 1, hook_ok = 1;
    for (int r = 0; r < ROUNDS; r++) {
        struct drop_count d;
        atomic_init(&d.calls, 0);
        atomic_init(&d.bad, 0);
        eventq_chan_opts o;
        eventq_chan *ch = NULL;
        eventq_chan_opts_init(&o, sizeof o);
        o.drop_fn = count_drop;
        o.drop_userdata = &d;
        REQUIRE("chan_new", eventq_chan_new(&o, &ch) == 0);
        for (int i = 0; i < K; i++) {
            char m[2] = { 'k', (char)('0' + i) };
            REQUIRE("send", eventq_chan_send(ch, m, 2, 0) == 0);
        }
        pthread_barrier_t start;
        pthread_barrier_init(&start, NULL, T);
        struct freer f[T];
        for (int i = 0; i < T; i++) {
            f[i].ch = i == 0 ? ch : eventq_chan_clone(ch);
            f[i].start = &start;
            f[i].rc = -1;
        }
        for (int i = 0; i < T; i++)
            REQUIRE("pthread_create", pthread_create(&f[i].th, NULL, freer_main, &f[i]) == 0);
        int lasts = 0;
        for (int i = 0; i < T; i++) {
            pthread_join(f[i].th, NULL);
            if (f[i].rc == 1) {
                lasts++;
                dropped_ok &= f[i].st.dropped == K && f[i].st.sent == K && f[i].st.pending == 0;
            } else {
                one_last &= f[i].rc == 0;
            }
        }
        pthread_barrier_destroy(&start);
        one_last &= lasts == 1;
        hook_ok &= atomic_load(&d.calls) == K && atomic_load(&d.bad) == 0;
    }
    CHECK("concurrent free_final: exactly one handle is the last (1), the others 0", one_last);
    CHECK("concurrent free_final: the last reports dropped == messages left", dropped_ok);
    CHECK("concurrent free_final: drop_fn ran once per message, right bytes", hook_ok);
}

int main(void)
{
    check_init();

    struct mpmc_cfg basic = { .name = "mpmc 4x4", .producers = 4, .consumers = 4,
                              .per_producer = 20000, .capacity = 64 };
    run_mpmc(&basic);

    struct mpmc_cfg zero = { .name = "mpmc zero-length", .producers = 4, .consumers = 4,
                             .per_producer = 12000, .zero_every = 3, .capacity = 32 };
    run_mpmc(&zero);

    struct mpmc_cfg bytes = { .name = "mpmc byte limit", .producers = 3, .consumers = 3,
                              .per_producer = 8000, .capacity = 256, .max_bytes = 4096 };
    run_mpmc(&bytes);

    struct mpmc_cfg racing = { .name = "mpmc close races senders", .producers = 4,
                               .consumers = 2, .per_producer = UINT32_MAX, .zero_every = 5,
                               .capacity = 16, .close_after = 5000 };
    run_mpmc(&racing);

    test_epoll_consumer(0);
    test_epoll_consumer(1);
    test_blocked_sender();
    test_close_wakes_blocked();
    test_concurrent_free_final();
    return check_done();
}
