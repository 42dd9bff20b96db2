/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * Every bad input to the channel's C ABI gets its documented code, writes no
 * out-parameter, and loses nothing: after each bad call the channel holds
 * exactly what it held, and a later receive gets the right messages in
 * order. Also eventq_strerror for every code, the version, and fd
 * exhaustion (-EMFILE) at creation.
 */
#include "check.h" /* includes <eventq.h> */

#include <limits.h>
#include <stddef.h>
#include <sys/resource.h>
#include <sys/wait.h>

/* Codes seen, for the eventq_strerror checks. */
static int codes_seen[64];
static int ncodes_seen;

static void saw(int rc)
{
    if (rc >= 0)
        return;
    for (int i = 0; i < ncodes_seen; i++)
        if (codes_seen[i] == rc)
            return;
    if (ncodes_seen < 64)
        codes_seen[ncodes_seen++] = rc;
}

/* The channel under test holds "alpha" and "beta" throughout. */
#define HELD_MSGS 2
#define HELD_BYTES 9

/* One check: the call returned `want` and the channel still holds exactly
 * what it held (no message added, taken or dropped). */
static void bad(const char *name, int rc, int want, const eventq_chan *ch)
{
    eventq_chan_stats s;
    int src = eventq_chan_get_stats(ch, &s, sizeof s);
    int held = src == 0 && s.pending == HELD_MSGS && s.pending_bytes == HELD_BYTES &&
               s.sent == HELD_MSGS && s.received == 0 && s.closed == 0;
    saw(rc);
    CHECK_MSG(name, rc == want && held,
              "rc=%d (want %d); pending=%llu bytes=%llu sent=%llu received=%llu closed=%u", rc,
              want, (unsigned long long)s.pending, (unsigned long long)s.pending_bytes,
              (unsigned long long)s.sent, (unsigned long long)s.received, s.closed);
}

/*
 * A send whose length no buffer can have (above PTRDIFF_MAX) is over any
 * maximum message size: the header promises -EMSGSIZE. It runs in a child
 * process because the library may abort instead (it builds a Rust slice of
 * that length before checking the size, undefined behaviour that debug
 * builds turn into an abort). The child's exit status says what happened.
 */
static void huge_len_in_child(const char *name, const eventq_chan *ch, int batch, size_t len)
{
    fflush(stdout);
    pid_t pid = fork();
    REQUIRE("fork", pid >= 0);
    if (pid == 0) {
        static const char one = 'x';
        int devnull = open("/dev/null", O_WRONLY | O_CLOEXEC);
        if (devnull >= 0)
            dup2(devnull, STDERR_FILENO); /* a panic message, if any */
        eventq_buf b[1] = { { &one, len } };
        int rc = batch ? eventq_chan_send_batch(ch, b, 1, 0) : eventq_chan_send(ch, &one, len, 0);
        eventq_chan_stats s;
        int held = eventq_chan_get_stats(ch, &s, sizeof s) == 0 && s.pending == HELD_MSGS;
        _exit(rc == -EMSGSIZE && held ? 0 : rc < 0 && rc > -120 ? -rc : 120);
    }
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    saw(-EMSGSIZE);
    if (WIFSIGNALED(status))
        CHECK_MSG(name, 0, "the call killed the process with signal %d (%s)", WTERMSIG(status),
                  strsignal(WTERMSIG(status)));
    else
        CHECK_MSG(name, WIFEXITED(status) && WEXITSTATUS(status) == 0,
                  "rc was -%d (or 120: other), or the message was queued", WEXITSTATUS(status));
}

static eventq_chan *held_chan(void)
{
    eventq_chan_opts o;
    eventq_chan *ch = NULL;
    eventq_chan_opts_init(&o, sizeof o);
    o.capacity = 4;
    o.max_msg_size = 16;
    REQUIRE("chan_new", eventq_chan_new(&o, &ch) == 0);
    REQUIRE("send alpha", eventq_chan_send(ch, "alpha", 5, 0) == 0);
    REQUIRE("send beta", eventq_chan_send(ch, "beta", 4, 0) == 0);
    return ch;
}

