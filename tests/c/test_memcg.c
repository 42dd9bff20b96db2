/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * The memory-pressure watches through the C ABI.
 *
 * - Bad inputs and what is missing, with their codes: NULL arguments
 *   (-EINVAL), no such cgroup (-ENOENT), the other cgroup version's
 *   interface (-ENODEV), bad PSI triggers (-EINVAL), a PSI window that
 *   needs CAP_SYS_RESOURCE (-EPERM). A failed constructor leaves *out
 *   untouched. On every failed eventq_loop_add_memcg: destroy ran once
 *   before the call returned, the watch was freed (its fds closed), the
 *   callback never ran, *out is untouched. A watch never added is freed
 *   with eventq_memcg_watch_free.
 * - eventq_memcg_own and eventq_memcg_dir; eventq_strerror's texts for the
 *   memcg codes.
 * - The real test (where the cgroup v1 memory controller is writable): a
 *   forked child is moved into a new child cgroup (40 MiB limit, OOM killer
 *   disabled) and allocates, reporting through a pipe: one threshold
 *   crossing (count 1), one OOM (count 1, under_oom), pressure, one
 *   crossing down once it is killed, and one EVENTQ_MEMCG_REMOVED per
 *   source when the cgroup is removed.
 * - cgroup2 (where mounted): a PSI trigger and cgroup.events on a new child
 *   cgroup; removing it ends both with EVENTQ_MEMCG_REMOVED.
 *
 * Parts this machine cannot run print "skip - <reason>". No sleeps: the
 * child reports through a pipe and kernel notifications are waited for in
 * the loop; the watchdog (check.h) is the only hang guard. Child cgroups
 * are removed at exit, also when a REQUIRE fails.
 */
#include "check.h" /* includes <eventq.h> */

#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>

#define MIB (1024ull * 1024ull)

static int destroyed;
static int cb_ran;

static void destroy_count(void *ud)
{
    (void)ud;
    destroyed++;
}

static int never_cb(eventq_source *src, const eventq_memcg_event *ev, void *ud)
{
    (void)src;
    (void)ev;
    (void)ud;
    cb_ran++;
    return 0;
}

static void skip(const char *what, const char *why)
{
    printf("skip - %s: %s\n", what, why);
}

static int rec_cb(eventq_source *src, const eventq_memcg_event *ev, void *ud);

/* Adds the watch a constructor made (it returned rc) with rec_cb and no
 * destroy; the constructor's code if it failed. */
static int add(eventq_loop *lp, int rc, eventq_memcg_watch **w, void *ud, eventq_source **out)
{
    if (rc < 0)
        return rc;
    return eventq_loop_add_memcg(lp, *w, rec_cb, ud, NULL, out);
}

/* This process's open fds. */
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

