/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * Helpers of the process-shared channel's proofs (tests/stress/crash.c,
 * tests/stress/hostile.c): a random source, memory that outlives a killed
 * child (a MAP_SHARED anonymous mapping the parent reads after the death),
 * the layout of a channel's memfd (src/chan/process/layout.rs), fds over a
 * Unix socket, fd readiness, and the watchdog.
 *
 * The watchdog is alarm(2): a hang kills the process with SIGALRM, which
 * its parent reports as a failure. It is not a timing threshold: it fires
 * only far beyond any normal run.
 */
#ifndef EVENTQ_STRESS_SHM_H
#define EVENTQ_STRESS_SHM_H

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <eventq.h>

/* ---- the shared memory's layout (src/chan/process/layout.rs) ---- */

#define SHM_LINE 64u
#define SHM_HEADER_LINES 12u
/* Byte offsets of the words another process may write. */
#define SHM_OFF_LAYOUT 0u              /* 6 words: magic, capacity, max_msg, low_water, slot_lines, 0 */
#define SHM_OFF_TAIL (2u * SHM_LINE)   /* position << 3 | flags */
#define SHM_OFF_HEAD (4u * SHM_LINE)
#define SHM_OFF_PEAK (6u * SHM_LINE)
#define SHM_OFF_LOCK (8u * SHM_LINE)   /* the doorbell lock: 0 free, 1 sender, 2 receiver */
#define SHM_OFF_REQUESTS (8u * SHM_LINE + 8u)
#define SHM_OFF_SLOTS (SHM_HEADER_LINES * SHM_LINE)
#define SHM_FLAG_BITS 3u
#define SHM_MAGIC "eventqS\x01"
/* The handover message: this magic, then the side (u32 LE), then 4 zero bytes. */
#define SHM_HANDOVER_MAGIC "eventqH\x01"
#define SHM_HANDOVER_LEN 16u

/* Lines of a slot for messages of up to max_msg bytes: a length word, then the bytes. */
static inline uint64_t shm_slot_lines(uint64_t max_msg)
{
    return (8 + max_msg + SHM_LINE - 1) / SHM_LINE;
}

/* Bytes of a channel's memfd for this capacity and message limit. */
static inline uint64_t shm_bytes(uint64_t capacity, uint64_t max_msg)
{
    return (SHM_HEADER_LINES + capacity * shm_slot_lines(max_msg)) * SHM_LINE;
}

/* ---- failures ---- */

static const char *shm_prog = "shm";

static inline void shm_die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static inline void shm_die(const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "%s[%d]: FAILED: ", shm_prog, (int)getpid());
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n");
    fflush(stderr);
    _exit(1);
}

/* Records a failure in `buf` (shared memory its parent reads after the
 * death) and dies with it. */
#define SHM_FAIL_INTO(buf, ...)                                                                \
    do {                                                                                       \
        snprintf((buf), sizeof(buf), __VA_ARGS__);                                             \
        shm_die("%s", (buf));                                                                  \
    } while (0)

/* The watchdog's word on a hang, then death by SIGALRM (its parent reports it). */
static const char *shm_watchdog_msg = "watchdog: hung\n";
static size_t shm_watchdog_len;

static inline void shm_watchdog_handler(int sig)
{
    (void)sig;
    if (write(2, shm_watchdog_msg, shm_watchdog_len) < 0)
        _exit(2);
    signal(SIGALRM, SIG_DFL);
    raise(SIGALRM);
}

/* Says `msg` when alarm(2) fires (which the caller arms). */
static inline void shm_watchdog(const char *msg)
{
    shm_watchdog_msg = msg;
    shm_watchdog_len = strlen(msg);
    signal(SIGALRM, shm_watchdog_handler);
}

