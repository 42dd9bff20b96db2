/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * Source removal and destroy hooks through the C ABI (D8): a callback
 * removing itself; removing (or disabling) another source whose event is
 * already in the current epoll batch; removing every source, of every type,
 * from one callback; a post removing a source; freeing the loop with sources
 * present; removal from another thread while the loop runs; destroy(userdata)
 * exactly once on every path, counted.
 *
 * "In the current batch" is arranged, not hoped for: every source involved
 * is made ready (pipes written, a channel sent to, a timer polled until it
 * expired, a signal raised) before one eventq_loop_run_once(lp, 0).
 * No sleeps and no timing assertions.
 */
#include "check.h" /* includes <eventq.h> */

#include <stdatomic.h>
#include <sys/eventfd.h>

/* One source's userdata: what happened to it. */
struct ctx {
    atomic_int calls;
    atomic_int destroyed;
    int fd;                    /* for fd sources */
    struct eventq_source *h;   /* its handle, if added with out */
    struct group *g;
    int idx;
};

static void ctx_destroy(void *p)
{
    struct ctx *c = p;
    atomic_fetch_add(&c->destroyed, 1);
}

#define NSRC 8

struct group {
    struct eventq_loop *lp;
    struct ctx c[NSRC];
    int n;
    int total_calls;
    int mode;                  /* what the first callback does, see below */
    int removes_failed;
};

enum { REMOVE_OTHERS, REMOVE_ALL, DISABLE_OTHERS };

static void mkpipe(int p[2])
{
    REQUIRE("pipe2", pipe2(p, O_NONBLOCK | O_CLOEXEC) == 0);
}

static void fill1(int fd)
{
    REQUIRE("write", write(fd, "x", 1) == 1);
}

/* The first callback of the group to run acts on the others. */
static void group_act(struct ctx *me)
{
    struct group *g = me->g;
    atomic_fetch_add(&me->calls, 1);
    if (g->total_calls++ > 0)
        return;
    for (int i = 0; i < g->n; i++) {
        struct ctx *o = &g->c[i];
        if (o == me && g->mode != REMOVE_ALL)
            continue;
        int rc = g->mode == DISABLE_OTHERS ? eventq_source_set_enabled(o->h, 0)
                                           : eventq_source_remove(o->h);
        if (rc != 0)
            g->removes_failed++;
        /* another source's destroy runs inside remove; ours after we return */
        if (g->mode != DISABLE_OTHERS && o != me && atomic_load(&o->destroyed) != 1)
            g->removes_failed++;
    }
    if (g->mode == REMOVE_ALL && atomic_load(&me->destroyed) != 0)
        g->removes_failed++; /* must not run during our own call */
}

static int g_fd_cb(struct eventq_source *s, int fd, uint32_t rev, void *ud)
{
    (void)s;
    (void)fd;
    (void)rev;
    group_act(ud);
    return 0;
}

static int g_timer_cb(struct eventq_source *s, uint64_t n, void *ud)
{
    (void)s;
    (void)n;
    group_act(ud);
    return 0;
}

static int g_chan_cb(struct eventq_source *s, const void *d, size_t len, void *ud)
{
    (void)s;
    (void)d;
    (void)len;
    group_act(ud);
    return 0;
}

static int g_sig_cb(struct eventq_source *s, int signo, void *ud)
{
    (void)s;
    (void)signo;
    group_act(ud);
    return 0;
}

static void group_init(struct group *g, struct eventq_loop *lp, int mode)
{
    memset(g, 0, sizeof *g);
    g->lp = lp;
    g->mode = mode;
}

static struct ctx *group_new(struct group *g)
{
    struct ctx *c = &g->c[g->n];
    c->g = g;
    c->idx = g->n++;
    c->fd = -1;
    return c;
}

/* Drains a pending SIGUSR1 of this thread, if any (no wait). */
static void drain_sigusr1(void)
{
    sigset_t s;
    struct timespec zero = { 0, 0 };
    sigemptyset(&s);
    sigaddset(&s, SIGUSR1);
    while (sigtimedwait(&s, NULL, &zero) > 0)
        ;
}

/* Adds one source of every type to g, all ready before the next iteration:
 * two pipes, a timer, a channel with one message, SIGUSR1 raised. */
static void add_all_kinds(struct group *g, int p1[2], int p2[2], eventq_chan *ch)
{
    struct eventq_loop *lp = g->lp;
    struct ctx *c;

    /* the timer first, alone, so that a readable loop fd means "expired" */
    c = group_new(g);
    REQUIRE("add_timer", eventq_loop_add_timer(lp, 1, 0, g_timer_cb, c, ctx_destroy, &c->h) == 0);
    REQUIRE("poll loop fd", poll(&(struct pollfd){ eventq_loop_fd(lp), POLLIN, 0 }, 1, -1) == 1);

    c = group_new(g);
    c->fd = p1[0];
    REQUIRE("add_fd", eventq_loop_add_fd(lp, p1[0], EVENTQ_IN, g_fd_cb, c, ctx_destroy, &c->h) == 0);
    c = group_new(g);
    c->fd = p2[0];
    REQUIRE("add_fd", eventq_loop_add_fd(lp, p2[0], EVENTQ_IN, g_fd_cb, c, ctx_destroy, &c->h) == 0);
    c = group_new(g);
    REQUIRE("add_chan", eventq_loop_add_chan(lp, ch, g_chan_cb, c, ctx_destroy, &c->h) == 0);
    c = group_new(g);
    REQUIRE("add_signal",
            eventq_loop_add_signal(lp, SIGUSR1, g_sig_cb, c, ctx_destroy, &c->h) == 0);

    fill1(p1[1]);
    fill1(p2[1]);
    REQUIRE("send", eventq_chan_send(ch, "m", 1, 0) == 0);
    REQUIRE("raise", raise(SIGUSR1) == 0);
}

