/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * The kernel's own ways, in their natural many-to-one forms; producers
 * write one message per call, blocking while the buffer is full.
 *
 * - Unix SOCK_SEQPACKET: the consumer listens on an abstract address, each
 *   producer process connects (a connection each: one listening socket,
 *   four clients), send(2) per message. The consumer accepts them all,
 *   waits on them in one epoll set (level-triggered) and drains each
 *   readable connection with recvmmsg(2), BATCH messages per call,
 *   MSG_DONTWAIT, until EAGAIN. Buffering: the kernel's default socket
 *   buffer (net.core.wmem_default) of the sender, which bounds the queue in
 *   bytes of skb memory, not in messages.
 * - pipe: one pipe for every producer, which is atomic because each
 *   write(2) is one message of at most PIPE_BUF bytes, so messages never
 *   interleave. The consumer waits on the read end with epoll and drains
 *   it with read(2) of up to BATCH messages, until EAGAIN; the stream
 *   holds whole messages only, so a read returns a multiple of the
 *   message size. The default pipe capacity (64 KiB).
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/utsname.h>
#include <unistd.h>

#include "ipc.h"

struct sys {
    size_t size;
    int n;                       /* connections, one per producer */
    int lfd;                     /* seqpacket: listening socket */
    struct sockaddr_un addr;
    socklen_t addrlen;
    int conn[MAX_PRODUCERS];     /* seqpacket: accepted connections */
    int rfd, wfd;                /* pipe */
    int tx;                      /* producer: its fd */
};

static void sys_check(long rc, const char *what)
{
    if (rc < 0)
        die("%s: %s", what, strerror(errno));
}

static void set_nonblock(int fd)
{
    int fl = fcntl(fd, F_GETFL);
    sys_check(fl, "fcntl");
    sys_check(fcntl(fd, F_SETFL, fl | O_NONBLOCK), "fcntl");
}

/* Blocking write of one whole message to a socket or pipe. */
static void write_msg(void *tx, const void *msg, size_t len)
{
    int fd = ((struct sys *)tx)->tx;
    for (;;) {
        ssize_t n = write(fd, msg, len);
        if (n == (ssize_t)len)
            return;
        if (n >= 0)
            die("write: %zd of %zu bytes", n, len);
        if (errno != EINTR)
            die("write: %s", strerror(errno));
    }
}

static void sys_teardown(void *st, char *note, size_t cap)
{
    struct sys *s = st;
    if (s->lfd >= 0) {
        /* The sender's buffer bounds an AF_UNIX queue; each side's default
         * is the same. */
        int sndbuf = 0;
        socklen_t sl = sizeof sndbuf;
        getsockopt(s->conn[0], SOL_SOCKET, SO_SNDBUF, &sndbuf, &sl);
        snprintf(note, cap, "%d connection%s, SO_SNDBUF %d bytes", s->n, s->n == 1 ? "" : "s",
                 sndbuf);
        close(s->lfd);
        for (int i = 0; i < s->n; i++)
            close(s->conn[i]);
    } else {
        snprintf(note, cap, "one pipe, %d bytes", fcntl(s->rfd, F_GETPIPE_SZ));
        close(s->rfd);
    }
    free(s);
}

/* --- SOCK_SEQPACKET ---------------------------------------------------------- */

static void *seq_setup(const struct run_info *ri)
{
    struct sys *s = xmalloc(sizeof *s);
    memset(s, 0, sizeof *s);
    s->size = ri->size;
    s->n = ri->producers;
    s->rfd = s->wfd = -1;
    s->addr.sun_family = AF_UNIX;
    char name[64];
    endpoint_name(name, sizeof name, "");
    /* Abstract: a leading NUL, nothing in the file system. */
    size_t nl = strlen(name);
    memcpy(s->addr.sun_path + 1, name, nl);
    s->addrlen = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + nl);
    sys_check(s->lfd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0), "socket");
    sys_check(bind(s->lfd, (struct sockaddr *)&s->addr, s->addrlen), "bind");
    sys_check(listen(s->lfd, MAX_PRODUCERS), "listen");
    return s;
}

static void *seq_producer_open(void *st, int p)
{
    (void)p;
    struct sys *s = st;
    close(s->lfd);
    sys_check(s->tx = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0), "socket");
    sys_check(connect(s->tx, (struct sockaddr *)&s->addr, s->addrlen), "connect");
    return s;
}

