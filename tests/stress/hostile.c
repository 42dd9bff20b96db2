/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * hostile: a process-shared channel whose other process is hostile. The
 * contract ("Between processes" in docs/design.md): the other process may
 * write any word of the mapping at any time; the library never reads or
 * writes outside it, never faults, never waits on a shared word without
 * bound, never hands out a message longer than the limit; a word out of
 * its range fails the call with -EPROTO and closes the channel on this
 * side. What arrives at a handover is checked (-EPROTO), and whatever fds
 * came are closed.
 *
 * usage: hostile [-n SESSIONS] [-s SEED] [-q] [-v]
 *
 * Each session forks a well-behaved process W and a hostile one H.
 *
 * Mapping sessions: W makes the channel (sending or receiving end, at
 * random), exports the other end's fds and sends them to H, which maps the
 * memfd, often imports the end too (so it also sends or receives for
 * real), and then, with random pauses of random length (busy loops), does
 * one of: garbage, backward, far-ahead, past-the-capacity and top-of-range
 * values and toggled flags in its own position word and in W's, slot
 * lengths past the limit (and huge), slot bytes, the doorbell lock word
 * held with either process's mark or garbage, the requests word garbage,
 * the layout line rewritten, the peak word, pages punched out with
 * fallocate(FALLOC_FL_PUNCH_HOLE) (the header's too), bursts that hammer
 * one word, writes and reads of the doorbell eventfds (a counter near its
 * maximum included), O_NONBLOCK cleared on them (a flag of the open file,
 * shared) with the counter emptied or filled, a byte written into the link
 * or its shutdown, ftruncate and F_ADD_SEALS (which must fail: the memfd
 * is sealed), real sends and receives, and death. A third of the sessions
 * do any of these at any time; the rest mostly what leaves the protocol
 * whole (the lock, requests, layout, peak, bytes, eventfds, traffic), so
 * that W also moves messages for long.
 *
 * Handover sessions: H forges an end and hands it to W, by a handover
 * message (eventq_chan_recv_from) or as fds (eventq_chan_import_fds): a
 * good one, or one with a lie: the message's length, magic or side, fds
 * missing or extra (up to 30), fds of the wrong kinds (pipe, socket,
 * /dev/null, a directory, an epoll fd, eventfd for memfd, memfd for
 * eventfd, a datagram socket for the link), a memfd unsealed, half sealed
 * or sealed against writing, of a size that is not the layout's
 * (truncated, grown, not whole lines, shorter than the header), a layout
 * with a bad magic, capacity, message limit, slot size or low-water mark,
 * positions backwards, too far apart, about 2^60 (the end of their range)
 * or at the top of their word, a link whose other end is closed, the
 * message split or the socket closed empty; as fds, a bad side, an fd of
 * -1, a struct larger than the library knows. W takes it, and if it is
 * accepted, uses it while H keeps mutating the memory.
 *
 * W, the process under test (built with -fsanitize=address,undefined by
 * make sanitize; the Rust library in it is instrumented only in the
 * nightly asan-rust run), calls every operation at random: send (lengths
 * past the limit too), batch send, receive into buffers of exactly their
 * capacity (small ones too), batch and zero-copy receive, close, stats,
 * poll(2) and an edge-triggered epoll on both fds, consumer enter/leave,
 * the other side's calls, and handovers (send_to, export_fds: -EISCONN
 * while H lives; once H is gone, a successor end made and used in W).
 * Timeouts are 0 or up to 1 ms: a hostile peer may stop sending. Checks:
 *  - every call returns (a watchdog per call: alarm(2));
 *  - only the documented codes: 0 or a count, -EAGAIN (timeout 0),
 *    -ETIMEDOUT (timeout > 0), -EPIPE, -EPROTO, -EMSGSIZE (a message past
 *    the limit sent, or a receive buffer smaller than the message), -EPERM
 *    (the other side's calls only), -EISCONN (handovers only), -EINVAL
 *    (an import with a bad side or fd only), -E2BIG (an import given a
 *    larger struct only);
 *  - never a message longer than the limit, nor a needed length past it,
 *    nor a batch packing more than its buffer;
 *  - after -EPROTO, the end reads as closed: stats.closed is 1, sends and
 *    receives fail with -EPIPE;
 *  - stats within their clamps (pending and peak at most the capacity,
 *    received at most sent);
 *  - no fd left behind: a refused handover closes what came, a freed
 *    channel closes all of its fds (every fd number probed with fcntl);
 *  - no crash and no sanitizer report in W, none in H (whose own checks:
 *    the seals hold).
 *
 * The library bugs this test found (with fuzz/fuzz_shared.h) are fixed;
 * tests/c/test_shared_findings.c has a minimal reproducer of each.
 */
#include <inttypes.h>
#include <sched.h>
#include <stdatomic.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>

#include "shm.h"

#define WATCHDOG_S 20    /* one call of W, or one step of H, this long: a hang */
#define OPS_MAX 600      /* W's calls per session at most */
#define BATCH_MAX 8
#define MSG_MAX 200      /* the largest message limit set */
#define MSG_DEFAULT 4096 /* a shared channel's limit when none is set */

/* ---- what the parent reads after a session ---- */

enum wop {
    W_SEND, W_BATCH, W_RECV, W_RECV_BATCH, W_RECV_MSG, W_CLOSE, W_STATS, W_POLL, W_WRONG_SIDE,
    W_CONSUMER, W_SEND_TO, W_EXPORT, W_TAKE, NWOPS
};
static const char *wop_name[NWOPS] = {
    "send", "batch send", "receive", "batch receive", "zero-copy receive", "close", "stats",
    "poll/epoll", "other side's call", "consumer enter/leave", "send_to", "export_fds",
    "recv_from/import_fds"
};

enum mut {
    M_POS, M_WPOS, M_LENGTH, M_BYTES, M_LOCK, M_REQUESTS, M_LAYOUT, M_PUNCH, M_PEAK, M_BURST,
    M_BELL, M_LINK, M_SEALS, M_TRAFFIC, M_DIE, M_NONBLOCK, M_HEADER_PUNCH, NMUTS
};
static const char *mut_name[NMUTS] = {
    "H's position word", "W's position word", "slot length", "slot bytes", "lock word", "requests word", "layout line",
    "punched pages", "peak word", "a word hammered", "doorbell eventfds", "link", "truncate/seal",
    "real traffic", "death", "doorbell O_NONBLOCK cleared", "the header's page punched"
};

enum lie {
    L_NONE, L_MSG_LEN, L_MAGIC, L_SIDE, L_NFDS, L_FD_KIND, L_SEALS, L_SIZE, L_LAYOUT, L_POSITIONS,
    L_LINK_GONE, L_SPLIT, L_EMPTY, L_IMPORT_SIDE, L_BIG_POSITIONS, L_WRITE_SEAL, L_IMPORT_SIZE, NLIES
};
static const char *lie_name[NLIES] = {
    "none (a good end)", "message length", "message magic", "message side", "fd count",
    "fd kind", "seals missing", "memfd size", "layout", "positions", "link already hung up",
    "message split", "socket closed empty", "import: bad side or fd", "positions at the top",
    "memfd write-sealed", "import: a larger struct"
};

struct record {
    /* W */
    _Atomic int op, mode;
    _Atomic int acceptable; /* H: the end it forged may be accepted */
    uint64_t codes[NWOPS][SHM_CODES];
    uint64_t broken, msgs, longest, successors, takes, lies[NLIES], refused[NLIES];
    /* H */
    uint64_t muts[NMUTS];
    char werr[512], herr[512];
};

static struct record *REC;
static int g_verbose;

/* ---- W: the well-behaved process ---- */

#define WFAIL(...) SHM_FAIL_INTO(REC->werr, __VA_ARGS__)

/* One end W uses, with what it knows of it. */
struct end {
    eventq_chan *ch;
    int side;       /* EVENTQ_SIDE_SEND or _RECV */
    size_t max_msg; /* the limit W made it with; for a taken end, what H said */
    int broken;     /* a call returned -EPROTO */
    int ep;         /* an epoll set holding both fds, edge-triggered */
};

static void end_init(struct end *e, eventq_chan *ch, size_t max_msg)
{
    e->ch = ch;
    e->side = eventq_chan_side(ch);
    if (e->side != EVENTQ_SIDE_SEND && e->side != EVENTQ_SIDE_RECV)
        WFAIL("eventq_chan_side of a shared end: %d", e->side);
    e->max_msg = max_msg;
    e->broken = 0;
    e->ep = epoll_create1(EPOLL_CLOEXEC);
    if (e->ep < 0)
        WFAIL("epoll_create1: %s", strerror(errno));
    int fds[2] = { eventq_chan_recv_fd(ch), eventq_chan_send_fd(ch) };
    for (int i = 0; i < 2; i++) {
        struct epoll_event ev = { .events = EPOLLIN | EPOLLET, .data.u32 = (uint32_t)i };
        if (fds[i] < 0 || epoll_ctl(e->ep, EPOLL_CTL_ADD, fds[i], &ev) != 0)
            WFAIL("an fd of the channel (%d) in epoll: %s", fds[i], strerror(errno));
    }
}

static void end_free(struct end *e)
{
    if (!e->ch)
        return;
    close(e->ep);
    eventq_chan_free(e->ch);
    e->ch = NULL;
}

static int64_t w_timeout(void)
{
    return shm_one_in(2) ? 0 : 1 + (int64_t)shm_below(1000000);
}

/* A call's code must be one of `ok` (a -errno list ending in 1); counts it. */
static int w_code(int op, int rc, const int *ok)
{
    REC->codes[op][shm_code_slot(rc)]++;
    if (rc >= 0)
        return rc;
    for (const int *p = ok; *p != 1; p++)
        if (rc == *p)
            return rc;
    WFAIL("%s returned %d (%s): not a code it may return", wop_name[op], rc, eventq_strerror(rc));
}

/* The codes of a data call, given its timeout and whether it is this end's side. */
static const int *data_codes(int64_t timeout, int right_side)
{
    static const int wait0[] = { -EAGAIN, -EPIPE, -EPROTO, 1 };
    static const int waitn[] = { -ETIMEDOUT, -EPIPE, -EPROTO, 1 };
    static const int wrong[] = { -EPERM, 1 };
    return !right_side ? wrong : timeout == 0 ? wait0 : waitn;
}

/* After -EPROTO, the end reads as closed on this side. */
static void w_broken(struct end *e, const char *by)
{
    if (e->broken)
        return;
    e->broken = 1;
    REC->broken++;
    eventq_chan_stats st;
    if (eventq_chan_get_stats(e->ch, &st, sizeof st) != 0 || st.closed != 1)
        WFAIL("after -EPROTO from %s, stats.closed is %llu, not 1", by, (unsigned long long)st.closed);
    uint8_t b[8];
    size_t len;
    int rc = e->side == EVENTQ_SIDE_SEND ? eventq_chan_send(e->ch, b, 1, 0)
                                         : eventq_chan_recv(e->ch, b, sizeof b, &len, 0);
    if (rc != -EPIPE)
        WFAIL("after -EPROTO from %s, a %s returned %d (%s), not -EPIPE", by,
              e->side == EVENTQ_SIDE_SEND ? "send" : "receive", rc, eventq_strerror(rc));
}

static void w_len_ok(const struct end *e, size_t len, const char *what)
{
    if (len > e->max_msg)
        WFAIL("%s: a message of %zu bytes, over the limit %zu", what, len, e->max_msg);
    REC->msgs++;
    if (len > REC->longest)
        REC->longest = len;
}

static void w_send(struct end *e, int batch)
{
    int right = e->side == EVENTQ_SIDE_SEND;
    int64_t t = w_timeout();
    eventq_buf bufs[BATCH_MAX];
    uint8_t *data[BATCH_MAX];
    size_t k = batch ? 1 + shm_below(BATCH_MAX) : 1;
    int too_long = shm_one_in(10);
    for (size_t i = 0; i < k; i++) {
        size_t len = shm_below(e->max_msg + 1);
        if (too_long && i == 0)
            len = e->max_msg + 1 + shm_below(3);
        data[i] = malloc(len ? len : 1);
        if (!data[i])
            WFAIL("malloc");
        memset(data[i], (int)i, len);
        bufs[i] = (eventq_buf){ .data = data[i], .len = len };
    }
    int op = batch ? W_BATCH : W_SEND;
    atomic_store(&REC->op, op);
    alarm(WATCHDOG_S);
    int rc = batch ? eventq_chan_send_batch(e->ch, bufs, k, t)
                   : eventq_chan_send(e->ch, bufs[0].data, bufs[0].len, t);
    alarm(0);
    /* A message past the limit on the receiving end: the limit is checked
     * first (-EMSGSIZE), or the side (-EPERM); both are the call's codes. */
    static const int toolong[] = { -EMSGSIZE, -EPIPE, -EPROTO, 1 };
    static const int toolong_wrong[] = { -EMSGSIZE, -EPERM, 1 };
    if (rc == -EMSGSIZE && !too_long)
        WFAIL("%s of %zu bytes (limit %zu): -EMSGSIZE", wop_name[op], bufs[0].len, e->max_msg);
    w_code(op, rc, too_long ? (right ? toolong : toolong_wrong) : data_codes(t, right));
    if (rc > 0 && (size_t)rc > k)
        WFAIL("a batch send of %zu returned %d", k, rc);
    if (rc == -EPROTO)
        w_broken(e, wop_name[op]);
    for (size_t i = 0; i < k; i++)
        free(data[i]);
}

static void w_recv(struct end *e, int op)
{
    int right = e->side == EVENTQ_SIDE_RECV;
    int64_t t = w_timeout();
    size_t m = op == W_RECV_BATCH ? 1 + shm_below(BATCH_MAX) : 1;
    /* Exactly the capacity passed, on the heap: ASan catches a write past it. */
    size_t cap = shm_one_in(4) ? shm_below(e->max_msg + 1) : e->max_msg * (op == W_RECV_BATCH ? m : 1);
    uint8_t *buf = malloc(cap ? cap : 1);
    size_t *lens = malloc(sizeof *lens * m);
    if (!buf || !lens)
        WFAIL("malloc");
    size_t len = 0;
    eventq_msg *msg = NULL;
    atomic_store(&REC->op, op);
    alarm(WATCHDOG_S);
    int rc = op == W_RECV ? eventq_chan_recv(e->ch, buf, cap, &len, t)
             : op == W_RECV_BATCH ? eventq_chan_recv_batch(e->ch, buf, cap, lens, m, t)
                                  : eventq_chan_recv_msg(e->ch, &msg, t);
    alarm(0);
    static const int small0[] = { -EAGAIN, -EPIPE, -EPROTO, -EMSGSIZE, 1 };
    static const int smalln[] = { -ETIMEDOUT, -EPIPE, -EPROTO, -EMSGSIZE, 1 };
    int small = op != W_RECV_MSG && cap < e->max_msg;
    w_code(op, rc, right && small ? (t == 0 ? small0 : smalln) : data_codes(t, right));
    if (rc == -EMSGSIZE) {
        size_t need = op == W_RECV_BATCH ? lens[0] : len;
        if (need <= cap || need > e->max_msg)
            WFAIL("%s: -EMSGSIZE needs %zu bytes (buffer %zu, limit %zu)", wop_name[op], need, cap,
                  e->max_msg);
    } else if (rc == -EPROTO) {
        w_broken(e, wop_name[op]);
    } else if (rc >= 0 && op == W_RECV_BATCH) {
        if (rc < 1 || (size_t)rc > m)
            WFAIL("a batch receive of %zu returned %d", m, rc);
        size_t total = 0;
        for (int i = 0; i < rc; i++) {
            w_len_ok(e, lens[i], "batch receive");
            total += lens[i];
        }
        if (total > cap)
            WFAIL("a batch receive packed %zu bytes into %zu", total, cap);
    } else if (rc >= 0 && op == W_RECV) {
        if (len > cap)
            WFAIL("a receive wrote %zu bytes into %zu", len, cap);
        w_len_ok(e, len, "receive");
    } else if (rc >= 0) {
        w_len_ok(e, eventq_msg_len(msg), "zero-copy receive");
        if (eventq_msg_len(msg) && !eventq_msg_data(msg))
            WFAIL("a zero-copy message without data");
        eventq_msg_free(msg);
    }
    free(buf);
    free(lens);
}

static void w_stats(struct end *e)
{
    eventq_chan_stats st;
    memset(&st, 0xa5, sizeof st);
    atomic_store(&REC->op, W_STATS);
    alarm(WATCHDOG_S);
    int rc = eventq_chan_get_stats(e->ch, &st, sizeof st);
    alarm(0);
    static const int none[] = { 1 };
    w_code(W_STATS, rc, none);
    if (st.received > st.sent || st.closed > 1 || (e->broken && !st.closed))
        WFAIL("stats: sent %llu received %llu closed %llu (broken %d)", (unsigned long long)st.sent,
              (unsigned long long)st.received, (unsigned long long)st.closed, e->broken);
    if (st.pending > (uint64_t)REC->mode || st.peak_depth > (uint64_t)REC->mode)
        WFAIL("stats: pending %llu, peak %llu, over the capacity %d", (unsigned long long)st.pending,
              (unsigned long long)st.peak_depth, REC->mode);
    if (st.pending_bytes > st.pending * e->max_msg)
        WFAIL("stats: %llu bytes pending in %llu messages of at most %zu",
              (unsigned long long)st.pending_bytes, (unsigned long long)st.pending, e->max_msg);
}

static void w_poll(struct end *e)
{
    atomic_store(&REC->op, W_POLL);
    alarm(WATCHDOG_S);
    struct pollfd p[2] = { { .fd = eventq_chan_recv_fd(e->ch), .events = POLLIN },
                           { .fd = eventq_chan_send_fd(e->ch), .events = POLLIN } };
    int n = poll(p, 2, (int)shm_below(2));
    if (n < 0 || (p[0].revents | p[1].revents) & POLLNVAL)
        WFAIL("poll on the channel's fds: %s", n < 0 ? strerror(errno) : "POLLNVAL");
    struct epoll_event evs[2];
    n = epoll_wait(e->ep, evs, 2, (int)shm_below(2));
    if (n < 0 && errno != EINTR)
        WFAIL("epoll_wait on the channel's fds: %s", strerror(errno));
    alarm(0);
    REC->codes[W_POLL][0]++;
}

static void w_consumer(struct end *e)
{
    static const int none[] = { 1 };
    static const int not_counted[] = { -EINVAL, 1 };
    atomic_store(&REC->op, W_CONSUMER);
    alarm(WATCHDOG_S);
    int leave_first = shm_one_in(4);
    if (!leave_first)
        w_code(W_CONSUMER, eventq_chan_consumer_enter(e->ch), none);
    int rc = eventq_chan_consumer_leave(e->ch);
    alarm(0);
    w_code(W_CONSUMER, rc, leave_first ? not_counted : none);
    if (leave_first && rc != -EINVAL)
        WFAIL("consumer_leave with none counted: %d", rc);
}

/* The other side's calls: -EPERM, and nothing changes. */
static void w_wrong_side(struct end *e)
{
    static const int perm[] = { -EPERM, 1 };
    uint8_t b[8] = { 0 };
    size_t len;
    atomic_store(&REC->op, W_WRONG_SIDE);
    alarm(WATCHDOG_S);
    int rc = e->side == EVENTQ_SIDE_SEND ? eventq_chan_recv(e->ch, b, sizeof b, &len, 0)
                                         : eventq_chan_send(e->ch, b, 1, 0);
    alarm(0);
    w_code(W_WRONG_SIDE, rc, perm);
    if (rc != -EPERM)
        WFAIL("the other side's call returned %d", rc);
}

/* A handover while H holds the other end: -EISCONN; once H is gone, a
 * successor end, made here (W then holds both: two mappings, as two
 * processes would), which W uses alongside. */
static void w_handover(struct end *e, struct end *succ)
{
    static const int isconn[] = { -EISCONN, 1 };
    int sv[2];
    SHM_SYS(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv));
    int export = shm_one_in(2);
    int op = export ? W_EXPORT : W_SEND_TO;
    eventq_shared_fds f;
    atomic_store(&REC->op, op);
    alarm(WATCHDOG_S);
    int rc = export ? eventq_chan_export_fds(e->ch, &f, sizeof f) : eventq_chan_send_to(e->ch, sv[0]);
    w_code(op, rc, isconn);
    if (rc == 0) {
        /* H may be alive (it made its link look hung up) and go on writing
         * its own position word: the successor's own. */
        /* H may have rewritten the layout or the positions: -EPROTO. */
        static const int checked[] = { -EPROTO, 1 };
        eventq_chan *ch = NULL;
        atomic_store(&REC->op, W_TAKE);
        int r2 = export ? eventq_chan_import_fds(&f, sizeof f, &ch) : eventq_chan_recv_from(sv[1], &ch);
        w_code(W_TAKE, r2, checked);
        if (r2 == 0) {
            end_free(succ);
            end_init(succ, ch, e->max_msg);
            REC->successors++;
        }
    }
    alarm(0);
    close(sv[0]);
    close(sv[1]);
}

