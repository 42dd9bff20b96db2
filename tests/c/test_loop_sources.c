/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * The loop's other sources and calls through the C ABI: timers (one-shot
 * order, periodic expiration counts, re-arming), posts (order from one and
 * several threads, posts from posts, capacity), stop from another thread
 * and inside a callback (no callback after it, nothing lost),
 * -EBUSY on re-entrant or concurrent runs, fd sources (level, edge, one-shot,
 * OUT, PRI, HUP, RDHUP, set_events, disable/enable), signal sources, negative
 * returns, and the embedded mode (the loop fd polled from an outer loop).
 *
 * No sleeps and no timing assertions. Timers are checked only for order and
 * counts the timer semantics guarantee: a one-shot timer armed for 1 ms runs
 * before one armed later for 40 ms; a periodic 1 ms timer read at least 30 ms
 * after it was armed reports at least 30 expirations.
 */
#include "check.h" /* includes <eventq.h> */

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdatomic.h>
#include <sys/eventfd.h>
#include <sys/socket.h>

#define MS 1000000ull

static void mkpipe(int p[2])
{
    REQUIRE("pipe2", pipe2(p, O_NONBLOCK | O_CLOEXEC) == 0);
}

static void closep(int p[2])
{
    close(p[0]);
    close(p[1]);
}

static int drain(int fd)
{
    char buf[4096];
    int total = 0;
    ssize_t n;
    while ((n = read(fd, buf, sizeof buf)) > 0)
        total += (int)n;
    return total;
}

/* ---- timers ---- */

struct torder {
    int order[8];
    int n;
    uint64_t exp[8];
};

struct tslot {
    struct torder *o;
    int id;
    int ret;
};

static int order_timer_cb(struct eventq_source *src, uint64_t expirations, void *ud)
{
    struct tslot *t = ud;
    (void)src;
    if (t->o->n < 8) {
        t->o->exp[t->o->n] = expirations;
        t->o->order[t->o->n++] = t->id;
    }
    return t->ret;
}

static void test_timer_order(void)
{
    struct eventq_loop *lp;
    struct torder o = { 0 };
    struct tslot t[3] = { { &o, 80, 0 }, { &o, 1, 0 }, { &o, 40, 0 } };
    struct eventq_source *h[3];

    REQUIRE("loop_new", eventq_loop_new(&lp) == 0);
    /* armed latest-deadline first, so the order is not the order of adds */
    for (int i = 0; i < 3; i++)
        REQUIRE("add_timer", eventq_loop_add_timer(lp, (uint64_t)t[i].id * MS, 0, order_timer_cb,
                                                   &t[i], NULL, &h[i]) == 0);
    while (o.n < 3)
        REQUIRE("run_once", eventq_loop_run_once(lp, EVENTQ_FOREVER) >= 0);
    CHECK_MSG("timers: one-shots fire in deadline order (1, 40, 80 ms)",
              o.order[0] == 1 && o.order[1] == 40 && o.order[2] == 80, "order %d %d %d",
              o.order[0], o.order[1], o.order[2]);
    CHECK_MSG("timers: a one-shot reports one expiration",
              o.exp[0] == 1 && o.exp[1] == 1 && o.exp[2] == 1, "%llu %llu %llu",
              (unsigned long long)o.exp[0], (unsigned long long)o.exp[1],
              (unsigned long long)o.exp[2]);
    CHECK_INT("timers: a fired one-shot stays quiet", eventq_loop_run_once(lp, 0), 0);
    CHECK_INT("timers: ...and the loop fd is idle", fd_readable(eventq_loop_fd(lp)), 0);

    /* re-armed with eventq_source_set_timer: fires once more each time */
    CHECK_INT("timers: set_timer re-arms a fired one-shot", eventq_source_set_timer(h[0], MS, 0), 0);
    while (o.n < 4)
        REQUIRE("run_once", eventq_loop_run_once(lp, EVENTQ_FOREVER) >= 0);
    CHECK_INT("timers: the re-armed one fired", o.order[3], 80);
    CHECK_INT("timers: re-armed, once only", eventq_loop_run_once(lp, 0), 0);
    /* set_timer on a disabled timer enables it */
    eventq_source_set_timer(h[1], 1000 * MS, 0);
    CHECK_INT("timers: disable", eventq_source_set_enabled(h[1], 0), 0);
    CHECK_INT("timers: set_timer enables", eventq_source_set_timer(h[1], 0, 0), 0);
    while (o.n < 5)
        REQUIRE("run_once", eventq_loop_run_once(lp, EVENTQ_FOREVER) >= 0);
    CHECK_INT("timers: set_timer(0) fires at once, enabled again", o.order[4], 1);
    /* re-arming a pending timer replaces its deadline: a 1000 s timer
     * re-armed for 1 ms fires before a 40 ms one armed before the re-arm */
    eventq_source_set_timer(h[2], 1000000 * MS, 0);
    eventq_source_set_timer(h[0], 40 * MS, 0);
    eventq_source_set_timer(h[2], 1, 0);
    while (o.n < 7)
        REQUIRE("run_once", eventq_loop_run_once(lp, EVENTQ_FOREVER) >= 0);
    CHECK_MSG("timers: a re-armed deadline replaces the old one", o.order[5] == 40 &&
              o.order[6] == 80, "order %d %d", o.order[5], o.order[6]);
    for (int i = 0; i < 3; i++)
        eventq_source_free(h[i]);
    eventq_loop_free(lp);
}

struct periodic {
    struct eventq_loop *lp;
    uint64_t calls, total, first, max;
    uint64_t stop_at;
    struct eventq_source *other; /* enabled by the one-shot */
    int rearm_left;              /* one-shot re-arms itself from its callback */
    uint64_t oneshot_calls;
};

static int periodic_cb(struct eventq_source *src, uint64_t n, void *ud)
{
    struct periodic *p = ud;
    (void)src;
    if (p->calls++ == 0)
        p->first = n;
    if (n > p->max)
        p->max = n;
    p->total += n;
    if (p->stop_at && p->total >= p->stop_at)
        eventq_loop_stop(p->lp);
    return 0;
}

static int enabler_cb(struct eventq_source *src, uint64_t n, void *ud)
{
    struct periodic *p = ud;
    (void)src;
    (void)n;
    eventq_source_set_enabled(p->other, 1);
    return 0;
}

static void test_timer_periodic(void)
{
    struct eventq_loop *lp;
    struct periodic p = { 0 };
    struct eventq_source *h, *oneshot;

    REQUIRE("loop_new", eventq_loop_new(&lp) == 0);
    p.lp = lp;
    p.stop_at = 20;
    REQUIRE("add_timer", eventq_loop_add_timer(lp, MS, MS, periodic_cb, &p, NULL, &h) == 0);
    CHECK_INT("periodic: run until 20 expirations", eventq_loop_run(lp), 0);
    CHECK_MSG("periodic: expirations sum to at least 20, each call at least 1",
              p.total >= 20 && p.calls >= 1 && p.calls <= p.total, "total %llu calls %llu",
              (unsigned long long)p.total, (unsigned long long)p.calls);
    eventq_source_free(h);

    /* Missed expirations are reported, not bunched: the periodic timer is
     * disabled while it runs; a one-shot armed after it for 30 ms enables
     * it; its first call then reports every expiration since (>= 30). */
    memset(&p, 0, sizeof p);
    p.lp = lp;
    p.stop_at = 1;
    REQUIRE("add_timer", eventq_loop_add_timer(lp, MS, MS, periodic_cb, &p, NULL, &h) == 0);
    REQUIRE("disable", eventq_source_set_enabled(h, 0) == 0);
    p.other = h;
    REQUIRE("add_timer", eventq_loop_add_timer(lp, 30 * MS, 0, enabler_cb, &p, NULL, &oneshot) == 0);
    CHECK_INT("periodic: run", eventq_loop_run(lp), 0);
    CHECK_MSG("periodic: the first call reports the missed expirations (>= 30)", p.first >= 30,
              "first call: %llu expirations", (unsigned long long)p.first);
    /* set_timer turns it into a one-shot */
    CHECK_INT("periodic: set_timer to one-shot", eventq_source_set_timer(h, 1, 0), 0);
    uint64_t calls = p.calls;
    while (p.calls == calls)
        REQUIRE("run_once", eventq_loop_run_once(lp, EVENTQ_FOREVER) >= 0);
    CHECK_INT("periodic: now a one-shot: quiet after firing", eventq_loop_run_once(lp, 0), 0);
    eventq_source_free(h);
    eventq_source_free(oneshot);
    eventq_loop_free(lp);
}

