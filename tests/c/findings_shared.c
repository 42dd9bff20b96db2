/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * Minimal reproducers of library bugs in the process-shared channel that
 * are still open, found by tests/stress/crash.c. Each check is named
 * "BUG: ..." and fails until the library is fixed (tests/c/check.h); this
 * program is not a test_*.c, so stage c-tests does not run it: `make
 * shm-findings` does. Once a bug is fixed, its check passes: rename it and
 * move it into tests/c/test_shared_findings.c with the others.
 *
 * 1. A lost wake-up after a batch send (D4, D9; no hostile process). A
 *    batch send asks for the receive doorbell to be raised only if none of
 *    its pushes found it up (Channel::send_batch ORs the tail words its
 *    pushes return into `flags`, then tests !flags.has(TAIL_RECV_RAISED)).
 *    When the receiver drains the ring during the batch and lowers the
 *    doorbell, the pushes after that find it down, but the first one found
 *    it up: nobody raises it, and the messages the batch queued after the
 *    drain sit behind a receive fd that is not readable. A receiver that
 *    waits on its fd after -EAGAIN sleeps until the next send; if the batch
 *    filled the ring, the sender waits for room: neither wakes
 *    (tests/stress/crash.c saw it with capacity 4, 1000-byte messages:
 *    "pending 4", the sender in a blocking send, both eventfds at 0, the
 *    tail's TAIL_RECV_RAISED clear). The channel within one process asks
 *    the right question (shared.rs, Pushed::saw_recv_down: "some push found
 *    the receive doorbell down").
 *
 *    Here: a sender sends 1 message, then a batch of 7, and waits for the
 *    receiver to take all 8; the receiver receives as fast as it can and,
 *    on -EAGAIN, polls its receive fd. The fd staying unreadable for 1 s
 *    (a watchdog, not a timing: a raise takes microseconds) with messages
 *    pending is the bug; it shows within some tens of thousands of rounds
 *    (about a second each ten thousand).
 */
#include <sys/wait.h>

#include "check.h" /* includes <eventq.h> */

#define BATCH 7
#define ROUNDS 200000
#define MSG 1000

/* The receiver: takes BATCH + 1 messages a round, acks each round on `ack`;
 * exits 1 (with the round and what was pending) when its fd stayed down. */
static void receiver(eventq_chan *rx, int ack)
{
    char *b = malloc(MSG);
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
    CHECK_MSG("BUG: after a batch send the receive fd is readable while messages are pending, "
              "also when the receiver drained the ring during the batch (D4, D9)",
              WIFEXITED(st) && WEXITSTATUS(st) == 0,
              "the receiver ended with status %#x in round %d of %d", st, r, ROUNDS);
    free(m);
    eventq_chan_free(tx);
}

int main(void)
{
    check_init();
    lost_wakeup_after_batch();
    return check_done();
}
