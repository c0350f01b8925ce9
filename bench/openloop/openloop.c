/* hermes-openloop: an open-loop HTTP/1.1 load generator for the benchmark's fixed-rate latency.
 *
 * Sends POST requests at a constant rate from the start time over a fixed pool of keep-alive connections (one
 * request in flight on each) and measures every request's latency from its *scheduled* send time, so that a
 * request waiting for a free connection counts its wait (corrected for coordinated omission, as wrk2 does).
 * Single-threaded: non-blocking sockets, epoll, and a timerfd armed at the next scheduled send.
 *
 *   hermes-openloop -r RATE -d SECONDS -b BODY_FILE [-c CONNECTIONS] [-H 'Name: value']... [-t DRAIN_SECONDS]
 *                   http://127.0.0.1:PORT/path
 *
 * Prints one JSON object: target and achieved rate, sent/answered counts, answers by status, errors, and
 * latency percentiles (nearest rank, as hermes.bench.stats) in milliseconds; the generator's own CPU time per
 * request (getrusage). Exits 2 on bad arguments, 1 when it cannot connect or a run cannot complete.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#define MAX_HEADERS 32
#define READ_BUFFER 65536
#define TIMER_TAG UINT64_MAX

typedef struct {
    int fd;
    int busy;            /* a request is in flight */
    int want_out;        /* watching for EPOLLOUT: the request did not fit in the socket's buffer */
    size_t written;      /* bytes of the request written so far */
    size_t have;         /* bytes of the answer read so far */
    int64_t scheduled;   /* the in-flight request's scheduled time, ns */
    char buf[READ_BUFFER];
} conn_t;

static struct sockaddr_in address;
static char *request;
static size_t request_len;
static conn_t *conns;
static int nconns;
static int epfd;
static int in_flight;
static int64_t *latencies; /* ns, one per answered request */
static long answered, sent, errors, reconnects;
static long codes[600];
static int64_t last_answer;

static void die(int code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("hermes-openloop: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(code);
}

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static double number(const char *text, const char *what) {
    char *end;
    errno = 0;
    double value = strtod(text, &end);
    if (errno || end == text || *end || !(value > 0))
        die(2, "%s must be a positive number, got '%s'", what, text);
    return value;
}

/* Connects one socket (blocking: on the loopback this answers at once, and a refusal must stop the run with a
 * clear error rather than count as slow answers), then makes it non-blocking and watches it. */
static void connect_conn(conn_t *c) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        die(1, "socket: %s", strerror(errno));
    if (connect(fd, (struct sockaddr *)&address, sizeof address) < 0)
        die(1, "cannot connect to %s:%d: %s", inet_ntoa(address.sin_addr), ntohs(address.sin_port),
            strerror(errno));
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    struct epoll_event ev = {.events = EPOLLIN, .data.u64 = (uint64_t)(c - conns)};
    if (epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &ev) < 0)
        die(1, "epoll_ctl: %s", strerror(errno));
    c->fd = fd;
    c->busy = 0;
    c->want_out = 0;
    c->have = 0;
}

/* A broken connection: its request (if any) is an error, and a new connection takes its place. */
static void reset_conn(conn_t *c) {
    if (c->busy)
        errors++, in_flight--;
    close(c->fd);
    reconnects++;
    connect_conn(c);
}

static void want_write(conn_t *c, int on) {
    struct epoll_event ev = {.events = EPOLLIN | (on ? EPOLLOUT : 0), .data.u64 = (uint64_t)(c - conns)};
    epoll_ctl(epfd, EPOLL_CTL_MOD, c->fd, &ev);
    c->want_out = on;
}

/* Writes what is left of the request; usually all of it at once, with one write(). */
static void flush(conn_t *c) {
    while (c->written < request_len) {
        ssize_t n = write(c->fd, request + c->written, request_len - c->written);
        if (n < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK) {
                if (!c->want_out)
                    want_write(c, 1);
                return;
            }
            reset_conn(c);
            return;
        }
        c->written += (size_t)n;
    }
    if (c->want_out)
        want_write(c, 0);
}

