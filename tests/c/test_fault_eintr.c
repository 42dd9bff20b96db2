/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * Fault: EINTR in every blocking call of the C ABI.
 *
 * A SIGUSR1 handler is installed WITHOUT SA_RESTART, so every signal makes a
 * blocking syscall of the target thread (futex, epoll_wait) fail with EINTR.
 * For each blocking call, a thread makes the call and blocks; the test
 * waits until the kernel shows that thread asleep in a syscall
 * (/proc/self/task/TID/syscall), sends it the signal with pthread_kill,
 * waits until the handler ran and the thread is asleep again, several times
 * over; only then does it make the call completable (a message, room, a
 * post, a released callback). The call must not have returned early (no
 * -EINTR, no spurious 0), must return success, and nothing may be lost or
 * duplicated: the message arrives whole, the refused send is queued once,
 * the counters agree.
 *
 * No sleeps: every wait observes a state (an atomic flag, the thread's
 * syscall, the handler count). The calls given a timeout get 60 s, a hang
 * guard only; the watchdog of check.h catches a hang.
 */
#include "check.h" /* includes <eventq.h> */

#include <sched.h>
#include <stdatomic.h>
#include <sys/syscall.h>

#define SIGNALS 5                     /* interruptions per blocked call */
#define LONG_NS (60LL * 1000000000LL) /* a timeout that never expires here */

static atomic_int hits;

static void on_usr1(int sig)
{
    (void)sig;
    atomic_fetch_add(&hits, 1);
}

/* ---- a thread blocked in one call ---- */

struct blocker;
typedef int (*call_fn)(struct blocker *b);

struct blocker {
    pthread_t th;
    call_fn fn;
    const eventq_chan *ch;
    const eventq_loop *lp;
    const eventq_source *src;
    int64_t timeout;
    atomic_int tid;
    atomic_int done;
    int rc;
    /* results of receives */
    uint8_t buf[256];
    size_t len;
    size_t lens[4];
};

static void *blocker_main(void *arg)
{
    struct blocker *b = arg;
    atomic_store(&b->tid, (int)gettid());
    b->rc = b->fn(b);
    atomic_store(&b->done, 1);
    return NULL;
}

/* 1 if thread tid sleeps in a syscall the library blocks in. */
static int asleep_in_syscall(int tid)
{
    char path[64], line[64] = "";
    snprintf(path, sizeof path, "/proc/self/task/%d/syscall", tid);
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    if (!fgets(line, sizeof line, f))
        line[0] = 0;
    fclose(f);
    long nr = strtol(line, NULL, 10);
    if (line[0] < '0' || line[0] > '9')
        return 0; /* "running" */
    return nr == SYS_futex || nr == SYS_epoll_wait || nr == SYS_epoll_pwait
#ifdef SYS_epoll_pwait2
           || nr == SYS_epoll_pwait2
#endif
           || nr == SYS_poll || nr == SYS_ppoll;
}

/* Waits until b is asleep in a syscall (0), or has returned (-1). */
static int wait_asleep(struct blocker *b)
{
    int tid;
    while ((tid = atomic_load(&b->tid)) == 0)
        sched_yield();
    for (;;) {
        if (atomic_load(&b->done))
            return -1;
        if (asleep_in_syscall(tid))
            return 0;
        sched_yield();
    }
}

static void start(struct blocker *b, call_fn fn)
{
    atomic_store(&b->tid, 0);
    atomic_store(&b->done, 0);
    b->fn = fn;
    REQUIRE("pthread_create", pthread_create(&b->th, NULL, blocker_main, b) == 0);
}

/* Interrupts b's blocked call SIGNALS times. Returns 0 if it stayed
 * blocked throughout, -1 if it returned early. */
static int interrupt(struct blocker *b)
{
    for (int i = 0; i < SIGNALS; i++) {
        if (wait_asleep(b))
            return -1;
        int before = atomic_load(&hits);
        REQUIRE("pthread_kill", pthread_kill(b->th, SIGUSR1) == 0);
        while (atomic_load(&hits) == before)
            sched_yield();
    }
    /* Asleep again after the last signal: it did not return. */
    return wait_asleep(b);
}

static void finish(struct blocker *b)
{
    pthread_join(b->th, NULL);
}

/* ---- the calls ---- */

static int call_recv(struct blocker *b)
{
    return eventq_chan_recv(b->ch, b->buf, sizeof b->buf, &b->len, b->timeout);
}

static int call_recv_msg(struct blocker *b)
{
    eventq_msg *m = NULL;
    int rc = eventq_chan_recv_msg(b->ch, &m, b->timeout);
    if (rc == 0) {
        b->len = eventq_msg_len(m);
        if (b->len <= sizeof b->buf)
            memcpy(b->buf, eventq_msg_data(m), b->len);
        eventq_msg_free(m);
    }
    return rc;
}

