/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * Bad inputs to the loop's C ABI, with their codes: NULL loop, source,
 * callback or channel to every function; bad fds (-EBADF, -EPERM, -EEXIST);
 * unknown or missing event flags (-EINVAL); bad timeouts; a removed source
 * used again and a source whose loop was freed (-ESTALE); set_budget 0,
 * set_timer on a non-timer, set_events on a non-fd source; uncatchable or
 * out-of-range signals (-EINVAL) and a second source for one signal (-EBUSY);
 * free(NULL) no-ops. On every failed add: destroy(userdata) ran exactly once
 * before the call returned, the callback never runs, and *out is untouched.
 *
 * A case that fails because of a known library bug is named "BUG: ...".
 */
#include "check.h" /* includes <eventq.h> */

#include <stdatomic.h>

static atomic_int destroyed;
static atomic_int cb_ran;

static void destroy_count(void *ud)
{
    (void)ud;
    atomic_fetch_add(&destroyed, 1);
}

static int fd_cb(struct eventq_source *s, int fd, uint32_t rev, void *ud)
{
    (void)s;
    (void)fd;
    (void)rev;
    (void)ud;
    atomic_fetch_add(&cb_ran, 1);
    return 0;
}

static int timer_cb(struct eventq_source *s, uint64_t n, void *ud)
{
    (void)s;
    (void)n;
    (void)ud;
    atomic_fetch_add(&cb_ran, 1);
    return 0;
}

static int chan_cb(struct eventq_source *s, const void *d, size_t len, void *ud)
{
    (void)s;
    (void)d;
    (void)len;
    (void)ud;
    atomic_fetch_add(&cb_ran, 1);
    return 0;
}

static int sig_cb(struct eventq_source *s, int signo, void *ud)
{
    (void)s;
    (void)signo;
    (void)ud;
    atomic_fetch_add(&cb_ran, 1);
    return 0;
}

static void post_fn(void *arg)
{
    (void)arg;
    atomic_fetch_add(&cb_ran, 1);
}

#define SENTINEL ((struct eventq_source *)0x5a5a5a5a)

/* A failed add: the code, destroy exactly once before return, *out intact. */
#define CHECK_ADD_FAILS(name, call_with_out, want)                                  \
    do {                                                                            \
        struct eventq_source *out = SENTINEL;                                      \
        atomic_store(&destroyed, 0);                                               \
        int rc_ = (call_with_out);                                                 \
        int d_ = atomic_load(&destroyed);                                          \
        CHECK_MSG(name, rc_ == (want) && d_ == 1 && out == SENTINEL,               \
                  "rc %d (want %d), destroy ran %d times before return (want 1), " \
                  "out %s",                                                         \
                  rc_, (want), d_, out == SENTINEL ? "untouched" : "written");     \
    } while (0)

