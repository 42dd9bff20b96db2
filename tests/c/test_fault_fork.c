/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * Fault: fork(2) with live channels and loops.
 *
 * A child inherits a copy of every handle's memory but shares the parent's
 * open files: each channel's eventfds (receive, and send once asked for),
 * and a loop's epoll, eventfd,
 * timerfd and signalfd. What this tests is the rule proposed for the
 * header:
 *
 *   After fork(), the child must not call any eventq_* function on a handle
 *   it inherited, eventq_*_free included: it may exec (every library fd is
 *   O_CLOEXEC and disappears), _exit, or leave them untouched; it may poll
 *   the inherited fds, which show the parent's state, not its copy's. If
 *   the process had other threads at the fork, the child may make only
 *   async-signal-safe calls until it execs (POSIX), and libeventq's are not:
 *   they allocate, and a contended lock parks in parking_lot's process-wide
 *   table, which a thread that does not exist in the child may have left
 *   locked. A child of a single-threaded process may create and use new
 *   objects freely.
 *
 * Checked: every fd the library made is FD_CLOEXEC and gone after exec; a
 * child that only polls and exits leaves the parent's channel and loop
 * intact (all messages received once, in order, fds consistent, loop
 * dispatching); the inherited fds show the parent's state; children of a
 * single-threaded parent create and use their own channel and loop, from
 * two threads too. Printed as notes, not checked (the rule forbids them):
 * what a child's receive and a child's loop free do to the parent.
 *
 * Parent and child synchronise through pipes only; no sleeps.
 */
#include "check.h" /* includes <eventq.h> */

#include <dirent.h>
#include <sys/wait.h>

/* ---- helpers ---- */

static int list_fds(int *v, int max)
{
    DIR *d = opendir("/proc/self/fd");
    REQUIRE("opendir", d != NULL);
    int n = 0, self = dirfd(d);
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        if (e->d_name[0] != '.' && atoi(e->d_name) != self && n < max)
            v[n++] = atoi(e->d_name);
    closedir(d);
    return n;
}

static int contains(const int *v, int n, int fd)
{
    for (int i = 0; i < n; i++)
        if (v[i] == fd)
            return 1;
    return 0;
}