static int call_recv_batch(struct blocker *b)
{
    return eventq_chan_recv_batch(b->ch, b->buf, sizeof b->buf, b->lens, 4, b->timeout);
}

static const char BLOCKED_MSG[] = "the message of the blocked sender";

static int call_send(struct blocker *b)
{
    return eventq_chan_send(b->ch, BLOCKED_MSG, sizeof BLOCKED_MSG, b->timeout);
}

static int call_send_batch(struct blocker *b)
{
    eventq_buf m[2] = { { BLOCKED_MSG, sizeof BLOCKED_MSG }, { "second", 7 } };
    return eventq_chan_send_batch(b->ch, m, 2, b->timeout);
}

static int call_run(struct blocker *b)
{
    return eventq_loop_run(b->lp);
}

static int call_run_once(struct blocker *b)
{
    return eventq_loop_run_once(b->lp, b->timeout);
}

static int call_remove(struct blocker *b)
{
    return eventq_source_remove(b->src);
}

/* ---- receives blocked on an empty channel ---- */

static void recv_case(const char *name, call_fn fn, int64_t timeout, int batch)
{
    char what[160];
    eventq_chan *ch;
    REQUIRE("chan_new", eventq_chan_new(NULL, &ch) == 0);
    struct blocker b = { .ch = ch, .timeout = timeout };
    start(&b, fn);
    int early = interrupt(&b);
    snprintf(what, sizeof what, "%s: stays blocked through %d signals (no -EINTR)", name, SIGNALS);
    CHECK_MSG(what, early == 0, "returned early with %d (%s)", b.rc, eventq_strerror(b.rc));

    static const char m[] = "after the signals";
    CHECK_INT("send to the blocked receiver", eventq_chan_send(ch, m, sizeof m, 0), 0);
    finish(&b);
    size_t len = batch ? b.lens[0] : b.len;
    snprintf(what, sizeof what, "%s: returns the message", name);
    CHECK_INT(what, b.rc, batch ? 1 : 0);
    snprintf(what, sizeof what, "%s: message whole", name);
    CHECK(what, len == sizeof m && memcmp(b.buf, m, sizeof m) == 0);
    eventq_chan_stats st;
    REQUIRE("stats", eventq_chan_get_stats(ch, &st, sizeof st) == 0);
    snprintf(what, sizeof what, "%s: nothing lost or duplicated (sent 1, received 1, pending 0)",
             name);
    CHECK(what, st.sent == 1 && st.received == 1 && st.pending == 0);
    eventq_chan_free(ch);
}

/* ---- sends blocked on a full channel ---- */

static void send_case(const char *name, call_fn fn, int64_t timeout, int bytes_limit)
{
    char what[160];
    eventq_chan_opts o;
    eventq_chan_opts_init(&o, sizeof o);
    o.capacity = 4;
    if (bytes_limit) {
        o.capacity = 64;
        o.max_bytes = 64;
    }
    eventq_chan *ch;
    REQUIRE("chan_new", eventq_chan_new(&o, &ch) == 0);
    /* Fill it: 4 messages of 16 bytes (both limits reached). */
    uint8_t fill[16];
    for (int i = 0; i < 4; i++) {
        memset(fill, 'a' + i, sizeof fill);
        REQUIRE("fill", eventq_chan_send(ch, fill, sizeof fill, 0) == 0);
    }
    REQUIRE("full", eventq_chan_send(ch, fill, sizeof fill, 0) == -EAGAIN);

    struct blocker b = { .ch = ch, .timeout = timeout };
    start(&b, fn);
    int early = interrupt(&b);
    snprintf(what, sizeof what, "%s: stays blocked through %d signals (no -EINTR)", name, SIGNALS);
    CHECK_MSG(what, early == 0, "returned early with %d (%s)", b.rc, eventq_strerror(b.rc));

    /* Make room: with a byte limit, 3 messages must go for the 34-byte one
     * to fit (64 - 16 >= 34 needs one; receive enough for the batch too). */
    uint8_t buf[64];
    size_t len;
    int frees = bytes_limit ? 4 : 2;
    for (int i = 0; i < frees; i++) {
        CHECK_INT("receive to make room", eventq_chan_recv(ch, buf, sizeof buf, &len, 0), 0);
        CHECK("the filler arrives whole and in order",
              len == 16 && buf[0] == 'a' + i && buf[15] == 'a' + i);
    }
    finish(&b);
    snprintf(what, sizeof what, "%s: the blocked send succeeds", name);
    CHECK_MSG(what, b.rc >= 0 && (fn == call_send ? b.rc == 0 : b.rc >= 1), "rc %d", b.rc);
    int queued = fn == call_send ? 1 : b.rc;
    /* What is left: the unreceived fillers, then the blocked message once. */
    for (int i = frees; i < 4; i++) {
        CHECK_INT("receive a filler", eventq_chan_recv(ch, buf, sizeof buf, &len, 0), 0);
        CHECK("filler whole", len == 16 && buf[0] == 'a' + i);
    }
    CHECK_INT("receive the blocked message", eventq_chan_recv(ch, buf, sizeof buf, &len, 0), 0);
    snprintf(what, sizeof what, "%s: the blocked message arrives whole", name);
    CHECK(what, len == sizeof BLOCKED_MSG && memcmp(buf, BLOCKED_MSG, len) == 0);
    if (queued == 2) {
        CHECK_INT("receive the batch's second", eventq_chan_recv(ch, buf, sizeof buf, &len, 0), 0);
        CHECK("second whole", len == 7 && memcmp(buf, "second", 7) == 0);
    }
    snprintf(what, sizeof what, "%s: queued exactly once (then empty)", name);
    CHECK_INT(what, eventq_chan_recv(ch, buf, sizeof buf, &len, 0), -EAGAIN);
    eventq_chan_stats st;
    REQUIRE("stats", eventq_chan_get_stats(ch, &st, sizeof st) == 0);
    CHECK("counters agree: sent = received = 4 + queued",
          st.sent == (uint64_t)(4 + queued) && st.received == st.sent && st.pending == 0);
    eventq_chan_free(ch);
}

