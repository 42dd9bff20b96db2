/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * The channel's C ABI on one thread: D4 (receive fd readiness), D5
 * (capacity, byte limit, send fd and low water), D6 (close), D7 (too-small
 * buffers), zero-length messages, free and the drop hook, stats, fd flags.
 *
 * Uses only the channel API (this file is also linked against libeventq.a).
 * Readiness is checked with poll(2) and a zero timeout; nothing here waits
 * on another thread.
 */
#include "check.h" /* includes <eventq.h> */

#define T0 0                      /* timeout: never wait */
#define T1MS ((int64_t)1000000)   /* timeout: 1 ms (only to see -ETIMEDOUT) */

static eventq_chan *new_chan(size_t capacity, size_t low_water, size_t max_bytes,
                             size_t max_msg_size)
{
    eventq_chan_opts o;
    eventq_chan *ch = NULL;
    REQUIRE("opts_init", eventq_chan_opts_init(&o, sizeof o) == 0);
    o.capacity = capacity;
    o.low_water = low_water;
    o.max_bytes = max_bytes;
    o.max_msg_size = max_msg_size;
    int rc = eventq_chan_new(&o, &ch);
    REQUIRE("chan_new", rc == 0 && ch != NULL);
    return ch;
}

static eventq_chan_stats stats_of(const eventq_chan *ch)
{
    eventq_chan_stats s;
    memset(&s, 0xa5, sizeof s);
    int rc = eventq_chan_get_stats(ch, &s, sizeof s);
    REQUIRE("stats", rc == 0);
    return s;
}

static int send_str(const eventq_chan *ch, const char *s, int64_t t)
{
    return eventq_chan_send(ch, s, strlen(s), t);
}

/* Receives with eventq_chan_recv (timeout 0) and compares with want. */
static void expect_recv(const eventq_chan *ch, const char *want, const char *name)
{
    char buf[256];
    size_t len = 12345;
    int rc = eventq_chan_recv(ch, buf, sizeof buf, &len, T0);
    CHECK_MSG(name, rc == 0 && len == strlen(want) && memcmp(buf, want, len) == 0,
              "rc=%d len=%zu, want \"%s\"", rc, len, want);
}

static void expect_recv_msg(const eventq_chan *ch, const char *want, const char *name)
{
    eventq_msg *m = NULL;
    int rc = eventq_chan_recv_msg(ch, &m, T0);
    int ok = rc == 0 && m != NULL && eventq_msg_len(m) == strlen(want) &&
             memcmp(eventq_msg_data(m), want, strlen(want)) == 0;
    CHECK_MSG(name, ok, "rc=%d len=%zu, want \"%s\"", rc,
              m ? eventq_msg_len(m) : 0, want);
    eventq_msg_free(m);
}

/* ---------------------------------------------------------------------- */

static void test_defaults_and_fds(void)
{
    eventq_chan_opts o;
    memset(&o, 0x5a, sizeof o);
    CHECK_INT("opts_init returns 0", eventq_chan_opts_init(&o, sizeof o), 0);
    CHECK_U64("opts_init capacity", o.capacity, EVENTQ_DEFAULT_CAPACITY);
    CHECK_U64("opts_init max_bytes", o.max_bytes, 0);
    CHECK_U64("opts_init max_msg_size", o.max_msg_size, 0);
    CHECK_U64("opts_init low_water", o.low_water, EVENTQ_LOW_WATER_DEFAULT);
    CHECK("opts_init drop_fn", o.drop_fn == NULL && o.drop_userdata == NULL);

    eventq_chan *ch = NULL;
    CHECK_INT("new with NULL opts", eventq_chan_new(NULL, &ch), 0);
    REQUIRE("new with NULL opts gives a handle", ch != NULL);

    int rfd = eventq_chan_recv_fd(ch), sfd = eventq_chan_send_fd(ch);
    CHECK("recv fd valid", rfd >= 0);
    CHECK("send fd valid", sfd >= 0);
    CHECK("recv fd != send fd", rfd != sfd);
    CHECK("recv fd O_CLOEXEC", (fcntl(rfd, F_GETFD) & FD_CLOEXEC) != 0);
    CHECK("send fd O_CLOEXEC", (fcntl(sfd, F_GETFD) & FD_CLOEXEC) != 0);
    CHECK("recv fd O_NONBLOCK", (fcntl(rfd, F_GETFL) & O_NONBLOCK) != 0);
    CHECK("send fd O_NONBLOCK", (fcntl(sfd, F_GETFL) & O_NONBLOCK) != 0);

    eventq_chan *c2 = eventq_chan_clone(ch);
    CHECK("clone gives a handle", c2 != NULL && c2 != ch);
    CHECK("clone shares the recv fd", eventq_chan_recv_fd(c2) == rfd);
    CHECK("clone shares the send fd", eventq_chan_send_fd(c2) == sfd);

    /* D4/D5 at creation: nothing pending, room to send. */
    CHECK_INT("D4 new channel: recv fd not readable", fd_readable(rfd), 0);
    CHECK_INT("D5 new channel: send fd readable", fd_readable(sfd), 1);

    eventq_chan_stats s = stats_of(ch);
    CHECK("new channel: stats all zero",
          s.sent == 0 && s.received == 0 && s.pending == 0 && s.pending_bytes == 0 &&
              s.dropped == 0 && s.peak_depth == 0 && s.recv_doorbell_rings == 0 &&
              s.closed == 0);
    CHECK_U64("new channel: one send doorbell ring (creation)", s.send_doorbell_rings, 1);

    /* A message sent on one handle is received on the other. */
    CHECK_INT("send on clone", send_str(c2, "via clone", T0), 0);
    expect_recv(ch, "via clone", "recv on original gets the clone's message");
    eventq_chan_free(c2);

    /* The default maximum message size is accepted, one byte more is not. */
    size_t big = EVENTQ_DEFAULT_MAX_MSG_SIZE;
    char *p = malloc(big + 1);
    REQUIRE("malloc", p != NULL);
    memset(p, 'z', big + 1);
    CHECK_INT("default max message size accepted", eventq_chan_send(ch, p, big, T0), 0);
    CHECK_INT("default max message size + 1 refused",
              eventq_chan_send(ch, p, big + 1, T0), -EMSGSIZE);
    eventq_msg *m = NULL;
    CHECK_INT("recv_msg of 1 MiB", eventq_chan_recv_msg(ch, &m, T0), 0);
    CHECK("1 MiB message whole",
          m && eventq_msg_len(m) == big && memcmp(eventq_msg_data(m), p, big) == 0);
    eventq_msg_free(m);
    CHECK_INT("oversize message not queued", eventq_chan_recv_msg(ch, &m, T0), -EAGAIN);
    free(p);

    /* Once the last handle is freed, the channel's fds are closed. */
    eventq_chan_free(ch);
    CHECK("fds closed after last free",
          fcntl(rfd, F_GETFD) == -1 && errno == EBADF && fcntl(sfd, F_GETFD) == -1);
}

