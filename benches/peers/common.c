/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * What bench-peers (peers.c) and bench-ipc (benches/ipc) share: errors,
 * the epoll helpers, the consumer's check, the producers' messages, the
 * statistics and the report of the machine and its load. Declared in
 * peers.h.
 */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <time.h>
#include <unistd.h>

#include "peers.h"

/* --- errors and memory ------------------------------------------------------ */

void die(const char *fmt, ...)
{
    va_list ap;
    fflush(stdout);
    fprintf(stderr, "%s: error: ", bench_prog);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    exit(2);
}

void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p)
        die("out of memory (%zu bytes)", n);
    return p;
}

/* --- options ------------------------------------------------------------------ */

int filter_match(const char *filter, const char *name)
{
    if (!filter)
        return 1;
    for (const char *f = filter;;) {
        const char *bar = strchr(f, '|');
        size_t n = bar ? (size_t)(bar - f) : strlen(f);
        if (!n || memmem(name, strlen(name), f, n))
            return 1;
        if (!bar)
            return 0;
        f = bar + 1;
    }
}

int smoke_from_env(void)
{
    const char *env = getenv("EVENTQ_BENCH_SMOKE");
    return env && *env && strcmp(env, "0");
}

/* --- epoll ------------------------------------------------------------------- */

void epoll_add(int ep, int fd, uint32_t events, uint64_t data)
{
    struct epoll_event ev = {.events = events, .data.u64 = data};
    if (epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev) < 0)
        die("epoll_ctl: %s", strerror(errno));
}

int epoll_for(int fd, uint32_t extra)
{
    int ep = epoll_create1(EPOLL_CLOEXEC);
    if (ep < 0)
        die("epoll_create1: %s", strerror(errno));
    epoll_add(ep, fd, EPOLLIN | extra, (uint64_t)fd);
    return ep;
}

int epoll_waitn(int ep, struct epoll_event *evs, int max)
{
    int n;
    while ((n = epoll_wait(ep, evs, max, -1)) < 0)
        if (errno != EINTR)
            die("epoll_wait: %s", strerror(errno));
    return n;
}

void epoll_wait1(int ep)
{
    struct epoll_event ev;
    epoll_waitn(ep, &ev, 1);
}

/* --- the consumer's check and the producers' messages ------------------------- */

void tally_fail(struct tally *t, const char *fmt, ...)
{
    if (t->bad++ == 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(t->first_bad, sizeof t->first_bad, fmt, ap);
        va_end(ap);
    }
}

uint64_t *checksum_k(size_t size)
{
    size_t words = size / 8;
    uint64_t *k = xmalloc(words * sizeof *k);
    for (size_t i = 0; i < words; i++)
        k[i] = (i + 1) * UINT64_C(0xD6E8FEB86659FD93);
    return k;
}

void msg_init(struct msgbuf *m, size_t size, int p, const uint64_t *k)
{
    m->d = xmalloc(size);
    m->size = size;
    m->k = k;
    m->base = 0;
    memset(m->d, 0, size);
    if (size >= 24) {
        size_t words = size / 8;
        for (size_t i = 2; i + 1 < words; i++) {
            uint64_t w = (uint64_t)(p + 1) * UINT64_C(0x9E3779B97F4A7C15) ^
                         i * UINT64_C(0xBF58476D1CE4E5B9);
            memcpy(m->d + 8 * i, &w, 8);
            m->base += w ^ k[i];
        }
    }
}

int tally_complete(const struct tally *t, char *error, size_t cap)
{
    if (t->bad) {
        snprintf(error, cap, "%llu bad messages; first: %s", (unsigned long long)t->bad,
                 t->first_bad);
        return 0;
    }
    for (int p = 0; p < t->producers; p++)
        if (t->next[p] != SEQ_END) {
            snprintf(error, cap, "producer %d: end marker missing after %llu of %llu messages",
                     p, (unsigned long long)t->next[p],
                     (unsigned long long)(t->expect ? atomic_load(&t->expect[p]) : t->per_prod));
            return 0;
        }
    return 1;
}

/* --- statistics ----------------------------------------------------------------- */

double ts_sec(const struct timespec *t)
{
    return (double)t->tv_sec + (double)t->tv_nsec / 1e9;
}

double now_sec(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return ts_sec(&t);
}