static int sum_calls(struct group *g)
{
    int n = 0;
    for (int i = 0; i < g->n; i++)
        n += atomic_load(&g->c[i].calls);
    return n;
}

/* Whichever of five ready sources of five kinds runs first removes the
 * others: none of them runs afterwards, in this batch or later. */
static void test_remove_others_in_batch(void)
{
    struct eventq_loop *lp;
    struct group g;
    int p1[2], p2[2];
    eventq_chan *ch;

    REQUIRE("loop_new", eventq_loop_new(&lp) == 0);
    REQUIRE("chan_new", eventq_chan_new(NULL, &ch) == 0);
    mkpipe(p1);
    mkpipe(p2);
    group_init(&g, lp, REMOVE_OTHERS);
    add_all_kinds(&g, p1, p2, ch);

    CHECK_INT("batch remove: five ready sources, one callback runs",
              eventq_loop_run_once(lp, 0), 1);
    CHECK_INT("batch remove: ...and only one in total", sum_calls(&g), 1);
    CHECK_INT("batch remove: every remove returned 0 and ran destroy at once",
              g.removes_failed, 0);
    int survivor = -1, destroyed = 0;
    for (int i = 0; i < g.n; i++) {
        if (atomic_load(&g.c[i].calls))
            survivor = i;
        destroyed += atomic_load(&g.c[i].destroyed);
    }
    CHECK_INT("batch remove: four destroyed, once each", destroyed, 4);
    int again = eventq_loop_run_once(lp, 0);
    CHECK_MSG("batch remove: the next iteration runs only the survivor (if still ready)",
              again <= 1 && sum_calls(&g) == 1 + again && g.c[survivor].calls == 1 + again,
              "again %d, calls %d", again, sum_calls(&g));
    for (int i = 0; i < g.n; i++)
        if (i != survivor)
            CHECK_INT("batch remove: removed handle gives -ESTALE",
                      eventq_source_remove(g.c[i].h), -ESTALE);
    for (int i = 0; i < g.n; i++)
        eventq_source_free(g.c[i].h);
    destroyed = 0;
    for (int i = 0; i < g.n; i++)
        destroyed += atomic_load(&g.c[i].destroyed) == 1;
    CHECK_INT("batch remove: after freeing the handles every destroy ran exactly once",
              destroyed, g.n);
    eventq_loop_free(lp);
    eventq_chan_free(ch);
    drain_sigusr1();
    close(p1[0]);
    close(p1[1]);
    close(p2[0]);
    close(p2[1]);
}

/* One callback removes every source, itself included. */
static void test_remove_all_from_one_callback(void)
{
    struct eventq_loop *lp;
    struct group g;
    int p1[2], p2[2];
    eventq_chan *ch;

    REQUIRE("loop_new", eventq_loop_new(&lp) == 0);
    REQUIRE("chan_new", eventq_chan_new(NULL, &ch) == 0);
    mkpipe(p1);
    mkpipe(p2);
    group_init(&g, lp, REMOVE_ALL);
    add_all_kinds(&g, p1, p2, ch);

    CHECK_INT("remove all: one callback runs", eventq_loop_run_once(lp, 0), 1);
    CHECK_INT("remove all: removes returned 0, destroy not during own call",
              g.removes_failed, 0);
    int destroyed = 0;
    for (int i = 0; i < g.n; i++)
        destroyed += atomic_load(&g.c[i].destroyed) == 1;
    CHECK_INT("remove all: every destroy ran once, the caller's right after its call",
              destroyed, g.n);
    CHECK_INT("remove all: nothing runs afterwards", eventq_loop_run_once(lp, 0), 0);
    CHECK_INT("remove all: the loop fd is idle although every fd is still ready",
              fd_readable(eventq_loop_fd(lp)), 0);
    for (int i = 0; i < g.n; i++)
        eventq_source_free(g.c[i].h);
    destroyed = 0;
    for (int i = 0; i < g.n; i++)
        destroyed += atomic_load(&g.c[i].destroyed);
    CHECK_INT("remove all: freeing the handles runs no destroy again", destroyed, g.n);
    eventq_loop_free(lp);
    eventq_chan_free(ch);
    drain_sigusr1();
    close(p1[0]);
    close(p1[1]);
    close(p2[0]);
    close(p2[1]);
}

/* Disabling another source whose event is in the batch: it does not run,
 * and runs again once re-enabled. */