/* W's calls on `e` (and a successor end, once made), `n` of them. */
static void drive(struct end *e, int n)
{
    struct end succ = { 0 };
    for (int i = 0; i < n; i++) {
        struct end *x = succ.ch && shm_one_in(2) ? &succ : e;
        int sends = x->side == EVENTQ_SIDE_SEND;
        switch (shm_below(20)) {
        case 0: case 1: case 2: case 3: case 4: case 5:
            if (sends)
                w_send(x, 0);
            else
                w_recv(x, W_RECV);
            break;
        case 6: case 7: case 8:
            if (sends)
                w_send(x, 1);
            else
                w_recv(x, W_RECV_BATCH);
            break;
        case 9: case 10:
            if (sends)
                w_send(x, shm_one_in(2));
            else
                w_recv(x, W_RECV_MSG);
            break;
        case 11: w_stats(x); break;
        case 12: case 13: w_poll(x); break;
        case 14: w_wrong_side(x); break;
        case 15: w_consumer(x); break;
        case 16: w_handover(e, &succ); break;
        case 17:
            if (shm_one_in(200)) {
                static const int none[] = { 1 };
                atomic_store(&REC->op, W_CLOSE);
                alarm(WATCHDOG_S);
                w_code(W_CLOSE, eventq_chan_close(x->ch), none);
                alarm(0);
            }
            break;
        default:
            shm_spin(shm_random_delay(14));
            break;
        }
    }
    end_free(&succ);
}

