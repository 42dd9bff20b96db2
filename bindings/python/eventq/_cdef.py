# SPDX-License-Identifier: MIT OR Apache-2.0
"""The C declarations of include/eventq.h that the package uses, for cffi.

Copied from the header in its order: when the header changes, this is the
one place to update, and tests/test_ffi_drift.py says what differs
(functions, types, struct layouts as compiled by cc, constants).

Differences from the header: #define values are written as plain integer
literals (cffi's parser accepts no expressions), EVENTQ_VERSION_PATCH and
EVENTQ_VERSION are left out (a fix release changes them, the ABI does
not), and doc comments are dropped.

EVENTQ_VERSION_MAJOR and _MINOR are those of the header copied: the
library loaded must have the same major version and at least that minor
one (docs/abi.md: a 0.x release from 0.2 on runs programs built against
any earlier header of 0.2 or later; 0.1 had another ABI).

A built package parses these once, at build time: setup.py writes
eventq/_abi.py (cffi's out-of-line ABI mode), which the package imports
instead of parsing them at each start (_ffi.py).
"""

CDEF = r"""
#define EVENTQ_VERSION_MAJOR 0
#define EVENTQ_VERSION_MINOR 3
#define EVENTQ_LOW_WATER_DEFAULT 18446744073709551615
#define EVENTQ_FOREVER -1
#define EVENTQ_DEFAULT_MAX_MSG_SIZE 1048576
#define EVENTQ_MAX_CAPACITY 16777216
#define EVENTQ_STRUCT_SIZE_MAX 4096
#define EVENTQ_DEFAULT_CAPACITY 1024
#define EVENTQ_CHAN_OPTS_SIZE_MIN 16
#define EVENTQ_CHAN_STATS_SIZE_MIN 8
#define EVENTQ_IN 1
#define EVENTQ_PRI 2
#define EVENTQ_OUT 4
#define EVENTQ_ERR 8
#define EVENTQ_HUP 16
#define EVENTQ_RDHUP 8192
#define EVENTQ_EDGE 2147483648
#define EVENTQ_ONESHOT 1073741824
#define EVENTQ_DEFAULT_BUDGET 256
#define EVENTQ_POST_CAPACITY 4096
#define EVENTQ_MEMCG_V1 1
#define EVENTQ_MEMCG_V2 2
#define EVENTQ_MEMCG_LOW 0
#define EVENTQ_MEMCG_MEDIUM 1
#define EVENTQ_MEMCG_CRITICAL 2
#define EVENTQ_MEMCG_MODE_DEFAULT 0
#define EVENTQ_MEMCG_MODE_HIERARCHY 1
#define EVENTQ_MEMCG_MODE_LOCAL 2
#define EVENTQ_MEMCG_PSI_SOME 0
#define EVENTQ_MEMCG_PSI_FULL 1
#define EVENTQ_MEMCG_THRESHOLD 1
#define EVENTQ_MEMCG_OOM 2
#define EVENTQ_MEMCG_PRESSURE 3
#define EVENTQ_MEMCG_PSI 4
#define EVENTQ_MEMCG_CHANGED 5
#define EVENTQ_MEMCG_REMOVED 6
#define EVENTQ_SIDE_SEND 1
#define EVENTQ_SIDE_RECV 2
#define EVENTQ_SHARED_FDS_SIZE_MIN 20

typedef struct eventq_chan eventq_chan;
typedef struct eventq_loop eventq_loop;
typedef struct eventq_memcg eventq_memcg;
typedef struct eventq_memcg_watch eventq_memcg_watch;
typedef struct eventq_msg eventq_msg;
typedef struct eventq_source eventq_source;

typedef void (*eventq_drop_fn)(void *userdata, const uint8_t *data, size_t len);

typedef struct eventq_chan_opts {
  size_t size;
  size_t capacity;
  size_t max_bytes;
  size_t max_msg_size;
  size_t low_water;
  eventq_drop_fn drop_fn;
  void *drop_userdata;
} eventq_chan_opts;

typedef struct eventq_chan_stats {
  uint64_t sent;
  uint64_t received;
  uint64_t pending;
  uint64_t pending_bytes;
  uint64_t dropped;
  uint64_t peak_depth;
  uint64_t recv_doorbell_rings;
  uint64_t send_doorbell_rings;
  uint64_t closed;
} eventq_chan_stats;

typedef struct eventq_buf {
  const void *data;
  size_t len;
} eventq_buf;

typedef void (*eventq_post_fn)(void *arg);
typedef void (*eventq_destroy_fn)(void *userdata);
typedef int (*eventq_fd_fn)(struct eventq_source *src, int fd, uint32_t revents, void *userdata);
typedef int (*eventq_timer_fn)(struct eventq_source *src, uint64_t expirations, void *userdata);
typedef int (*eventq_chan_fn)(struct eventq_source *src,
                              const void *data,
                              size_t len,
                              void *userdata);
typedef int (*eventq_chan_batch_fn)(struct eventq_source *src,
                                    const void *data,
                                    const size_t *lens,
                                    size_t count,
                                    void *userdata);
typedef int (*eventq_signal_fn)(struct eventq_source *src, int signo, void *userdata);

typedef struct eventq_memcg_delta {
  const char *name;
  uint64_t value;
  int64_t delta;
} eventq_memcg_delta;

typedef struct eventq_memcg_event {
  uint32_t kind;
  uint64_t count;
  uint64_t threshold;
  uint64_t usage;
  bool under_oom;
  uint64_t oom_kill;
  uint32_t level;
  uint32_t mode;
  uint32_t psi_kind;
  uint64_t psi_stall_us;
  uint64_t psi_window_us;
  const char *spec;
  const struct eventq_memcg_delta *deltas;
  size_t ndeltas;
} eventq_memcg_event;

typedef int (*eventq_memcg_fn)(struct eventq_source *src,
                               const struct eventq_memcg_event *ev,
                               void *userdata);

typedef struct eventq_shared_fds {
  int side;
  int mem;
  int recv_bell;
  int send_bell;
  int link;
} eventq_shared_fds;

uint32_t eventq_version(void);
const char *eventq_version_string(void);
const char *eventq_strerror(int err);
const char *eventq_last_error(void);

int eventq_chan_opts_init(struct eventq_chan_opts *opts, size_t size);
int eventq_chan_new(const struct eventq_chan_opts *opts, struct eventq_chan **out);
struct eventq_chan *eventq_chan_clone(const struct eventq_chan *chan);
void eventq_chan_free(struct eventq_chan *chan);
int eventq_chan_free_final(struct eventq_chan *chan, struct eventq_chan_stats *out, size_t size);
int eventq_chan_recv_fd(const struct eventq_chan *chan);
int eventq_chan_send_fd(const struct eventq_chan *chan);
int eventq_chan_send(const struct eventq_chan *chan,
                     const void *data,
                     size_t len,
                     int64_t timeout_ns);
int eventq_chan_send_batch(const struct eventq_chan *chan,
                           const struct eventq_buf *msgs,
                           size_t count,
                           int64_t timeout_ns);
int eventq_chan_recv(const struct eventq_chan *chan,
                     void *buf,
                     size_t cap,
                     size_t *len,
                     int64_t timeout_ns);
int eventq_chan_recv_msg(const struct eventq_chan *chan,
                         struct eventq_msg **out,
                         int64_t timeout_ns);
int eventq_chan_recv_batch(const struct eventq_chan *chan,
                           void *buf,
                           size_t cap,
                           size_t *lens,
                           size_t max_msgs,
                           int64_t timeout_ns);
int eventq_chan_close(const struct eventq_chan *chan);
int eventq_chan_get_stats(const struct eventq_chan *chan,
                          struct eventq_chan_stats *out,
                          size_t size);
const uint8_t *eventq_msg_data(const struct eventq_msg *msg);
size_t eventq_msg_len(const struct eventq_msg *msg);
void eventq_msg_free(struct eventq_msg *msg);

int eventq_loop_new(struct eventq_loop **out);
void eventq_loop_free(struct eventq_loop *lp);
int eventq_loop_fd(const struct eventq_loop *lp);
int eventq_loop_run(const struct eventq_loop *lp);
int eventq_loop_run_once(const struct eventq_loop *lp, int64_t timeout_ns);
int eventq_loop_stop(const struct eventq_loop *lp);
int eventq_loop_post(const struct eventq_loop *lp,
                     eventq_post_fn f,
                     void *arg,
                     eventq_destroy_fn destroy);
int eventq_loop_add_fd(const struct eventq_loop *lp,
                       int fd,
                       uint32_t events,
                       eventq_fd_fn cb,
                       void *userdata,
                       eventq_destroy_fn destroy,
                       struct eventq_source **out);
int eventq_loop_add_timer(const struct eventq_loop *lp,
                          uint64_t first_ns,
                          uint64_t interval_ns,
                          eventq_timer_fn cb,
                          void *userdata,
                          eventq_destroy_fn destroy,
                          struct eventq_source **out);
int eventq_loop_add_chan(const struct eventq_loop *lp,
                         const struct eventq_chan *chan,
                         eventq_chan_fn cb,
                         void *userdata,
                         eventq_destroy_fn destroy,
                         struct eventq_source **out);
int eventq_loop_add_chan_batch(const struct eventq_loop *lp,
                               const struct eventq_chan *chan,
                               size_t budget,
                               eventq_chan_batch_fn cb,
                               void *userdata,
                               eventq_destroy_fn destroy,
                               struct eventq_source **out);
int eventq_loop_add_signal(const struct eventq_loop *lp,
                           int signo,
                           eventq_signal_fn cb,
                           void *userdata,
                           eventq_destroy_fn destroy,
                           struct eventq_source **out);
int eventq_source_remove(const struct eventq_source *src);
void eventq_source_free(struct eventq_source *src);
int eventq_source_set_enabled(const struct eventq_source *src, int enabled);
int eventq_source_set_events(const struct eventq_source *src, uint32_t events);
int eventq_source_set_timer(const struct eventq_source *src,
                            uint64_t first_ns,
                            uint64_t interval_ns);
int eventq_source_set_budget(const struct eventq_source *src, size_t budget);
int eventq_source_error(const struct eventq_source *src);

int eventq_memcg_own(struct eventq_memcg **out);
int eventq_memcg_open(const char *path, struct eventq_memcg **out);
void eventq_memcg_free(struct eventq_memcg *cg);
int eventq_memcg_dir(const struct eventq_memcg *cg, uint32_t version, char *buf, size_t len);
int eventq_memcg_watch_threshold(const struct eventq_memcg *cg,
                                 uint64_t bytes,
                                 struct eventq_memcg_watch **out);
int eventq_memcg_watch_oom(const struct eventq_memcg *cg, struct eventq_memcg_watch **out);
int eventq_memcg_watch_pressure_level(const struct eventq_memcg *cg,
                                      uint32_t level,
                                      uint32_t mode,
                                      struct eventq_memcg_watch **out);
int eventq_memcg_watch_psi(const struct eventq_memcg *cg,
                           uint32_t kind,
                           uint64_t stall_us,
                           uint64_t window_us,
                           struct eventq_memcg_watch **out);
int eventq_memcg_watch_events(const struct eventq_memcg *cg, struct eventq_memcg_watch **out);
int eventq_memcg_watch_counters(const struct eventq_memcg *cg,
                                const char *file,
                                struct eventq_memcg_watch **out);
void eventq_memcg_watch_free(struct eventq_memcg_watch *watch);
int eventq_memcg_watch_fd(const struct eventq_memcg_watch *watch);
int eventq_memcg_watch_read(struct eventq_memcg_watch *watch,
                            uint32_t revents,
                            const struct eventq_memcg_event **out);
int eventq_loop_add_memcg(const struct eventq_loop *lp,
                          struct eventq_memcg_watch *watch,
                          eventq_memcg_fn cb,
                          void *userdata,
                          eventq_destroy_fn destroy,
                          struct eventq_source **out);

int eventq_chan_new_shared(const struct eventq_chan_opts *opts, int side, struct eventq_chan **out);
int eventq_chan_send_to(const struct eventq_chan *chan, int sockfd);
int eventq_chan_recv_from(int sockfd, struct eventq_chan **out);
int eventq_chan_export_fds(const struct eventq_chan *chan,
                           struct eventq_shared_fds *out,
                           size_t size);
int eventq_chan_import_fds(const struct eventq_shared_fds *fds,
                           size_t size,
                           struct eventq_chan **out);
int eventq_chan_side(const struct eventq_chan *chan);
int eventq_chan_consumer_enter(const struct eventq_chan *chan);
int eventq_chan_consumer_leave(const struct eventq_chan *chan);
"""