static void test_bad_creation(void)
{
    eventq_chan_opts o;
    eventq_chan *const SENTINEL = (eventq_chan *)&o;
    eventq_chan *out;
    int rc;

    rc = eventq_chan_opts_init(NULL, sizeof(struct eventq_chan_opts));
    saw(rc);
    CHECK_INT("opts_init(NULL): -EINVAL", rc, -EINVAL);

    eventq_chan_opts_init(&o, sizeof o);
    rc = eventq_chan_new(&o, NULL);
    saw(rc);
    CHECK_INT("new(opts, NULL out): -EINVAL", rc, -EINVAL);
    CHECK_INT("new(NULL, NULL): -EINVAL", eventq_chan_new(NULL, NULL), -EINVAL);

    struct {
        const char *name;
        size_t capacity, low_water, max_bytes, max_msg_size;
    } cases[] = {
        { "new: zero capacity: -EINVAL", 0, EVENTQ_LOW_WATER_DEFAULT, 0, 0 },
        { "new: zero capacity with low_water 0: -EINVAL", 0, 0, 0, 0 },
        { "new: low_water == capacity: -EINVAL", 4, 4, 0, 0 },
        { "new: low_water > capacity: -EINVAL", 4, 10, 0, 0 },
        { "new: low_water == capacity 1: -EINVAL", 1, 1, 0, 0 },
        { "new: max_msg_size > max_bytes: -EINVAL", 4, EVENTQ_LOW_WATER_DEFAULT, 100, 101 },
        { "new: capacity > EVENTQ_MAX_CAPACITY: -EINVAL", EVENTQ_MAX_CAPACITY + 1,
          EVENTQ_LOW_WATER_DEFAULT, 0, 0 },
        { "new: capacity SIZE_MAX: -EINVAL", SIZE_MAX, EVENTQ_LOW_WATER_DEFAULT, 0, 0 },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        eventq_chan_opts_init(&o, sizeof o);
        o.capacity = cases[i].capacity;
        o.low_water = cases[i].low_water;
        o.max_bytes = cases[i].max_bytes;
        o.max_msg_size = cases[i].max_msg_size;
        out = SENTINEL;
        rc = eventq_chan_new(&o, &out);
        saw(rc);
        CHECK_MSG(cases[i].name, rc == -EINVAL && out == SENTINEL, "rc=%d, *out %s", rc,
                  out == SENTINEL ? "untouched" : "written");
    }

    /* The limits of what is valid. */
    struct {
        const char *name;
        size_t capacity, low_water, max_bytes, max_msg_size;
    } good[] = {
        { "new: low_water == capacity - 1: ok", 4, 3, 0, 0 },
        { "new: low_water 0: ok", 4, 0, 0, 0 },
        { "new: capacity 1: ok", 1, EVENTQ_LOW_WATER_DEFAULT, 0, 0 },
        { "new: max_msg_size == max_bytes: ok", 4, EVENTQ_LOW_WATER_DEFAULT, 100, 100 },
        { "new: max_msg_size without max_bytes above the default: ok", 4,
          EVENTQ_LOW_WATER_DEFAULT, 0, (size_t)EVENTQ_DEFAULT_MAX_MSG_SIZE * 2 },
    };
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        eventq_chan_opts_init(&o, sizeof o);
        o.capacity = good[i].capacity;
        o.low_water = good[i].low_water;
        o.max_bytes = good[i].max_bytes;
        o.max_msg_size = good[i].max_msg_size;
        out = NULL;
        rc = eventq_chan_new(&o, &out);
        CHECK_MSG(good[i].name, rc == 0 && out != NULL, "rc=%d", rc);
        eventq_chan_free(out);
    }
}