/* ---- H: the hostile process ---- */

#define HFAIL(...) SHM_FAIL_INTO(REC->herr, __VA_ARGS__)

struct mapping {
    int mem, sealed;
    size_t h_pos, w_pos; /* the offsets of H's position word and of W's */
    _Atomic uint64_t *w; /* the memory as words */
    size_t bytes;
    uint64_t cap, max_msg;
};

/* Maps an end's memory for H, whose process takes side `hside`. */
static void h_map(struct mapping *m, int mem, uint64_t cap, uint64_t max_msg, int sealed, int hside)
{
    m->h_pos = hside == EVENTQ_SIDE_SEND ? SHM_OFF_TAIL : SHM_OFF_HEAD;
    m->w_pos = hside == EVENTQ_SIDE_SEND ? SHM_OFF_HEAD : SHM_OFF_TAIL;
    struct stat st;
    SHM_SYS(fstat(mem, &st));
    m->mem = mem;
    m->sealed = sealed;
    m->bytes = (size_t)st.st_size;
    m->cap = cap;
    m->max_msg = max_msg;
    void *p = mmap(NULL, m->bytes, PROT_READ | PROT_WRITE, MAP_SHARED, mem, 0);
    if (p == MAP_FAILED)
        HFAIL("mmap of the channel's memfd: %s", strerror(errno));
    m->w = p;
}

