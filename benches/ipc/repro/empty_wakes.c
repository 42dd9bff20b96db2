/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * How often a process-shared channel's receive fd wakes its consumer with
 * nothing to receive. A producer process sends N messages of SIZE bytes,
 * one every GAP_US microseconds (0: as fast as it can); the consumer waits
 * on the receive fd in an epoll set of its own (level-triggered, or
 * EPOLLET when ET is set in the environment), receives until -EAGAIN,
 * checks the sequence, and waits again. It counts the wake-ups whose first
 * receive found nothing, and the refusals after which poll(2) still found
 * the fd readable. Exits 1 on a lost, repeated or reordered message or a
 * wake-up that never comes.
 *
 *   make bench-ipc-wakes IPC_WAKES_ARGS="N SIZE GAP_US"   (default 1000 8 1000)
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <eventq.h>

static void check(int rc, const char *what)
{
    if (rc < 0) {
        fprintf(stderr, "empty_wakes: %s: %s\n", what, eventq_strerror(rc));
        exit(2);
    }
}

static void producer(eventq_shared_fds *f, long n, long size, long gap_us)
{
    eventq_chan *s;
    check(eventq_chan_import_fds(f, sizeof *f, &s), "eventq_chan_import_fds");
    char *m = calloc(1, (size_t)size);
    struct timespec gap = {gap_us / 1000000, gap_us % 1000000 * 1000};
    for (long i = 0; i < n; i++) {
        memcpy(m, &i, sizeof i < (size_t)size ? sizeof i : (size_t)size);
        check(eventq_chan_send(s, m, (size_t)size, EVENTQ_FOREVER), "eventq_chan_send");
        if (gap_us)
            nanosleep(&gap, NULL);
    }
    eventq_chan_free(s);
    _exit(0);
}

int main(int argc, char **argv)
{
    long n = argc > 1 ? atol(argv[1]) : 1000, size = argc > 2 ? atol(argv[2]) : 8,
         gap_us = argc > 3 ? atol(argv[3]) : 1000;
    int et = getenv("ET") != NULL;
    if (n < 1 || size < 8 || gap_us < 0) {
        fprintf(stderr, "usage: empty_wakes [N [SIZE (>= 8) [GAP_US]]]\n");
        return 2;
    }
    eventq_chan_opts o;
    check(eventq_chan_opts_init(&o, sizeof o), "eventq_chan_opts_init");
    o.capacity = 1024;
    o.max_msg_size = (size_t)size;
    eventq_chan *c;
    check(eventq_chan_new_shared(&o, EVENTQ_SIDE_RECV, &c), "eventq_chan_new_shared");
    eventq_shared_fds f;
    check(eventq_chan_export_fds(c, &f, sizeof f), "eventq_chan_export_fds");
    pid_t pid = fork();
    if (pid < 0)
        return 2;
    if (pid == 0)
        producer(&f, n, size, gap_us);
    close(f.mem);
    close(f.recv_bell);
    close(f.send_bell);
    close(f.link);

    int fd = eventq_chan_recv_fd(c), ep = epoll_create1(EPOLL_CLOEXEC);
    struct epoll_event ev = {.events = EPOLLIN | (et ? EPOLLET : 0)};
    epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev);
    char *buf = malloc((size_t)size);
    long got = 0, wakes = 0, empty = 0, refusals = 0, still = 0;
    while (got < n) {
        if (epoll_wait(ep, &ev, 1, 5000) != 1) {
            fprintf(stderr, "empty_wakes: no wake-up in 5 s after %ld of %ld messages\n", got, n);
            return 1;
        }
        wakes++;
        for (int first = 1; got < n; first = 0) {
            size_t len;
            int rc = eventq_chan_recv(c, buf, (size_t)size, &len, 0);
            if (rc == -EAGAIN) {
                refusals++;
                empty += first;
                struct pollfd p = {.fd = fd, .events = POLLIN};
                still += poll(&p, 1, 0) == 1;
                break;
            }
            check(rc, "eventq_chan_recv");
            long seq;
            memcpy(&seq, buf, sizeof seq);
            if (seq != got) {
                fprintf(stderr, "empty_wakes: message %ld where %ld was due\n", seq, got);
                return 1;
            }
            got++;
        }
    }
    waitpid(pid, NULL, 0);
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    printf("%ld messages of %ld B, one every %ld us, %s: %ld wake-ups, %ld of them empty (%.3f "
           "per message); after %ld of %ld refused receives the fd was still readable; the "
           "consumer used %.3f s of CPU\n",
           n, size, gap_us, et ? "EPOLLET" : "level-triggered", wakes, empty,
           (double)empty / (double)n, still, refusals,
           (double)ru.ru_utime.tv_sec + (double)ru.ru_stime.tv_sec +
               ((double)ru.ru_utime.tv_usec + (double)ru.ru_stime.tv_usec) / 1e6);
    eventq_chan_free(c);
    return 0;
}
