/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * Fault: fd exhaustion at create. RLIMIT_NOFILE is lowered so that exactly
 * k more fds can be opened, for k = 0, 1, 2, ... until the call succeeds.
 * Each failing call must return -EMFILE and leave the set of open fds
 * exactly as it was (listed from /proc/self/fd before and after, with the
 * limit restored), run its destroy hook once and never its callback; the
 * object must work once created, and an existing channel or loop must keep
 * working with no fd left (sends, receives, polls, posts and channel sources
 * need no new fd).
 *
 *   eventq_chan_new        1 eventfd (receive)
 *   eventq_chan_send_fd    the send eventfd, on its first call only
 *   eventq_loop_new        an epoll fd, 3 eventfds (posts x2, stop)
 *   eventq_loop_add_timer  a timerfd
 *   eventq_loop_add_signal a signalfd
 */
#include "check.h" /* includes <eventq.h> */

#include <dirent.h>
#include <sys/resource.h>

#define MAX_FDS 4096

/* The open fds, sorted, into v (the directory's own fd excluded). */
static int list_fds(int *v, int max)
{
    DIR *d = opendir("/proc/self/fd");
    REQUIRE("opendir /proc/self/fd", d != NULL);
    int n = 0, self = dirfd(d);
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        int fd = atoi(e->d_name);
        if (fd != self && n < max)
            v[n++] = fd;
    }
    closedir(d);
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && v[j - 1] > v[j]; j--) {
            int t = v[j];
            v[j] = v[j - 1];
            v[j - 1] = t;
        }
    return n;
}

struct fdset {
    int n;
    int v[MAX_FDS];
};

static struct fdset before_set, after_set;

static void snapshot(struct fdset *s)
{
    s->n = list_fds(s->v, MAX_FDS);
}

static int same_fds(const struct fdset *a, const struct fdset *b)
{
    return a->n == b->n && memcmp(a->v, b->v, sizeof a->v[0] * (size_t)a->n) == 0;
}

static struct rlimit saved;

/* Lowers the soft limit so exactly k more fds can be opened: fds are
 * allocated lowest first, and only below the limit. */
static void allow_fds(int k)
{
    int fd = 0, free_seen = 0;
    for (;; fd++) {
        if (fcntl(fd, F_GETFD) == -1 && errno == EBADF) {
            if (free_seen == k)
                break;
            free_seen++;
        }
    }
    struct rlimit r = saved;
    r.rlim_cur = (rlim_t)fd;
    REQUIRE("setrlimit", setrlimit(RLIMIT_NOFILE, &r) == 0);
}

static void restore_fds(void)
{
    REQUIRE("setrlimit restore", setrlimit(RLIMIT_NOFILE, &saved) == 0);
}

/* ---- hooks ---- */

static int destroys, callbacks;

static void on_destroy(void *ud)
{
    (void)ud;
    destroys++;
}

static int on_timer(eventq_source *s, uint64_t n, void *ud)
{
    (void)s;
    (void)n;
    (void)ud;
    callbacks++;
    return 0;
}

static int on_signal(eventq_source *s, int signo, void *ud)
{
    (void)s;
    (void)signo;
    (void)ud;
    callbacks++;
    return 0;
}

static int on_chan(eventq_source *s, const void *d, size_t len, void *ud)
{
    (void)s;
    (void)d;
    (void)len;
    (void)ud;
    callbacks++;
    return 0;
}

static void on_post(void *arg)
{
    (void)arg;
    callbacks++;
}

static int sig_blocked(int signo)
{
    sigset_t cur;
    pthread_sigmask(SIG_BLOCK, NULL, &cur);
    return sigismember(&cur, signo);
}

/* ---- the cases ---- */