static _Atomic uint64_t *word(struct mapping *m, size_t off)
{
    return &m->w[off / 8];
}

/* A position word's next value: garbage, moved by a little or a lot either
 * way, past the capacity, at the top, or its flags toggled. */
static uint64_t bad_position(uint64_t cur, uint64_t cap)
{
    uint64_t pos = cur >> SHM_FLAG_BITS, flags = cur & 7;
    switch (shm_below(8)) {
    case 0: return shm_rand();
    case 1: return ((pos + 1 + shm_below(cap + 2)) << SHM_FLAG_BITS) | flags;
    case 2: return ((pos - 1 - shm_below(cap + 2)) << SHM_FLAG_BITS) | flags;
    case 3: return ((pos + cap + 1 + shm_below(1u << 20)) << SHM_FLAG_BITS) | flags;
    case 4: return (((1ull << 61) - 1 - shm_below(3)) << SHM_FLAG_BITS) | flags;
    case 5: return cur ^ (1 + shm_below(7));
    case 6: return 0;
    default: return cur ^ (1ull << (SHM_FLAG_BITS + shm_below(61)));
    }
}

static uint64_t bad_length(uint64_t max_msg)
{
    switch (shm_below(6)) {
    case 0: return max_msg + 1;
    case 1: return max_msg + 1 + shm_below(1u << 20);
    case 2: return shm_rand();
    case 3: return UINT64_MAX;
    case 4: return max_msg;
    default: return shm_below(max_msg + 1);
    }
}

/* One hostile act on the mapping and fds of an end; `f` are H's fds of it,
 * `own` H's own end (imported) or NULL. */
static int g_wild; /* H breaks the protocol often (else mostly acts within it) */