static void test_roundtrip_and_would_block(void)
{
    eventq_chan *ch = new_chan(8, EVENTQ_LOW_WATER_DEFAULT, 0, 0);
    int rfd = eventq_chan_recv_fd(ch);
    char buf[64];
    size_t len = 777;
    eventq_msg *m = (eventq_msg *)&len; /* sentinel: must stay untouched */
    size_t lens[2] = { 888, 999 };

    CHECK_INT("recv on empty, timeout 0: -EAGAIN",
              eventq_chan_recv(ch, buf, sizeof buf, &len, T0), -EAGAIN);
    CHECK_INT("recv on empty, timeout 1ms: -ETIMEDOUT",
              eventq_chan_recv(ch, buf, sizeof buf, &len, T1MS), -ETIMEDOUT);
    CHECK_U64("failed recv leaves *len alone", len, 777);
    CHECK_INT("recv_msg on empty, timeout 0: -EAGAIN",
              eventq_chan_recv_msg(ch, &m, T0), -EAGAIN);
    CHECK_INT("recv_msg on empty, timeout 1ms: -ETIMEDOUT",
              eventq_chan_recv_msg(ch, &m, T1MS), -ETIMEDOUT);
    CHECK("failed recv_msg leaves *out alone", m == (eventq_msg *)&len);
    CHECK_INT("recv_batch on empty, timeout 0: -EAGAIN",
              eventq_chan_recv_batch(ch, buf, sizeof buf, lens, 2, T0), -EAGAIN);
    CHECK_INT("recv_batch on empty, timeout 1ms: -ETIMEDOUT",
              eventq_chan_recv_batch(ch, buf, sizeof buf, lens, 2, T1MS), -ETIMEDOUT);
    CHECK("failed recv_batch leaves lens alone", lens[0] == 888 && lens[1] == 999);
    CHECK_INT("recv_batch with max_msgs 0 returns 0",
              eventq_chan_recv_batch(ch, buf, sizeof buf, lens, 0, T0), 0);
    CHECK_INT("recv_batch with NULL lens and max_msgs 0 returns 0",
              eventq_chan_recv_batch(ch, buf, sizeof buf, NULL, 0, T0), 0);
    CHECK_INT("send_batch with count 0 returns 0", eventq_chan_send_batch(ch, NULL, 0, T0), 0);
    CHECK_U64("nothing queued by empty batches", stats_of(ch).pending, 0);

    /* A positive timeout with a message there returns it at once. */
    CHECK_INT("send hello", send_str(ch, "hello", T1MS), 0);
    CHECK_INT("D4 after one send: recv fd readable", fd_readable(rfd), 1);
    CHECK_INT("recv with timeout 1ms, message there",
              eventq_chan_recv(ch, buf, sizeof buf, &len, T1MS), 0);
    CHECK("recv got hello", len == 5 && memcmp(buf, "hello", 5) == 0);
    CHECK_INT("D4 after draining: recv fd not readable", fd_readable(rfd), 0);

    /* Blocking (FOREVER) receives return at once when a message is there. */
    CHECK_INT("send x", send_str(ch, "x", EVENTQ_FOREVER), 0);
    CHECK_INT("recv_msg FOREVER with a message pending", eventq_chan_recv_msg(ch, &m, EVENTQ_FOREVER), 0);
    CHECK("recv_msg got x", eventq_msg_len(m) == 1 && eventq_msg_data(m)[0] == 'x');
    eventq_msg_free(m);

    /* A received message outlives its channel. */
    CHECK_INT("send survivor", send_str(ch, "survivor", T0), 0);
    m = NULL;
    CHECK_INT("recv_msg survivor", eventq_chan_recv_msg(ch, &m, T0), 0);
    eventq_chan_free(ch);
    CHECK("message outlives its channel",
          m && eventq_msg_len(m) == 8 && memcmp(eventq_msg_data(m), "survivor", 8) == 0);
    eventq_msg_free(m);
}