struct rearm {
    int left;
    int calls;
    int rc;
};

static int rearm_cb(struct eventq_source *src, uint64_t n, void *ud)
{
    struct rearm *r = ud;
    (void)n;
    r->calls++;
    if (r->left-- > 0)
        r->rc |= eventq_source_set_timer(src, 1, 0);
    return 0;
}

static void test_timer_rearm_from_callback(void)
{
    struct eventq_loop *lp;
    struct rearm r = { 3, 0, 0 };

    REQUIRE("loop_new", eventq_loop_new(&lp) == 0);
    REQUIRE("add_timer", eventq_loop_add_timer(lp, 1, 0, rearm_cb, &r, NULL, NULL) == 0);
    while (r.calls < 4)
        REQUIRE("run_once", eventq_loop_run_once(lp, EVENTQ_FOREVER) >= 0);
    CHECK_INT("timer re-armed from its own callback: set_timer returned 0", r.rc, 0);
    CHECK_INT("timer re-armed 3 times: 4 calls, then quiet", eventq_loop_run_once(lp, 0), 0);
    CHECK_INT("timer re-armed 3 times: 4 calls", r.calls, 4);
    eventq_loop_free(lp);
}

/* ---- posts ---- */

struct post_log {
    struct eventq_loop *lp;
    uint32_t *v;
    size_t n, cap;
    uint32_t stop_after;
    int nested_rc;
    int reentrant_run, reentrant_once;
};

struct post_item {
    struct post_log *log;
    uint32_t tag;
    uint32_t chain; /* posts this many more from inside itself */
};

static void post_record(void *arg)
{
    struct post_item *it = arg;
    struct post_log *l = it->log;
    if (l->n < l->cap)
        l->v[l->n] = it->tag;
    l->n++;
    if (l->stop_after && l->n == l->stop_after)
        eventq_loop_stop(l->lp);
}

static void post_nested(void *arg)
{
    struct post_item *it = arg;
    post_record(arg);
    if (it->chain) {
        it[1].log = it->log;
        it[1].chain = it->chain - 1;
        it->log->nested_rc |= eventq_loop_post(it->log->lp, post_nested, &it[1], NULL);
    }
}

static void post_reentrant(void *arg)
{
    struct post_log *l = arg;
    l->reentrant_once = eventq_loop_run_once(l->lp, 0);
    l->reentrant_run = eventq_loop_run(l->lp);
}

static void test_posts_one_thread(void)
{
    enum { N = 1000 };
    struct eventq_loop *lp;
    struct post_log l = { 0 };
    static struct post_item items[N];
    static uint32_t v[N + 16];

    REQUIRE("loop_new", eventq_loop_new(&lp) == 0);
    l.lp = lp;
    l.v = v;
    l.cap = N + 16;
    for (uint32_t i = 0; i < N; i++) {
        items[i] = (struct post_item){ &l, i, 0 };
        REQUIRE("post", eventq_loop_post(lp, post_record, &items[i], NULL) == 0);
    }
    while (l.n < N)
        REQUIRE("run_once", eventq_loop_run_once(lp, 0) > 0);
    int bad = 0;
    for (uint32_t i = 0; i < N; i++)
        bad += v[i] != i;
    CHECK_INT("posts: 1000 from one thread run in order", bad, 0);
    CHECK_INT("posts: each ran once, nothing left", eventq_loop_run_once(lp, 0), 0);

    /* posts from inside a post run after what was posted before them */
    struct post_item chain[4] = { { &l, 100, 3 }, { &l, 101, 0 }, { &l, 102, 0 }, { &l, 103, 0 } };
    struct post_item mid = { &l, 200, 0 };
    l.n = 0;
    REQUIRE("post", eventq_loop_post(lp, post_nested, &chain[0], NULL) == 0);
    REQUIRE("post", eventq_loop_post(lp, post_record, &mid, NULL) == 0);
    while (l.n < 5)
        REQUIRE("run_once", eventq_loop_run_once(lp, 0) > 0);
    CHECK_MSG("posts: a post's own post runs after those posted before it",
              v[0] == 100 && v[1] == 200 && v[2] == 101 && v[3] == 102 && v[4] == 103,
              "order %u %u %u %u %u", v[0], v[1], v[2], v[3], v[4]);
    CHECK_INT("posts: nested posts returned 0", l.nested_rc, 0);

    /* re-entrancy from a post */
    REQUIRE("post", eventq_loop_post(lp, post_reentrant, &l, NULL) == 0);
    eventq_loop_run_once(lp, 0);
    CHECK_INT("posts: run_once from inside a post: -EBUSY", l.reentrant_once, -EBUSY);
    CHECK_INT("posts: run from inside a post: -EBUSY", l.reentrant_run, -EBUSY);

    /* capacity: EVENTQ_POST_CAPACITY pending, then -EAGAIN, and the refused
     * fn never runs */
    struct post_item cap_item = { &l, 7, 0 }, refused = { &l, 999, 0 };
    l.n = 0;
    l.cap = 0; /* count only */
    int ok = 0;
    for (int i = 0; i < EVENTQ_POST_CAPACITY; i++)
        ok += eventq_loop_post(lp, post_record, &cap_item, NULL) == 0;
    CHECK_INT("posts: EVENTQ_POST_CAPACITY posts accepted", ok, EVENTQ_POST_CAPACITY);
    CHECK_INT("posts: one more: -EAGAIN", eventq_loop_post(lp, post_record, &refused, NULL), -EAGAIN);
    while (eventq_loop_run_once(lp, 0) > 0)
        ;
    CHECK_U64("posts: exactly the accepted ones ran", l.n, EVENTQ_POST_CAPACITY);
    CHECK_INT("posts: after draining, posting works again",
              eventq_loop_post(lp, post_record, &cap_item, NULL), 0);
    eventq_loop_run_once(lp, 0);
    eventq_loop_free(lp);
}

/* destroy(arg) of a post runs exactly once on every path: after fn ran,
 * when the loop is freed with the post pending, and when the post fails. */
struct post_own { int ran, destroyed, destroyed_after_ran; };
static void post_own_fn(void *arg) { ((struct post_own *)arg)->ran++; }
static void post_own_destroy(void *arg)
{
    struct post_own *o = arg;
    o->destroyed++;
    o->destroyed_after_ran = o->ran;
}