static void test_disable_others_in_batch(void)
{
    struct eventq_loop *lp;
    struct group g;
    int p[3][2];

    REQUIRE("loop_new", eventq_loop_new(&lp) == 0);
    group_init(&g, lp, DISABLE_OTHERS);
    for (int i = 0; i < 3; i++) {
        mkpipe(p[i]);
        struct ctx *c = group_new(&g);
        c->fd = p[i][0];
        REQUIRE("add_fd",
                eventq_loop_add_fd(lp, p[i][0], EVENTQ_IN, g_fd_cb, c, ctx_destroy, &c->h) == 0);
        fill1(p[i][1]);
    }
    CHECK_INT("batch disable: three ready, one runs", eventq_loop_run_once(lp, 0), 1);
    CHECK_INT("batch disable: one call in total", sum_calls(&g), 1);
    CHECK_INT("batch disable: the disabled stay quiet", eventq_loop_run_once(lp, 0), 1);
    for (int i = 0; i < 3; i++)
        eventq_source_set_enabled(g.c[i].h, 1);
    CHECK_INT("batch disable: re-enabled, all three run", eventq_loop_run_once(lp, 0), 3);
    int destroyed = 0;
    for (int i = 0; i < 3; i++) {
        destroyed += atomic_load(&g.c[i].destroyed);
        eventq_source_free(g.c[i].h);
    }
    CHECK_INT("batch disable: disabling runs no destroy", destroyed, 0);
    destroyed = 0;
    for (int i = 0; i < 3; i++) {
        destroyed += atomic_load(&g.c[i].destroyed);
        close(p[i][0]);
        close(p[i][1]);
    }
    CHECK_INT("batch disable: eventq_source_free runs each destroy once", destroyed, 3);
    eventq_loop_free(lp);
}

/* A removes B and adds C on B's fd (likely B's slot) in the same callback:
 * B's event already fetched must not reach C in this iteration. */
struct swap {
    struct eventq_loop *lp;
    struct ctx c[3]; /* a, b, and the replacement */
    int swapped;
    int add_rc;
};

static int swap_cb(struct eventq_source *s, int fd, uint32_t rev, void *ud)
{
    struct ctx *me = ud;
    struct swap *w = (struct swap *)me->g;
    (void)s;
    (void)fd;
    (void)rev;
    atomic_fetch_add(&me->calls, 1);
    if (!w->swapped && me->idx < 2) {
        struct ctx *other = &w->c[1 - me->idx];
        w->swapped = 1;
        eventq_source_remove(other->h);
        w->c[2].fd = other->fd;
        w->add_rc = eventq_loop_add_fd(w->lp, other->fd, EVENTQ_IN, swap_cb, &w->c[2],
                                       ctx_destroy, &w->c[2].h);
    }
    return 0;
}

static void test_replace_in_batch(void)
{
    struct swap w;
    int p[2][2];

    memset(&w, 0, sizeof w);
    REQUIRE("loop_new", eventq_loop_new(&w.lp) == 0);
    for (int i = 0; i < 3; i++) {
        w.c[i].g = (struct group *)&w;
        w.c[i].idx = i;
    }
    for (int i = 0; i < 2; i++) {
        mkpipe(p[i]);
        w.c[i].fd = p[i][0];
        REQUIRE("add_fd", eventq_loop_add_fd(w.lp, p[i][0], EVENTQ_IN, swap_cb, &w.c[i],
                                             ctx_destroy, &w.c[i].h) == 0);
        fill1(p[i][1]);
    }
    CHECK_INT("replace: one callback in the iteration", eventq_loop_run_once(w.lp, 0), 1);
    CHECK_INT("replace: the new source on the removed one's fd was added", w.add_rc, 0);
    CHECK_INT("replace: the stale event did not reach the new source", w.c[2].calls, 0);
    CHECK_INT("replace: next iteration: the survivor and the new source",
              eventq_loop_run_once(w.lp, 0), 2);
    CHECK_INT("replace: the new source ran once", w.c[2].calls, 1);
    int destroyed = 0;
    for (int i = 0; i < 3; i++)
        destroyed += atomic_load(&w.c[i].destroyed);
    CHECK_INT("replace: only the removed source was destroyed", destroyed, 1);
    for (int i = 0; i < 3; i++)
        eventq_source_free(w.c[i].h);
    eventq_loop_free(w.lp);
    destroyed = 0;
    for (int i = 0; i < 3; i++)
        destroyed += atomic_load(&w.c[i].destroyed);
    CHECK_INT("replace: three destroys in all", destroyed, 3);
    for (int i = 0; i < 2; i++) {
        close(p[i][0]);
        close(p[i][1]);
    }
}

/* ---- a callback removing itself ---- */

struct self {
    atomic_int calls;
    atomic_int destroyed;
    int destroyed_in_cb;
    int rc_remove, rc_again, rc_error, rc_enable, rc_free_other;
    int use_free;  /* eventq_source_free on its out handle instead */
    struct eventq_source *h;
};

static void self_destroy(void *p)
{
    struct self *s = p;
    atomic_fetch_add(&s->destroyed, 1);
}

static int self_fd_cb(struct eventq_source *src, int fd, uint32_t rev, void *ud)
{
    struct self *s = ud;
    (void)fd;
    (void)rev;
    atomic_fetch_add(&s->calls, 1);
    if (s->use_free) {
        eventq_source_free(s->h); /* our out handle: removes and releases it */
        s->h = NULL;
        s->rc_remove = 0;
    } else {
        s->rc_remove = eventq_source_remove(src);
    }
    /* src (the source's own reference) stays valid until we return */
    s->rc_again = eventq_source_remove(src);
    s->rc_error = eventq_source_error(src);
    s->rc_enable = eventq_source_set_enabled(src, 1);
    s->destroyed_in_cb = atomic_load(&s->destroyed);
    return 0;
}