static void chan_new_case(void)
{
    int k, rc = -1;
    eventq_chan *ch = NULL;
    for (k = 0; k < 8; k++) {
        snapshot(&before_set);
        allow_fds(k);
        ch = (eventq_chan *)0x1;
        rc = eventq_chan_new(NULL, &ch);
        restore_fds();
        if (rc == 0)
            break;
        char what[128];
        snprintf(what, sizeof what, "eventq_chan_new with %d fd(s) left: -EMFILE", k);
        CHECK_INT(what, rc, -EMFILE);
        CHECK("... and *out untouched", ch == (eventq_chan *)0x1);
        snapshot(&after_set);
        snprintf(what, sizeof what, "eventq_chan_new with %d fd(s) left: no fd leaked", k);
        CHECK_MSG(what, same_fds(&before_set, &after_set), "%d open before, %d after",
                  before_set.n, after_set.n);
    }
    CHECK_INT("eventq_chan_new succeeds with 1 fd left", k, 1);
    REQUIRE("a channel", rc == 0);

    /* With no fd left, an existing channel works: nothing opens an fd. */
    snapshot(&before_set);
    allow_fds(0);
    uint8_t buf[8];
    size_t len;
    CHECK_INT("no fd left: send", eventq_chan_send(ch, "abc", 3, 0), 0);
    CHECK_INT("no fd left: recv fd readable", fd_readable(eventq_chan_recv_fd(ch)), 1);
    eventq_chan *c2 = eventq_chan_clone(ch);
    CHECK("no fd left: clone", c2 != NULL);
    CHECK_INT("no fd left: receive", eventq_chan_recv(c2, buf, sizeof buf, &len, 0), 0);
    CHECK("no fd left: the message whole", len == 3 && memcmp(buf, "abc", 3) == 0);
    CHECK_INT("no fd left: recv fd not readable", fd_readable(eventq_chan_recv_fd(ch)), 0);

    /* The send fd is made on first use: with no fd left that fails, leaks
     * nothing, and a later call (on any handle) makes it, at the level of
     * the channel's state then: full, so not readable. */
    CHECK_INT("no fd left: send fd -EMFILE", eventq_chan_send_fd(ch), -EMFILE);
    for (int i = 1; eventq_chan_send(ch, "x", 1, 0) == 0; i++)
        REQUIRE("fill within capacity", i <= EVENTQ_DEFAULT_CAPACITY);
    restore_fds();
    snapshot(&after_set);
    CHECK_MSG("... no fd leaked", same_fds(&before_set, &after_set), "%d open before, %d after",
              before_set.n, after_set.n);
    allow_fds(1);
    int sfd = eventq_chan_send_fd(c2);
    restore_fds();
    CHECK("one fd left: send fd made", sfd >= 0);
    CHECK_INT("... the same from every handle", eventq_chan_send_fd(ch), sfd);
    CHECK_INT("... not readable: the channel is full", fd_readable(sfd), 0);
    snapshot(&after_set);
    CHECK_MSG("... one more fd", after_set.n == before_set.n + 1, "%d open before, %d after",
              before_set.n, after_set.n);
    while (eventq_chan_recv(ch, buf, sizeof buf, &len, 0) == 0)
        ;
    CHECK_INT("drained: send fd readable", fd_readable(sfd), 1);
    eventq_chan_free(c2);
    snapshot(&before_set);
    eventq_chan_free(ch);
    snapshot(&after_set);
    CHECK_MSG("eventq_chan_free closes both eventfds", after_set.n == before_set.n - 2,
              "%d open before, %d after", before_set.n, after_set.n);
}

