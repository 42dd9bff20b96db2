/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * The process-shared channel in fuzz_abi.c: an input that starts with
 * "EQSH" is a program of its own (included by fuzz_abi.c, after its input
 * readers and checks).
 *
 * The setup bytes choose the capacity, the message limit, the low-water
 * mark, which side the maker holds, and how the other end is made:
 *  0 send_to, then recv_from (both ends in this process: two mappings of
 *    one memfd, as two processes would have);
 *  1 export_fds, then import_fds;
 *  2 send_to, the handover message taken off the socket by the harness and
 *    changed as the input says (a magic byte, the side, an fd dropped, one
 *    added, one swapped for a pipe, /dev/null, an unsealed memfd or an
 *    eventfd, the message cut short, its unused bytes), then passed on to
 *    recv_from: 0 exactly when what arrives is still a channel's end,
 *    -EPROTO otherwise, and every fd that came closed either way;
 *  3 a forged memory: a memfd the harness writes (layout words, its size,
 *    its seals, the positions, each kept or replaced by input bytes),
 *    imported with eventfds and a link of the harness's: 0 exactly when
 *    the layout check (src/chan/process/layout.rs) and the positions pass,
 *    else -EPROTO. The harness then plays the other process by hand: it
 *    publishes messages (a slot's length and bytes, then tail) for a
 *    receiving end, or takes what a sending end published (checked byte for
 *    byte) and moves head.
 *
 * Then operations, one byte each and their arguments: send and batch send
 * (lengths past the limit too), receive (buffers of any size), batch and
 * zero-copy receive, close, stats, each fd's readiness, the other side's
 * calls, handovers while the other end lives (-EISCONN), consumer
 * enter/leave, an end freed (its peer sees it gone) and handed over again,
 * and writes to the shared memory: any word (value from the input, or a
 * position moved by a little), pages punched out.
 *
 * The model is exact until the memory is written by the harness: a shadow
 * queue, the closed flag, which end is gone, the send doorbell; every code,
 * message, needed length, count, stats field (sent, received, pending,
 * pending bytes, closed) and fd readiness is predicted. After a write, each
 * call may only return what the contract allows with a hostile peer (0 or a
 * count, -EAGAIN, -EPIPE, -EPROTO, -EMSGSIZE, -EPERM for the other side's
 * calls), never a message past the limit, and an end that returned -EPROTO
 * reads as closed (stats, -EPIPE).
 *
 * The library bugs this found (with tests/stress/hostile.c) have minimal
 * reproducers in tests/c/test_shared_findings.c; until their fixes
 * (5b17806, 3dd7378) the harness stepped around them: writes to an end's
 * own position word (its receives or sends then looped for ever), sends on
 * a full closed ring (-EAGAIN, not -EPIPE), memfds sealed against writing
 * (-EPERM, not -EPROTO), positions at the top of their range (a send
 * wrapped the tail word).
 */
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/eventfd.h>

#define SH_MAGIC "EQSH"
#define SH_DEFAULT_MAX 4096 /* max_msg_size 0: a shared channel's default */
#define SH_LINE 64u
#define SH_HEADER 12u
#define SH_TAIL (2u * SH_LINE / 8)   /* word indexes */
#define SH_HEAD (4u * SH_LINE / 8)
#define SH_LOCK (8u * SH_LINE / 8)
#define SH_QMAX 64
#define SH_POS_MAX (1ull << 60) /* the last position in range */
#define SH_BUF (SH_DEFAULT_MAX + 256) /* a forged limit may pass the default by a little */

struct shq {
    size_t len;
    uint8_t data[SH_BUF];
};

static struct {
    eventq_chan *s, *r;    /* the sending and receiving ends (NULL: freed) */
    int forged;            /* mode 3: r or s only, the harness is the other */
    size_t cap, max, low;
    volatile uint64_t *w;  /* the harness's mapping */
    size_t bytes;
    int mem, bells[2], link; /* mode 3: the harness's fds of the other end */
    int tainted, closed, send_raised;
    int broken[2]; /* [0] sender, [1] receiver */
    uint64_t tail, head;   /* positions (the model's) */
    struct shq q[SH_QMAX];
    size_t qh, ql, qbytes;
} S;

static uint64_t sh_lines(uint64_t max) { return (8 + max + SH_LINE - 1) / SH_LINE; }

static struct shq *sh_at(size_t i) { return &S.q[(S.qh + i) % SH_QMAX]; }

static int sh_count_fds(void)
{
    int n = 0;
    for (int fd = 0; fd < 1024; fd++)
        n += fcntl(fd, F_GETFD) >= 0;
    return n;
}

static void sh_map(int mem)
{
    struct stat st;
    EXPECT(fstat(mem, &st) == 0, "fstat of the channel's memfd");
    S.bytes = (size_t)st.st_size;
    void *p = mmap(NULL, S.bytes, PROT_READ | PROT_WRITE, MAP_SHARED, mem, 0);
    EXPECT(p != MAP_FAILED, "mmap of the channel's memfd");
    S.w = p;
}

/* ---- the exact model ---- */

static int sh_exact(void) { return !S.tainted; }

static void sh_push(const void *d, size_t len)
{
    struct shq *m = &S.q[(S.qh + S.ql) % SH_QMAX];
    m->len = len;
    memcpy(m->data, d, len);
    S.ql++;
    S.qbytes += len;
    S.tail++;
}

static void sh_pop_check(const void *d, size_t len, const char *how)
{
    EXPECT(S.ql > 0, "%s: a message the model does not have", how);
    struct shq *m = sh_at(0);
    EXPECT(len == m->len && (len == 0 || memcmp(d, m->data, len) == 0),
           "%s: %zu bytes, the head has %zu, or other bytes (D2/D3)", how, len, m->len);
    S.qh = (S.qh + 1) % SH_QMAX;
    S.ql--;
    S.qbytes -= len;
    S.head++;
    if (!S.send_raised && S.ql <= S.low)
        S.send_raised = 1;
}

/* A call's code with a hostile peer: 0 or a count, or one of these. */
static void sh_allowed(int rc, int wrong_side, const char *what)
{
    if (rc >= 0)
        return;
    if (wrong_side) {
        EXPECT(rc == -EPERM || rc == -EMSGSIZE, "%s on the wrong side: %d", what, rc);
        return;
    }
    EXPECT(rc == -EAGAIN || rc == -EPIPE || rc == -EPROTO || rc == -EMSGSIZE,
           "%s returned %d (%s): not a code it may return", what, rc, eventq_strerror(rc));
}

/* After -EPROTO the end reads as closed (its stats; -EPIPE). */
static void sh_broke(int which)
{
    eventq_chan *h = which ? S.r : S.s;
    S.broken[which] = 1;
    S.tainted = 1;
    eventq_chan_stats st;
    EXPECT_RC(eventq_chan_get_stats(h, &st, sizeof st), 0);
    EXPECT(st.closed == 1, "after -EPROTO, stats.closed is %llu", (unsigned long long)st.closed);
    uint8_t b[8];
    size_t len;
    EXPECT_RC(which ? eventq_chan_recv(h, b, sizeof b, &len, 0) : eventq_chan_send(h, b, 1, 0),
              -EPIPE);
}

static void sh_check(void)
{
    for (int i = 0; i < 2; i++) {
        eventq_chan *h = i ? S.r : S.s;
        if (!h)
            continue;
        eventq_chan_stats st;
        EXPECT_RC(eventq_chan_get_stats(h, &st, sizeof st), 0);
        EXPECT(st.received <= st.sent && st.pending <= S.cap && st.peak_depth <= S.cap &&
                   st.pending_bytes <= st.pending * S.max && st.closed <= 1,
               "stats out of their clamps: sent %llu received %llu pending %llu bytes %llu",
               (unsigned long long)st.sent, (unsigned long long)st.received,
               (unsigned long long)st.pending, (unsigned long long)st.pending_bytes);
        if (S.broken[i])
            EXPECT(st.closed == 1, "a broken end's stats.closed is 0");
        if (!sh_exact() || S.forged)
            continue;
        int gone = i ? !S.s : !S.r;
        EXPECT(st.sent == S.tail && st.received == S.head && st.pending == S.ql &&
                   st.pending_bytes == S.qbytes &&
                   st.closed == (uint64_t)(S.closed || (i == 1 && gone)),
               "stats of the %s end: sent %llu/%llu received %llu/%llu pending %llu/%zu bytes "
               "%llu/%zu closed %llu/%d",
               i ? "receiving" : "sending", (unsigned long long)st.sent, (unsigned long long)S.tail,
               (unsigned long long)st.received, (unsigned long long)S.head,
               (unsigned long long)st.pending, S.ql, (unsigned long long)st.pending_bytes, S.qbytes,
               (unsigned long long)st.closed, S.closed);
        /* D4/D5 between processes: each fd is readable also once the other
         * end is gone. */
        int want_recv = S.ql > 0 || S.closed || gone;
        int want_send = S.send_raised || S.closed || gone;
        if (i == 1)
            EXPECT(readable(eventq_chan_recv_fd(h)) == want_recv,
                   "the receive fd readable %d, model %d (pending %zu, closed %d, gone %d)",
                   !want_recv, want_recv, S.ql, S.closed, gone);
        else
            EXPECT(readable(eventq_chan_send_fd(h)) == want_send,
                   "the send fd readable %d, model %d (pending %zu/%zu, closed %d, gone %d)",
                   !want_send, want_send, S.ql, S.cap, S.closed, gone);
    }
}

/* ---- operations ---- */

static void sh_fill(uint8_t *b, size_t len)
{
    uint8_t seed = u8();
    for (size_t i = 0; i < len; i++)
        b[i] = (uint8_t)(seed + i * 7);
}

static int sh_usable(int which)
{
    return (which ? S.r : S.s) != NULL;
}

static void sh_send(int batch)
{
    if (!sh_usable(0))
        return;
    size_t k = batch ? 1 + u8() % 8 : 1;
    static uint8_t bufs[8][SH_BUF];
    eventq_buf b[8];
    for (size_t i = 0; i < k; i++) {
        size_t len = u16() % (S.max + 3 < SH_BUF ? S.max + 3 : SH_BUF);
        sh_fill(bufs[i], len);
        b[i] = (eventq_buf){ bufs[i], len };
    }
    int full = S.ql >= S.cap;
    int rc = batch ? eventq_chan_send_batch(S.s, b, k, 0) : eventq_chan_send(S.s, b[0].data, b[0].len, 0);
    TRACE("shared %s of %zu (first %zu bytes): %d", batch ? "batch send" : "send", k, b[0].len, rc);
    if (rc == -EPROTO)
        sh_broke(0);
    if (!sh_exact() || S.forged) {
        sh_allowed(rc, 0, "send");
        EXPECT(rc <= (int)k, "a batch of %zu sent %d", k, rc);
        int sent = rc < 0 ? 0 : batch ? rc : 1;
        if (S.forged && !S.tainted)
            for (int i = 0; i < sent; i++)
                sh_push(b[i].data, b[i].len);
        return;
    }
    int want;
    if (b[0].len > S.max)
        want = -EMSGSIZE;
    else if (S.closed)
        want = -EPIPE;
    else if (full)
        want = S.r ? -EAGAIN : -EPIPE;
    else {
        want = 0;
        for (size_t i = 0; i < k && S.ql < S.cap && b[i].len <= S.max; i++) {
            sh_push(b[i].data, b[i].len);
            want++;
        }
        if (S.ql >= S.cap)
            S.send_raised = 0;
        if (!batch)
            want = 0;
    }
    if (want == -EAGAIN)
        S.send_raised = 0;
    EXPECT_RC(rc, want);
}

static void sh_recv(int how)
{
    if (!sh_usable(1))
        return;
    size_t cap = u8() & 1 ? S.max : u16() % (S.max + 2);
    size_t m = how == 1 ? 1 + u8() % 8 : 1;
    if (how == 1 && cap == S.max)
        cap = S.max * m;
    /* What the model says, before the call. */
    int exact = sh_exact() && !S.forged, want = 0;
    if (exact) {
        if (S.ql == 0) {
            want = S.closed || !S.s ? -EPIPE : -EAGAIN;
        } else if (how != 2 && sh_at(0)->len > cap) {
            want = -EMSGSIZE;
        } else if (how == 1) {
            size_t sum = 0;
            for (size_t i = 0; i < S.ql && (size_t)want < m && sum + sh_at(i)->len <= cap; i++) {
                sum += sh_at(i)->len;
                want++;
            }
        }
    }
    uint8_t *buf = malloc(cap ? cap : 1);
    size_t lens[8] = { 0 }, len = 0;
    eventq_msg *msg = NULL;
    EXPECT(buf != NULL, "malloc");
    int rc = how == 0 ? eventq_chan_recv(S.r, buf, cap, &len, 0)
             : how == 1 ? eventq_chan_recv_batch(S.r, buf, cap, lens, m, 0)
                        : eventq_chan_recv_msg(S.r, &msg, 0);
    TRACE("shared receive (%d, buffer %zu, max %zu): %d", how, cap, m, rc);
    size_t need = how == 1 ? lens[0] : len;
    if (exact) {
        EXPECT_RC(rc, want);
        if (rc == -EMSGSIZE)
            EXPECT(need == sh_at(0)->len, "-EMSGSIZE needs %zu, the head has %zu (D7)", need,
                   sh_at(0)->len);
    } else {
        sh_allowed(rc, 0, "receive");
    }
    if (rc == -EPROTO)
        sh_broke(1);
    if (rc == -EMSGSIZE)
        EXPECT(need > cap && need <= S.max, "-EMSGSIZE needs %zu (buffer %zu, limit %zu)", need, cap, S.max);
    if (rc >= 0) {
        size_t off = 0;
        int n = how == 1 ? rc : 1;
        EXPECT(n >= 1 && (size_t)n <= m, "a receive of at most %zu returned %d", m, rc);
        for (int i = 0; i < n; i++) {
            const uint8_t *d = how == 2 ? eventq_msg_data(msg) : buf + off;
            size_t l = how == 1 ? lens[i] : how == 2 ? eventq_msg_len(msg) : len;
            EXPECT(l <= S.max, "a message of %zu bytes, over the limit %zu", l, S.max);
            EXPECT(how == 2 || off + l <= cap, "%zu bytes packed into %zu", off + l, cap);
            if (sh_exact())
                sh_pop_check(d, l, "a shared receive");
            off += l;
        }
        eventq_msg_free(msg);
    }
    free(buf);
}

static void sh_wrong_side(void)
{
    uint8_t b[8] = { 0 };
    size_t len;
    if (S.s)
        EXPECT_RC(eventq_chan_recv(S.s, b, sizeof b, &len, 0), -EPERM);
    if (S.r)
        EXPECT_RC(eventq_chan_send(S.r, b, 1, 0), -EPERM);
}

/* The harness writes the shared memory: any word, or a position moved. */
static void sh_write(void)
{
    size_t words = S.bytes / 8;
    uint8_t how = u8();
    size_t i = how & 1 ? (how & 2 ? SH_TAIL : SH_HEAD) : u16() % words;
    uint64_t v = how & 4 ? S.w[i] + ((uint64_t)(int8_t)u8() << 3) : u64();
    TRACE("shared write: word %zu = %#llx", i, (unsigned long long)v);
    S.w[i] = v;
    S.tainted = 1;
}

static void sh_punch(void)
{
    size_t page = 4096;
    off_t off = (off_t)((u8() % (S.bytes / page + 2)) * page);
    TRACE("shared punch at %lld", (long long)off);
    if (fallocate(S.mem, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, off, (off_t)page) == 0)
        S.tainted = 1;
}

/* Hands the missing end over again: send_to and recv_from, or export and
 * import. The queue stays. */
static void sh_rehand(void)
{
    eventq_chan *have = S.s ? S.s : S.r, *got = NULL;
    int sv[2];
    EXPECT(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0, "socketpair");
    int rc;
    if (u8() & 1) {
        eventq_shared_fds f;
        rc = eventq_chan_export_fds(have, &f, sizeof f);
        if (rc == 0)
            rc = eventq_chan_import_fds(&f, sizeof f, &got);
    } else {
        rc = eventq_chan_send_to(have, sv[0]);
        if (rc == 0)
            rc = eventq_chan_recv_from(sv[1], &got);
    }
    close(sv[0]);
    close(sv[1]);
    TRACE("shared handover again: %d", rc);
    if (!sh_exact()) {
        /* The layout or positions may have been rewritten: -EPROTO. */
        EXPECT(rc == 0 || rc == -EPROTO, "handover of a written channel: %d", rc);
    } else {
        EXPECT_RC(rc, 0);
    }
    if (rc != 0)
        return;
    if (S.s)
        S.r = got;
    else
        S.s = got;
    S.broken[S.s == got ? 0 : 1] = 0;
}

static void sh_free_one(void)
{
    int which = u8() & 1;
    eventq_chan **h = which ? &S.r : &S.s;
    TRACE("shared free of the %s end", which ? "receiving" : "sending");
    eventq_chan_free(*h);
    *h = NULL;
    S.broken[which] = 0;
}

static void sh_misc(void)
{
    uint8_t how = u8();
    eventq_chan *h = how & 1 ? S.r : S.s;
    if (!h)
        return;
    switch ((how >> 1) % 4) {
    case 0: /* a handover while the other end lives */
        if (S.s && S.r && !S.forged) {
            int sv[2];
            EXPECT(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0, "socketpair");
            EXPECT_RC(eventq_chan_send_to(h, sv[0]), -EISCONN);
            eventq_shared_fds f;
            EXPECT_RC(eventq_chan_export_fds(h, &f, sizeof f), -EISCONN);
            close(sv[0]);
            close(sv[1]);
        }
        break;
    case 1:
        EXPECT_RC(eventq_chan_consumer_enter(h), 0);
        EXPECT_RC(eventq_chan_consumer_leave(h), 0);
        EXPECT_RC(eventq_chan_consumer_leave(h), -EINVAL);
        break;
    case 2:
        EXPECT(eventq_chan_side(h) == (h == S.s ? EVENTQ_SIDE_SEND : EVENTQ_SIDE_RECV), "side");
        break;
    default:
        sh_wrong_side();
        break;
    }
}

static void sh_close(void)
{
    eventq_chan *h = u8() & 1 ? S.r : S.s;
    if (!h)
        return;
    EXPECT_RC(eventq_chan_close(h), 0);
    TRACE("shared close");
    if (!S.closed)
        S.closed = 1;
}

/* ---- the harness as the other process of a forged end ---- */

/* Publishes a message for a receiving end (a slot, then tail), or takes
 * one a sending end published (checked) and moves head. */
static void sh_peer(void)
{
    if (!S.forged) {
        sh_misc();
        return;
    }
    if (S.tainted)
        return;
    uint64_t lines = sh_lines(S.max);
    if (S.r) {
        if (S.ql >= S.cap)
            return;
        size_t len = u16() % (S.max + 1);
        uint8_t d[SH_BUF];
        sh_fill(d, len);
        volatile uint64_t *slot = S.w + (SH_HEADER * SH_LINE + (S.tail % S.cap) * lines * SH_LINE) / 8;
        for (size_t i = 0; i < (len + 7) / 8; i++) {
            uint64_t x = 0;
            memcpy(&x, d + 8 * i, len - 8 * i < 8 ? len - 8 * i : 8);
            slot[1 + i] = x;
        }
        slot[0] = len;
        sh_push(d, len);
        __atomic_store_n(&S.w[SH_TAIL], (S.w[SH_TAIL] & 7) | (S.tail << 3), __ATOMIC_SEQ_CST);
        uint64_t one = 1;
        (void)!write(S.bells[0], &one, 8); /* the receive doorbell */
        TRACE("shared peer published %zu bytes at %llu", len, (unsigned long long)S.tail - 1);
    } else if (S.s && S.ql > 0) {
        volatile uint64_t *slot = S.w + (SH_HEADER * SH_LINE + (S.head % S.cap) * lines * SH_LINE) / 8;
        uint64_t len = slot[0];
        uint8_t d[SH_BUF + 8];
        EXPECT(len <= S.max, "a sending end published %llu bytes", (unsigned long long)len);
        for (size_t i = 0; i < (len + 7) / 8; i++) {
            uint64_t x = slot[1 + i];
            memcpy(d + 8 * i, &x, 8);
        }
        EXPECT((S.w[SH_TAIL] >> 3) == S.tail, "tail %llu, the model %llu",
               (unsigned long long)(S.w[SH_TAIL] >> 3), (unsigned long long)S.tail);
        sh_pop_check(d, len, "what a sending end published");
        __atomic_store_n(&S.w[SH_HEAD], (S.w[SH_HEAD] & 7) | (S.head << 3), __ATOMIC_SEQ_CST);
        TRACE("shared peer took %llu bytes", (unsigned long long)len);
    }
}

/* ---- setup ---- */

static int sh_opts(eventq_chan_opts *o)
{
    eventq_chan_opts_init(o, sizeof *o);
    S.cap = 1 + u8() % 8;
    uint8_t m = u8();
    o->capacity = S.cap;
    o->max_msg_size = m < 32 ? 0 : m % 200;
    S.max = o->max_msg_size ? o->max_msg_size : SH_DEFAULT_MAX;
    S.low = u8() % S.cap;
    o->low_water = S.low;
    return u8() & 1 ? EVENTQ_SIDE_SEND : EVENTQ_SIDE_RECV;
}

/* A file that is not what a channel's fd must be, for slot `i`. */
static int sh_wrong_fd(int i)
{
    int p[2];
    switch (u8() % 4) {
    case 0:
        EXPECT(pipe2(p, O_CLOEXEC) == 0, "pipe");
        close(p[1]);
        return p[0];
    case 1:
        return open("/dev/null", O_RDONLY | O_CLOEXEC);
    case 2:
        return memfd_create("unsealed", MFD_CLOEXEC); /* not an eventfd, not sealed */
    default:
        return i == 1 || i == 2 ? memfd_create("x", MFD_CLOEXEC) : eventfd(0, EFD_CLOEXEC);
    }
}

/* Mode 2: the handover message off the socket, changed, passed on. Returns
 * the taken end, or NULL if (as the model says) it was refused. */
static eventq_chan *sh_intercept(eventq_chan *made, int made_side)
{
    int sv[2], sv2[2];
    EXPECT(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0, "socketpair");
    EXPECT(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0, sv2) == 0, "socketpair");
    EXPECT_RC(eventq_chan_send_to(made, sv[0]), 0);
    uint8_t msg[32];
    union {
        struct cmsghdr h;
        char b[CMSG_SPACE(sizeof(int) * 8)];
    } ctl;
    struct iovec iov = { msg, sizeof msg };
    struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.b, .msg_controllen = sizeof ctl.b };
    ssize_t n = recvmsg(sv[1], &mh, MSG_CMSG_CLOEXEC);
    EXPECT(n == 16, "the handover message is %zd bytes", n);
    int fds[8], nf = 0;
    struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
    EXPECT(c && c->cmsg_type == SCM_RIGHTS, "the handover message carries fds");
    nf = (int)((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
    EXPECT(nf == 4, "the handover message carries %d fds", nf);
    memcpy(fds, CMSG_DATA(c), sizeof(int) * 4);
    close(sv[0]);
    close(sv[1]);
    uint8_t how = u8();
    int valid = 1;
    size_t len = 16;
    uint32_t side;
    if (how & 1) {
        msg[u8() % 8] ^= (uint8_t)(1 + u8() % 255);
        valid = 0;
    }
    if (how & 2) {
        side = u8() % 4;
        memcpy(msg + 8, &side, 4);
        valid &= side == (uint32_t)(made_side == EVENTQ_SIDE_SEND ? EVENTQ_SIDE_RECV : EVENTQ_SIDE_SEND);
        if (side == 1 || side == 2)
            S.tainted |= !valid; /* both ends on one side: not modelled */
        valid &= side == 1 || side == 2;
    }
    if (how & 4) { /* an fd dropped */
        close(fds[--nf]);
        valid = 0;
    }
    if (how & 8) { /* an fd added */
        fds[nf++] = eventfd(0, EFD_CLOEXEC);
        valid = 0;
    }
    if (how & 16) { /* an fd of the wrong kind */
        int i = u8() % nf;
        close(fds[i]);
        fds[i] = sh_wrong_fd(i);
        valid = 0;
    }
    if (how & 32) {
        len = u8() % 16;
        valid = 0;
    }
    if (how & 64)
        msg[12 + u8() % 4] = u8(); /* unused bytes */
    memset(ctl.b, 0, sizeof ctl.b); /* the padding too: sendmsg reads it */
    mh = (struct msghdr){ .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.b,
                          .msg_controllen = CMSG_SPACE(sizeof(int) * (size_t)nf) };
    iov.iov_len = len;
    c = CMSG_FIRSTHDR(&mh);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * (size_t)nf);
    memcpy(CMSG_DATA(c), fds, sizeof(int) * (size_t)nf);
    if (nf == 0) {
        mh.msg_control = NULL;
        mh.msg_controllen = 0;
    }
    EXPECT(sendmsg(sv2[0], &mh, MSG_NOSIGNAL) == (ssize_t)len || len == 0, "resend");
    for (int i = 0; i < nf; i++)
        close(fds[i]); /* in flight: the library's once received */
    if (len < 16)
        shutdown(sv2[0], SHUT_WR);
    int before = sh_count_fds();
    eventq_chan *got = NULL;
    int rc = eventq_chan_recv_from(sv2[1], &got);
    TRACE("shared intercepted handover (changes %#x): %d", how, rc);
    if (valid) {
        EXPECT_RC(rc, 0);
    } else if (rc != 0) {
        EXPECT(rc == -EPROTO, "a changed handover refused with %d, not -EPROTO", rc);
        EXPECT(sh_count_fds() == before, "a refused handover left %d fds open, %d before",
               sh_count_fds(), before);
    } else {
        EXPECT(S.tainted, "a changed handover (%#x) was accepted", how);
    }
    close(sv2[0]);
    close(sv2[1]);
    if (got && eventq_chan_side(got) == made_side) {
        /* Both ends on one side (the side word changed to the maker's):
         * accepted, as the handover checks only that it names a side; not
         * modelled, so let go: the maker sees it gone. */
        eventq_chan_free(got);
        got = NULL;
        S.tainted = 0;
    }
    return got;
}