/* Every send API and every receive API interleaved on one channel: FIFO. */
static void test_fifo_across_apis(void)
{
    eventq_chan *ch = new_chan(64, EVENTQ_LOW_WATER_DEFAULT, 0, 0);
    char names[12][8];
    for (int i = 0; i < 12; i++)
        snprintf(names[i], sizeof names[i], "m%d", i);

    CHECK_INT("send m0", send_str(ch, names[0], T0), 0);
    eventq_buf b[5];
    for (int i = 0; i < 5; i++) {
        b[i].data = names[1 + i];
        b[i].len = strlen(names[1 + i]);
    }
    CHECK_INT("send_batch m1..m5 returns 5", eventq_chan_send_batch(ch, b, 5, T0), 5);
    CHECK_INT("send m6", send_str(ch, names[6], EVENTQ_FOREVER), 0);
    for (int i = 0; i < 5; i++) {
        b[i].data = names[7 + i];
        b[i].len = strlen(names[7 + i]);
    }
    CHECK_INT("send_batch m7..m11 (FOREVER) returns 5",
              eventq_chan_send_batch(ch, b, 5, EVENTQ_FOREVER), 5);
    CHECK_U64("12 pending", stats_of(ch).pending, 12);

    expect_recv(ch, "m0", "FIFO: recv m0");
    expect_recv_msg(ch, "m1", "FIFO: recv_msg m1");
    char buf[64];
    size_t lens[3];
    int n = eventq_chan_recv_batch(ch, buf, sizeof buf, lens, 3, T0);
    CHECK_MSG("FIFO: recv_batch m2 m3 m4", n == 3 && lens[0] == 2 && lens[1] == 2 &&
                                               lens[2] == 2 && memcmp(buf, "m2m3m4", 6) == 0,
              "n=%d", n);
    expect_recv(ch, "m5", "FIFO: recv m5");
    /* A batch bounded by the buffer: "m6m7m8" fits 6 bytes, m9 does not. */
    size_t lens8[8];
    n = eventq_chan_recv_batch(ch, buf, 7, lens8, 8, T0);
    CHECK_MSG("FIFO: recv_batch stops before a message that does not fit",
              n == 3 && memcmp(buf, "m6m7m8", 6) == 0, "n=%d", n);
    expect_recv_msg(ch, "m9", "FIFO: recv_msg m9");
    n = eventq_chan_recv_batch(ch, buf, sizeof buf, lens8, 8, T0);
    CHECK_MSG("FIFO: recv_batch takes the rest, m10 m11",
              n == 2 && lens8[0] == 3 && lens8[1] == 3 && memcmp(buf, "m10m11", 6) == 0,
              "n=%d", n);
    CHECK_INT("FIFO: then empty", eventq_chan_recv_batch(ch, buf, sizeof buf, lens8, 8, T0),
              -EAGAIN);
    eventq_chan_free(ch);
}

static void test_zero_length(void)
{
    eventq_chan *ch = new_chan(16, EVENTQ_LOW_WATER_DEFAULT, 0, 0);
    int rfd = eventq_chan_recv_fd(ch);
    char buf[16];
    size_t len = 99;

    CHECK_INT("zero-length send with NULL data", eventq_chan_send(ch, NULL, 0, T0), 0);
    CHECK_INT("D4 zero-length message makes recv fd readable", fd_readable(rfd), 1);
    eventq_chan_stats s = stats_of(ch);
    CHECK("zero-length message counted", s.pending == 1 && s.pending_bytes == 0 && s.sent == 1);
    CHECK_INT("zero-length recv into NULL/0 buffer",
              eventq_chan_recv(ch, NULL, 0, &len, T0), 0);
    CHECK_U64("zero-length recv: len 0", len, 0);
    CHECK_INT("D4 after zero-length drained: not readable", fd_readable(rfd), 0);

    CHECK_INT("zero-length send with non-NULL data", eventq_chan_send(ch, buf, 0, T0), 0);
    eventq_msg *m = NULL;
    CHECK_INT("zero-length recv_msg", eventq_chan_recv_msg(ch, &m, T0), 0);
    CHECK("zero-length recv_msg: len 0", m != NULL && eventq_msg_len(m) == 0);
    eventq_msg_free(m);

    /* Empty messages between non-empty ones are neither merged nor lost. */
    eventq_buf b[6] = {
        { "a", 1 }, { NULL, 0 }, { NULL, 0 }, { "bc", 2 }, { "", 0 }, { "d", 1 },
    };
    CHECK_INT("send_batch with empty messages", eventq_chan_send_batch(ch, b, 6, T0), 6);
    CHECK_INT("send empty", eventq_chan_send(ch, NULL, 0, T0), 0);
    CHECK_U64("7 pending, 4 bytes", stats_of(ch).pending * 100 + stats_of(ch).pending_bytes,
              704);
    expect_recv(ch, "a", "empty mix: a");
    size_t lens[4] = { 9, 9, 9, 9 };
    /* Two empty messages fit a NULL, zero-byte buffer; "bc" stops the batch. */
    int n = eventq_chan_recv_batch(ch, NULL, 0, lens, 4, T0);
    CHECK_MSG("empty mix: recv_batch into a 0-byte buffer takes the 2 empties",
              n == 2 && lens[0] == 0 && lens[1] == 0, "n=%d", n);
    n = eventq_chan_recv_batch(ch, buf, sizeof buf, lens, 4, T0);
    CHECK_MSG("empty mix: recv_batch bc, empty, d, empty",
              n == 4 && lens[0] == 2 && lens[1] == 0 && lens[2] == 1 && lens[3] == 0 &&
                  memcmp(buf, "bcd", 3) == 0,
              "n=%d", n);
    CHECK_INT("empty mix: drained", eventq_chan_recv(ch, buf, sizeof buf, &len, T0), -EAGAIN);
    s = stats_of(ch);
    CHECK("empty mix: stats", s.sent == 9 && s.received == 9 && s.pending == 0);

    /* Empty messages occupy capacity like any other. */
    eventq_chan *c1 = new_chan(2, EVENTQ_LOW_WATER_DEFAULT, 0, 0);
    CHECK("two empties fill capacity 2",
          eventq_chan_send(c1, NULL, 0, T0) == 0 && eventq_chan_send(c1, NULL, 0, T0) == 0);
    CHECK_INT("third empty: -EAGAIN", eventq_chan_send(c1, NULL, 0, T0), -EAGAIN);
    CHECK_INT("D5 full of empties: send fd not readable",
              fd_readable(eventq_chan_send_fd(c1)), 0);
    eventq_chan_free(c1);
    eventq_chan_free(ch);
}