static void h_act(struct mapping *m, eventq_shared_fds *f, eventq_chan *own)
{
    /* Mild: the lock, requests, layout, peak and slot bytes, the eventfds,
     * real traffic; now and then anything. */
    static const int mild[] = { M_BYTES, M_LOCK, M_REQUESTS, M_LAYOUT, M_PEAK, M_BELL, M_SEALS,
                                M_TRAFFIC, M_TRAFFIC, M_TRAFFIC, M_TRAFFIC, M_TRAFFIC };
    int what = g_wild || shm_one_in(3000) ? (int)shm_below(NMUTS)
                                         : mild[shm_below(sizeof mild / sizeof mild[0])];
    if (what == M_DIE && !shm_one_in(8))
        what = M_TRAFFIC;
    REC->muts[what]++;
    uint64_t slots = m->bytes > SHM_OFF_SLOTS ? (m->bytes - SHM_OFF_SLOTS) / 8 : 0;
    switch (what) {
    case M_POS:
    case M_WPOS: {
        _Atomic uint64_t *p = word(m, what == M_POS ? m->h_pos : m->w_pos);
        atomic_store(p, bad_position(atomic_load(p), m->cap));
        break;
    }
    case M_LENGTH:
        if (slots) {
            uint64_t slot = shm_below(m->cap ? m->cap : 1) * shm_slot_lines(m->max_msg) * 8;
            if (slot < slots)
                atomic_store(&m->w[SHM_OFF_SLOTS / 8 + slot], bad_length(m->max_msg));
        }
        break;
    case M_BYTES:
        /* Message bytes; the length words too when wild. */
        for (int i = 0; slots && i < 16; i++) {
            uint64_t k = shm_below(slots), per = shm_slot_lines(m->max_msg) * 8;
            if (k % per || g_wild)
                atomic_store(&m->w[SHM_OFF_SLOTS / 8 + k], shm_rand());
        }
        break;
    case M_LOCK: {
        static const uint64_t marks[] = { 1, 2, 3, 0 };
        atomic_store(word(m, SHM_OFF_LOCK), shm_one_in(3) ? shm_rand() : marks[shm_below(4)]);
        break;
    }
    case M_REQUESTS:
        atomic_store(word(m, SHM_OFF_REQUESTS), shm_one_in(2) ? shm_rand() : 1 + shm_below(15));
        break;
    case M_LAYOUT:
        for (int i = 0; i < 6; i++)
            if (shm_one_in(2))
                atomic_store(word(m, SHM_OFF_LAYOUT + 8 * (size_t)i), shm_one_in(2) ? shm_rand() : 0);
        break;
    case M_PUNCH:
    case M_HEADER_PUNCH: {
        /* The first page holds both positions, the layout and the lock. */
        size_t page = 4096, pages = m->bytes / page;
        off_t off = what == M_HEADER_PUNCH ? 0 : (off_t)((1 + shm_below(pages + 1)) * page);
        off_t len = (off_t)((1 + shm_below(4)) * page);
        if (fallocate(m->mem, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, off, len) != 0)
            HFAIL("fallocate(PUNCH_HOLE) on the memfd: %s", strerror(errno));
        break;
    }
    case M_PEAK:
        atomic_store(word(m, SHM_OFF_PEAK), shm_rand());
        break;
    case M_BURST: {
        size_t offs[] = { SHM_OFF_REQUESTS, SHM_OFF_LOCK, m->h_pos, m->w_pos };
        _Atomic uint64_t *p = word(m, offs[shm_below(4)]);
        for (uint64_t i = 0, n = shm_random_delay(16); i < n; i++)
            atomic_fetch_xor(p, 1 + (i & 7));
        break;
    }
    case M_BELL: {
        int fd = shm_one_in(2) ? f->recv_bell : f->send_bell;
        fcntl(fd, F_SETFL, O_NONBLOCK); /* (undoes M_NONBLOCK) */
        uint64_t v = shm_one_in(3) ? 0xfffffffffffffffeull - shm_below(2) : 1 + shm_below(100);
        if (shm_one_in(2))
            (void)!write(fd, &v, 8);
        else
            (void)!read(fd, &v, 8);
        break;
    }
    case M_LINK:
        if (shm_one_in(2))
            (void)!write(f->link, "x", 1);
        else
            shutdown(f->link, shm_one_in(2) ? SHUT_WR : SHUT_RDWR);
        break;
    case M_SEALS:
        if (!m->sealed)
            break;
        if (ftruncate(m->mem, (off_t)(shm_one_in(2) ? m->bytes / 2 : m->bytes * 2)) == 0)
            HFAIL("ftruncate of the channel's memfd succeeded: its size is not sealed");
        if (fcntl(m->mem, F_ADD_SEALS, F_SEAL_WRITE) == 0 || fcntl(m->mem, F_ADD_SEALS, F_SEAL_FUTURE_WRITE) == 0)
            HFAIL("F_ADD_SEALS on the channel's memfd succeeded: it is not sealed with F_SEAL_SEAL");
        break;
    case M_TRAFFIC:
        if (own) {
            uint8_t b[MSG_DEFAULT];
            size_t len;
            for (int i = 0, n = 1 + (int)shm_below(8); i < n; i++) {
                if (eventq_chan_side(own) == EVENTQ_SIDE_SEND)
                    (void)eventq_chan_send(own, b, shm_below(m->max_msg + 1), 0);
                else
                    (void)eventq_chan_recv(own, b, sizeof b, &len, 0);
            }
        }
        break;
    case M_DIE:
        _exit(0);
    case M_NONBLOCK: {
        int fd = shm_one_in(2) ? f->recv_bell : f->send_bell;
        uint64_t v = 0xfffffffffffffffeull;
        fcntl(fd, F_SETFL, O_NONBLOCK);
        if (shm_one_in(2))
            (void)!read(fd, &v, 8); /* empty: the library's next read blocks */
        else
            (void)!write(fd, &v, 8); /* full: the library's next write blocks */
        fcntl(fd, F_SETFL, 0);
        break;
    }
    }
}

/* H keeps acting until the parent kills it. */
static void h_loop(struct mapping *m, eventq_shared_fds *f, eventq_chan *own)
{
    g_wild = shm_one_in(3);
    for (;;) {
        alarm(WATCHDOG_S);
        h_act(m, f, own);
        shm_spin(shm_random_delay(g_wild ? 15 : 18));
    }
}

/* ---- sessions ---- */

static eventq_chan_opts opts_of(uint64_t cap, uint64_t max_msg)
{
    eventq_chan_opts o;
    eventq_chan_opts_init(&o, sizeof o);
    o.capacity = cap;
    o.max_msg_size = max_msg;
    o.low_water = shm_below(cap);
    return o;
}

/* W of a mapping session: makes the channel, hands the other end to H as
 * fds, then drives its end. */
static void w_mapping(int sock, uint64_t cap, uint64_t max_msg, size_t limit, int nops)
{
    int side = shm_one_in(2) ? EVENTQ_SIDE_SEND : EVENTQ_SIDE_RECV;
    eventq_chan_opts o = opts_of(cap, max_msg);
    eventq_chan *ch;
    int base = shm_count_fds();
    if (eventq_chan_new_shared(&o, side, &ch) != 0)
        WFAIL("eventq_chan_new_shared");
    eventq_shared_fds f;
    if (eventq_chan_export_fds(ch, &f, sizeof f) != 0 || shm_send_exported(sock, &f) != 0)
        WFAIL("handing the other end to H");
    char c;
    if (!shm_readable(sock, WATCHDOG_S * 1000) || read(sock, &c, 1) != 1)
        WFAIL("H did not take the channel");
    struct end e;
    end_init(&e, ch, limit);
    drive(&e, nops);
    end_free(&e);
    int now = shm_count_fds();
    if (now != base)
        WFAIL("%d fds open after the channel was freed, %d before", now, base);
}

static void h_mapping(int sock, uint64_t cap, uint64_t max_msg)
{
    eventq_shared_fds f;
    if (shm_recv_exported(sock, &f) != 0)
        HFAIL("no end from W");
    struct mapping m;
    h_map(&m, dup(f.mem), cap, max_msg, 1, f.side);
    eventq_chan *own = NULL;
    eventq_shared_fds mine = f;
    if (!shm_one_in(3)) {
        /* Also a real end: the bells and link are dup'd for the acts. */
        mine.recv_bell = dup(f.recv_bell);
        mine.send_bell = dup(f.send_bell);
        mine.link = dup(f.link);
        if (eventq_chan_import_fds(&f, sizeof f, &own) != 0)
            HFAIL("importing the end W handed over");
    }
    if (write(sock, "r", 1) != 1)
        HFAIL("telling W");
    h_loop(&m, &mine, own);
}