/* Waits for a child; returns its exit status, or 128 + signal. */
static int reap(pid_t pid)
{
    int st;
    while (waitpid(pid, &st, 0) < 0)
        if (errno != EINTR)
            return -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static void put_byte(int fd, char c)
{
    while (write(fd, &c, 1) != 1)
        if (errno != EINTR)
            _exit(99);
}

static char get_byte(int fd)
{
    char c = 0;
    ssize_t n;
    while ((n = read(fd, &c, 1)) < 0 && errno == EINTR)
        ;
    return n == 1 ? c : 0;
}

/* Sends messages "m0".."m{n-1}". */
static void send_n(eventq_chan *ch, int n)
{
    char m[16];
    for (int i = 0; i < n; i++) {
        int len = snprintf(m, sizeof m, "m%d", i);
        REQUIRE("send", eventq_chan_send(ch, m, (size_t)len, 0) == 0);
    }
}

/* Receives n messages, checking they are "m0".."m{n-1}" in order. */
static int recv_n_in_order(eventq_chan *ch, int n)
{
    char m[16], want[16];
    size_t len;
    for (int i = 0; i < n; i++) {
        int wl = snprintf(want, sizeof want, "m%d", i);
        if (eventq_chan_recv(ch, m, sizeof m, &len, 0) != 0 || len != (size_t)wl ||
            memcmp(m, want, len) != 0)
            return i;
    }
    return n;
}

/* ---- exec: every library fd is close-on-exec ---- */

static int on_timer(eventq_source *s, uint64_t n, void *ud)
{
    (void)s;
    (void)n;
    (*(int *)ud)++;
    return 0;
}

static int on_sig(eventq_source *s, int signo, void *ud)
{
    (void)s;
    (void)signo;
    (void)ud;
    return 0;
}

static void exec_case(const char *self)
{
    int before[1024], after[1024];
    int nb = list_fds(before, 1024);
    eventq_chan *ch;
    eventq_loop *lp;
    int ticks = 0;
    REQUIRE("chan_new", eventq_chan_new(NULL, &ch) == 0);
    CHECK_MSG("a new channel has one fd (its send fd comes on first use)",
              list_fds(after, 1024) == nb + 1, "%d before", nb);
    REQUIRE("send_fd", eventq_chan_send_fd(ch) >= 0);
    REQUIRE("loop_new", eventq_loop_new(&lp) == 0);
    REQUIRE("add_timer", eventq_loop_add_timer(lp, 1000000000ull, 0, on_timer, &ticks, NULL, NULL) == 0);
    REQUIRE("add_signal", eventq_loop_add_signal(lp, SIGURG, on_sig, NULL, NULL, NULL) == 0);
    int na = list_fds(after, 1024);
    char *argv[64];
    char nums[64][12];
    int argc = 0, made = 0, cloexec = 1;
    argv[argc++] = (char *)self;
    argv[argc++] = "--expect-closed";
    for (int i = 0; i < na && argc < 62; i++) {
        if (contains(before, nb, after[i]))
            continue;
        made++;
        int fl = fcntl(after[i], F_GETFD);
        cloexec &= fl >= 0 && (fl & FD_CLOEXEC);
        snprintf(nums[argc], sizeof nums[argc], "%d", after[i]);
        argv[argc] = nums[argc];
        argc++;
    }
    argv[argc] = NULL;
    CHECK_MSG("the library made 6 fds (chan 2 with its send fd, loop 2, timer 1, signal 1)", made == 6,
              "%d", made);
    CHECK("every one is FD_CLOEXEC", cloexec);
    pid_t pid = fork();
    REQUIRE("fork", pid >= 0);
    if (pid == 0) {
        /* argv[0], not /proc/self/exe: under valgrind that is valgrind. */
        execv(strchr(self, '/') ? self : "/proc/self/exe", argv);
        _exit(98);
    }
    CHECK_INT("after exec, the child has none of them open", reap(pid), 0);
    eventq_loop_free(lp);
    eventq_chan_free(ch);
}

/* ---- a child that leaves the handles alone (polls only) ---- */

struct loopdata {
    int calls;
    char last[16];
};

static int on_chan(eventq_source *s, const void *d, size_t len, void *ud)
{
    struct loopdata *ld = ud;
    (void)s;
    ld->calls++;
    if (d && len < sizeof ld->last) {
        memcpy(ld->last, d, len);
        ld->last[len] = 0;
    }
    return 0;
}

static void hands_off_case(void)
{
    eventq_chan *ch, *lch;
    eventq_loop *lp;
    struct loopdata ld = { 0 };
    REQUIRE("chan_new", eventq_chan_new(NULL, &ch) == 0);
    REQUIRE("chan_new", eventq_chan_new(NULL, &lch) == 0);
    REQUIRE("loop_new", eventq_loop_new(&lp) == 0);
    REQUIRE("add_chan", eventq_loop_add_chan(lp, lch, on_chan, &ld, NULL, NULL) == 0);
    send_n(ch, 10);
    int rfd = eventq_chan_recv_fd(ch), sfd = eventq_chan_send_fd(ch);
    int to_child[2], to_parent[2];
    REQUIRE("pipe", pipe(to_child) == 0 && pipe(to_parent) == 0);

    pid_t pid = fork();
    REQUIRE("fork", pid >= 0);
    if (pid == 0) {
        /* The child: polls the inherited fds, calls nothing on them. */
        int ok = fd_readable(rfd) == 1 && fd_readable(sfd) == 1;
        put_byte(to_parent[1], ok ? 'y' : 'n');
        /* The parent drains its queue; its recv fd goes down for the child
         * too: the fd is the parent's. */
        get_byte(to_child[0]);
        ok = fd_readable(rfd) == 0;
        put_byte(to_parent[1], ok ? 'y' : 'n');
        _exit(0);
    }
    CHECK_INT("child: the inherited recv and send fds show the parent's pending messages",
              get_byte(to_parent[0]), 'y');
    CHECK_INT("parent: all 10 messages received once, in order, after the fork",
              recv_n_in_order(ch, 10), 10);
    size_t len;
    char b[16];
    CHECK_INT("parent: then empty", eventq_chan_recv(ch, b, sizeof b, &len, 0), -EAGAIN);
    put_byte(to_child[1], 'g');
    CHECK_INT("child: the inherited recv fd went down when the parent drained",
              get_byte(to_parent[0]), 'y');
    CHECK_INT("child exits 0", reap(pid), 0);
    /* The parent is intact after the child's exit closed its copies. */
    CHECK_INT("parent: recv fd down (empty), after the child exited", fd_readable(rfd), 0);
    CHECK_INT("parent: send fd up (room)", fd_readable(sfd), 1);
    send_n(ch, 3);
    CHECK_INT("parent: recv fd up after a send", fd_readable(rfd), 1);
    CHECK_INT("parent: the channel still works", recv_n_in_order(ch, 3), 3);
    CHECK_INT("parent: the loop still dispatches: send", eventq_chan_send(lch, "after", 5, 0), 0);
    CHECK_INT("parent: the loop still dispatches: run_once", eventq_loop_run_once(lp, EVENTQ_FOREVER), 1);
    CHECK("parent: the loop's callback got the message", ld.calls == 1 && !strcmp(ld.last, "after"));
    eventq_chan_stats st;
    eventq_chan_get_stats(ch, &st, sizeof st);
    CHECK("parent: counters unaffected by the child (sent 13, received 13)",
          st.sent == 13 && st.received == 13 && st.pending == 0);
    eventq_loop_free(lp);
    eventq_chan_free(lch);
    eventq_chan_free(ch);
    close(to_child[0]);
    close(to_child[1]);
    close(to_parent[0]);
    close(to_parent[1]);
}

/* ---- the child's own objects (the parent single-threaded at fork) ---- */

struct peer {
    eventq_chan *ch;
    int n;
    int in_order;
};

static void *child_peer(void *arg)
{
    struct peer *p = arg;
    char m[16], want[16];
    size_t len;
    p->in_order = 1;
    for (int i = 0; i < p->n; i++) {
        int wl = snprintf(want, sizeof want, "m%d", i);
        if (eventq_chan_recv(p->ch, m, sizeof m, &len, EVENTQ_FOREVER) != 0 ||
            len != (size_t)wl || memcmp(m, want, len) != 0)
            p->in_order = 0;
    }
    return NULL;
}

static int child_own_objects(void)
{
    eventq_chan *c, *q;
    eventq_loop *lp;
    struct loopdata ld = { 0 };
    int bad = 0;
    eventq_chan_opts o;
    eventq_chan_opts_init(&o, sizeof o);
    o.capacity = 2; /* sender and receiver wait for each other: both park */
    if (eventq_chan_new(&o, &q) != 0)
        return 13;
    struct peer p = { .ch = q, .n = 2000 };
    pthread_t th;
    if (pthread_create(&th, NULL, child_peer, &p) != 0)
        return 14;
    char m[16];
    for (int i = 0; i < p.n; i++) {
        int len = snprintf(m, sizeof m, "m%d", i);
        bad |= eventq_chan_send(q, m, (size_t)len, EVENTQ_FOREVER) != 0;
    }
    pthread_join(th, NULL);
    bad |= !p.in_order;
    eventq_chan_free(q);

    if (eventq_chan_new(NULL, &c) != 0 || eventq_loop_new(&lp) != 0)
        return 10;
    bad |= eventq_loop_add_chan(lp, c, on_chan, &ld, NULL, NULL) != 0;
    send_n(c, 5);
    int calls = 0;
    while (calls < 5) {
        int n = eventq_loop_run_once(lp, EVENTQ_FOREVER);
        if (n < 0)
            return 11;
        calls += n;
    }
    bad |= ld.calls != 5 || strcmp(ld.last, "m4") != 0;
    send_n(c, 3);
    eventq_loop_free(lp);
    eventq_chan_stats st;
    bad |= eventq_chan_free_final(c, &st, sizeof st) != 1 || st.dropped != 3;
    return bad ? 12 : 0;
}

static void own_objects_case(void)
{
    /* The parent holds live objects of its own, but no other thread. */
    eventq_chan *ch;
    eventq_loop *plp;
    REQUIRE("chan_new", eventq_chan_new(NULL, &ch) == 0);
    REQUIRE("loop_new", eventq_loop_new(&plp) == 0);
    send_n(ch, 7);
    int fails = 0;
    for (int round = 0; round < 5; round++) {
        pid_t pid = fork();
        REQUIRE("fork", pid >= 0);
        if (pid == 0)
            _exit(child_own_objects());
        int rc = reap(pid);
        if (rc != 0) {
            fails++;
            printf("# child round %d exited %d\n", round, rc);
        }
    }
    CHECK_INT("5 children of a single-threaded parent created their own channels and loop and "
              "used them, from two threads too",
              fails, 0);
    CHECK_INT("the parent's channel is untouched", recv_n_in_order(ch, 7), 7);
    eventq_loop_free(plp);
    eventq_chan_free(ch);
}

/* ---- what the rule prevents (notes, not checks) ---- */

static void hazards_note(void)
{
    eventq_chan *ch;
    REQUIRE("chan_new", eventq_chan_new(NULL, &ch) == 0);
    send_n(ch, 4);
    pid_t pid = fork();
    REQUIRE("fork", pid >= 0);
    if (pid == 0) {
        /* Forbidden: receive through an inherited handle. */
        _exit(recv_n_in_order(ch, 4) == 4 ? 0 : 1);
    }
    int child_got_all = reap(pid) == 0;
    eventq_chan_stats st;
    eventq_chan_get_stats(ch, &st, sizeof st);
    printf("# note: a child that receives through an inherited handle got copies of all %s "
           "messages the parent still holds (%d), and left the parent's recv fd %s while %llu "
           "are pending: both reasons the header must forbid it\n",
           "4", child_got_all, fd_readable(eventq_chan_recv_fd(ch)) ? "readable" : "NOT readable",
           (unsigned long long)st.pending);
    eventq_chan_free(ch);

    eventq_loop *lp;
    REQUIRE("loop_new", eventq_loop_new(&lp) == 0);
    int lfd = eventq_loop_fd(lp);
    int idle_before = fd_readable(lfd) == 0;
    pid = fork();
    REQUIRE("fork", pid >= 0);
    if (pid == 0) {
        /* Forbidden: free an inherited loop. */
        eventq_loop_free(lp);
        _exit(0);
    }
    reap(pid);
    int spins = 0;
    for (int i = 0; i < 5 && fd_readable(lfd) == 1; i++)
        spins += eventq_loop_run_once(lp, 0) == 0;
    printf("# note: after a child freed its copy of an idle loop (fd idle before: %d), the "
           "parent's loop fd is %s; run_once(0) returned 0 with the fd still readable %d time(s)\n",
           idle_before, fd_readable(lfd) ? "readable (spurious work)" : "idle", spins);
    eventq_loop_free(lp);
}

int main(int argc, char **argv)
{
    if (argc > 1 && !strcmp(argv[1], "--expect-closed")) {
        /* Re-executed: every fd listed must be closed. */
        for (int i = 2; i < argc; i++)
            if (fcntl(atoi(argv[i]), F_GETFD) != -1 || errno != EBADF)
                return 1;
        return 0;
    }
    check_init();
    exec_case(argv[0]);
    hands_off_case();
    own_objects_case();
    hazards_note();
    return check_done();
}