static void start_request(conn_t *c, int64_t scheduled) {
    c->busy = 1;
    c->written = 0;
    c->have = 0;
    c->scheduled = scheduled;
    sent++;
    in_flight++;
    flush(c);
}

/* The length of a complete answer at the start of buf (head and body), 0 if incomplete, -1 if unparseable. On
 * success *status is its status code. Understands Content-Length and chunked bodies. */
static long parse_answer(const char *buf, size_t have, int *status) {
    const char *end = memmem(buf, have, "\r\n\r\n", 4);
    if (!end)
        return have >= READ_BUFFER ? -1 : 0;
    size_t head = (size_t)(end - buf) + 4;
    if (have < 12 || memcmp(buf, "HTTP/1.", 7) != 0)
        return -1;
    *status = atoi(buf + 9);
    if (*status < 100 || *status > 599)
        return -1;
    long length = -1;
    int chunked = 0;
    const char *line = buf;
    while ((line = memmem(line, (size_t)(end - line), "\r\n", 2)) != NULL) {
        line += 2; /* the start of the next header line */
        size_t rest = (size_t)(end - line);
        if (rest > 15 && strncasecmp(line, "content-length:", 15) == 0)
            length = strtol(line + 15, NULL, 10);
        else if (rest > 18 && strncasecmp(line, "transfer-encoding:", 18) == 0) {
            const char *eol = memmem(line, rest, "\r\n", 2);
            chunked = memmem(line, eol ? (size_t)(eol - line) : rest, "chunked", 7) != NULL;
        }
    }
    if (*status == 204 || *status == 304 || (*status >= 100 && *status < 200))
        length = 0;
    if (!chunked) {
        if (length < 0)
            return -1; /* a body delimited by closing the connection: not keep-alive */
        return head + (size_t)length <= have ? (long)(head + (size_t)length) : (head + (size_t)length > READ_BUFFER ? -1 : 0);
    }
    size_t at = head;
    for (;;) {
        const char *eol = memmem(buf + at, have - at, "\r\n", 2);
        if (!eol)
            return 0;
        long size = strtol(buf + at, NULL, 16);
        at = (size_t)(eol - buf) + 2;
        if (size == 0) { /* no trailers expected: the last chunk ends with an empty line */
            return at + 2 <= have ? (long)(at + 2) : 0;
        }
        at += (size_t)size + 2;
        if (at > have)
            return at > READ_BUFFER ? -1 : 0;
    }
}

static void on_readable(conn_t *c) {
    for (;;) {
        ssize_t n = read(c->fd, c->buf + c->have, READ_BUFFER - c->have);
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return;
        if (n <= 0) { /* closed (or failed): an idle keep-alive connection the server dropped, or a lost answer */
            reset_conn(c);
            return;
        }
        c->have += (size_t)n;
        int status = 0;
        long length = parse_answer(c->buf, c->have, &status);
        if (length == 0)
            continue;
        if (length < 0 || !c->busy || (size_t)length != c->have) {
            reset_conn(c); /* unparseable, unasked for, or more than one answer */
            return;
        }
        int64_t at = now_ns();
        latencies[answered++] = at - c->scheduled;
        codes[status]++;
        last_answer = at;
        c->busy = 0;
        c->have = 0;
        in_flight--;
        return;
    }
}

