/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * memwatch: a tiny kubelet eviction watcher on libeventq's memory watches.
 *
 *   memwatch <cgroup dir> <bytes> [psi stall us]
 *
 * On a cgroup v1 memory directory it watches the usage threshold <bytes>
 * (kubelet's threshold notifier), OOM, memory.pressure_level "critical"
 * and a system-wide PSI trigger; on a cgroup2 directory, a PSI trigger
 * on the cgroup's memory.pressure and its memory.events counters (byte
 * thresholds are a cgroup v1 interface). The PSI trigger is "some <stall
 * us> 2000000": memory stalls of at least that long (default 100000) in
 * 2 s. Each event is printed with a timestamp and the kernel's count, so
 * none is merged away. It runs until SIGINT/SIGTERM, or until the cgroup
 * is removed.
 *
 * Example (as root, cgroup v1):
 *   d=/sys/fs/cgroup/memory/demo; mkdir $d; echo 64M > $d/memory.limit_in_bytes
 *   memwatch $d 33554432 &
 *   sh -c "echo \$\$ > $d/cgroup.procs; exec python3 -c 'b = bytearray(48 << 20)'"
 */
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <eventq.h>

struct watch {
    eventq_loop *lp;
    int sources;  /* memcg sources still live */
};

static void stamp(void)
{
    struct timespec ts;
    struct tm tm;
    char buf[32];
    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &tm);
    printf("%s.%03ldZ ", buf, ts.tv_nsec / 1000000);
}

static double mib(uint64_t bytes)
{
    return (double)bytes / (1024.0 * 1024.0);
}

static const char *level_name(uint32_t level)
{
    switch (level) {
    case EVENTQ_MEMCG_LOW: return "low";
    case EVENTQ_MEMCG_MEDIUM: return "medium";
    default: return "critical";
    }
}

static int on_event(eventq_source *src, const eventq_memcg_event *ev, void *ud)
{
    struct watch *w = ud;
    (void)src;
    stamp();
    switch (ev->kind) {
    case EVENTQ_MEMCG_THRESHOLD:
        printf("threshold %" PRIu64 " crossed %" PRIu64 "x: usage %.1f MiB, now %s\n",
               ev->threshold, ev->count, mib(ev->usage),
               ev->usage >= ev->threshold ? "above" : "below");
        break;
    case EVENTQ_MEMCG_OOM:
        printf("OOM %" PRIu64 "x: under_oom %d, oom_kill %" PRIu64 "\n", ev->count,
               ev->under_oom ? 1 : 0, ev->oom_kill);
        break;
    case EVENTQ_MEMCG_PRESSURE:
        printf("pressure %s %" PRIu64 "x\n", level_name(ev->level), ev->count);
        break;
    case EVENTQ_MEMCG_PSI:
        printf("PSI %s %" PRIu64 "us in %" PRIu64 "us window (%s)\n",
               ev->psi_kind == EVENTQ_MEMCG_PSI_FULL ? "full" : "some", ev->psi_stall_us,
               ev->psi_window_us, ev->spec);
        break;
    case EVENTQ_MEMCG_CHANGED:
        printf("memory.events:");
        for (size_t i = 0; i < ev->ndeltas; i++)
            printf(" %s %+" PRId64 " (%" PRIu64 ")", ev->deltas[i].name, ev->deltas[i].delta,
                   ev->deltas[i].value);
        printf("\n");
        break;
    case EVENTQ_MEMCG_REMOVED:
        printf("cgroup removed (%s)\n", ev->spec);
        if (--w->sources == 0)
            eventq_loop_stop(w->lp);
        break;
    }
    fflush(stdout);
    return 0;
}

static int on_signal(eventq_source *src, int signo, void *ud)
{
    struct watch *w = ud;
    (void)src;
    stamp();
    printf("signal %d: exiting\n", signo);
    eventq_loop_stop(w->lp);
    return 0;
}

