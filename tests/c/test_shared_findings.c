/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * Regression tests of library bugs in the process-shared channel found by
 * tests/stress/hostile.c and fuzz/fuzz_shared.h, each a minimal
 * reproducer; fixed in 5b17806 and (6) 3dd7378 (the checks were named
 * "BUG: ..." until then).
 *
 * The other process is played by this one: it holds the other end too, and
 * writes the shared memory through a mapping of its own, or the shared
 * doorbell's file flags. Every call that might hang runs in a child with a
 * watchdog (alarm(2)): a call with timeout 0 that has not returned in
 * seconds is hung, not slow.
 *
 * 1. A receive on an empty ring (timeout 0) looped for ever after the
 *    other process wrote the receiver's own head word lower; a send on a
 *    full ring, after it wrote the sender's own tail lower (the refusal
 *    judged emptiness or fullness by the raw words, the queue by its own
 *    position, and retried while they differed; the state outlived the
 *    other process). Contract: "never loops or waits on a shared word
 *    without bound".
 * 2. The other process cleared O_NONBLOCK on a doorbell eventfd (a flag of
 *    the open file, shared by both) and emptied it: the next send that
 *    filled the ring blocked for ever in the doorbell's eventfd read,
 *    timeout 0 and all.
 * 3. After close, a send on a full ring returned -EAGAIN (timeout 0) or
 *    -ETIMEDOUT, and one with EVENTQ_FOREVER spun for ever; D6: after
 *    close, sends fail with -EPIPE. No hostile process needed: a consumer
 *    that closes a full channel and stops receiving.
 * 4. eventq_chan_import_fds of a memfd sealed against writing (F_SEAL_WRITE
 *    or F_SEAL_FUTURE_WRITE, with the size seals) failed with -EPERM ("this
 *    end only sends"), not -EPROTO.
 * 5. eventq_chan_import_fds given a larger struct whose extra bytes are not
 *    zero returned -E2BIG and left the four fds open, though it takes them
 *    over on every path.
 * 7. A batch send asked for the receive doorbell to be raised only if none
 *    of its pushes found it up: when the receiver drained the ring during
 *    the batch and lowered the doorbell, the rest of the batch sat behind
 *    an fd nobody raised (found by tests/stress/crash.c; the loom model
 *    a_batch_send_raises_the_fd_a_receiver_lowered_during_it has it too).
 *    Here: a sender sends 1 message, then a batch of 7, and waits for the
 *    receiver to take all 8; the receiver, on -EAGAIN, polls its receive
 *    fd, which staying unreadable for 1 s (a watchdog: a raise takes
 *    microseconds) with messages pending is the bug.
 * 6. An end imported with tail and head at the top of their range (2^61 - 1,
 *    the most a word holds below its 3 flag bits) took a send whose
 *    publication overflowed the tail word: in a release build it wrapped to
 *    position 0 and the send returned 0, for a message no receiver could
 *    take; with overflow checks it panicked, and every send returned
 *    -ENOTRECOVERABLE on an end that did not read as closed. Positions past
 *    2^60 are now out of range: refused at import, and a send that would
 *    move past it fails with -EPROTO.
 */
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "check.h" /* includes <eventq.h> */

#define HANG_S 3 /* a call with timeout 0 not returned by then: hung */

/* Both ends of a new channel (capacity 4) in this process, and a mapping
 * of its memory as the other process would have it. */
struct pair {
    eventq_chan *tx, *rx;
    volatile uint64_t *w;
    size_t bytes;
    int mem, send_bell; /* the other process's copies: the same open files */
};

static void pair_new(struct pair *p, int side_made)
{
    eventq_chan_opts o;
    eventq_chan_opts_init(&o, sizeof o);
    o.capacity = 4;
    eventq_chan *made, *taken;
    REQUIRE("new_shared", eventq_chan_new_shared(&o, side_made, &made) == 0);
    eventq_shared_fds f;
    REQUIRE("export_fds", eventq_chan_export_fds(made, &f, sizeof f) == 0);
    p->mem = dup(f.mem);
    p->send_bell = dup(f.send_bell);
    REQUIRE("import_fds", eventq_chan_import_fds(&f, sizeof f, &taken) == 0);
    struct stat st;
    REQUIRE("fstat", fstat(p->mem, &st) == 0);
    p->bytes = (size_t)st.st_size;
    p->w = mmap(NULL, p->bytes, PROT_READ | PROT_WRITE, MAP_SHARED, p->mem, 0);
    REQUIRE("mmap", p->w != MAP_FAILED);
    p->tx = side_made == EVENTQ_SIDE_SEND ? made : taken;
    p->rx = side_made == EVENTQ_SIDE_SEND ? taken : made;
}

static void pair_free(struct pair *p)
{
    munmap((void *)p->w, p->bytes);
    close(p->mem);
    close(p->send_bell);
    eventq_chan_free(p->tx);
    eventq_chan_free(p->rx);
}

/* Runs `call` in a child with a watchdog; the child exits with the call's
 * code negated (0..255), or dies by SIGALRM if it hangs. Returns the code,
 * or 1 for a hang. */
static int in_child(int (*call)(struct pair *), struct pair *p)
{
    fflush(stdout);
    pid_t pid = fork();
    REQUIRE("fork", pid >= 0);
    if (pid == 0) {
        signal(SIGALRM, SIG_DFL);
        alarm(HANG_S);
        _exit(-call(p) & 0xff);
    }
    int st;
    REQUIRE("waitpid", waitpid(pid, &st, 0) == pid);
    if (WIFSIGNALED(st) && WTERMSIG(st) == SIGALRM)
        return 1;
    return WIFEXITED(st) ? -WEXITSTATUS(st) : 1;
}

static int recv_now(struct pair *p)
{
    char b[64];
    size_t len;
    return eventq_chan_recv(p->rx, b, sizeof b, &len, 0);
}

static int send_now(struct pair *p)
{
    return eventq_chan_send(p->tx, "y", 1, 0);
}

#define TAIL_WORD (128 / 8)
#define HEAD_WORD (256 / 8)

static void own_position_rewritten(void)
{
    struct pair p;
    char b[64];
    size_t len;

    pair_new(&p, EVENTQ_SIDE_RECV);
    REQUIRE("send", eventq_chan_send(p.tx, "x", 1, 0) == 0);
    REQUIRE("recv", eventq_chan_recv(p.rx, b, sizeof b, &len, 0) == 0);
    /* Empty (tail = head = position 1); the sender writes head to 0. */
    p.w[HEAD_WORD] &= 7;
    int rc = in_child(recv_now, &p);
    CHECK_MSG("a receive (timeout 0) returns after the other process lowers the "
              "receiver's own head word on an empty ring (-EPROTO, or -EAGAIN)",
              rc != 1, "it did not return within %d s: a loop", HANG_S);
    pair_free(&p);

    pair_new(&p, EVENTQ_SIDE_SEND);
    for (int i = 0; i < 4; i++)
        REQUIRE("send", eventq_chan_send(p.tx, "x", 1, 0) == 0);
    /* Full (tail 4, head 0); the receiver writes tail to 0. */
    p.w[TAIL_WORD] &= 7;
    rc = in_child(send_now, &p);
    CHECK_MSG("a send (timeout 0) returns after the other process lowers the sender's "
              "own tail word on a full ring (-EPROTO, or -EAGAIN)",
              rc != 1, "it did not return within %d s: a loop", HANG_S);
    pair_free(&p);
}

static void doorbell_made_blocking(void)
{
    struct pair p;
    pair_new(&p, EVENTQ_SIDE_SEND);
    int bell = p.send_bell; /* the receiving process's copy: the same open file */
    for (int i = 0; i < 3; i++)
        REQUIRE("send", eventq_chan_send(p.tx, "x", 1, 0) == 0);
    uint64_t v;
    (void)!read(bell, &v, sizeof v);                                  /* empty */
    REQUIRE("F_SETFL", fcntl(bell, F_SETFL, fcntl(bell, F_GETFL) & ~O_NONBLOCK) == 0);
    int rc = in_child(send_now, &p); /* fills the ring: lowers the send doorbell */
    CHECK_MSG("a send (timeout 0) that fills the ring returns after the other process "
              "made the send doorbell blocking and emptied it",
              rc != 1, "it did not return within %d s (blocked in the doorbell eventfd's read)",
              HANG_S);
    pair_free(&p);
}

static int send_forever(struct pair *p)
{
    return eventq_chan_send(p->tx, "y", 1, EVENTQ_FOREVER);
}

static void closed_while_full(void)
{
    struct pair p;
    pair_new(&p, EVENTQ_SIDE_SEND);
    for (int i = 0; i < 4; i++)
        REQUIRE("send", eventq_chan_send(p.tx, "x", 1, 0) == 0);
    REQUIRE("close", eventq_chan_close(p.rx) == 0); /* the receiving process closes */
    int rc = eventq_chan_send(p.tx, "y", 1, 0);
    CHECK_MSG("after close, a send (timeout 0) on a full ring fails with -EPIPE (D6)",
              rc == -EPIPE, "returned %d (%s)", rc, eventq_strerror(rc));
    rc = eventq_chan_send(p.tx, "y", 1, 1000000);
    CHECK_MSG("after close, a send (timeout 1 ms) on a full ring fails with -EPIPE (D6)",
              rc == -EPIPE, "returned %d (%s)", rc, eventq_strerror(rc));
    rc = in_child(send_forever, &p);
    CHECK_MSG("after close, a send (EVENTQ_FOREVER) on a full ring returns -EPIPE (D6)",
              rc == -EPIPE, rc == 1 ? "it did not return within %d s" : "returned %d", rc == 1 ? HANG_S : rc);
    pair_free(&p);
}

#define TAIL_OFF 128
#define HEAD_OFF 256
#define KEEP_POSITIONS UINT64_MAX

/* The other end of a new channel (made with `made_side`) as a hostile
 * process would hand it over: its memory copied into a memfd of the
 * forger's, both positions at `pos` (unless KEEP_POSITIONS), sealed as the
 * library seals it and with `seals` more. Returns the import's code. */
static int forged_import(int made_side, uint64_t pos, int seals, eventq_chan **taken)
{
    eventq_chan_opts o;
    eventq_chan_opts_init(&o, sizeof o);
    o.capacity = 4;
    eventq_chan *made;
    REQUIRE("new_shared", eventq_chan_new_shared(&o, made_side, &made) == 0);
    eventq_shared_fds f;
    REQUIRE("export_fds", eventq_chan_export_fds(made, &f, sizeof f) == 0);
    struct stat st;
    REQUIRE("fstat", fstat(f.mem, &st) == 0);
    int forged = memfd_create("forged", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    REQUIRE("memfd", forged >= 0 && ftruncate(forged, st.st_size) == 0);
    char *buf = malloc((size_t)st.st_size);
    REQUIRE("copy", buf && pread(f.mem, buf, (size_t)st.st_size, 0) == st.st_size);
    if (pos != KEEP_POSITIONS) {
        uint64_t word = pos << 3;
        memcpy(buf + TAIL_OFF, &word, 8);
        memcpy(buf + HEAD_OFF, &word, 8);
    }
    REQUIRE("write", pwrite(forged, buf, (size_t)st.st_size, 0) == st.st_size);
    free(buf);
    REQUIRE("seals", fcntl(forged, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | seals | F_SEAL_SEAL) == 0);
    close(f.mem);
    f.mem = forged;
    *taken = NULL;
    int rc = eventq_chan_import_fds(&f, sizeof f, taken);
    eventq_chan_free(made);
    return rc;
}

static void write_sealed_memfd(void)
{
    static const int seals[2] = { F_SEAL_WRITE, F_SEAL_FUTURE_WRITE };
    for (int i = 0; i < 2; i++) {
        eventq_chan *taken;
        int rc = forged_import(EVENTQ_SIDE_SEND, KEEP_POSITIONS, seals[i], &taken);
        CHECK_MSG(i ? "import of a memfd with F_SEAL_FUTURE_WRITE: -EPROTO"
                    : "import of a memfd with F_SEAL_WRITE: -EPROTO",
                  rc == -EPROTO, "returned %d (%s)", rc, eventq_strerror(rc));
        eventq_chan_free(taken);
    }
}

static void top_of_the_range(void)
{
    eventq_chan *taken;
    int rc = forged_import(EVENTQ_SIDE_RECV, (1ull << 61) - 1, 0, &taken);
    CHECK_MSG("import of positions at the top of their words: -EPROTO", rc == -EPROTO,
              "returned %d (%s)", rc, eventq_strerror(rc));
    eventq_chan_free(taken);
    rc = forged_import(EVENTQ_SIDE_RECV, 1ull << 60, 0, &taken);
    CHECK_INT("import of positions at 2^60, the last in range", rc, 0);
    if (rc != 0)
        return;
    rc = eventq_chan_send(taken, "x", 1, 0);
    eventq_chan_stats s;
    REQUIRE("stats", eventq_chan_get_stats(taken, &s, sizeof s) == 0);
    CHECK_MSG("a send that would move the tail past 2^60 fails with -EPROTO, and the end "
              "reads as closed",
              rc == -EPROTO && s.closed == 1, "returned %d (%s), stats.closed %llu, stats.sent %llu",
              rc, eventq_strerror(rc), (unsigned long long)s.closed, (unsigned long long)s.sent);
    eventq_chan_free(taken);
}

static void import_larger_struct(void)
{
    eventq_chan_opts o;
    eventq_chan_opts_init(&o, sizeof o);
    eventq_chan *made, *taken = NULL;
    REQUIRE("new_shared", eventq_chan_new_shared(&o, EVENTQ_SIDE_SEND, &made) == 0);
    struct {
        eventq_shared_fds f;
        uint64_t newer_field;
    } big;
    REQUIRE("export_fds", eventq_chan_export_fds(made, &big.f, sizeof big.f) == 0);
    big.newer_field = 1;
    int rc = eventq_chan_import_fds(&big.f, sizeof big, &taken);
    CHECK_INT("a larger struct with a field set: -E2BIG", rc, -E2BIG);
    int fds[4] = { big.f.mem, big.f.recv_bell, big.f.send_bell, big.f.link }, open_fds = 0;
    for (int i = 0; i < 4; i++)
        if (fcntl(fds[i], F_GETFD) >= 0) {
            open_fds++;
            close(fds[i]);
        }
    CHECK_MSG("import_fds failing with -E2BIG takes the four fds over (closes them)",
              open_fds == 0, "%d of the 4 fds left open", open_fds);
    eventq_chan_free(taken);
    eventq_chan_free(made);
}

#define BATCH 7
#define ROUNDS 20000
#define MSG 1000

/* The receiver: takes BATCH + 1 messages a round, acks each round on `ack`;
 * exits 1 (with the round and what was pending) when its fd stayed down. */
static void receiver(eventq_chan *rx, int ack)
{
    /* On the stack: the child ends in _exit, and valgrind's leak check
     * (exit code 86) would count a malloc'd buffer as lost. */
    char b[MSG];
    size_t len;
    for (int r = 0; r < ROUNDS; r++) {
        for (int got = 0; got < BATCH + 1;) {
            if (eventq_chan_recv(rx, b, MSG, &len, 0) == 0) {
                got++;
                continue;
            }
            struct pollfd p = { .fd = eventq_chan_recv_fd(rx), .events = POLLIN };
            if (poll(&p, 1, 1000) == 0) {
                eventq_chan_stats st;
                eventq_chan_get_stats(rx, &st, sizeof st);
                printf("# round %d: the receive fd stayed unreadable for 1 s with %llu "
                       "message(s) pending\n", r, (unsigned long long)st.pending);
                fflush(stdout);
                _exit(1);
            }
        }
        if (write(ack, "a", 1) != 1)
            _exit(2);
    }
    _exit(0);
}

static void lost_wakeup_after_batch(void)
{
    eventq_chan_opts o;
    eventq_chan_opts_init(&o, sizeof o);
    o.capacity = BATCH + 1;
    o.max_msg_size = MSG;
    eventq_chan *tx, *rx;
    REQUIRE("new_shared", eventq_chan_new_shared(&o, EVENTQ_SIDE_SEND, &tx) == 0);
    eventq_shared_fds f;
    REQUIRE("export_fds", eventq_chan_export_fds(tx, &f, sizeof f) == 0);
    int ack[2];
    REQUIRE("pipe", pipe(ack) == 0);
    fflush(stdout);
    pid_t pid = fork();
    REQUIRE("fork", pid >= 0);
    if (pid == 0) {
        close(ack[0]);
        if (eventq_chan_import_fds(&f, sizeof f, &rx) != 0)
            _exit(3);
        receiver(rx, ack[1]);
    }
    close(ack[1]);
    close(f.mem);
    close(f.recv_bell);
    close(f.send_bell);
    close(f.link);
    char *m = malloc(MSG);
    memset(m, 7, MSG);
    eventq_buf bufs[BATCH];
    for (int i = 0; i < BATCH; i++)
        bufs[i] = (eventq_buf){ .data = m, .len = MSG };
    int r = 0;
    for (; r < ROUNDS; r++) {
        REQUIRE("send", eventq_chan_send(tx, m, MSG, 0) == 0);
        for (volatile int s = 0; s < (r * 37) % 400; s++) /* where the batch starts */
            ;
        REQUIRE("send_batch", eventq_chan_send_batch(tx, bufs, BATCH, 0) == BATCH);
        char a;
        if (read(ack[0], &a, 1) != 1)
            break; /* the receiver exited: it says why */
    }
    int st;
    REQUIRE("waitpid", waitpid(pid, &st, 0) == pid);
    CHECK_MSG("after a batch send the receive fd is readable while messages are pending, "
              "also when the receiver drained the ring during the batch (D4, D9)",
              WIFEXITED(st) && WEXITSTATUS(st) == 0,
              "the receiver ended with status %#x in round %d of %d", st, r, ROUNDS);
    free(m);
    eventq_chan_free(tx);
}

int main(void)
{
    check_init();
    own_position_rewritten();
    doorbell_made_blocking();
    closed_while_full();
    write_sealed_memfd();
    import_larger_struct();
    top_of_the_range();
    lost_wakeup_after_batch();
    return check_done();
}
