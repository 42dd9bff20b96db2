/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * eventq_loop_run_once with a positive timeout below a millisecond waits a
 * whole millisecond (epoll's unit), as the header says, instead of polling.
 *
 * Without a clock: a one-shot timer due 0.5 ms after it is added, then
 * run_once with a 1 ns timeout. A wait of at least 1 ms (the kernel's
 * epoll_wait never returns early on its timeout) always sees the timer fire
 * and runs its callback: 1. A poll returns 0 unless the thread lost 0.5 ms
 * between the add and the call; the round is repeated, so a poll cannot
 * pass every round.
 */
#include "check.h"

static int on_timer(struct eventq_source *src, uint64_t expirations, void *ud)
{
    (void)src;
    *(uint64_t *)ud += expirations;
    return 0;
}

int main(void)
{
    check_init();
    struct eventq_loop *lp = NULL;
    REQUIRE("loop", eventq_loop_new(&lp) == 0);
    enum { ROUNDS = 20 };
    int waited = 0;
    for (int i = 0; i < ROUNDS; i++) {
        uint64_t fired = 0;
        struct eventq_source *src = NULL;
        REQUIRE("timer", eventq_loop_add_timer(lp, 500000, 0, on_timer, &fired, NULL, &src) == 0);
        int rc = eventq_loop_run_once(lp, 1);
        if (rc == 1 && fired == 1)
            waited++;
        else
            CHECK_MSG("run_once(1 ns) waited for the timer due in 0.5 ms", 0,
                      "round %d: run_once returned %d, the timer fired %" PRIu64 " times", i, rc,
                      fired);
        eventq_source_free(src);
    }
    CHECK_INT("every 1 ns run_once waited at least 0.5 ms", waited, ROUNDS);

    /* A timeout of 0 still does not wait. */
    uint64_t fired = 0;
    struct eventq_source *src = NULL;
    REQUIRE("timer", eventq_loop_add_timer(lp, 60ull * 1000000000ull, 0, on_timer, &fired, NULL,
                                           &src) == 0);
    CHECK_INT("run_once(0) returns at once", eventq_loop_run_once(lp, 0), 0);
    eventq_source_free(src);
    eventq_loop_free(lp);
    return check_done();
}