static void test_post_destroy(void)
{
    struct eventq_loop *lp;
    REQUIRE("loop_new", eventq_loop_new(&lp) == 0);
    struct post_own run = { 0, 0, 0 }, pending = { 0, 0, 0 }, refused = { 0, 0, 0 };
    REQUIRE("post", eventq_loop_post(lp, post_own_fn, &run, post_own_destroy) == 0);
    CHECK_INT("post destroy: not before the post runs", run.destroyed, 0);
    while (run.ran == 0)
        REQUIRE("run_once", eventq_loop_run_once(lp, 0) >= 0);
    CHECK_MSG("post destroy: once, after fn ran", run.ran == 1 && run.destroyed == 1 &&
              run.destroyed_after_ran == 1, "ran %d destroyed %d", run.ran, run.destroyed);

    /* refused (NULL fn): destroy has run when the call returns */
    CHECK_INT("post destroy: NULL fn -EINVAL", eventq_loop_post(lp, NULL, &refused, post_own_destroy), -EINVAL);
    CHECK_MSG("post destroy: failed post destroyed once, fn never ran",
              refused.destroyed == 1 && refused.ran == 0, "ran %d destroyed %d", refused.ran, refused.destroyed);

    /* pending at free: destroyed, never run */
    REQUIRE("post", eventq_loop_post(lp, post_own_fn, &pending, post_own_destroy) == 0);
    eventq_loop_free(lp);
    CHECK_MSG("post destroy: pending at free destroyed once, never ran",
              pending.destroyed == 1 && pending.ran == 0, "ran %d destroyed %d", pending.ran, pending.destroyed);
}

struct poster {
    pthread_t th;
    struct eventq_loop *lp;
    struct post_item *items;
    uint32_t n;
    int bad_rc;
};

static void *poster_main(void *arg)
{
    struct poster *p = arg;
    for (uint32_t i = 0; i < p->n; i++) {
        int rc;
        /* a full queue (-EAGAIN) is retried: the loop thread drains it */
        while ((rc = eventq_loop_post(p->lp, post_record, &p->items[i], NULL)) == -EAGAIN)
            sched_yield();
        p->bad_rc += rc != 0;
    }
    return NULL;
}

struct runner {
    pthread_t th;
    struct eventq_loop *lp;
    int rc;
    int efd; /* written by a post once the loop runs */
};

static void *runner_main(void *arg)
{
    struct runner *r = arg;
    r->rc = eventq_loop_run(r->lp);
    return NULL;
}

static void post_signal_efd(void *arg)
{
    uint64_t one = 1;
    (void)!write(*(int *)arg, &one, sizeof one);
}

static void post_noop(void *arg)
{
    (void)arg;
}

static void wait_efd(int fd)
{
    uint64_t v;
    struct pollfd p = { fd, POLLIN, 0 };
    while (read(fd, &v, sizeof v) != sizeof v)
        poll(&p, 1, -1);
}

static void test_posts_threads_and_stop(void)
{
    enum { NT = 4, PER = 3000 };
    struct runner r;
    struct post_log l = { 0 };
    struct poster ps[NT];
    static struct post_item items[NT][PER];
    static uint32_t v[NT * PER];

    REQUIRE("loop_new", eventq_loop_new(&r.lp) == 0);
    r.efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    REQUIRE("eventfd", r.efd >= 0);
    l.lp = r.lp;
    l.v = v;
    l.cap = NT * PER;
    l.stop_after = NT * PER; /* the last post stops the loop */
    REQUIRE("pthread_create", pthread_create(&r.th, NULL, runner_main, &r) == 0);

    /* the loop is running once this post has run */
    REQUIRE("post", eventq_loop_post(r.lp, post_signal_efd, &r.efd, NULL) == 0);
    wait_efd(r.efd);
    CHECK_INT("busy: run_once from a second thread while running: -EBUSY",
              eventq_loop_run_once(r.lp, 0), -EBUSY);
    CHECK_INT("busy: run from a second thread while running: -EBUSY", eventq_loop_run(r.lp),
              -EBUSY);

    for (int t = 0; t < NT; t++) {
        for (uint32_t i = 0; i < PER; i++)
            items[t][i] = (struct post_item){ &l, (uint32_t)t << 16 | i, 0 };
        ps[t] = (struct poster){ .lp = r.lp, .items = items[t], .n = PER };
        REQUIRE("pthread_create", pthread_create(&ps[t].th, NULL, poster_main, &ps[t]) == 0);
    }
    int bad_rc = 0;
    for (int t = 0; t < NT; t++) {
        pthread_join(ps[t].th, NULL);
        bad_rc += ps[t].bad_rc;
    }
    pthread_join(r.th, NULL);
    CHECK_INT("posts from 4 threads: every post accepted", bad_rc, 0);
    CHECK_INT("posts from 4 threads: the loop stopped after the last one", r.rc, 0);
    CHECK_U64("posts from 4 threads: each ran once", l.n, NT * PER);
    uint32_t next[NT] = { 0 };
    int bad = 0;
    for (size_t i = 0; i < l.n && i < l.cap; i++) {
        uint32_t t = v[i] >> 16, s = v[i] & 0xffff;
        if (t >= NT || s != next[t])
            bad++;
        else
            next[t]++;
    }
    CHECK_INT("posts from 4 threads: per-thread order held", bad, 0);

    /* stop from another thread: the loop runs in r.th, main stops it */
    REQUIRE("pthread_create", pthread_create(&r.th, NULL, runner_main, &r) == 0);
    REQUIRE("post", eventq_loop_post(r.lp, post_signal_efd, &r.efd, NULL) == 0);
    wait_efd(r.efd); /* it runs (and will block in epoll_wait) */
    CHECK_INT("stop: from another thread returns 0", eventq_loop_stop(r.lp), 0);
    pthread_join(r.th, NULL);
    CHECK_INT("stop: eventq_loop_run returned 0", r.rc, 0);

    /* a stop made before run makes that run return at once */
    CHECK_INT("stop before run", eventq_loop_stop(r.lp), 0);
    CHECK_INT("stop before run: run returns 0 at once", eventq_loop_run(r.lp), 0);
    eventq_loop_run_once(r.lp, 0); /* consume the stop's wake-up */
    close(r.efd);
    eventq_loop_free(r.lp);
}

/* ---- stop inside a callback ---- */

/* A stop takes effect when the running callback returns: no other callback
 * of the iteration runs (the rest of a channel source's budget, the other
 * ready sources, the posts), and nothing is lost: what was skipped is
 * dispatched by the next run, edge-triggered and one-shot fds included. */
struct stopper {
    struct eventq_loop *lp;
    int stopped; /* a callback called eventq_loop_stop */
    int late;    /* callbacks that ran after it, in the same run */
    int stop_on_first;
    int msgs_a, msgs_b, fd_level, fd_edge, fd_oneshot, posts;
};

static void stopper_note(struct stopper *s)
{
    if (s->stopped)
        s->late++;
}

static int stop_chan_a_cb(struct eventq_source *src, const void *d, size_t len, void *ud)
{
    struct stopper *s = ud;
    (void)src, (void)len;
    stopper_note(s);
    if (d)
        s->msgs_a++;
    if (s->stop_on_first && !s->stopped) {
        s->stopped = 1;
        eventq_loop_stop(s->lp);
    }
    return 0;
}

static int stop_chan_b_cb(struct eventq_source *src, const void *d, size_t len, void *ud)
{
    struct stopper *s = ud;
    (void)src, (void)len;
    stopper_note(s);
    s->msgs_b += d != NULL;
    return 0;
}

