// SPDX-License-Identifier: MIT OR Apache-2.0
/*
 * line_transfer: the machine's phase, as make bench's driver records it
 * before every bench process. Two threads hand one cache line back and
 * forth (a counter each increments in turn) and the program prints the
 * mean nanoseconds of one hand-over. On this project's 2-vCPU VM it is
 * about 30 ns for some minutes and about 160 ns for others (where the
 * hypervisor puts the two vCPUs): the far phase makes every row that moves
 * many lines between the CPUs slower (docs/decisions/0027, "Phases").
 *
 *   line_transfer [HANDOVERS]   (default 400000; at least 1000)
 *
 * Exit 0 and one number on stdout; 2 on a bad argument or a thread error.
 */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

/* The line, alone on its 128 bytes (the adjacent-line prefetcher's pair). */
static struct {
    _Alignas(128) atomic_long turn;
    char pad[128 - sizeof(atomic_long)];
} line;

static long handovers = 400000;

/* Waits for the line to read `want`. Yields now and then, so that two
 * threads on one CPU still take turns (slowly) instead of each spinning
 * out its time slice. */
static void await_turn(long want)
{
    for (unsigned spins = 1; atomic_load_explicit(&line.turn, memory_order_acquire) != want;
         spins++)
        if (spins % 4096 == 0)
            sched_yield();
}

/* Takes the odd turns: waits for turn i, makes it i + 1. */
static void *other(void *arg)
{
    (void)arg;
    for (long i = 1; i < handovers; i += 2) {
        await_turn(i);
        atomic_store_explicit(&line.turn, i + 1, memory_order_release);
    }
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc > 2 || (argc == 2 && (handovers = atol(argv[1])) < 1000)) {
        fprintf(stderr, "usage: line_transfer [HANDOVERS >= 1000]\n");
        return 2;
    }
    handovers &= ~1L; /* whole round trips */
    pthread_t t;
    if (pthread_create(&t, NULL, other, NULL)) {
        fprintf(stderr, "line_transfer: pthread_create failed\n");
        return 2;
    }
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    for (long i = 0; i < handovers; i += 2) {
        atomic_store_explicit(&line.turn, i + 1, memory_order_release);
        await_turn(i + 2);
    }
    clock_gettime(CLOCK_MONOTONIC, &b);
    pthread_join(t, NULL);
    double ns = (double)(b.tv_sec - a.tv_sec) * 1e9 + (double)(b.tv_nsec - a.tv_nsec);
    printf("%.1f\n", ns / (double)handovers);
    return 0;
}
