/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * eventq_last_error: the thread's text for the last error code a libeventq
 * call returned. Each bad argument gives its code plus a text that names
 * the argument; a call that succeeds, or whose code says everything
 * (-EAGAIN), leaves none; the calls that describe (strerror, version)
 * leave it alone; each thread has its own; a call made from a loop
 * callback is a call of its own.
 */
#include "check.h"

/* The last error's text, never NULL, for printing. */
static const char *text(void)
{
    const char *t = eventq_last_error();
    return t ? t : "(null)";
}

static int on_fd(struct eventq_source *src, int fd, uint32_t revents, void *ud)
{
    (void)src, (void)fd, (void)revents, (void)ud;
    return 0;
}

/* Checks that the last error's text starts with `fn` ": " and holds `part`. */
static void check_text(const char *name, const char *fn, const char *part)
{
    const char *t = eventq_last_error();
    size_t n = strlen(fn);
    CHECK_MSG(name,
              t != NULL && strncmp(t, fn, n) == 0 && strncmp(t + n, ": ", 2) == 0 &&
                  strstr(t + n, part) != NULL,
              "text is \"%s\", want \"%s: ...%s...\"", t ? t : "(null)", fn, part);
}

static void bad_arguments(void)
{
    struct eventq_chan *ch = NULL;

    struct eventq_chan_opts zeroed;
    memset(&zeroed, 0, sizeof zeroed);
    CHECK_INT("a zeroed opts: -EINVAL", eventq_chan_new(&zeroed, &ch), -EINVAL);
    check_text("  the text names opts->size", "eventq_chan_new", "opts->size is 0");
    CHECK_MSG("  and says what to set", strstr(text(), "sizeof(struct eventq_chan_opts)") != NULL,
              "text: %s", text());

    CHECK_INT("a NULL chan: -EINVAL", eventq_chan_send(NULL, "x", 1, 0), -EINVAL);
    CHECK_MSG("  the text is \"eventq_chan_send: chan is NULL\"",
              strcmp(text(), "eventq_chan_send: chan is NULL") == 0, "text: %s", text());

    REQUIRE("channel", eventq_chan_new(NULL, &ch) == 0);
    char buf[16];
    size_t len;
    CHECK_INT("a bad timeout: -EINVAL", eventq_chan_recv(ch, buf, sizeof buf, &len, -2), -EINVAL);
    check_text("  the text names timeout_ns", "eventq_chan_recv", "timeout_ns is -2");

    CHECK_INT("NULL data with a length: -EINVAL", eventq_chan_send(ch, NULL, 3, 0), -EINVAL);
    check_text("  the text names data", "eventq_chan_send", "data is NULL with len 3");

    struct eventq_chan_opts o;
    REQUIRE("opts", eventq_chan_opts_init(&o, sizeof o) == 0);
    o.capacity = 0;
    struct eventq_chan *none = NULL;
    CHECK_INT("capacity 0: -EINVAL", eventq_chan_new(&o, &none), -EINVAL);
    check_text("  the core's check names capacity", "eventq_chan_new", "capacity");

    struct eventq_loop *lp = NULL;
    REQUIRE("loop", eventq_loop_new(&lp) == 0);
    CHECK_INT("a NULL callback: -EINVAL", eventq_loop_add_chan(lp, ch, NULL, NULL, NULL, NULL),
              -EINVAL);
    check_text("  the text names cb", "eventq_loop_add_chan", "cb is NULL");
    CHECK_INT("unknown fd flags: -EINVAL",
              eventq_loop_add_fd(lp, eventq_chan_recv_fd(ch), 0x40000, on_fd, NULL, NULL, NULL),
              -EINVAL);
    check_text("  the text says the flags", "eventq_loop_add_fd", "flags");
    eventq_loop_free(lp);
    eventq_chan_free(ch);
}

