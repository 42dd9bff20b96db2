/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * Fuzz target: the libeventq C ABI driven by arbitrary operation sequences,
 * checked against a model as it goes.
 *
 * The input is a byte string read as a program: each operation is one byte
 * (the opcode) and its arguments, read as needed; a callback that runs
 * during an operation reads its own bytes too (what it does: return 0, fail
 * with a negative code, remove or disable its own source, try to re-enter
 * the loop, change its budget). Running out of input ends the program;
 * everything still alive is freed and checked.
 *
 * The model is exact for what the header and docs/design.md promise:
 *
 *  - each channel has a shadow queue (the bytes of every accepted message),
 *    its limits, its closed flag and the two doorbell states (the design's
 *    table: raised on empty->non-empty or close, lowered when drained
 *    while open; send fd lowered when full or a send is refused, raised at
 *    low water or close); every return code, received message, needed
 *    length (-EMSGSIZE), batch count and counter (eventq_chan_get_stats,
 *    eventq_chan_free_final) is predicted and compared, and after every
 *    operation each fd's readiness (poll) must equal the model (D4, D5);
 *  - messages leave a channel only by a receive, a channel source's
 *    callback, or the drop hook when the last reference goes: each must be
 *    the shadow's head, byte for byte (D1, D2, D3, D7);
 *  - loops: channel sources deliver exactly min(budget, pending) messages
 *    per run_once, then end of stream once (D8); disabled or removed
 *    sources never run; destroy hooks run exactly once; posts run in order
 *    and are destroyed once; stop makes the next run return; run_once's
 *    count equals the callbacks that ran; the loop fd's readiness matches
 *    the model when only channel sources and posts are in play.
 *
 * Bad inputs tried (only misuse the header says is checked): NULL handles,
 * NULL out-parameters, NULL data with a length, NULL buffers with a
 * capacity, NULL lens with max_msgs > 0, NULL callbacks, lengths past the
 * maximum message size (up to SIZE_MAX), batch counts past INT_MAX,
 * timeouts below EVENTQ_FOREVER (down to INT64_MIN), zero capacity and
 * capacity above EVENTQ_MAX_CAPACITY,
 * max_msg_size above max_bytes, low_water not below capacity, unknown event
 * flags, no event flag, bad fds (-1, unopened), an fd epoll cannot watch
 * (/dev/null), the loop's own fd, an epoll cycle between two loops,
 * uncatchable or out-of-range signals, a second source for one signal or one
 * channel, zero budgets, calls on removed sources and on sources of freed
 * loops (-ESTALE), wrong source kinds, re-entrant run/run_once (-EBUSY),
 * strerror of any int. Never: a freed handle reused, a buffer shorter than
 * the length passed (the header makes those the caller's fault).
 *
 * An input that starts with "EQSH" is a program on a process-shared channel
 * instead: fuzz_shared.h (its handovers, forged memories and writes to the
 * shared memory, against a model of its own).
 *
 * Built two ways: with libFuzzer (clang -fsanitize=fuzzer, `make fuzz`), and
 * with fuzz/driver.c (any C compiler), which runs the committed corpus as
 * regression inputs in `make test`.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <eventq.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* ---- failures ---- */

#define FAIL(...)                                                                              \
    do {                                                                                       \
        fprintf(stderr, "fuzz_abi: model mismatch at %s:%d (op %lu): ", __FILE__, __LINE__,   \
                g_opno);                                                                       \
        fprintf(stderr, __VA_ARGS__);                                                          \
        fprintf(stderr, "\n");                                                                 \
        abort();                                                                               \
    } while (0)

#define EXPECT(cond, ...)                                                                      \
    do {                                                                                       \
        if (!(cond)) {                                                                         \
            fprintf(stderr, "fuzz_abi: failed: %s\n", #cond);                                 \
            FAIL(__VA_ARGS__);                                                                 \
        }                                                                                      \
    } while (0)

#define EXPECT_RC(expr, want)                                                                  \
    do {                                                                                       \
        long long got_ = (long long)(expr);                                                    \
        long long want_ = (long long)(want);                                                   \
        if (got_ != want_)                                                                     \
            FAIL("%s returned %lld (%s), the model says %lld (%s)", #expr, got_,               \
                 eventq_strerror((int)got_), want_, eventq_strerror((int)want_));              \
    } while (0)

static unsigned long g_opno;
static int g_trace; /* FUZZ_TRACE=1 in the environment: log each operation */

#define TRACE(...)                                                                             \
    do {                                                                                       \
        if (g_trace) {                                                                         \
            fprintf(stderr, "  [%lu] ", g_opno);                                               \
            fprintf(stderr, __VA_ARGS__);                                                      \
            fprintf(stderr, "\n");                                                            \
        }                                                                                      \
    } while (0)

/* ---- input ---- */

struct input {
    const uint8_t *p;
    size_t n;
};

static struct input g_in;

static uint8_t u8(void)
{
    if (g_in.n == 0)
        return 0;
    g_in.n--;
    return *g_in.p++;
}

static uint16_t u16(void)
{
    uint16_t a = u8();
    return (uint16_t)(a | (uint16_t)u8() << 8);
}

static uint32_t u32(void)
{
    uint32_t a = u16();
    return a | (uint32_t)u16() << 16;
}

static uint64_t u64(void)
{
    uint64_t a = u32();
    return a | (uint64_t)u32() << 32;
}

/* ---- the channel model ---- */

#define NCH 4     /* channels alive at once */
#define NH 4      /* user handles per channel */
#define NLP 3     /* loops */
#define NSRC 8    /* sources per loop */
#define BUF_MAX 8192

struct mmsg {
    size_t len;
    uint8_t *data;
};

struct mchan {
    int live; /* the channel exists (a user handle or a source holds it) */
    int id;
    eventq_chan *h[NH];
    int nh;
    int srcrefs;
    size_t cap, max_bytes /* 0: none */, max_msg, low_water, lwb;
    int has_drop;
    struct mmsg *q;
    size_t qhead, qlen, qalloc;
    size_t bytes;
    int closed, recv_raised, send_raised;
    uint64_t sent, received, peak, rrings, srings;
    uint64_t drops;
    /* Two loop sources took from it at once: a loop that stops with
     * messages left then writes the receive fd for the other (D4's
     * hand-on), which this model does not count, so its receive rings are
     * checked as a lower bound from then on. */
    int shared_by_loops;
};

/* The receive-fd writes the library made agree with the model's. */
static int rrings_match(const struct mchan *c, uint64_t rings)
{
    return c->shared_by_loops ? rings >= c->rrings : rings == c->rrings;
}

static struct mchan g_ch[NCH];

static struct mmsg *q_at(struct mchan *c, size_t i)
{
    return &c->q[c->qhead + i];
}

static void q_push(struct mchan *c, const void *data, size_t len)
{
    if (c->qhead + c->qlen == c->qalloc) {
        if (c->qhead > 0) {
            memmove(c->q, c->q + c->qhead, c->qlen * sizeof *c->q);
            c->qhead = 0;
        }
        if (c->qlen == c->qalloc) {
            c->qalloc = c->qalloc ? c->qalloc * 2 : 16;
            c->q = realloc(c->q, c->qalloc * sizeof *c->q);
            if (!c->q)
                abort();
        }
    }
    struct mmsg *m = &c->q[c->qhead + c->qlen];
    m->len = len;
    m->data = malloc(len ? len : 1);
    if (!m->data)
        abort();
    if (len)
        memcpy(m->data, data, len);
    c->qlen++;
}

static void q_pop(struct mchan *c)
{
    free(q_at(c, 0)->data);
    c->qhead++;
    c->qlen--;
}

static int m_fits(struct mchan *c, size_t len)
{
    return c->qlen < c->cap && (!c->max_bytes || c->bytes + len <= c->max_bytes);
}

static int m_full(struct mchan *c)
{
    return c->qlen >= c->cap || (c->max_bytes && c->bytes >= c->max_bytes);
}

static void m_raise_recv(struct mchan *c)
{
    if (!c->recv_raised) {
        c->recv_raised = 1;
        c->rrings++;
    }
}

static void m_lower_send(struct mchan *c)
{
    if (c->send_raised && !c->closed)
        c->send_raised = 0;
}

static void m_raise_send(struct mchan *c)
{
    if (!c->send_raised) {
        c->send_raised = 1;
        c->srings++;
    }
}

static void m_push(struct mchan *c, const void *data, size_t len)
{
    q_push(c, data, len);
    c->bytes += len;
    c->sent++;
    if (c->qlen > c->peak)
        c->peak = c->qlen;
}

static void m_after_push(struct mchan *c, size_t n)
{
    if (n == 0)
        return;
    m_raise_recv(c);
    if (m_full(c))
        m_lower_send(c);
}

/* Checks a message that left the channel against the head, and pops it. */
static void m_take(struct mchan *c, const void *data, size_t len, const char *how)
{
    EXPECT(c->qlen > 0, "%s delivered a message the model does not have", how);
    struct mmsg *m = q_at(c, 0);
    EXPECT(len == m->len, "%s: length %zu, the head has %zu (D2)", how, len, m->len);
    EXPECT(len == 0 || memcmp(data, m->data, len) == 0, "%s: bytes differ from the head (D2/D3)",
           how);
    EXPECT(data != NULL || len == 0, "%s: NULL data with a length", how);
    c->bytes -= len;
    q_pop(c);
}

static void m_after_pop(struct mchan *c, size_t n)
{
    if (n == 0)
        return;
    c->received += n;
    if (c->qlen == 0 && !c->closed)
        c->recv_raised = 0;
    if (c->qlen <= c->low_water && c->bytes <= c->lwb)
        m_raise_send(c);
}

static void m_close(struct mchan *c)
{
    if (c->closed)
        return;
    c->closed = 1;
    /* Close writes both fds, raised or not (D9). */
    c->recv_raised = c->send_raised = 1;
    c->rrings++;
    c->srings++;
}

static void m_discard(struct mchan *c)
{
    while (c->qlen)
        q_pop(c);
    free(c->q);
    c->q = NULL;
    c->qhead = c->qalloc = 0;
}

static eventq_chan *any_handle(struct mchan *c)
{
    return c->nh ? c->h[u8() % c->nh] : NULL;
}

static int readable(int fd)
{
    struct pollfd p = { .fd = fd, .events = POLLIN, .revents = 0 };
    int n;
    do {
        n = poll(&p, 1, 0);
    } while (n < 0 && errno == EINTR);
    EXPECT(n >= 0 && !(p.revents & POLLNVAL), "poll(%d) failed", fd);
    return (p.revents & POLLIN) != 0;
}

/* The channel's counters and fds equal the model's. */
static void m_check(struct mchan *c)
{
    if (!c->live || c->nh == 0)
        return;
    eventq_chan *h = c->h[0];
    eventq_chan_stats st;
    EXPECT_RC(eventq_chan_get_stats(h, &st, sizeof st), 0);
    EXPECT(st.sent == c->sent && st.received == c->received && st.pending == c->qlen &&
               st.pending_bytes == c->bytes && st.dropped == 0 && st.peak_depth == c->peak &&
               rrings_match(c, st.recv_doorbell_rings) && st.send_doorbell_rings == c->srings &&
               st.closed == (uint64_t)c->closed,
           "stats of channel %d: sent %llu/%llu received %llu/%llu pending %llu/%zu bytes "
           "%llu/%zu peak %llu/%llu rings %llu/%llu %llu/%llu closed %llu/%d",
           c->id, (unsigned long long)st.sent, (unsigned long long)c->sent,
           (unsigned long long)st.received, (unsigned long long)c->received,
           (unsigned long long)st.pending, c->qlen, (unsigned long long)st.pending_bytes,
           c->bytes, (unsigned long long)st.peak_depth, (unsigned long long)c->peak,
           (unsigned long long)st.recv_doorbell_rings, (unsigned long long)c->rrings,
           (unsigned long long)st.send_doorbell_rings, (unsigned long long)c->srings,
           (unsigned long long)st.closed,
           c->closed);
    /* D4: the receive fd is readable iff messages are pending or closed. */
    EXPECT(c->recv_raised == (c->qlen > 0 || c->closed), "model D4");
    EXPECT(readable(eventq_chan_recv_fd(h)) == c->recv_raised,
           "recv fd of channel %d readable %d, model %d (pending %zu, closed %d) (D4)", c->id,
           readable(eventq_chan_recv_fd(h)), c->recv_raised, c->qlen, c->closed);
    /* D5: the send fd is down while full and open, up at low water. */
    EXPECT(!(m_full(c) && !c->closed) || !c->send_raised, "model D5");
    EXPECT(readable(eventq_chan_send_fd(h)) == c->send_raised,
           "send fd of channel %d readable %d, model %d (pending %zu/%zu, bytes %zu/%zu) (D5)",
           c->id, readable(eventq_chan_send_fd(h)), c->send_raised, c->qlen, c->cap, c->bytes,
           c->max_bytes);
}

static void on_drop(void *ud, const uint8_t *data, size_t len)
{
    struct mchan *c = ud;
    m_take(c, data, len, "the drop hook");
    c->drops++;
}

/* The last reference went: every pending message must have been dropped. */
static void m_gone(struct mchan *c)
{
    if (c->has_drop)
        EXPECT(c->qlen == 0, "channel %d went away with %zu messages not passed to the drop hook",
               c->id, c->qlen);
    m_discard(c);
    c->live = 0;
}

/* ---- timeouts ---- */

/* A timeout for a call that would block iff `would_block`: FOREVER only when
 * it would not (a single thread cannot unblock itself), else 0 or a few
 * nanoseconds; sometimes a bad one. Returns the timeout and, in *bad,
 * whether it is invalid. */
static int64_t pick_timeout(int would_block, int *bad)
{
    uint8_t t = u8();
    *bad = 0;
    switch (t % 8) {
    case 0:
    case 1:
        return would_block ? 0 : EVENTQ_FOREVER;
    case 2:
    case 3:
        return 0;
    case 4:
        return 1 + t / 8; /* nanoseconds: times out at once */
    case 5:
        return would_block ? 100 : INT64_MAX; /* "forever" in all but name */
    case 6:
        *bad = 1;
        return -2 - (int64_t)(t / 8);
    default:
        *bad = 1;
        return INT64_MIN;
    }
}

static int blocked_rc(int64_t timeout)
{
    return timeout == 0 ? -EAGAIN : -ETIMEDOUT;
}

/* ---- channel operations ---- */

static uint8_t g_buf[BUF_MAX];

static struct mchan *pick_chan(void)
{
    struct mchan *c = &g_ch[u8() % NCH];
    return c->live && c->nh ? c : NULL;
}

static void op_chan_new(void)
{
    int slot = u8() % NCH;
    struct mchan *c = &g_ch[slot];
    if (c->live)
        return;
    uint8_t how = u8();
    eventq_chan_opts o;
    EXPECT_RC(eventq_chan_opts_init(&o, sizeof o), 0);
    EXPECT(o.capacity == EVENTQ_DEFAULT_CAPACITY && o.max_bytes == 0 && o.max_msg_size == 0 &&
               o.low_water == EVENTQ_LOW_WATER_DEFAULT && o.drop_fn == NULL,
           "eventq_chan_opts_init defaults");
    int use_null_opts = (how & 7) == 0;
    if (!use_null_opts) {
        uint8_t k = u8();
        o.capacity = k < 8 ? 0 : k < 240 ? 1 + (size_t)k % 32 : k < 250 ? 1 + (size_t)u16() : SIZE_MAX >> (k % 4);
        uint8_t b = u8();
        o.max_bytes = b < 128 ? 0 : b < 250 ? 1 + (size_t)u16() % 4096 : SIZE_MAX;
        uint8_t m = u8();
        o.max_msg_size = m < 160 ? 0 : m < 250 ? (size_t)u16() % 4200 : SIZE_MAX;
        uint8_t l = u8();
        o.low_water = l < 160 ? EVENTQ_LOW_WATER_DEFAULT : l < 250 ? u8() % 40 : (size_t)-1 - 1;
        if (how & 8) {
            o.drop_fn = on_drop;
            o.drop_userdata = c;
        }
    }
    /* The model's verdict. */
    size_t cap = o.capacity, mb = o.max_bytes, mm = o.max_msg_size;
    int want = 0;
    if (!use_null_opts) {
        if (cap == 0 || cap > EVENTQ_MAX_CAPACITY)
            want = -EINVAL;
        else if (mm && mb && mm > mb)
            want = -EINVAL;
        else if (o.low_water != EVENTQ_LOW_WATER_DEFAULT && o.low_water >= cap)
            want = -EINVAL;
    }
    if (how & 16) {
        /* NULL out. */
        EXPECT_RC(eventq_chan_new(use_null_opts ? NULL : &o, NULL), -EINVAL);
        return;
    }
    eventq_chan *h = (eventq_chan *)0x1;
    int rc = eventq_chan_new(use_null_opts ? NULL : &o, &h);
    EXPECT_RC(rc, want);
    if (rc != 0) {
        EXPECT(h == (eventq_chan *)0x1, "eventq_chan_new wrote *out on failure");
        return;
    }
    memset(c, 0, sizeof *c);
    c->live = 1;
    c->id = slot;
    c->h[0] = h;
    c->nh = 1;
    if (use_null_opts) {
        c->cap = EVENTQ_DEFAULT_CAPACITY;
        c->max_bytes = 0;
        c->max_msg = EVENTQ_DEFAULT_MAX_MSG_SIZE;
        c->low_water = c->cap / 2;
    } else {
        c->cap = cap;
        c->max_bytes = mb;
        c->max_msg = mm ? mm : mb && mb < EVENTQ_DEFAULT_MAX_MSG_SIZE ? mb : EVENTQ_DEFAULT_MAX_MSG_SIZE;
        c->low_water = o.low_water == EVENTQ_LOW_WATER_DEFAULT ? cap / 2 : o.low_water;
        c->has_drop = o.drop_fn != NULL;
    }
    c->lwb = c->max_bytes ? c->max_bytes / 2 : SIZE_MAX;
    c->send_raised = 1;
    c->srings = 1;
}

static void op_chan_clone(void)
{
    struct mchan *c = pick_chan();
    if (!c || c->nh == NH)
        return;
    eventq_chan *h = eventq_chan_clone(any_handle(c));
    EXPECT(h != NULL, "eventq_chan_clone returned NULL");
    c->h[c->nh++] = h;
}

static void op_chan_free(void)
{
    struct mchan *c = pick_chan();
    if (!c)
        return;
    int i = u8() % c->nh;
    eventq_chan *h = c->h[i];
    uint8_t how = u8() % 4;
    int last = c->nh == 1 && c->srcrefs == 0;
    if (how == 0) {
        /* free_final with a NULL out frees nothing. */
        EXPECT_RC(eventq_chan_free_final(h, NULL, sizeof(struct eventq_chan_stats)), -EINVAL);
        return;
    }
    c->h[i] = c->h[--c->nh];
    if (how == 1) {
        eventq_chan_free(h);
    } else {
        eventq_chan_stats st;
        memset(&st, 0x5a, sizeof st);
        size_t pending = c->qlen;
        uint64_t drops = c->drops;
        int rc = eventq_chan_free_final(h, &st, sizeof st);
        EXPECT_RC(rc, last ? 1 : 0);
        if (last) {
            EXPECT(st.sent == c->sent && st.received == c->received && st.pending == 0 &&
                       st.pending_bytes == 0 && st.dropped == pending &&
                       st.peak_depth == c->peak && st.closed == (uint32_t)c->closed &&
                       rrings_match(c, st.recv_doorbell_rings) &&
                       st.send_doorbell_rings == c->srings,
                   "final stats of channel %d: dropped %llu, pending was %zu", c->id,
                   (unsigned long long)st.dropped, pending);
            if (c->has_drop)
                EXPECT(c->drops - drops == pending, "drop hook calls %llu, pending %zu",
                       (unsigned long long)(c->drops - drops), pending);
        } else {
            EXPECT(st.sent == 0x5a5a5a5a5a5a5a5aull, "free_final wrote *out for a non-last handle");
        }
    }
    if (last)
        m_gone(c);
}

/* Fills g_buf with `len` input-derived bytes. */
static void fill(size_t len)
{
    uint8_t seed = u8();
    for (size_t i = 0; i < len; i++)
        g_buf[i] = (uint8_t)(seed + i * 31u + (i >> 7));
}

static size_t pick_len(struct mchan *c)
{
    uint8_t k = u8();
    size_t len;
    if (k < 16)
        len = 0;
    else if (k < 200)
        len = u8();
    else
        len = u16() % BUF_MAX;
    if (len > c->max_msg && (k & 1) && c->max_msg <= BUF_MAX)
        len = c->max_msg; /* the largest allowed */
    return len;
}

static void op_send(void)
{
    struct mchan *c = pick_chan();
    if (!c)
        return;
    eventq_chan *h = any_handle(c);
    size_t len = pick_len(c);
    uint8_t how = u8();
    fill(len);
    const void *data = len ? g_buf : ((how & 1) ? NULL : g_buf);
    int null_data_bad = 0;
    if ((how & 6) == 6 && len > 0) {
        data = NULL; /* NULL with a length: -EINVAL */
        null_data_bad = 1;
    }
    int would_block = !c->closed && !m_fits(c, len);
    int bad_t;
    int64_t t = pick_timeout(would_block, &bad_t);
    int want;
    if (null_data_bad)
        want = -EINVAL;
    else if (len > c->max_msg)
        want = -EMSGSIZE;
    else if (bad_t)
        want = -EINVAL;
    else if (c->closed)
        want = -EPIPE;
    else if (would_block)
        want = blocked_rc(t);
    else
        want = 0;
    TRACE("send chan %d len %zu timeout %lld -> %d", c->id, len, (long long)t, want);
    EXPECT_RC(eventq_chan_send(h, data, len, t), want);
    if (want == 0) {
        m_push(c, data, len);
        m_after_push(c, 1);
    } else if (want == -EAGAIN || want == -ETIMEDOUT) {
        m_lower_send(c);
    }
}

static void op_send_huge(void)
{
    struct mchan *c = pick_chan();
    if (!c || c->max_msg >= SIZE_MAX / 2)
        return;
    /* Lengths past the maximum: checked before anything is read. */
    uint8_t k = u8();
    size_t len = k % 3 == 0 ? SIZE_MAX : k % 3 == 1 ? (size_t)PTRDIFF_MAX + 1 : c->max_msg + 1 + k;
    EXPECT_RC(eventq_chan_send(any_handle(c), g_buf, len, 0), -EMSGSIZE);
    eventq_buf b[2] = { { g_buf, len }, { g_buf, 1 } };
    EXPECT_RC(eventq_chan_send_batch(any_handle(c), b, 2, 0), -EMSGSIZE);
}

static void op_send_batch(void)
{
    struct mchan *c = pick_chan();
    if (!c)
        return;
    eventq_chan *h = any_handle(c);
    uint8_t how = u8();
    size_t count = how % 9;
    eventq_buf b[8];
    size_t off = 0;
    int null_bad = 0;
    for (size_t i = 0; i < count; i++) {
        size_t len = pick_len(c);
        if (off + len > BUF_MAX)
            len = 0;
        uint8_t seed = u8();
        for (size_t j = 0; j < len; j++)
            g_buf[off + j] = (uint8_t)(seed ^ (j * 13u));
        b[i].data = len || (seed & 1) ? g_buf + off : NULL;
        b[i].len = len;
        if ((seed & 0xf0) == 0xf0 && len > 0) {
            b[i].data = NULL;
            null_bad = 1;
        }
        off += len;
    }
    /* First: how much the model would take. */
    size_t sendable = count;
    for (size_t i = 0; i < count; i++)
        if (b[i].len > c->max_msg) {
            sendable = i;
            break;
        }
    int would_block = count && sendable && !c->closed && !m_fits(c, b[0].len);
    int cut_short = 0;
    int bad_t;
    int64_t t = pick_timeout(would_block, &bad_t);
    size_t pass_count = count;
    const eventq_buf *pass = b;
    int want;
    if (bad_t) {
        want = -EINVAL;
    } else if ((how & 0x30) == 0x30) {
        pass_count = (size_t)INT_MAX + 1 + (how >> 6); /* past INT_MAX: checked first */
        want = -EINVAL;
    } else if ((how & 0x30) == 0x20 && count) {
        pass = NULL; /* NULL msgs with a count */
        want = -EINVAL;
    } else if (null_bad) {
        want = -EINVAL;
    } else if (count == 0) {
        want = 0;
    } else if (sendable == 0) {
        want = -EMSGSIZE;
    } else if (c->closed) {
        want = -EPIPE;
    } else if (would_block) {
        want = blocked_rc(t);
    } else {
        size_t n = 0;
        while (n < sendable && m_fits(c, b[n].len)) {
            m_push(c, b[n].data, b[n].len);
            n++;
        }
        want = (int)n;
        cut_short = n < sendable;
    }
    if (count == 0 && (how & 0x30) != 0x30 && (how & 1))
        pass = NULL; /* NULL msgs with count 0 is fine */
    TRACE("send_batch chan %d count %zu timeout %lld -> %d", c->id, pass_count, (long long)t, want);
    EXPECT_RC(eventq_chan_send_batch(h, pass, pass_count, t), want);
    if (want > 0)
        m_after_push(c, (size_t)want);
    /* Refused for lack of room, or cut short by it: the send fd is lowered
     * (its next raise is the caller's event, D9). */
    if (want == -EAGAIN || want == -ETIMEDOUT || cut_short)
        m_lower_send(c);
}

/* The outcome of waiting for a message: 0 (one is there) or the error.
 * Called once per receive that gets this far. */
static int recv_wait_rc(struct mchan *c, int64_t t)
{
    if (c->qlen)
        return 0;
    if (c->closed) {
        /* End of stream is passed on: the fd is written again (D6). */
        c->rrings++;
        return -EPIPE;
    }
    return blocked_rc(t);
}

static void op_recv(void)
{
    struct mchan *c = pick_chan();
    if (!c)
        return;
    eventq_chan *h = any_handle(c);
    uint8_t how = u8();
    size_t head = c->qlen ? q_at(c, 0)->len : 0;
    size_t cap;
    switch (how % 4) {
    case 0: cap = head; break;                       /* exact */
    case 1: cap = head ? head - 1 : 0; break;        /* one short */
    case 2: cap = u8(); break;
    default: cap = BUF_MAX; break;
    }
    int bad_t;
    int64_t t = pick_timeout(!c->qlen && !c->closed, &bad_t);
    size_t len = 12345;
    int want;
    void *buf = cap ? g_buf : ((how & 4) ? NULL : g_buf);
    if (how & 0x40) {
        /* NULL len */
        EXPECT_RC(eventq_chan_recv(h, buf, cap, NULL, t), -EINVAL);
        return;
    }
    if ((how & 0x30) == 0x30 && cap == 0) {
        cap = 1 + u8();
        buf = NULL; /* NULL buffer with a capacity */
        want = -EINVAL;
    } else if (bad_t) {
        want = -EINVAL;
    } else {
        want = recv_wait_rc(c, t);
        if (want == 0 && head > cap)
            want = -EMSGSIZE;
    }
    TRACE("recv chan %d cap %zu timeout %lld -> %d", c->id, cap, (long long)t, want);
    EXPECT_RC(eventq_chan_recv(h, buf, cap, &len, t), want);
    if (want == 0) {
        m_take(c, g_buf, len, "eventq_chan_recv");
        m_after_pop(c, 1);
    } else if (want == -EMSGSIZE) {
        EXPECT(len == head, "-EMSGSIZE reported %zu needed, the head has %zu (D7)", len, head);
    } else {
        EXPECT(len == 12345, "eventq_chan_recv wrote *len on error %d", want);
    }
}

static void op_recv_msg(void)
{
    struct mchan *c = pick_chan();
    if (!c)
        return;
    eventq_chan *h = any_handle(c);
    uint8_t how = u8();
    int bad_t;
    int64_t t = pick_timeout(!c->qlen && !c->closed, &bad_t);
    if (how & 0x80) {
        EXPECT_RC(eventq_chan_recv_msg(h, NULL, t), -EINVAL);
        return;
    }
    eventq_msg *m = (eventq_msg *)0x1;
    int want = bad_t ? -EINVAL : recv_wait_rc(c, t);
    EXPECT_RC(eventq_chan_recv_msg(h, &m, t), want);
    if (want == 0) {
        size_t len = eventq_msg_len(m);
        const uint8_t *d = eventq_msg_data(m);
        EXPECT(d != NULL, "eventq_msg_data is NULL");
        m_take(c, d, len, "eventq_chan_recv_msg");
        m_after_pop(c, 1);
        eventq_msg_free(m);
    } else {
        EXPECT(m == (eventq_msg *)0x1, "recv_msg wrote *out on error");
    }
}

static void op_recv_batch(void)
{
    struct mchan *c = pick_chan();
    if (!c)
        return;
    eventq_chan *h = any_handle(c);
    uint8_t how = u8();
    size_t max = how % 17;
    size_t head = c->qlen ? q_at(c, 0)->len : 0;
    size_t cap;
    switch ((how >> 5) % 4) {
    case 0: cap = head; break;
    case 1: cap = head ? head - 1 : 0; break;
    case 2: cap = u16() % BUF_MAX; break;
    default: cap = BUF_MAX; break;
    }
    size_t lens[16];
    for (int i = 0; i < 16; i++)
        lens[i] = 777;
    int bad_t;
    int64_t t = pick_timeout(max && !c->qlen && !c->closed, &bad_t);
    void *buf = cap ? g_buf : NULL;
    size_t *lp = lens;
    size_t pass_max = max;
    int want;
    int ran_dry = 0;
    uint8_t bad = u8() % 8;
    if (bad == 0 && cap == 0) {
        cap = 8;
        buf = NULL; /* NULL buffer with a capacity */
        want = -EINVAL;
    } else if (bad_t) {
        want = -EINVAL;
    } else if (bad == 1) {
        lp = NULL; /* NULL lens with max > 0 (or a huge max) */
        if (max == 0)
            pass_max = SIZE_MAX;
        want = -EINVAL;
    } else if (max == 0) {
        if (bad == 2)
            lp = NULL;
        want = 0;
    } else {
        want = recv_wait_rc(c, t);
        if (want == 0) {
            if (head > cap) {
                want = -EMSGSIZE;
            } else {
                size_t n = 0, off = 0;
                while (n < max && n < c->qlen && q_at(c, n)->len <= cap - off) {
                    off += q_at(c, n)->len;
                    n++;
                }
                want = (int)n;
                ran_dry = n < max && n == c->qlen;
            }
        }
    }
    EXPECT_RC(eventq_chan_recv_batch(h, buf, cap, lp, pass_max, t), want);
    if (want > 0) {
        size_t off = 0;
        for (int i = 0; i < want; i++) {
            m_take(c, g_buf + off, lens[i], "eventq_chan_recv_batch");
            off += lens[i];
        }
        EXPECT(off <= cap, "recv_batch packed %zu bytes into %zu", off, cap);
        m_after_pop(c, (size_t)want);
        /* Cut short at end of stream: the fd, up, is written again (D9). */
        if (ran_dry && c->closed)
            c->rrings++;
        EXPECT(lens[want < 16 ? want : 15] == 777 || want == 16, "recv_batch wrote past its count");
    } else if (want == -EMSGSIZE) {
        EXPECT(lens[0] == head, "recv_batch -EMSGSIZE needs %zu, head %zu (D7)", lens[0], head);
    } else if (lp) {
        EXPECT(lens[0] == 777, "recv_batch wrote lens on %d", want);
    }
}

static void op_close(void)
{
    struct mchan *c = pick_chan();
    if (!c)
        return;
    TRACE("close chan %d", c->id);
    EXPECT_RC(eventq_chan_close(any_handle(c)), 0);
    m_close(c);
}

/* ---- the loop model ---- */

enum { K_CHAN, K_TIMER, K_FD, K_SIGNAL };

struct mloop;

struct msrc {
    int live;          /* in its loop */
    int used;          /* slot in use (live, or a handle still held) */
    eventq_source *h;  /* the out handle, NULL if none */
    struct mloop *l;
    int kind;
    int chan;          /* K_CHAN */
    int fd;            /* the fd it watches (chan: recv fd) */
    uint32_t events;   /* K_FD */
    int watches_loop;  /* K_FD on another loop's fd: its index + 1 */
    int signo;
    int periodic;      /* K_TIMER */
    int enabled;
    int registered;    /* in the epoll set */
    int eos;
    int error;
    size_t budget;
    int destroys;
    /* during one run_once */
    int calls;
    int stopped;       /* an action ended its dispatch */
    int eos_now;
    size_t pending_before;
    int closed_before;
    int enabled_before;
    int registered_before;
    int eos_before;
    size_t budget_before;
    int live_before;
};

struct mloop {
    int live;
    int id;
    eventq_loop *lp;
    struct msrc src[NSRC];
    int stop_pending;
    int wake_raised;
    int posts_pending;
    int posts_run;
    int posts_destroyed;
    int posts_made;
    int other_kinds; /* live timer/fd/signal sources: loop fd not modelled */
    int in_run;      /* inside run_once: callbacks count */
    int run_calls;
};

static struct mloop g_lp[NLP];
static int g_devnull = -1, g_pipe[2] = { -1, -1 };

static void src_destroy(void *ud)
{
    struct msrc *s = ud;
    s->destroys++;
    EXPECT(s->destroys == 1, "destroy hook ran %d times", s->destroys);
    EXPECT(!s->live, "destroy hook ran for a source the model says is live");
}

/* The model's bookkeeping when a source goes away. */
static void src_gone(struct msrc *s)
{
    s->live = 0;
    if (s->kind == K_CHAN) {
        struct mchan *c = &g_ch[s->chan];
        c->srcrefs--;
    } else {
        s->l->other_kinds--;
    }
}

static void chan_check_gone(void)
{
    for (int i = 0; i < NCH; i++)
        if (g_ch[i].live && g_ch[i].nh == 0 && g_ch[i].srcrefs == 0)
            m_gone(&g_ch[i]);
}

/* A callback's scripted behaviour, read from the input when it runs. */
/* Another source of the same loop with a handle, for actions on it. */
static struct msrc *other_src(struct msrc *s, uint8_t k)
{
    struct msrc *o = &s->l->src[k % NSRC];
    return o != s && o->live && o->h && !o->watches_loop ? o : NULL;
}

static int cb_action(struct msrc *s, eventq_source *self)
{
    uint8_t a = u8();
    TRACE("  callback of loop %d slot %d: action %d", s->l->id, (int)(s - s->l->src), a % 16);
    switch (a % 16) {
    case 10: {
        /* Disable another source: if its event is in this batch, it must
         * not run (D8). */
        struct msrc *o = other_src(s, a / 16);
        if (o) {
            EXPECT_RC(eventq_source_set_enabled(o->h, 0), 0);
            o->enabled = 0;
            o->registered = 0;
            o->stopped = 1;
        }
        return 0;
    }
    case 11: {
        /* Remove another source: its destroy runs before remove returns,
         * and its callback never again, even for an event already fetched
         * in this iteration (D8). */
        struct msrc *o = other_src(s, a / 16);
        if (o) {
            o->live = 0;
            EXPECT_RC(eventq_source_remove(o->h), 0);
            o->live = 1;
            src_gone(o);
            o->stopped = 1;
            EXPECT(o->destroys == 1, "remove from another callback: destroy ran %d times",
                   o->destroys);
        }
        return 0;
    }
    case 12: {
        int rc = a < 64 ? -5 : a < 128 ? -1 : INT_MIN;
        s->enabled = 0;
        s->registered = 0;
        s->error = rc == INT_MIN ? -EIO : rc;
        s->stopped = 1;
        return rc;
    }
    case 13:
        s->live = 0; /* before the call: destroy runs after this callback */
        EXPECT_RC(eventq_source_remove(self), 0);
        s->live = 1;
        src_gone(s);
        s->stopped = 1;
        EXPECT(s->destroys == 0, "destroy ran inside its own callback");
        return 0;
    case 14:
        EXPECT_RC(eventq_source_set_enabled(self, 0), 0);
        s->enabled = 0;
        s->registered = 0;
        s->stopped = 1;
        return 0;
    case 15:
        EXPECT_RC(eventq_loop_run_once(s->l->lp, 0), -EBUSY);
        EXPECT_RC(eventq_loop_run(s->l->lp), -EBUSY);
        if (s->kind == K_CHAN) {
            size_t b = 1 + a / 16;
            EXPECT_RC(eventq_source_set_budget(self, b), 0);
            s->budget = b; /* applies from the next dispatch */
        } else {
            EXPECT_RC(eventq_source_set_budget(self, 1), -EINVAL);
        }
        EXPECT_RC(eventq_source_error(self), s->error);
        return 0;
    default:
        return 0;
    }
}

static void count_call(struct msrc *s)
{
    EXPECT(s->l->in_run, "a callback ran outside run_once");
    EXPECT(s->live, "the callback of a removed source ran (D8)");
    EXPECT(s->enabled_before && s->registered_before, "the callback of a disabled source ran");
    EXPECT(!s->stopped, "a callback ran after its source was stopped in this dispatch");
    s->calls++;
    s->l->run_calls++;
}

static int cb_chan(eventq_source *self, const void *data, size_t len, void *ud)
{
    struct msrc *s = ud;
    struct mchan *c = &g_ch[s->chan];
    count_call(s);
    EXPECT(s->kind == K_CHAN, "chan callback for another kind");
    EXPECT(!s->eos, "a channel source called after its end of stream (D8)");
    if (data == NULL) {
        EXPECT(len == 0, "end of stream with a length");
        EXPECT(c->closed && c->qlen == 0, "end of stream while open or not drained (D6)");
        c->rrings++; /* the receive that found it passed it on (D6) */
        s->eos = 1;
        s->eos_now = 1;
        s->enabled = 0;
        s->registered = 0;
    } else {
        m_take(c, data, len, "a channel source");
        m_after_pop(c, 1);
        /* Counters and fds are consistent inside the callback too: no lock
         * is held and the receive is complete. */
        m_check(c);
    }
    return cb_action(s, self);
}

static int cb_timer(eventq_source *self, uint64_t n, void *ud)
{
    struct msrc *s = ud;
    count_call(s);
    EXPECT(s->kind == K_TIMER && n >= 1, "timer callback with %llu expirations",
           (unsigned long long)n);
    if (!s->periodic) {
        s->enabled = 0; /* a one-shot disables itself, stays registered */
    }
    return cb_action(s, self);
}

static int cb_fd(eventq_source *self, int fd, uint32_t revents, void *ud)
{
    struct msrc *s = ud;
    count_call(s);
    EXPECT(s->kind == K_FD && fd == s->fd, "fd callback for fd %d, source has %d", fd, s->fd);
    EXPECT(revents != 0, "fd callback with no events");
    if (s->events & EVENTQ_ONESHOT)
        s->enabled = 0; /* the kernel disarmed it; it stays registered */
    return cb_action(s, self);
}

static int cb_signal(eventq_source *self, int signo, void *ud)
{
    struct msrc *s = ud;
    count_call(s);
    (void)signo;
    return cb_action(s, self);
}

static struct mloop *pick_loop(void)
{
    struct mloop *l = &g_lp[u8() % NLP];
    return l->live ? l : NULL;
}

static struct msrc *free_slot(struct mloop *l)
{
    for (int i = 0; i < NSRC; i++)
        if (!l->src[i].used)
            return &l->src[i];
    return NULL;
}

/* Whether fd has a source in loop l; *registered says if it is in epoll. */
static struct msrc *src_on_fd(struct mloop *l, int fd)
{
    for (int i = 0; i < NSRC; i++)
        if (l->src[i].live && (l->src[i].kind == K_CHAN || l->src[i].kind == K_FD) &&
            l->src[i].fd == fd)
            return &l->src[i];
    return NULL;
}

static void loop_check_fd(struct mloop *l)
{
    if (l->other_kinds)
        return;
    int want = l->wake_raised || l->posts_pending > 0;
    for (int i = 0; i < NSRC; i++) {
        struct msrc *s = &l->src[i];
        if (s->live && s->kind == K_CHAN && s->registered) {
            struct mchan *c = &g_ch[s->chan];
            want |= c->qlen > 0 || c->closed;
        }
    }
    EXPECT(readable(eventq_loop_fd(l->lp)) == want, "loop %d fd readable %d, model %d", l->id,
           !want, want);
}

static void op_loop_new(void)
{
    int slot = u8() % NLP;
    struct mloop *l = &g_lp[slot];
    if (l->live)
        return;
    if (u8() % 16 == 0) {
        EXPECT_RC(eventq_loop_new(NULL), -EINVAL);
        return;
    }
    memset(l, 0, sizeof *l);
    l->id = slot;
    EXPECT_RC(eventq_loop_new(&l->lp), 0);
    l->live = 1;
}

static void post_fn(void *arg)
{
    struct mloop *l = arg;
    EXPECT(l->in_run, "a post ran outside run_once");
    l->posts_run++;
    l->run_calls++;
}

static void post_destroy(void *arg)
{
    struct mloop *l = arg;
    l->posts_destroyed++;
}

static int null_post_destroys;

static void null_post_destroy(void *arg)
{
    (void)arg;
    null_post_destroys++;
}

static void loop_free(struct mloop *l)
{
    /* Sources of other loops watching this loop's fd go first: once the fd
     * is closed, epoll forgets them and the model could not follow. */
    for (int j = 0; j < NLP; j++) {
        if (!g_lp[j].live)
            continue;
        for (int i = 0; i < NSRC; i++) {
            struct msrc *s = &g_lp[j].src[i];
            if (s->live && s->watches_loop == l->id + 1) {
                EXPECT(s->h != NULL, "a loop-watching source without a handle");
                s->live = 0;
                EXPECT_RC(eventq_source_remove(s->h), 0);
                s->live = 1;
                src_gone(s);
                EXPECT(s->destroys == 1, "remove did not run destroy");
            }
        }
    }
    int was_live[NSRC];
    for (int i = 0; i < NSRC; i++) {
        was_live[i] = l->src[i].live;
        l->src[i].live = 0; /* the destroy hooks run in the free */
    }
    eventq_loop_free(l->lp);
    for (int i = 0; i < NSRC; i++) {
        struct msrc *s = &l->src[i];
        if (!s->used)
            continue;
        if (was_live[i]) {
            s->live = 1;
            src_gone(s);
        }
        EXPECT(s->destroys == 1, "eventq_loop_free: destroy ran %d times", s->destroys);
        if (s->h) {
            EXPECT_RC(eventq_source_remove(s->h), -ESTALE);
            EXPECT_RC(eventq_source_set_enabled(s->h, 1), -ESTALE);
            EXPECT_RC(eventq_source_error(s->h), -ESTALE);
            eventq_source_free(s->h);
        }
        s->used = 0;
    }
    EXPECT(l->posts_destroyed == l->posts_made,
           "posts destroyed %d of %d after eventq_loop_free", l->posts_destroyed, l->posts_made);
    l->live = 0;
    chan_check_gone();
}

static void op_loop_free(void)
{
    struct mloop *l = pick_loop();
    if (l)
        loop_free(l);
}

static void add_common(struct mloop *l, struct msrc *s, int rc, eventq_source *h, int want_out)
{
    if (rc != 0) {
        EXPECT(s->destroys == 1, "a failed add ran destroy %d times", s->destroys);
        EXPECT(h == (eventq_source *)0x1, "a failed add wrote *out");
        memset(s, 0, sizeof *s);
        return;
    }
    EXPECT(s->destroys == 0, "destroy ran for an added source");
    s->h = want_out ? h : NULL;
    EXPECT(!want_out || h != NULL, "add wrote a NULL handle");
    s->live = 1;
    s->used = 1;
    s->enabled = 1;
    s->registered = 1;
    s->budget = EVENTQ_DEFAULT_BUDGET;
    if (s->kind != K_CHAN)
        l->other_kinds++;
}

static void op_add_chan(void)
{
    struct mloop *l = pick_loop();
    struct mchan *c = pick_chan();
    if (!l || !c)
        return;
    struct msrc *s = free_slot(l);
    if (!s)
        return;
    eventq_chan *h = any_handle(c);
    int fd = eventq_chan_recv_fd(h);
    /* Any source of this loop on the fd, enabled or not, makes -EEXIST
     * (before 06f4965 a disabled one did not: the harness stepped around
     * that case, tests/c/test_fault_findings.c reproduces it). */
    struct msrc *other = src_on_fd(l, fd);
    uint8_t how = u8();
    int want_out = !(how & 1);
    memset(s, 0, sizeof *s);
    s->l = l;
    s->kind = K_CHAN;
    s->chan = c->id;
    s->fd = fd;
    eventq_source *out = (eventq_source *)0x1;
    int want = other ? -EEXIST : 0;
    int rc;
    if ((how & 6) == 6) {
        rc = eventq_loop_add_chan(l->lp, h, NULL, s, src_destroy, want_out ? &out : NULL);
        want = -EINVAL;
    } else if ((how & 6) == 4) {
        rc = eventq_loop_add_chan(l->lp, NULL, cb_chan, s, src_destroy, want_out ? &out : NULL);
        want = -EINVAL;
    } else {
        rc = eventq_loop_add_chan(l->lp, h, cb_chan, s, src_destroy, want_out ? &out : NULL);
    }
    TRACE("add_chan loop %d chan %d slot %d -> %d", l->id, c->id, (int)(s - l->src), rc);
    EXPECT_RC(rc, want);
    if (rc == 0 && ++c->srcrefs >= 2)
        c->shared_by_loops = 1;
    add_common(l, s, rc, out, want_out);
}

static void op_add_timer(void)
{
    struct mloop *l = pick_loop();
    if (!l)
        return;
    struct msrc *s = free_slot(l);
    if (!s)
        return;
    uint8_t how = u8();
    uint64_t first, interval;
    switch (how % 4) {
    case 0: first = 0; break;
    case 1: first = u16(); break;
    case 2: first = 3600ull * 1000000000ull; break;
    default: first = u64(); break;
    }
    switch ((how >> 2) % 4) {
    case 0: interval = 0; break;
    case 1: interval = 1000 + u16(); break;
    case 2: interval = 3600ull * 1000000000ull; break;
    default: interval = u64(); break;
    }
    int want_out = !(how & 16);
    memset(s, 0, sizeof *s);
    s->l = l;
    s->kind = K_TIMER;
    s->periodic = interval != 0;
    eventq_source *out = (eventq_source *)0x1;
    int rc, want = 0;
    if ((how & 0x60) == 0x60) {
        rc = eventq_loop_add_timer(l->lp, first, interval, NULL, s, src_destroy,
                                   want_out ? &out : NULL);
        want = -EINVAL;
    } else {
        rc = eventq_loop_add_timer(l->lp, first, interval, cb_timer, s, src_destroy,
                                   want_out ? &out : NULL);
    }
    EXPECT_RC(rc, want);
    add_common(l, s, rc, out, want_out);
}

static void op_add_fd(void)
{
    struct mloop *l = pick_loop();
    if (!l)
        return;
    struct msrc *s = free_slot(l);
    if (!s)
        return;
    uint8_t how = u8();
    uint32_t events;
    uint8_t e = u8();
    switch (e % 4) {
    case 0: events = EVENTQ_IN; break;
    case 1: events = EVENTQ_OUT | (e & 0x10 ? EVENTQ_EDGE : 0) | (e & 0x20 ? EVENTQ_ONESHOT : 0); break;
    case 2: events = e & 0x10 ? 0 : EVENTQ_ERR | EVENTQ_HUP; break; /* nothing wanted */
    default: events = u32(); break;
    }
    int known = (events & ~(uint32_t)(EVENTQ_IN | EVENTQ_PRI | EVENTQ_OUT | EVENTQ_ERR |
                                      EVENTQ_HUP | EVENTQ_RDHUP | EVENTQ_EDGE |
                                      EVENTQ_ONESHOT)) == 0;
    int wanted = (events & (EVENTQ_IN | EVENTQ_PRI | EVENTQ_OUT | EVENTQ_RDHUP)) != 0;
    int fd, want, watches = 0;
    switch (how % 8) {
    case 0: fd = -1; want = -EBADF; break;
    case 1: fd = 1000000 + how; want = -EBADF; break;
    case 2: fd = g_devnull; want = -EPERM; break;
    case 3: fd = eventq_loop_fd(l->lp); want = -EINVAL; break;
    case 4: fd = g_pipe[0]; want = 0; break;
    case 5: fd = g_pipe[1]; want = 0; break;
    default: {
        /* Another loop's fd: nesting, or a cycle. */
        struct mloop *o = &g_lp[(l->id + 1 + how / 8 % (NLP - 1)) % NLP];
        if (!o->live)
            return;
        fd = eventq_loop_fd(o->lp);
        watches = o->id + 1;
        want = 0;
        /* A cycle: o already watches l (directly). */
        for (int i = 0; i < NSRC; i++)
            if (o->src[i].live && o->src[i].registered && o->src[i].watches_loop == l->id + 1)
                want = -ELOOP;
        /* Deeper cycles through a third loop are possible with 3 loops;
         * keep to direct ones. */
        for (int j = 0; j < NLP && want == 0; j++)
            for (int i = 0; i < NSRC; i++)
                if (j != l->id && j != o->id && g_lp[j].live && g_lp[j].src[i].live &&
                    g_lp[j].src[i].watches_loop)
                    return;
        for (int i = 0; i < NSRC; i++)
            if (l->src[i].live && l->src[i].watches_loop && l->src[i].watches_loop != watches)
                return;
        break;
    }
    }
    if (!known || !wanted)
        want = -EINVAL;
    else if (want == 0 || want == -ELOOP) {
        struct msrc *other = src_on_fd(l, fd);
        if (other)
            want = -EEXIST;
    }
    /* Loop-watching sources keep a handle, so loop_free can remove them. */
    int want_out = watches || !(how & 0x40);
    memset(s, 0, sizeof *s);
    s->l = l;
    s->kind = K_FD;
    s->fd = fd;
    s->events = events;
    s->watches_loop = watches;
    eventq_source *out = (eventq_source *)0x1;
    int rc;
    if ((how & 0x80) && !watches) {
        rc = eventq_loop_add_fd(l->lp, fd, events, NULL, s, src_destroy, want_out ? &out : NULL);
        want = -EINVAL;
    } else {
        rc = eventq_loop_add_fd(l->lp, fd, events, cb_fd, s, src_destroy, want_out ? &out : NULL);
    }
    EXPECT_RC(rc, want);
    add_common(l, s, rc, out, want_out);
}

static void op_add_signal(void)
{
    struct mloop *l = pick_loop();
    if (!l)
        return;
    struct msrc *s = free_slot(l);
    if (!s)
        return;
    uint8_t how = u8();
    static const int sigs[] = { SIGUSR1, SIGUSR2, 0, -1, 65, SIGKILL, SIGSTOP, INT_MIN };
    int signo = sigs[how % 8];
    int want = how % 8 >= 2 ? -EINVAL : 0;
    if (want == 0)
        for (int i = 0; i < NSRC; i++)
            if (l->src[i].live && l->src[i].kind == K_SIGNAL && l->src[i].signo == signo)
                want = -EBUSY;
    int want_out = !(how & 8);
    memset(s, 0, sizeof *s);
    s->l = l;
    s->kind = K_SIGNAL;
    s->signo = signo;
    eventq_source *out = (eventq_source *)0x1;
    int rc;
    if (how & 0x10) {
        rc = eventq_loop_add_signal(l->lp, signo, NULL, s, src_destroy, want_out ? &out : NULL);
        want = -EINVAL;
    } else {
        rc = eventq_loop_add_signal(l->lp, signo, cb_signal, s, src_destroy,
                                    want_out ? &out : NULL);
    }
    EXPECT_RC(rc, want);
    add_common(l, s, rc, out, want_out);
}

static void op_post(void)
{
    struct mloop *l = pick_loop();
    uint8_t how = u8();
    if (!l) {
        int before = null_post_destroys;
        EXPECT_RC(eventq_loop_post(NULL, post_fn, NULL, null_post_destroy), -EINVAL);
        EXPECT(null_post_destroys == before + 1, "a failed post did not run destroy once");
        return;
    }
    if (how & 1) {
        int before = null_post_destroys;
        EXPECT_RC(eventq_loop_post(l->lp, NULL, NULL, null_post_destroy), -EINVAL);
        EXPECT(null_post_destroys == before + 1, "a post with no fn did not run destroy once");
        return;
    }
    int n = 1 + how / 2 % 8;
    for (int i = 0; i < n; i++) {
        int want = l->posts_pending < EVENTQ_POST_CAPACITY ? 0 : -EAGAIN;
        int before = l->posts_destroyed;
        EXPECT_RC(eventq_loop_post(l->lp, post_fn, l, post_destroy), want);
        if (want == 0) {
            l->posts_pending++;
            l->posts_made++;
        } else {
            EXPECT(l->posts_destroyed == before + 1, "a refused post was not destroyed");
        }
    }
}

static void op_stop_run(void)
{
    struct mloop *l = pick_loop();
    if (!l)
        return;
    uint8_t how = u8();
    if (how & 1 || !l->stop_pending) {
        EXPECT_RC(eventq_loop_stop(l->lp), 0);
        l->stop_pending = 1;
        l->wake_raised = 1;
    } else {
        /* A stop is pending: run returns at once, running nothing. */
        l->in_run = 1;
        EXPECT_RC(eventq_loop_run(l->lp), 0);
        l->in_run = 0;
        l->stop_pending = 0;
        l->wake_raised = 0;
    }
}

static void op_run_once(void)
{
    struct mloop *l = pick_loop();
    if (!l)
        return;
    int bad_t;
    uint8_t how = u8();
    if (how % 8 == 0) {
        (void)pick_timeout(1, &bad_t);
        EXPECT_RC(eventq_loop_run_once(l->lp, -2 - how), -EINVAL);
        return;
    }
    for (int i = 0; i < NSRC; i++) {
        struct msrc *s = &l->src[i];
        s->calls = 0;
        s->stopped = 0;
        s->eos_now = 0;
        s->enabled_before = s->enabled;
        s->registered_before = s->registered;
        s->eos_before = s->eos;
        s->budget_before = s->budget;
        s->live_before = s->live;
        if (s->live && s->kind == K_CHAN) {
            s->pending_before = g_ch[s->chan].qlen;
            s->closed_before = g_ch[s->chan].closed;
            TRACE("  slot %d: chan %d pending %zu closed %d enabled %d registered %d eos %d budget %zu",
                  i, s->chan, s->pending_before, s->closed_before, s->enabled, s->registered,
                  s->eos, s->budget);
        }
    }
    int posts_before = l->posts_run, pending_before = l->posts_pending;
    l->run_calls = 0;
    l->in_run = 1;
    TRACE("run_once loop %d", l->id);
    int rc = eventq_loop_run_once(l->lp, 0);
    l->in_run = 0;
    EXPECT(rc >= 0, "run_once(0) failed: %d", rc);
    EXPECT_RC(rc, l->run_calls);
    int ran = l->posts_run - posts_before;
    int want_posts = pending_before < 64 ? pending_before : 64;
    EXPECT(ran == want_posts, "run_once ran %d posts, %d were pending (budget 64)", ran,
           pending_before);
    l->posts_pending -= ran;
    l->wake_raised = 0;
    /* Channel sources: exactly min(budget, pending) messages, then end of
     * stream if closed and there was room in the budget. */
    for (int i = 0; i < NSRC; i++) {
        struct msrc *s = &l->src[i];
        if (!s->used || s->kind != K_CHAN || !s->live_before)
            continue; /* a removed source's calls failed in count_call */
        if (!s->registered_before || (!s->enabled_before && !s->eos_before)) {
            EXPECT(s->calls == 0, "a disabled channel source ran %d times", s->calls);
            continue;
        }
        if (s->eos_before) {
            /* Re-enabled after end of stream: it is disabled again, no call. */
            EXPECT(s->calls == 0, "end of stream delivered twice (D8)");
            if (s->live) {
                s->enabled = 0;
                s->registered = 0;
            }
            continue;
        }
        if (s->stopped)
            continue; /* an action ended the dispatch: each call was checked */
        size_t want = s->pending_before;
        int expect_eos = 0;
        size_t b = s->budget_before;
        if (want >= b)
            want = b;
        else if (s->closed_before)
            expect_eos = 1;
        EXPECT((size_t)s->calls == want + (size_t)expect_eos,
               "channel source delivered %d calls; pending %zu, budget %zu, closed %d", s->calls,
               s->pending_before, b, s->closed_before);
        EXPECT(s->eos_now == expect_eos, "end of stream %d, model %d", s->eos_now, expect_eos);
    }
    chan_check_gone();
}

static struct msrc *pick_src(struct mloop **lout)
{
    struct mloop *l = pick_loop();
    if (!l)
        return NULL;
    struct msrc *s = &l->src[u8() % NSRC];
    *lout = l;
    return s->used ? s : NULL;
}

static void op_source(void)
{
    struct mloop *l;
    struct msrc *s = pick_src(&l);
    if (!s || !s->h)
        return;
    uint8_t how = u8();
    int stale = !s->live;
    TRACE("source op %d on loop %d slot %d (stale %d)", how % 8, l->id, (int)(s - l->src), stale);
    switch (how % 8) {
    case 0: /* remove */
        if (s->watches_loop && !stale)
            return; /* keep: loop_free removes it */
        if (!stale)
            s->live = 0;
        EXPECT_RC(eventq_source_remove(s->h), stale ? -ESTALE : 0);
        if (!stale) {
            s->live = 1;
            src_gone(s);
            EXPECT(s->destroys == 1, "remove: destroy ran %d times", s->destroys);
        }
        EXPECT_RC(eventq_source_remove(s->h), -ESTALE);
        break;
    case 1: /* free the handle (removes it if live) */
        if (s->watches_loop && !stale)
            return;
        if (!stale)
            s->live = 0;
        eventq_source_free(s->h);
        s->h = NULL;
        if (!stale) {
            s->live = 1;
            src_gone(s);
            EXPECT(s->destroys == 1, "source_free: destroy ran %d times", s->destroys);
        }
        s->used = 0;
        break;
    case 2: { /* enable/disable */
        int en = (how >> 3) & 1;
        if (s->watches_loop && !stale)
            return;
        if (!stale && en && !s->registered) {
            /* Re-registering must not collide (the harness never adds a
             * second source for a disabled one's fd). */
        }
        EXPECT_RC(eventq_source_set_enabled(s->h, en), stale ? -ESTALE : 0);
        if (!stale) {
            s->enabled = en;
            s->registered = en ? 1 : 0;
        }
        break;
    }
    case 3: { /* budget */
        size_t b = (how >> 3) % 4 == 0 ? 0 : (how >> 3) % 4 == 1 ? SIZE_MAX : 1 + (size_t)u8() % 20;
        int want = stale ? -ESTALE : b == 0 || s->kind != K_CHAN ? -EINVAL : 0;
        if (b == 0 && !stale)
            want = -EINVAL;
        if (b == 0 && stale)
            want = -EINVAL; /* 0 is checked before the handle */
        EXPECT_RC(eventq_source_set_budget(s->h, b), want);
        if (want == 0)
            s->budget = b;
        break;
    }
    case 4: { /* events */
        uint32_t ev = (how & 8) ? EVENTQ_IN : u32();
        int known = (ev & ~(uint32_t)(EVENTQ_IN | EVENTQ_PRI | EVENTQ_OUT | EVENTQ_ERR |
                                      EVENTQ_HUP | EVENTQ_RDHUP | EVENTQ_EDGE |
                                      EVENTQ_ONESHOT)) == 0 &&
                    (ev & (EVENTQ_IN | EVENTQ_PRI | EVENTQ_OUT | EVENTQ_RDHUP));
        int want = !known ? -EINVAL : stale ? -ESTALE : s->kind != K_FD ? -EINVAL : 0;
        if (want == 0 && s->watches_loop)
            return;
        EXPECT_RC(eventq_source_set_events(s->h, ev), want);
        if (want == 0)
            s->events = ev;
        break;
    }
    case 5: { /* timer */
        int want = stale ? -ESTALE : s->kind != K_TIMER ? -EINVAL : 0;
        uint64_t iv = (how & 8) ? 0 : 5000000000ull;
        EXPECT_RC(eventq_source_set_timer(s->h, 3600ull * 1000000000ull, iv), want);
        if (want == 0) {
            s->enabled = 1;
            s->registered = 1;
            s->periodic = iv != 0;
        }
        break;
    }
    default: /* error */
        EXPECT_RC(eventq_source_error(s->h), stale ? -ESTALE : s->error);
        break;
    }
    chan_check_gone();
}

/* A signal for the signal sources (blocked in this thread, so it waits,
 * pending, for a signalfd to read it). */
static void op_raise(void)
{
    int signo = u8() & 1 ? SIGUSR2 : SIGUSR1;
    TRACE("raise %d", signo);
    EXPECT(pthread_kill(pthread_self(), signo) == 0, "pthread_kill");
}

/* NULLs and other arguments the header says are checked. */
static void op_bad_args(void)
{
    uint8_t how = u8();
    size_t len;
    eventq_chan_stats st;
    switch (how % 8) {
    case 0:
        EXPECT_RC(eventq_chan_opts_init(NULL, sizeof(struct eventq_chan_opts)), -EINVAL);
        EXPECT(eventq_chan_clone(NULL) == NULL, "clone(NULL)");
        eventq_chan_free(NULL);
        EXPECT_RC(eventq_chan_free_final(NULL, &st, sizeof st), -EINVAL);
        EXPECT_RC(eventq_chan_recv_fd(NULL), -EINVAL);
        EXPECT_RC(eventq_chan_send_fd(NULL), -EINVAL);
        break;
    case 1:
        EXPECT_RC(eventq_chan_send(NULL, g_buf, 1, 0), -EINVAL);
        EXPECT_RC(eventq_chan_send_batch(NULL, NULL, 0, 0), -EINVAL);
        EXPECT_RC(eventq_chan_recv(NULL, g_buf, 1, &len, 0), -EINVAL);
        EXPECT_RC(eventq_chan_recv_batch(NULL, g_buf, 1, &len, 1, 0), -EINVAL);
        break;
    case 2: {
        eventq_msg *m;
        EXPECT_RC(eventq_chan_recv_msg(NULL, &m, 0), -EINVAL);
        EXPECT_RC(eventq_chan_close(NULL), -EINVAL);
        EXPECT_RC(eventq_chan_get_stats(NULL, &st, sizeof st), -EINVAL);
        EXPECT(eventq_msg_data(NULL) == NULL && eventq_msg_len(NULL) == 0, "msg(NULL)");
        eventq_msg_free(NULL);
        struct mchan *c = pick_chan();
        if (c)
            EXPECT_RC(eventq_chan_get_stats(any_handle(c), NULL, sizeof(struct eventq_chan_stats)), -EINVAL);
        break;
    }
    case 3:
        eventq_loop_free(NULL);
        EXPECT_RC(eventq_loop_fd(NULL), -EINVAL);
        EXPECT_RC(eventq_loop_run(NULL), -EINVAL);
        EXPECT_RC(eventq_loop_run_once(NULL, 0), -EINVAL);
        EXPECT_RC(eventq_loop_stop(NULL), -EINVAL);
        break;
    case 4: {
        int d = null_post_destroys;
        EXPECT_RC(eventq_loop_add_fd(NULL, 0, EVENTQ_IN, cb_fd, NULL, null_post_destroy, NULL), -EINVAL);
        EXPECT_RC(eventq_loop_add_timer(NULL, 0, 0, cb_timer, NULL, null_post_destroy, NULL), -EINVAL);
        EXPECT_RC(eventq_loop_add_chan(NULL, NULL, cb_chan, NULL, null_post_destroy, NULL), -EINVAL);
        EXPECT_RC(eventq_loop_add_signal(NULL, SIGUSR1, cb_signal, NULL, null_post_destroy, NULL), -EINVAL);
        EXPECT(null_post_destroys == d + 4, "failed adds with NULL loops ran destroy %d times of 4",
               null_post_destroys - d);
        break;
    }
    case 5:
        EXPECT_RC(eventq_source_remove(NULL), -EINVAL);
        eventq_source_free(NULL);
        EXPECT_RC(eventq_source_set_enabled(NULL, 1), -EINVAL);
        EXPECT_RC(eventq_source_set_events(NULL, EVENTQ_IN), -EINVAL);
        EXPECT_RC(eventq_source_set_timer(NULL, 0, 0), -EINVAL);
        EXPECT_RC(eventq_source_set_budget(NULL, 1), -EINVAL);
        EXPECT_RC(eventq_source_error(NULL), -EINVAL);
        break;
    case 6: {
        int e = (int)u32();
        const char *s = eventq_strerror(e);
        EXPECT(s != NULL && strlen(s) > 0, "strerror(%d)", e);
        EXPECT(eventq_strerror(INT_MIN) != NULL, "strerror(INT_MIN)");
        EXPECT(eventq_version() == EVENTQ_VERSION, "version");
        EXPECT(eventq_version_string() != NULL, "version string");
        break;
    }
    default: {
        struct mloop *l = pick_loop();
        if (l)
            EXPECT_RC(eventq_loop_run_once(l->lp, INT64_MIN), -EINVAL);
        break;
    }
    }
}

/* ---- the program ---- */

static void check_all(void)
{
    for (int i = 0; i < NCH; i++)
        m_check(&g_ch[i]);
    for (int i = 0; i < NLP; i++)
        if (g_lp[i].live)
            loop_check_fd(&g_lp[i]);
}

static void teardown(void)
{
    for (int i = 0; i < NLP; i++)
        if (g_lp[i].live)
            loop_free(&g_lp[i]);
    for (int i = 0; i < NCH; i++) {
        struct mchan *c = &g_ch[i];
        while (c->live && c->nh) {
            size_t pending = c->qlen;
            uint64_t drops = c->drops;
            eventq_chan *h = c->h[--c->nh];
            if (c->nh == 0 && c->srcrefs == 0) {
                eventq_chan_stats st;
                EXPECT_RC(eventq_chan_free_final(h, &st, sizeof st), 1);
                EXPECT(st.dropped == pending, "final dropped %llu, pending %zu",
                       (unsigned long long)st.dropped, pending);
                if (c->has_drop)
                    EXPECT(c->drops - drops == pending, "drop hook calls");
                m_gone(c);
            } else {
                eventq_chan_free(h);
            }
        }
        EXPECT(!c->live, "channel %d still referenced at the end", i);
    }
}

static void setup_once(void)
{
    if (g_devnull >= 0)
        return;
    g_devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (g_devnull < 0 || pipe2(g_pipe, O_CLOEXEC) != 0)
        abort();
    /* Signal sources block these in this thread; nobody sends them. */
    sigset_t s;
    sigemptyset(&s);
    sigaddset(&s, SIGUSR1);
    sigaddset(&s, SIGUSR2);
    pthread_sigmask(SIG_BLOCK, &s, NULL);
}

#include "fuzz_shared.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size >= 4 && memcmp(data, SH_MAGIC, 4) == 0) {
        g_in.p = data + 4;
        g_in.n = size - 4;
        g_opno = 0;
        g_trace = getenv("FUZZ_TRACE") != NULL;
        fuzz_shared();
        return 0;
    }
    setup_once();
    memset(g_ch, 0, sizeof g_ch);
    memset(g_lp, 0, sizeof g_lp);
    g_in.p = data;
    g_in.n = size;
    g_opno = 0;
    g_trace = getenv("FUZZ_TRACE") != NULL;
    while (g_in.n > 0) {
        g_opno++;
        uint8_t op = u8();
        static const char *names[22] = {
            "chan_new", "chan_new", "chan_clone", "chan_free", "send", "send", "send_batch",
            "recv", "recv", "recv_msg", "recv_batch", "close", "loop_new", "loop_free",
            "add_chan", "add_chan", "add_timer", "add_fd", "add_signal", "post+stop/run",
            "run_once", "source/huge/bad" };
        TRACE("%s", names[op % 22]);
        switch (op % 22) {
        case 0: case 1: op_chan_new(); break;
        case 2: op_chan_clone(); break;
        case 3: op_chan_free(); break;
        case 4: case 5: op_send(); break;
        case 6: op_send_batch(); break;
        case 7: case 8: op_recv(); break;
        case 9: op_recv_msg(); break;
        case 10: op_recv_batch(); break;
        case 11: op_close(); break;
        case 12: op_loop_new(); break;
        case 13: op_loop_free(); break;
        case 14: case 15: op_add_chan(); break;
        case 16: op_add_timer(); break;
        case 17: op_add_fd(); break;
        case 18: op_add_signal(); break;
        case 19: op_post(); op_stop_run(); break;
        case 20: op_run_once(); break;
        default:
            if (op == 241)
                op_raise();
            else if (op & 0x80)
                op_source();
            else if (op & 0x40)
                op_send_huge();
            else
                op_bad_args();
            break;
        }
        check_all();
    }
    teardown();
    return 0;
}
