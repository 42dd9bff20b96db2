/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/* C side of the bench-go rows "cthread" (internal/benchgo/cthread.go):
 * producer threads created by C, with pthread_create, that hand 16-byte
 * messages to Go by one of three means. Benchmark-only; not part of the
 * API. */
#ifndef EVENTQ_CBENCH_H
#define EVENTQ_CBENCH_H

#include <stddef.h>
#include <stdint.h>
#include <eventq.h>

/* Every message is CB_MSG bytes: two native-endian u64 words. Word 0 is
 * (thread << 48) | seq, seq counting from 0 in each thread. Word 1 is the
 * CLOCK_MONOTONIC nanoseconds just before the send in paced runs, and the
 * complement of word 0 in burst runs. */
#define CB_MSG 16
#define CB_SEQ_BITS 48

/* How the threads hand messages to Go. */
enum cb_kind {
	CB_EVENTQ = 0,       /* eventq_chan_send(EVENTQ_FOREVER), a clone each */
	CB_EXPORT = 1,       /* cbenchExportSend, a Go function (//export) */
	CB_EXPORT_BYTES = 2, /* cbenchExportSendBytes, likewise */
	CB_PIPE = 3,         /* write(2) of one message to a pipe */
};

struct cb_run;

/* Starts nthreads threads of the given kind at once. Burst (gap_ns == 0):
 * each sends back to back until run_ns have passed since this call (it
 * looks at the clock every 256 messages). Paced (gap_ns > 0): each sends
 * one message stamped with its send time, then sleeps gap_ns
 * (clock_nanosleep), until run_ns have passed. The last thread to finish
 * ends the stream: eventq_chan_close, cbenchExportEnd() or close(fd).
 * CB_EVENTQ takes ownership of chan (each thread sends on its own clone);
 * CB_PIPE of fd, the pipe's write end. A thread that cannot be created is
 * an error cb_wait reports, after the stream has ended. NULL only when out
 * of memory (chan and fd freed). */
struct cb_run *cb_start(int kind, int nthreads, eventq_chan *chan, int fd, int64_t run_ns,
                        int64_t gap_ns);

/* Joins the threads, writes each thread's count of messages sent to
 * sent[0..nthreads] and returns 0 or the first error (a negative errno).
 * Frees r. */
int cb_wait(struct cb_run *r, uint64_t *sent);

/* A pipe for CB_PIPE, both ends O_CLOEXEC: fds[0] the read end, non-blocking
 * (for Go's netpoller), fds[1] the write end, blocking, the pipe's buffer
 * sized to hold `records` messages (F_SETPIPE_SZ). 0 or a negative errno. */
int cb_pipe(int fds[2], int records);

/* CLOCK_MONOTONIC in nanoseconds. */
int64_t cb_now(void);

#endif