static int self_chan_cb(struct eventq_source *src, const void *d, size_t len, void *ud)
{
    struct self *s = ud;
    (void)d;
    (void)len;
    atomic_fetch_add(&s->calls, 1);
    s->rc_remove = eventq_source_remove(src);
    s->destroyed_in_cb = atomic_load(&s->destroyed);
    return 0;
}

static void test_self_removal(void)
{
    for (int use_free = 0; use_free < 2; use_free++) {
        struct eventq_loop *lp;
        struct self s;
        struct eventq_source *h;
        int p[2];
        const char *how = use_free ? "self free" : "self remove";
        char name[128];

        memset(&s, 0, sizeof s);
        s.use_free = use_free;
        REQUIRE("loop_new", eventq_loop_new(&lp) == 0);
        mkpipe(p);
        fill1(p[1]);
        REQUIRE("add_fd", eventq_loop_add_fd(lp, p[0], EVENTQ_IN, self_fd_cb, &s, self_destroy,
                                             &s.h) == 0);
        h = s.h;
        snprintf(name, sizeof name, "%s: one call", how);
        CHECK_INT(name, eventq_loop_run_once(lp, 0), 1);
        snprintf(name, sizeof name, "%s: remove from own callback returns 0", how);
        CHECK_INT(name, s.rc_remove, 0);
        snprintf(name, sizeof name, "%s: again from the callback: -ESTALE", how);
        CHECK_INT(name, s.rc_again, -ESTALE);
        snprintf(name, sizeof name, "%s: eventq_source_error after: -ESTALE", how);
        CHECK_INT(name, s.rc_error, -ESTALE);
        snprintf(name, sizeof name, "%s: set_enabled after: -ESTALE", how);
        CHECK_INT(name, s.rc_enable, -ESTALE);
        snprintf(name, sizeof name, "%s: destroy not during the callback", how);
        CHECK_INT(name, s.destroyed_in_cb, 0);
        snprintf(name, sizeof name, "%s: destroy ran once right after it", how);
        CHECK_INT(name, atomic_load(&s.destroyed), 1);
        snprintf(name, sizeof name, "%s: the fd is still readable, no more calls", how);
        CHECK_INT(name, eventq_loop_run_once(lp, 0), 0);
        if (!use_free) {
            CHECK_INT("self remove: the out handle gives -ESTALE", eventq_source_remove(h),
                      -ESTALE);
            CHECK_INT("self remove: set_events -ESTALE", eventq_source_set_events(h, EVENTQ_IN),
                      -ESTALE);
            eventq_source_free(h);
            CHECK_INT("self remove: freeing the handle runs no second destroy",
                      atomic_load(&s.destroyed), 1);
        }
        eventq_loop_free(lp);
        snprintf(name, sizeof name, "%s: loop free runs no second destroy", how);
        CHECK_INT(name, atomic_load(&s.destroyed), 1);
        close(p[0]);
        close(p[1]);
    }

    /* A channel source added without a handle removes itself through src on
     * its first message: no further message of the budget is delivered. */
    struct eventq_loop *lp;
    eventq_chan *ch;
    struct self s;
    memset(&s, 0, sizeof s);
    REQUIRE("loop_new", eventq_loop_new(&lp) == 0);
    REQUIRE("chan_new", eventq_chan_new(NULL, &ch) == 0);
    for (int i = 0; i < 20; i++)
        REQUIRE("send", eventq_chan_send(ch, "m", 1, 0) == 0);
    REQUIRE("add_chan", eventq_loop_add_chan(lp, ch, self_chan_cb, &s, self_destroy, NULL) == 0);
    CHECK_INT("self remove, chan, no handle: one message, not the budget",
              eventq_loop_run_once(lp, 0), 1);
    CHECK_INT("self remove, chan: remove returned 0", s.rc_remove, 0);
    CHECK_INT("self remove, chan: destroy after the call, once",
              s.destroyed_in_cb * 10 + atomic_load(&s.destroyed), 1);
    CHECK_INT("self remove, chan: nothing more", eventq_loop_run_once(lp, 0), 0);
    eventq_chan_stats st;
    eventq_chan_get_stats(ch, &st, sizeof st);
    CHECK_U64("self remove, chan: the other 19 stay queued", st.pending, 19);
    CHECK_INT("self remove, chan: the loop fd is idle", fd_readable(eventq_loop_fd(lp)), 0);
    eventq_loop_free(lp);
    CHECK_INT("self remove, chan: loop free runs no second destroy", atomic_load(&s.destroyed), 1);
    eventq_chan_free(ch);
}

/* ---- a post removing a source whose event is ready ---- */

struct post_rm {
    struct ctx c;
    atomic_int posted_ran;
    int calls_at_post;
    int rc;
};

static int post_rm_fd_cb(struct eventq_source *s, int fd, uint32_t rev, void *ud)
{
    struct post_rm *p = ud;
    (void)s;
    (void)fd;
    (void)rev;
    atomic_fetch_add(&p->c.calls, 1);
    return 0;
}