/* D4 at quiescent points, also through close. */
static void test_d4_readiness(void)
{
    eventq_chan *ch = new_chan(16, EVENTQ_LOW_WATER_DEFAULT, 0, 0);
    int rfd = eventq_chan_recv_fd(ch);
    char buf[16];
    size_t len, lens[4];

    CHECK_INT("D4 new: not readable", fd_readable(rfd), 0);
    CHECK_INT("send 1", send_str(ch, "1", T0), 0);
    CHECK_INT("D4 one pending: readable", fd_readable(rfd), 1);
    CHECK_INT("D4 poll again: still readable (level)", fd_readable(rfd), 1);
    CHECK_INT("send 2", send_str(ch, "2", T0), 0);
    CHECK_INT("recv 1", eventq_chan_recv(ch, buf, sizeof buf, &len, T0), 0);
    CHECK_INT("D4 one of two taken: readable", fd_readable(rfd), 1);
    CHECK_INT("recv 2", eventq_chan_recv(ch, buf, sizeof buf, &len, T0), 0);
    CHECK_INT("D4 drained: not readable", fd_readable(rfd), 0);
    CHECK_INT("recv on drained: -EAGAIN", eventq_chan_recv(ch, buf, sizeof buf, &len, T0), -EAGAIN);
    CHECK_INT("D4 after -EAGAIN: not readable", fd_readable(rfd), 0);

    /* Through several empty/non-empty cycles and every receive API. */
    int ok = 1;
    for (int i = 0; i < 50; i++) {
        ok &= send_str(ch, "abc", T0) == 0;
        ok &= fd_readable(rfd) == 1;
        if (i % 3 == 0) {
            ok &= eventq_chan_recv(ch, buf, sizeof buf, &len, T0) == 0;
        } else if (i % 3 == 1) {
            eventq_msg *m = NULL;
            ok &= eventq_chan_recv_msg(ch, &m, T0) == 0;
            eventq_msg_free(m);
        } else {
            ok &= eventq_chan_recv_batch(ch, buf, sizeof buf, lens, 4, T0) == 1;
        }
        ok &= fd_readable(rfd) == 0;
    }
    CHECK("D4 50 cycles send/recv: readable iff pending", ok);

    /* Pending at close: stays readable through draining and after. */
    CHECK_INT("send a", send_str(ch, "a", T0), 0);
    CHECK_INT("close", eventq_chan_close(ch), 0);
    CHECK_INT("D4 closed with pending: readable", fd_readable(rfd), 1);
    CHECK_INT("recv a after close", eventq_chan_recv(ch, buf, sizeof buf, &len, T0), 0);
    CHECK_INT("D4 closed and drained: readable", fd_readable(rfd), 1);
    CHECK_INT("recv end of stream", eventq_chan_recv(ch, buf, sizeof buf, &len, T0), -EPIPE);
    CHECK_INT("D4 closed, after -EPIPE: still readable", fd_readable(rfd), 1);
    eventq_chan_free(ch);

    /* Closed while empty. */
    ch = new_chan(16, EVENTQ_LOW_WATER_DEFAULT, 0, 0);
    rfd = eventq_chan_recv_fd(ch);
    CHECK_INT("close empty", eventq_chan_close(ch), 0);
    CHECK_INT("D4 closed empty: readable", fd_readable(rfd), 1);
    CHECK_INT("recv: -EPIPE", eventq_chan_recv(ch, buf, sizeof buf, &len, T0), -EPIPE);
    CHECK_INT("recv_batch: -EPIPE", eventq_chan_recv_batch(ch, buf, sizeof buf, lens, 4, T0),
              -EPIPE);
    CHECK_INT("D4 closed empty after -EPIPEs: readable", fd_readable(rfd), 1);
    eventq_chan_free(ch);
}

static void fill(const eventq_chan *ch, int n, const char *tag)
{
    char s[32];
    int ok = 1;
    for (int i = 0; i < n; i++) {
        snprintf(s, sizeof s, "%s%d", tag, i);
        ok &= send_str(ch, s, T0) == 0;
    }
    CHECK_MSG("fill", ok, "a send of %d failed", n);
}