/* ---- the loop ---- */

struct cbdata {
    atomic_int calls;
    atomic_int destroys;
    atomic_int in_cb;
    uint8_t got[64];
    size_t len;
    int stop;
    const eventq_loop *lp;
    int release_fd; /* the fd callback blocks on, for the remove case */
};

static int on_chan(eventq_source *s, const void *data, size_t len, void *ud)
{
    struct cbdata *d = ud;
    (void)s;
    if (data && len <= sizeof d->got) {
        memcpy(d->got, data, len);
        d->len = len;
    }
    atomic_fetch_add(&d->calls, 1);
    if (d->stop)
        eventq_loop_stop(d->lp);
    return 0;
}

static void on_destroy(void *ud)
{
    struct cbdata *d = ud;
    atomic_fetch_add(&d->destroys, 1);
}

static void loop_case(const char *name, call_fn fn, int64_t timeout)
{
    char what[160];
    eventq_loop *lp;
    eventq_chan *ch;
    REQUIRE("loop_new", eventq_loop_new(&lp) == 0);
    REQUIRE("chan_new", eventq_chan_new(NULL, &ch) == 0);
    struct cbdata d = { .lp = lp, .stop = fn == call_run };
    eventq_source *src;
    REQUIRE("add_chan", eventq_loop_add_chan(lp, ch, on_chan, &d, on_destroy, &src) == 0);

    struct blocker b = { .lp = lp, .timeout = timeout };
    start(&b, fn);
    int early = interrupt(&b);
    snprintf(what, sizeof what, "%s: stays blocked through %d signals (no -EINTR)", name, SIGNALS);
    CHECK_MSG(what, early == 0, "returned early with %d (%s)", b.rc, eventq_strerror(b.rc));

    static const char m[] = "for the loop";
    CHECK_INT("send to the loop's channel", eventq_chan_send(ch, m, sizeof m, 0), 0);
    finish(&b);
    if (fn == call_run) {
        snprintf(what, sizeof what, "%s: returns 0 after the callback stopped it", name);
        CHECK_INT(what, b.rc, 0);
    } else if (early == 0) {
        snprintf(what, sizeof what, "%s: returns 1 (the one callback)", name);
        CHECK_INT(what, b.rc, 1);
    } else {
        /* It returned 0 early; the message is still queued for the next. */
        CHECK_INT("the message waits for the next run_once", eventq_loop_run_once(lp, 0), 1);
    }
    snprintf(what, sizeof what, "%s: the message delivered once, whole", name);
    CHECK(what, atomic_load(&d.calls) == 1 && d.len == sizeof m && memcmp(d.got, m, d.len) == 0);
    eventq_source_free(src);
    CHECK_INT("destroy ran once", atomic_load(&d.destroys), 1);
    eventq_chan_free(ch);
    eventq_loop_free(lp);
}

/* eventq_source_remove from another thread waits for the running callback;
 * interrupt that wait. */