/* A layout line's words. */
static void layout_words(uint64_t w[6], uint64_t cap, uint64_t max_msg, uint64_t low)
{
    memcpy(&w[0], SHM_MAGIC, 8);
    w[1] = cap;
    w[2] = max_msg;
    w[3] = low;
    w[4] = shm_slot_lines(max_msg);
    w[5] = 0;
}

/* A file of a kind a channel's fd is not; *kind says which (see the cases). */
static int wrong_fd(int *kind)
{
    int fds[2], fd = -1;
    switch ((*kind = (int)shm_below(8))) {
    case 0:
        SHM_SYS(pipe2(fds, O_CLOEXEC));
        close(fds[1]);
        return fds[0];
    case 1:
        SHM_SYS(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds));
        close(fds[1]);
        return fds[0];
    case 2:
        fd = open("/dev/null", O_RDWR | O_CLOEXEC);
        break;
    case 3:
        fd = eventfd(0, EFD_CLOEXEC);
        break;
    case 4:
        fd = memfd_create("not-a-bell", MFD_CLOEXEC);
        break;
    case 5:
        fd = epoll_create1(EPOLL_CLOEXEC);
        break;
    case 6:
        fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
        break;
    default:
        fd = open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        break;
    }
    if (fd < 0)
        HFAIL("a file of the wrong kind: %s", strerror(errno));
    return fd;
}

/* H of a handover session: forges an end with `lie` and hands it to W
 * over `sock` (as a handover message, or the test's fds message when
 * `as_fds`), then mutates its memory. */
static void h_forge(int sock, int lie, int as_fds, int wside, uint64_t cap, uint64_t max_msg)
{
    uint64_t lines = shm_slot_lines(max_msg);
    uint64_t bytes = shm_bytes(cap, max_msg);
    unsigned seals = F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL;
    uint64_t lw[6];
    layout_words(lw, cap, max_msg, shm_below(cap));
    uint64_t head = shm_below(1ull << 40), tail = head + shm_below(cap + 1);
    switch (lie) {
    case L_SEALS: {
        static const unsigned s[] = { 0, F_SEAL_SHRINK, F_SEAL_GROW, F_SEAL_SEAL };
        seals = s[shm_below(4)];
        break;
    }
    case L_WRITE_SEAL:
        seals |= shm_one_in(2) ? F_SEAL_WRITE : F_SEAL_FUTURE_WRITE;
        break;
    case L_SIZE: {
        uint64_t sizes[] = { bytes - SHM_LINE, bytes + SHM_LINE, bytes - 8, bytes + 8,
                             SHM_LINE * 4, 0, bytes * 2 };
        bytes = sizes[shm_below(7)];
        break;
    }
    case L_LAYOUT:
        switch (shm_below(7)) {
        case 0: lw[0] ^= 1ull << shm_below(64); break;
        case 1: lw[1] = shm_one_in(2) ? 0 : (1ull << 24) + 1 + shm_below(1000); break;
        case 2: lw[2] = (16ull << 20) + 1 + shm_below(1000); lw[4] = shm_slot_lines(lw[2]); break;
        case 3: lw[4] = lines + 1 + shm_below(3); break;
        case 4: lw[3] = cap + shm_below(3); break;
        case 5: lw[1] = cap * 2; break;
        default: lw[shm_below(5)] = shm_rand() | 1ull << 62; break; /* the sixth word is unused */
        }
        break;
    case L_POSITIONS:
        if (shm_one_in(2))
            head = tail + 1 + shm_below(100);
        else
            tail = head + cap + 1 + shm_below(100);
        break;
    case L_BIG_POSITIONS: /* about 2^60, the last position in range, or the top of the word */
        head = (shm_one_in(3) ? (1ull << 61) - 3 : 1ull << 60) - shm_below(3);
        tail = head + shm_below(3);
        break;
    default:
        break;
    }
    int mem = memfd_create("eventq-forged", MFD_CLOEXEC | (seals ? MFD_ALLOW_SEALING : 0));
    if (mem < 0)
        HFAIL("memfd_create: %s", strerror(errno));
    SHM_SYS(ftruncate(mem, (off_t)bytes));
    if (bytes >= SHM_HEADER_LINES * SHM_LINE) {
        uint64_t t = tail << SHM_FLAG_BITS, h = head << SHM_FLAG_BITS;
        if (pwrite(mem, lw, sizeof lw, 0) != sizeof lw || pwrite(mem, &t, 8, SHM_OFF_TAIL) != 8 ||
            pwrite(mem, &h, 8, SHM_OFF_HEAD) != 8)
            HFAIL("writing the forged memory: %s", strerror(errno));
        /* Messages for a receiving W: valid lengths, at the head. */
        for (uint64_t p = head; p < tail && bytes >= shm_bytes(cap, max_msg); p++) {
            uint64_t len = shm_below(max_msg + 1);
            off_t off = (off_t)(SHM_OFF_SLOTS + (p % cap) * lines * SHM_LINE);
            if (pwrite(mem, &len, 8, off) != 8)
                HFAIL("writing a message: %s", strerror(errno));
        }
    }
    if (seals && fcntl(mem, F_ADD_SEALS, (int)seals) != 0)
        HFAIL("F_ADD_SEALS: %s", strerror(errno));
    int link[2];
    SHM_SYS(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, link));
    if (lie == L_LINK_GONE) {
        close(link[1]);
        link[1] = -1;
    }
    int fds[32] = { mem, eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK), eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK),
                    link[0] };
    int nfds = 4;
    /* What W may accept: a good end; one whose link is gone; the top of
     * the positions; a socket of another kind as the link, another eventfd
     * as a doorbell (silent: what a hostile peer may do anyway). */
    int acceptable = lie == L_NONE || lie == L_LINK_GONE || lie == L_SPLIT ||
                     (lie == L_BIG_POSITIONS && tail <= 1ull << 60);
    if (lie == L_FD_KIND) {
        int i = (int)shm_below(4), kind;
        close(fds[i]);
        fds[i] = wrong_fd(&kind);
        acceptable = (i == 3 && (kind == 1 || kind == 6)) || ((i == 1 || i == 2) && kind == 3);
    }
    if (lie == L_NFDS) {
        nfds = shm_one_in(4) ? 30 : (int)shm_below(11);
        for (int i = 4; i < nfds; i++)
            fds[i] = eventfd(0, EFD_CLOEXEC);
        acceptable = nfds == 4;
    }
    atomic_store(&REC->acceptable, acceptable);
    uint8_t msg[SHM_HANDOVER_LEN + 8] = { 0 };
    memcpy(msg, SHM_HANDOVER_MAGIC, 8);
    uint32_t side = (uint32_t)wside;
    if (lie == L_SIDE || (lie == L_IMPORT_SIDE && as_fds)) {
        static const uint32_t bad[] = { 0, 3, 0xffffffffu, 0x100 + 1 };
        side = bad[shm_below(4)];
    }
    memcpy(msg + 8, &side, 4);
    size_t len = SHM_HANDOVER_LEN;
    if (lie == L_MAGIC)
        msg[shm_below(8)] ^= (uint8_t)(1 + shm_below(255));
    if (lie == L_MSG_LEN)
        len = shm_one_in(2) ? shm_below(SHM_HANDOVER_LEN) : SHM_HANDOVER_LEN + 1 + shm_below(8);
    if (lie == L_MSG_LEN && len > SHM_HANDOVER_LEN)
        atomic_store(&REC->acceptable, 1); /* the library reads its 16 bytes */
    if (lie == L_EMPTY) {
        close(sock);
        _exit(0);
    }
    ssize_t sent;
    if (as_fds) {
        int32_t s32 = (int32_t)side;
        sent = shm_send_fds(sock, &s32, sizeof s32, fds, nfds);
    } else if (lie == L_SPLIT) {
        sent = shm_send_fds(sock, msg, 8, fds, nfds);
        if (sent == 8)
            sent = shm_send_fds(sock, msg + 8, len - 8, NULL, 0);
    } else {
        sent = shm_send_fds(sock, msg, len, fds, nfds);
    }
    if (sent < 0)
        HFAIL("sending the forged end: %s", strerror(errno));
    /* A short message: the rest never comes. On a blocking socket
     * eventq_chan_recv_from waits for the whole message ("blocks until the
     * message comes"), so H says it is done sending. */
    if (lie == L_MSG_LEN && len < SHM_HANDOVER_LEN)
        shutdown(sock, SHUT_WR);

    /* Once W has taken it (or refused it), go on mutating the memory (the
     * link's end kept: H lives). */
    char c;
    if (!shm_readable(sock, WATCHDOG_S * 1000) || read(sock, &c, 1) != 1)
        HFAIL("W did not say it took the end");
    struct mapping m = { .mem = -1 };
    eventq_shared_fds mine = { .mem = mem, .recv_bell = fds[1], .send_bell = fds[2], .link = link[1] };
    unsigned all = F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL;
    if (bytes >= SHM_HEADER_LINES * SHM_LINE && lie != L_FD_KIND && lie != L_WRITE_SEAL) {
        h_map(&m, mem, cap, max_msg, (seals & all) == all,
              wside == EVENTQ_SIDE_SEND ? EVENTQ_SIDE_RECV : EVENTQ_SIDE_SEND);
        h_loop(&m, &mine, NULL);
    }
    for (;;)
        pause();
}

