/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * Memory watches without a loop: eventq_memcg_watch_fd and
 * eventq_memcg_watch_read, waited on by the test's own epoll as another
 * event loop would (edge-triggered, as Go's netpoller registers fds).
 *
 * - Bad inputs: NULL watch or out (-EINVAL, *out untouched); -EAGAIN with
 *   *out untouched; the fd is non-blocking and close-on-exec, and freeing
 *   the watch closes it; a watch that was read can still be added to a loop.
 * - The real cgroup v1 test (where the memory controller is writable): a
 *   forked child in a new child cgroup (40 MiB limit, OOM killer off)
 *   allocates on command; threshold, OOM and pressure-level watches in one
 *   epoll, each report read until -EAGAIN: one crossing up (count 1), one
 *   OOM (count 1, under_oom), pressure, one crossing down once it is
 *   killed; the rmdir gives one EVENTQ_MEMCG_REMOVED per watch, and every
 *   read after it -ENOENT.
 * - PSI through an outer poller (cgroup2 and v1 both writable): two
 *   triggers on one child cgroup's memory.pressure, one that fires ("some
 *   1us in 2 s") and one that cannot ("full 10 s in 10 s"). The outer
 *   epoll's poll takes the kernel's firing flag, so the firing is read
 *   from its report (EVENTQ_IN): one event per report. The kernel also
 *   wakes the idle trigger's pollers when the other fires (they share the
 *   cgroup file's wait queue; a raw trigger of the test counts these
 *   wake-ups), yet the idle watch is never reported and reads nothing.
 *   Removal: one REMOVED each, then -ENOENT.
 *
 * Parts this machine cannot run print "skip - <reason>". No sleeps: the
 * child reports through a pipe and kernel notifications are waited for in
 * epoll_wait without a timeout; the watchdog (check.h) is the only hang
 * guard. Child cgroups are removed at exit, also when a REQUIRE fails.
 */
#include "check.h" /* includes <eventq.h> */

#include <signal.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>

#define MIB (1024ull * 1024ull)

static void skip(const char *what, const char *why)
{
    printf("skip - %s: %s\n", what, why);
}

static int noop_cb(eventq_source *src, const eventq_memcg_event *ev, void *ud)
{
    (void)src;
    (void)ev;
    (void)ud;
    return 0;
}

static int count_fds(void)
{
    int n = 0;
    for (int fd = 0; fd < 4096; fd++)
        n += fcntl(fd, F_GETFD) >= 0;
    return n;
}

/* ---- cleanup of what the test made, also after a failed REQUIRE ---- */

static char made_dirs[4][512];
static int n_made;
static pid_t hog_pid;

static void cleanup(void)
{
    if (hog_pid > 0) {
        kill(hog_pid, SIGKILL);
        waitpid(hog_pid, NULL, 0);
        hog_pid = 0;
    }
    while (n_made > 0)
        rmdir(made_dirs[--n_made]);
}

static int make_child(const char *parent, char *out, size_t len)
{
    static int seq;
    snprintf(out, len, "%s/eventq-test-%d-n%d", parent, (int)getpid(), seq++);
    if (mkdir(out, 0755) != 0)
        return -errno;
    if (n_made < 4)
        snprintf(made_dirs[n_made++], sizeof made_dirs[0], "%s", out);
    return 0;
}

static void forget_dir(const char *dir)
{
    for (int i = 0; i < n_made; i++)
        if (strcmp(made_dirs[i], dir) == 0) {
            memmove(made_dirs[i], made_dirs[i + 1], (size_t)(n_made - i - 1) * sizeof made_dirs[0]);
            n_made--;
            return;
        }
}

static int write_file(const char *dir, const char *name, const char *value)
{
    char path[600];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    ssize_t n = write(fd, value, strlen(value));
    int rc = n < 0 ? -errno : 0;
    close(fd);
    return rc;
}

