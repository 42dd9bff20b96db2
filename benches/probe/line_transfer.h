/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * The machine's phase: the nanoseconds to hand one cache line between two
 * threads (a counter each increments in turn), the median over bursts. On
 * this project's 2-vCPU VM it reads about 30 ns for some seconds or
 * minutes and 100-300 ns for others (where the hypervisor puts the two
 * vCPUs): the far phase makes every row that moves many lines between the
 * CPUs slower (docs/decisions/0027, "Phases"). Used by the standalone
 * probe (line_transfer.c, run by make bench's driver before each process)
 * and by the C benches before each row; benches/method/mod.rs has the Rust
 * twin. Header-only: include it in one file of a program; link -pthread.
 */
#ifndef BENCH_PROBE_LINE_TRANSFER_H
#define BENCH_PROBE_LINE_TRANSFER_H

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>

/* The line, alone on its 128 bytes (the adjacent-line prefetcher's pair). */
static struct {
    _Alignas(128) atomic_long turn;
    char pad[128 - sizeof(atomic_long)];
} lt_line;

static long lt_total;

/* Waits for the line to read `want`. Yields now and then, so that two
 * threads on one CPU still take turns (slowly) instead of each spinning
 * out its time slice. */
static void lt_await(long want)
{
    for (unsigned spins = 1; atomic_load_explicit(&lt_line.turn, memory_order_acquire) != want;
         spins++)
        if (spins % 4096 == 0)
            sched_yield();
}

/* Takes the odd turns: waits for turn i, makes it i + 1. */
static void *lt_other(void *arg)
{
    (void)arg;
    for (long i = 1; i < lt_total; i += 2) {
        lt_await(i);
        atomic_store_explicit(&lt_line.turn, i + 1, memory_order_release);
    }
    return NULL;
}

static int lt_cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The median over `bursts` (1..64) bursts of `per_burst` hand-overs (made
 * even) of the mean ns of one hand-over; the median, because a thread of
 * the row before may still be exiting during the first burst. -1 when a
 * thread cannot be made. Not reentrant. */
static double line_transfer_ns(int bursts, long per_burst)
{
    double ns[64];
    if (bursts < 1 || bursts > 64 || per_burst < 2)
        return -1;
    per_burst &= ~1L; /* whole round trips */
    lt_total = bursts * per_burst;
    atomic_store(&lt_line.turn, 0);
    pthread_t t;
    if (pthread_create(&t, NULL, lt_other, NULL))
        return -1;
    for (int b = 0; b < bursts; b++) {
        struct timespec s, e;
        clock_gettime(CLOCK_MONOTONIC, &s);
        for (long i = b * per_burst; i < (b + 1) * per_burst; i += 2) {
            atomic_store_explicit(&lt_line.turn, i + 1, memory_order_release);
            lt_await(i + 2);
        }
        clock_gettime(CLOCK_MONOTONIC, &e);
        ns[b] = ((double)(e.tv_sec - s.tv_sec) * 1e9 + (double)(e.tv_nsec - s.tv_nsec)) /
                (double)per_burst;
    }
    pthread_join(t, NULL);
    qsort(ns, (size_t)bursts, sizeof ns[0], lt_cmp);
    return bursts % 2 ? ns[bursts / 2] : (ns[bursts / 2 - 1] + ns[bursts / 2]) / 2;
}

#endif