/* Mode 3: a forged memory. */
static int sh_forge(int *side_out)
{
    eventq_chan_opts o;
    int wside = sh_opts(&o);
    uint64_t lines = sh_lines(S.max);
    uint64_t lw[6] = { 0, S.cap, o.max_msg_size ? o.max_msg_size : SH_DEFAULT_MAX, S.low, lines, 0 };
    memcpy(&lw[0], "eventqS\x01", 8);
    uint8_t lies = u8();
    for (int i = 0; i < 6; i++)
        if (lies & (1 << i))
            lw[i] = i == 0 ? lw[0] ^ (1ull << (u8() % 64)) : u8() & 1 ? u64() : lw[i] + (uint64_t)(int8_t)u8();
    uint64_t size = (SH_HEADER + S.cap * lines) * SH_LINE;
    if (lies & 64)
        size = (uint64_t)u16() * (u8() & 1 ? 64 : 8);
    unsigned seals = F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL;
    if (lies & 128) {
        seals = u8() & 7;
        seals = (seals & 1 ? F_SEAL_SHRINK : 0) | (seals & 2 ? F_SEAL_GROW : 0) | (seals & 4 ? F_SEAL_SEAL : 0);
        if (u8() & 1)
            seals |= u8() & 1 ? F_SEAL_WRITE : F_SEAL_FUTURE_WRITE;
    }
    uint64_t head = u32(), tail = head + u8() % (S.cap + 1);
    uint8_t plie = u8();
    if (plie & 1)
        tail = head + S.cap + 1 + u8();
    if (plie & 2)
        head = tail + 1 + u8();
    if (plie & 4) { /* about the end of the range: 2^60, or the top of the word */
        head = (plie & 8 ? (1ull << 61) - 1 : SH_POS_MAX) - u8() % 3;
        tail = head + u8() % 3;
    }
    /* The check the library makes. */
    uint64_t cap = lw[1], max = lw[2], low = lw[3];
    int valid = memcmp(&lw[0], "eventqS\x01", 8) == 0 && cap >= 1 && cap <= (1u << 24) &&
                max <= (16u << 20) && lw[4] == sh_lines(max) && low < cap;
    if (valid) {
        unsigned __int128 want = ((unsigned __int128)cap * lw[4] + SH_HEADER) * SH_LINE;
        valid = want == size;
    }
    valid = valid && size % 64 == 0 && size >= SH_HEADER * SH_LINE &&
            (seals & (F_SEAL_SHRINK | F_SEAL_GROW)) == (F_SEAL_SHRINK | F_SEAL_GROW) && head <= tail &&
            tail - head <= cap && tail <= SH_POS_MAX && !(seals & (F_SEAL_WRITE | F_SEAL_FUTURE_WRITE));
    if (size > (1u << 24))
        size = 1u << 24; /* a lie that large is refused for the size anyway */
    int mem = memfd_create("forged", MFD_CLOEXEC | (seals ? MFD_ALLOW_SEALING : 0));
    EXPECT(mem >= 0 && ftruncate(mem, (off_t)size) == 0, "a forged memfd");
    if (size >= SH_HEADER * SH_LINE) {
        uint64_t t = tail << 3, h = head << 3;
        EXPECT(pwrite(mem, lw, sizeof lw, 0) == sizeof lw && pwrite(mem, &t, 8, SH_TAIL * 8) == 8 &&
                   pwrite(mem, &h, 8, SH_HEAD * 8) == 8, "writing the forged memory");
    }
    if (seals)
        EXPECT(fcntl(mem, F_ADD_SEALS, (int)seals) == 0, "sealing the forged memfd");
    int sv[2];
    EXPECT(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0, "socketpair");
    S.mem = dup(mem);
    S.bells[0] = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    S.bells[1] = eventfd(1, EFD_CLOEXEC | EFD_NONBLOCK);
    S.link = sv[1];
    eventq_shared_fds f = { .side = wside, .mem = mem, .recv_bell = dup(S.bells[0]),
                            .send_bell = dup(S.bells[1]), .link = sv[0] };
    int before = sh_count_fds() - 4;
    eventq_chan *got = NULL;
    int rc = eventq_chan_import_fds(&f, sizeof f, &got);
    TRACE("shared forged import (lies %#x, positions %#x): %d, model %s", lies, plie, rc,
          valid ? "valid" : "refused");
    if (!valid) {
        EXPECT_RC(rc, -EPROTO);
        EXPECT(sh_count_fds() == before, "a refused import left fds open");
        return -1;
    }
    EXPECT_RC(rc, 0);
    S.forged = 1;
    S.tail = tail;
    S.head = head;
    S.max = max;
    S.cap = cap;
    S.low = low;
    if (tail > head) {
        /* Messages already queued whose bytes the model does not know. */
        S.tainted = 1;
    }
    if (wside == EVENTQ_SIDE_SEND)
        S.s = got;
    else
        S.r = got;
    S.ql = tail - head;
    S.send_raised = 1;
    sh_map(S.mem);
    *side_out = wside;
    return 0;
}