/* The forked child: waits for a command byte, allocates, answers. */
static void hog(int cmd_fd, int reply_fd)
{
    char c;
    size_t held = 0;
    while (read(cmd_fd, &c, 1) == 1) {
        size_t want = c == 'a' ? 24 : 64;
        for (; held < want; held++) {
            char *m = mmap(NULL, MIB, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
            if (m == MAP_FAILED)
                _exit(3);
            memset(m, 1, MIB);
        }
        if (write(reply_fd, "k", 1) != 1)
            _exit(4);
    }
    _exit(0);
}

static int cmd_w = -1, reply_r = -1;

/* Forks the allocating child and moves it into the cgroups dirs[0..n). */
static void start_hog(char dirs[][600], int n)
{
    int cmd[2], reply[2];
    REQUIRE("pipes", pipe2(cmd, O_CLOEXEC) == 0 && pipe2(reply, O_CLOEXEC) == 0);
    fflush(stdout);
    hog_pid = fork();
    REQUIRE("fork", hog_pid >= 0);
    if (hog_pid == 0) {
        close(cmd[1]);
        close(reply[0]);
        hog(cmd[0], reply[1]);
    }
    close(cmd[0]);
    close(reply[1]);
    cmd_w = cmd[1];
    reply_r = reply[0];
    char pid[32];
    snprintf(pid, sizeof pid, "%d", (int)hog_pid);
    for (int i = 0; i < n; i++)
        REQUIRE("move the child", write_file(dirs[i], "cgroup.procs", pid) == 0);
}

static void stop_hog(void)
{
    kill(hog_pid, SIGKILL);
    waitpid(hog_pid, NULL, 0);
    hog_pid = 0;
    close(cmd_w);
    close(reply_r);
}

/* ---- what the watches report ---- */

struct tally {
    uint64_t threshold_calls, crossings, last_usage;
    uint64_t oom_calls, ooms;
    int under_oom;
    uint64_t pressure;
    uint64_t psi, psi_count;
    uint32_t psi_kind;
    uint64_t psi_stall_us, psi_window_us;
    int removed;
    int enoent;   /* reads that said -ENOENT (after the removal) */
    int reports;  /* outer epoll reports of the watch's fd */
    int empty;    /* reports whose first read found nothing */
    int other;
};

/* Reads the watch until -EAGAIN or -ENOENT, passing the report's flags to
 * the first read only, as the header says. */
static void drain(eventq_memcg_watch *w, uint32_t revents, struct tally *t)
{
    for (int first = 1;; first = 0) {
        const eventq_memcg_event *ev = (const eventq_memcg_event *)&ev;
        const eventq_memcg_event *const sentinel = ev;
        int rc = eventq_memcg_watch_read(w, revents, &ev);
        revents = 0;
        if (rc == -EAGAIN || rc == -ENOENT) {
            REQUIRE("a failed read leaves *out untouched", ev == sentinel);
            t->empty += first && rc == -EAGAIN;
            t->enoent += rc == -ENOENT;
            return;
        }
        REQUIRE("read", rc == 0 && ev != NULL && ev != sentinel);
        REQUIRE("event has a spec", ev->spec != NULL && ev->spec[0] != 0);
        switch (ev->kind) {
        case EVENTQ_MEMCG_THRESHOLD:
            t->threshold_calls++;
            t->crossings += ev->count;
            t->last_usage = ev->usage;
            break;
        case EVENTQ_MEMCG_OOM:
            t->oom_calls++;
            t->ooms += ev->count;
            t->under_oom = ev->under_oom;
            break;
        case EVENTQ_MEMCG_PRESSURE:
            t->pressure += ev->count;
            break;
        case EVENTQ_MEMCG_PSI:
            t->psi++;
            t->psi_count += ev->count;
            t->psi_kind = ev->psi_kind;
            t->psi_stall_us = ev->psi_stall_us;
            t->psi_window_us = ev->psi_window_us;
            break;
        case EVENTQ_MEMCG_REMOVED:
            t->removed++;
            break;
        default:
            t->other++;
        }
    }
}

/* An epoll of watch fds, edge-triggered as Go's netpoller adds them. */
struct outer {
    int ep;
    int n;
    eventq_memcg_watch *w[4];
    struct tally *t[4];
};

static void outer_add(struct outer *o, eventq_memcg_watch *w, struct tally *t)
{
    int fd = eventq_memcg_watch_fd(w);
    REQUIRE("watch fd", fd >= 0);
    /* Read once before adding the fd, as the header says for PSI. */
    drain(w, 0, t);
    t->empty = 0; /* counted for the reports only */
    struct epoll_event ev = { .events = EPOLLIN | EPOLLET, .data.u32 = (uint32_t)o->n };
    REQUIRE("epoll_ctl ADD", epoll_ctl(o->ep, EPOLL_CTL_ADD, fd, &ev) == 0);
    o->w[o->n] = w;
    o->t[o->n] = t;
    o->n++;
}

/* Waits for one batch of reports and reads each reported watch. */
static void outer_wait(struct outer *o)
{
    struct epoll_event evs[8];
    int n;
    do
        n = epoll_wait(o->ep, evs, 8, -1);
    while (n < 0 && errno == EINTR);
    REQUIRE("epoll_wait", n > 0);
    for (int i = 0; i < n; i++) {
        uint32_t k = evs[i].data.u32;
        o->t[k]->reports++;
        drain(o->w[k], evs[i].events, o->t[k]);
    }
}

/* ---- bad inputs, fds ---- */

static void test_bad_inputs(void)
{
    eventq_memcg_watch *w = NULL;
    const eventq_memcg_event *ev = (const eventq_memcg_event *)&ev;
    const eventq_memcg_event *const sentinel = ev;

    CHECK_INT("fd(NULL)", eventq_memcg_watch_fd(NULL), -EINVAL);
    CHECK_INT("read(NULL watch)", eventq_memcg_watch_read(NULL, 0, &ev), -EINVAL);
    CHECK_INT("read(NULL watch, NULL out)", eventq_memcg_watch_read(NULL, EVENTQ_IN, NULL), -EINVAL);
    CHECK("out untouched", ev == sentinel);

    if (access("/proc/pressure/memory", F_OK) != 0) {
        skip("fd and read of a system-wide PSI watch", "the kernel has no PSI");
        return;
    }
    int before = count_fds();
    REQUIRE("system-wide PSI watch",
            eventq_memcg_watch_psi(NULL, EVENTQ_MEMCG_PSI_FULL, 10000000, 10000000, &w) == 0);
    CHECK_INT("read(NULL out)", eventq_memcg_watch_read(w, 0, NULL), -EINVAL);
    int fd = eventq_memcg_watch_fd(w);
    CHECK("fd >= 0", fd >= 0);
    CHECK_INT("the same fd each time", eventq_memcg_watch_fd(w), fd);
    CHECK("fd is non-blocking", (fcntl(fd, F_GETFL) & O_NONBLOCK) != 0);
    CHECK("fd is close-on-exec", (fcntl(fd, F_GETFD) & FD_CLOEXEC) != 0);
    /* A full stall of 10 s in a 10 s window: nothing here comes near it. */
    CHECK("not readable: nothing fired", !fd_readable(fd));
    CHECK_INT("read with nothing pending: -EAGAIN", eventq_memcg_watch_read(w, 0, &ev), -EAGAIN);
    CHECK("out untouched by -EAGAIN", ev == sentinel);
    eventq_memcg_watch_free(w);
    CHECK_INT("free closes the watch's fds", count_fds(), before);

    /* A watch that was read can be added to a loop, which takes it over. */
    eventq_loop *lp;
    eventq_source *src = NULL;
    REQUIRE("loop_new", eventq_loop_new(&lp) == 0);
    REQUIRE("system-wide PSI watch",
            eventq_memcg_watch_psi(NULL, EVENTQ_MEMCG_PSI_FULL, 10000000, 10000000, &w) == 0);
    CHECK_INT("read before the add", eventq_memcg_watch_read(w, 0, &ev), -EAGAIN);
    CHECK_INT("add after a read", eventq_loop_add_memcg(lp, w, noop_cb, NULL, NULL, &src), 0);
    CHECK_INT("remove", eventq_source_remove(src), 0);
    eventq_source_free(src);

    /* PSI: EVENTQ_IN in revents is the firing that the caller's poll of the
     * fd took from the kernel (here a caller that says so). */
    REQUIRE("system-wide PSI watch",
            eventq_memcg_watch_psi(NULL, EVENTQ_MEMCG_PSI_FULL, 10000000, 10000000, &w) == 0);
    REQUIRE("read with EVENTQ_IN", eventq_memcg_watch_read(w, EVENTQ_IN, &ev) == 0);
    CHECK_INT("is the trigger's firing", ev->kind, EVENTQ_MEMCG_PSI);
    CHECK_U64("count 1", ev->count, 1);
    CHECK("full 10 s in 10 s", ev->psi_kind == EVENTQ_MEMCG_PSI_FULL &&
                                   ev->psi_stall_us == 10000000 && ev->psi_window_us == 10000000);
    CHECK("spec", strcmp(ev->spec, "/proc/pressure/memory:full 10000000 10000000") == 0);
    const eventq_memcg_event *first = ev;
    CHECK_INT("a read without flags then: -EAGAIN", eventq_memcg_watch_read(w, 0, &ev), -EAGAIN);
    CHECK("the event stays valid after a failed read", ev == first && ev->kind == EVENTQ_MEMCG_PSI);
    eventq_memcg_watch_free(w);
    eventq_loop_free(lp);
    CHECK_INT("no fd left", count_fds(), before);
}

static char v1_dir[512], v2_dir[512];

static void find_own(void)
{
    eventq_memcg *own;
    int rc = eventq_memcg_own(&own);
    if (rc != 0) {
        skip("own cgroup", eventq_strerror(rc));
        return;
    }
    if (eventq_memcg_dir(own, EVENTQ_MEMCG_V1, v1_dir, sizeof v1_dir) < 0)
        v1_dir[0] = 0;
    if (eventq_memcg_dir(own, EVENTQ_MEMCG_V2, v2_dir, sizeof v2_dir) < 0)
        v2_dir[0] = 0;
    eventq_memcg_free(own);
}

/* ---- the real cgroup v1 test, without a loop ---- */

static void test_v1_noloop(void)
{
    if (!v1_dir[0]) {
        skip("v1 test without a loop", "the cgroup v1 memory controller is not mounted");
        return;
    }
    char dirs[1][600];
    if (make_child(v1_dir, dirs[0], sizeof dirs[0]) != 0) {
        skip("v1 test without a loop", "cannot create a child cgroup (needs root or a delegated cgroup)");
        return;
    }
    const char *dir = dirs[0];
    REQUIRE("limit 40 MiB", write_file(dir, "memory.limit_in_bytes", "41943040") == 0);
    REQUIRE("oom_kill_disable", write_file(dir, "memory.oom_control", "1") == 0);
    eventq_memcg *cg;
    REQUIRE("open child", eventq_memcg_open(dir, &cg) == 0);
    int before = count_fds();
    eventq_memcg_watch *th, *oom, *pr;
    REQUIRE("threshold", eventq_memcg_watch_threshold(cg, 16 * MIB, &th) == 0);
    REQUIRE("oom", eventq_memcg_watch_oom(cg, &oom) == 0);
    REQUIRE("pressure",
            eventq_memcg_watch_pressure_level(cg, EVENTQ_MEMCG_LOW, EVENTQ_MEMCG_MODE_DEFAULT, &pr) == 0);
    eventq_memcg_free(cg);

    struct tally t_th = { 0 }, t_oom = { 0 }, t_pr = { 0 };
    struct outer o = { .ep = epoll_create1(EPOLL_CLOEXEC) };
    REQUIRE("epoll", o.ep >= 0);
    outer_add(&o, th, &t_th);
    outer_add(&o, oom, &t_oom);
    outer_add(&o, pr, &t_pr);
    CHECK_U64("nothing before the child", t_th.threshold_calls + t_oom.oom_calls + t_pr.pressure, 0);

    start_hog(dirs, 1);
    char c;
    /* 1. 24 MiB: one crossing of 16 MiB. */
    REQUIRE("alloc 24", write(cmd_w, "a", 1) == 1 && read(reply_r, &c, 1) == 1);
    while (t_th.threshold_calls < 1)
        outer_wait(&o);
    CHECK_U64("one threshold event", t_th.threshold_calls, 1);
    CHECK_U64("crossing count 1", t_th.crossings, 1);
    CHECK("usage above the threshold", t_th.last_usage >= 16 * MIB);
    CHECK_U64("no OOM yet", t_oom.oom_calls, 0);

    /* 2. Into the limit: the child waits in the kernel's OOM handling. */
    REQUIRE("alloc 64", write(cmd_w, "b", 1) == 1);
    while (t_oom.oom_calls < 1 || t_pr.pressure < 1)
        outer_wait(&o);
    CHECK_U64("one OOM event", t_oom.oom_calls, 1);
    CHECK_U64("OOM count 1", t_oom.ooms, 1);
    CHECK("under_oom", t_oom.under_oom);

    /* 3. Killed: its memory is freed, one crossing down. */
    stop_hog();
    while (t_th.threshold_calls < 2)
        outer_wait(&o);
    CHECK_U64("crossings in all", t_th.crossings, 2);
    CHECK("usage below the threshold", t_th.last_usage < 16 * MIB);

    /* 4. Removal: one REMOVED per watch, then -ENOENT. */
    CHECK_INT("rmdir", rmdir(dir), 0);
    forget_dir(dir);
    while (t_th.removed + t_oom.removed + t_pr.removed < 3)
        outer_wait(&o);
    CHECK_INT("threshold: one removal", t_th.removed, 1);
    CHECK_INT("oom: one removal", t_oom.removed, 1);
    CHECK_INT("pressure: one removal", t_pr.removed, 1);
    CHECK_U64("still one OOM", t_oom.ooms, 1);
    const eventq_memcg_event *ev = NULL;
    CHECK_INT("a read after the removal: -ENOENT", eventq_memcg_watch_read(th, EVENTQ_IN, &ev), -ENOENT);
    CHECK("out untouched by -ENOENT", ev == NULL);
    CHECK_INT("nothing but these", t_th.other + t_oom.other + t_pr.other, 0);
    printf("# v1 without a loop: %llu crossings, %llu OOM, %llu pressure notifications; "
           "%d report(s) found nothing to read\n",
           (unsigned long long)t_th.crossings, (unsigned long long)t_oom.ooms,
           (unsigned long long)t_pr.pressure, t_th.empty + t_oom.empty + t_pr.empty);
    eventq_memcg_watch_free(th);
    eventq_memcg_watch_free(oom);
    eventq_memcg_watch_free(pr);
    CHECK_INT("the watches' fds are closed", count_fds(), before + 1);
    close(o.ep);
}

/* ---- PSI through an outer poller ---- */

/* A raw trigger of the test's own on `path`, in an edge-triggered epoll
 * for EPOLLIN: a PSI file always polls EPOLLIN, so the epoll reports each
 * wake-up of the trigger's pollers, whatever woke them. */
static int raw_wakeups(const char *path, const char *spec, int *trig_fd)
{
    int fd = open(path, O_RDWR | O_NONBLOCK | O_CLOEXEC);
    REQUIRE("open memory.pressure", fd >= 0);
    REQUIRE("write the raw trigger", write(fd, spec, strlen(spec) + 1) > 0);
    int ep = epoll_create1(EPOLL_CLOEXEC);
    struct epoll_event ev = { .events = EPOLLIN | EPOLLET };
    REQUIRE("epoll_ctl", epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev) == 0);
    struct epoll_event got;
    epoll_wait(ep, &got, 1, 0); /* the registration's own report */
    *trig_fd = fd;
    return ep;
}