static int by_value(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

static double percentile_ms(double q) {
    if (answered == 0)
        return 0.0;
    long rank = (long)(q * (double)answered);
    if ((double)rank < q * (double)answered)
        rank++;
    if (rank < 1)
        rank = 1;
    if (rank > answered)
        rank = answered;
    return (double)latencies[rank - 1] / 1e6;
}

static void usage(void) {
    die(2, "usage: hermes-openloop -r RATE -d SECONDS -b BODY_FILE [-c CONNECTIONS] [-H 'Name: value']... "
           "[-t DRAIN_SECONDS] http://127.0.0.1:PORT/path");
}

int main(int argc, char **argv) {
    double rate = 0, seconds = 0, drain = 10;
    const char *body_file = NULL, *headers[MAX_HEADERS];
    int nheaders = 0, opt;
    nconns = 64;
    while ((opt = getopt(argc, argv, "r:d:b:c:H:t:")) != -1) {
        switch (opt) {
        case 'r': rate = number(optarg, "-r (rate, requests/s)"); break;
        case 'd': seconds = number(optarg, "-d (seconds)"); break;
        case 't': drain = number(optarg, "-t (drain seconds)"); break;
        case 'b': body_file = optarg; break;
        case 'c': {
            double n = number(optarg, "-c (connections)");
            if (n != (int)n || n > 10000)
                die(2, "-c (connections) must be a whole number from 1 to 10000, got '%s'", optarg);
            nconns = (int)n;
            break;
        }
        case 'H':
            if (nheaders == MAX_HEADERS)
                die(2, "at most %d headers (-H)", MAX_HEADERS);
            if (!strchr(optarg, ':') || strpbrk(optarg, "\r\n"))
                die(2, "-H must be 'Name: value' on one line, got '%s'", optarg);
            headers[nheaders++] = optarg;
            break;
        default: usage();
        }
    }
    if (optind != argc - 1 || rate == 0 || seconds == 0 || !body_file)
        usage();

    /* the URL: http://IPv4:PORT/path (the loopback the benchmark runs on; no name resolution) */
    const char *url = argv[optind];
    if (strncmp(url, "http://", 7) != 0)
        die(2, "the URL must start with http://, got '%s'", url);
    const char *host = url + 7, *colon = strchr(host, ':'), *path = strchr(host, '/');
    if (!colon || !path || colon > path)
        die(2, "the URL must be http://IPV4:PORT/path, got '%s'", url);
    char ip[64], hostport[128];
    size_t iplen = (size_t)(colon - host);
    if (iplen >= sizeof ip || (size_t)(path - host) >= sizeof hostport)
        die(2, "the URL's host is too long: '%s'", url);
    memcpy(ip, host, iplen), ip[iplen] = 0;
    memcpy(hostport, host, (size_t)(path - host)), hostport[path - host] = 0;
    char *end;
    long port = strtol(colon + 1, &end, 10);
    address.sin_family = AF_INET;
    if (end != path || port < 1 || port > 65535 || inet_pton(AF_INET, ip, &address.sin_addr) != 1)
        die(2, "the URL must be http://IPV4:PORT/path with a numeric IPv4 address and port, got '%s'", url);
    address.sin_port = htons((uint16_t)port);

    /* the request, built once */
    FILE *f = fopen(body_file, "rb");
    if (!f)
        die(2, "cannot read the body file '%s': %s", body_file, strerror(errno));
    struct stat st;
    fstat(fileno(f), &st);
    size_t body_len = (size_t)st.st_size, head_cap = 1024 + strlen(path) + strlen(hostport);
    for (int i = 0; i < nheaders; i++)
        head_cap += strlen(headers[i]) + 2;
    request = malloc(head_cap + body_len);
    int head = snprintf(request, head_cap, "POST %s HTTP/1.1\r\nHost: %s\r\nContent-Length: %zu\r\n", path,
                        hostport, body_len);
    for (int i = 0; i < nheaders; i++)
        head += snprintf(request + head, head_cap - (size_t)head, "%s\r\n", headers[i]);
    head += snprintf(request + head, head_cap - (size_t)head, "\r\n");
    if (fread(request + head, 1, body_len, f) != body_len)
        die(2, "cannot read the body file '%s'", body_file);
    fclose(f);
    request_len = (size_t)head + body_len;

    double total_d = rate * seconds;
    if (total_d < 1 || total_d > 1e9)
        die(2, "RATE x SECONDS must make 1 to 10^9 requests, got %.0f", total_d);
    long total = (long)total_d;
    latencies = malloc(sizeof *latencies * (size_t)total);
    conns = calloc((size_t)nconns, sizeof *conns);
    epfd = epoll_create1(EPOLL_CLOEXEC);
    int tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    if (!latencies || !conns || !request || epfd < 0 || tfd < 0)
        die(1, "out of memory or descriptors");
    struct epoll_event tev = {.events = EPOLLIN, .data.u64 = TIMER_TAG};
    epoll_ctl(epfd, EPOLL_CTL_ADD, tfd, &tev);
    for (int i = 0; i < nconns; i++)
        connect_conn(&conns[i]);

    /* request i is due at start + i / rate; the due ones go out in order as connections come free */
    double interval = 1e9 / rate;
    int64_t start = now_ns() + 10000000; /* 10 ms to settle */
    /* the run ends when every request is answered, or DRAIN_SECONDS after the last one was due */
    int64_t deadline = start + (int64_t)((seconds + drain) * 1e9), armed = 0;
    long next = 0;
    int free_hint = 0;
    struct epoll_event events[256];
    for (;;) {
        int64_t now = now_ns();
        while (next < total && start + (int64_t)((double)next * interval) <= now && in_flight < nconns) {
            while (conns[free_hint].busy)
                free_hint = (free_hint + 1) % nconns;
            start_request(&conns[free_hint], start + (int64_t)((double)next * interval));
            next++;
        }
        if ((next == total && in_flight == 0) || now > deadline)
            break;
        int64_t due = start + (int64_t)((double)next * interval);
        if (next < total && in_flight < nconns && due != armed) { /* wake at the next due time (or an answer) */
            struct itimerspec t = {.it_value = {.tv_sec = due / 1000000000, .tv_nsec = due % 1000000000}};
            timerfd_settime(tfd, TFD_TIMER_ABSTIME, &t, NULL);
            armed = due;
        }
        int n = epoll_wait(epfd, events, 256, 100);
        if (n < 0 && errno != EINTR)
            die(1, "epoll_wait: %s", strerror(errno));
        for (int i = 0; i < n; i++) {
            if (events[i].data.u64 == TIMER_TAG) {
                uint64_t expirations;
                if (read(tfd, &expirations, sizeof expirations) < 0 && errno != EAGAIN)
                    die(1, "timerfd: %s", strerror(errno));
                continue;
            }
            conn_t *c = &conns[events[i].data.u64];
            int was_busy = c->busy;
            if (events[i].events & EPOLLOUT)
                flush(c);
            if (events[i].events & (EPOLLIN | EPOLLERR | EPOLLHUP))
                on_readable(c);
            if (was_busy && !c->busy)
                free_hint = (int)events[i].data.u64;
        }
    }

    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    double cpu = (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
                 (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
    qsort(latencies, (size_t)answered, sizeof *latencies, by_value);
    double span = (double)(last_answer - start) / 1e9;
    printf("{\"target_rate\": %.1f, \"seconds\": %.3f, \"connections\": %d, \"scheduled\": %ld, \"sent\": %ld, "
           "\"answered\": %ld, \"unanswered\": %ld, \"errors\": %ld, \"reconnects\": %ld, \"throughput\": %.1f, "
           "\"codes\": {",
           rate, seconds, nconns, total, sent, answered, total - answered - errors, errors, reconnects,
           answered && span > 0 ? (double)answered / span : 0.0);
    const char *sep = "";
    for (int s = 100; s < 600; s++)
        if (codes[s])
            printf("%s\"%d\": %ld", sep, s, codes[s]), sep = ", ";
    printf("}, \"latency_ms\": {\"p50\": %.3f, \"p90\": %.3f, \"p99\": %.3f, \"p999\": %.3f, \"max\": %.3f}, "
           "\"cpu_us_per_request\": %.2f}\n",
           percentile_ms(0.5), percentile_ms(0.9), percentile_ms(0.99), percentile_ms(0.999),
           answered ? (double)latencies[answered - 1] / 1e6 : 0.0, sent ? cpu / (double)sent * 1e6 : 0.0);
    return 0;
}
