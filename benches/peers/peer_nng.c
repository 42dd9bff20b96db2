/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * nng: inproc push/pull (protocol pipeline0). The consumer's pull socket
 * listens; each producer opens its own push socket and dials it (nng
 * sockets are thread-safe, but one per producer is the same shape as the
 * ZeroMQ row and keeps producers off one socket lock), and sends with a
 * blocking nng_send (a copy into a new nng_msg). Bounded by the push
 * socket's NNG_OPT_SENDBUF, CAPACITY messages per producer, and the pull
 * socket's NNG_OPT_RECVBUF, CAPACITY more (shared by all producers).
 *
 * The consumer waits on the pull socket's NNG_OPT_RECVFD in its own epoll
 * set (a level) and drains it as drain.h's nng_drain says.
 *
 * nng has no linger: closing a push socket may drop what it still buffers,
 * so push sockets are closed only once the consumer has everything.
 */
#ifdef PEERS_HAVE_NNG

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include <nng/nng.h>
#include <nng/protocol/pipeline0/pull.h>
#include <nng/protocol/pipeline0/push.h>

#include "drain.h"
#include "peers.h"

struct nq {
    nng_socket pull;
    nng_socket push[64];
    int producers;
    char url[64];
    int recvbuf_err;
    _Atomic int sendbuf_err; /* set by any producer whose SENDBUF was refused */
};

static void ncheck(int rc, const char *what)
{
    if (rc)
        die("%s: %s", what, nng_strerror(rc));
}

static void *setup(const struct run_info *ri)
{
    static int runs;
    struct nq *n = xmalloc(sizeof *n);
    memset(n, 0, sizeof *n);
    if (ri->producers > 64)
        die("nng row: at most 64 producers");
    n->producers = ri->producers;
    ncheck(nng_pull0_open(&n->pull), "nng_pull0_open");
    n->recvbuf_err = nng_socket_set_int(n->pull, NNG_OPT_RECVBUF, CAPACITY);
    snprintf(n->url, sizeof n->url, "inproc://bench-peers-%d", runs++);
    ncheck(nng_listen(n->pull, n->url, NULL, 0), "nng_listen");
    return n;
}

static void *producer_open(void *st, int p)
{
    struct nq *n = st;
    nng_socket s;
    ncheck(nng_push0_open(&s), "nng_push0_open");
    int rc = nng_socket_set_int(s, NNG_OPT_SENDBUF, CAPACITY);
    if (rc)
        n->sendbuf_err = rc; /* reported in the table's notes */
    ncheck(nng_dial(s, n->url, NULL, 0), "nng_dial");
    n->push[p] = s;
    return &n->push[p];
}

static void nsend(void *tx, const void *msg, size_t len)
{
    ncheck(nng_send(*(nng_socket *)tx, (void *)msg, len, 0), "nng_send");
}

static void consume(void *st, struct tally *t)
{
    struct nq *n = st;
    nng_drain(n->pull, &t->wakes, tally_take, t);
}

static void teardown(void *st, char *note, size_t cap)
{
    struct nq *n = st;
    snprintf(note, cap, "sendbuf %d per producer%s, recvbuf %d%s", CAPACITY,
             n->sendbuf_err ? " REFUSED" : "", CAPACITY, n->recvbuf_err ? " REFUSED" : "");
    for (int p = 0; p < n->producers; p++)
        nng_close(n->push[p]);
    nng_close(n->pull);
    free(n);
}

static const struct peer nng_pushpull = {
    .label = "nng inproc push/pull, NNG_OPT_RECVFD in epoll",
    .setup = setup,
    .producer_open = producer_open,
    .send = nsend,
    .consume = consume,
    .teardown = teardown,
};

static const struct peer *const rows[] = {&nng_pushpull};
const struct family family_nng = {
    .name = "nng",
    .version = nng_version,
    .rows = rows,
    .nrows = 1,
};

#else
typedef int peer_nng_not_built; /* nng missing when built: see peers.c */
#endif