static int stop_fd_cb(struct eventq_source *src, int fd, uint32_t rev, void *ud)
{
    struct stopper *s = ud;
    (void)src, (void)fd, (void)rev;
    stopper_note(s);
    return 0;
}

static int stop_fd_level_cb(struct eventq_source *src, int fd, uint32_t rev, void *ud)
{
    ((struct stopper *)ud)->fd_level++;
    drain(fd);
    return stop_fd_cb(src, fd, rev, ud);
}

static int stop_fd_edge_cb(struct eventq_source *src, int fd, uint32_t rev, void *ud)
{
    ((struct stopper *)ud)->fd_edge++; /* not drained: no new edge comes */
    return stop_fd_cb(src, fd, rev, ud);
}

static int stop_fd_oneshot_cb(struct eventq_source *src, int fd, uint32_t rev, void *ud)
{
    ((struct stopper *)ud)->fd_oneshot++;
    return stop_fd_cb(src, fd, rev, ud);
}

struct stop_post {
    struct stopper *s;
    int ran, destroyed;
};

static void stop_post_fn(void *arg)
{
    struct stop_post *p = arg;
    stopper_note(p->s);
    p->ran++;
    p->s->posts++;
}

static void stop_post_destroy(void *arg) { ((struct stop_post *)arg)->destroyed++; }

static void test_stop_in_callback(void)
{
    struct eventq_loop *lp;
    eventq_chan *a, *b;
    struct eventq_source *h[5];
    int pl[2], pe[2], po[2];
    struct stopper s = { 0 };
    struct stop_post posts[3] = { { &s, 0, 0 }, { &s, 0, 0 }, { &s, 0, 0 } };

    REQUIRE("loop_new", eventq_loop_new(&lp) == 0);
    REQUIRE("chan_new", eventq_chan_new(NULL, &a) == 0);
    REQUIRE("chan_new", eventq_chan_new(NULL, &b) == 0);
    mkpipe(pl);
    mkpipe(pe);
    mkpipe(po);
    s.lp = lp;
    s.stop_on_first = 1;
    /* Everything is ready before the sources are added, so epoll reports
     * them in the order added: a first, whose first callback stops. */
    for (int i = 0; i < 10; i++) {
        REQUIRE("send", eventq_chan_send(a, "a", 1, 0) == 0);
        REQUIRE("send", eventq_chan_send(b, "b", 1, 0) == 0);
    }
    REQUIRE("write", write(pl[1], "l", 1) == 1);
    REQUIRE("write", write(pe[1], "e", 1) == 1);
    REQUIRE("write", write(po[1], "o", 1) == 1);
    REQUIRE("add_chan", eventq_loop_add_chan(lp, a, stop_chan_a_cb, &s, NULL, &h[0]) == 0);
    REQUIRE("add_chan", eventq_loop_add_chan(lp, b, stop_chan_b_cb, &s, NULL, &h[1]) == 0);
    REQUIRE("add_fd", eventq_loop_add_fd(lp, pl[0], EVENTQ_IN, stop_fd_level_cb, &s, NULL, &h[2]) == 0);
    REQUIRE("add_fd", eventq_loop_add_fd(lp, pe[0], EVENTQ_IN | EVENTQ_EDGE, stop_fd_edge_cb, &s, NULL,
                                         &h[3]) == 0);
    REQUIRE("add_fd", eventq_loop_add_fd(lp, po[0], EVENTQ_IN | EVENTQ_ONESHOT, stop_fd_oneshot_cb, &s,
                                         NULL, &h[4]) == 0);
    for (int i = 0; i < 3; i++)
        REQUIRE("post", eventq_loop_post(lp, stop_post_fn, &posts[i], stop_post_destroy) == 0);

    CHECK_INT("stop in a callback: run returns 0", eventq_loop_run(lp), 0);
    CHECK_INT("stop in a callback: it was the channel source's first message", s.msgs_a, 1);
    CHECK_INT("stop in a callback: no callback ran after it", s.late, 0);
    CHECK_MSG("stop in a callback: the other sources and the posts waited",
              s.msgs_b == 0 && s.fd_level == 0 && s.fd_edge == 0 && s.fd_oneshot == 0 && s.posts == 0,
              "b %d level %d edge %d oneshot %d posts %d", s.msgs_b, s.fd_level, s.fd_edge,
              s.fd_oneshot, s.posts);
    eventq_chan_stats st;
    REQUIRE("stats", eventq_chan_get_stats(a, &st, sizeof st) == 0);
    CHECK_U64("stop in a callback: no message taken but the one delivered", st.pending, 9);

    /* The next iterations dispatch what the stop left: every message, the
     * level fd, the edge-triggered and one-shot fds whose events were
     * skipped (re-armed, no new write), and the posts. */
    s.stopped = 0;
    s.stop_on_first = 0;
    int rounds = 0;
    while (eventq_loop_run_once(lp, 0) > 0 && rounds < 100)
        rounds++;
    CHECK_MSG("stop in a callback: nothing lost",
              s.msgs_a == 10 && s.msgs_b == 10 && s.fd_level == 1 && s.fd_edge == 1 &&
                  s.fd_oneshot == 1 && s.posts == 3,
              "a %d b %d level %d edge %d oneshot %d posts %d", s.msgs_a, s.msgs_b, s.fd_level,
              s.fd_edge, s.fd_oneshot, s.posts);
    CHECK_MSG("stop in a callback: each post ran and was destroyed once",
              posts[0].ran == 1 && posts[0].destroyed == 1 && posts[2].ran == 1 &&
                  posts[2].destroyed == 1, "ran %d/%d destroyed %d/%d", posts[0].ran,
              posts[2].ran, posts[0].destroyed, posts[2].destroyed);

    /* run_once: a stop in its callback ends its dispatch too, and stays
     * pending for the next run; a pending stop does not cut a later
     * run_once short. */
    s.stop_on_first = 1;
    for (int i = 0; i < 3; i++)
        REQUIRE("send", eventq_chan_send(a, "a", 1, 0) == 0);
    REQUIRE("post", eventq_loop_post(lp, stop_post_fn, &posts[0], stop_post_destroy) == 0);
    CHECK_INT("stop in run_once: one callback", eventq_loop_run_once(lp, 0), 1);
    CHECK_INT("stop in run_once: no callback after it", s.late, 0);
    CHECK_INT("stop in run_once: the stop stays pending: run returns at once", eventq_loop_run(lp), 0);
    CHECK_INT("stop in run_once: ...without a callback", s.late, 0);
    s.stopped = 0;
    s.stop_on_first = 0;
    REQUIRE("stop", eventq_loop_stop(lp) == 0);
    int n = eventq_loop_run_once(lp, 0);
    CHECK_INT("a stop pending before run_once does not end its dispatch", n, 3);
    CHECK_MSG("stop in run_once: the rest came", s.msgs_a == 13 && s.posts == 4, "a %d posts %d",
              s.msgs_a, s.posts);
    CHECK_INT("pending stop: run returns at once", eventq_loop_run(lp), 0);

    /* posts left pending by a stop and never run are destroyed at free */
    struct stop_post left = { &s, 0, 0 };
    s.stop_on_first = 1;
    s.stopped = 0;
    REQUIRE("send", eventq_chan_send(a, "a", 1, 0) == 0);
    REQUIRE("post", eventq_loop_post(lp, stop_post_fn, &left, stop_post_destroy) == 0);
    CHECK_INT("stop, then free: run", eventq_loop_run(lp), 0);
    for (int i = 0; i < 5; i++)
        eventq_source_free(h[i]);
    eventq_loop_free(lp);
    CHECK_MSG("stop, then free: the pending post never ran, destroyed once",
              left.ran == 0 && left.destroyed == 1 && s.late == 0, "ran %d destroyed %d late %d",
              left.ran, left.destroyed, s.late);
    eventq_chan_free(a);
    eventq_chan_free(b);
    closep(pl);
    closep(pe);
    closep(po);
}