static void test_null_args(void)
{
    struct eventq_loop *lp;
    eventq_chan *ch;
    int p[2];

    REQUIRE("loop_new", eventq_loop_new(&lp) == 0);
    REQUIRE("chan_new", eventq_chan_new(NULL, &ch) == 0);
    REQUIRE("pipe2", pipe2(p, O_NONBLOCK | O_CLOEXEC) == 0);
    REQUIRE("write", write(p[1], "x", 1) == 1);

    CHECK_INT("loop_new(NULL): -EINVAL", eventq_loop_new(NULL), -EINVAL);
    CHECK_INT("loop_fd(NULL): -EINVAL", eventq_loop_fd(NULL), -EINVAL);
    CHECK_INT("loop_run(NULL): -EINVAL", eventq_loop_run(NULL), -EINVAL);
    CHECK_INT("loop_run_once(NULL): -EINVAL", eventq_loop_run_once(NULL, 0), -EINVAL);
    CHECK_INT("loop_stop(NULL): -EINVAL", eventq_loop_stop(NULL), -EINVAL);
    CHECK_INT("loop_post(NULL loop): -EINVAL", eventq_loop_post(NULL, post_fn, NULL, NULL), -EINVAL);
    CHECK_INT("loop_post(NULL fn): -EINVAL", eventq_loop_post(lp, NULL, NULL, NULL), -EINVAL);

    CHECK_ADD_FAILS("add_fd(NULL loop)",
                    eventq_loop_add_fd(NULL, p[0], EVENTQ_IN, fd_cb, NULL, destroy_count, &out),
                    -EINVAL);
    CHECK_ADD_FAILS("add_fd(NULL cb)",
                    eventq_loop_add_fd(lp, p[0], EVENTQ_IN, NULL, NULL, destroy_count, &out),
                    -EINVAL);
    CHECK_ADD_FAILS("add_timer(NULL loop)",
                    eventq_loop_add_timer(NULL, 1, 0, timer_cb, NULL, destroy_count, &out),
                    -EINVAL);
    CHECK_ADD_FAILS("add_timer(NULL cb)",
                    eventq_loop_add_timer(lp, 1, 0, NULL, NULL, destroy_count, &out), -EINVAL);
    CHECK_ADD_FAILS("add_chan(NULL loop)",
                    eventq_loop_add_chan(NULL, ch, chan_cb, NULL, destroy_count, &out), -EINVAL);
    CHECK_ADD_FAILS("add_chan(NULL chan)",
                    eventq_loop_add_chan(lp, NULL, chan_cb, NULL, destroy_count, &out), -EINVAL);
    CHECK_ADD_FAILS("add_chan(NULL cb)",
                    eventq_loop_add_chan(lp, ch, NULL, NULL, destroy_count, &out), -EINVAL);
    CHECK_ADD_FAILS("add_signal(NULL loop)",
                    eventq_loop_add_signal(NULL, SIGUSR1, sig_cb, NULL, destroy_count, &out),
                    -EINVAL);
    CHECK_ADD_FAILS("add_signal(NULL cb)",
                    eventq_loop_add_signal(lp, SIGUSR1, NULL, NULL, destroy_count, &out),
                    -EINVAL);

    CHECK_INT("source_remove(NULL): -EINVAL", eventq_source_remove(NULL), -EINVAL);
    CHECK_INT("source_set_enabled(NULL): -EINVAL", eventq_source_set_enabled(NULL, 1), -EINVAL);
    CHECK_INT("source_set_events(NULL): -EINVAL", eventq_source_set_events(NULL, EVENTQ_IN),
              -EINVAL);
    CHECK_INT("source_set_timer(NULL): -EINVAL", eventq_source_set_timer(NULL, 1, 0), -EINVAL);
    CHECK_INT("source_set_budget(NULL): -EINVAL", eventq_source_set_budget(NULL, 1), -EINVAL);
    CHECK_INT("source_error(NULL): -EINVAL", eventq_source_error(NULL), -EINVAL);
    eventq_loop_free(NULL);
    eventq_source_free(NULL);
    CHECK("loop_free(NULL), source_free(NULL): no-ops", 1);

    /* a NULL destroy with a failing add is fine too */
    CHECK_INT("add_fd(NULL cb, NULL destroy): -EINVAL",
              eventq_loop_add_fd(lp, p[0], EVENTQ_IN, NULL, NULL, NULL, NULL), -EINVAL);

    CHECK_INT("no callback of a failed add ever runs", eventq_loop_run_once(lp, 0), 0);
    CHECK_INT("...counted", atomic_load(&cb_ran), 0);
    eventq_loop_free(lp);
    eventq_chan_free(ch);
    close(p[0]);
    close(p[1]);
}