/* D5: capacity, the send fd and the low-water mark. */
static void test_d5_capacity(void)
{
    char buf[32];
    size_t len;

    /* Capacity 4, default low water 2. */
    eventq_chan *ch = new_chan(4, EVENTQ_LOW_WATER_DEFAULT, 0, 0);
    int sfd = eventq_chan_send_fd(ch), rfd = eventq_chan_recv_fd(ch);
    fill(ch, 3, "c");
    CHECK_INT("D5 3 of 4: send fd readable", fd_readable(sfd), 1);
    CHECK_INT("4th send fills", send_str(ch, "c3", T0), 0);
    CHECK_INT("D5 full: send fd not readable", fd_readable(sfd), 0);
    CHECK_INT("5th send, timeout 0: -EAGAIN", send_str(ch, "c4", T0), -EAGAIN);
    CHECK_INT("5th send, timeout 1ms: -ETIMEDOUT", send_str(ch, "c4", T1MS), -ETIMEDOUT);
    eventq_buf b[2] = { { "c4", 2 }, { "c5", 2 } };
    CHECK_INT("send_batch on full, timeout 0: -EAGAIN", eventq_chan_send_batch(ch, b, 2, T0),
              -EAGAIN);
    CHECK_INT("send_batch on full, timeout 1ms: -ETIMEDOUT",
              eventq_chan_send_batch(ch, b, 2, T1MS), -ETIMEDOUT);
    eventq_chan_stats s = stats_of(ch);
    CHECK("D5 refused sends not queued", s.pending == 4 && s.sent == 4 && s.peak_depth == 4);
    CHECK_INT("D5 full after refusals: send fd not readable", fd_readable(sfd), 0);
    CHECK_INT("D4 full: recv fd readable", fd_readable(rfd), 1);
    expect_recv(ch, "c0", "drain c0");
    CHECK_INT("D5 3 left (above low water 2): send fd not readable", fd_readable(sfd), 0);
    expect_recv(ch, "c1", "drain c1");
    CHECK_INT("D5 2 left (= default low water): send fd readable", fd_readable(sfd), 1);
    CHECK_U64("send doorbell: creation + one drain to low water",
              stats_of(ch).send_doorbell_rings, 2);
    /* Refill to full, then a batch that only partly fits. */
    CHECK_INT("send_batch of 2 into 2 free slots", eventq_chan_send_batch(ch, b, 2, T0), 2);
    CHECK_INT("D5 full again: send fd not readable", fd_readable(sfd), 0);
    expect_recv(ch, "c2", "drain c2");
    eventq_buf b3[3] = { { "c6", 2 }, { "c7", 2 }, { "c8", 2 } };
    CHECK_INT("send_batch of 3 into 1 free slot queues 1", eventq_chan_send_batch(ch, b3, 3, T0),
              1);
    expect_recv(ch, "c3", "order kept: c3");
    expect_recv(ch, "c4", "order kept: c4");
    expect_recv(ch, "c5", "order kept: c5");
    expect_recv(ch, "c6", "order kept: c6 (c7, c8 refused)");
    CHECK_INT("then empty", eventq_chan_recv(ch, buf, sizeof buf, &len, T0), -EAGAIN);
    CHECK_INT("D5 empty: send fd readable", fd_readable(sfd), 1);
    CHECK_U64("peak depth 4", stats_of(ch).peak_depth, 4);
    eventq_chan_free(ch);

    /* Custom low water: capacity 8, low water 5. */
    ch = new_chan(8, 5, 0, 0);
    sfd = eventq_chan_send_fd(ch);
    fill(ch, 8, "d");
    CHECK_INT("D5 custom: full, not readable", fd_readable(sfd), 0);
    CHECK_INT("D5 custom: 9th refused", send_str(ch, "x", T0), -EAGAIN);
    expect_recv(ch, "d0", "custom drain d0");
    expect_recv(ch, "d1", "custom drain d1");
    CHECK_INT("D5 custom: 6 left (> 5): not readable", fd_readable(sfd), 0);
    expect_recv(ch, "d2", "custom drain d2");
    CHECK_INT("D5 custom: 5 left (= low water 5): readable", fd_readable(sfd), 1);
    eventq_chan_free(ch);

    /* Low water 0: raised only once empty. Drain with one batch. */
    ch = new_chan(3, 0, 0, 0);
    sfd = eventq_chan_send_fd(ch);
    fill(ch, 3, "e");
    CHECK_INT("D5 low water 0: full, not readable", fd_readable(sfd), 0);
    expect_recv(ch, "e0", "lw0 drain e0");
    size_t lens[2];
    CHECK_INT("D5 low water 0: two left: not readable", fd_readable(sfd), 0);
    CHECK_INT("lw0 recv_batch of 1 (max_msgs 1)", eventq_chan_recv_batch(ch, buf, sizeof buf, lens, 1, T0), 1);
    CHECK("lw0 batch got e1", lens[0] == 2 && memcmp(buf, "e1", 2) == 0);
    CHECK_INT("D5 low water 0: one left: not readable", fd_readable(sfd), 0);
    expect_recv(ch, "e2", "lw0 drain e2");
    CHECK_INT("D5 low water 0: empty: readable", fd_readable(sfd), 1);
    eventq_chan_free(ch);

    /* Capacity 1 (default low water 0). */
    ch = new_chan(1, EVENTQ_LOW_WATER_DEFAULT, 0, 0);
    sfd = eventq_chan_send_fd(ch);
    CHECK_INT("cap 1: first send", send_str(ch, "only", T0), 0);
    CHECK_INT("cap 1: second send -EAGAIN", send_str(ch, "no", T0), -EAGAIN);
    CHECK_INT("D5 cap 1 full: not readable", fd_readable(sfd), 0);
    expect_recv(ch, "only", "cap 1: recv");
    CHECK_INT("D5 cap 1 drained: readable", fd_readable(sfd), 1);
    eventq_chan_free(ch);
}

/* D5 with a byte limit. */
static void test_d5_bytes(void)
{
    char big[128];
    memset(big, 'b', sizeof big);
    eventq_chan *ch = new_chan(8, EVENTQ_LOW_WATER_DEFAULT, 100, 0);
    int sfd = eventq_chan_send_fd(ch);

    CHECK_INT("bytes: 60 of 100", eventq_chan_send(ch, big, 60, T0), 0);
    CHECK_INT("bytes: 50 more does not fit: -EAGAIN", eventq_chan_send(ch, big, 50, T0), -EAGAIN);
    CHECK_INT("bytes: 50 more, 1ms: -ETIMEDOUT", eventq_chan_send(ch, big, 50, T1MS), -ETIMEDOUT);
    eventq_chan_stats s = stats_of(ch);
    CHECK("bytes: refused message not queued", s.pending == 1 && s.pending_bytes == 60);
    CHECK_INT("bytes: 40 fits exactly", eventq_chan_send(ch, big, 40, T0), 0);
    s = stats_of(ch);
    CHECK_U64("bytes: pending_bytes 100", s.pending_bytes, 100);
    CHECK_INT("D5 bytes full: send fd not readable", fd_readable(sfd), 0);
    CHECK_INT("bytes: 1 more: -EAGAIN", eventq_chan_send(ch, big, 1, T0), -EAGAIN);
    /* Default max_msg_size with max_bytes set is max_bytes. */
    CHECK_INT("bytes: message over max_bytes: -EMSGSIZE", eventq_chan_send(ch, big, 101, T0),
              -EMSGSIZE);
    eventq_buf b[2] = { { big, 10 }, { big, 10 } };
    CHECK_INT("bytes: send_batch on byte-full: -EAGAIN", eventq_chan_send_batch(ch, b, 2, T0),
              -EAGAIN);
    CHECK_U64("bytes: still 100 bytes", stats_of(ch).pending_bytes, 100);

    char buf[128];
    size_t len;
    CHECK_INT("bytes: recv 60", eventq_chan_recv(ch, buf, sizeof buf, &len, T0), 0);
    CHECK_U64("bytes: got 60", len, 60);
    /* Now 40 bytes queued in 1 message: below both marks. */
    CHECK_INT("D5 bytes drained to 40 of 100: send fd readable", fd_readable(sfd), 1);
    CHECK_INT("bytes: 60 fits again", eventq_chan_send(ch, big, 60, T0), 0);
    CHECK_INT("bytes: recv 40", eventq_chan_recv(ch, buf, sizeof buf, &len, T0), 0);
    CHECK_U64("bytes: got 40 (order kept)", len, 40);
    eventq_chan_free(ch);

    /* Explicit max_msg_size below max_bytes. */
    ch = new_chan(8, EVENTQ_LOW_WATER_DEFAULT, 100, 10);
    CHECK_INT("max_msg_size 10: 10 accepted", eventq_chan_send(ch, big, 10, T0), 0);
    CHECK_INT("max_msg_size 10: 11 refused", eventq_chan_send(ch, big, 11, T0), -EMSGSIZE);
    eventq_buf b3[3] = { { big, 5 }, { big, 11 }, { big, 5 } };
    CHECK_INT("send_batch: an oversize message ends the prefix",
              eventq_chan_send_batch(ch, b3, 3, T0), 1);
    CHECK_INT("send_batch: oversize first: -EMSGSIZE", eventq_chan_send_batch(ch, b3 + 1, 2, T0),
              -EMSGSIZE);
    s = stats_of(ch);
    CHECK("max_msg_size: only accepted messages queued", s.pending == 2 && s.pending_bytes == 15);
    eventq_chan_free(ch);
}