/* Makes a uniquely named child cgroup of parent; 0 or -errno. */
static int make_child(const char *parent, char *out, size_t len)
{
    static int seq;
    snprintf(out, len, "%s/eventq-test-%d-c%d", parent, (int)getpid(), seq++);
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

static int read_file(const char *dir, const char *name, char *buf, size_t len)
{
    char path[600];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    ssize_t n = read(fd, buf, len - 1);
    close(fd);
    buf[n > 0 ? n : 0] = 0;
    return n < 0 ? -1 : 0;
}

static int has_cap_sys_resource(void)
{
    char buf[4096];
    if (read_file("/proc/self", "status", buf, sizeof buf) != 0)
        return 0;
    char *p = strstr(buf, "CapEff:");
    if (!p)
        return 0;
    unsigned long long caps = strtoull(p + 7, NULL, 16);
    return (caps >> 24) & 1;
}

/* ---- bad inputs ---- */

static void test_bad_inputs(void)
{
    eventq_loop *lp;
    eventq_memcg *cg = NULL;
    eventq_memcg_watch *w = (eventq_memcg_watch *)&w; /* must stay untouched */
    eventq_memcg_watch *const wsentinel = w;
    eventq_source *out = (eventq_source *)&out;
    eventq_source *const sentinel = out;

    REQUIRE("loop_new", eventq_loop_new(&lp) == 0);
    CHECK_INT("own(NULL)", eventq_memcg_own(NULL), -EINVAL);
    CHECK_INT("open(NULL path)", eventq_memcg_open(NULL, &cg), -EINVAL);
    CHECK_INT("open(NULL out)", eventq_memcg_open("/", NULL), -EINVAL);
    CHECK_INT("open(nonexistent)", eventq_memcg_open("/nonexistent/eventq", &cg), -ENOENT);
    CHECK_INT("open(not a cgroup)", eventq_memcg_open("/tmp", &cg), -ENOENT);
    CHECK_INT("open(a file)", eventq_memcg_open("/proc/self/status", &cg), -ENOENT);
    CHECK("cg untouched by failures", cg == NULL);
    eventq_memcg_free(NULL);
    eventq_memcg_watch_free(NULL);

    /* Constructors: NULL cgroup or out, bad arguments: -EINVAL. */
    CHECK_INT("threshold(NULL cg)", eventq_memcg_watch_threshold(NULL, 1, &w), -EINVAL);
    CHECK_INT("oom(NULL cg)", eventq_memcg_watch_oom(NULL, &w), -EINVAL);
    CHECK_INT("pressure(NULL cg)",
              eventq_memcg_watch_pressure_level(NULL, EVENTQ_MEMCG_LOW,
                                                EVENTQ_MEMCG_MODE_DEFAULT, &w),
              -EINVAL);
    CHECK_INT("events(NULL cg)", eventq_memcg_watch_events(NULL, &w), -EINVAL);
    CHECK_INT("counters(NULL cg)", eventq_memcg_watch_counters(NULL, "cgroup.events", &w),
              -EINVAL);
    CHECK_INT("psi(NULL out)",
              eventq_memcg_watch_psi(NULL, EVENTQ_MEMCG_PSI_SOME, 100000, 2000000, NULL),
              -EINVAL);
    /* Bad triggers: unknown kind, window outside 500 ms..10 s, stall 0 or
     * longer than the window. */
    CHECK_INT("psi(kind 7)", eventq_memcg_watch_psi(NULL, 7, 100000, 2000000, &w), -EINVAL);
    CHECK_INT("psi(window 400 ms)",
              eventq_memcg_watch_psi(NULL, EVENTQ_MEMCG_PSI_SOME, 1000, 400000, &w), -EINVAL);
    CHECK_INT("psi(window 12 s)",
              eventq_memcg_watch_psi(NULL, EVENTQ_MEMCG_PSI_FULL, 1000, 12000000, &w), -EINVAL);
    CHECK_INT("psi(stall 0)", eventq_memcg_watch_psi(NULL, EVENTQ_MEMCG_PSI_SOME, 0, 2000000, &w),
              -EINVAL);
    CHECK_INT("psi(stall > window)",
              eventq_memcg_watch_psi(NULL, EVENTQ_MEMCG_PSI_SOME, 3000000, 2000000, &w),
              -EINVAL);
    CHECK("watch out untouched", w == wsentinel);

    /* eventq_loop_add_memcg: NULL loop, watch or callback: -EINVAL,
     * destroy ran once, no callback, *out untouched. */
    destroyed = 0;
    CHECK_INT("add(NULL watch)", eventq_loop_add_memcg(lp, NULL, never_cb, NULL, destroy_count, &out),
              -EINVAL);
    CHECK_INT("add(NULL watch) ran destroy", destroyed, 1);

    /* A window that is not a multiple of 2 s needs CAP_SYS_RESOURCE. */
    if (access("/proc/pressure/memory", F_OK) != 0) {
        CHECK_INT("psi without PSI: -EOPNOTSUPP",
                  eventq_memcg_watch_psi(NULL, EVENTQ_MEMCG_PSI_SOME, 100000, 2000000, &w),
                  -EOPNOTSUPP);
        skip("add takes the watch on failure", "the kernel has no PSI");
    } else {
        if (!has_cap_sys_resource())
            CHECK_INT("psi(1 s window, unprivileged): -EPERM",
                      eventq_memcg_watch_psi(NULL, EVENTQ_MEMCG_PSI_SOME, 100000, 1000000, &w),
                      -EPERM);
        else
            skip("psi -EPERM", "this process has CAP_SYS_RESOURCE");
        CHECK("watch out untouched", w == wsentinel);

        /* A failed add frees the watch (its fd is closed) and runs destroy. */
        int before = count_fds();
        eventq_memcg_watch *psi;
        REQUIRE("system-wide PSI watch",
                eventq_memcg_watch_psi(NULL, EVENTQ_MEMCG_PSI_SOME, 150000, 2000000, &psi) == 0);
        CHECK_INT("a PSI watch holds two fds (the trigger's file, the epoll polling it)",
                  count_fds(), before + 2);
        destroyed = 0;
        CHECK_INT("add(NULL loop)", eventq_loop_add_memcg(NULL, psi, never_cb, NULL, destroy_count, &out),
                  -EINVAL);
        CHECK_INT("add(NULL loop): watch freed", count_fds(), before);
        REQUIRE("system-wide PSI watch",
                eventq_memcg_watch_psi(NULL, EVENTQ_MEMCG_PSI_SOME, 150000, 2000000, &psi) == 0);
        CHECK_INT("add(NULL cb)", eventq_loop_add_memcg(lp, psi, NULL, NULL, destroy_count, &out),
                  -EINVAL);
        CHECK_INT("add(NULL cb): watch freed", count_fds(), before);
        CHECK_INT("every failed add ran destroy once", destroyed, 2);
        /* One never added: eventq_memcg_watch_free. */
        REQUIRE("system-wide PSI watch",
                eventq_memcg_watch_psi(NULL, EVENTQ_MEMCG_PSI_FULL, 150000, 4000000, &psi) == 0);
        eventq_memcg_watch_free(psi);
        CHECK_INT("watch_free closes its fd", count_fds(), before);
    }
    CHECK("out untouched", out == sentinel);
    CHECK_INT("no callback ran", cb_ran, 0);

    /* eventq_strerror says what is missing for the memcg codes. */
    CHECK("strerror(ENOENT)", strstr(eventq_strerror(-ENOENT), "no such cgroup") != NULL);
    CHECK("strerror(ENODEV)",
          strstr(eventq_strerror(-ENODEV), "memory controller or interface not available") != NULL);
    CHECK("strerror(EACCES)", strstr(eventq_strerror(EACCES), "permission") != NULL);
    CHECK("strerror(EPERM)", strstr(eventq_strerror(-EPERM), "CAP_SYS_RESOURCE") != NULL);
    CHECK("strerror(EOPNOTSUPP)", strstr(eventq_strerror(-EOPNOTSUPP), "no PSI") != NULL);
    eventq_loop_free(lp);
}

/* ---- own cgroup, directories, the other version's interfaces ---- */

static eventq_memcg *own;
static char v1_dir[512], v2_dir[512];

static void test_own(void)
{
    int rc = eventq_memcg_own(&own);
    if (rc != 0) {
        skip("own cgroup", eventq_strerror(rc));
        own = NULL;
        return;
    }
    CHECK_INT("dir(bad version)", eventq_memcg_dir(own, 3, v1_dir, sizeof v1_dir), -EINVAL);
    CHECK_INT("dir(NULL)", eventq_memcg_dir(NULL, EVENTQ_MEMCG_V1, v1_dir, sizeof v1_dir), -EINVAL);
    CHECK_INT("dir(NULL buf, len 1)", eventq_memcg_dir(own, EVENTQ_MEMCG_V1, NULL, 1), -EINVAL);
    for (uint32_t v = EVENTQ_MEMCG_V1; v <= EVENTQ_MEMCG_V2; v++) {
        char *buf = v == EVENTQ_MEMCG_V1 ? v1_dir : v2_dir;
        int len = eventq_memcg_dir(own, v, NULL, 0);
        if (len == -ENODEV) {
            buf[0] = 0;
            continue;
        }
        CHECK("dir length", len > 0);
        char tiny[2];
        CHECK_INT("dir(too small)", eventq_memcg_dir(own, v, tiny, sizeof tiny), -EMSGSIZE);
        CHECK_INT("dir(exact length is too small)", eventq_memcg_dir(own, v, buf, (size_t)len),
                  -EMSGSIZE);
        CHECK_INT("dir", eventq_memcg_dir(own, v, buf, 512), len);
        CHECK_INT("dir strlen", strlen(buf), len);
        CHECK("dir exists", access(buf, F_OK) == 0);
    }
    printf("# own memory cgroup: v1 %s, v2 %s\n", v1_dir[0] ? v1_dir : "(none)",
           v2_dir[0] ? v2_dir : "(none)");

    eventq_memcg_watch *w = NULL;
    if (v2_dir[0]) {
        eventq_memcg *v2only;
        REQUIRE("open v2", eventq_memcg_open(v2_dir, &v2only) == 0);
        CHECK_INT("v1 dir of a v2 cgroup", eventq_memcg_dir(v2only, EVENTQ_MEMCG_V1, NULL, 0),
                  -ENODEV);
        CHECK_INT("threshold on cgroup2: -ENODEV", eventq_memcg_watch_threshold(v2only, 1, &w),
                  -ENODEV);
        CHECK_INT("oom on cgroup2: -ENODEV", eventq_memcg_watch_oom(v2only, &w), -ENODEV);
        CHECK_INT("pressure level on cgroup2: -ENODEV",
                  eventq_memcg_watch_pressure_level(v2only, EVENTQ_MEMCG_CRITICAL,
                                                    EVENTQ_MEMCG_MODE_LOCAL, &w),
                  -ENODEV);
        eventq_memcg_free(v2only);
    }
    if (v1_dir[0]) {
        eventq_memcg *v1only;
        REQUIRE("open v1", eventq_memcg_open(v1_dir, &v1only) == 0);
        CHECK_INT("pressure level 9: -EINVAL",
                  eventq_memcg_watch_pressure_level(v1only, 9, EVENTQ_MEMCG_MODE_DEFAULT, &w),
                  -EINVAL);
        CHECK_INT("pressure mode 9: -EINVAL",
                  eventq_memcg_watch_pressure_level(v1only, EVENTQ_MEMCG_LOW, 9, &w), -EINVAL);
        CHECK_INT("psi on a v1 cgroup: -ENODEV",
                  eventq_memcg_watch_psi(v1only, EVENTQ_MEMCG_PSI_SOME, 100000, 2000000, &w),
                  -ENODEV);
        CHECK_INT("memory.events on a v1 cgroup: -ENODEV", eventq_memcg_watch_events(v1only, &w),
                  -ENODEV);
        CHECK_INT("counters(NULL file): -EINVAL", eventq_memcg_watch_counters(v1only, NULL, &w),
                  -EINVAL);
        CHECK_INT("counters('a/b'): -EINVAL", eventq_memcg_watch_counters(v1only, "a/b", &w),
                  -EINVAL);
        CHECK_INT("counters(''): -EINVAL", eventq_memcg_watch_counters(v1only, "", &w), -EINVAL);
        eventq_memcg_free(v1only);
    }
    CHECK("watch out untouched", w == NULL);
}

/* ---- the real cgroup v1 test ---- */

struct rec {
    uint64_t threshold_calls, crossings, last_usage;
    uint64_t oom_calls, ooms;
    int under_oom;
    uint64_t pressure;
    uint64_t psi;
    int removed;
    int64_t populated;
    int populated_changes;
};

static int rec_cb(eventq_source *src, const eventq_memcg_event *ev, void *ud)
{
    struct rec *r = ud;
    (void)src;
    REQUIRE("event has a spec", ev->spec != NULL && ev->spec[0] != 0);
    switch (ev->kind) {
    case EVENTQ_MEMCG_THRESHOLD:
        r->threshold_calls++;
        r->crossings += ev->count;
        r->last_usage = ev->usage;
        break;
    case EVENTQ_MEMCG_OOM:
        r->oom_calls++;
        r->ooms += ev->count;
        r->under_oom = ev->under_oom;
        break;
    case EVENTQ_MEMCG_PRESSURE:
        r->pressure += ev->count;
        break;
    case EVENTQ_MEMCG_PSI:
        r->psi++;
        break;
    case EVENTQ_MEMCG_CHANGED:
        for (size_t i = 0; i < ev->ndeltas; i++)
            if (strcmp(ev->deltas[i].name, "populated") == 0) {
                r->populated += ev->deltas[i].delta;
                r->populated_changes++;
            }
        break;
    case EVENTQ_MEMCG_REMOVED:
        r->removed++;
        break;
    }
    return 0;
}

/* Runs the loop until *flag reaches want (the watchdog is the hang guard). */
static void run_until(eventq_loop *lp, const uint64_t *flag, uint64_t want)
{
    while (*flag < want)
        REQUIRE("run_once", eventq_loop_run_once(lp, 500 * 1000000ll) >= 0);
}

static void run_until_int(eventq_loop *lp, const int *flag, int want)
{
    while (*flag < want)
        REQUIRE("run_once", eventq_loop_run_once(lp, 500 * 1000000ll) >= 0);
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

static void test_v1_real(void)
{
    if (!v1_dir[0]) {
        skip("v1 real test", "the cgroup v1 memory controller is not mounted");
        return;
    }
    char dir[600], v2child[600] = "", buf[256];
    int rc = make_child(v1_dir, dir, sizeof dir);
    if (rc != 0) {
        skip("v1 real test", "cannot create a child cgroup (needs root or a delegated cgroup)");
        return;
    }
    REQUIRE("limit 40 MiB", write_file(dir, "memory.limit_in_bytes", "41943040") == 0);
    REQUIRE("oom_kill_disable", write_file(dir, "memory.oom_control", "1") == 0);

    eventq_loop *lp;
    eventq_memcg *cg, *cg2 = NULL;
    struct rec r = { 0 }, r2 = { 0 };
    REQUIRE("loop_new", eventq_loop_new(&lp) == 0);
    REQUIRE("open child", eventq_memcg_open(dir, &cg) == 0);
    eventq_source *th = NULL;
    eventq_memcg_watch *w;
    CHECK_INT("add threshold", add(lp, eventq_memcg_watch_threshold(cg, 16 * MIB, &w), &w, &r, &th),
              0);
    CHECK_INT("add oom", add(lp, eventq_memcg_watch_oom(cg, &w), &w, &r, NULL), 0);
    CHECK_INT("add pressure",
              add(lp,
                  eventq_memcg_watch_pressure_level(cg, EVENTQ_MEMCG_LOW,
                                                    EVENTQ_MEMCG_MODE_DEFAULT, &w),
                  &w, &r, NULL),
              0);
    CHECK_INT("set_events on a memcg source: -EINVAL", eventq_source_set_events(th, EVENTQ_PRI),
              -EINVAL);
    int psi = 0;
    eventq_source *ev_src = NULL;
    if (v2_dir[0] && make_child(v2_dir, v2child, sizeof v2child) == 0) {
        REQUIRE("open v2 child", eventq_memcg_open(v2child, &cg2) == 0);
        rc = add(lp, eventq_memcg_watch_psi(cg2, EVENTQ_MEMCG_PSI_SOME, 1, 2000000, &w), &w, &r2,
                 NULL);
        if (rc == 0)
            psi = 1;
        else
            skip("PSI trigger", eventq_strerror(rc));
        CHECK_INT("add cgroup.events",
                  add(lp, eventq_memcg_watch_counters(cg2, "cgroup.events", &w), &w, &r2, &ev_src),
                  0);
        rc = add(lp, eventq_memcg_watch_events(cg2, &w), &w, &r2, NULL);
        snprintf(buf, sizeof buf, "%s/memory.events", v2child);
        CHECK_INT("memory.events: 0 if there, else -ENODEV", rc,
                  access(buf, F_OK) == 0 ? 0 : -ENODEV);
    } else {
        v2child[0] = 0;
        skip("cgroup2 part", "cgroup2 is not mounted or not writable");
    }

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
    snprintf(buf, sizeof buf, "%d", (int)hog_pid);
    REQUIRE("move child (v1)", write_file(dir, "cgroup.procs", buf) == 0);
    if (v2child[0])
        REQUIRE("move child (v2)", write_file(v2child, "cgroup.procs", buf) == 0);

    /* 1. 24 MiB: one crossing of 16 MiB. */
    char c;
    REQUIRE("alloc 24", write(cmd[1], "a", 1) == 1 && read(reply[0], &c, 1) == 1);
    run_until(lp, &r.threshold_calls, 1);
    CHECK_U64("one threshold call", r.threshold_calls, 1);
    CHECK_U64("crossing count 1", r.crossings, 1);
    CHECK("usage above the threshold", r.last_usage >= 16 * MIB);
    CHECK_U64("no OOM yet", r.oom_calls, 0);

    /* 2. Into the limit: the child waits in the kernel's OOM handling. */
    REQUIRE("alloc 64", write(cmd[1], "b", 1) == 1);
    run_until(lp, &r.oom_calls, 1);
    run_until(lp, &r.pressure, 1);
    CHECK_U64("one OOM", r.ooms, 1);
    CHECK("under_oom", r.under_oom);
    read_file(dir, "memory.oom_control", buf, sizeof buf);
    CHECK("memory.oom_control says under_oom 1", strstr(buf, "under_oom 1") != NULL);
    if (v2child[0]) {
        run_until_int(lp, &r2.populated_changes, 1);
        CHECK_INT("cgroup.events populated +1", r2.populated, 1);
    }
    if (psi)
        run_until(lp, &r2.psi, 1); /* the next 2 s aggregation */

    /* 3. Killed: its memory is freed, one crossing down. */
    kill(hog_pid, SIGKILL);
    waitpid(hog_pid, NULL, 0);
    hog_pid = 0;
    run_until(lp, &r.threshold_calls, 2);
    CHECK_U64("crossings in all", r.crossings, 2);
    CHECK("usage below the threshold", r.last_usage < 16 * MIB);
    if (v2child[0]) {
        run_until_int(lp, &r2.populated_changes, 2);
        CHECK_INT("cgroup.events populated back to 0", r2.populated, 0);
    }

    /* 4. Removal: every source reports it once and is disabled. */
    CHECK_INT("rmdir v1 child", rmdir(dir), 0);
    forget_dir(dir);
    run_until_int(lp, &r.removed, 3);
    if (v2child[0]) {
        CHECK_INT("rmdir v2 child", rmdir(v2child), 0);
        forget_dir(v2child);
        run_until_int(lp, &r2.removed, 1 + psi);
    }
    for (int i = 0; i < 3; i++)
        eventq_loop_run_once(lp, 0);
    CHECK_INT("three v1 removals", r.removed, 3);
    CHECK_INT("cgroup2 removals", r2.removed, v2child[0] ? 1 + psi : 0);
    CHECK_U64("still one OOM", r.ooms, 1);
    CHECK_INT("threshold source disabled, not failed", eventq_source_error(th), 0);
    if (ev_src) {
        /* Re-enabled after its removal, a source whose fd stays ready
         * disables itself again instead of making the loop spin. */
        CHECK_INT("re-enable a removed source", eventq_source_set_enabled(ev_src, 1), 0);
        eventq_loop_run_once(lp, 0);
        CHECK_INT("then the loop is idle", eventq_loop_run_once(lp, 0), 0);
        CHECK_INT("no second removal", r2.removed, 1 + psi);
        eventq_source_free(ev_src);
    }
    printf("# v1: %llu crossings, %llu OOM, %llu pressure; cgroup2: %llu PSI\n",
           (unsigned long long)r.crossings, (unsigned long long)r.ooms,
           (unsigned long long)r.pressure, (unsigned long long)r2.psi);
    eventq_source_free(th);
    close(cmd[1]);
    close(reply[0]);
    eventq_memcg_free(cg);
    eventq_memcg_free(cg2);
    eventq_loop_free(lp);
}

/* ---- system-wide PSI ---- */

static void test_psi_system(void)
{
    eventq_loop *lp;
    eventq_source *src = NULL;
    REQUIRE("loop_new", eventq_loop_new(&lp) == 0);
    eventq_memcg_watch *w;
    int rc = eventq_memcg_watch_psi(NULL, EVENTQ_MEMCG_PSI_SOME, 150000, 2000000, &w);
    if (rc == 0)
        rc = eventq_loop_add_memcg(lp, w, rec_cb, NULL, destroy_count, &src);
    if (access("/proc/pressure/memory", F_OK) != 0) {
        CHECK_INT("no PSI: -EOPNOTSUPP", rc, -EOPNOTSUPP);
    } else {
        CHECK_INT("system-wide PSI trigger", rc, 0);
        destroyed = 0;
        CHECK_INT("remove", eventq_source_remove(src), 0);
        CHECK_INT("destroy ran on remove", destroyed, 1);
        CHECK_INT("removed again: -ESTALE", eventq_source_remove(src), -ESTALE);
        eventq_source_free(src);
    }
    eventq_loop_free(lp);
}

int main(void)
{
    check_init();
    atexit(cleanup);
    test_bad_inputs();
    test_own();
    test_v1_real();
    test_psi_system();
    eventq_memcg_free(own);
    cleanup();
    return check_done();
}