static void cleared_and_kept(void)
{
    struct eventq_chan *ch = NULL;
    REQUIRE("channel", eventq_chan_new(NULL, &ch) == 0);
    CHECK_INT("a failure", eventq_chan_send(NULL, "x", 1, 0), -EINVAL);
    const char *t = eventq_last_error();
    REQUIRE("its text", t != NULL);
    /* The describing calls leave it alone, so they may share a printf. */
    (void)eventq_strerror(-EINVAL);
    (void)eventq_version();
    (void)eventq_version_string();
    CHECK("strerror and version leave the text", eventq_last_error() == t &&
                                                    strcmp(t, "eventq_chan_send: chan is NULL") == 0);
    CHECK_INT("a success", eventq_chan_send(ch, "x", 1, 0), 0);
    CHECK("  leaves no text", eventq_last_error() == NULL);
    char buf[16];
    size_t len;
    REQUIRE("receive", eventq_chan_recv(ch, buf, sizeof buf, &len, 0) == 0);
    CHECK_INT("-EAGAIN", eventq_chan_recv(ch, buf, sizeof buf, &len, 0), -EAGAIN);
    CHECK("  has no text: the code says it all", eventq_last_error() == NULL);
    CHECK_INT("a failure again", eventq_chan_send(NULL, "x", 1, 0), -EINVAL);
    CHECK_INT("-ETIMEDOUT", eventq_chan_recv(ch, buf, sizeof buf, &len, 1), -ETIMEDOUT);
    CHECK("  clears the earlier text and has none", eventq_last_error() == NULL);
    REQUIRE("close", eventq_chan_close(ch) == 0);
    CHECK_INT("-EPIPE", eventq_chan_send(ch, "x", 1, 0), -EPIPE);
    CHECK("  has no text", eventq_last_error() == NULL);
    eventq_chan_free(ch);
}

/* Another thread's failures and successes do not touch this thread's text. */
static void *other_thread(void *arg)
{
    (void)arg;
    CHECK("a new thread has no text", eventq_last_error() == NULL);
    CHECK_INT("the other thread fails", eventq_chan_close(NULL), -EINVAL);
    check_text("  with its own text", "eventq_chan_close", "chan is NULL");
    return NULL;
}

static void per_thread(void)
{
    CHECK_INT("this thread fails", eventq_chan_recv_fd(NULL), -EINVAL);
    const char *mine = eventq_last_error();
    REQUIRE("its text", mine != NULL);
    pthread_t t;
    REQUIRE("thread", pthread_create(&t, NULL, other_thread, NULL) == 0);
    pthread_join(t, NULL);
    CHECK_MSG("this thread's text is its own", eventq_last_error() == mine &&
                  strcmp(mine, "eventq_chan_recv_fd: chan is NULL") == 0,
              "text: %s", text());
}

/* A callback's own calls are calls: their text is readable in the callback,
 * and the loop's call that ran it sets its own outcome when it returns. */
static int seen_in_callback;

static void post_fn(void *arg)
{
    (void)arg;
    int rc = eventq_chan_send(NULL, "x", 1, 0);
    const char *t = eventq_last_error();
    seen_in_callback = rc == -EINVAL && t != NULL && strcmp(t, "eventq_chan_send: chan is NULL") == 0;
}

static void nested(void)
{
    struct eventq_loop *lp = NULL;
    REQUIRE("loop", eventq_loop_new(&lp) == 0);
    REQUIRE("post", eventq_loop_post(lp, post_fn, NULL, NULL) == 0);
    CHECK_INT("run_once runs the post", eventq_loop_run_once(lp, EVENTQ_FOREVER), 1);
    CHECK("the callback read its call's text", seen_in_callback);
    CHECK("run_once succeeded: no text", eventq_last_error() == NULL);
    eventq_loop_free(lp);
}

int main(void)
{
    check_init();
    bad_arguments();
    cleared_and_kept();
    per_thread();
    nested();
    return check_done();
}