/* D6 close on one thread. */
static void test_d6_close(void)
{
    eventq_chan *ch = new_chan(3, EVENTQ_LOW_WATER_DEFAULT, 0, 0);
    eventq_chan *other = eventq_chan_clone(ch);
    int rfd = eventq_chan_recv_fd(ch), sfd = eventq_chan_send_fd(ch);
    char buf[32];
    size_t len = 4242, lens[4];
    eventq_msg *m = NULL;

    fill(ch, 3, "q");
    CHECK_INT("D5 full before close: send fd not readable", fd_readable(sfd), 0);
    CHECK_INT("close from another handle", eventq_chan_close(other), 0);
    CHECK_INT("close again: 0 (idempotent)", eventq_chan_close(ch), 0);
    CHECK_INT("close a third time from the other handle", eventq_chan_close(other), 0);
    CHECK_U64("stats closed", stats_of(ch).closed, 1);
    CHECK_INT("D6 send after close: -EPIPE", send_str(ch, "late", T0), -EPIPE);
    CHECK_INT("D6 send FOREVER after close: -EPIPE", send_str(ch, "late", EVENTQ_FOREVER), -EPIPE);
    CHECK_INT("D6 send 1ms after close: -EPIPE", send_str(ch, "late", T1MS), -EPIPE);
    eventq_buf b[1] = { { "late", 4 } };
    CHECK_INT("D6 send_batch after close: -EPIPE", eventq_chan_send_batch(ch, b, 1, T0), -EPIPE);
    CHECK_INT("D6 empty send after close: -EPIPE", eventq_chan_send(ch, NULL, 0, T0), -EPIPE);
    eventq_chan_stats s = stats_of(ch);
    CHECK("D6 refused sends after close not queued", s.pending == 3 && s.sent == 3);
    CHECK_INT("D6 closed (full): send fd readable", fd_readable(sfd), 1);
    CHECK_INT("D6 closed: recv fd readable", fd_readable(rfd), 1);

    /* D7 still applies after close. */
    CHECK_INT("D6 closed, too-small buffer: -EMSGSIZE",
              eventq_chan_recv(ch, buf, 1, &len, T0), -EMSGSIZE);
    expect_recv(ch, "q0", "D6 queued q0 received after close");
    CHECK_INT("D6 recv_msg q1 (FOREVER)", eventq_chan_recv_msg(other, &m, EVENTQ_FOREVER), 0);
    CHECK("D6 q1 whole", m && eventq_msg_len(m) == 2 && memcmp(eventq_msg_data(m), "q1", 2) == 0);
    eventq_msg_free(m);
    m = NULL;
    CHECK_INT("D6 recv_batch gets q2", eventq_chan_recv_batch(ch, buf, sizeof buf, lens, 4, T0), 1);
    CHECK("D6 q2 whole", lens[0] == 2 && memcmp(buf, "q2", 2) == 0);

    len = 4242;
    CHECK_INT("D6 end of stream: recv -EPIPE", eventq_chan_recv(ch, buf, sizeof buf, &len, T0),
              -EPIPE);
    CHECK_INT("D6 end of stream: recv FOREVER -EPIPE (no block)",
              eventq_chan_recv(ch, buf, sizeof buf, &len, EVENTQ_FOREVER), -EPIPE);
    CHECK_INT("D6 end of stream: recv 1ms -EPIPE",
              eventq_chan_recv(ch, buf, sizeof buf, &len, T1MS), -EPIPE);
    CHECK_U64("D6 end of stream leaves *len alone", len, 4242);
    CHECK_INT("D6 end of stream: recv_msg -EPIPE",
              eventq_chan_recv_msg(ch, &m, EVENTQ_FOREVER), -EPIPE);
    CHECK("D6 end of stream leaves *out alone", m == NULL);
    CHECK_INT("D6 end of stream: recv_batch -EPIPE",
              eventq_chan_recv_batch(other, buf, sizeof buf, lens, 4, EVENTQ_FOREVER), -EPIPE);
    CHECK_INT("D6 after end of stream: recv fd readable", fd_readable(rfd), 1);
    CHECK_INT("D6 after end of stream: send fd readable", fd_readable(sfd), 1);
    s = stats_of(ch);
    CHECK("D6 stats after drain", s.sent == 3 && s.received == 3 && s.pending == 0 && s.closed == 1);

    /* Freeing a handle does not close the channel for the others. */
    eventq_chan_free(other);
    eventq_chan *c2 = new_chan(4, EVENTQ_LOW_WATER_DEFAULT, 0, 0);
    eventq_chan *c3 = eventq_chan_clone(c2);
    eventq_chan_free(c3);
    CHECK_INT("free of one handle does not close", send_str(c2, "still open", T0), 0);
    CHECK_U64("still open: closed 0", stats_of(c2).closed, 0);
    eventq_chan_free(c2);
    eventq_chan_free(ch);
}