/* ---- fd sources ---- */

struct fdrec {
    int calls;
    uint32_t last;
    uint32_t all;
    int drain;       /* read everything (edge-triggered use) */
    int read_one;    /* read one byte */
    int bytes;
    int ret;
    int reentrant_once, reentrant_run;
    struct eventq_loop *lp;
};

static int fdrec_cb(struct eventq_source *src, int fd, uint32_t revents, void *ud)
{
    struct fdrec *r = ud;
    (void)src;
    r->calls++;
    r->last = revents;
    r->all |= revents;
    if (r->drain)
        r->bytes += drain(fd);
    if (r->read_one) {
        char c;
        r->bytes += read(fd, &c, 1) == 1;
    }
    if (r->lp) {
        r->reentrant_once = eventq_loop_run_once(r->lp, 0);
        r->reentrant_run = eventq_loop_run(r->lp);
    }
    return r->ret;
}

static void test_fd_level(void)
{
    struct eventq_loop *lp;
    struct fdrec r = { 0 };
    struct eventq_source *h;
    int p[2];

    REQUIRE("loop_new", eventq_loop_new(&lp) == 0);
    mkpipe(p);
    REQUIRE("add_fd", eventq_loop_add_fd(lp, p[0], EVENTQ_IN, fdrec_cb, &r, NULL, &h) == 0);
    CHECK_INT("level: nothing written, nothing runs", eventq_loop_run_once(lp, 0), 0);
    CHECK_INT("level: loop fd idle", fd_readable(eventq_loop_fd(lp)), 0);
    REQUIRE("write", write(p[1], "ab", 2) == 2);
    CHECK_INT("level: loop fd readable with data pending", fd_readable(eventq_loop_fd(lp)), 1);
    int n = 0;
    for (int i = 0; i < 3; i++)
        n += eventq_loop_run_once(lp, 0);
    CHECK_INT("level: fires every iteration while data is unread", n, 3);
    CHECK_MSG("level: revents has EVENTQ_IN", r.last == EVENTQ_IN, "revents %#x", r.last);
    r.read_one = 1;
    eventq_loop_run_once(lp, 0);
    CHECK_INT("level: one byte left, still fires", eventq_loop_run_once(lp, 0), 1);
    CHECK_INT("level: read all, quiet", eventq_loop_run_once(lp, 0), 0);
    CHECK_INT("level: loop fd idle again", fd_readable(eventq_loop_fd(lp)), 0);

    /* disable / enable */
    REQUIRE("write", write(p[1], "c", 1) == 1);
    r.read_one = 0;
    CHECK_INT("disable: returns 0", eventq_source_set_enabled(h, 0), 0);
    CHECK_INT("disable: a disabled source does not run", eventq_loop_run_once(lp, 0), 0);
    CHECK_INT("disable: loop fd idle while disabled", fd_readable(eventq_loop_fd(lp)), 0);
    CHECK_INT("disable twice: 0", eventq_source_set_enabled(h, 0), 0);
    CHECK_INT("enable: returns 0", eventq_source_set_enabled(h, 1), 0);
    CHECK_INT("enable twice: 0", eventq_source_set_enabled(h, 1), 0);
    CHECK_INT("enable: runs again", eventq_loop_run_once(lp, 0), 1);

    /* re-entrancy from an fd callback */
    r.lp = lp;
    eventq_loop_run_once(lp, 0);
    CHECK_INT("busy: run_once from inside a callback: -EBUSY", r.reentrant_once, -EBUSY);
    CHECK_INT("busy: run from inside a callback: -EBUSY", r.reentrant_run, -EBUSY);
    r.lp = NULL;

    /* HUP: the writer closes */
    drain(p[0]);
    close(p[1]);
    r.all = 0;
    CHECK_INT("hup: runs when the writer is closed", eventq_loop_run_once(lp, 0), 1);
    CHECK_MSG("hup: EVENTQ_HUP reported though not asked for", r.all & EVENTQ_HUP,
              "revents %#x", r.all);
    eventq_source_free(h);
    close(p[0]);
    eventq_loop_free(lp);
}

static void test_fd_edge(void)
{
    struct eventq_loop *lp;
    struct fdrec r = { 0 };
    struct eventq_source *h;
    int p[2];

    REQUIRE("loop_new", eventq_loop_new(&lp) == 0);
    mkpipe(p);
    r.drain = 1;
    REQUIRE("add_fd", eventq_loop_add_fd(lp, p[0], EVENTQ_IN | EVENTQ_EDGE, fdrec_cb, &r, NULL,
                                         &h) == 0);
    for (int i = 0; i < 3; i++)
        REQUIRE("write", write(p[1], "x", 1) == 1);
    CHECK_INT("edge: a burst of 3 writes: one call", eventq_loop_run_once(lp, 0), 1);
    CHECK_INT("edge: the call drained all 3 bytes", r.bytes, 3);
    CHECK_MSG("edge: revents is EVENTQ_IN (no EDGE bit)", r.last == EVENTQ_IN, "revents %#x",
              r.last);
    CHECK_INT("edge: then quiet", eventq_loop_run_once(lp, 0), 0);
    REQUIRE("write", write(p[1], "yy", 2) == 2);
    CHECK_INT("edge: a new write: one call", eventq_loop_run_once(lp, 0), 1);
    CHECK_INT("edge: drained 2 more", r.bytes, 5);

    /* not draining: no new edge, no new call, though data remains */
    r.drain = 0;
    r.read_one = 1;
    REQUIRE("write", write(p[1], "abc", 3) == 3);
    CHECK_INT("edge, not drained: one call", eventq_loop_run_once(lp, 0), 1);
    CHECK_INT("edge, not drained: no call without a new edge", eventq_loop_run_once(lp, 0), 0);
    REQUIRE("write", write(p[1], "d", 1) == 1);
    CHECK_INT("edge, not drained: a new write is a new edge", eventq_loop_run_once(lp, 0), 1);
    CHECK_INT("edge: 2 calls read one byte each", r.bytes, 7);
    eventq_source_free(h);
    closep(p);
    eventq_loop_free(lp);
}

