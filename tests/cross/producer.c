/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * The C producer process of the cross-language tests between processes:
 * the Go and Python bindings' tests run it (its path in the environment
 * variable EVENTQ_CROSS_PRODUCER; the Makefile builds it) and consume what
 * it sends in their own process.
 *
 *   producer send-to FD COUNT END    makes a process-shared channel and
 *                                    hands its receiving end over the
 *                                    connected Unix socket FD
 *   producer recv-from FD COUNT END  takes the sending end over socket FD
 *   producer import SPEC COUNT END   takes the sending end from inherited
 *                                    fds, SPEC "send:MEM,RECV,SEND,LINK"
 *                                    (the form the bindings pass)
 *
 * Two threads send COUNT messages each, in the tests' format
 * (bindings/go/internal/ctest: producer id, sequence number from 0, a
 * payload derived from both, an FNV-1a checksum), with blocking calls:
 * producer 0 one message per call, producer 1 in batches of 16. Then END:
 * "close" closes the channel (end of stream by close), "exit" exits
 * without closing (end of stream by this process's death). Exit status 0,
 * or 1 with what failed on stderr.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <eventq.h>

#include "ctest.h"

static int fail(const char *what, int rc)
{
	fprintf(stderr, "producer: %s: %s\n", what, rc ? eventq_strerror(rc) : "bad argument");
	return 1;
}

/* The channel's sending end, as argv[1] and argv[2] say; NULL on failure. */
static eventq_chan *take_chan(const char *mode, const char *arg)
{
	eventq_chan *ch = NULL;
	int rc = 0;
	if (strcmp(mode, "send-to") == 0) {
		eventq_chan_opts opts;
		eventq_chan_opts_init(&opts, sizeof opts);
		opts.capacity = 64; /* small: both processes wait on each other */
		opts.max_msg_size = EQT_MAX_MSG;
		if ((rc = eventq_chan_new_shared(&opts, EVENTQ_SIDE_SEND, &ch)) < 0) {
			fail("eventq_chan_new_shared", rc);
			return NULL;
		}
		if ((rc = eventq_chan_send_to(ch, atoi(arg))) < 0) {
			fail("eventq_chan_send_to", rc);
			eventq_chan_free(ch);
			return NULL;
		}
	} else if (strcmp(mode, "recv-from") == 0) {
		if ((rc = eventq_chan_recv_from(atoi(arg), &ch)) < 0)
			fail("eventq_chan_recv_from", rc);
	} else if (strcmp(mode, "import") == 0) {
		eventq_shared_fds fds = {.side = EVENTQ_SIDE_SEND};
		if (sscanf(arg, "send:%d,%d,%d,%d", &fds.mem, &fds.recv_bell, &fds.send_bell,
		           &fds.link) != 4) {
			fail("import: SPEC is not send:MEM,RECV,SEND,LINK", 0);
			return NULL;
		}
		if ((rc = eventq_chan_import_fds(&fds, sizeof fds, &ch)) < 0)
			fail("eventq_chan_import_fds", rc);
	} else {
		fail("the mode is not send-to, recv-from or import", 0);
	}
	if (ch && eventq_chan_side(ch) != EVENTQ_SIDE_SEND) {
		fail("the channel's end is not the sending one", 0);
		eventq_chan_free(ch);
		return NULL;
	}
	return ch;
}

int main(int argc, char **argv)
{
	if (argc != 5 || (strcmp(argv[4], "close") != 0 && strcmp(argv[4], "exit") != 0)) {
		fprintf(stderr, "usage: producer send-to|recv-from FD | import SPEC  COUNT close|exit\n");
		return 2;
	}
	uint64_t count = strtoull(argv[3], NULL, 10);
	eventq_chan *ch = take_chan(argv[1], argv[2]);
	if (!ch)
		return 1;
	struct eqt_producers *single = eqt_producers_start(eventq_chan_clone(ch), 1, 0, count, 1);
	struct eqt_producers *batched = eqt_producers_start(eventq_chan_clone(ch), 1, 1, count, 16);
	if (!single || !batched)
		return fail("eqt_producers_start", 0);
	uint64_t sent1 = 0, sent2 = 0;
	int rc1 = eqt_producers_wait(single, &sent1);
	int rc2 = eqt_producers_wait(batched, &sent2);
	if (rc1 < 0 || rc2 < 0)
		return fail("send", rc1 < 0 ? rc1 : rc2);
	if (sent1 != count || sent2 != count)
		return fail("a producer thread sent fewer than COUNT", 0);
	if (strcmp(argv[4], "close") == 0) {
		eventq_chan_close(ch);
		eventq_chan_free(ch);
	}
	return 0;
}