static void post_rm_destroy(void *ud)
{
    struct post_rm *p = ud;
    atomic_fetch_add(&p->c.destroyed, 1);
}

static void post_rm_fn(void *arg)
{
    struct post_rm *p = arg;
    p->calls_at_post = atomic_load(&p->c.calls);
    p->rc = eventq_source_remove(p->c.h);
    atomic_store(&p->posted_ran, 1);
}

static void test_post_removes_source(void)
{
    struct eventq_loop *lp;
    struct post_rm p;
    int fds[2];

    memset(&p, 0, sizeof p);
    REQUIRE("loop_new", eventq_loop_new(&lp) == 0);
    mkpipe(fds);
    fill1(fds[1]);
    REQUIRE("add_fd", eventq_loop_add_fd(lp, fds[0], EVENTQ_IN, post_rm_fd_cb, &p,
                                         post_rm_destroy, &p.c.h) == 0);
    REQUIRE("post", eventq_loop_post(lp, post_rm_fn, &p, NULL) == 0);
    int n = eventq_loop_run_once(lp, 0);
    CHECK_MSG("post removes: the post and at most the fd ran", n >= 1 && n <= 2, "n %d", n);
    CHECK_INT("post removes: the post ran", atomic_load(&p.posted_ran), 1);
    CHECK_INT("post removes: remove from a post returns 0", p.rc, 0);
    CHECK_INT("post removes: destroy ran in remove", atomic_load(&p.c.destroyed), 1);
    CHECK_INT("post removes: the fd callback did not run after the post",
              atomic_load(&p.c.calls), p.calls_at_post);
    CHECK_INT("post removes: nothing afterwards", eventq_loop_run_once(lp, 0), 0);
    eventq_source_free(p.c.h);
    eventq_loop_free(lp);
    CHECK_INT("post removes: destroy once in all", atomic_load(&p.c.destroyed), 1);
    close(fds[0]);
    close(fds[1]);
}

/* ---- freeing the loop with sources present ---- */

static int noop_fd_cb(struct eventq_source *s, int fd, uint32_t rev, void *ud)
{
    (void)s;
    (void)fd;
    (void)rev;
    struct ctx *c = ud;
    atomic_fetch_add(&c->calls, 1);
    return c->idx == 99 ? -EPROTO : 0;
}

static int noop_timer_cb(struct eventq_source *s, uint64_t n, void *ud)
{
    (void)n;
    return noop_fd_cb(s, -1, 0, ud);
}

static int noop_chan_cb(struct eventq_source *s, const void *d, size_t len, void *ud)
{
    (void)d;
    (void)len;
    return noop_fd_cb(s, -1, 0, ud);
}

static int noop_sig_cb(struct eventq_source *s, int signo, void *ud)
{
    (void)signo;
    return noop_fd_cb(s, -1, 0, ud);
}

static atomic_int never_ran;

static void post_never(void *arg)
{
    (void)arg;
    atomic_fetch_add(&never_ran, 1);
}