static void loop_new_case(void)
{
    int k, rc = -1;
    eventq_loop *lp = NULL;
    for (k = 0; k < 10; k++) {
        snapshot(&before_set);
        allow_fds(k);
        lp = (eventq_loop *)0x1;
        rc = eventq_loop_new(&lp);
        restore_fds();
        if (rc == 0)
            break;
        char what[128];
        snprintf(what, sizeof what, "eventq_loop_new with %d fd(s) left: -EMFILE", k);
        CHECK_INT(what, rc, -EMFILE);
        CHECK("... and *out untouched", lp == (eventq_loop *)0x1);
        snapshot(&after_set);
        snprintf(what, sizeof what, "eventq_loop_new with %d fd(s) left: no fd leaked", k);
        CHECK_MSG(what, same_fds(&before_set, &after_set), "%d open before, %d after",
                  before_set.n, after_set.n);
    }
    CHECK_INT("eventq_loop_new succeeds with 2 fds left (epoll, wake)", k, 2);
    REQUIRE("a loop", rc == 0);

    /* Timer source. */
    destroys = callbacks = 0;
    snapshot(&before_set);
    allow_fds(0);
    eventq_source *src = (eventq_source *)0x1;
    rc = eventq_loop_add_timer(lp, 0, 0, on_timer, NULL, on_destroy, &src);
    restore_fds();
    snapshot(&after_set);
    CHECK_INT("eventq_loop_add_timer with no fd left: -EMFILE", rc, -EMFILE);
    CHECK("... *out untouched", src == (eventq_source *)0x1);
    CHECK_INT("... destroy ran once", destroys, 1);
    CHECK_MSG("... no fd leaked", same_fds(&before_set, &after_set), "%d open before, %d after",
              before_set.n, after_set.n);
    CHECK_INT("... the loop has nothing to run", eventq_loop_run_once(lp, 0), 0);
    CHECK_INT("... its callback never ran", callbacks, 0);

    /* Signal source. */
    destroys = 0;
    int was_blocked = sig_blocked(SIGUSR2);
    snapshot(&before_set);
    allow_fds(0);
    rc = eventq_loop_add_signal(lp, SIGUSR2, on_signal, NULL, on_destroy, &src);
    restore_fds();
    snapshot(&after_set);
    CHECK_INT("eventq_loop_add_signal with no fd left: -EMFILE", rc, -EMFILE);
    CHECK("... *out untouched", src == (eventq_source *)0x1);
    CHECK_INT("... destroy ran once", destroys, 1);
    CHECK_MSG("... no fd leaked", same_fds(&before_set, &after_set), "%d open before, %d after",
              before_set.n, after_set.n);
    /* A failed add must not leave SIGUSR2 blocked: the signal would then be
     * neither handled nor read by any signalfd, only left pending. (A bug
     * found here, fixed in 06f4965.) */
    CHECK_MSG("a failed eventq_loop_add_signal (-EMFILE) leaves the calling thread's "
              "signal mask as it was",
              sig_blocked(SIGUSR2) == was_blocked, "SIGUSR2 %s before, %s after",
              was_blocked ? "blocked" : "not blocked",
              sig_blocked(SIGUSR2) ? "blocked" : "not blocked");
    /* Undo it for what follows. */
    sigset_t s;
    sigemptyset(&s);
    sigaddset(&s, SIGUSR2);
    if (!was_blocked)
        pthread_sigmask(SIG_UNBLOCK, &s, NULL);

    /* With no fd left, the loop still runs channel sources and posts. */
    eventq_chan *ch;
    REQUIRE("chan_new", eventq_chan_new(NULL, &ch) == 0);
    allow_fds(0);
    callbacks = 0;
    CHECK_INT("no fd left: add_chan", eventq_loop_add_chan(lp, ch, on_chan, NULL, NULL, NULL), 0);
    CHECK_INT("no fd left: send", eventq_chan_send(ch, "x", 1, 0), 0);
    CHECK_INT("no fd left: post", eventq_loop_post(lp, on_post, NULL, NULL), 0);
    int ran = 0;
    for (int i = 0; i < 4 && ran < 2; i++) {
        int n = eventq_loop_run_once(lp, 0);
        if (n < 0)
            break;
        ran += n;
    }
    CHECK_INT("no fd left: the loop runs the message and the post", ran, 2);
    CHECK_INT("no fd left: both callbacks ran", callbacks, 2);
    restore_fds();

    /* Once fds are back, the adds that failed work. */
    destroys = callbacks = 0;
    CHECK_INT("with fds: add_timer", eventq_loop_add_timer(lp, 0, 0, on_timer, NULL, on_destroy, NULL), 0);
    CHECK_INT("with fds: the timer fires", eventq_loop_run_once(lp, EVENTQ_FOREVER), 1);
    snapshot(&before_set);
    eventq_loop_free(lp);
    snapshot(&after_set);
    CHECK_INT("eventq_loop_free runs the timer's destroy", destroys, 1);
    CHECK_MSG("eventq_loop_free closes its 2 fds and the timer's",
              after_set.n == before_set.n - 3, "%d open before, %d after", before_set.n,
              after_set.n);
    eventq_chan_free(ch);
}

int main(void)
{
    check_init();
    REQUIRE("getrlimit", getrlimit(RLIMIT_NOFILE, &saved) == 0);
    struct fdset start, end;
    snapshot(&start);
    chan_new_case();
    loop_new_case();
    snapshot(&end);
    CHECK_MSG("the same fds are open at the end as at the start", same_fds(&start, &end),
              "%d open at the start, %d at the end", start.n, end.n);
    return check_done();
}