/* D7: too-small receive buffers. */
static void test_d7_too_small(void)
{
    eventq_chan *ch = new_chan(8, EVENTQ_LOW_WATER_DEFAULT, 0, 0);
    int rfd = eventq_chan_recv_fd(ch);
    char buf[64];
    size_t len = 0;

    CHECK_INT("send hello world", send_str(ch, "hello world", T0), 0);
    CHECK_INT("send x", send_str(ch, "x", T0), 0);
    CHECK_INT("D7 recv into 4 bytes: -EMSGSIZE", eventq_chan_recv(ch, buf, 4, &len, T0), -EMSGSIZE);
    CHECK_U64("D7 *len says 11", len, 11);
    len = 0;
    CHECK_INT("D7 recv into NULL/0: -EMSGSIZE", eventq_chan_recv(ch, NULL, 0, &len, T0), -EMSGSIZE);
    CHECK_U64("D7 *len says 11 again", len, 11);
    len = 0;
    CHECK_INT("D7 recv into 10 (one short), FOREVER: -EMSGSIZE",
              eventq_chan_recv(ch, buf, 10, &len, EVENTQ_FOREVER), -EMSGSIZE);
    CHECK_U64("D7 *len 11 for one short", len, 11);
    eventq_chan_stats s = stats_of(ch);
    CHECK("D7 nothing taken", s.pending == 2 && s.received == 0 && s.pending_bytes == 12);
    CHECK_INT("D7 recv fd still readable", fd_readable(rfd), 1);
    CHECK_INT("D7 recv into exactly 11", eventq_chan_recv(ch, buf, 11, &len, T0), 0);
    CHECK("D7 message whole", len == 11 && memcmp(buf, "hello world", 11) == 0);
    expect_recv(ch, "x", "D7 order kept: x next");

    /* recv_batch: head does not fit. */
    char twenty[21] = "twenty-bytes-message";
    CHECK_INT("send 20 bytes", eventq_chan_send(ch, twenty, 20, T0), 0);
    CHECK_INT("send five", send_str(ch, "five!", T0), 0);
    size_t lens[3] = { 1, 2, 3 };
    CHECK_INT("D7 recv_batch into 10: -EMSGSIZE",
              eventq_chan_recv_batch(ch, buf, 10, lens, 3, T0), -EMSGSIZE);
    CHECK("D7 recv_batch lens[0] = 20, rest untouched", lens[0] == 20 && lens[1] == 2 && lens[2] == 3);
    CHECK_INT("D7 recv_batch NULL/0 buffer: -EMSGSIZE",
              eventq_chan_recv_batch(ch, NULL, 0, lens, 3, T0), -EMSGSIZE);
    s = stats_of(ch);
    CHECK("D7 recv_batch took nothing", s.pending == 2 && s.received == 2);
    lens[1] = 77;
    CHECK_INT("D7 recv_batch into 22: takes only the head",
              eventq_chan_recv_batch(ch, buf, 22, lens, 3, T0), 1);
    CHECK("D7 head whole", lens[0] == 20 && memcmp(buf, twenty, 20) == 0);
    CHECK_INT("D7 recv_batch gets five", eventq_chan_recv_batch(ch, buf, 22, lens, 3, T0), 1);
    CHECK("D7 five whole", lens[0] == 5 && memcmp(buf, "five!", 5) == 0);
    CHECK_INT("D7 drained: not readable", fd_readable(rfd), 0);
    eventq_chan_free(ch);
}

struct drop_log {
    int calls;
    int matched[8];
    int bad;
};

static const char *const drop_expect[] = { "keep-1", "", "keep-three" };

static void on_drop(void *userdata, const uint8_t *data, size_t len)
{
    struct drop_log *log = userdata;
    log->calls++;
    for (int i = 0; i < 3; i++) {
        if (!log->matched[i] && len == strlen(drop_expect[i]) &&
            (len == 0 || memcmp(data, drop_expect[i], len) == 0)) {
            log->matched[i] = 1;
            return;
        }
    }
    log->bad++;
}

static eventq_chan *new_drop_chan(struct drop_log *log)
{
    eventq_chan_opts o;
    eventq_chan *ch = NULL;
    eventq_chan_opts_init(&o, sizeof o);
    o.capacity = 8;
    o.drop_fn = on_drop;
    o.drop_userdata = log;
    REQUIRE("new drop chan", eventq_chan_new(&o, &ch) == 0);
    return ch;
}

/* D1 at free: messages left are dropped, counted and passed to drop_fn. */
static void test_free(void)
{
    struct drop_log log = { 0, { 0 }, 0 };
    eventq_chan *ch = new_drop_chan(&log);
    eventq_chan *h2 = eventq_chan_clone(ch);
    CHECK_INT("send taken-1", send_str(ch, "taken-1", T0), 0);
    CHECK_INT("send keep-1", send_str(ch, "keep-1", T0), 0);
    CHECK_INT("send empty", eventq_chan_send(ch, NULL, 0, T0), 0);
    CHECK_INT("send keep-three", send_str(ch, "keep-three", T0), 0);
    expect_recv(h2, "taken-1", "free: receive one first");

    eventq_chan_stats st;
    memset(&st, 0x77, sizeof st);
    eventq_chan_stats sentinel = st;
    CHECK_INT("free_final with another handle alive: 0", eventq_chan_free_final(ch, &st, sizeof st), 0);
    CHECK("free_final 0 leaves *out alone", memcmp(&st, &sentinel, sizeof st) == 0);
    CHECK_INT("free_final 0: drop_fn not run", log.calls, 0);
    CHECK_U64("channel alive through the other handle", stats_of(h2).pending, 3);

    CHECK_INT("free_final on last handle: 1", eventq_chan_free_final(h2, &st, sizeof st), 1);
    CHECK_U64("free_final: dropped == messages left", st.dropped, 3);
    CHECK("free_final: final counters",
          st.sent == 4 && st.received == 1 && st.pending == 0 && st.pending_bytes == 0 &&
              st.peak_depth == 4 && st.closed == 0);
    CHECK_INT("drop_fn ran once per message", log.calls, 3);
    CHECK("drop_fn got each message's exact bytes",
          log.bad == 0 && log.matched[0] && log.matched[1] && log.matched[2]);

    /* eventq_chan_free on the last handle runs drop_fn too. */
    struct drop_log log2 = { 0, { 0 }, 0 };
    ch = new_drop_chan(&log2);
    CHECK_INT("send keep-1", send_str(ch, "keep-1", T0), 0);
    CHECK_INT("send empty", eventq_chan_send(ch, "", 0, T0), 0);
    CHECK_INT("send keep-three", send_str(ch, "keep-three", T0), 0);
    CHECK_INT("close before free", eventq_chan_close(ch), 0);
    eventq_chan_free(ch);
    CHECK("eventq_chan_free of last handle: drop_fn once per message, exact bytes",
          log2.calls == 3 && log2.bad == 0 && log2.matched[0] && log2.matched[1] &&
              log2.matched[2]);

    /* Nothing left: nothing dropped, drop_fn not run. */
    struct drop_log log3 = { 0, { 0 }, 0 };
    ch = new_drop_chan(&log3);
    CHECK_INT("send one", send_str(ch, "x", T0), 0);
    expect_recv(ch, "x", "recv it");
    CHECK_INT("free_final of drained channel: 1", eventq_chan_free_final(ch, &st, sizeof st), 1);
    CHECK("drained: dropped 0, drop_fn not run", st.dropped == 0 && log3.calls == 0);

    /* Without drop_fn: still counted. */
    ch = new_chan(8, EVENTQ_LOW_WATER_DEFAULT, 0, 0);
    fill(ch, 5, "n");
    CHECK_INT("free_final without drop_fn: 1", eventq_chan_free_final(ch, &st, sizeof st), 1);
    CHECK_U64("free_final without drop_fn: dropped 5", st.dropped, 5);

    /* NULL is a no-op. */
    eventq_chan_free(NULL);
    eventq_msg_free(NULL);
    CHECK("eventq_chan_free(NULL) and eventq_msg_free(NULL) are no-ops", 1);
}

