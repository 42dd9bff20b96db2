/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * The machine's phase: the nanoseconds to hand one cache line between two
 * threads (a counter each increments in turn), the lower quartile over
 * bursts. On this project's 2-vCPU VM it reads about 30 ns for some
 * seconds or minutes and 100-300 ns for others (where the hypervisor puts
 * the two vCPUs): the far phase makes every row that moves many lines between the
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
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

/* The line, alone on its 128 bytes (the adjacent-line prefetcher's pair). */
static struct {
    _Alignas(128) atomic_long turn;
    char pad[128 - sizeof(atomic_long)];
} lt_line;

/* The turn that tells the other thread to stop. */
#define LT_STOP (-1L)

/* Waits for the line to read `want` (or LT_STOP) and returns what it read.
 * Yields now and then, so that two threads on one CPU still take turns
 * (slowly) instead of each spinning out its time slice. */
static long lt_await(long want)
{
    long v;
    for (unsigned spins = 1;
         (v = atomic_load_explicit(&lt_line.turn, memory_order_acquire)) != want && v != LT_STOP;
         spins++)
        if (spins % 4096 == 0)
            sched_yield();
    return v;
}

/* Takes the odd turns: waits for turn i, makes it i + 1, until told to stop. */
static void *lt_other(void *arg)
{
    (void)arg;
    for (long i = 1; lt_await(i) != LT_STOP; i += 2)
        atomic_store_explicit(&lt_line.turn, i + 1, memory_order_release);
    return NULL;
}

static int lt_cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

#define LT_MIN_BURSTS 16
#define LT_MAX_BURSTS 64

/* The mean ns of one hand-over, the lower quartile over bursts of
 * `per_burst` hand-overs (made even): 16 bursts, or more (up to 64) until
 * `min_ms` milliseconds have passed. The lower quartile, and a floor on the
 * time, because anything else runnable (a thread of the row before, still
 * exiting) only makes a burst slower, for a while. -1 on a bad argument or
 * when a thread cannot be made. Not reentrant. */
static double line_transfer_ns(long per_burst, double min_ms)
{
    double ns[LT_MAX_BURSTS], spent = 0;
    if (per_burst < 2)
        return -1;
    per_burst &= ~1L; /* whole round trips */
    atomic_store(&lt_line.turn, 0);
    pthread_t t;
    if (pthread_create(&t, NULL, lt_other, NULL))
        return -1;
    int bursts = 0;
    long turn = 0;
    while (bursts < LT_MIN_BURSTS || (spent < min_ms * 1e6 && bursts < LT_MAX_BURSTS)) {
        struct timespec s, e;
        clock_gettime(CLOCK_MONOTONIC, &s);
        for (long end = turn + per_burst; turn < end; turn += 2) {
            atomic_store_explicit(&lt_line.turn, turn + 1, memory_order_release);
            lt_await(turn + 2);
        }
        clock_gettime(CLOCK_MONOTONIC, &e);
        double d = (double)(e.tv_sec - s.tv_sec) * 1e9 + (double)(e.tv_nsec - s.tv_nsec);
        spent += d;
        ns[bursts++] = d / (double)per_burst;
    }
    atomic_store_explicit(&lt_line.turn, LT_STOP, memory_order_release);
    pthread_join(t, NULL);
    qsort(ns, (size_t)bursts, sizeof ns[0], lt_cmp);
    return ns[(bursts - 1) / 4];
}

/* The in-process probe around each row: bursts of 1,250 hand-overs for at
 * least 2 ms (a few ms in all). */
#define LT_PER_BURST 1250
#define LT_MIN_MS 2.0

/* After a row: with `before` the reading taken before it (< 0: none, as in
 * smoke runs), takes the reading after, stores both in line[0..1] and sets
 * *n (0 when either failed), and writes ", line B ns, after A ns" into
 * `text` (empty for none). */
static inline void probe_after(double line[2], int *n, double before, char *text, size_t cap)
{
    *n = 0;
    text[0] = 0;
    if (before < 0)
        return;
    double after = line_transfer_ns(LT_PER_BURST, LT_MIN_MS);
    if (after < 0)
        return;
    line[0] = before;
    line[1] = after;
    *n = 2;
    snprintf(text, cap, ", line %.0f ns, after %.0f ns", before, after);
}

#endif