static void test_free_loop_with_sources(void)
{
    enum { N = 12 };
    struct eventq_loop *lp;
    struct ctx c[N];
    struct eventq_source *h[N] = { 0 };
    int p[4][2];
    eventq_chan *ch, *closed;

    memset(c, 0, sizeof c);
    REQUIRE("loop_new", eventq_loop_new(&lp) == 0);
    REQUIRE("chan_new", eventq_chan_new(NULL, &ch) == 0);
    REQUIRE("chan_new", eventq_chan_new(NULL, &closed) == 0);
    for (int i = 0; i < 4; i++)
        mkpipe(p[i]);
    int k = 0;
#define ADD(call)                      \
    do {                               \
        REQUIRE("add: " #call, (call) == 0); \
        k++;                           \
    } while (0)
    /* with handles */
    ADD(eventq_loop_add_fd(lp, p[0][0], EVENTQ_IN, noop_fd_cb, &c[k], ctx_destroy, &h[k]));
    ADD(eventq_loop_add_timer(lp, 1000000000ull, 0, noop_timer_cb, &c[k], ctx_destroy, &h[k]));
    ADD(eventq_loop_add_timer(lp, 1000000000ull, 1000000ull, noop_timer_cb, &c[k], ctx_destroy,
                              &h[k]));
    ADD(eventq_loop_add_chan(lp, ch, noop_chan_cb, &c[k], ctx_destroy, &h[k]));
    ADD(eventq_loop_add_signal(lp, SIGUSR2, noop_sig_cb, &c[k], ctx_destroy, &h[k]));
    /* without handles */
    ADD(eventq_loop_add_fd(lp, p[1][0], EVENTQ_IN, noop_fd_cb, &c[k], ctx_destroy, NULL));
    ADD(eventq_loop_add_chan(lp, closed, noop_chan_cb, &c[k], ctx_destroy, NULL));
    /* a disabled one (k = 7) */
    REQUIRE("add", eventq_loop_add_fd(lp, p[2][0], EVENTQ_IN, noop_fd_cb, &c[k], ctx_destroy,
                                      &h[k]) == 0);
    ADD(eventq_source_set_enabled(h[k], 0));
    /* one disabled by its own failure (k = 8) */
    c[k].idx = 99;
    ADD(eventq_loop_add_fd(lp, p[3][0], EVENTQ_IN, noop_fd_cb, &c[k], ctx_destroy, &h[k]));
    /* a removed one, destroyed already (k = 9) */
    REQUIRE("add", eventq_loop_add_fd(lp, p[3][1], EVENTQ_OUT, noop_fd_cb, &c[k], ctx_destroy,
                                      &h[k]) == 0);
    ADD(eventq_source_remove(h[k]));
    /* a one-shot timer that fires at once (k = 10) */
    ADD(eventq_loop_add_timer(lp, 1, 0, noop_timer_cb, &c[k], ctx_destroy, &h[k]));
    /* an ONESHOT fd that fires once (k = 11) */
    ADD(eventq_loop_add_fd(lp, p[2][1], EVENTQ_OUT | EVENTQ_ONESHOT, noop_fd_cb, &c[k],
                           ctx_destroy, &h[k]));
#undef ADD
    REQUIRE("count", k == N);

    fill1(p[3][1]);
    eventq_chan_close(closed);
    /* run until the failing source, the closed channel's end of stream, the
     * one-shot timer and the ONESHOT fd have had their call */
    while (atomic_load(&c[6].calls) == 0 || atomic_load(&c[8].calls) == 0 ||
           atomic_load(&c[10].calls) == 0 || atomic_load(&c[11].calls) == 0)
        REQUIRE("run_once", eventq_loop_run_once(lp, EVENTQ_FOREVER) >= 0);
    CHECK_INT("free loop: then every source is quiet", eventq_loop_run_once(lp, 0), 0);
    CHECK_INT("free loop: the failing source was disabled", eventq_source_error(h[8]), -EPROTO);
    for (int i = 0; i < 5; i++)
        REQUIRE("post", eventq_loop_post(lp, post_never, NULL, NULL) == 0);

    int before = 0;
    for (int i = 0; i < N; i++)
        before += atomic_load(&c[i].destroyed);
    CHECK_INT("free loop: only the removed source was destroyed before", before, 1);
    eventq_loop_free(lp);
    int once = 0;
    for (int i = 0; i < N; i++)
        once += atomic_load(&c[i].destroyed) == 1;
    CHECK_INT("free loop: every destroy ran exactly once (12 sources)", once, N);
    CHECK_INT("free loop: pending posts never ran", atomic_load(&never_ran), 0);

    int stale = 0;
    for (int i = 0; i < N; i++) {
        if (!h[i])
            continue;
        stale += eventq_source_remove(h[i]) == -ESTALE;
        stale += eventq_source_set_enabled(h[i], 1) == -ESTALE;
        stale += eventq_source_error(h[i]) == -ESTALE;
        stale += eventq_source_set_events(h[i], EVENTQ_IN) == -ESTALE;
        stale += eventq_source_set_timer(h[i], 1, 0) == -ESTALE;
        stale += eventq_source_set_budget(h[i], 5) == -ESTALE;
    }
    CHECK_INT("free loop: every call on every handle gives -ESTALE", stale, 6 * 10);
    for (int i = 0; i < N; i++)
        eventq_source_free(h[i]);
    once = 0;
    for (int i = 0; i < N; i++)
        once += atomic_load(&c[i].destroyed) == 1;
    CHECK_INT("free loop: freeing handles afterwards runs no destroy again", once, N);
    eventq_chan_free(ch);
    eventq_chan_free(closed);
    for (int i = 0; i < 4; i++) {
        close(p[i][0]);
        close(p[i][1]);
    }
}

/* ---- removal from another thread while the loop runs ---- */

struct race {
    struct eventq_loop *lp;
    atomic_int calls;
    atomic_int in_cb;
    atomic_int removed;    /* set after remove returned */
    atomic_int after;      /* calls that started after that */
    atomic_int destroyed;
    int wake;              /* eventfd: "the callback ran N times" */
    int wake_at;
    pthread_t loop_th;
    int loop_rc;
};

static void race_spin(void)
{
    for (volatile int i = 0; i < 2000; i++)
        ;
}

static int race_fd_cb(struct eventq_source *s, int fd, uint32_t rev, void *ud)
{
    struct race *r = ud;
    (void)s;
    (void)fd;
    (void)rev;
    atomic_store(&r->in_cb, 1);
    if (atomic_load(&r->removed))
        atomic_fetch_add(&r->after, 1);
    race_spin(); /* widen the window in which remove must wait */
    if (atomic_fetch_add(&r->calls, 1) + 1 == r->wake_at) {
        uint64_t one = 1;
        (void)!write(r->wake, &one, sizeof one);
    }
    atomic_store(&r->in_cb, 0);
    return 0;
}

static int race_chan_cb(struct eventq_source *s, const void *d, size_t len, void *ud)
{
    (void)d;
    (void)len;
    return race_fd_cb(s, -1, 0, ud);
}

static void race_destroy(void *ud)
{
    struct race *r = ud;
    atomic_fetch_add(&r->destroyed, 1);
}

static void *race_loop(void *arg)
{
    struct race *r = arg;
    r->loop_rc = eventq_loop_run(r->lp);
    return NULL;
}

static void wait_efd(int fd)
{
    uint64_t v;
    ssize_t n;
    struct pollfd p = { fd, POLLIN, 0 };
    do {
        poll(&p, 1, -1);
        n = read(fd, &v, sizeof v);
    } while (n != sizeof v);
}

static void post_wake(void *arg)
{
    uint64_t one = 1;
    (void)!write(*(int *)arg, &one, sizeof one);
}

/* Runs one full loop iteration after now: a post that wakes us, twice. */
static void sync_loop(struct eventq_loop *lp, int *efd)
{
    for (int i = 0; i < 2; i++) {
        REQUIRE("post", eventq_loop_post(lp, post_wake, efd, NULL) == 0);
        wait_efd(*efd);
    }
}

struct flood {
    eventq_chan *ch;
    atomic_int stop;
};

static void *flood_main(void *arg)
{
    struct flood *f = arg;
    while (!atomic_load(&f->stop))
        if (eventq_chan_send(f->ch, "f", 1, 1000000) == -EPIPE)
            break;
    return NULL;
}

static void test_remove_from_other_thread(void)
{
    enum { ROUNDS = 300 };
    struct race r;
    int p[2], efd;
    eventq_chan *ch;
    struct flood fl;
    pthread_t flood_th;

    memset(&r, 0, sizeof r);
    REQUIRE("loop_new", eventq_loop_new(&r.lp) == 0);
    REQUIRE("chan_new", eventq_chan_new(NULL, &ch) == 0);
    r.wake = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    REQUIRE("eventfd", r.wake >= 0 && efd >= 0);
    mkpipe(p);
    fill1(p[1]); /* always readable: the callback runs every iteration */
    fl.ch = eventq_chan_clone(ch);
    atomic_store(&fl.stop, 0);
    REQUIRE("pthread_create", pthread_create(&flood_th, NULL, flood_main, &fl) == 0);
    REQUIRE("pthread_create", pthread_create(&r.loop_th, NULL, race_loop, &r) == 0);

    int bad_rc = 0, destroy_late = 0, still_in_cb = 0, after = 0;
    for (int round = 0; round < ROUNDS; round++) {
        struct eventq_source *h;
        int use_chan = round % 2, use_free = (round / 2) % 2;
        atomic_store(&r.calls, 0);
        atomic_store(&r.removed, 0);
        atomic_store(&r.destroyed, 0);
        r.wake_at = 3;
        int rc = use_chan
                     ? eventq_loop_add_chan(r.lp, ch, race_chan_cb, &r, race_destroy, &h)
                     : eventq_loop_add_fd(r.lp, p[0], EVENTQ_IN, race_fd_cb, &r, race_destroy, &h);
        REQUIRE("add while running", rc == 0);
        wait_efd(r.wake); /* it has run 3 times: it is running now or about to */
        if (use_free) {
            eventq_source_free(h);
            rc = 0;
        } else {
            rc = eventq_source_remove(h);
        }
        bad_rc += rc != 0;
        still_in_cb += atomic_load(&r.in_cb);  /* remove waited for the callback */
        destroy_late += atomic_load(&r.destroyed) != 1; /* destroy ran before return */
        atomic_store(&r.removed, 1);
        sync_loop(r.lp, &efd);
        after += atomic_load(&r.after);
        atomic_store(&r.after, 0);
        if (!use_free)
            eventq_source_free(h);
    }
    CHECK_INT("remove from thread: every remove returned 0", bad_rc, 0);
    CHECK_INT("remove from thread: remove returned only after the callback did", still_in_cb, 0);
    CHECK_INT("remove from thread: destroy ran once before remove returned", destroy_late, 0);
    CHECK_INT("remove from thread: the callback never ran after remove returned", after, 0);

    eventq_loop_stop(r.lp);
    pthread_join(r.loop_th, NULL);
    CHECK_INT("remove from thread: run returned 0", r.loop_rc, 0);
    atomic_store(&fl.stop, 1);
    eventq_chan_close(ch);
    pthread_join(flood_th, NULL);
    eventq_chan_free(fl.ch);
    eventq_chan_free(ch);
    eventq_loop_free(r.lp);
    close(p[0]);
    close(p[1]);
    close(r.wake);
    close(efd);
}

/* ---- destroy hooks may call into the loop: no library lock is held ---- */

struct reentrant_destroy {
    struct eventq_loop *lp;
    struct eventq_source *other;  /* a live source of the same loop */
    struct eventq_source *self;   /* its own handle, freed by destroy */
    int rc_enable, rc_post;
    int ran;
    pthread_t thread;
};

static void post_nothing(void *arg)
{
    (void)arg;
}

static void reentrant_destroy_fn(void *ud)
{
    struct reentrant_destroy *r = ud;
    r->ran++;
    r->thread = pthread_self();
    r->rc_enable = eventq_source_set_enabled(r->other, 1);
    r->rc_post = r->lp ? eventq_loop_post(r->lp, post_nothing, NULL, NULL) : 0;
    if (r->self) {
        eventq_source_free(r->self); /* userdata owns the handle */
        r->self = NULL;
    }
}

static int remove_self_cb(struct eventq_source *src, int fd, uint32_t rev, void *ud)
{
    (void)fd;
    (void)rev;
    (void)ud;
    eventq_source_remove(src);
    return 0;
}

static void test_destroy_calls_into_the_loop(void)
{
    struct eventq_loop *lp;
    struct eventq_source *other;
    struct reentrant_destroy r;
    int p[2];
    char name[128];

    REQUIRE("loop_new", eventq_loop_new(&lp) == 0);
    mkpipe(p);
    fill1(p[1]);
    REQUIRE("add_timer", eventq_loop_add_timer(lp, 1000000000ull, 0, noop_timer_cb,
                                               &(struct ctx){ 0 }, NULL, &other) == 0);
    struct {
        const char *what;
        int want;
    } fails[] = { { "failed add (epoll: EBADF)", -EBADF },
                  { "failed add (bad flags)", -EINVAL },
                  { "failed add (signal busy)", -EBUSY } };
    REQUIRE("add_signal", eventq_loop_add_signal(lp, SIGUSR1, noop_sig_cb, &(struct ctx){ 0 },
                                                 NULL, NULL) == 0);
    for (int i = 0; i < 3; i++) {
        memset(&r, 0, sizeof r);
        r.lp = lp;
        r.other = other;
        int rc = i == 0   ? eventq_loop_add_fd(lp, 1 << 20, EVENTQ_IN, remove_self_cb, &r,
                                               reentrant_destroy_fn, NULL)
                 : i == 1 ? eventq_loop_add_fd(lp, p[0], EVENTQ_IN | 0x40u, remove_self_cb, &r,
                                               reentrant_destroy_fn, NULL)
                          : eventq_loop_add_signal(lp, SIGUSR1, noop_sig_cb, &r,
                                                   reentrant_destroy_fn, NULL);
        snprintf(name, sizeof name, "destroy of a %s may call into the loop", fails[i].what);
        CHECK_MSG(name, rc == fails[i].want && r.ran == 1 && r.rc_enable == 0 && r.rc_post == 0,
                  "rc %d, ran %d, set_enabled %d, post %d", rc, r.ran, r.rc_enable, r.rc_post);
    }

    /* removed from this thread: destroy runs here, before remove returns,
     * and may free the handle it owns */
    memset(&r, 0, sizeof r);
    r.lp = lp;
    r.other = other;
    REQUIRE("add_fd", eventq_loop_add_fd(lp, p[0], EVENTQ_IN, remove_self_cb, &r,
                                         reentrant_destroy_fn, &r.self) == 0);
    struct eventq_source *h = r.self;
    CHECK_INT("destroy on remove: remove returns 0", eventq_source_remove(h), 0);
    CHECK_MSG("destroy on remove: ran once, on the removing thread, calls into the loop work",
              r.ran == 1 && pthread_equal(r.thread, pthread_self()) && r.rc_enable == 0 &&
                  r.rc_post == 0 && r.self == NULL,
              "ran %d, set_enabled %d, post %d", r.ran, r.rc_enable, r.rc_post);

    /* removed by its own callback: destroy runs after it, lock-free */
    memset(&r, 0, sizeof r);
    r.lp = lp;
    r.other = other;
    while (eventq_loop_run_once(lp, 0) > 0) /* the posts the destroys made */
        ;
    REQUIRE("add_fd", eventq_loop_add_fd(lp, p[0], EVENTQ_IN, remove_self_cb, &r,
                                         reentrant_destroy_fn, &r.self) == 0);
    CHECK_INT("destroy after self-removal: one call", eventq_loop_run_once(lp, 0), 1);
    CHECK_MSG("destroy after self-removal: ran once, calls into the loop work",
              r.ran == 1 && r.rc_enable == 0 && r.rc_post == 0 && r.self == NULL,
              "ran %d, set_enabled %d, post %d", r.ran, r.rc_enable, r.rc_post);
    while (eventq_loop_run_once(lp, 0) > 0)
        ;

    /* freed with its loop: calls on other handles give -ESTALE, no crash */
    struct reentrant_destroy r2;
    memset(&r, 0, sizeof r);
    memset(&r2, 0, sizeof r2);
    r.other = r2.other = other;
    REQUIRE("add_fd", eventq_loop_add_fd(lp, p[0], EVENTQ_IN, remove_self_cb, &r2,
                                         reentrant_destroy_fn, NULL) == 0);
    REQUIRE("add_fd", eventq_loop_add_fd(lp, p[1], EVENTQ_OUT, remove_self_cb, &r,
                                         reentrant_destroy_fn, &r.self) == 0);
    eventq_loop_free(lp);
    CHECK_MSG("destroy during loop free: ran, other handles give -ESTALE, own handle freed",
              r.ran == 1 && r2.ran == 1 && r.rc_enable == -ESTALE && r2.rc_enable == -ESTALE &&
                  r.self == NULL,
              "ran %d/%d, set_enabled %d/%d", r.ran, r2.ran, r.rc_enable, r2.rc_enable);
    eventq_source_free(other);
    close(p[0]);
    close(p[1]);
}

int main(void)
{
    sigset_t s;
    sigemptyset(&s);
    sigaddset(&s, SIGUSR1);
    sigaddset(&s, SIGUSR2);
    REQUIRE("block signals", pthread_sigmask(SIG_BLOCK, &s, NULL) == 0);
    check_init();
    test_self_removal();
    test_remove_others_in_batch();
    test_remove_all_from_one_callback();
    test_disable_others_in_batch();
    test_replace_in_batch();
    test_post_removes_source();
    test_free_loop_with_sources();
    test_destroy_calls_into_the_loop();
    test_remove_from_other_thread();
    return check_done();
}