static void sh_setup(void)
{
    memset(&S, 0, sizeof S);
    S.mem = S.bells[0] = S.bells[1] = S.link = -1;
    S.send_raised = 1;
    uint8_t mode = u8() % 4;
    if (mode == 3) {
        int side;
        sh_forge(&side);
        return;
    }
    eventq_chan_opts o;
    int side = sh_opts(&o);
    eventq_chan *made = NULL, *got = NULL;
    EXPECT_RC(eventq_chan_new_shared(&o, side, &made), 0);
    eventq_shared_fds f;
    EXPECT_RC(eventq_chan_export_fds(made, &f, sizeof f), 0);
    S.mem = dup(f.mem);
    if (mode == 1) {
        EXPECT_RC(eventq_chan_import_fds(&f, sizeof f, &got), 0);
    } else {
        /* The export went unused: its link closed, the made end sees the
         * other end gone, and hands it over again. */
        for (int i = 0; i < 4; i++)
            close(i == 0 ? f.mem : i == 1 ? f.recv_bell : i == 2 ? f.send_bell : f.link);
        if (mode == 2) {
            got = sh_intercept(made, side);
        } else {
            int sv[2];
            EXPECT(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0, "socketpair");
            EXPECT_RC(eventq_chan_send_to(made, sv[0]), 0);
            EXPECT_RC(eventq_chan_recv_from(sv[1], &got), 0);
            close(sv[0]);
            close(sv[1]);
        }
    }
    S.s = side == EVENTQ_SIDE_SEND ? made : got;
    S.r = side == EVENTQ_SIDE_SEND ? got : made;
    sh_map(S.mem);
}