static void test_fd_oneshot(void)
{
    struct eventq_loop *lp;
    struct fdrec r = { 0 };
    struct eventq_source *h;
    int p[2];

    REQUIRE("loop_new", eventq_loop_new(&lp) == 0);
    mkpipe(p);
    REQUIRE("add_fd", eventq_loop_add_fd(lp, p[0], EVENTQ_IN | EVENTQ_ONESHOT, fdrec_cb, &r, NULL,
                                         &h) == 0);
    REQUIRE("write", write(p[1], "x", 1) == 1);
    CHECK_INT("oneshot: fires once", eventq_loop_run_once(lp, 0), 1);
    CHECK_INT("oneshot: not again though data is unread", eventq_loop_run_once(lp, 0), 0);
    CHECK_INT("oneshot: loop fd idle", fd_readable(eventq_loop_fd(lp)), 0);
    REQUIRE("write", write(p[1], "y", 1) == 1);
    CHECK_INT("oneshot: not even after another write", eventq_loop_run_once(lp, 0), 0);
    CHECK_INT("oneshot: set_enabled(1) re-arms", eventq_source_set_enabled(h, 1), 0);
    CHECK_INT("oneshot: fires once more", eventq_loop_run_once(lp, 0), 1);
    CHECK_INT("oneshot: then quiet", eventq_loop_run_once(lp, 0), 0);
    CHECK_INT("oneshot: calls", r.calls, 2);
    /* set_events while fired: takes effect on re-enable */
    CHECK_INT("oneshot: set_events(IN) drops ONESHOT", eventq_source_set_events(h, EVENTQ_IN), 0);
    CHECK_INT("oneshot: set_events does not re-arm", eventq_loop_run_once(lp, 0), 0);
    eventq_source_set_enabled(h, 1);
    int n = eventq_loop_run_once(lp, 0) + eventq_loop_run_once(lp, 0);
    CHECK_INT("oneshot -> level: fires every iteration", n, 2);
    eventq_source_free(h);
    closep(p);
    eventq_loop_free(lp);
}

static void test_fd_out_rdhup_set_events(void)
{
    struct eventq_loop *lp;
    struct fdrec r = { 0 };
    struct eventq_source *h;
    int p[2], sp[2];

    REQUIRE("loop_new", eventq_loop_new(&lp) == 0);
    mkpipe(p);
    /* OUT on a pipe's write end */
    REQUIRE("add_fd", eventq_loop_add_fd(lp, p[1], EVENTQ_OUT, fdrec_cb, &r, NULL, &h) == 0);
    CHECK_INT("out: an empty pipe is writable", eventq_loop_run_once(lp, 0), 1);
    CHECK_MSG("out: revents EVENTQ_OUT", r.last == EVENTQ_OUT, "revents %#x", r.last);
    char buf[4096];
    memset(buf, 'z', sizeof buf);
    while (write(p[1], buf, sizeof buf) > 0)
        ;
    CHECK_INT("out: a full pipe is not", eventq_loop_run_once(lp, 0), 0);
    drain(p[0]);
    CHECK_INT("out: drained: writable again", eventq_loop_run_once(lp, 0), 1);
    eventq_source_free(h);

    /* set_events on a socketpair */
    REQUIRE("socketpair", socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sp) == 0);
    memset(&r, 0, sizeof r);
    REQUIRE("add_fd", eventq_loop_add_fd(lp, sp[0], EVENTQ_IN, fdrec_cb, &r, NULL, &h) == 0);
    CHECK_INT("set_events: IN, nothing to read", eventq_loop_run_once(lp, 0), 0);
    CHECK_INT("set_events: to OUT", eventq_source_set_events(h, EVENTQ_OUT), 0);
    CHECK_INT("set_events: OUT fires", eventq_loop_run_once(lp, 0), 1);
    CHECK_MSG("set_events: revents OUT", r.last == EVENTQ_OUT, "revents %#x", r.last);
    CHECK_INT("set_events: to IN|OUT|ONESHOT",
              eventq_source_set_events(h, EVENTQ_IN | EVENTQ_OUT | EVENTQ_ONESHOT), 0);
    CHECK_INT("set_events: fires once", eventq_loop_run_once(lp, 0), 1);
    CHECK_INT("set_events: then quiet (one-shot)", eventq_loop_run_once(lp, 0), 0);
    CHECK_INT("set_events: to RDHUP only", eventq_source_set_events(h, EVENTQ_RDHUP), 0);
    eventq_source_set_enabled(h, 1);
    CHECK_INT("rdhup: quiet while the peer is open", eventq_loop_run_once(lp, 0), 0);
    CHECK_INT("set_events: disabled, change events", eventq_source_set_enabled(h, 0), 0);
    CHECK_INT("set_events on a disabled source", eventq_source_set_events(h, EVENTQ_RDHUP), 0);
    REQUIRE("shutdown", shutdown(sp[1], SHUT_WR) == 0);
    CHECK_INT("set_events: still disabled", eventq_loop_run_once(lp, 0), 0);
    eventq_source_set_enabled(h, 1);
    r.all = 0;
    CHECK_INT("rdhup: the peer shut down its writing side", eventq_loop_run_once(lp, 0), 1);
    CHECK_MSG("rdhup: revents has EVENTQ_RDHUP", r.all & EVENTQ_RDHUP, "revents %#x", r.all);
    close(sp[1]);
    r.all = 0;
    eventq_loop_run_once(lp, 0);
    CHECK_MSG("hup: the peer closed: EVENTQ_HUP and RDHUP", (r.all & (EVENTQ_HUP | EVENTQ_RDHUP)) ==
              (EVENTQ_HUP | EVENTQ_RDHUP), "revents %#x", r.all);
    eventq_source_free(h);
    close(sp[0]);
    closep(p);
    eventq_loop_free(lp);
}

