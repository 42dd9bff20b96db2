/* SPDX-License-Identifier: MIT OR Apache-2.0 */
#include "cbench.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "_cgo_export.h" /* cbenchExportSend, cbenchExportEnd */

struct cb_thread {
	pthread_t thread;
	struct cb_run *run;
	uint64_t id;
	eventq_chan *chan; /* CB_EVENTQ: this thread's clone */
	uint64_t sent;
	int rc;
};

struct cb_run {
	int kind, n, started;
	int fd; /* CB_PIPE: the write end */
	eventq_chan *chan;
	int64_t deadline, gap_ns;
	atomic_int live; /* threads that have not ended yet */
	int rc;          /* an error of cb_start */
	struct cb_thread *threads;
};

int64_t cb_now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

static void end_stream(struct cb_run *r)
{
	switch (r->kind) {
	case CB_EVENTQ:
		eventq_chan_close(r->chan);
		break;
	case CB_EXPORT:
	case CB_EXPORT_BYTES:
		cbenchExportEnd();
		break;
	case CB_PIPE:
		close(r->fd);
		break;
	}
}

/* One thread has ended (or was never started): the last ends the stream. */
static void leave(struct cb_run *r)
{
	if (atomic_fetch_sub(&r->live, 1) == 1)
		end_stream(r);
}

static int send_one(struct cb_thread *t, uint8_t *msg)
{
	switch (t->run->kind) {
	case CB_EVENTQ:
		return eventq_chan_send(t->chan, msg, CB_MSG, EVENTQ_FOREVER);
	case CB_EXPORT:
		cbenchExportSend(msg, CB_MSG);
		return 0;
	case CB_EXPORT_BYTES:
		cbenchExportSendBytes(msg, CB_MSG);
		return 0;
	case CB_PIPE:
		for (;;) {
			ssize_t w = write(t->run->fd, msg, CB_MSG);
			if (w == CB_MSG)
				return 0;
			if (w >= 0)
				return -EIO; /* cannot happen: CB_MSG <= PIPE_BUF is atomic */
			if (errno != EINTR)
				return -errno;
		}
	}
	return -EINVAL;
}

static void *produce(void *arg)
{
	struct cb_thread *t = arg;
	struct cb_run *r = t->run;
	uint64_t seq = 0, w[2];
	uint8_t msg[CB_MSG];
	int rc = 0;
	if (r->gap_ns > 0) {
		struct timespec gap = { r->gap_ns / 1000000000, r->gap_ns % 1000000000 };
		for (int64_t now = cb_now(); now < r->deadline; now = cb_now()) {
			w[0] = t->id << CB_SEQ_BITS | seq;
			w[1] = (uint64_t)now;
			memcpy(msg, w, sizeof msg);
			if ((rc = send_one(t, msg)) < 0)
				break;
			seq++;
			while (clock_nanosleep(CLOCK_MONOTONIC, 0, &gap, &gap) == EINTR)
				;
		}
	} else {
		while (!rc && cb_now() < r->deadline) {
			for (int i = 0; i < 256; i++) {
				w[0] = t->id << CB_SEQ_BITS | seq;
				w[1] = ~w[0];
				memcpy(msg, w, sizeof msg);
				if ((rc = send_one(t, msg)) < 0)
					break;
				seq++;
			}
		}
	}
	t->sent = seq;
	t->rc = rc;
	if (r->kind == CB_EVENTQ && rc < 0)
		eventq_chan_close(t->chan); /* the receiver must not wait for the others */
	leave(r);
	eventq_chan_free(t->chan);
	return NULL;
}

struct cb_run *cb_start(int kind, int nthreads, eventq_chan *chan, int fd, int64_t run_ns,
                        int64_t gap_ns)
{
	struct cb_run *r = calloc(1, sizeof *r);
	if (r)
		r->threads = calloc((size_t)(nthreads > 0 ? nthreads : 1), sizeof *r->threads);
	if (!r || !r->threads) {
		free(r);
		eventq_chan_free(chan);
		if (fd >= 0)
			close(fd);
		return NULL;
	}
	r->kind = kind;
	r->n = nthreads;
	r->fd = fd;
	r->chan = chan;
	r->gap_ns = gap_ns;
	atomic_init(&r->live, nthreads);
	r->deadline = cb_now() + run_ns;
	int i = 0;
	for (; i < nthreads; i++) {
		struct cb_thread *t = &r->threads[i];
		t->run = r;
		t->id = (uint64_t)i;
		if (kind == CB_EVENTQ && !(t->chan = eventq_chan_clone(chan))) {
			r->rc = -ENOMEM;
			break;
		}
		int e = pthread_create(&t->thread, NULL, produce, t);
		if (e) {
			eventq_chan_free(t->chan);
			r->rc = -e;
			break;
		}
		r->started++;
	}
	if (nthreads <= 0)
		end_stream(r);
	for (; i < nthreads; i++) /* never started: as if ended at once */
		leave(r);
	return r;
}

int cb_wait(struct cb_run *r, uint64_t *sent)
{
	int rc = r->rc;
	for (int i = 0; i < r->started; i++) {
		pthread_join(r->threads[i].thread, NULL);
		if (!rc)
			rc = r->threads[i].rc;
	}
	for (int i = 0; i < r->n; i++)
		sent[i] = r->threads[i].sent;
	eventq_chan_free(r->chan);
	free(r->threads);
	free(r);
	return rc;
}

int cb_pipe(int fds[2], int records)
{
	if (pipe2(fds, O_CLOEXEC) < 0)
		return -errno;
	if (fcntl(fds[1], F_SETPIPE_SZ, records * CB_MSG) < 0 ||
	    fcntl(fds[0], F_SETFL, fcntl(fds[0], F_GETFL) | O_NONBLOCK) < 0) {
		int e = errno;
		close(fds[0]);
		close(fds[1]);
		return -e;
	}
	return 0;
}
