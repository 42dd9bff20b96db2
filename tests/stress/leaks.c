/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * libeventq leaks: creates and frees N channels and N loops (each with a
 * source) through the C ABI, every path of their lives mixed in, and
 * compares the process before and after:
 *
 *   - open fds (/proc/self/fd): must be exactly the same;
 *   - heap bytes in use (glibc mallinfo2: every Rust allocation goes through
 *     malloc): may not grow by more than 64 KiB, less than one byte per
 *     object (any leaked allocation is at least 32 bytes, so a leak of one
 *     per object would show as megabytes);
 *   - resident set size (/proc/self/statm): printed, and may not grow by
 *     more than 8 MiB (a coarse guard; the heap figure is the exact one).
 *
 * A warm-up round of N/10 (at least 1000) of each runs first, so caches of
 * the allocator and the libc settle before the "before" figures.
 *
 * Channel lives: options with a drop hook or not; 0-3 clones; messages
 * sent, some received (copy, owned message kept past the channel's end,
 * batch), some left pending to be dropped; closed or not; freed with
 * eventq_chan_free or eventq_chan_free_final, in any handle order.
 * Loop lives: one source each, rotating through a timer, an fd (a pipe), a
 * channel source (its channel freed before or after the loop), a signal, a
 * post with a destroy hook; with or without an out handle (freed before or
 * after the loop, or removed first); run once or not. Every destroy hook
 * must run exactly once: counted.
 *
 * usage: leaks [-n N]      (default 100000)
 */
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <malloc.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <eventq.h>

static int failures;

#define EXPECT(cond, ...)                                                                       \
    do {                                                                                        \
        if (!(cond)) {                                                                          \
            if (failures++ < 20) {                                                              \
                printf("leaks: FAILED: %s (%s:%d): ", #cond, __FILE__, __LINE__);               \
                printf(__VA_ARGS__);                                                            \
                printf("\n");                                                                   \
            }                                                                                   \
        }                                                                                       \
    } while (0)

static int count_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    if (!d)
        return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        n += e->d_name[0] != '.';
    closedir(d);
    return n - 1; /* the directory's own fd */
}

static long rss_kib(void)
{
    long size, resident;
    FILE *f = fopen("/proc/self/statm", "r");
    if (!f)
        return -1;
    int ok = fscanf(f, "%ld %ld", &size, &resident) == 2;
    fclose(f);
    return ok ? resident * (sysconf(_SC_PAGESIZE) / 1024) : -1;
}

static size_t heap_in_use(void)
{
    struct mallinfo2 mi = mallinfo2();
    return mi.uordblks + mi.hblkhd;
}

static uint64_t rng = 0x1eaf;

