/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * Regression tests of library bugs found while building the fuzz model of
 * the C ABI (fuzz/fuzz_abi.c). Fixed in 06f4965; the checks were named
 * "BUG: ..." until then (see tests/c/check.h).
 *
 * 1. A second source for one fd (or one channel) in one loop was refused
 *    with -EEXIST only while the first was enabled: the check was epoll's,
 *    and a disabled source (set_enabled(0), a failed callback, or a channel
 *    source after end of stream) is out of the epoll set. The header says
 *    add_fd gives -EEXIST "if the fd is already watched by this loop" and
 *    add_chan "if this loop already has a source for the channel". Then
 *    re-enabling the first source failed with -EEXIST, a code the header
 *    does not list for eventq_source_set_enabled, and it stayed disabled.
 */
#include "check.h" /* includes <eventq.h> */

static int on_fd(eventq_source *s, int fd, uint32_t ev, void *ud)
{
    (void)s;
    (void)fd;
    (void)ev;
    (*(int *)ud)++;
    return 0;
}

static int on_chan(eventq_source *s, const void *d, size_t len, void *ud)
{
    (void)s;
    (void)len;
    if (d)
        (*(int *)ud)++;
    return 0;
}

static void duplicate_fd_source(void)
{
    eventq_loop *lp;
    REQUIRE("loop_new", eventq_loop_new(&lp) == 0);
    int p[2];
    REQUIRE("pipe", pipe(p) == 0);
    REQUIRE("readable", write(p[1], "x", 1) == 1);
    int a = 0, b = 0;
    eventq_source *first, *second = NULL;
    REQUIRE("add_fd", eventq_loop_add_fd(lp, p[0], EVENTQ_IN, on_fd, &a, NULL, &first) == 0);
    CHECK_INT("a second source for a watched fd: -EEXIST",
              eventq_loop_add_fd(lp, p[0], EVENTQ_IN, on_fd, &b, NULL, &second), -EEXIST);
    CHECK_INT("disable the first", eventq_source_set_enabled(first, 0), 0);
    int rc = eventq_loop_add_fd(lp, p[0], EVENTQ_IN, on_fd, &b, NULL, &second);
    CHECK_MSG("a second source for an fd whose source in this loop is disabled: -EEXIST",
              rc == -EEXIST, "add_fd returned %d (%s)", rc, eventq_strerror(rc));
    rc = eventq_source_set_enabled(first, 1);
    CHECK_MSG("re-enabling the first source succeeds (set_enabled documents 0, -ESTALE, "
              "-EINVAL)",
              rc == 0, "set_enabled returned %d (%s)", rc, eventq_strerror(rc));
    eventq_loop_run_once(lp, 0);
    CHECK_INT("the first source runs again once re-enabled", a, 1);
    eventq_source_free(second);
    eventq_source_free(first);
    eventq_loop_free(lp);
    close(p[0]);
    close(p[1]);
}

static void duplicate_chan_source(void)
{
    eventq_loop *lp;
    eventq_chan *ch;
    REQUIRE("loop_new", eventq_loop_new(&lp) == 0);
    REQUIRE("chan_new", eventq_chan_new(NULL, &ch) == 0);
    int a = 0, b = 0;
    eventq_source *first, *second = NULL;
    REQUIRE("add_chan", eventq_loop_add_chan(lp, ch, on_chan, &a, NULL, &first) == 0);
    CHECK_INT("a second source for the channel: -EEXIST",
              eventq_loop_add_chan(lp, ch, on_chan, &b, NULL, &second), -EEXIST);
    CHECK_INT("disable the first", eventq_source_set_enabled(first, 0), 0);
    int rc = eventq_loop_add_chan(lp, ch, on_chan, &b, NULL, &second);
    CHECK_MSG("a second source for a channel whose source in this loop is disabled: -EEXIST",
              rc == -EEXIST, "add_chan returned %d (%s)", rc, eventq_strerror(rc));
    rc = eventq_source_set_enabled(first, 1);
    CHECK_MSG("re-enabling the first channel source succeeds", rc == 0,
              "set_enabled returned %d (%s)", rc, eventq_strerror(rc));
    eventq_source_free(second);
    second = NULL;

    /* After end of stream the source is disabled, but it is still the
     * channel's source in this loop. */
    eventq_chan_close(ch);
    int n = eventq_loop_run_once(lp, 0);
    CHECK_MSG("end of stream delivered", n >= 0, "run_once %d", n);
    rc = eventq_loop_add_chan(lp, ch, on_chan, &b, NULL, &second);
    CHECK_MSG("a second source for a channel whose source saw end of stream: -EEXIST",
              rc == -EEXIST, "add_chan returned %d (%s)", rc, eventq_strerror(rc));
    eventq_source_free(second);
    eventq_source_free(first);
    eventq_chan_free(ch);
    eventq_loop_free(lp);
}

int main(void)
{
    check_init();
    duplicate_fd_source();
    duplicate_chan_source();
    return check_done();
}