#define SHM_SYS(expr)                                                                          \
    do {                                                                                       \
        if ((expr) < 0)                                                                        \
            shm_die("%s: %s (%s:%d)", #expr, strerror(errno), __FILE__, __LINE__);             \
    } while (0)

/* ---- randomness (splitmix64: each process seeds its own) ---- */

static inline uint64_t shm_mix(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

static uint64_t shm_rng_state;

static inline uint64_t shm_rand(void)
{
    shm_rng_state += 0x9e3779b97f4a7c15ull;
    return shm_mix(shm_rng_state);
}

/* Uniform in [0, n); 0 for n == 0. */
static inline uint64_t shm_below(uint64_t n)
{
    return n ? shm_rand() % n : 0;
}

/* 1 with probability 1/n. */
static inline int shm_one_in(uint64_t n)
{
    return shm_below(n) == 0;
}

/* A busy loop of about `n` instructions: a random delay that places a kill
 * or a mutation, never a wait for another process. */
static inline void shm_spin(uint64_t n)
{
    for (volatile uint64_t i = 0; i < n; i++)
        ;
}

/* Log-uniform spin counts from 0 to about 2^max_log2: short ones land
 * inside short calls, long ones somewhere later. */
static inline uint64_t shm_random_delay(unsigned max_log2)
{
    unsigned b = (unsigned)shm_below(max_log2 + 1);
    return b ? (1ull << (b - 1)) + shm_below(1ull << (b - 1)) : 0;
}

/* ---- memory that outlives a killed child ---- */

static inline void *shm_shared_zeroed(size_t bytes)
{
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        shm_die("mmap of %zu shared bytes: %s", bytes, strerror(errno));
    return p;
}

/* ---- fds ---- */

/* Readable within timeout_ms (0: now)? A poll error fails. */
static inline int shm_readable(int fd, int timeout_ms)
{
    struct pollfd p = { .fd = fd, .events = POLLIN, .revents = 0 };
    int n;
    do {
        n = poll(&p, 1, timeout_ms);
    } while (n < 0 && errno == EINTR);
    if (n < 0 || (p.revents & POLLNVAL))
        shm_die("poll(%d): %s", fd, n < 0 ? strerror(errno) : "POLLNVAL");
    return n > 0;
}

static inline int shm_fd_open(int fd)
{
    return fcntl(fd, F_GETFD) >= 0;
}

/* Sends `len` bytes and `nfds` fds in one message; returns sendmsg's result. */
static inline ssize_t shm_send_fds(int sock, const void *data, size_t len, const int *fds, int nfds)
{
    union {
        struct cmsghdr h;
        char buf[CMSG_SPACE(sizeof(int) * 32)];
    } ctl;
    struct iovec iov = { .iov_base = (void *)data, .iov_len = len };
    struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1 };
    memset(&ctl, 0, sizeof ctl);
    if (nfds > 0) {
        if (nfds > 32)
            shm_die("shm_send_fds: %d fds", nfds);
        m.msg_control = ctl.buf;
        m.msg_controllen = CMSG_SPACE(sizeof(int) * (size_t)nfds);
        struct cmsghdr *c = CMSG_FIRSTHDR(&m);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(sizeof(int) * (size_t)nfds);
        memcpy(CMSG_DATA(c), fds, sizeof(int) * (size_t)nfds);
    }
    ssize_t n;
    do {
        n = sendmsg(sock, &m, MSG_NOSIGNAL);
    } while (n < 0 && errno == EINTR);
    return n;
}

/* Receives one message of up to `cap` bytes and up to `maxfds` fds (made
 * close-on-exec); returns recvmsg's result, the fds in fds[0..*nfds). */
static inline ssize_t shm_recv_fds(int sock, void *data, size_t cap, int *fds, int maxfds, int *nfds)
{
    union {
        struct cmsghdr h;
        char buf[CMSG_SPACE(sizeof(int) * 32)];
    } ctl;
    struct iovec iov = { .iov_base = data, .iov_len = cap };
    struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.buf,
                        .msg_controllen = sizeof ctl.buf };
    ssize_t n;
    do {
        n = recvmsg(sock, &m, MSG_CMSG_CLOEXEC);
    } while (n < 0 && errno == EINTR);
    *nfds = 0;
    if (n < 0)
        return n;
    for (struct cmsghdr *c = CMSG_FIRSTHDR(&m); c; c = CMSG_NXTHDR(&m, c)) {
        if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
            continue;
        int k = (int)((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
        for (int i = 0; i < k; i++) {
            int fd;
            memcpy(&fd, CMSG_DATA(c) + sizeof(int) * (size_t)i, sizeof fd);
            if (*nfds < maxfds)
                fds[(*nfds)++] = fd;
            else
                close(fd);
        }
    }
    return n;
}

/* The exported fds of a channel's end as one message: its side, then the
 * mem, recv_bell, send_bell and link fds attached (the test's own format
 * for fds a process did not inherit). Closes them here once sent. */
static inline int shm_send_exported(int sock, eventq_shared_fds *f)
{
    int fds[4] = { f->mem, f->recv_bell, f->send_bell, f->link };
    int32_t side = f->side;
    ssize_t n = shm_send_fds(sock, &side, sizeof side, fds, 4);
    for (int i = 0; i < 4; i++)
        close(fds[i]);
    return n == (ssize_t)sizeof side ? 0 : -1;
}

/* Takes a message of shm_send_exported; -1 if it is not one (what came is closed). */
static inline int shm_recv_exported(int sock, eventq_shared_fds *f)
{
    int32_t side = 0;
    int fds[4], n = 0;
    ssize_t r = shm_recv_fds(sock, &side, sizeof side, fds, 4, &n);
    if (r != (ssize_t)sizeof side || n != 4) {
        for (int i = 0; i < n; i++)
            close(fds[i]);
        return -1;
    }
    *f = (eventq_shared_fds){ .side = side, .mem = fds[0], .recv_bell = fds[1],
                              .send_bell = fds[2], .link = fds[3] };
    return 0;
}

/* Open fds of this process (for "whatever fds came are closed"). */
static inline int shm_count_fds(void)
{
    int n = 0;
    for (int fd = 0; fd < 1024; fd++)
        n += shm_fd_open(fd);
    return n;
}

/* ---- processes ---- */

/* What /proc says a thread is doing: the syscall number it sleeps in, or
 * -1 when running (or unreadable). */
static inline long shm_thread_syscall(pid_t pid, pid_t tid)
{
    char path[64], buf[64];
    snprintf(path, sizeof path, "/proc/%d/task/%d/syscall", (int)pid, (int)tid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return -1;
    buf[n] = 0;
    if (buf[0] < '0' || buf[0] > '9')
        return -1; /* "running" */
    return strtol(buf, NULL, 10);
}

/* Whether that syscall is a wait of the library's blocking calls (an epoll
 * wait) or the kernel's (a futex, a poll). */
static inline int shm_sleeping(long nr)
{
#ifdef __x86_64__
    return nr == 232 /* epoll_wait */ || nr == 281 /* epoll_pwait */ || nr == 441 /* epoll_pwait2 */ ||
           nr == 202 /* futex */ || nr == 7 /* poll */ || nr == 271 /* ppoll */;
#else
    return nr >= 0;
#endif
}

/* "exit 0", "killed by SIGKILL", ... for a wait status. */
static inline const char *shm_status(int st, char *buf, size_t len)
{
    if (WIFEXITED(st))
        snprintf(buf, len, "exit %d", WEXITSTATUS(st));
    else if (WIFSIGNALED(st))
        snprintf(buf, len, "killed by signal %d (%s)", WTERMSIG(st), strsignal(WTERMSIG(st)));
    else
        snprintf(buf, len, "status 0x%x", st);
    return buf;
}

/* ---- the command line and the clock ---- */

struct shm_args {
    uint64_t n, seed;
    int quiet, verbose;
};

/* Parses [-n N] [-s SEED] [-q] [-v]; `what` names N in the usage line. */
static inline struct shm_args shm_parse(int argc, char **argv, uint64_t n, const char *what)
{
    struct shm_args a = { .n = n, .seed = 1 };
    int opt;
    while ((opt = getopt(argc, argv, "n:s:qv")) != -1) {
        switch (opt) {
        case 'n': a.n = strtoull(optarg, NULL, 0); break;
        case 's': a.seed = strtoull(optarg, NULL, 0); break;
        case 'q': a.quiet = 1; break;
        case 'v': a.verbose = 1; break;
        default:
            fprintf(stderr, "usage: %s [-n %s] [-s SEED] [-q] [-v]\n", argv[0], what);
            exit(2);
        }
    }
    signal(SIGPIPE, SIG_IGN);
    return a;
}

/* Seconds on the monotonic clock (for the rate printed; never a condition). */
static inline double shm_seconds(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* ---- return codes, tallied by the parent ---- */

/* Slots of a code tally: -errno 0..133 and one for anything else. */
#define SHM_CODES 136
#define SHM_CODE_OTHER 135

static inline int shm_code_slot(int rc)
{
    return rc >= 0 ? 0 : rc > -SHM_CODE_OTHER ? -rc : SHM_CODE_OTHER;
}

static inline const char *shm_code_name(int slot)
{
    switch (slot) {
    case 0: return "0 (success)";
    case EAGAIN: return "-EAGAIN";
    case ETIMEDOUT: return "-ETIMEDOUT";
    case EPIPE: return "-EPIPE";
    case EPROTO: return "-EPROTO";
    case EMSGSIZE: return "-EMSGSIZE";
    case EISCONN: return "-EISCONN";
    case EPERM: return "-EPERM";
    case EINVAL: return "-EINVAL";
    case E2BIG: return "-E2BIG";
    case ENOTRECOVERABLE: return "-ENOTRECOVERABLE";
    default: return NULL;
    }
}

static inline void shm_print_codes(const char *what, const uint64_t *tally)
{
    printf("  %s:", what);
    for (int i = 0; i < SHM_CODES; i++) {
        if (!tally[i])
            continue;
        const char *name = shm_code_name(i);
        if (name)
            printf(" %s %llu", name, (unsigned long long)tally[i]);
        else if (i == SHM_CODE_OTHER)
            printf(" other %llu", (unsigned long long)tally[i]);
        else
            printf(" -%d %llu", i, (unsigned long long)tally[i]);
    }
    printf("\n");
}

#endif