static int count_wakeups(int ep)
{
    struct epoll_event got;
    int n = 0;
    while (epoll_wait(ep, &got, 1, 0) == 1)
        n++;
    return n;
}

static void test_psi_outer_poller(void)
{
    if (!v1_dir[0] || !v2_dir[0]) {
        skip("PSI through an outer poller", "needs both the cgroup v1 memory controller and cgroup2");
        return;
    }
    char dirs[2][600];
    if (make_child(v1_dir, dirs[0], sizeof dirs[0]) != 0 || make_child(v2_dir, dirs[1], sizeof dirs[1]) != 0) {
        skip("PSI through an outer poller", "cannot create child cgroups");
        return;
    }
    REQUIRE("limit 40 MiB", write_file(dirs[0], "memory.limit_in_bytes", "41943040") == 0);
    REQUIRE("oom_kill_disable", write_file(dirs[0], "memory.oom_control", "1") == 0);
    eventq_memcg *cg2;
    REQUIRE("open v2 child", eventq_memcg_open(dirs[1], &cg2) == 0);
    eventq_memcg_watch *fires, *idle;
    int rc = eventq_memcg_watch_psi(cg2, EVENTQ_MEMCG_PSI_SOME, 1, 2000000, &fires);
    if (rc != 0) {
        skip("PSI through an outer poller", eventq_strerror(rc));
        eventq_memcg_free(cg2);
        return;
    }
    REQUIRE("the idle trigger",
            eventq_memcg_watch_psi(cg2, EVENTQ_MEMCG_PSI_FULL, 10000000, 10000000, &idle) == 0);
    eventq_memcg_free(cg2);
    char path[700];
    snprintf(path, sizeof path, "%s/memory.pressure", dirs[1]);
    int raw_fd, raw_ep = raw_wakeups(path, "full 10000000 10000000", &raw_fd);

    struct tally t_fires = { 0 }, t_idle = { 0 };
    struct outer o = { .ep = epoll_create1(EPOLL_CLOEXEC) };
    REQUIRE("epoll", o.ep >= 0);
    outer_add(&o, fires, &t_fires);
    outer_add(&o, idle, &t_idle);

    /* Into the v1 limit: reclaim stalls the child, in the v2 child cgroup
     * too; the trigger fires at the kernel's next 2 s update. */
    start_hog(dirs, 2);
    REQUIRE("alloc 64", write(cmd_w, "b", 1) == 1);
    while (t_fires.psi < 1)
        outer_wait(&o);
    CHECK_U64("the firing: one event", t_fires.psi, 1);
    CHECK_U64("its count is 1", t_fires.psi_count, 1);
    CHECK_INT("one report, one event", t_fires.reports, 1);
    CHECK_INT("the report's read found it (the poll had taken the kernel's flag)", t_fires.empty, 0);
    CHECK("the trigger's kind, stall and window",
          t_fires.psi_kind == EVENTQ_MEMCG_PSI_SOME && t_fires.psi_stall_us == 1 &&
              t_fires.psi_window_us == 2000000);
    const eventq_memcg_event *ev = NULL;
    CHECK_INT("then nothing", eventq_memcg_watch_read(fires, 0, &ev), -EAGAIN);
    int wakeups = count_wakeups(raw_ep);
    CHECK_INT("the idle watch: never reported", t_idle.reports, 0);
    CHECK_U64("the idle watch: no event", t_idle.psi, 0);
    CHECK_INT("the idle watch: nothing to read", eventq_memcg_watch_read(idle, 0, &ev), -EAGAIN);
    printf("# the kernel woke the idle trigger's pollers %d time(s) while the other fired "
           "(a shared wait queue when > 0); the idle watch reported nothing\n",
           wakeups);

    /* Removal ends both: one REMOVED each, then -ENOENT. */
    stop_hog();
    CHECK_INT("rmdir v2 child", rmdir(dirs[1]), 0);
    forget_dir(dirs[1]);
    while (t_fires.removed + t_idle.removed < 2)
        outer_wait(&o);
    CHECK_INT("one removal each", t_fires.removed + t_idle.removed, 2);
    CHECK_INT("read after the removal: -ENOENT", eventq_memcg_watch_read(idle, EVENTQ_IN, &ev), -ENOENT);
    CHECK("out untouched", ev == NULL);
    CHECK("the fd of a removed trigger stays readable (stop polling it)",
          fd_readable(eventq_memcg_watch_fd(idle)));
    CHECK_INT("nothing else", t_fires.other + t_idle.other, 0);
    printf("# PSI through an outer poller: %llu firing(s) in %d report(s)\n",
           (unsigned long long)t_fires.psi, t_fires.reports);
    eventq_memcg_watch_free(fires);
    eventq_memcg_watch_free(idle);
    close(raw_fd);
    close(raw_ep);
    close(o.ep);
}

int main(void)
{
    check_init();
    atexit(cleanup);
    test_bad_inputs();
    find_own();
    test_v1_noloop();
    test_psi_outer_poller();
    cleanup();
    return check_done();
}
