/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * crash: a producer process and a consumer process on a process-shared
 * channel, one of them killed with SIGKILL at a random point of whatever
 * it is doing, round after round; then what the contract promises when a
 * process dies (docs/design.md, "Between processes") is checked against
 * records that outlive the death.
 *
 * usage: crash [-n ROUNDS] [-s SEED] [-q] [-v]
 *
 * A round: the parent (which holds no channel) makes a socket pair for
 * each consumer it may start and forks the producer and consumer 0. One of
 * them makes the channel (new_shared) and hands the other end over (with
 * eventq_chan_send_to, or eventq_chan_export_fds and the fds sent by the
 * test over the socket, then eventq_chan_import_fds). The producer sends
 * N self-checking messages (sequence number, length and bytes derived from
 * it) with single sends and batches, blocking, timed, or non-blocking with
 * poll(2) on the send fd, then closes; the consumer receives with single,
 * batch, zero-copy and too-small receives (-EMSGSIZE, the message stays),
 * the same three ways, until end of stream.
 *
 * Kills. Each round kills the producer, or 1-3 consumers, or consumers and
 * then the producer. A kill is placed by a thread of the victim that,
 * spinning already, is let go right before a chosen call and spins a
 * random number of instructions before SIGKILL while the main thread spins
 * a random number before the call (so the kill lands before, inside or
 * after even a call of a microsecond); or by a POSIX timer of the victim
 * whose signal is SIGKILL, armed at the first call once the victim's
 * progress reaches a mark, for a random delay (0 to about 2^18 ns,
 * log-uniform: it lands at that moment wherever the scheduler has the
 * victim); or by a thread that waits until the main thread sleeps inside a
 * blocking call; or by the parent at a random moment of the burst (a busy
 * loop of a random length once the victim's progress reaches a mark). The victim records the
 * call it is in (and whether a kill found it asleep there); the parent
 * counts where each kill landed: mid create, handover, send, batch send,
 * receive, batch receive, zero-copy or too-small receive, close, blocked
 * in a call, or between calls.
 *
 * After a consumer's death the parent starts the next one; the producer
 * hands it the receiving end (eventq_chan_send_to or export_fds) when its
 * send fails with -EPIPE on the full ring (it must, instead of blocking:
 * the peer is gone), or when the parent tells it after its close. The
 * last consumer drains and sees end of stream, on a readable fd, also when
 * the producer was killed (once the link hangs up).
 *
 * Records. The producer stores, in a MAP_SHARED page the parent reads after
 * the deaths, `intent` (every sequence number it passes to a call is below
 * it) before each call and `acked` (messages 0..acked-1 were returned as
 * sent) after each call returns. Each consumer stores every sequence number
 * after its receive returned (a log), and before each call the most it may
 * take without logging: 1 for a receive, the batch size for a batch, 0 for
 * close and the too-small receive, reset once the call's messages are
 * logged.
 *
 * Checks, per round (D1-D3, D6 and "Between processes"):
 *  - every message arrives whole: its length and bytes are those of its
 *    sequence number, never longer than the limit;
 *  - the log of all consumers is strictly increasing: no duplicate, order
 *    kept (one producer);
 *  - each consumer's messages are consecutive: a living consumer loses
 *    nothing;
 *  - between consumers, the numbers missing after a dead one are at most
 *    what its last call could have taken (summed over consecutive dead
 *    consumers that logged nothing): what a dead consumer took is gone,
 *    nothing else;
 *  - the last consumer, at end of stream, has everything up to `acked`
 *    (less that bound), nothing at or past `intent`, and nothing past
 *    `acked` unless the producer was killed (a message whose send had not
 *    returned arrives at most once);
 *  - every process ends as planned: a killed one by SIGKILL, the others by
 *    exit 0, or without a channel when the process that was to hand it
 *    over was killed first (its socket's end of file: -EPROTO), which
 *    leaves a round without a consumer only if the producer was killed; a
 *    hang is a failure (alarm(2) in every process, and every wait on an fd
 *    is a poll with a timeout: watchdogs, not timing).
 *
 * No sleeps as synchronisation: processes wait on fds, the socket pairs,
 * the parent's pipe and waitpid; delays (busy loops, timers) only place
 * kills.
 */
#include <inttypes.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <sys/syscall.h>
#include <time.h>

#include "shm.h"

#define MAXC 4               /* consumers a round may start */
#define MAXLOG 2048          /* messages a round sends at most */
#define SEND_BATCH_MAX 8
#define RECV_BATCH_MAX 8
#define WATCHDOG_S 60        /* a process living this long is hung */
#define WAIT_MS 30000        /* a poll(2) on a channel fd this long: a wedge */

/* What a process is doing (recorded for the kill counts). */
enum op {
    OP_START, OP_CREATE, OP_HANDOVER, OP_SEND, OP_SEND_BATCH, OP_RECV, OP_RECV_BATCH,
    OP_RECV_MSG, OP_RECV_SMALL, OP_CLOSE, OP_POLL, OP_END, NOPS
};
static const char *op_name[NOPS] = {
    "start", "create", "handover", "send", "batch send", "receive", "batch receive",
    "zero-copy receive", "too-small receive", "close", "poll(2) on its fd", "end wait"
};
/* Where a kill found its victim. */
enum where { W_IN_CALL, W_ASLEEP, W_BETWEEN, NWHERE };
static const char *where_name[NWHERE] = { "mid", "blocked in", "between calls, after" };

/* How a kill is placed. */
enum kmode {
    K_NONE,
    K_AT,      /* the victim's timer, `delay` ns from the first call at `at` */
    K_OP,      /* the victim's killer thread, `delay` spins from the first call
                  of kind `op` at `at` or later */
    K_BLOCKED, /* a thread of the victim, once its main thread sleeps in a call */
    K_PARENT,  /* the parent, `delay` spins after the victim's progress reaches `at` */
};

struct kill_plan {
    int mode, op;
    uint64_t at;
    uint64_t delay; /* ns of the victim's timer; spins of its killer thread or the parent */
    uint64_t pre;   /* spins of the victim between letting its killer thread go and the call */
};

/* One process's record, in memory the parent reads after its death. */
/* A call and the shared words around it, for the report of a wedge. */
struct traced {
    int32_t op, rc;
    uint64_t tail, head, bells; /* before the call */
    uint64_t tail_after, head_after, bells_after;
};
#define TRACE_LEN 32

struct role {
    _Atomic int op, in_call, asleep, fired, got_chan, closes;
    _Atomic uint64_t progress;
    _Atomic uint64_t taken_max; /* consumer: most messages taken and not yet logged */
    uint64_t codes[SHM_CODES];  /* return codes of its calls */
    char err[512];
    struct traced trace[TRACE_LEN]; /* its last calls, a ring */
    _Atomic uint32_t ntrace;
};

struct round {
    /* The plan, written by the parent before the forks. */
    uint64_t seed, n, capacity, max_msg, low_water;
    int consumer_creates;      /* consumer 0 makes the channel and hands the send end over */
    int by_export[MAXC];       /* handover k by export_fds (else send_to) */
    uint64_t close_at[MAXC];   /* consumer k closes the channel at this progress (0: never) */
    struct kill_plan pkill, ckill[MAXC];
    /* The producer's record. */
    struct role prod;
    _Atomic uint64_t acked, intent;
    _Atomic uint64_t handovers_mid, handovers_end; /* after -EPIPE; after close */
    /* The consumers' records and their log. */
    struct role cons[MAXC];
    uint64_t log_start[MAXC], log_end[MAXC];
    _Atomic uint64_t nlog;
    uint64_t log[MAXLOG];
};

/* ---- totals over the run (the parent's) ---- */

static struct {
    uint64_t rounds, by_type[3];
    uint64_t kills[2][NOPS][NWHERE], kills_total[2];
    uint64_t acked, delivered, inflight, lost, lost_bound, stranded, stranded_msgs, consumers;
    uint64_t handovers_mid, handovers_end, consumer_closes;
    uint64_t codes[2][SHM_CODES];
} T;

static int g_verbose, g_quiet;

/* ---- the messages ---- */

static size_t msg_len(const struct round *r, uint64_t seq)
{
    return 8 + (size_t)(shm_mix(seq ^ r->seed) % (r->max_msg - 7));
}

static size_t msg_make(const struct round *r, uint64_t seq, uint8_t *out)
{
    size_t len = msg_len(r, seq);
    uint64_t h = shm_mix(seq + r->seed);
    memcpy(out, &seq, 8);
    for (size_t i = 8; i < len; i++)
        out[i] = (uint8_t)((h >> ((i % 8) * 8)) ^ i);
    return len;
}

/* The sequence number of a whole message (D2), or dies. */
static uint64_t msg_check(const struct round *r, struct role *me, const uint8_t *m, size_t len)
{
    uint64_t seq;
    if (len > r->max_msg)
        shm_die("a message of %zu bytes, over the limit %" PRIu64, len, r->max_msg);
    if (len < 8)
        shm_die("a message of %zu bytes: none is shorter than 8 (D2)", len);
    memcpy(&seq, m, 8);
    if (seq >= MAXLOG || len != msg_len(r, seq))
        shm_die("message %" PRIu64 " is %zu bytes long, not %zu (D2)", seq, len,
                seq < MAXLOG ? msg_len(r, seq) : 0);
    uint64_t h = shm_mix(seq + r->seed);
    for (size_t i = 8; i < len; i++)
        if (m[i] != (uint8_t)((h >> ((i % 8) * 8)) ^ i))
            shm_die("message %" PRIu64 ": byte %zu differs (D2)", seq, i);
    (void)me;
    return seq;
}

/* ---- a process's calls: where it is, its kill, its watchdog ---- */

static struct round *R;
static struct role *ME;
static struct kill_plan *PLAN;

/* The kill of a K_OP or K_BLOCKED plan: a thread that, woken through a
 * pipe, says it runs (ready), spins until let go (go), then spins `delay`
 * (K_OP) or waits until the main thread sleeps inside a call, giving up
 * after a while (K_BLOCKED), and kills. Of a K_AT plan: a timer. */
static struct {
    int pipe[2];
    _Atomic int ready, go;
    pid_t main_tid;
    timer_t timer;
} K;

static void *killer(void *arg)
{
    (void)arg;
    char c;
    while (read(K.pipe[0], &c, 1) < 0 && errno == EINTR)
        ;
    atomic_store(&K.ready, 1);
    while (!atomic_load(&K.go))
        ;
    if (PLAN->mode == K_OP)
        shm_spin(PLAN->delay);
    for (int i = 0; PLAN->mode == K_BLOCKED && i < 20000; i++) {
        if (atomic_load(&ME->in_call) && shm_sleeping(shm_thread_syscall(getpid(), K.main_tid))) {
            atomic_store(&ME->asleep, 1);
            break;
        }
        sched_yield();
    }
    kill(getpid(), SIGKILL);
    for (;;)
        pause();
    return NULL;
}

/* Makes this process's kill ready: a timer whose signal is SIGKILL, or the
 * killer thread. */
static void killer_start(void)
{
    if (PLAN->mode == K_AT) {
        struct sigevent ev = { .sigev_notify = SIGEV_SIGNAL, .sigev_signo = SIGKILL };
        SHM_SYS(timer_create(CLOCK_MONOTONIC, &ev, &K.timer));
        return;
    }
    if (PLAN->mode != K_OP && PLAN->mode != K_BLOCKED)
        return;
    SHM_SYS(pipe2(K.pipe, O_CLOEXEC));
    K.main_tid = (pid_t)syscall(SYS_gettid);
    pthread_t th;
    if (pthread_create(&th, NULL, killer, NULL) != 0)
        shm_die("pthread_create");
    pthread_detach(th);
}

/* Whether the plan wants the next call to be `op` (a K_OP plan due now). */
static int plan_wants(int op)
{
    return PLAN->mode == K_OP && PLAN->op == op && !atomic_load(&ME->fired) &&
           atomic_load(&ME->progress) >= PLAN->at;
}

/* Fires the kill if due before a call of kind `op`: arms the timer, or
 * wakes the killer thread, waits until it spins, lets it go and spins
 * `pre` (a kill takes a microsecond or so to land, longer than a fast
 * call: the call starts at a random moment of that, and the kill lands
 * before, inside or after it). */
static void fire(int op)
{
    if (atomic_load(&ME->fired))
        return;
    int due = 0;
    switch (PLAN->mode) {
    case K_AT:
    case K_BLOCKED:
        due = atomic_load(&ME->progress) >= PLAN->at;
        break;
    case K_OP:
        due = plan_wants(op);
        break;
    default:
        break;
    }
    if (!due)
        return;
    atomic_store(&ME->fired, 1);
    if (PLAN->mode == K_AT) {
        struct itimerspec at = { .it_value = { .tv_sec = (time_t)(PLAN->delay / 1000000000u),
                                               .tv_nsec = (long)(PLAN->delay % 1000000000u) + 1 } };
        SHM_SYS(timer_settime(K.timer, 0, &at, NULL));
        return;
    }
    if (write(K.pipe[1], "k", 1) != 1)
        shm_die("write to the killer thread: %s", strerror(errno));
    while (!atomic_load(&K.ready))
        ;
    atomic_store(&K.go, 1);
    shm_spin(PLAN->pre);
}

/* The channel's shared words as this process maps them (found in
 * /proc/self/maps once it has the channel): tail, head, and the doorbell
 * lock and requests, read around each call for the report of a wedge. */
static const volatile uint64_t *g_words;

static void find_words(void)
{
    FILE *f = fopen("/proc/self/maps", "re");
    char line[512];
    while (f && fgets(line, sizeof line, f))
        if (strstr(line, "/memfd:eventq-chan")) {
            g_words = (const volatile uint64_t *)(uintptr_t)strtoull(line, NULL, 16);
            break;
        }
    if (f)
        fclose(f);
}

static void read_words(uint64_t *tail, uint64_t *head, uint64_t *bells)
{
    if (!g_words)
        return;
    *tail = g_words[SHM_OFF_TAIL / 8];
    *head = g_words[SHM_OFF_HEAD / 8];
    *bells = g_words[SHM_OFF_LOCK / 8] << 32 | (g_words[SHM_OFF_REQUESTS / 8] & 0xffffffffu);
}

/* Right before a call of kind `op`: fires the kill if due, records the call. */
static void begin(int op)
{
    fire(op);
    atomic_store(&ME->op, op);
    atomic_store(&ME->in_call, op != OP_POLL && op != OP_END);
    struct traced *t = &ME->trace[atomic_load(&ME->ntrace) % TRACE_LEN];
    *t = (struct traced){ .op = op };
    read_words(&t->tail, &t->head, &t->bells);
}

/* Right after: counts the return code. */
static int end(int rc)
{
    atomic_store(&ME->in_call, 0);
    ME->codes[shm_code_slot(rc)]++;
    struct traced *t = &ME->trace[atomic_load(&ME->ntrace) % TRACE_LEN];
    t->rc = rc;
    read_words(&t->tail_after, &t->head_after, &t->bells_after);
    atomic_fetch_add(&ME->ntrace, 1);
    return rc;
}

/* Prints a role's last calls: the op, its code, and the words before and
 * after (position.flags of tail and head, lock:requests). */
static void print_trace(const char *who, struct role *r)
{
    uint32_t n = atomic_load(&r->ntrace);
    fprintf(stderr, "  %s's last calls (tail, head as position.flags; lock:requests):\n", who);
    for (uint32_t i = n > TRACE_LEN ? n - TRACE_LEN : 0; i < n; i++) {
        struct traced *t = &r->trace[i % TRACE_LEN];
        fprintf(stderr, "    %-18s %4d  tail %llu.%llu head %llu.%llu bells %llx -> tail %llu.%llu head %llu.%llu bells %llx\n",
                op_name[t->op], t->rc, (unsigned long long)(t->tail >> 3), (unsigned long long)(t->tail & 7),
                (unsigned long long)(t->head >> 3), (unsigned long long)(t->head & 7), (unsigned long long)t->bells,
                (unsigned long long)(t->tail_after >> 3), (unsigned long long)(t->tail_after & 7),
                (unsigned long long)(t->head_after >> 3), (unsigned long long)(t->head_after & 7),
                (unsigned long long)t->bells_after);
    }
}

/* Dies with a message the parent prints. */
#define FAIL(...) SHM_FAIL_INTO(ME->err, __VA_ARGS__)

static void child_setup(struct role *me, struct kill_plan *plan, uint64_t seed)
{
    ME = me;
    PLAN = plan;
    shm_rng_state = seed;
    shm_watchdog("crash: watchdog: a process hung (no progress for 60 s)\n");
    alarm(WATCHDOG_S);
    killer_start();
}

/* A timeout for a call: 0 (then poll), forever, or 1 us to 0.1 ms. */
static int64_t pick_timeout(void)
{
    if (PLAN->mode == K_BLOCKED && atomic_load(&ME->fired) && !shm_one_in(4))
        return EVENTQ_FOREVER;
    switch (shm_below(4)) {
    case 0:
    case 1:
        return 0;
    case 2:
        return EVENTQ_FOREVER;
    default:
        return 1000 + (int64_t)shm_below(100000);
    }
}

/* After -EAGAIN: the fd must become readable (room, a message, close, or
 * the other process gone); a poll this long is a wedge. */
static void wait_fd(eventq_chan *ch, int fd, const char *what)
{
    begin(OP_POLL);
    if (shm_readable(fd, WAIT_MS))
        return;
    eventq_chan_stats st;
    memset(&st, 0, sizeof st);
    eventq_chan_get_stats(ch, &st, sizeof st);
    struct role *other = ME == &R->prod ? NULL : &R->prod;
    print_trace("this process", ME);
    if (other)
        print_trace("the producer", other);
    FAIL("the %s fd stayed unreadable for %d s after -EAGAIN: a wedge (sent %llu, received %llu, "
         "pending %llu, closed %llu; the producer %s %s, %llu acked)",
         what, WAIT_MS / 1000, (unsigned long long)st.sent, (unsigned long long)st.received,
         (unsigned long long)st.pending, (unsigned long long)st.closed,
         other && atomic_load(&other->in_call) ? "in" : "after", other ? op_name[atomic_load(&other->op)] : "-",
         (unsigned long long)atomic_load(&R->acked));
}

/* A few random instructions now and then, so that the other side sometimes
 * waits: an empty ring for the consumer, room for the producer. */
static void think(void)
{
    if (shm_one_in(8))
        shm_spin(shm_random_delay(15));
}

/* ---- handovers ---- */

/* Hands the other end of `ch` to the process at `sock` (consumer k).
 * -EPIPE or -ECONNRESET (sendmsg's) when that process died first. */
static int hand_over(eventq_chan *ch, int sock, int k)
{
    int rc;
    begin(OP_HANDOVER);
    if (R->by_export[k]) {
        eventq_shared_fds f;
        rc = eventq_chan_export_fds(ch, &f, sizeof f);
        if (rc == 0 && shm_send_exported(sock, &f) != 0)
            rc = -errno;
    } else {
        rc = eventq_chan_send_to(ch, sock);
    }
    return end(rc);
}

/* Hands the receiving end to consumer *cur, or the next one alive: one
 * killed before it took the end makes the send fail (the producer then
 * tries its successor, which the parent starts). */
static void give(eventq_chan *ch, int *sock, int *cur, const char *when)
{
    for (;;) {
        int rc = hand_over(ch, sock[*cur], *cur);
        close(sock[*cur]);
        sock[*cur] = -1;
        if (rc == 0)
            return;
        if (rc != -EPIPE && rc != -ECONNRESET)
            FAIL("handover to consumer %d %s: %s", *cur, when, eventq_strerror(rc));
        if (++*cur >= MAXC)
            FAIL("handover %s: every consumer died before it took the channel", when);
    }
}

/* Takes the end the process at `sock` hands over (handover k). -EPROTO
 * when that process died first (end of file on the socket). */
static int take(int sock, int k, eventq_chan **out)
{
    int rc;
    begin(OP_HANDOVER);
    if (R->by_export[k]) {
        eventq_shared_fds f;
        rc = shm_recv_exported(sock, &f) == 0 ? eventq_chan_import_fds(&f, sizeof f, out)
                                               : -EPROTO;
    } else {
        rc = eventq_chan_recv_from(sock, out);
    }
    return end(rc);
}

static eventq_chan_opts round_opts(void)
{
    eventq_chan_opts o;
    eventq_chan_opts_init(&o, sizeof o);
    o.capacity = R->capacity;
    o.max_msg_size = R->max_msg;
    o.low_water = R->low_water;
    return o;
}

/* Makes the channel with this process on `side`. */
static eventq_chan *create(int side)
{
    eventq_chan_opts o = round_opts();
    eventq_chan *ch = NULL;
    begin(OP_CREATE);
    int rc = end(eventq_chan_new_shared(&o, side, &ch));
    if (rc != 0)
        FAIL("eventq_chan_new_shared: %s", eventq_strerror(rc));
    return ch;
}

/* ---- the producer ---- */

static int is_closed(eventq_chan *ch)
{
    eventq_chan_stats st;
    if (eventq_chan_get_stats(ch, &st, sizeof st) != 0)
        FAIL("eventq_chan_get_stats");
    return st.closed != 0;
}

/* Sends messages seq.. (a call of 1 or a batch); returns how many were
 * queued, 0 if refused for room (after waiting as the call's mode says),
 * -1 when the consumer closed the channel, -2 when it is gone. */
static int send_some(eventq_chan *ch, uint64_t seq, uint8_t *buf)
{
    int batch = plan_wants(OP_SEND_BATCH) || (!plan_wants(OP_SEND) && shm_one_in(3));
    uint64_t most = SEND_BATCH_MAX; /* as large as the ring, or larger */
    uint64_t k = batch && most ? 1 + shm_below(most) : 1;
    if (k > R->n - seq)
        k = R->n - seq;
    eventq_buf bufs[SEND_BATCH_MAX];
    for (uint64_t i = 0; i < k; i++) {
        uint8_t *m = buf + i * R->max_msg;
        bufs[i] = (eventq_buf){ .data = m, .len = msg_make(R, seq + i, m) };
    }
    int64_t timeout = pick_timeout();
    atomic_store(&R->intent, seq + k);
    begin(batch ? OP_SEND_BATCH : OP_SEND);
    int rc = batch ? eventq_chan_send_batch(ch, bufs, k, timeout)
                   : eventq_chan_send(ch, bufs[0].data, bufs[0].len, timeout);
    end(rc);
    if (rc >= 0) {
        int n = batch ? rc : 1;
        if (n < 1 || (uint64_t)n > k)
            FAIL("a batch send of %" PRIu64 " returned %d", k, rc);
        return n;
    }
    if (rc == -EAGAIN && timeout == 0) {
        wait_fd(ch, eventq_chan_send_fd(ch), "send");
        return 0;
    }
    if (rc == -ETIMEDOUT && timeout > 0)
        return 0;
    if (rc == -EPIPE)
        return is_closed(ch) ? -1 : -2;
    FAIL("send of %" PRIu64 " (timeout %" PRId64 "): %s", seq, timeout, eventq_strerror(rc));
}

static void producer(int *sock, int ctl)
{
    child_setup(&R->prod, &R->pkill, R->seed * 3 + 1);
    uint8_t *buf = malloc(SEND_BATCH_MAX * R->max_msg);
    if (!buf)
        FAIL("malloc");
    eventq_chan *ch;
    if (R->consumer_creates) {
        if (take(sock[0], 0, &ch) != 0)
            _exit(3); /* consumer 0 died before it handed the channel over */
    } else {
        ch = create(EVENTQ_SIDE_SEND);
    }
    atomic_store(&ME->got_chan, 1);
    find_words();
    int cur = 0, closed_by_consumer = 0;
    if (R->consumer_creates) {
        close(sock[0]);
        sock[0] = -1;
    } else {
        give(ch, sock, &cur, "at the start");
    }
    uint64_t seq = 0;
    while (seq < R->n) {
        int n = send_some(ch, seq, buf);
        if (n > 0) {
            seq += (uint64_t)n;
            atomic_store(&R->acked, seq);
            atomic_store(&ME->progress, seq);
        } else if (n == -1) {
            closed_by_consumer = 1;
            break;
        } else if (n == -2) {
            /* The consumer is gone and the ring is full: -EPIPE, not a wait
             * for ever. The next consumer gets the receiving end. */
            if (++cur >= MAXC)
                FAIL("-EPIPE (the consumer gone) %d times: more consumers died than were killed", cur);
            give(ch, sock, &cur, "after -EPIPE");
            atomic_fetch_add(&R->handovers_mid, 1);
        }
        think();
    }
    if (!closed_by_consumer) {
        begin(OP_CLOSE);
        int rc = end(eventq_chan_close(ch));
        if (rc != 0)
            FAIL("close: %s", eventq_strerror(rc));
    }
    /* The end: hand the channel to each new consumer the parent starts, until
     * one has seen end of stream. */
    for (;;) {
        begin(OP_END);
        if (!shm_readable(ctl, WAIT_MS))
            FAIL("no word from the parent for %d s", WAIT_MS / 1000);
        char cmd[2];
        if (read(ctl, cmd, 2) != 2)
            _exit(1); /* the parent failed and left */
        if (cmd[0] == 'Q')
            break;
        int k = cmd[1];
        if (k <= cur)
            continue; /* handed over already, at -EPIPE */
        if (k >= MAXC)
            FAIL("handover %d asked for", k);
        cur = k;
        give(ch, sock, &cur, "after close");
        atomic_fetch_add(&R->handovers_end, 1);
    }
    eventq_chan_free(ch);
    free(buf);
    _exit(0);
}

/* ---- the consumers ---- */

static uint64_t g_next; /* the consumer's next sequence number (UINT64_MAX: unknown) */

/* Logs message `m` (after its receive returned). */
static void consumed(const uint8_t *m, size_t len)
{
    uint64_t seq = msg_check(R, ME, m, len);
    if (g_next != UINT64_MAX && seq != g_next)
        FAIL("received message %" PRIu64 ", expected %" PRIu64 " (%s)", seq, g_next,
             seq < g_next ? "a duplicate or reordered: D1/D3" : "one lost: D1");
    g_next = seq + 1;
    uint64_t i = atomic_load(&R->nlog);
    R->log[i] = seq;
    atomic_store(&R->nlog, i + 1);
    atomic_fetch_add(&ME->progress, 1);
}

/* End of stream: the fd is readable and stays so (D6). The other process
 * may still be inside the close that ended the stream (raising the fd), or
 * dead, which the link makes readable: a watchdog, not a timing. */
static void end_of_stream(eventq_chan *ch)
{
    int fd = eventq_chan_recv_fd(ch);
    if (!shm_readable(fd, WAIT_MS) || !shm_readable(fd, 0))
        FAIL("end of stream, but the receive fd is not readable (D4/D6)");
    eventq_chan_free(ch);
    _exit(0);
}

/* One receive call of a random kind; ends the process at end of stream. */
static void receive_some(eventq_chan *ch, uint8_t *buf, int k)
{
    uint64_t max = R->max_msg;
    int op;
    if (plan_wants(OP_RECV_BATCH) || plan_wants(OP_RECV_MSG) || plan_wants(OP_RECV_SMALL) ||
        plan_wants(OP_RECV)) {
        op = PLAN->op;
    } else {
        static const int ops[10] = { OP_RECV, OP_RECV, OP_RECV, OP_RECV, OP_RECV_BATCH,
                                     OP_RECV_BATCH, OP_RECV_BATCH, OP_RECV_MSG, OP_RECV_MSG,
                                     OP_RECV_SMALL };
        op = ops[shm_below(10)];
    }
    int64_t timeout = pick_timeout();
    size_t lens[RECV_BATCH_MAX], len = 0;
    size_t m = op == OP_RECV_BATCH ? 1 + (size_t)shm_below(RECV_BATCH_MAX) : 1;
    size_t cap = op == OP_RECV_BATCH ? max + (size_t)shm_below(m * max - max + 1) : max;
    eventq_msg *msg = NULL;
    int rc;
    atomic_store(&ME->taken_max, op == OP_RECV_SMALL ? 0 : m);
    begin(op);
    switch (op) {
    case OP_RECV:
        rc = eventq_chan_recv(ch, buf, cap, &len, timeout);
        break;
    case OP_RECV_BATCH:
        rc = eventq_chan_recv_batch(ch, buf, cap, lens, m, timeout);
        break;
    case OP_RECV_MSG:
        rc = eventq_chan_recv_msg(ch, &msg, timeout);
        break;
    default:
        rc = eventq_chan_recv(ch, buf, 7, &len, timeout); /* every message is 8 bytes or more */
        break;
    }
    end(rc);
    if (rc >= 0) {
        if (op == OP_RECV_SMALL)
            FAIL("a receive into 7 bytes returned a message of %zu", len);
        if (op == OP_RECV_BATCH) {
            if (rc < 1 || (size_t)rc > m)
                FAIL("a batch receive of %zu returned %d", m, rc);
            size_t off = 0;
            for (int i = 0; i < rc; i++) {
                if (off + lens[i] > cap)
                    FAIL("a batch receive packed %zu bytes into %zu", off + lens[i], cap);
                consumed(buf + off, lens[i]);
                off += lens[i];
            }
        } else if (op == OP_RECV_MSG) {
            consumed(eventq_msg_data(msg), eventq_msg_len(msg));
            eventq_msg_free(msg);
        } else {
            consumed(buf, len);
        }
        atomic_store(&ME->taken_max, 0);
        return;
    }
    atomic_store(&ME->taken_max, 0);
    if (rc == -EMSGSIZE && op == OP_RECV_SMALL) {
        if (len < 8 || len > max)
            FAIL("-EMSGSIZE with a needed length of %zu (limit %" PRIu64 ")", len, max);
        return; /* D7: it stays at the head; the next receive must return it */
    }
    if (rc == -EAGAIN && timeout == 0) {
        wait_fd(ch, eventq_chan_recv_fd(ch), "receive");
        return;
    }
    if (rc == -ETIMEDOUT && timeout > 0)
        return;
    if (rc == -EPIPE)
        end_of_stream(ch);
    FAIL("consumer %d: %s (timeout %" PRId64 "): %s", k, op_name[op], timeout, eventq_strerror(rc));
}

static void consumer(int k, int sock)
{
    child_setup(&R->cons[k], &R->ckill[k], R->seed * 7 + (uint64_t)k);
    uint8_t *buf = malloc(RECV_BATCH_MAX * R->max_msg);
    if (!buf)
        FAIL("malloc");
    eventq_chan *ch;
    if (k == 0 && R->consumer_creates) {
        ch = create(EVENTQ_SIDE_RECV);
        int rc = hand_over(ch, sock, 0);
        if (rc == -EPIPE || rc == -ECONNRESET)
            _exit(3); /* the producer died first */
        if (rc != 0)
            FAIL("handing the send end over: %s", eventq_strerror(rc));
    } else if (take(sock, k, &ch) != 0) {
        _exit(3); /* the producer died before it handed the channel over */
    }
    close(sock);
    atomic_store(&ME->got_chan, 1);
    find_words();
    g_next = UINT64_MAX;
    int closed = 0;
    for (;;) {
        uint64_t at = R->close_at[k];
        if (!closed && ((at && atomic_load(&ME->progress) >= at) || plan_wants(OP_CLOSE))) {
            closed = 1;
            atomic_fetch_add(&ME->closes, 1);
            atomic_store(&ME->taken_max, 0);
            begin(OP_CLOSE);
            int rc = end(eventq_chan_close(ch));
            if (rc != 0)
                FAIL("close: %s", eventq_strerror(rc));
            continue;
        }
        receive_some(ch, buf, k);
        think();
    }
}

/* ---- the parent ---- */

/* A random kill for a process: `creates` if it makes the channel,
 * `rehandover` if the round's consumer deaths make the producer hand over
 * again mid-stream. */
static void random_plan(struct kill_plan *p, int producer, int creates, int rehandover)
{
    /* The short calls twice: a kill lands inside one less often. */
    static const int pops[] = { OP_SEND, OP_SEND_BATCH, OP_CLOSE, OP_CLOSE, OP_HANDOVER,
                                OP_HANDOVER, OP_CREATE, OP_CREATE };
    static const int cops[] = { OP_RECV, OP_RECV_BATCH, OP_RECV_MSG, OP_RECV_SMALL, OP_CLOSE,
                                OP_CLOSE, OP_HANDOVER, OP_HANDOVER, OP_CREATE, OP_CREATE };
    p->at = shm_below(R->n + R->n / 4);
    p->delay = shm_random_delay(18);
    switch (shm_below(8)) {
    case 0:
    case 1:
        p->mode = K_AT;
        break;
    case 2:
    case 3:
    case 4:
        p->mode = K_OP;
        p->op = producer ? pops[shm_below(creates ? 8 : 6)] : cops[shm_below(creates ? 10 : 8)];
        /* Spins about the call's length: a send or receive takes one to a
         * few microseconds unless it waits, a close a few, a creation or a
         * handover tens. */
        p->delay = shm_random_delay(p->op == OP_HANDOVER || p->op == OP_CREATE ? 15 : 10);
        p->pre = shm_random_delay(12);
        /* The handover at the start, unless the producer hands over again. */
        if (p->op == OP_CREATE || (p->op == OP_HANDOVER && !(producer && rehandover)))
            p->at = 0;
        if (p->op == OP_CLOSE)
            p->at = producer ? 0 : shm_below(R->n / 2 + 1);
        break;
    case 5:
    case 6:
        p->mode = K_BLOCKED;
        break;
    default:
        p->mode = K_PARENT;
        p->delay = shm_random_delay(17); /* spins */
        break;
    }
}

/* What this round does: which side makes the channel, the handovers, the kills. */
static int plan_round(uint64_t seed)
{
    memset(R, 0, sizeof *R);
    R->seed = seed;
    shm_rng_state = shm_mix(seed);
    static const uint64_t caps[] = { 1, 2, 3, 4, 7, 16, 64 };
    static const uint64_t maxes[] = { 8, 16, 40, 64, 200, 1000 };
    R->capacity = caps[shm_below(7)];
    R->max_msg = maxes[shm_below(6)];
    R->low_water = shm_below(R->capacity);
    /* Mostly short rounds (a kill per round is what counts), some long
     * ones where the ring is roomy (a small one costs a wake-up a message). */
    R->n = 10 + shm_below(R->capacity >= 16 && shm_one_in(6) ? MAXLOG - 10 : 100);
    R->consumer_creates = shm_one_in(3);
    for (int k = 0; k < MAXC; k++) {
        R->by_export[k] = shm_one_in(2);
        if (shm_one_in(12))
            R->close_at[k] = 1 + shm_below(R->n);
    }
    int type = (int)shm_below(5); /* 0-1: the producer dies, 2-3: consumers, 4: both */
    type = type < 2 ? 0 : type < 4 ? 1 : 2;
    int ckills = type == 0 ? 0 : 1 + (int)shm_below(type == 1 ? MAXC - 1 : 2);
    for (int k = 0; k < ckills; k++)
        random_plan(&R->ckill[k], 0, k == 0 && R->consumer_creates, 0);
    if (type != 1) {
        random_plan(&R->pkill, 1, !R->consumer_creates, type == 2);
        if (type == 2) {
            /* After the consumers' deaths: at the handovers they cause, or
             * by the parent once the last consumer took some messages. */
            R->pkill.at = 1 + shm_below(R->n);
            if (R->pkill.mode != K_OP || R->pkill.op != OP_HANDOVER)
                R->pkill.mode = K_PARENT;
        }
    }
    return type;
}

struct child {
    pid_t pid;
    int k; /* consumer index, or -1 for the producer */
};

static pid_t spawn_consumer(int k, int *a, int *b, int ctl_w)
{
    R->log_start[k] = atomic_load(&R->nlog);
    pid_t pid = fork();
    if (pid < 0)
        shm_die("fork: %s", strerror(errno));
    if (pid == 0) {
        close(ctl_w);
        for (int i = 0; i < MAXC; i++) {
            if (a[i] >= 0)
                close(a[i]);
            if (i != k && b[i] >= 0)
                close(b[i]);
        }
        consumer(k, b[k]);
    }
    close(b[k]);
    b[k] = -1;
    T.consumers++;
    return pid;
}

/* The parent's kill: once the victim's progress reaches the plan's mark
 * (and, for the producer after consumer deaths, the last consumer runs),
 * `delay` spins, then SIGKILL. Returns 1 when it killed. */
static int parent_kill(pid_t pid, struct role *v, struct kill_plan *p, int ready)
{
    if (!ready || atomic_load(&v->fired) || atomic_load(&v->progress) < p->at)
        return 0;
    atomic_store(&v->fired, 1);
    shm_spin(p->delay);
    if (atomic_load(&v->in_call) && shm_sleeping(shm_thread_syscall(pid, pid)))
        atomic_store(&v->asleep, 1);
    kill(pid, SIGKILL);
    return 1;
}

static void count_kill(int who, struct role *v)
{
    /* Asleep in a call, if the killer saw that and the call had not
     * returned when the process died. */
    int where = !atomic_load(&v->in_call) ? W_BETWEEN : atomic_load(&v->asleep) ? W_ASLEEP
                                                                                 : W_IN_CALL;
    T.kills[who][atomic_load(&v->op)][where]++;
    T.kills_total[who]++;
}

static void round_fail(uint64_t round, const char *fmt, ...) __attribute__((format(printf, 2, 3), noreturn));
static void round_fail(uint64_t round, const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "crash: round %" PRIu64 " (seed %" PRIu64 ", capacity %" PRIu64
                    ", max_msg %" PRIu64 ", n %" PRIu64 "): FAILED: ",
            round, R->seed, R->capacity, R->max_msg, R->n);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n  replay: crash -n 1 -s %" PRIu64 " -v\n", R->seed);
    exit(1);
}

/* The records against the contract (see the top of this file). */
static void check_round(uint64_t round, int ncons, int final, int producer_killed)
{
    uint64_t acked = atomic_load(&R->acked), intent = atomic_load(&R->intent);
    int64_t prev = -1;
    uint64_t budget = 0;
    for (int k = 0; k < ncons; k++) {
        uint64_t s = R->log_start[k], e = R->log_end[k];
        for (uint64_t i = s; i < e; i++) {
            uint64_t seq = R->log[i];
            if (seq >= intent)
                round_fail(round, "consumer %d received message %" PRIu64 ", never sent (intent %" PRIu64 ")",
                           k, seq, intent);
            if ((int64_t)seq <= prev)
                round_fail(round, "consumer %d received message %" PRIu64 " after %" PRId64 " (D1/D3)",
                           k, seq, prev);
            uint64_t gap = seq - (uint64_t)(prev + 1);
            if (i > s && gap)
                round_fail(round, "consumer %d lost %" PRIu64 " message(s) before %" PRIu64 " while alive (D1)",
                           k, gap, seq);
            if (i == s && gap > budget)
                round_fail(round, "%" PRIu64 " message(s) missing before consumer %d's first (%" PRIu64
                                  "): more than the dead consumers' last calls could take (%" PRIu64 ")",
                           gap, k, seq, budget);
            if (i == s) {
                T.lost += gap;
                T.lost_bound += budget;
                budget = 0;
            }
            prev = (int64_t)seq;
        }
        if (k != final)
            budget += atomic_load(&R->cons[k].taken_max);
    }
    uint64_t delivered = R->log_end[ncons - 1] - R->log_start[0];
    T.delivered += delivered;
    T.acked += acked;
    if (final < 0) {
        T.stranded++;
        if (acked > (uint64_t)(prev + 1))
            T.stranded_msgs += acked - (uint64_t)(prev + 1);
        return;
    }
    /* The last consumer saw end of stream: it has every message up to acked. */
    uint64_t have = (uint64_t)(prev + 1);
    if (have < acked && acked - have > budget)
        round_fail(round, "end of stream after message %" PRId64 ", but %" PRIu64 " were sent (D1): %" PRIu64
                          " missing, the dead consumers' last calls could take %" PRIu64,
                   prev, acked, acked - have, budget);
    if (have < acked) {
        T.lost += acked - have;
        T.lost_bound += budget;
    }
    if (have > acked) {
        if (!producer_killed)
            round_fail(round, "message %" PRId64 " delivered, but only %" PRIu64 " sends succeeded",
                       prev, acked);
        T.inflight += have - acked;
    }
}

/* A word to the producer; EPIPE only if it is dead (its end is judged when reaped). */
static void tell(uint64_t round, int fd, const char *cmd)
{
    if (write(fd, cmd, 2) != 2 && errno != EPIPE)
        round_fail(round, "the producer's pipe: %s", strerror(errno));
}

static void run_round(uint64_t round, uint64_t seed)
{
    int type = plan_round(seed);
    T.by_type[type]++;
    if (g_verbose)
        printf("round %" PRIu64 " seed %" PRIu64 ": type %d, capacity %" PRIu64 ", max_msg %" PRIu64
               ", n %" PRIu64 ", consumer creates %d, pkill %d/%d@%" PRIu64 ", ckill0 %d/%d@%" PRIu64 "\n",
               round, seed, type, R->capacity, R->max_msg, R->n, R->consumer_creates, R->pkill.mode,
               R->pkill.op, R->pkill.at, R->ckill[0].mode, R->ckill[0].op, R->ckill[0].at);
    int a[MAXC], b[MAXC], ctl[2];
    for (int k = 0; k < MAXC; k++) {
        int sv[2];
        SHM_SYS(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv));
        a[k] = sv[0];
        b[k] = sv[1];
    }
    SHM_SYS(pipe2(ctl, O_CLOEXEC));
    fflush(stdout);
    pid_t prod = fork();
    if (prod < 0)
        shm_die("fork: %s", strerror(errno));
    if (prod == 0) {
        close(ctl[1]);
        for (int k = 0; k < MAXC; k++)
            close(b[k]);
        producer(a, ctl[0]);
    }
    close(ctl[0]);
    for (int k = 0; k < MAXC; k++) {
        close(a[k]);
        a[k] = -1;
    }
    int cur = 0, final = -1, prod_alive = 1, prod_killed = 0;
    pid_t cons = spawn_consumer(0, a, b, ctl[1]);
    int cons_alive = 1;
    time_t deadline = time(NULL) + 2 * WATCHDOG_S;
    while (prod_alive || cons_alive) {
        if (time(NULL) > deadline)
            round_fail(round, "the round did not end within %d s", 2 * WATCHDOG_S);
        int st;
        pid_t pid;
        int polling = (prod_alive && R->pkill.mode == K_PARENT && !atomic_load(&R->prod.fired)) ||
                      (cons_alive && R->ckill[cur].mode == K_PARENT && !atomic_load(&R->cons[cur].fired));
        if (polling) {
            if (prod_alive && R->pkill.mode == K_PARENT &&
                parent_kill(prod, &R->prod, &R->pkill,
                            type != 2 || (cur > 0 && atomic_load(&R->cons[cur].progress) > 0)))
                continue;
            if (cons_alive && R->ckill[cur].mode == K_PARENT &&
                parent_kill(cons, &R->cons[cur], &R->ckill[cur], atomic_load(&R->cons[cur].got_chan)))
                continue;
            pid = waitpid(-1, &st, WNOHANG);
            if (pid == 0) {
                sched_yield();
                continue;
            }
        } else {
            pid = waitpid(-1, &st, 0);
        }
        if (pid < 0) {
            if (errno == EINTR)
                continue;
            shm_die("waitpid: %s", strerror(errno));
        }
        char sbuf[64];
        int killed = WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL;
        if (pid == prod) {
            prod_alive = 0;
            if (killed && atomic_load(&R->prod.fired)) {
                prod_killed = 1;
                count_kill(0, &R->prod);
            } else if (!(WIFEXITED(st) && (WEXITSTATUS(st) == 0 ||
                                           (WEXITSTATUS(st) == 3 && R->consumer_creates)))) {
                round_fail(round, "the producer ended with %s: %s", shm_status(st, sbuf, sizeof sbuf),
                           R->prod.err[0] ? R->prod.err : "(see above)");
            }
            continue;
        }
        if (pid != cons)
            shm_die("waitpid returned an unknown child %d", (int)pid);
        cons_alive = 0;
        R->log_end[cur] = atomic_load(&R->nlog);
        if (killed && atomic_load(&R->cons[cur].fired)) {
            count_kill(1, &R->cons[cur]);
            if (cur + 1 < MAXC && prod_alive) {
                cur++;
                cons = spawn_consumer(cur, a, b, ctl[1]);
                cons_alive = 1;
                char cmd[2] = { 'H', (char)cur };
                tell(round, ctl[1], cmd);
            }
        } else if (WIFEXITED(st) && WEXITSTATUS(st) == 0) {
            final = cur;
            tell(round, ctl[1], "Q");
        } else if (!(WIFEXITED(st) && WEXITSTATUS(st) == 3)) {
            round_fail(round, "consumer %d ended with %s: %s", cur, shm_status(st, sbuf, sizeof sbuf),
                       R->cons[cur].err[0] ? R->cons[cur].err : "(see above)");
        }
    }
    close(ctl[1]);
    for (int k = 0; k < MAXC; k++)
        if (b[k] >= 0)
            close(b[k]);
    /* A consumer ends without the channel only when the producer died first. */
    if (final < 0 && !prod_killed && !(R->consumer_creates && !R->prod.got_chan))
        round_fail(round, "no consumer reached end of stream, and the producer was not killed");
    check_round(round, cur + 1, final, prod_killed);
    for (int w = 0; w < 2; w++) {
        struct role *roles = w ? R->cons : &R->prod;
        for (int k = 0; k <= (w ? cur : 0); k++)
            for (int i = 0; i < SHM_CODES; i++)
                T.codes[w][i] += roles[k].codes[i];
    }
    for (int k = 0; k <= cur; k++)
        T.consumer_closes += (uint64_t)atomic_load(&R->cons[k].closes);
    T.handovers_mid += atomic_load(&R->handovers_mid);
    T.handovers_end += atomic_load(&R->handovers_end);
    T.rounds++;
}