static void test_bad_calls(void)
{
    eventq_chan *ch = held_chan();
    char buf[64];
    char big[32];
    memset(big, 'x', sizeof big);
    int rc;

    /* Handles. */
    CHECK("clone(NULL) gives NULL", eventq_chan_clone(NULL) == NULL);
    bad("recv_fd(NULL): -EINVAL", eventq_chan_recv_fd(NULL), -EINVAL, ch);
    bad("send_fd(NULL): -EINVAL", eventq_chan_send_fd(NULL), -EINVAL, ch);
    bad("close(NULL): -EINVAL", eventq_chan_close(NULL), -EINVAL, ch);
    eventq_chan_stats st;
    bad("stats(NULL, out): -EINVAL", eventq_chan_get_stats(NULL, &st, sizeof st), -EINVAL, ch);
    bad("stats(chan, NULL): -EINVAL", eventq_chan_get_stats(ch, NULL, sizeof(struct eventq_chan_stats)), -EINVAL, ch);
    memset(&st, 0x3c, sizeof st);
    eventq_chan_stats st0 = st;
    bad("free_final(NULL, out): -EINVAL", eventq_chan_free_final(NULL, &st, sizeof st), -EINVAL, ch);
    CHECK("free_final(NULL, out) leaves *out alone", memcmp(&st, &st0, sizeof st) == 0);
    bad("free_final(chan, NULL): -EINVAL, nothing freed", eventq_chan_free_final(ch, NULL, sizeof(struct eventq_chan_stats)),
        -EINVAL, ch);
    CHECK("msg_data(NULL) is NULL", eventq_msg_data(NULL) == NULL);
    CHECK("msg_len(NULL) is 0", eventq_msg_len(NULL) == 0);

    /* send */
    bad("send(NULL chan): -EINVAL", eventq_chan_send(NULL, "x", 1, 0), -EINVAL, ch);
    bad("send(NULL chan, empty): -EINVAL", eventq_chan_send(NULL, NULL, 0, 0), -EINVAL, ch);
    bad("send(NULL data, len 3): -EINVAL", eventq_chan_send(ch, NULL, 3, 0), -EINVAL, ch);
    bad("send(NULL data, len 3, FOREVER): -EINVAL",
        eventq_chan_send(ch, NULL, 3, EVENTQ_FOREVER), -EINVAL, ch);
    bad("send timeout -2: -EINVAL", eventq_chan_send(ch, "x", 1, -2), -EINVAL, ch);
    bad("send timeout INT64_MIN: -EINVAL", eventq_chan_send(ch, "x", 1, INT64_MIN), -EINVAL, ch);
    bad("send oversize (17 > max 16): -EMSGSIZE", eventq_chan_send(ch, big, 17, 0), -EMSGSIZE,
        ch);
    bad("send oversize, FOREVER: -EMSGSIZE", eventq_chan_send(ch, big, 17, EVENTQ_FOREVER),
        -EMSGSIZE, ch);
    huge_len_in_child("BUG: send with len SIZE_MAX: -EMSGSIZE (no abort)", ch, 0, SIZE_MAX);
    huge_len_in_child("BUG: send with len PTRDIFF_MAX + 1: -EMSGSIZE (no abort)", ch, 0,
                      (size_t)PTRDIFF_MAX + 1);
    huge_len_in_child("send with len PTRDIFF_MAX: -EMSGSIZE", ch, 0, (size_t)PTRDIFF_MAX);
    huge_len_in_child("BUG: send_batch with msgs[0].len SIZE_MAX: -EMSGSIZE (no abort)", ch, 1,
                      SIZE_MAX);

    /* send_batch */
    eventq_buf one[1] = { { "x", 1 } };
    eventq_buf holey[3] = { { "ok", 2 }, { NULL, 5 }, { "ok", 2 } };
    eventq_buf over[2] = { { big, 17 }, { "ok", 2 } };
    bad("send_batch(NULL chan): -EINVAL", eventq_chan_send_batch(NULL, one, 1, 0), -EINVAL, ch);
    bad("send_batch(NULL msgs, count 1): -EINVAL", eventq_chan_send_batch(ch, NULL, 1, 0),
        -EINVAL, ch);
    bad("send_batch(count INT_MAX + 1): -EINVAL",
        eventq_chan_send_batch(ch, one, (size_t)INT_MAX + 1, 0), -EINVAL, ch);
    bad("send_batch(count SIZE_MAX): -EINVAL", eventq_chan_send_batch(ch, one, SIZE_MAX, 0),
        -EINVAL, ch);
    bad("send_batch(NULL data, len > 0 in msgs[1]): -EINVAL, msgs[0] not queued either",
        eventq_chan_send_batch(ch, holey, 3, 0), -EINVAL, ch);
    bad("send_batch timeout -2: -EINVAL", eventq_chan_send_batch(ch, one, 1, -2), -EINVAL, ch);
    bad("send_batch oversize msgs[0]: -EMSGSIZE", eventq_chan_send_batch(ch, over, 2, 0),
        -EMSGSIZE, ch);

    /* recv */
    size_t len = 4242;
    bad("recv(NULL chan): -EINVAL", eventq_chan_recv(NULL, buf, sizeof buf, &len, 0), -EINVAL,
        ch);
    bad("recv(NULL len): -EINVAL", eventq_chan_recv(ch, buf, sizeof buf, NULL, 0), -EINVAL, ch);
    bad("recv(NULL buf, cap 5): -EINVAL", eventq_chan_recv(ch, NULL, 5, &len, 0), -EINVAL, ch);
    bad("recv timeout -2: -EINVAL", eventq_chan_recv(ch, buf, sizeof buf, &len, -2), -EINVAL, ch);
    bad("recv timeout INT64_MIN: -EINVAL",
        eventq_chan_recv(ch, buf, sizeof buf, &len, INT64_MIN), -EINVAL, ch);
    CHECK_U64("bad recv calls leave *len alone", len, 4242);
    /* D7 counts here too: a too-small buffer takes nothing. */
    bad("recv into 3 bytes: -EMSGSIZE", eventq_chan_recv(ch, buf, 3, &len, 0), -EMSGSIZE, ch);
    CHECK_U64("recv -EMSGSIZE: *len = 5", len, 5);

    /* recv_msg */
    eventq_msg *const MSENT = (eventq_msg *)buf;
    eventq_msg *m = MSENT;
    bad("recv_msg(NULL chan): -EINVAL", eventq_chan_recv_msg(NULL, &m, 0), -EINVAL, ch);
    bad("recv_msg(NULL out): -EINVAL", eventq_chan_recv_msg(ch, NULL, 0), -EINVAL, ch);
    bad("recv_msg timeout -2: -EINVAL", eventq_chan_recv_msg(ch, &m, -2), -EINVAL, ch);
    CHECK("bad recv_msg calls leave *out alone", m == MSENT);

    /* recv_batch */
    size_t lens[2] = { 111, 222 };
    bad("recv_batch(NULL chan): -EINVAL",
        eventq_chan_recv_batch(NULL, buf, sizeof buf, lens, 2, 0), -EINVAL, ch);
    bad("recv_batch(NULL buf, cap 5): -EINVAL", eventq_chan_recv_batch(ch, NULL, 5, lens, 2, 0),
        -EINVAL, ch);
    bad("recv_batch(NULL lens, max 2): -EINVAL",
        eventq_chan_recv_batch(ch, buf, sizeof buf, NULL, 2, 0), -EINVAL, ch);
    bad("recv_batch timeout -2: -EINVAL",
        eventq_chan_recv_batch(ch, buf, sizeof buf, lens, 2, -2), -EINVAL, ch);
    CHECK("bad recv_batch calls leave lens alone", lens[0] == 111 && lens[1] == 222);
    bad("recv_batch max_msgs 0: 0, nothing taken",
        eventq_chan_recv_batch(ch, buf, sizeof buf, lens, 0, 0), 0, ch);
    bad("recv_batch head does not fit: -EMSGSIZE",
        eventq_chan_recv_batch(ch, buf, 4, lens, 2, 0), -EMSGSIZE, ch);
    CHECK("recv_batch -EMSGSIZE: lens[0] = 5, lens[1] alone", lens[0] == 5 && lens[1] == 222);

    /* Nothing was lost or reordered by any of the above. */
    len = 0;
    rc = eventq_chan_recv(ch, buf, sizeof buf, &len, 0);
    CHECK("after the bad calls: alpha first", rc == 0 && len == 5 && memcmp(buf, "alpha", 5) == 0);
    m = NULL;
    rc = eventq_chan_recv_msg(ch, &m, 0);
    CHECK("after the bad calls: then beta",
          rc == 0 && eventq_msg_len(m) == 4 && memcmp(eventq_msg_data(m), "beta", 4) == 0);
    eventq_msg_free(m);
    rc = eventq_chan_recv(ch, buf, sizeof buf, &len, 0);
    saw(rc);
    CHECK_INT("after the bad calls: then nothing", rc, -EAGAIN);
    rc = eventq_chan_recv(ch, buf, sizeof buf, &len, 1000);
    saw(rc);
    CHECK_INT("recv 1 us on empty: -ETIMEDOUT", rc, -ETIMEDOUT);

    /* Send after close. */
    REQUIRE("send gamma", eventq_chan_send(ch, "gamma", 5, 0) == 0);
    CHECK_INT("close", eventq_chan_close(ch), 0);
    rc = eventq_chan_send(ch, "late", 4, 0);
    saw(rc);
    CHECK_INT("send after close: -EPIPE", rc, -EPIPE);
    CHECK_INT("send_batch after close: -EPIPE", eventq_chan_send_batch(ch, one, 1, 0), -EPIPE);
    /* Argument errors still come before state errors. */
    CHECK_INT("send(NULL data, len 3) after close: -EINVAL", eventq_chan_send(ch, NULL, 3, 0),
              -EINVAL);
    eventq_chan_get_stats(ch, &st, sizeof st);
    CHECK("after refused sends: only gamma pending", st.pending == 1 && st.sent == 3);
    rc = eventq_chan_recv(ch, buf, sizeof buf, &len, 0);
    CHECK("gamma received after close", rc == 0 && len == 5 && memcmp(buf, "gamma", 5) == 0);
    rc = eventq_chan_recv(ch, buf, sizeof buf, &len, 0);
    CHECK_INT("then end of stream: -EPIPE", rc, -EPIPE);

    /* free_final(chan, NULL) freed nothing: the handle is still ours. */
    CHECK_INT("free_final after the refused one: 1", eventq_chan_free_final(ch, &st, sizeof st), 1);
    CHECK_U64("final: nothing dropped", st.dropped, 0);
}