static uint64_t rnd(void)
{
    uint64_t z = (rng += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* ---- hooks ---- */

static uint64_t drops_seen, destroys_seen, callbacks_seen;

static void on_drop(void *ud, const uint8_t *data, size_t len)
{
    (void)ud;
    (void)data;
    (void)len;
    drops_seen++;
}

static void on_destroy(void *ud)
{
    free(ud); /* userdata is heap memory owned by the source */
    destroys_seen++;
}

static int on_timer(eventq_source *s, uint64_t n, void *ud)
{
    (void)s;
    (void)n;
    (void)ud;
    callbacks_seen++;
    return 0;
}

static int on_fd(eventq_source *s, int fd, uint32_t ev, void *ud)
{
    (void)s;
    (void)fd;
    (void)ev;
    (void)ud;
    callbacks_seen++;
    return 0;
}

static int on_chan(eventq_source *s, const void *d, size_t len, void *ud)
{
    (void)s;
    (void)d;
    (void)len;
    (void)ud;
    callbacks_seen++;
    return 0;
}

static int on_signal(eventq_source *s, int signo, void *ud)
{
    (void)s;
    (void)signo;
    (void)ud;
    callbacks_seen++;
    return 0;
}

static void on_post(void *arg)
{
    (void)arg;
    callbacks_seen++;
}

/* ---- one channel's life ---- */

static uint64_t dropped_expected, dropped_counted;

static void channel_life(void)
{
    uint64_t r = rnd();
    eventq_chan_opts o;
    eventq_chan_opts_init(&o, sizeof o);
    o.capacity = 1 + r % 64;
    if (r & (1 << 6)) {
        o.drop_fn = on_drop;
        o.drop_userdata = NULL;
    }
    if (r & (1 << 7))
        o.max_bytes = 4096;
    eventq_chan *h[4];
    int nh = 1;
    int rc = eventq_chan_new(&o, &h[0]);
    EXPECT(rc == 0, "eventq_chan_new: %d", rc);
    if (rc)
        return;
    for (int i = 0; i < (int)((r >> 8) % 4); i++)
        h[nh++] = eventq_chan_clone(h[0]);
    uint8_t buf[512];
    memset(buf, (int)r, sizeof buf);
    size_t sent = 0, recvd = 0;
    size_t nsend = (r >> 10) % 20;
    for (size_t i = 0; i < nsend; i++)
        if (eventq_chan_send(h[i % (size_t)nh], buf, (r >> 16) % 512, 0) == 0)
            sent++;
    eventq_msg *kept = NULL;
    size_t len, lens[4];
    switch ((r >> 26) % 4) {
    case 0:
        if (eventq_chan_recv(h[0], buf, sizeof buf, &len, 0) == 0)
            recvd++;
        break;
    case 1:
        if (eventq_chan_recv_msg(h[nh - 1], &kept, 0) == 0)
            recvd++;
        break;
    case 2: {
        int n = eventq_chan_recv_batch(h[0], buf, sizeof buf, lens, 4, 0);
        if (n > 0)
            recvd += (size_t)n;
        break;
    }
    default:
        break;
    }
    if (r & (1 << 28))
        eventq_chan_close(h[0]);
    /* Free the handles in some order; the last one reports. */
    int start = (int)((r >> 30) % (uint64_t)nh);
    for (int i = 0; i < nh; i++) {
        eventq_chan *c = h[(start + i) % nh];
        if (i < nh - 1) {
            if (r & (1ull << 33)) {
                eventq_chan_stats st;
                EXPECT(eventq_chan_free_final(c, &st, sizeof st) == 0, "free_final of a non-last handle");
            } else {
                eventq_chan_free(c);
            }
        } else {
            eventq_chan_stats st;
            EXPECT(eventq_chan_free_final(c, &st, sizeof st) == 1, "free_final of the last handle");
            dropped_counted += st.dropped;
            dropped_expected += sent - recvd;
        }
    }
    /* An owned message outlives its channel. */
    if (kept) {
        EXPECT(eventq_msg_len(kept) == (r >> 16) % 512, "kept message length");
        eventq_msg_free(kept);
    }
}

/* ---- one loop's life ---- */

static int pipe_fds[2];
static uint64_t destroys_expected;

static void *userdata(void)
{
    void *p = malloc(24);
    if (!p)
        abort();
    destroys_expected++;
    return p;
}

static void loop_life(uint64_t i)
{
    uint64_t r = rnd();
    eventq_loop *lp;
    int rc = eventq_loop_new(&lp);
    EXPECT(rc == 0, "eventq_loop_new: %d", rc);
    if (rc)
        return;
    eventq_source *src = NULL;
    eventq_source **out = (r & 1) ? &src : NULL;
    eventq_chan *ch = NULL;
    switch (i % 5) {
    case 0:
        rc = eventq_loop_add_timer(lp, r & 2 ? 0 : 1000000000ull, (r >> 2) % 3 * 1000000ull,
                                   on_timer, userdata(), on_destroy, out);
        break;
    case 1:
        rc = eventq_loop_add_fd(lp, pipe_fds[r & 2 ? 0 : 1], r & 2 ? EVENTQ_IN : EVENTQ_OUT, on_fd,
                                userdata(), on_destroy, out);
        break;
    case 2:
        rc = eventq_chan_new(NULL, &ch);
        EXPECT(rc == 0, "chan_new: %d", rc);
        if (r & 2)
            eventq_chan_send(ch, "x", 1, 0);
        rc = eventq_loop_add_chan(lp, ch, on_chan, userdata(), on_destroy, out);
        if (r & 4) {
            eventq_chan_free(ch); /* the source keeps it alive */
            ch = NULL;
        }
        break;
    case 3:
        rc = eventq_loop_add_signal(lp, SIGUSR1, on_signal, userdata(), on_destroy, out);
        break;
    default:
        rc = eventq_loop_post(lp, on_post, userdata(), on_destroy);
        out = NULL;
        break;
    }
    EXPECT(rc == 0, "add source %d: %d", (int)(i % 5), rc);
    if (r & 8)
        EXPECT(eventq_loop_run_once(lp, 0) >= 0, "run_once");
    if (src && (r & 16)) {
        EXPECT(eventq_source_remove(src) == 0, "remove");
        EXPECT(eventq_source_remove(src) == -ESTALE, "second remove");
    }
    if (src && (r & 32)) {
        eventq_source_free(src);
        src = NULL;
    }
    eventq_loop_free(lp);
    if (src) {
        EXPECT(eventq_source_set_enabled(src, 1) == -ESTALE, "handle after loop free");
        eventq_source_free(src);
    }
    eventq_chan_free(ch);
}

static void round_of(uint64_t n)
{
    for (uint64_t i = 0; i < n; i++)
        channel_life();
    for (uint64_t i = 0; i < n; i++)
        loop_life(i);
}

int main(int argc, char **argv)
{
    uint64_t n = 100000;
    int opt;
    while ((opt = getopt(argc, argv, "n:")) != -1) {
        if (opt == 'n')
            n = strtoull(optarg, NULL, 0);
        else {
            fprintf(stderr, "usage: %s [-n N]\n", argv[0]);
            return 2;
        }
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    /* Signal sources block SIGUSR1 in this thread; block it from the start
     * so the mask is the same before and after. */
    sigset_t s;
    sigemptyset(&s);
    sigaddset(&s, SIGUSR1);
    sigprocmask(SIG_BLOCK, &s, NULL);
    if (pipe(pipe_fds)) {
        perror("pipe");
        return 2;
    }

    uint64_t warm = n / 10 < 1000 ? 1000 : n / 10;
    round_of(warm);
    int fds0 = count_fds();
    long rss0 = rss_kib();
    size_t heap0 = heap_in_use();

    round_of(n);

    int fds1 = count_fds();
    long rss1 = rss_kib();
    size_t heap1 = heap_in_use();
    long heap_growth = (long)heap1 - (long)heap0;
    int heap_known = heap0 != 0; /* 0 under ASan/valgrind, which replace malloc */

    printf("leaks: %" PRIu64 " channels and %" PRIu64 " loops (one source each) created and "
           "freed, after a warm-up of %" PRIu64 " each\n",
           n, n, warm);
    printf("leaks: open fds %d before, %d after\n", fds0, fds1);
    printf("leaks: RSS %ld KiB before, %ld KiB after (%+ld KiB)%s\n", rss0, rss1, rss1 - rss0,
           heap_known ? "" : " (not checked here)");
    if (heap_known)
        printf("leaks: heap in use %zu bytes before, %zu after (%+ld bytes)\n", heap0, heap1,
               heap_growth);
    else
        printf("leaks: heap in use: not measurable here (malloc is replaced by a sanitizer or "
               "valgrind, which check leaks themselves)\n");
    printf("leaks: destroy hooks %" PRIu64 " of %" PRIu64 ", dropped counted %" PRIu64
           " of %" PRIu64 " pending at free (drop hooks %" PRIu64 "), callbacks %" PRIu64 "\n",
           destroys_seen, destroys_expected, dropped_counted, dropped_expected, drops_seen,
           callbacks_seen);

    EXPECT(fds1 == fds0, "fd count changed");
    /* Under a sanitizer or valgrind the RSS says nothing: ASan keeps freed
     * blocks in quarantine, valgrind its own bookkeeping. */
    EXPECT(!heap_known || rss1 - rss0 <= 8 * 1024, "RSS grew by %ld KiB", rss1 - rss0);
    EXPECT(!heap_known || heap_growth <= 64 * 1024, "heap grew by %ld bytes", heap_growth);
    EXPECT(destroys_seen == destroys_expected, "destroy hooks");
    EXPECT(dropped_counted == dropped_expected, "dropped counts");
    close(pipe_fds[0]);
    close(pipe_fds[1]);
    printf("leaks: %s\n", failures ? "FAILED" : "ok: no fd, heap or hook leaked");
    return failures ? 1 : 0;
}