static void test_bad_fds_and_flags(void)
{
    struct eventq_loop *lp;
    struct eventq_source *h;
    eventq_chan *ch;
    int p[2], closed_fd, file_fd;
    char path[] = "/tmp/eventq-loop-errors-XXXXXX";

    REQUIRE("loop_new", eventq_loop_new(&lp) == 0);
    REQUIRE("chan_new", eventq_chan_new(NULL, &ch) == 0);
    REQUIRE("pipe2", pipe2(p, O_NONBLOCK | O_CLOEXEC) == 0);
    REQUIRE("write", write(p[1], "x", 1) == 1);
    file_fd = mkstemp(path);
    REQUIRE("mkstemp", file_fd >= 0);
    unlink(path);
    closed_fd = dup(p[0]); /* a number no fd has (single-threaded here) */
    REQUIRE("dup", closed_fd >= 0);
    close(closed_fd);

    CHECK_ADD_FAILS("add_fd(-1): -EBADF",
                    eventq_loop_add_fd(lp, -1, EVENTQ_IN, fd_cb, NULL, destroy_count, &out),
                    -EBADF);
    CHECK_ADD_FAILS("add_fd(INT_MIN): -EBADF",
                    eventq_loop_add_fd(lp, -2147483647 - 1, EVENTQ_IN, fd_cb, NULL,
                                       destroy_count, &out),
                    -EBADF);
    CHECK_ADD_FAILS("add_fd(a closed fd): -EBADF",
                    eventq_loop_add_fd(lp, closed_fd, EVENTQ_IN, fd_cb, NULL, destroy_count,
                                       &out),
                    -EBADF);
    CHECK_ADD_FAILS("add_fd(a regular file): -EPERM",
                    eventq_loop_add_fd(lp, file_fd, EVENTQ_IN, fd_cb, NULL, destroy_count, &out),
                    -EPERM);

    REQUIRE("add_fd", eventq_loop_add_fd(lp, p[0], EVENTQ_IN, fd_cb, NULL, NULL, &h) == 0);
    CHECK_ADD_FAILS("add_fd(an fd already watched): -EEXIST",
                    eventq_loop_add_fd(lp, p[0], EVENTQ_OUT, fd_cb, NULL, destroy_count, &out),
                    -EEXIST);

    static const uint32_t unknown[] = { EVENTQ_IN | 0x40u /* EPOLLRDNORM */,
                                        EVENTQ_IN | (1u << 28) /* EPOLLEXCLUSIVE */,
                                        EVENTQ_IN | (1u << 29) /* EPOLLWAKEUP */,
                                        EVENTQ_OUT | 0x400u /* EPOLLMSG */, 0xffffffffu };
    for (size_t i = 0; i < sizeof unknown / sizeof unknown[0]; i++) {
        char name[96];
        snprintf(name, sizeof name, "add_fd(unknown flags %#x): -EINVAL", unknown[i]);
        CHECK_ADD_FAILS(name,
                        eventq_loop_add_fd(lp, p[1], unknown[i], fd_cb, NULL, destroy_count,
                                           &out),
                        -EINVAL);
        snprintf(name, sizeof name, "set_events(unknown flags %#x): -EINVAL", unknown[i]);
        CHECK_INT(name, eventq_source_set_events(h, unknown[i]), -EINVAL);
    }
    static const uint32_t none[] = { 0, EVENTQ_ERR, EVENTQ_HUP, EVENTQ_ERR | EVENTQ_HUP,
                                     EVENTQ_EDGE, EVENTQ_ONESHOT,
                                     EVENTQ_EDGE | EVENTQ_ONESHOT | EVENTQ_HUP };
    for (size_t i = 0; i < sizeof none / sizeof none[0]; i++) {
        char name[96];
        snprintf(name, sizeof name, "add_fd(no event asked, %#x): -EINVAL", none[i]);
        CHECK_ADD_FAILS(name,
                        eventq_loop_add_fd(lp, p[1], none[i], fd_cb, NULL, destroy_count, &out),
                        -EINVAL);
        snprintf(name, sizeof name, "set_events(no event asked, %#x): -EINVAL", none[i]);
        CHECK_INT(name, eventq_source_set_events(h, none[i]), -EINVAL);
    }
    CHECK_INT("after the failed set_events the source still watches IN",
              eventq_loop_run_once(lp, 0), 1);
    /* every flag alone (with IN) is accepted */
    static const uint32_t fine[] = { EVENTQ_IN, EVENTQ_PRI, EVENTQ_OUT, EVENTQ_RDHUP,
                                     EVENTQ_IN | EVENTQ_ERR | EVENTQ_HUP,
                                     EVENTQ_IN | EVENTQ_EDGE, EVENTQ_IN | EVENTQ_ONESHOT };
    int bad = 0;
    for (size_t i = 0; i < sizeof fine / sizeof fine[0]; i++)
        bad += eventq_source_set_events(h, fine[i]) != 0;
    CHECK_INT("set_events accepts every documented flag", bad, 0);

    /* the loop cannot watch its own fd (epoll refuses it) */
    CHECK_ADD_FAILS("add_fd(the loop's own fd): -EINVAL",
                    eventq_loop_add_fd(lp, eventq_loop_fd(lp), EVENTQ_IN, fd_cb, NULL,
                                       destroy_count, &out),
                    -EINVAL);

    CHECK_INT("run_once(timeout -2): -EINVAL", eventq_loop_run_once(lp, -2), -EINVAL);
    CHECK_INT("run_once(INT64_MIN): -EINVAL", eventq_loop_run_once(lp, INT64_MIN), -EINVAL);

    eventq_source_free(h);
    atomic_store(&cb_ran, 0);
    CHECK_INT("no callback of a failed add ever runs", eventq_loop_run_once(lp, 0), 0);
    CHECK_INT("...counted", atomic_load(&cb_ran), 0);
    eventq_loop_free(lp);
    eventq_chan_free(ch);
    close(file_fd);
    close(p[0]);
    close(p[1]);
}

