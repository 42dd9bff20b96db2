/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * The consumer loops of the ZeroMQ and nng rows (and ZeroMQ's version
 * string), shared by bench-peers
 * (inproc, peer_zmq.c and peer_nng.c) and bench-ipc (ipc://,
 * benches/ipc/row_zmq.c and row_nng.c): wait in an epoll set of their own,
 * receive without blocking until the library has nothing, and hand each
 * message to `take`, until it returns 1. Include <zmq.h> or the nng
 * headers first. `take` is a constant at each call, so the compiler
 * inlines it as it inlines these functions.
 */
#ifndef BENCH_PEERS_DRAIN_H
#define BENCH_PEERS_DRAIN_H

#include <errno.h>
#include <stdio.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "peers.h"

typedef int (*take_fn)(void *arg, const void *data, size_t len);

#ifdef ZMQ_VERSION
/* ZeroMQ: the socket's ZMQ_FD signals edges, not a level: it is registered
 * with EPOLLET, and after each wake-up the consumer asks ZMQ_EVENTS,
 * receives with ZMQ_DONTWAIT until EAGAIN (zmq_msg_recv, no copy), and asks
 * ZMQ_EVENTS again; only when it no longer reports ZMQ_POLLIN does it go
 * back to epoll_wait. Counts wake-ups in *wakes. */
static inline void zmq_drain(void *sock, int64_t *wakes, take_fn take, void *arg)
{
    int fd;
    size_t sz = sizeof fd;
    if (zmq_getsockopt(sock, ZMQ_FD, &fd, &sz) < 0)
        die("ZMQ_FD: %s", zmq_strerror(zmq_errno()));
    int ep = epoll_for(fd, EPOLLET);
    zmq_msg_t m;
    zmq_msg_init(&m);
    *wakes = 0;
    for (;;) {
        epoll_wait1(ep);
        ++*wakes;
        for (;;) {
            int ev;
            sz = sizeof ev;
            if (zmq_getsockopt(sock, ZMQ_EVENTS, &ev, &sz) < 0)
                die("ZMQ_EVENTS: %s", zmq_strerror(zmq_errno()));
            if (!(ev & ZMQ_POLLIN))
                break;
            for (;;) {
                if (zmq_msg_recv(&m, sock, ZMQ_DONTWAIT) < 0) {
                    int e = zmq_errno();
                    if (e == EAGAIN)
                        break;
                    if (e == EINTR)
                        continue;
                    die("zmq_msg_recv: %s", zmq_strerror(e));
                }
                if (take(arg, zmq_msg_data(&m), zmq_msg_size(&m)))
                    goto done;
            }
        }
    }
done:
    zmq_msg_close(&m);
    close(ep);
}

/* The library's version, "4.3.4". */
static inline const char *zmq_version_str(void)
{
    static char v[32];
    int major, minor, patch;
    zmq_version(&major, &minor, &patch);
    snprintf(v, sizeof v, "%d.%d.%d", major, minor, patch);
    return v;
}
#endif

#ifdef NNG_MAJOR_VERSION
/* nng: NNG_OPT_RECVFD is raised while a message can be received and lowered
 * when none is left (a level); the consumer receives with
 * nng_recvmsg(NNG_FLAG_NONBLOCK) until NNG_EAGAIN, reading each message in
 * place. Counts wake-ups in *wakes. */
static inline void nng_drain(nng_socket sock, int64_t *wakes, take_fn take, void *arg)
{
    int fd, rc;
    if ((rc = nng_socket_get_int(sock, NNG_OPT_RECVFD, &fd)))
        die("NNG_OPT_RECVFD: %s", nng_strerror(rc));
    int ep = epoll_for(fd, 0);
    *wakes = 0;
    for (;;) {
        epoll_wait1(ep);
        ++*wakes;
        for (;;) {
            nng_msg *m;
            if ((rc = nng_recvmsg(sock, &m, NNG_FLAG_NONBLOCK)) == NNG_EAGAIN)
                break;
            if (rc)
                die("nng_recvmsg: %s", nng_strerror(rc));
            int done = take(arg, nng_msg_body(m), nng_msg_len(m));
            nng_msg_free(m);
            if (done)
                goto done;
        }
    }
done:
    close(ep);
}
#endif

#endif /* BENCH_PEERS_DRAIN_H */