void sleep_for(double s)
{
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
        ;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double quantile(const double *v, int n, double q)
{
    if (n == 0)
        return NAN;
    double *tmp = xmalloc((size_t)n * sizeof *tmp);
    memcpy(tmp, v, (size_t)n * sizeof *v);
    qsort(tmp, (size_t)n, sizeof *tmp, cmp_double);
    double pos = q * (n - 1), r;
    int i = (int)pos;
    r = i + 1 < n ? tmp[i] + (pos - i) * (tmp[i + 1] - tmp[i]) : tmp[i];
    free(tmp);
    return r;
}

double median(const double *v, int n)
{
    return quantile(v, n, 0.5);
}

/* --- the method: timed rows, interleaved repetitions, verdicts on the spread ------- */

int method_arg(struct method *m, int argc, char **argv, int *i)
{
    const char *a = argv[*i];
    if (!strcmp(a, "--quick")) {
        m->quick = 1;
        return 1;
    }
    if (*i + 1 >= argc)
        return 0;
    if (!strcmp(a, "--reps"))
        m->reps = atoi(argv[++*i]);
    else if (!strcmp(a, "--row-time"))
        m->row_time = atof(argv[++*i]);
    else if (!strcmp(a, "--warm")) {
        m->warm = atof(argv[++*i]);
        if (!(m->warm > 0))
            m->warm = -1; /* out of range, not "unset" */
    }
    else
        return 0;
    return 1;
}

void method_finish(struct method *m)
{
    m->smoke |= smoke_from_env();
    if (m->reps < 0 || m->reps > METHOD_MAX_REPS || m->row_time < 0 || m->row_time > 60 ||
        m->warm < 0 || m->warm > 60) {
        fprintf(stderr,
                "%s: --reps 1..%d, --row-time in seconds (0 < S <= 60), --warm in seconds "
                "(0 < S <= 60)\n",
                bench_prog, METHOD_MAX_REPS);
        exit(2);
    }
    if (!m->reps)
        m->reps = m->smoke ? 1 : m->quick ? 3 : 5;
    if (m->row_time == 0)
        m->row_time = m->quick ? 0.2 : 0.5;
    if (m->warm == 0)
        m->warm = m->row_time / 5;
}

void method_plan(const struct method *m, const char *prog, int rows, double per_row,
                 double extra)
{
    if (m->smoke)
        return;
    double rep = rows * (m->warm + m->row_time + per_row) + extra;
    fprintf(stderr,
            "%s: %d timed rows x %d repetitions x (%.2f s warm-up + %.2f s window + ~%.2f s "
            "set-up), plus ~%.0f s per repetition of latency rows: expect about %.0f s%s\n",
            prog, rows, m->reps, m->warm, m->row_time, per_row, extra, rep * m->reps,
            m->quick ? " (quick)" : "");
}

struct spread spread_of(const double *v, int n)
{
    struct spread s = {n, n >= 5, NAN, NAN, NAN};
    if (!n)
        return s;
    s.med = median(v, n);
    s.lo = quantile(v, n, s.iqr ? 0.25 : 0);
    s.hi = quantile(v, n, s.iqr ? 0.75 : 1);
    return s;
}

void fmt_spread(char *buf, size_t cap, struct spread s, int prec)
{
    if (!s.n)
        snprintf(buf, cap, "-");
    else
        snprintf(buf, cap, "%.*f (%.*f-%.*f)", prec, s.med, prec, s.lo, prec, s.hi);
}

const char *verdict_of(struct spread s, int at_most, double goal)
{
    if (at_most)
        return s.hi <= goal ? "met" : s.lo > goal ? "MISSED" : "unsettled";
    return s.lo >= goal ? "met" : s.hi < goal ? "MISSED" : "unsettled";
}

void print_verdict(const struct method *m, const char *what, struct spread s, int at_most,
                   double goal, const char *unit)
{
    int pct = !strcmp(unit, "%");
    char head[256];
    snprintf(head, sizeof head, "target %s %s %g%s:", what, at_most ? "<=" : ">=", goal, unit);
    if (!s.n) {
        printf("%-92s not measured\n", head);
        return;
    }
    int prec = pct ? 1 : 2;
    printf("%-92s median %.*f%s (%s %.*f-%.*f%s, %d rep%s): %s%s\n", head, prec, s.med, unit,
           s.iqr ? "IQR" : "min-max", prec, s.lo, prec, s.hi, unit, s.n, s.n == 1 ? "" : "s",
           verdict_of(s, at_most, goal), m->quick ? " (quick)" : "");
}

enum phase phase_of_rows(const double *a, int na, const double *b, int nb)
{
    double lo = INFINITY, hi = -INFINITY;
    for (int i = 0; i < na + nb; i++) {
        double x = i < na ? a[i] : b[i - na];
        lo = x < lo ? x : lo;
        hi = x > hi ? x : hi;
    }
    if (na + nb && hi < PHASE_NEAR_NS)
        return PHASE_NEAR;
    if (na + nb && lo > PHASE_FAR_NS)
        return PHASE_FAR;
    return PHASE_TURNED;
}

void print_phases(const char *what, const double *v, const enum phase *ph, int n)
{
    static const char *const names[] = {"near", "far", "turned"};
    int printed = 0;
    for (int p = PHASE_NEAR; p <= PHASE_TURNED; p++) {
        int started = 0;
        for (int i = 0; i < n; i++) {
            if ((int)ph[i] != p)
                continue;
            if (!started && printed)
                printf("; %s", names[p]);
            else if (!started)
                printf("phases %s: %s", what, names[p]);
            printf(" %.4f", v[i]);
            started = printed = 1;
        }
    }
    if (printed)
        printf("\n");
}

int phased_ratios(struct rep_view (*at)(int gi, int row, int rep), int gi, int a, int na, int b,
                  int nb, double *v, enum phase *ph)
{
    int n = 0;
    if (a < 0 || b < 0)
        return 0;
    for (int i = 0; i < na && i < nb; i++) {
        struct rep_view x = at(gi, a, i), y = at(gi, b, i);
        if (!x.ok || !y.ok || y.rate <= 0)
            continue;
        if (ph)
            ph[n] = phase_of_rows(x.line, x.n_line, y.line, y.n_line);
        v[n++] = x.rate / y.rate;
    }
    return n;
}

void judge_phased(const struct method *m, const char *what, const double *v,
                  const enum phase *ph, int n, double want)
{
    print_verdict(m, what, spread_of(v, n), 0, want, "x");
    print_phases(what, v, ph, n);
}

/* --- machine and load ------------------------------------------------------------ */

static void read_trim(const char *path, char *buf, size_t cap)
{
    FILE *f = fopen(path, "r");
    buf[0] = 0;
    if (!f || !fgets(buf, (int)cap, f))
        snprintf(buf, cap, "?");
    if (f)
        fclose(f);
    size_t n = strlen(buf);
    while (n && (buf[n - 1] == '\n' || buf[n - 1] == ' '))
        buf[--n] = 0;
}

static double load1(char *buf, size_t cap)
{
    read_trim("/proc/loadavg", buf, cap);
    char *end;
    double v = strtod(buf, &end);
    return end == buf ? NAN : v;
}

/* Busy and steal ticks of the whole machine, and this process's own with
 * its waited-for children's (the processes a run forks). */
static struct ticks cpu_ticks(void)
{
    struct ticks t = {0};
    unsigned long long f[8] = {0};
    FILE *s = fopen("/proc/stat", "r");
    if (!s)
        return t;
    int n = fscanf(s, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &f[0], &f[1], &f[2],
                   &f[3], &f[4], &f[5], &f[6], &f[7]);
    fclose(s);
    if (n != 8)
        return t;
    /* user nice system idle iowait irq softirq steal */
    t.busy = f[0] + f[1] + f[2] + f[5] + f[6];
    t.steal = f[7];
    char buf[1024];
    read_trim("/proc/self/stat", buf, sizeof buf);
    char *rest = strrchr(buf, ')');
    if (!rest)
        return t;
    /* After the comm: state is field 3; utime, stime, cutime, cstime are
     * fields 14 to 17. */
    unsigned long long ut, stt, cut, cst;
    if (sscanf(rest + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu %llu %llu", &ut,
               &stt, &cut, &cst) != 4)
        return t;
    t.own = ut + stt + cut + cst;
    t.ok = 1;
    return t;
}

void watch_start(struct watch *w)
{
    w->load_start = load1(w->start, sizeof w->start);
    w->tk0 = cpu_ticks();
    w->t0 = now_sec();
}

double watch_stop(struct watch *w)
{
    w->elapsed = now_sec() - w->t0;
    load1(w->end, sizeof w->end);
    w->tk1 = cpu_ticks();
    return w->elapsed;
}

void watch_report(const struct watch *w)
{
    printf("loadavg at start: %s; at end: %s (the end includes this run's own load)\n",
           w->start, w->end);
    if (!w->tk0.ok || !w->tk1.ok) {
        printf("(/proc/stat unreadable: CPU use by other processes unknown)\n");
        return;
    }
    double hz = (double)sysconf(_SC_CLK_TCK);
    double total = w->elapsed * hz * (double)sysconf(_SC_NPROCESSORS_ONLN);
    unsigned long long busy = w->tk1.busy - w->tk0.busy, own = w->tk1.own - w->tk0.own;
    double others = (double)(busy > own ? busy - own : 0) / total;
    double steal = (double)(w->tk1.steal - w->tk0.steal) / total;
    printf("during the run, other processes used %.1f%% of the CPUs; hypervisor steal %.1f%%\n",
           others * 100, steal * 100);
    if (!(w->load_start < 1.0 && others < 0.05 && steal < 0.05))
        printf("WARNING: the machine was not quiet (load at start >= 1.0, or others/steal "
               ">= 5%%): figures are not from a quiet machine\n");
}

void machine(char *buf, size_t cap)
{
    char model[256] = "?", line[512], os[128];
    FILE *f = fopen("/proc/cpuinfo", "r");
    while (f && fgets(line, sizeof line, f)) {
        if (!strncmp(line, "model name", 10)) {
            char *c = strchr(line, ':');
            if (c) {
                snprintf(model, sizeof model, "%s", c + 2);
                model[strcspn(model, "\n")] = 0;
            }
            break;
        }
    }
    if (f)
        fclose(f);
    read_trim("/proc/sys/kernel/osrelease", os, sizeof os);
    snprintf(buf, cap, "%ld CPUs (%s), Linux %s", sysconf(_SC_NPROCESSORS_ONLN), model, os);
}
