/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/* quickstart: a producer thread sends messages and closes the channel; main
 * waits on the channel's receive fd with epoll and prints each message.
 * Build: cc -pthread quickstart.c $(pkg-config --cflags --libs eventq) */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>
#include <eventq.h>

static void check(int rc, const char *what)  /* libeventq returns -errno */
{
	if (rc < 0) {
		fprintf(stderr, "%s: %s\n", what, eventq_strerror(rc));
		exit(1);
	}
}
static void die(const char *what) { perror(what); exit(1); }  /* system calls */

static void *producer(void *arg)
{
	static const char *const msgs[] = { "one", "two", "three", "four" };
	struct eventq_chan *tx = arg;             /* this thread's own handle */
	for (size_t i = 0; i < sizeof msgs / sizeof msgs[0]; i++)  /* copy in; wait if full */
		check(eventq_chan_send(tx, msgs[i], strlen(msgs[i]), EVENTQ_FOREVER), "send");
	check(eventq_chan_close(tx), "close");    /* the receiver sees end of stream */
	eventq_chan_free(tx);
	return NULL;
}

int main(void)
{
	struct eventq_chan *rx, *tx;
	pthread_t thread;
	check(eventq_chan_new(NULL, &rx), "new"); /* default capacity: 1024 messages */
	if (!(tx = eventq_chan_clone(rx)) || pthread_create(&thread, NULL, producer, tx))
		return 1;
	/* Readable while messages are pending or once closed: poll it, never read it. */
	struct epoll_event ev = { .events = EPOLLIN };
	int rc, ep = epoll_create1(EPOLL_CLOEXEC);
	if (ep < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, eventq_chan_recv_fd(rx), &ev) < 0)
		die("epoll");
	do {
		if (epoll_wait(ep, &ev, 1, -1) < 0 && errno != EINTR)
			die("epoll_wait");
		char buf[256];
		size_t len;   /* take everything pending, one message per call */
		while ((rc = eventq_chan_recv(rx, buf, sizeof buf, &len, 0)) == 0)
			printf("received %zu bytes: %.*s\n", len, (int)len, buf);
		if (rc != -EAGAIN && rc != -EPIPE)   /* -EAGAIN: none left for now */
			check(rc, "recv");
	} while (rc != -EPIPE);                   /* -EPIPE: closed and drained */
	pthread_join(thread, NULL);
	close(ep);
	eventq_chan_free(rx);
	return 0;
}