static int on_fd_block(eventq_source *s, int fd, uint32_t revents, void *ud)
{
    struct cbdata *d = ud;
    char c;
    (void)s;
    (void)fd;
    (void)revents;
    atomic_fetch_add(&d->calls, 1);
    atomic_store(&d->in_cb, 1);
    /* Blocks until the test releases it (signals go to another thread). */
    while (read(d->release_fd, &c, 1) < 0 && errno == EINTR)
        ;
    return 0;
}

static void remove_case(void)
{
    const char *name = "eventq_source_remove waiting for a running callback";
    char what[160];
    eventq_loop *lp;
    REQUIRE("loop_new", eventq_loop_new(&lp) == 0);
    int ready[2], release[2];
    REQUIRE("pipe", pipe(ready) == 0 && pipe(release) == 0);
    REQUIRE("make ready", write(ready[1], "x", 1) == 1);
    struct cbdata d = { .lp = lp, .release_fd = release[0] };
    eventq_source *src;
    REQUIRE("add_fd",
            eventq_loop_add_fd(lp, ready[0], EVENTQ_IN, on_fd_block, &d, on_destroy, &src) == 0);

    struct blocker loop = { .lp = lp, .timeout = EVENTQ_FOREVER };
    start(&loop, call_run_once);
    while (!atomic_load(&d.in_cb))
        sched_yield();
    struct blocker b = { .src = src };
    start(&b, call_remove);
    int early = interrupt(&b);
    snprintf(what, sizeof what, "%s: stays blocked through %d signals", name, SIGNALS);
    CHECK_MSG(what, early == 0, "returned early with %d (%s)", b.rc, eventq_strerror(b.rc));
    CHECK_INT("destroy has not run while the callback runs", atomic_load(&d.destroys), 0);
    REQUIRE("release the callback", write(release[1], "x", 1) == 1);
    finish(&b);
    finish(&loop);
    snprintf(what, sizeof what, "%s: returns 0", name);
    CHECK_INT(what, b.rc, 0);
    CHECK_INT("the loop's run_once returns 1", loop.rc, 1);
    CHECK_INT("destroy ran once", atomic_load(&d.destroys), 1);
    /* The fd is still readable: the removed source must not run again. */
    CHECK_INT("a removed source does not run again", eventq_loop_run_once(lp, 0), 0);
    CHECK_INT("its callback ran once", atomic_load(&d.calls), 1);
    eventq_source_free(src);
    eventq_loop_free(lp);
    close(ready[0]);
    close(ready[1]);
    close(release[0]);
    close(release[1]);
}

int main(void)
{
    check_init();
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_usr1;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = 0; /* no SA_RESTART: blocking syscalls fail with EINTR */
    REQUIRE("sigaction", sigaction(SIGUSR1, &sa, NULL) == 0);

    recv_case("eventq_chan_recv(FOREVER)", call_recv, EVENTQ_FOREVER, 0);
    recv_case("eventq_chan_recv(60 s)", call_recv, LONG_NS, 0);
    recv_case("eventq_chan_recv_msg(FOREVER)", call_recv_msg, EVENTQ_FOREVER, 0);
    recv_case("eventq_chan_recv_msg(60 s)", call_recv_msg, LONG_NS, 0);
    recv_case("eventq_chan_recv_batch(FOREVER)", call_recv_batch, EVENTQ_FOREVER, 1);
    recv_case("eventq_chan_recv_batch(60 s)", call_recv_batch, LONG_NS, 1);

    send_case("eventq_chan_send(FOREVER), full by count", call_send, EVENTQ_FOREVER, 0);
    send_case("eventq_chan_send(60 s), full by count", call_send, LONG_NS, 0);
    send_case("eventq_chan_send(FOREVER), full by bytes", call_send, EVENTQ_FOREVER, 1);
    send_case("eventq_chan_send_batch(FOREVER), full by count", call_send_batch, EVENTQ_FOREVER, 0);
    send_case("eventq_chan_send_batch(60 s), full by bytes", call_send_batch, LONG_NS, 1);

    loop_case("eventq_loop_run", call_run, 0);
    /* These two found a bug (fixed in 06f4965): epoll_wait's EINTR made
     * run_once return 0 with nothing dispatched, before any event, although
     * the header says it waits without limit (FOREVER) or until the timeout
     * ("0 on timeout"). */
    loop_case("eventq_loop_run_once(FOREVER)", call_run_once, EVENTQ_FOREVER);
    loop_case("eventq_loop_run_once(60 s)", call_run_once, LONG_NS);

    remove_case();
    CHECK_MSG("signals were delivered to blocked threads", atomic_load(&hits) >= SIGNALS, "hits %d",
              atomic_load(&hits));
    return check_done();
}