/* PRI: TCP urgent data on the loopback interface. */
static void test_fd_pri(void)
{
    struct eventq_loop *lp;
    struct fdrec r = { 0 };
    struct eventq_source *h;
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
    socklen_t alen = sizeof a;
    int ls = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (ls < 0 || bind(ls, (struct sockaddr *)&a, sizeof a) < 0 || listen(ls, 1) < 0 ||
        getsockname(ls, (struct sockaddr *)&a, &alen) < 0) {
        printf("# skipped PRI: no loopback TCP (%s)\n", strerror(errno));
        if (ls >= 0)
            close(ls);
        return;
    }
    int c = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    REQUIRE("connect", c >= 0 && connect(c, (struct sockaddr *)&a, sizeof a) == 0);
    int s = accept4(ls, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
    REQUIRE("accept", s >= 0);
    REQUIRE("loop_new", eventq_loop_new(&lp) == 0);
    REQUIRE("add_fd", eventq_loop_add_fd(lp, s, EVENTQ_PRI, fdrec_cb, &r, NULL, &h) == 0);
    CHECK_INT("pri: no urgent data, quiet", eventq_loop_run_once(lp, 0), 0);
    REQUIRE("send oob", send(c, "!", 1, MSG_OOB) == 1);
    CHECK_INT("pri: urgent data arrives", eventq_loop_run_once(lp, EVENTQ_FOREVER), 1);
    CHECK_MSG("pri: revents has EVENTQ_PRI", r.last & EVENTQ_PRI, "revents %#x", r.last);
    eventq_source_free(h);
    eventq_loop_free(lp);
    close(s);
    close(c);
    close(ls);
}

/* ---- negative returns ---- */

static int timer_fail_cb(struct eventq_source *src, uint64_t n, void *ud)
{
    (void)src;
    (void)n;
    (*(int *)ud)++;
    return -ETIME;
}

static void test_negative_returns(void)
{
    struct eventq_loop *lp;
    struct fdrec r = { 0 };
    struct eventq_source *h, *t;
    int p[2], tcalls = 0;

    REQUIRE("loop_new", eventq_loop_new(&lp) == 0);
    mkpipe(p);
    r.ret = -ECONNRESET;
    REQUIRE("add_fd", eventq_loop_add_fd(lp, p[0], EVENTQ_IN, fdrec_cb, &r, NULL, &h) == 0);
    REQUIRE("write", write(p[1], "x", 1) == 1);
    CHECK_INT("fd fails: one call", eventq_loop_run_once(lp, 0), 1);
    CHECK_INT("fd fails: eventq_source_error", eventq_source_error(h), -ECONNRESET);
    CHECK_INT("fd fails: disabled though readable", eventq_loop_run_once(lp, 0), 0);
    CHECK_INT("fd fails: loop fd idle", fd_readable(eventq_loop_fd(lp)), 0);
    r.ret = 0;
    eventq_source_set_enabled(h, 1);
    CHECK_INT("fd fails: re-enabled runs", eventq_loop_run_once(lp, 0), 1);
    CHECK_INT("fd fails: a later success clears nothing", eventq_source_error(h), -ECONNRESET);
    r.ret = 5;
    eventq_loop_run_once(lp, 0);
    CHECK_INT("fd: a positive return is success", eventq_loop_run_once(lp, 0), 1);

    REQUIRE("add_timer", eventq_loop_add_timer(lp, 1, MS, timer_fail_cb, &tcalls, NULL, &t) == 0);
    eventq_source_set_enabled(h, 0);
    while (tcalls == 0)
        REQUIRE("run_once", eventq_loop_run_once(lp, EVENTQ_FOREVER) >= 0);
    CHECK_INT("periodic timer fails: eventq_source_error", eventq_source_error(t), -ETIME);
    CHECK_INT("periodic timer fails: disabled, no more calls", eventq_loop_run_once(lp, 0), 0);
    CHECK_INT("periodic timer fails: one call", tcalls, 1);
    eventq_source_free(t);
    eventq_source_free(h);
    closep(p);
    eventq_loop_free(lp);
}

/* ---- signals (SIGUSR1, SIGUSR2, SIGRTMIN+1 are blocked in main first) ---- */

struct sigrec {
    int calls;
    int last;
    struct eventq_loop *lp;
    int stop;
    int ret;
};

static int sig_cb(struct eventq_source *src, int signo, void *ud)
{
    struct sigrec *s = ud;
    (void)src;
    s->calls++;
    s->last = signo;
    if (s->stop)
        eventq_loop_stop(s->lp);
    return s->ret;
}

struct killer {
    pthread_t target;
    int sig;
};

static void *killer_main(void *arg)
{
    struct killer *k = arg;
    pthread_kill(k->target, k->sig);
    return NULL;
}

static void test_signals(void)
{
    struct eventq_loop *lp;
    struct sigrec s1 = { 0 }, s2 = { 0 }, rt = { 0 };
    struct eventq_source *h1, *h2, *hrt;

    REQUIRE("loop_new", eventq_loop_new(&lp) == 0);
    REQUIRE("add_signal", eventq_loop_add_signal(lp, SIGUSR1, sig_cb, &s1, NULL, &h1) == 0);
    CHECK_INT("signal: nothing pending, quiet", eventq_loop_run_once(lp, 0), 0);
    REQUIRE("raise", raise(SIGUSR1) == 0);
    CHECK_INT("signal: raise(SIGUSR1) runs the callback", eventq_loop_run_once(lp, EVENTQ_FOREVER), 1);
    CHECK_INT("signal: with the signal number", s1.last, SIGUSR1);
    CHECK_INT("signal: consumed: quiet", eventq_loop_run_once(lp, 0), 0);

    /* from another thread, to this (the loop's) thread */
    struct killer k = { pthread_self(), SIGUSR1 };
    pthread_t th;
    REQUIRE("pthread_create", pthread_create(&th, NULL, killer_main, &k) == 0);
    pthread_join(th, NULL);
    CHECK_INT("signal: pthread_kill from another thread", eventq_loop_run_once(lp, EVENTQ_FOREVER), 1);
    CHECK_INT("signal: two calls in all", s1.calls, 2);

    /* real-time signals queue: three sent, three calls */
    int rtsig = SIGRTMIN + 1;
    REQUIRE("add_signal", eventq_loop_add_signal(lp, rtsig, sig_cb, &rt, NULL, &hrt) == 0);
    for (int i = 0; i < 3; i++)
        REQUIRE("sigqueue", pthread_sigqueue(pthread_self(), rtsig, (union sigval){ .sival_int = i }) == 0);
    while (rt.calls < 3)
        REQUIRE("run_once", eventq_loop_run_once(lp, EVENTQ_FOREVER) >= 0);
    CHECK_INT("signal: three queued real-time signals, three calls, then quiet",
              eventq_loop_run_once(lp, 0), 0);
    CHECK_INT("signal: rt calls", rt.calls, 3);

    /* a second source for the same signal: -EBUSY; after remove, allowed */
    CHECK_INT("signal: a second source for SIGUSR1: -EBUSY",
              eventq_loop_add_signal(lp, SIGUSR1, sig_cb, &s2, NULL, NULL), -EBUSY);
    CHECK_INT("signal: remove", eventq_source_remove(h1), 0);
    CHECK_INT("signal: after remove, SIGUSR1 can be added again",
              eventq_loop_add_signal(lp, SIGUSR1, sig_cb, &s2, NULL, &h2), 0);
    eventq_source_free(h1);
    eventq_source_free(h2);

    /* the loop in another thread; main sends SIGUSR2 to it; the callback
     * stops the loop */
    struct sigrec st = { 0 };
    struct runner r = { .lp = lp };
    struct eventq_source *hs;
    st.lp = lp;
    st.stop = 1;
    r.efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    REQUIRE("add_signal", eventq_loop_add_signal(lp, SIGUSR2, sig_cb, &st, NULL, &hs) == 0);
    REQUIRE("pthread_create", pthread_create(&r.th, NULL, runner_main, &r) == 0);
    REQUIRE("post", eventq_loop_post(lp, post_signal_efd, &r.efd, NULL) == 0);
    wait_efd(r.efd);
    REQUIRE("pthread_kill", pthread_kill(r.th, SIGUSR2) == 0);
    pthread_join(r.th, NULL);
    CHECK_MSG("signal: SIGUSR2 to the loop thread stopped the loop", r.rc == 0 && st.calls == 1 &&
              st.last == SIGUSR2, "rc %d calls %d last %d", r.rc, st.calls, st.last);
    /* process-directed: kill(getpid()) reaches the loop (every thread blocks it) */
    REQUIRE("pthread_create", pthread_create(&r.th, NULL, runner_main, &r) == 0);
    REQUIRE("post", eventq_loop_post(lp, post_signal_efd, &r.efd, NULL) == 0);
    wait_efd(r.efd);
    REQUIRE("kill", kill(getpid(), SIGUSR2) == 0);
    pthread_join(r.th, NULL);
    CHECK_MSG("signal: kill(getpid()) reached the loop thread", r.rc == 0 && st.calls == 2,
              "rc %d calls %d", r.rc, st.calls);

    /* a failing signal callback disables its source */
    st.stop = 0;
    st.ret = -EINTR;
    REQUIRE("raise", raise(SIGUSR2) == 0);
    eventq_loop_run_once(lp, EVENTQ_FOREVER);
    CHECK_INT("signal fails: eventq_source_error", eventq_source_error(hs), -EINTR);
    REQUIRE("raise", raise(SIGUSR2) == 0);
    CHECK_INT("signal fails: disabled", eventq_loop_run_once(lp, 0), 0);
    eventq_source_free(hs);
    eventq_source_free(hrt);
    eventq_loop_free(lp);
    close(r.efd);
    /* the SIGUSR2 left pending */
    sigset_t set;
    struct timespec zero = { 0, 0 };
    sigemptyset(&set);
    sigaddset(&set, SIGUSR2);
    while (sigtimedwait(&set, NULL, &zero) > 0)
        ;
}

/* ---- embedded mode ---- */

struct emb {
    uint64_t msgs, eos;
};

static int emb_cb(struct eventq_source *src, const void *d, size_t len, void *ud)
{
    struct emb *e = ud;
    (void)src;
    (void)len;
    if (d)
        e->msgs++;
    else
        e->eos++;
    return 0;
}

struct sender {
    pthread_t th;
    eventq_chan *ch;
    int n;
};

static void *sender_main(void *arg)
{
    struct sender *s = arg;
    for (int i = 0; i < s->n; i++)
        eventq_chan_send(s->ch, &i, sizeof i, EVENTQ_FOREVER);
    eventq_chan_close(s->ch);
    return NULL;
}

struct nested {
    struct eventq_loop *inner;
    int runs, bad;
};

static int outer_cb(struct eventq_source *src, int fd, uint32_t rev, void *ud)
{
    struct nested *n = ud;
    (void)src;
    (void)fd;
    (void)rev;
    n->runs++;
    n->bad += eventq_loop_run_once(n->inner, 0) < 0;
    return 0;
}

static void test_embedded(void)
{
    struct eventq_loop *lp;
    eventq_chan *ch;
    struct eventq_source *h, *t;
    struct emb e = { 0 };
    struct periodic p = { 0 };

    REQUIRE("loop_new", eventq_loop_new(&lp) == 0);
    int lfd = eventq_loop_fd(lp);
    CHECK_MSG("embedded: eventq_loop_fd is an fd", lfd >= 0, "fd %d", lfd);
    CHECK_INT("embedded: the loop fd is close-on-exec", (fcntl(lfd, F_GETFD) & FD_CLOEXEC) != 0, 1);
    CHECK_INT("embedded: a new loop's fd is not readable", fd_readable(lfd), 0);
    REQUIRE("chan_new", eventq_chan_new(NULL, &ch) == 0);
    REQUIRE("add_chan", eventq_loop_add_chan(lp, ch, emb_cb, &e, NULL, &h) == 0);
    CHECK_INT("embedded: idle with an empty channel source", fd_readable(lfd), 0);
    REQUIRE("send", eventq_chan_send(ch, "a", 1, 0) == 0);
    CHECK_INT("embedded: readable after a send", fd_readable(lfd), 1);
    CHECK_INT("embedded: run_once(0) delivers", eventq_loop_run_once(lp, 0), 1);
    CHECK_INT("embedded: idle again", fd_readable(lfd), 0);
    for (int i = 0; i < 2 * EVENTQ_DEFAULT_BUDGET + 25; i++) /* three iterations' worth */
        REQUIRE("send", eventq_chan_send(ch, "b", 1, 0) == 0);
    eventq_loop_run_once(lp, 0);
    CHECK_INT("embedded: still readable while over the budget", fd_readable(lfd), 1);
    eventq_loop_run_once(lp, 0);
    eventq_loop_run_once(lp, 0);
    CHECK_INT("embedded: idle once drained", fd_readable(lfd), 0);
    REQUIRE("post", eventq_loop_post(lp, post_noop, NULL, NULL) == 0);
    CHECK_INT("embedded: readable with a post pending", fd_readable(lfd), 1);
    eventq_loop_run_once(lp, 0);
    CHECK_INT("embedded: idle after the post ran", fd_readable(lfd), 0);

    /* a timer: readable once expired, idle after dispatch */
    REQUIRE("add_timer", eventq_loop_add_timer(lp, MS, 0, periodic_cb, &p, NULL, &t) == 0);
    REQUIRE("poll", poll(&(struct pollfd){ lfd, POLLIN, 0 }, 1, -1) == 1);
    CHECK_INT("embedded: the expired timer runs", eventq_loop_run_once(lp, 0), 1);
    CHECK_INT("embedded: idle after the timer", fd_readable(lfd), 0);
    eventq_source_free(t);

    /* an outer poll loop drives the loop while a thread sends and closes */
    e.msgs = 0;
    struct sender s = { .ch = eventq_chan_clone(ch), .n = 5000 };
    int p2[2];
    mkpipe(p2); /* an outer-loop fd of its own, never ready */
    REQUIRE("pthread_create", pthread_create(&s.th, NULL, sender_main, &s) == 0);
    int bad = 0, wakeups = 0;
    while (e.eos == 0) {
        struct pollfd pf[2] = { { lfd, POLLIN, 0 }, { p2[0], POLLIN, 0 } };
        if (poll(pf, 2, -1) < 0 && errno != EINTR)
            bad++;
        if (pf[0].revents & POLLIN) {
            wakeups++;
            bad += eventq_loop_run_once(lp, 0) < 0;
        }
    }
    pthread_join(s.th, NULL);
    CHECK_INT("embedded: outer poll loop: no errors", bad, 0);
    CHECK_U64("embedded: outer poll loop: every message, then end of stream", e.msgs, 5000);
    CHECK_U64("embedded: end of stream once", e.eos, 1);
    CHECK_INT("embedded: idle at the end", fd_readable(lfd), 0);
    eventq_chan_free(s.ch);
    closep(p2);

    /* nested in another eventq loop: an fd source on the inner loop's fd */
    struct eventq_loop *outer;
    struct nested n = { lp, 0, 0 };
    struct eventq_source *oh;
    struct emb e2 = { 0 };
    eventq_chan *ch2;
    REQUIRE("loop_new", eventq_loop_new(&outer) == 0);
    REQUIRE("chan_new", eventq_chan_new(NULL, &ch2) == 0);
    eventq_source_free(h);
    REQUIRE("add_chan", eventq_loop_add_chan(lp, ch2, emb_cb, &e2, NULL, &h) == 0);
    REQUIRE("add_fd", eventq_loop_add_fd(outer, lfd, EVENTQ_IN, outer_cb, &n, NULL, &oh) == 0);
    CHECK_INT("nested: outer quiet while inner idle", eventq_loop_run_once(outer, 0), 0);
    for (int i = 0; i < 3; i++)
        eventq_chan_send(ch2, "n", 1, 0);
    CHECK_INT("nested: inner work wakes the outer loop", eventq_loop_run_once(outer, 0), 1);
    CHECK_U64("nested: the inner loop delivered", e2.msgs, 3);
    CHECK_INT("nested: outer quiet again", eventq_loop_run_once(outer, 0), 0);
    CHECK_INT("nested: no errors", n.bad, 0);
    eventq_source_free(oh);
    eventq_loop_free(outer);
    eventq_source_free(h);
    eventq_chan_free(ch2);
    eventq_chan_free(ch);
    eventq_loop_free(lp);
}

int main(void)
{
    sigset_t s;
    sigemptyset(&s);
    sigaddset(&s, SIGUSR1);
    sigaddset(&s, SIGUSR2);
    sigaddset(&s, SIGRTMIN + 1);
    /* blocked before any thread starts, so every thread inherits it */
    REQUIRE("block signals", pthread_sigmask(SIG_BLOCK, &s, NULL) == 0);
    check_init();
    test_timer_order();
    test_timer_periodic();
    test_timer_rearm_from_callback();
    test_posts_one_thread();
    test_post_destroy();
    test_posts_threads_and_stop();
    test_stop_in_callback();
    test_fd_level();
    test_fd_edge();
    test_fd_oneshot();
    test_fd_out_rdhup_set_events();
    test_fd_pri();
    test_negative_returns();
    test_signals();
    test_embedded();
    return check_done();
}
