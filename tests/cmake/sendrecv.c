/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/* Built by tests/cmake/CMakeLists.txt against the installed libeventq: one
 * message through a channel, and back out whole. */
#include <eventq.h>
#include <stdio.h>
#include <string.h>

int main(void)
{
	struct eventq_chan *ch;
	char buf[64];
	size_t len = 0;
	const char msg[] = "hello from cmake";
	int rc = eventq_chan_new(NULL, &ch);
	if (rc != 0) {
		fprintf(stderr, "eventq_chan_new: %s\n", eventq_strerror(rc));
		return 1;
	}
	rc = eventq_chan_send(ch, msg, sizeof msg - 1, 0);
	if (rc == 0)
		rc = eventq_chan_recv(ch, buf, sizeof buf, &len, 0);
	if (rc != 0) {
		fprintf(stderr, "send/recv: %s\n", eventq_strerror(rc));
		eventq_chan_free(ch);
		return 1;
	}
	eventq_chan_free(ch);
	if (len != sizeof msg - 1 || memcmp(buf, msg, len) != 0) {
		fprintf(stderr, "received %zu bytes '%.*s', sent '%s'\n", len, (int)len, buf, msg);
		return 1;
	}
	printf("libeventq %s: sent and received '%.*s'\n", eventq_version_string(), (int)len, buf);
	return 0;
}