/* Adds the watch a constructor made (it returned rc) as a source; reports
 * a failure, which for an optional source is only a warning. `counted`:
 * the source ends with a removal (see struct watch). */
static int add(struct watch *w, int rc, eventq_memcg_watch **mw, const char *what, int required,
               int counted)
{
    if (rc == 0)
        rc = eventq_loop_add_memcg(w->lp, *mw, on_event, w, NULL, NULL);
    if (rc == 0) {
        w->sources += counted;
        return 0;
    }
    fprintf(stderr, "memwatch: %s: %s\n", what, eventq_strerror(rc));
    return required ? rc : 0;
}

int main(int argc, char **argv)
{
    if (argc < 3 || argc > 4) {
        fprintf(stderr, "usage: %s <cgroup dir> <bytes> [psi stall us]\n", argv[0]);
        return 2;
    }
    char *end;
    uint64_t bytes = strtoull(argv[2], &end, 0);
    uint64_t stall_us = argc == 4 ? strtoull(argv[3], NULL, 0) : 100000;
    if (*end != 0) {
        fprintf(stderr, "memwatch: <bytes> must be a number: %s\n", argv[2]);
        return 2;
    }

    eventq_memcg *cg;
    int rc = eventq_memcg_open(argv[1], &cg);
    if (rc < 0) {
        fprintf(stderr, "memwatch: %s: %s\n", argv[1], eventq_strerror(rc));
        return 1;
    }
    struct watch w = { 0 };
    if (eventq_loop_new(&w.lp) != 0)
        return 1;
    /* Signals are blocked (a signalfd only sees blocked signals); this
     * program has one thread. */
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    sigprocmask(SIG_BLOCK, &set, NULL);
    eventq_loop_add_signal(w.lp, SIGINT, on_signal, &w, NULL, NULL);
    eventq_loop_add_signal(w.lp, SIGTERM, on_signal, &w, NULL, NULL);

    eventq_memcg_watch *mw;
    int v1 = eventq_memcg_dir(cg, EVENTQ_MEMCG_V1, NULL, 0) > 0;
    if (v1) {
        if (add(&w, eventq_memcg_watch_threshold(cg, bytes, &mw), &mw, "threshold", 1, 1) ||
            add(&w, eventq_memcg_watch_oom(cg, &mw), &mw, "OOM", 1, 1))
            return 1;
        add(&w,
            eventq_memcg_watch_pressure_level(cg, EVENTQ_MEMCG_CRITICAL, EVENTQ_MEMCG_MODE_DEFAULT,
                                              &mw),
            &mw, "memory.pressure_level", 0, 1);
        /* System-wide: a v1 cgroup has no PSI file of its own. It never
         * reports a removal, so it does not count as a memcg source. */
        add(&w, eventq_memcg_watch_psi(NULL, EVENTQ_MEMCG_PSI_SOME, stall_us, 2000000, &mw), &mw,
            "PSI", 0, 0);
        printf("memwatch: %s (cgroup v1): threshold %" PRIu64
               " bytes, OOM, pressure critical, PSI some %" PRIu64 "us/2s system-wide\n",
               argv[1], bytes, stall_us);
    } else {
        add(&w, eventq_memcg_watch_psi(cg, EVENTQ_MEMCG_PSI_SOME, stall_us, 2000000, &mw), &mw,
            "PSI", 0, 1);
        int psi = w.sources;
        add(&w, eventq_memcg_watch_events(cg, &mw), &mw, "memory.events", 0, 1);
        if (w.sources == 0)
            return 1;
        printf("memwatch: %s (cgroup2):", argv[1]);
        if (psi)
            printf(" PSI some %" PRIu64 "us/2s", stall_us);
        if (w.sources > psi)
            printf(" memory.events");
        printf(" (byte thresholds need cgroup v1: %" PRIu64 " ignored)\n", bytes);
    }
    fflush(stdout);
    rc = eventq_loop_run(w.lp);
    eventq_loop_free(w.lp);
    eventq_memcg_free(cg);
    return rc < 0 ? 1 : 0;
}