static void test_wrong_kind(void)
{
    struct eventq_loop *lp;
    struct eventq_source *fd_src, *timer_src, *chan_src, *sig_src;
    eventq_chan *ch;
    int p[2];

    REQUIRE("loop_new", eventq_loop_new(&lp) == 0);
    REQUIRE("chan_new", eventq_chan_new(NULL, &ch) == 0);
    REQUIRE("pipe2", pipe2(p, O_NONBLOCK | O_CLOEXEC) == 0);
    REQUIRE("add", eventq_loop_add_fd(lp, p[0], EVENTQ_IN, fd_cb, NULL, NULL, &fd_src) == 0);
    REQUIRE("add", eventq_loop_add_timer(lp, 1000000000ull, 0, timer_cb, NULL, NULL, &timer_src) == 0);
    REQUIRE("add", eventq_loop_add_chan(lp, ch, chan_cb, NULL, NULL, &chan_src) == 0);
    REQUIRE("add", eventq_loop_add_signal(lp, SIGUSR1, sig_cb, NULL, NULL, &sig_src) == 0);

    CHECK_INT("set_budget(0): -EINVAL", eventq_source_set_budget(chan_src, 0), -EINVAL);
    CHECK_INT("set_budget(1): 0", eventq_source_set_budget(chan_src, 1), 0);
    CHECK_INT("set_budget(SIZE_MAX): 0", eventq_source_set_budget(chan_src, SIZE_MAX), 0);
    CHECK_INT("set_budget on an fd source: -EINVAL", eventq_source_set_budget(fd_src, 5), -EINVAL);
    CHECK_INT("set_budget on a timer: -EINVAL", eventq_source_set_budget(timer_src, 5), -EINVAL);
    CHECK_INT("set_budget on a signal source: -EINVAL", eventq_source_set_budget(sig_src, 5),
              -EINVAL);
    CHECK_INT("set_timer on an fd source: -EINVAL", eventq_source_set_timer(fd_src, 1, 0), -EINVAL);
    CHECK_INT("set_timer on a channel source: -EINVAL", eventq_source_set_timer(chan_src, 1, 0),
              -EINVAL);
    CHECK_INT("set_timer on a signal source: -EINVAL", eventq_source_set_timer(sig_src, 1, 0),
              -EINVAL);
    CHECK_INT("set_events on a timer: -EINVAL", eventq_source_set_events(timer_src, EVENTQ_IN),
              -EINVAL);
    CHECK_INT("set_events on a channel source: -EINVAL",
              eventq_source_set_events(chan_src, EVENTQ_IN), -EINVAL);
    CHECK_INT("set_events on a signal source: -EINVAL",
              eventq_source_set_events(sig_src, EVENTQ_IN), -EINVAL);
    CHECK_INT("set_timer on a timer: 0", eventq_source_set_timer(timer_src, 1000000000ull, 0), 0);
    CHECK_INT("set_events on an fd source: 0", eventq_source_set_events(fd_src, EVENTQ_OUT), 0);
    CHECK_INT("none of these ran a callback", eventq_loop_run_once(lp, 0), 0);

    /* signals */
    static const int bad_sigs[] = { SIGKILL, SIGSTOP, 0, -1, 65, 1000 };
    for (size_t i = 0; i < sizeof bad_sigs / sizeof bad_sigs[0]; i++) {
        char name[64];
        snprintf(name, sizeof name, "add_signal(%d): -EINVAL", bad_sigs[i]);
        CHECK_ADD_FAILS(name,
                        eventq_loop_add_signal(lp, bad_sigs[i], sig_cb, NULL, destroy_count, &out),
                        -EINVAL);
    }
    CHECK_ADD_FAILS("add_signal(SIGUSR1) twice: -EBUSY",
                    eventq_loop_add_signal(lp, SIGUSR1, sig_cb, NULL, destroy_count, &out),
                    -EBUSY);
    /* another loop may have its own source for the same signal */
    struct eventq_loop *lp2;
    REQUIRE("loop_new", eventq_loop_new(&lp2) == 0);
    CHECK_INT("add_signal(SIGUSR1) in another loop: 0",
              eventq_loop_add_signal(lp2, SIGUSR1, sig_cb, NULL, NULL, NULL), 0);
    eventq_loop_free(lp2);

    /* a second source for a channel already watched by this loop fails
     * (the header lists no code for it; see the report) and runs destroy */
    {
        struct eventq_source *out = SENTINEL;
        atomic_store(&destroyed, 0);
        int rc = eventq_loop_add_chan(lp, ch, chan_cb, NULL, destroy_count, &out);
        CHECK_MSG("add_chan(a channel this loop already watches) fails, destroy once, out intact",
                  rc < 0 && atomic_load(&destroyed) == 1 && out == SENTINEL,
                  "rc %d, destroy %d", rc, atomic_load(&destroyed));
        if (rc == 0)
            eventq_source_free(out);
    }

    eventq_source_free(fd_src);
    eventq_source_free(timer_src);
    eventq_source_free(chan_src);
    eventq_source_free(sig_src);
    eventq_loop_free(lp);
    eventq_chan_free(ch);
    close(p[0]);
    close(p[1]);
}