static void seq_consume(void *st, struct sink *k)
{
    struct sys *s = st;
    int ep = epoll_create1(EPOLL_CLOEXEC);
    sys_check(ep, "epoll_create1");
    for (int i = 0; i < s->n; i++) {
        sys_check(s->conn[i] = accept4(s->lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK),
                  "accept4");
        epoll_add(ep, s->conn[i], EPOLLIN, (uint64_t)i);
    }
    /* A slot 8 bytes longer than a message: a longer one shows as a wrong
     * length instead of a silent truncation. */
    size_t slot = s->size + 8;
    unsigned char *buf = xmalloc(BATCH * slot);
    struct mmsghdr mm[BATCH];
    struct iovec iov[BATCH];
    struct epoll_event evs[MAX_PRODUCERS];
    k->t->wakes = 0;
    for (;;) {
        int nev = epoll_waitn(ep, evs, MAX_PRODUCERS);
        k->t->wakes++;
        for (int e = 0; e < nev; e++) {
            int fd = s->conn[evs[e].data.u64];
            for (;;) {
                for (int i = 0; i < BATCH; i++) {
                    iov[i] = (struct iovec){buf + i * slot, slot};
                    mm[i] = (struct mmsghdr){.msg_hdr = {.msg_iov = &iov[i], .msg_iovlen = 1}};
                }
                int n = recvmmsg(fd, mm, BATCH, MSG_DONTWAIT, NULL);
                if (n < 0 && (errno == EAGAIN || errno == EINTR))
                    break;
                sys_check(n, "recvmmsg");
                if (n == 0)
                    die("recvmmsg: a producer hung up early");
                for (int i = 0; i < n; i++)
                    if (sink_msg(k, buf + i * slot, mm[i].msg_len))
                        goto done;
            }
        }
    }
done:
    free(buf);
    close(ep);
}

const struct row sys_seqpacket = {
    .label = "Unix SOCK_SEQPACKET, epoll + recvmmsg(" STR(BATCH) ")",
    .setup = seq_setup,
    .producer_open = seq_producer_open,
    .send = write_msg,
    .consume = seq_consume,
    .teardown = sys_teardown,
};

/* --- pipe ---------------------------------------------------------------------- */

static void *pipe_setup(const struct run_info *ri)
{
    _Static_assert(PIPE_BUF >= 1024, "a 1 KiB write to a pipe is atomic");
    struct sys *s = xmalloc(sizeof *s);
    memset(s, 0, sizeof *s);
    s->size = ri->size;
    s->n = ri->producers;
    s->lfd = -1;
    int fds[2];
    sys_check(pipe2(fds, O_CLOEXEC), "pipe2");
    s->rfd = fds[0];
    s->wfd = fds[1];
    return s;
}

static void *pipe_producer_open(void *st, int p)
{
    (void)p;
    struct sys *s = st;
    close(s->rfd);
    s->tx = s->wfd;
    return s;
}

static void pipe_consume(void *st, struct sink *k)
{
    struct sys *s = st;
    close(s->wfd); /* the producers have it */
    set_nonblock(s->rfd);
    int ep = epoll_for(s->rfd, 0);
    size_t cap = BATCH * s->size;
    unsigned char *buf = xmalloc(cap);
    k->t->wakes = 0;
    for (;;) {
        epoll_wait1(ep);
        k->t->wakes++;
        for (;;) {
            ssize_t n = read(s->rfd, buf, cap);
            if (n < 0 && (errno == EAGAIN || errno == EINTR))
                break;
            sys_check(n, "read");
            if (n == 0 || (size_t)n % s->size)
                die("pipe read of %zd bytes: not whole %zu-byte messages", n, s->size);
            for (size_t off = 0; off < (size_t)n; off += s->size)
                if (sink_msg(k, buf + off, s->size))
                    goto done;
        }
    }
done:
    free(buf);
    close(ep);
}

const struct row sys_pipe = {
    .label = "pipe, one for all (atomic writes), epoll + read",
    .setup = pipe_setup,
    .producer_open = pipe_producer_open,
    .send = write_msg,
    .consume = pipe_consume,
    .teardown = sys_teardown,
};

static const char *sys_version(void)
{
    static struct utsname u;
    return uname(&u) == 0 ? u.release : "?";
}

static const struct row *const sys_rows[] = {&sys_seqpacket, &sys_pipe};
const struct lib lib_sys = {
    .name = "Linux",
    .version = sys_version,
    .rows = sys_rows,
    .nrows = 2,
};