static void sh_teardown(void)
{
    eventq_chan_free(S.s);
    eventq_chan_free(S.r);
    if (S.w)
        munmap((void *)S.w, S.bytes);
    int fds[4] = { S.mem, S.bells[0], S.bells[1], S.link };
    for (int i = 0; i < 4; i++)
        if (fds[i] >= 0)
            close(fds[i]);
}

static void fuzz_shared(void)
{
    int fds_before = sh_count_fds();
    sh_setup();
    while (g_in.n > 0 && (S.s || S.r)) {
        g_opno++;
        uint8_t op = u8();
        switch (op % 14) {
        case 0: case 1: sh_send(0); break;
        case 2: sh_send(1); break;
        case 3: case 4: sh_recv(0); break;
        case 5: sh_recv(1); break;
        case 6: sh_recv(2); break;
        case 7: if (op & 0x80) sh_close(); else sh_peer(); break;
        case 8: sh_peer(); break;
        case 9: sh_misc(); break;
        case 10: if (op & 0x80) sh_write(); else sh_peer(); break;
        case 11: if (op & 0x80) sh_punch(); else sh_misc(); break;
        case 12:
            if (S.forged)
                sh_peer();
            else if (S.s && S.r)
                sh_free_one();
            else
                sh_rehand();
            break;
        default: sh_check(); break;
        }
        sh_check();
    }
    sh_teardown();
    EXPECT(sh_count_fds() == fds_before, "fds open after a shared program: %d, before %d",
           sh_count_fds(), fds_before);
}