static void test_stale(void)
{
    struct eventq_loop *lp;
    struct eventq_source *h[4];
    eventq_chan *ch;
    int p[2];

    REQUIRE("loop_new", eventq_loop_new(&lp) == 0);
    REQUIRE("chan_new", eventq_chan_new(NULL, &ch) == 0);
    REQUIRE("pipe2", pipe2(p, O_NONBLOCK | O_CLOEXEC) == 0);
    atomic_store(&destroyed, 0);
    REQUIRE("add", eventq_loop_add_fd(lp, p[0], EVENTQ_IN, fd_cb, NULL, destroy_count, &h[0]) == 0);
    REQUIRE("add", eventq_loop_add_timer(lp, 1000000000ull, 0, timer_cb, NULL, destroy_count, &h[1]) == 0);
    REQUIRE("add", eventq_loop_add_chan(lp, ch, chan_cb, NULL, destroy_count, &h[2]) == 0);
    REQUIRE("add", eventq_loop_add_signal(lp, SIGUSR1, sig_cb, NULL, destroy_count, &h[3]) == 0);

    int bad = 0, rm = 0;
    for (int i = 0; i < 4; i++)
        rm += eventq_source_remove(h[i]) == 0;
    CHECK_INT("remove: 0 for each of four kinds", rm, 4);
    CHECK_INT("remove: each destroy ran once, before remove returned", atomic_load(&destroyed), 4);
    for (int i = 0; i < 4; i++) {
        bad += eventq_source_remove(h[i]) != -ESTALE;
        bad += eventq_source_set_enabled(h[i], 1) != -ESTALE;
        bad += eventq_source_set_enabled(h[i], 0) != -ESTALE;
        bad += eventq_source_error(h[i]) != -ESTALE;
    }
    bad += eventq_source_set_events(h[0], EVENTQ_IN) != -ESTALE;
    bad += eventq_source_set_timer(h[1], 1, 0) != -ESTALE;
    bad += eventq_source_set_budget(h[2], 3) != -ESTALE;
    CHECK_INT("a removed source used again: -ESTALE from every call", bad, 0);
    CHECK_INT("a removed source's destroy does not run again", atomic_load(&destroyed), 4);
    CHECK_INT("a removed fd may be added again", eventq_loop_add_fd(lp, p[0], EVENTQ_IN, fd_cb,
                                                                     NULL, NULL, NULL), 0);
    CHECK_INT("a removed channel may be added again",
              eventq_loop_add_chan(lp, ch, chan_cb, NULL, NULL, NULL), 0);
    for (int i = 0; i < 4; i++)
        eventq_source_free(h[i]);
    CHECK_INT("freeing removed handles runs no destroy", atomic_load(&destroyed), 4);

    /* handles of a freed loop */
    atomic_store(&destroyed, 0);
    REQUIRE("add", eventq_loop_add_timer(lp, 1000000000ull, 0, timer_cb, NULL, destroy_count, &h[0]) == 0);
    eventq_loop_free(lp);
    CHECK_INT("loop freed: destroy ran", atomic_load(&destroyed), 1);
    bad = 0;
    bad += eventq_source_remove(h[0]) != -ESTALE;
    bad += eventq_source_set_enabled(h[0], 1) != -ESTALE;
    bad += eventq_source_set_timer(h[0], 1, 0) != -ESTALE;
    bad += eventq_source_set_events(h[0], EVENTQ_IN) != -ESTALE;
    bad += eventq_source_set_budget(h[0], 1) != -ESTALE;
    bad += eventq_source_error(h[0]) != -ESTALE;
    CHECK_INT("a source whose loop was freed: -ESTALE from every call", bad, 0);
    eventq_source_free(h[0]);
    CHECK_INT("...and its free runs no second destroy", atomic_load(&destroyed), 1);
    eventq_chan_free(ch);
    close(p[0]);
    close(p[1]);
}