/* W of a handover session: takes what H hands over and, if it is
 * accepted, drives it. */
static void w_take(int sock, int lie, int as_fds, uint64_t cap, uint64_t max_msg, int nops)
{
    (void)cap;
    int base = shm_count_fds();
    eventq_chan *ch = NULL;
    int rc;
    atomic_store(&REC->op, W_TAKE);
    alarm(WATCHDOG_S);
    if (as_fds) {
        int32_t side = 0;
        int fds[10], n = 0;
        if (!shm_readable(sock, WATCHDOG_S * 1000))
            WFAIL("no fds from H");
        ssize_t r = shm_recv_fds(sock, &side, sizeof side, fds, 10, &n);
        if (r != (ssize_t)sizeof side || n != 4)
            WFAIL("the test's own fds message from H: %zd bytes, %d fds", r, n);
        eventq_shared_fds f = { .side = side, .mem = fds[0], .recv_bell = fds[1],
                                .send_bell = fds[2], .link = fds[3] };
        if (lie == L_IMPORT_SIDE && shm_one_in(2)) {
            int i = (int)shm_below(4);
            int *slot = i == 0 ? &f.mem : i == 1 ? &f.recv_bell : i == 2 ? &f.send_bell : &f.link;
            close(*slot);
            *slot = -1;
        }
        if (lie == L_IMPORT_SIZE) {
            struct {
                eventq_shared_fds f;
                uint64_t more;
            } big = { f, 1 };
            rc = eventq_chan_import_fds(&big.f, sizeof big, &ch);
        } else {
            rc = eventq_chan_import_fds(&f, sizeof f, &ch);
        }
        if (rc != 0)
            for (int i = 0; i < 4; i++) {
                int fd = i == 0 ? f.mem : i == 1 ? f.recv_bell : i == 2 ? f.send_bell : f.link;
                if (fd >= 0 && shm_fd_open(fd))
                    WFAIL("import_fds failed (%s) and left fd %d open (the header: taken over on every path)",
                          eventq_strerror(rc), fd);
            }
    } else {
        if (shm_one_in(4) && !shm_readable(sock, 0)) {
            /* Non-blocking, nothing yet: -EAGAIN, nothing taken. */
            int fl = fcntl(sock, F_GETFL);
            fcntl(sock, F_SETFL, fl | O_NONBLOCK);
            rc = eventq_chan_recv_from(sock, &ch);
            fcntl(sock, F_SETFL, fl);
            static const int again[] = { -EAGAIN, -EPROTO, 1 };
            w_code(W_TAKE, rc, again);
            if (rc == 0)
                goto taken;
            if (rc == -EPROTO)
                goto refused;
        }
        rc = eventq_chan_recv_from(sock, &ch);
    }
    {
        static const int taking[] = { -EPROTO, -EINVAL, -E2BIG, 1 };
        w_code(W_TAKE, rc, taking);
        if (rc == -EINVAL && !(as_fds && lie == L_IMPORT_SIDE))
            WFAIL("-EINVAL from a take of %s", lie_name[lie]);
        if ((rc == -E2BIG) != (lie == L_IMPORT_SIZE))
            WFAIL("%d from a take of %s", rc, lie_name[lie]);
    }
    if (rc != 0)
        goto refused;
taken:
    alarm(0);
    if (write(sock, "t", 1) != 1)
        WFAIL("telling H: %s", strerror(errno));
    REC->takes++;
    if (!atomic_load(&REC->acceptable))
        WFAIL("an end with a lie (%s) was accepted", lie_name[lie]);
    {
        struct end e;
        end_init(&e, ch, max_msg);
        drive(&e, nops);
        end_free(&e);
    }
    if (shm_count_fds() != base)
        WFAIL("%d fds open after the taken end was freed, %d before", shm_count_fds(), base);
    return;
refused:
    alarm(0);
    (void)!write(sock, "r", 1); /* H may be gone (it closed the socket empty) */
    REC->refused[lie]++;
    if (lie == L_NONE)
        WFAIL("a good end was refused: %s", eventq_strerror(rc));
    if (shm_count_fds() != base)
        WFAIL("a refused take (%s: %s) left %d fds open, %d before", lie_name[lie],
              eventq_strerror(rc), shm_count_fds(), base);
}

/* ---- the parent ---- */

static struct {
    uint64_t sessions, mapping, handover, ops, broken, msgs, longest, successors, takes;
    uint64_t codes[NWOPS][SHM_CODES], muts[NMUTS], lies[NLIES], refused[NLIES];
} T;