/* Creation when the process has no fd left: -EMFILE, and no fd leaked. */
static void test_emfile(void)
{
    struct rlimit old;
    REQUIRE("getrlimit", getrlimit(RLIMIT_NOFILE, &old) == 0);
    int lowest = open("/dev/null", O_RDONLY | O_CLOEXEC);
    REQUIRE("open /dev/null", lowest >= 0);
    close(lowest);

    /* No fd at all: creation (which makes the receive eventfd) fails. */
    struct rlimit lim = old;
    lim.rlim_cur = (rlim_t)lowest;
    REQUIRE("setrlimit", setrlimit(RLIMIT_NOFILE, &lim) == 0);
    eventq_chan *out = (eventq_chan *)&lim;
    int rc = eventq_chan_new(NULL, &out);
    REQUIRE("restore rlimit", setrlimit(RLIMIT_NOFILE, &old) == 0);
    saw(rc);
    CHECK_MSG("new with no fd left: -EMFILE, *out alone",
              rc == -EMFILE && out == (eventq_chan *)&lim, "rc=%d", rc);
    int again = open("/dev/null", O_RDONLY | O_CLOEXEC);
    CHECK_MSG("failed new leaked no fd", again == lowest, "lowest free fd was %d, now %d", lowest,
              again);
    if (again >= 0)
        close(again);

    /* One fd: creation works, and the send fd (made on first use) fails
     * until the limit is restored. */
    lim.rlim_cur = (rlim_t)lowest + 1;
    REQUIRE("setrlimit", setrlimit(RLIMIT_NOFILE, &lim) == 0);
    eventq_chan *ch = NULL;
    rc = eventq_chan_new(NULL, &ch);
    int sfd = rc == 0 ? eventq_chan_send_fd(ch) : 0;
    REQUIRE("restore rlimit", setrlimit(RLIMIT_NOFILE, &old) == 0);
    CHECK_INT("new with one fd left", rc, 0);
    REQUIRE("a channel", rc == 0);
    saw(sfd);
    CHECK_INT("send fd with no fd left: -EMFILE", sfd, -EMFILE);
    sfd = eventq_chan_send_fd(ch);
    CHECK_MSG("send fd after the limit is restored", sfd > lowest, "%d", sfd);
    CHECK_INT("... and the same again", eventq_chan_send_fd(ch), sfd);
    eventq_chan_free(ch);
    CHECK_INT("new works again after the limit is restored", eventq_chan_new(NULL, &ch), 0);
    eventq_chan_free(ch);
}