/* The receive fd sleeps until asked for: no call writes it, and the first
 * ask brings it up to date. */
static void test_sleeping_recv_fd(void)
{
    eventq_chan *ch = new_chan(8, EVENTQ_LOW_WATER_DEFAULT, 0, 0);
    char buf[8];
    size_t len;
    CHECK_INT("send a", send_str(ch, "a", T0), 0);
    CHECK_INT("send b", send_str(ch, "b", T0), 0);
    CHECK_INT("blocking recv", eventq_chan_recv(ch, buf, sizeof buf, &len, -1), 0);
    CHECK_U64("no ring while nobody has the fd", stats_of(ch).recv_doorbell_rings, 0);
    int fd = eventq_chan_recv_fd(ch);
    CHECK("asked for: readable at once, b pending", fd >= 0 && fd_readable(fd));
    CHECK_U64("one ring: the wake's", stats_of(ch).recv_doorbell_rings, 1);
    CHECK_INT("recv b", eventq_chan_recv(ch, buf, sizeof buf, &len, 0), 0);
    CHECK("emptied: not readable", !fd_readable(fd));
    eventq_chan_free(ch);
}

/* Stats and the wakeup economy. */
static void test_stats(void)
{
    eventq_chan *ch = new_chan(2048, EVENTQ_LOW_WATER_DEFAULT, 0, 0);
    char buf[32];
    size_t len;

    /* Counted from the first time the receive fd is asked for. */
    CHECK("the receive fd", eventq_chan_recv_fd(ch) >= 0);

    int ok = 1;
    for (int i = 0; i < 1000; i++) {
        snprintf(buf, sizeof buf, "%d", i);
        ok &= send_str(ch, buf, T0) == 0;
    }
    CHECK("1000 sends", ok);
    eventq_chan_stats s = stats_of(ch);
    CHECK("after 1000 sends: sent 1000, pending 1000, peak 1000",
          s.sent == 1000 && s.pending == 1000 && s.peak_depth == 1000 && s.received == 0);
    CHECK_U64("1000-send burst: exactly 1 recv doorbell ring", s.recv_doorbell_rings, 1);
    int order_ok = 1;
    for (int i = 0; i < 1000; i++) {
        order_ok &= eventq_chan_recv(ch, buf, sizeof buf, &len, T0) == 0;
        buf[len < sizeof buf ? len : sizeof buf - 1] = '\0';
        order_ok &= atoi(buf) == i;
    }
    CHECK("1000 received in order", order_ok);
    s = stats_of(ch);
    CHECK("after drain: received 1000, pending 0, peak stays 1000",
          s.sent == 1000 && s.received == 1000 && s.pending == 0 && s.pending_bytes == 0 &&
              s.peak_depth == 1000);
    CHECK_U64("after drain: still 1 recv doorbell ring", s.recv_doorbell_rings, 1);
    CHECK_U64("never full: send doorbell rang only at creation", s.send_doorbell_rings, 1);

    /* A second burst rings once more. A batch of 100 rings once. */
    eventq_buf b[100];
    for (int i = 0; i < 100; i++) {
        b[i].data = "bb";
        b[i].len = 2;
    }
    CHECK_INT("batch of 100", eventq_chan_send_batch(ch, b, 100, T0), 100);
    CHECK_INT("and one more", send_str(ch, "last", T0), 0);
    s = stats_of(ch);
    CHECK("second burst: sent 1101, pending 101, bytes 204, 2 rings",
          s.sent == 1101 && s.pending == 101 && s.pending_bytes == 204 &&
              s.recv_doorbell_rings == 2);
    size_t lens[128];
    char big[512];
    CHECK_INT("recv_batch 101", eventq_chan_recv_batch(ch, big, sizeof big, lens, 128, T0), 101);
    s = stats_of(ch);
    CHECK("all received", s.received == 1101 && s.pending == 0 && s.peak_depth == 1000);

    /* Ping-pong: every send finds the queue empty, so every send rings. */
    for (int i = 0; i < 10; i++) {
        send_str(ch, "p", T0);
        eventq_chan_recv(ch, buf, sizeof buf, &len, T0);
    }
    CHECK_U64("ping-pong of 10: 10 more rings", stats_of(ch).recv_doorbell_rings, 12);
    eventq_chan_free(ch);
}

int main(void)
{
    check_init();
    test_defaults_and_fds();
    test_roundtrip_and_would_block();
    test_fifo_across_apis();
    test_zero_length();
    test_d4_readiness();
    test_d5_capacity();
    test_d5_bytes();
    test_d6_close();
    test_d7_too_small();
    test_free();
    test_sleeping_recv_fd();
    test_stats();
    return check_done();
}
