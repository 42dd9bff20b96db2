/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * A tiny test harness for the C tests of libeventq.
 *
 * Each check prints one line, "ok - name" or "not ok - name: detail"; a test
 * program ends with `return check_done();`, which prints "N passed, N failed"
 * and returns the exit status (0 only if every check passed). Checks may be
 * made from any thread.
 *
 * A case that fails because of a known library bug is named "BUG: ..." and
 * left failing until the library is fixed.
 *
 * check_init() arms a watchdog (alarm) so that a deadlock, which is what a
 * lost wake-up looks like, fails the program instead of hanging it. It is
 * not a timing threshold: it only fires on a hang, far beyond any normal run.
 */
#ifndef EVENTQ_TEST_CHECK_H
#define EVENTQ_TEST_CHECK_H

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <eventq.h>

#define CHECK_WATCHDOG_SECONDS 60

static int check_passed_;
static int check_failed_;
static pthread_mutex_t check_lock_ = PTHREAD_MUTEX_INITIALIZER;

static inline void check_report_(int ok, const char *name, const char *fmt, ...)
{
    pthread_mutex_lock(&check_lock_);
    if (ok) {
        check_passed_++;
        printf("ok - %s\n", name);
    } else {
        va_list ap;
        check_failed_++;
        printf("not ok - %s: ", name);
        va_start(ap, fmt);
        vprintf(fmt, ap);
        va_end(ap);
        printf("\n");
    }
    fflush(stdout);
    pthread_mutex_unlock(&check_lock_);
}

/* A boolean check. */
#define CHECK(name, cond)                                                     \
    check_report_(!!(cond), (name), "%s is false (%s:%d)", #cond, __FILE__, \
                  __LINE__)

/* An integer equality check that prints both values. */
#define CHECK_INT(name, got, want)                                            \
    do {                                                                      \
        long long check_g_ = (long long)(got);                                \
        long long check_w_ = (long long)(want);                               \
        check_report_(check_g_ == check_w_, (name),                           \
                      "%s = %lld, want %lld (%s:%d)", #got, check_g_,        \
                      check_w_, __FILE__, __LINE__);                          \
    } while (0)

/* Same for unsigned 64-bit values (counters, sizes). */
#define CHECK_U64(name, got, want)                                            \
    do {                                                                      \
        unsigned long long check_g_ = (unsigned long long)(got);              \
        unsigned long long check_w_ = (unsigned long long)(want);             \
        check_report_(check_g_ == check_w_, (name),                           \
                      "%s = %llu, want %llu (%s:%d)", #got, check_g_,        \
                      check_w_, __FILE__, __LINE__);                          \
    } while (0)

/* A check with a caller-formatted detail. */
#define CHECK_MSG(name, cond, ...) check_report_(!!(cond), (name), __VA_ARGS__)

/* A precondition of the rest of the test (not counted as a check when it
 * holds): if it fails, report it and stop the program. */
#define REQUIRE(name, cond)                                                   \
    do {                                                                      \
        if (!(cond)) {                                                        \
            check_report_(0, (name), "%s is false (%s:%d)", #cond,           \
                          __FILE__, __LINE__);                                \
            printf("%d passed, %d failed (aborted)\n", check_passed_,         \
                   check_failed_);                                            \
            exit(1);                                                          \
        }                                                                     \
    } while (0)

static inline void check_watchdog_(int sig)
{
    static const char msg[] =
        "not ok - watchdog: the test hung (deadlock or lost wake-up)\n";
    (void)sig;
    (void)!write(STDOUT_FILENO, msg, sizeof msg - 1);
    _exit(2);
}

static inline void check_init(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    signal(SIGALRM, check_watchdog_);
    alarm(CHECK_WATCHDOG_SECONDS);
}

static inline int check_done(void)
{
    pthread_mutex_lock(&check_lock_);
    printf("%d passed, %d failed\n", check_passed_, check_failed_);
    fflush(stdout);
    int rc = check_failed_ == 0 ? 0 : 1;
    pthread_mutex_unlock(&check_lock_);
    return rc;
}

/* 1 if fd is readable now (poll with a zero timeout), 0 if not, -1 on error. */
static inline int fd_readable(int fd)
{
    struct pollfd p = { .fd = fd, .events = POLLIN, .revents = 0 };
    int n;
    do {
        n = poll(&p, 1, 0);
    } while (n < 0 && errno == EINTR);
    if (n < 0 || (p.revents & POLLNVAL))
        return -1;
    return (p.revents & POLLIN) ? 1 : 0;
}

/* FNV-1a, the body checksum carried by test messages. */
static inline uint32_t check_fnv1a(const void *data, size_t len)
{
    const unsigned char *p = data;
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < len; i++) {
        h ^= p[i];
        h *= 16777619u;
    }
    return h;
}

#endif /* EVENTQ_TEST_CHECK_H */