/* Two threads add a source for the same signal to one loop at once: one
 * must get -EBUSY ("-EBUSY if the signal already has a source in this loop";
 * adds are callable from any thread). Each round, two fresh threads start
 * together and add SIGUSR1 to the same 64 loops in the same order, so they
 * meet on many loops. With the check-then-insert race this fails in the
 * first round; without it, never. */
#define RACE_LOOPS 64
struct sig_race {
    struct eventq_loop *lps[RACE_LOOPS];
    atomic_int ready, go;
    int rc[2][RACE_LOOPS];
};

struct sig_racer {
    struct sig_race *race;
    int idx;
};

static void *sig_racer_main(void *arg)
{
    struct sig_racer *r = arg;
    struct sig_race *g = r->race;
    atomic_fetch_add(&g->ready, 1);
    while (!atomic_load(&g->go))
        ;
    for (int k = 0; k < RACE_LOOPS; k++)
        g->rc[r->idx][k] = eventq_loop_add_signal(g->lps[k], SIGUSR1, sig_cb, NULL,
                                                  destroy_count, NULL);
    return NULL;
}

static void test_signal_busy_race(void)
{
    enum { ROUNDS = 50 };
    static struct sig_race g;
    int both = 0, odd = 0, rounds = 0;

    atomic_store(&destroyed, 0);
    for (; rounds < ROUNDS && !both; rounds++) {
        pthread_t th[2];
        struct sig_racer r[2] = { { &g, 0 }, { &g, 1 } };
        for (int k = 0; k < RACE_LOOPS; k++)
            REQUIRE("loop_new", eventq_loop_new(&g.lps[k]) == 0);
        atomic_store(&g.ready, 0);
        atomic_store(&g.go, 0);
        for (int i = 0; i < 2; i++)
            REQUIRE("pthread_create", pthread_create(&th[i], NULL, sig_racer_main, &r[i]) == 0);
        while (atomic_load(&g.ready) < 2)
            sched_yield();
        atomic_store(&g.go, 1);
        for (int i = 0; i < 2; i++)
            pthread_join(th[i], NULL);
        for (int k = 0; k < RACE_LOOPS; k++) {
            int a = g.rc[0][k], b = g.rc[1][k];
            both += a == 0 && b == 0;
            odd += !((a == 0 && b == -EBUSY) || (a == -EBUSY && b == 0) || (a == 0 && b == 0));
            eventq_loop_free(g.lps[k]);
        }
    }
    CHECK_INT("concurrent add_signal: each loop got one 0 and one -EBUSY (or two 0)", odd, 0);
    CHECK_INT("concurrent add_signal: every destroy ran once", atomic_load(&destroyed),
              2 * RACE_LOOPS * rounds);
    CHECK_MSG("BUG: concurrent add_signal of one signal: exactly one succeeds (-EBUSY check races)",
              both == 0, "in %d of %d loops both adds returned 0: two SIGUSR1 sources in one loop",
              both, RACE_LOOPS * rounds);
}

/* Every code the loop returns has a description (the header: "eventq_strerror()
 * describes any of them"). */
static void test_strerror(void)
{
    static const int codes[] = { -EINVAL, -EBADF, -EPERM, -EEXIST, -EBUSY, -EAGAIN,
                                 -EMFILE, -ENFILE, -ENOMEM };
    int unknown = 0;
    for (size_t i = 0; i < sizeof codes / sizeof codes[0]; i++)
        unknown += strcmp(eventq_strerror(codes[i]), "unknown error") == 0;
    CHECK_INT("strerror describes the loop's codes", unknown, 0);
    CHECK_MSG("BUG: eventq_strerror(-ESTALE) describes it (the loop returns -ESTALE)",
              strcmp(eventq_strerror(-ESTALE), "unknown error") != 0, "got \"%s\"",
              eventq_strerror(-ESTALE));
}

int main(void)
{
    sigset_t s;
    sigemptyset(&s);
    sigaddset(&s, SIGUSR1);
    REQUIRE("block", pthread_sigmask(SIG_BLOCK, &s, NULL) == 0);
    check_init();
    test_null_args();
    test_bad_fds_and_flags();
    test_wrong_kind();
    test_stale();
    test_signal_busy_race();
    test_strerror();
    return check_done();
}