static void print_kills(int who)
{
    printf("  %s killed %" PRIu64 " times:", who ? "consumers" : "producer", T.kills_total[who]);
    for (int op = 0; op < NOPS; op++)
        for (int w = 0; w < NWHERE; w++)
            if (T.kills[who][op][w])
                printf(" %s %s %" PRIu64 ";", where_name[w], op_name[op], T.kills[who][op][w]);
    printf("\n");
}

int main(int argc, char **argv)
{
    shm_prog = "crash";
    struct shm_args a = shm_parse(argc, argv, 200, "ROUNDS");
    g_quiet = a.quiet;
    g_verbose = a.verbose;
    R = shm_shared_zeroed(sizeof *R);
    double t0 = shm_seconds();
    for (uint64_t i = 0; i < a.n; i++) {
        double t = shm_seconds();
        run_round(i, a.seed + i);
        if (g_verbose)
            printf("  round %" PRIu64 ": %.1f ms\n", i, (shm_seconds() - t) * 1e3);
        if (!g_quiet && !g_verbose && (i + 1) % 1000 == 0) {
            printf("crash: %" PRIu64 " rounds\n", i + 1);
            fflush(stdout);
        }
    }
    printf("crash: %" PRIu64 " rounds (seeds %" PRIu64 "..%" PRIu64 ") in %.1f s: producer killed in %"
           PRIu64 ", consumers in %" PRIu64 ", both in %" PRIu64 "; %" PRIu64 " consumer processes\n",
           T.rounds, a.seed, a.seed + a.n - 1, shm_seconds() - t0, T.by_type[0], T.by_type[1],
           T.by_type[2], T.consumers);
    print_kills(0);
    print_kills(1);
    printf("  messages: %" PRIu64 " sent (send returned success), %" PRIu64 " received and checked "
           "(whole, in order, once); %" PRIu64 " taken by dead consumers (their last calls could take %"
           PRIu64 "); %" PRIu64 " delivered whose send had not returned; %" PRIu64
           " rounds left without a consumer (the producer died before it handed the channel to"
           " one: %" PRIu64 " sent messages no process could receive); %" PRIu64 " consumer closes\n",
           T.acked, T.delivered, T.lost, T.lost_bound, T.inflight, T.stranded, T.stranded_msgs,
           T.consumer_closes);
    printf("  handovers to a new consumer: %" PRIu64 " after -EPIPE on the full ring (the consumer gone), %"
           PRIu64 " after close\n", T.handovers_mid, T.handovers_end);
    shm_print_codes("producer return codes", T.codes[0]);
    shm_print_codes("consumer return codes", T.codes[1]);
    printf("crash: every check passed\n");
    return 0;
}
