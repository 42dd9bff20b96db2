/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/* processes: a producer process and a consumer process on one channel.
 *
 * The producer makes a process-shared channel and hands its receiving end to
 * a consumer process over a Unix socket. Halfway through, it kills the
 * consumer (SIGKILL: it could be anywhere, mid-receive included), starts a
 * new one, hands the same end to it, and goes on: nothing it sent is lost
 * except what the dead consumer had already taken, and the new consumer
 * sees end of stream once the producer closes.
 *
 * Build: cc processes.c $(pkg-config --cflags --libs eventq) */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
#include <eventq.h>

#define MESSAGES 200

static void check(int rc, const char *what)  /* libeventq returns -errno */
{
	if (rc < 0) {
		fprintf(stderr, "%s: %s\n", what, eventq_strerror(rc));
		exit(1);
	}
}
static void die(const char *what) { perror(what); exit(1); }  /* system calls */

/* The consumer: takes the channel's end from `sock`, then reports each
 * message's number on `report` as it receives it, until end of stream. */
static void consume(int sock, int report)
{
	struct eventq_chan *rx;
	check(eventq_chan_recv_from(sock, &rx), "recv_from");
	close(sock);
	for (;;) {
		uint32_t n;
		size_t len;
		int rc = eventq_chan_recv(rx, &n, sizeof n, &len, EVENTQ_FOREVER);
		if (rc == -EPIPE)        /* closed and drained, or the producer died */
			break;
		check(rc, "recv");
		if (write(report, &n, sizeof n) != sizeof n)
			die("write");
	}
	eventq_chan_free(rx);
	_exit(0);
}

/* Starts a consumer process and hands it the receiving end of `tx`. */
static pid_t start_consumer(struct eventq_chan *tx, int report)
{
	int sv[2];
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
		die("socketpair");
	pid_t pid = fork();
	if (pid < 0)
		die("fork");
	if (pid == 0) {
		close(sv[0]);
		consume(sv[1], report);
	}
	close(sv[1]);
	/* Allowed while no live process holds that end: before the first
	 * consumer, and once the last one is gone. */
	check(eventq_chan_send_to(tx, sv[0]), "send_to");
	close(sv[0]);
	return pid;
}

/* Reads consumer reports from `report` until `count` numbers came. */
static void read_reports(int report, unsigned char *seen, int count)
{
	for (int i = 0; i < count; i++) {
		uint32_t n;
		if (read(report, &n, sizeof n) != sizeof n)
			die("read");
		seen[n]++;
	}
}

int main(void)
{
	struct eventq_chan_opts opts;
	eventq_chan_opts_init(&opts, sizeof opts);
	opts.capacity = 16;
	opts.max_msg_size = sizeof(uint32_t);
	struct eventq_chan *tx;
	check(eventq_chan_new_shared(&opts, EVENTQ_SIDE_SEND, &tx), "new_shared");

	int pipefd[2];
	if (pipe2(pipefd, O_CLOEXEC) < 0)
		die("pipe");
	unsigned char seen[MESSAGES] = { 0 };
	pid_t consumer = start_consumer(tx, pipefd[1]);
	for (uint32_t n = 0; n < MESSAGES; n++) {
		/* Waits while the ring is full; -EPIPE once a dead consumer's
		 * end hangs up and the ring is full. */
		check(eventq_chan_send(tx, &n, sizeof n, EVENTQ_FOREVER), "send");
		if (n == MESSAGES / 2) {
			read_reports(pipefd[0], seen, 10); /* it is at work... */
			kill(consumer, SIGKILL);           /* ...wherever it is */
			waitpid(consumer, NULL, 0);
			printf("consumer %d killed after it reported 10 messages\n", (int)consumer);
			consumer = start_consumer(tx, pipefd[1]);
			printf("consumer %d took over the same channel\n", (int)consumer);
		}
	}
	check(eventq_chan_close(tx), "close");      /* end of stream after the rest */
	close(pipefd[1]);
	int status;
	if (waitpid(consumer, &status, 0) < 0 || !WIFEXITED(status) || WEXITSTATUS(status))
		die("consumer");
	/* The reports of both consumers, to the end. */
	uint32_t n;
	while (read(pipefd[0], &n, sizeof n) == sizeof n)
		seen[n]++;

	int got = 0, twice = 0, lost = 0;
	for (int i = 0; i < MESSAGES; i++) {
		got += seen[i] == 1;
		twice += seen[i] > 1;
		lost += seen[i] == 0;
	}
	printf("%d of %d messages received once, %d twice, %d lost\n", got, MESSAGES, twice, lost);
	/* A consumer killed mid-receive may take one message with it: it had
	 * received it, and died before it could report it. Nothing else. */
	if (twice || lost > 1)
		return 1;
	eventq_chan_free(tx);
	return 0;
}