static int is_known(int code)
{
    const char *s = eventq_strerror(code);
    return s != NULL && strcmp(s, "unknown error") != 0 && s[0] != '\0';
}

static void test_strerror_version(void)
{
    char name[96];
    for (int i = 0; i < ncodes_seen; i++) {
        snprintf(name, sizeof name, "strerror(%d) (a code returned here) is known", codes_seen[i]);
        CHECK_MSG(name, is_known(codes_seen[i]), "got \"%s\"",
                  eventq_strerror(codes_seen[i]) ? eventq_strerror(codes_seen[i]) : "(null)");
    }
    /* Every code the header documents, negative and positive. */
    const int documented[] = { EINVAL, EAGAIN, ETIMEDOUT, EPIPE, EMSGSIZE, EMFILE, ENFILE, ENOMEM };
    for (size_t i = 0; i < sizeof documented / sizeof documented[0]; i++) {
        int e = documented[i];
        const char *neg = eventq_strerror(-e), *pos = eventq_strerror(e);
        snprintf(name, sizeof name, "strerror(%d) known, same as strerror(%d)", -e, e);
        CHECK_MSG(name, is_known(-e) && pos && neg && strcmp(neg, pos) == 0, "\"%s\" / \"%s\"",
                  neg ? neg : "(null)", pos ? pos : "(null)");
    }
    const int must_have_seen[] = { -EINVAL, -EAGAIN, -ETIMEDOUT, -EPIPE, -EMSGSIZE, -EMFILE };
    int missing = 0;
    for (size_t i = 0; i < sizeof must_have_seen / sizeof must_have_seen[0]; i++) {
        int found = 0;
        for (int j = 0; j < ncodes_seen; j++)
            found |= codes_seen[j] == must_have_seen[i];
        missing += !found;
    }
    CHECK_INT("this test saw every code it provokes", missing, 0);

    const char *u = eventq_strerror(12345);
    CHECK("strerror(12345): \"unknown error\"", u && strcmp(u, "unknown error") == 0);
    u = eventq_strerror(-12345);
    CHECK("strerror(-12345): \"unknown error\"", u && strcmp(u, "unknown error") == 0);
    u = eventq_strerror(INT_MAX);
    CHECK("strerror(INT_MAX): \"unknown error\"", u && strcmp(u, "unknown error") == 0);
    /* BUG: the library takes checked_abs(INT_MIN) = None as 0 and answers
     * "success" for INT_MIN, which is no code it returns. */
    u = eventq_strerror(INT_MIN);
    CHECK_MSG("BUG: strerror(INT_MIN) is \"unknown error\" (the header: unknown codes give it)",
              u && strcmp(u, "unknown error") == 0, "got \"%s\"", u ? u : "(null)");

    CHECK_U64("eventq_version() == EVENTQ_VERSION", eventq_version(), EVENTQ_VERSION);
    CHECK_U64("EVENTQ_VERSION from the part macros", EVENTQ_VERSION,
              ((unsigned)EVENTQ_VERSION_MAJOR << 16) | ((unsigned)EVENTQ_VERSION_MINOR << 8) |
                  (unsigned)EVENTQ_VERSION_PATCH);
    char want[32];
    snprintf(want, sizeof want, "%d.%d.%d", EVENTQ_VERSION_MAJOR, EVENTQ_VERSION_MINOR,
             EVENTQ_VERSION_PATCH);
    const char *vs = eventq_version_string();
    CHECK_MSG("eventq_version_string() matches the macros", vs && strcmp(vs, want) == 0,
              "got \"%s\", want \"%s\"", vs ? vs : "(null)", want);
    CHECK("eventq_version_string() is static (same pointer twice)", vs == eventq_version_string());
}

int main(void)
{
    check_init();
    test_bad_creation();
    test_bad_calls();
    test_emfile();
    test_strerror_version();
    return check_done();
}