static void session(uint64_t i, uint64_t seed)
{
    memset(REC, 0, sizeof *REC);
    shm_rng_state = shm_mix(seed);
    static const uint64_t caps[] = { 1, 2, 4, 8, 64 };
    static const uint64_t maxes[] = { 0, 8, 13, 64, MSG_MAX };
    uint64_t cap = caps[shm_below(5)], max_msg = maxes[shm_below(5)];
    int handover = shm_one_in(2);
    int lie = (int)shm_below(NLIES);
    int as_fds = shm_one_in(3) || lie == L_IMPORT_SIDE || lie == L_IMPORT_SIZE;
    if (as_fds && (lie == L_MSG_LEN || lie == L_MAGIC || lie == L_SIDE || lie == L_NFDS ||
                   lie == L_SPLIT || lie == L_EMPTY))
        as_fds = 0; /* lies of the handover message */
    if (!as_fds && (lie == L_IMPORT_SIDE || lie == L_IMPORT_SIZE))
        lie = L_NONE;
    int wside = shm_one_in(2) ? EVENTQ_SIDE_SEND : EVENTQ_SIDE_RECV;
    int nops = 50 + (int)shm_below(OPS_MAX - 50);
    REC->mode = (int)cap;
    if (g_verbose)
        printf("session %" PRIu64 " seed %" PRIu64 ": %s, capacity %" PRIu64 ", max_msg %" PRIu64
               ", lie %s%s, %d calls\n", i, seed, handover ? "handover" : "mapping", cap, max_msg,
               handover ? lie_name[lie] : "-", handover && as_fds ? " (as fds)" : "", nops);
    fflush(stdout);
    int sv[2];
    SHM_SYS(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv));
    uint64_t hseed = shm_rand(), wseed = shm_rand();
    pid_t h = fork();
    if (h < 0)
        shm_die("fork: %s", strerror(errno));
    if (h == 0) {
        shm_prog = "hostile H";
        close(sv[1]);
        shm_rng_state = hseed;
        signal(SIGALRM, SIG_DFL);
        if (handover)
            h_forge(sv[0], lie, as_fds, wside, cap, max_msg ? max_msg : MSG_DEFAULT);
        else
            h_mapping(sv[0], cap, max_msg ? max_msg : MSG_DEFAULT);
        _exit(0);
    }
    close(sv[0]);
    pid_t w = fork();
    if (w < 0)
        shm_die("fork: %s", strerror(errno));
    if (w == 0) {
        shm_prog = "hostile W";
        shm_rng_state = wseed;
        shm_watchdog("hostile: W hung in a call (watchdog)\n");
        if (handover)
            w_take(sv[1], lie, as_fds, cap, max_msg ? max_msg : MSG_DEFAULT, nops);
        else
            w_mapping(sv[1], cap, max_msg, max_msg ? max_msg : MSG_DEFAULT, nops);
        exit(0); /* exit, not _exit: LeakSanitizer runs at exit */
    }
    close(sv[1]);
    int st;
    char sbuf[64];
    while (waitpid(w, &st, 0) < 0)
        if (errno != EINTR)
            shm_die("waitpid: %s", strerror(errno));
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        fprintf(stderr, "hostile: session %" PRIu64 " (seed %" PRIu64 "): FAILED: W ended with %s in %s: %s%s%s\n"
                        "  replay: hostile -n 1 -s %" PRIu64 " -v\n",
                i, seed, shm_status(st, sbuf, sizeof sbuf), wop_name[atomic_load(&REC->op)],
                REC->werr[0] ? REC->werr : "(see above)", REC->herr[0] ? "; H: " : "", REC->herr,
                seed);
        kill(h, SIGKILL);
        waitpid(h, NULL, 0);
        exit(1);
    }
    kill(h, SIGKILL);
    while (waitpid(h, &st, 0) < 0)
        if (errno != EINTR)
            shm_die("waitpid: %s", strerror(errno));
    if (!(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL) && !(WIFEXITED(st) && WEXITSTATUS(st) == 0)) {
        fprintf(stderr, "hostile: session %" PRIu64 " (seed %" PRIu64 "): FAILED: H ended with %s: %s\n",
                i, seed, shm_status(st, sbuf, sizeof sbuf), REC->herr[0] ? REC->herr : "(see above)");
        exit(1);
    }
    T.sessions++;
    T.mapping += !handover;
    T.handover += handover;
    if (handover)
        T.lies[lie]++;
    T.broken += REC->broken;
    T.msgs += REC->msgs;
    T.successors += REC->successors;
    T.takes += REC->takes;
    if (REC->longest > T.longest)
        T.longest = REC->longest;
    for (int o = 0; o < NWOPS; o++)
        for (int c = 0; c < SHM_CODES; c++) {
            T.codes[o][c] += REC->codes[o][c];
            T.ops += REC->codes[o][c];
        }
    for (int m = 0; m < NMUTS; m++)
        T.muts[m] += REC->muts[m];
    for (int l = 0; l < NLIES; l++)
        T.refused[l] += REC->refused[l];
}

int main(int argc, char **argv)
{
    shm_prog = "hostile";
    struct shm_args a = shm_parse(argc, argv, 40, "SESSIONS");
    int quiet = a.quiet;
    g_verbose = a.verbose;
    REC = shm_shared_zeroed(sizeof *REC);
    double t0 = shm_seconds();
    for (uint64_t i = 0; i < a.n; i++)
        session(i, a.seed + i);
    printf("hostile: %" PRIu64 " sessions (seeds %" PRIu64 "..%" PRIu64 ") in %.1f s: %" PRIu64
           " with a hostile mapping, %" PRIu64 " with a hostile handover\n",
           T.sessions, a.seed, a.seed + a.n - 1, shm_seconds() - t0, T.mapping, T.handover);
    printf("  W: %" PRIu64 " calls, %" PRIu64 " messages (longest %" PRIu64 " bytes, never over the limit), "
           "%" PRIu64 " ends broken by -EPROTO (then read as closed), %" PRIu64 " successor ends, %"
           PRIu64 " handed-over ends accepted\n",
           T.ops, T.msgs, T.longest, T.broken, T.successors, T.takes);
    if (!quiet) {
        printf("  H's acts:");
        for (int m = 0; m < NMUTS; m++)
            if (T.muts[m])
                printf(" %s %" PRIu64 ";", mut_name[m], T.muts[m]);
        printf("\n  handovers (refused/forged):");
        for (int l = 0; l < NLIES; l++)
            if (T.lies[l])
                printf(" %s %" PRIu64 "/%" PRIu64 ";", lie_name[l], T.refused[l], T.lies[l]);
        printf("\n");
        for (int o = 0; o < NWOPS; o++) {
            char what[64];
            snprintf(what, sizeof what, "W %s", wop_name[o]);
            shm_print_codes(what, T.codes[o]);
        }
    }
    uint64_t all[SHM_CODES] = { 0 };
    for (int o = 0; o < NWOPS; o++)
        for (int c = 0; c < SHM_CODES; c++)
            all[c] += T.codes[o][c];
    shm_print_codes("W's return codes, all calls", all);
    printf("hostile: every check passed\n");
    return 0;
}
