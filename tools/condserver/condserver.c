/*
 * condserver: a minimal streaming completions server whose sender waits on
 * a condition variable with a timeout, as llama.cpp's llama-server does.
 *
 * One producer thread (the engine's decode loop) computes a token for
 * every active request per step: W µs of CPU time in a busy loop (thread
 * CPU time, so a starved producer takes longer), then hands the tokens
 * over under a mutex and signals each request's condition variable. Each
 * connection has its own thread (the sender): it waits for its request's
 * next tokens with pthread_cond_timedwait (T ms timeout; on a timeout it
 * checks that the client is still there, then waits again) and writes
 * them as server-sent events. With -n the producer never signals: the
 * senders poll, each wait ending by its timeout (a polling loop).
 *
 *   condserver [-p PORT] [-w WORK_US] [-t TIMEOUT_MS] [-n] [-c CPU] [-a CPU] [-m MODEL]
 *
 *   -p  port to listen on, 127.0.0.1 (0: any free one; default 0)
 *   -w  CPU time per step, µs (default 3000)
 *   -t  the sender's wait timeout, ms (default 1000)
 *   -n  the producer does not signal (the senders poll every -t ms)
 *   -c  pin the producer to this CPU (default: not pinned)
 *   -a  pin the main and the connection threads to this CPU (default: not)
 *   -m  the model name (default "condserver")
 *
 * Prints "condserver: listening on PORT pid=P" on stdout once it accepts
 * connections. HTTP/1.1 with keep-alive; POST /v1/completions (a prompt,
 * "max_tokens", "stream": true answers text/event-stream chunks `data:
 * {...}` then `data: [DONE]`, in chunked transfer encoding; otherwise one
 * JSON body), GET /v1/models, GET /health. A client that goes away is
 * noticed at the next write or the next timeout, and its request leaves
 * the batch. SIGTERM or SIGINT end it.
 *
 * Build: gcc -O2 -Wall -Wextra -pthread -o condserver condserver.c
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static long work_us = 3000;
static long timeout_ms = 1000;
static int no_signal;
static int producer_cpu = -1, conn_cpu = -1;
static const char *model = "condserver";

/* A request in the batch. The sender owns it; while it is in the batch
 * (active), the producer adds tokens to it under mu. */
struct request {
	struct request *next; /* in the batch */
	pthread_cond_t ready;
	int max_tokens;
	int produced; /* tokens computed, under mu */
	int active;   /* in the batch, under mu */
};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t work = PTHREAD_COND_INITIALIZER; /* the batch is not empty */
static struct request *batch;
static _Atomic unsigned long next_id;
static volatile double sink;

static void pin(int cpu)
{
	if (cpu < 0)
		return;
	cpu_set_t set;
	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	int err = pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
	if (err)
		fprintf(stderr, "condserver: pinning to CPU %d: %s\n", cpu, strerror(err));
}

static int64_t thread_cpu_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* compute burns us µs of this thread's CPU time. */
static void compute(long us)
{
	int64_t end = thread_cpu_ns() + (int64_t)us * 1000;
	double x = sink;
	do {
		for (int i = 0; i < 2000; i++)
			x = x * 1.0000001 + 0.5;
	} while (thread_cpu_ns() < end);
	sink = x;
}

/* unlink_locked takes r out of the batch (mu held). */
static void unlink_locked(struct request *r)
{
	for (struct request **p = &batch; *p; p = &(*p)->next) {
		if (*p == r) {
			*p = r->next;
			break;
		}
	}
	r->next = NULL;
	r->active = 0;
}

static void *producer(void *arg)
{
	(void)arg;
	pin(producer_cpu);
	pthread_setname_np(pthread_self(), "producer");
	for (;;) {
		pthread_mutex_lock(&mu);
		while (!batch)
			pthread_cond_wait(&work, &mu);
		pthread_mutex_unlock(&mu);
		compute(work_us); /* one decode step for the whole batch */
		pthread_mutex_lock(&mu);
		for (struct request *r = batch, *next; r; r = next) {
			next = r->next;
			r->produced++;
			if (r->produced >= r->max_tokens)
				unlink_locked(r);
			if (!no_signal)
				pthread_cond_signal(&r->ready);
		}
		pthread_mutex_unlock(&mu);
	}
	return NULL;
}

/* write_all writes the whole buffer; -1 when the peer is gone. */
static int write_all(int fd, const char *b, size_t n)
{
	while (n > 0) {
		ssize_t w = send(fd, b, n, MSG_NOSIGNAL);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return -1;
		b += w;
		n -= (size_t)w;
	}
	return 0;
}

/* peer_gone says whether the client closed its end (or reset it). */
static int peer_gone(int fd)
{
	char c;
	ssize_t n = recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
	return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

/* A growing buffer. */
struct buf {
	char *b;
	size_t n, cap;
};

static int bufgrow(struct buf *b, size_t more)
{
	if (b->n + more <= b->cap)
		return 0;
	size_t cap = b->cap ? b->cap : 1024;
	while (cap < b->n + more)
		cap *= 2;
	char *nb = realloc(b->b, cap);
	if (!nb)
		return -1;
	b->b = nb;
	b->cap = cap;
	return 0;
}

static int bufadd(struct buf *b, const char *s, size_t n)
{
	if (bufgrow(b, n))
		return -1;
	memcpy(b->b + b->n, s, n);
	b->n += n;
	return 0;
}

static int bufprintf(struct buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int bufprintf(struct buf *b, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(NULL, 0, fmt, ap);
	va_end(ap);
	if (n < 0 || bufgrow(b, (size_t)n + 1))
		return -1;
	va_start(ap, fmt);
	vsnprintf(b->b + b->n, (size_t)n + 1, fmt, ap);
	va_end(ap);
	b->n += (size_t)n;
	return 0;
}

/* send_chunk writes data as one HTTP chunk, in one write. */
static int send_chunk(int fd, struct buf *tmp, const char *data, size_t n)
{
	tmp->n = 0;
	if (bufprintf(tmp, "%zx\r\n", n) || bufadd(tmp, data, n) || bufadd(tmp, "\r\n", 2))
		return -1;
	return write_all(fd, tmp->b, tmp->n);
}

static int respond(int fd, int status, const char *reason, const char *body, int keep)
{
	char head[256];
	int n = snprintf(head, sizeof(head),
			 "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %zu\r\nConnection: %s\r\n\r\n",
			 status, reason, strlen(body), keep ? "keep-alive" : "close");
	if (write_all(fd, head, (size_t)n))
		return -1;
	return write_all(fd, body, strlen(body));
}

static const char *words[] = {"the", "of", "and", "to", "in", "is", "was", "for", "on", "are", "with", "as"};

/* json_int finds "key": N in body. */
static int json_int(const char *body, const char *key, int def)
{
	const char *p = strstr(body, key);
	if (!p)
		return def;
	p += strlen(key);
	while (*p == '"' || *p == ' ' || *p == ':' || *p == '\t')
		p++;
	if (*p < '0' || *p > '9')
		return def;
	return atoi(p);
}

/* json_true says whether "key": true is in body. */
static int json_true(const char *body, const char *key)
{
	const char *p = strstr(body, key);
	if (!p)
		return 0;
	p += strlen(key);
	while (*p == '"' || *p == ' ' || *p == ':' || *p == '\t')
		p++;
	return strncmp(p, "true", 4) == 0;
}

/* complete generates one request's tokens; 0 when the connection can go
 * on, -1 when the client is gone. */
static int complete(int fd, const char *body, int keep)
{
	struct request r = {.max_tokens = json_int(body, "\"max_tokens\"", 16)};
	int stream = json_true(body, "\"stream\"");
	unsigned long id = atomic_fetch_add(&next_id, 1);
	if (r.max_tokens < 1)
		return respond(fd, 400, "Bad Request", "{\"error\":{\"message\":\"max_tokens must be at least 1\",\"type\":\"invalid_request_error\",\"code\":400}}", keep);
	if (r.max_tokens > 100000)
		r.max_tokens = 100000;
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&r.ready, &ca);
	pthread_condattr_destroy(&ca);

	struct buf out = {0}, tmp = {0};
	int rc = 0;
	if (stream) {
		char head[256];
		int n = snprintf(head, sizeof(head),
				 "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
				 "Transfer-Encoding: chunked\r\nConnection: %s\r\n\r\n",
				 keep ? "keep-alive" : "close");
		rc = write_all(fd, head, (size_t)n);
	}
	pthread_mutex_lock(&mu);
	r.active = 1;
	r.next = batch;
	batch = &r;
	pthread_cond_signal(&work);
	int sent = 0;
	while (rc == 0 && sent < r.max_tokens) {
		while (r.produced == sent) {
			struct timespec ts;
			clock_gettime(CLOCK_MONOTONIC, &ts);
			ts.tv_sec += timeout_ms / 1000;
			ts.tv_nsec += (timeout_ms % 1000) * 1000000;
			if (ts.tv_nsec >= 1000000000) {
				ts.tv_sec++;
				ts.tv_nsec -= 1000000000;
			}
			if (pthread_cond_timedwait(&r.ready, &mu, &ts) == ETIMEDOUT && r.produced == sent) {
				/* As llama-server does: on a timeout, see that the
				 * client is still there. */
				pthread_mutex_unlock(&mu);
				int gone = peer_gone(fd);
				pthread_mutex_lock(&mu);
				if (gone) {
					rc = -1;
					break;
				}
			}
		}
		if (rc)
			break;
		int upto = r.produced;
		pthread_mutex_unlock(&mu);
		/* Everything produced since the last write: one write. */
		if (stream)
			out.n = 0;
		for (; sent < upto && rc == 0; sent++) {
			const char *w = words[sent % (sizeof(words) / sizeof(words[0]))];
			const char *fin = sent + 1 == r.max_tokens ? "\"length\"" : "null";
			if (stream)
				rc = bufprintf(&out, "data: {\"id\":\"cmpl-%lu\",\"object\":\"text_completion\",\"created\":0,\"model\":\"%s\","
						     "\"choices\":[{\"index\":0,\"text\":\" %s\",\"logprobs\":null,\"finish_reason\":%s}]}\n\n",
					       id, model, w, fin);
			else
				rc = bufprintf(&out, " %s", w);
		}
		if (rc == 0 && stream && sent == r.max_tokens)
			rc = bufadd(&out, "data: [DONE]\n\n", 14);
		if (rc == 0 && stream)
			rc = send_chunk(fd, &tmp, out.b, out.n);
		pthread_mutex_lock(&mu);
	}
	if (r.active)
		unlink_locked(&r); /* the client went away: out of the batch */
	pthread_mutex_unlock(&mu);
	if (rc == 0) {
		if (stream) {
			rc = write_all(fd, "0\r\n\r\n", 5);
		} else {
			tmp.n = 0;
			if (bufprintf(&tmp, "{\"id\":\"cmpl-%lu\",\"object\":\"text_completion\",\"created\":0,\"model\":\"%s\","
					    "\"choices\":[{\"index\":0,\"text\":\"%.*s\",\"logprobs\":null,\"finish_reason\":\"length\"}],"
					    "\"usage\":{\"prompt_tokens\":1,\"completion_tokens\":%d,\"total_tokens\":%d}}",
				      id, model, (int)out.n, out.b ? out.b : "", r.max_tokens, r.max_tokens + 1) == 0) {
				char *body_copy = strndup(tmp.b, tmp.n);
				rc = body_copy ? respond(fd, 200, "OK", body_copy, keep) : -1;
				free(body_copy);
			} else {
				rc = -1;
			}
		}
	}
	pthread_cond_destroy(&r.ready);
	free(out.b);
	free(tmp.b);
	return rc;
}

/* serve handles one connection's requests, one after the other. */
static void *serve(void *arg)
{
	int fd = (int)(intptr_t)arg;
	pin(conn_cpu);
	pthread_setname_np(pthread_self(), "sender");
	int one = 1;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	struct buf in = {0};
	for (;;) {
		/* The head. */
		char *end = NULL;
		while (!(in.n > 0 && (end = memmem(in.b, in.n, "\r\n\r\n", 4)))) {
			if (in.n > 65536 || bufgrow(&in, 4096))
				goto out;
			ssize_t n = recv(fd, in.b + in.n, in.cap - in.n, 0);
			if (n < 0 && errno == EINTR)
				continue;
			if (n <= 0)
				goto out;
			in.n += (size_t)n;
		}
		size_t headlen = (size_t)(end - in.b) + 4;
		in.b[headlen - 2] = '\0'; /* the head as a string, its last CRLF kept */
		char method[16] = "", path[256] = "";
		if (sscanf(in.b, "%15s %255s", method, path) != 2)
			goto out;
		size_t clen = 0;
		int keep = 1;
		for (char *l = strstr(in.b, "\r\n"); l && l[2]; l = strstr(l + 2, "\r\n")) {
			char *h = l + 2;
			if (strncasecmp(h, "Content-Length:", 15) == 0)
				clen = strtoul(h + 15, NULL, 10);
			else if (strncasecmp(h, "Connection:", 11) == 0 && strncasecmp(h + 11 + strspn(h + 11, " "), "close", 5) == 0)
				keep = 0;
		}
		if (clen > 16 << 20)
			goto out;
		/* The body. */
		while (in.n < headlen + clen) {
			if (bufgrow(&in, headlen + clen - in.n))
				goto out;
			ssize_t n = recv(fd, in.b + in.n, in.cap - in.n, 0);
			if (n < 0 && errno == EINTR)
				continue;
			if (n <= 0)
				goto out;
			in.n += (size_t)n;
		}
		char *body = strndup(in.b + headlen, clen);
		if (!body)
			goto out;
		int rc;
		if (strcmp(method, "POST") == 0 && strcmp(path, "/v1/completions") == 0) {
			rc = complete(fd, body, keep);
		} else if (strcmp(method, "GET") == 0 && strcmp(path, "/v1/models") == 0) {
			char models[512];
			snprintf(models, sizeof(models),
				 "{\"object\":\"list\",\"data\":[{\"id\":\"%s\",\"object\":\"model\",\"created\":0,\"owned_by\":\"condserver\",\"max_model_len\":100000}]}",
				 model);
			rc = respond(fd, 200, "OK", models, keep);
		} else if (strcmp(method, "GET") == 0 && strcmp(path, "/health") == 0) {
			rc = respond(fd, 200, "OK", "{\"status\":\"ok\"}", keep);
		} else {
			rc = respond(fd, 404, "Not Found", "{\"error\":{\"message\":\"not found\",\"code\":404}}", keep);
		}
		free(body);
		if (rc || !keep)
			goto out;
		/* What came after this request (pipelined) stays. */
		memmove(in.b, in.b + headlen + clen, in.n - headlen - clen);
		in.n -= headlen + clen;
	}
out:
	free(in.b);
	close(fd);
	return NULL;
}

int main(int argc, char **argv)
{
	int port = 0, opt;
	while ((opt = getopt(argc, argv, "p:w:t:nc:a:m:")) != -1) {
		switch (opt) {
		case 'p': port = atoi(optarg); break;
		case 'w': work_us = atol(optarg); break;
		case 't': timeout_ms = atol(optarg); break;
		case 'n': no_signal = 1; break;
		case 'c': producer_cpu = atoi(optarg); break;
		case 'a': conn_cpu = atoi(optarg); break;
		case 'm': model = optarg; break;
		default:
			fprintf(stderr, "usage: condserver [-p PORT] [-w WORK_US] [-t TIMEOUT_MS] [-n] [-c CPU] [-a CPU] [-m MODEL]\n");
			return 2;
		}
	}
	if (work_us < 1 || timeout_ms < 1) {
		fprintf(stderr, "condserver: -w and -t must be positive\n");
		return 2;
	}
	pin(conn_cpu);
	signal(SIGPIPE, SIG_IGN);
	int ls = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (ls < 0) {
		perror("condserver: socket");
		return 1;
	}
	int one = 1;
	setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port), .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t alen = sizeof(a);
	if (bind(ls, (struct sockaddr *)&a, sizeof(a)) || listen(ls, 128) || getsockname(ls, (struct sockaddr *)&a, &alen)) {
		perror("condserver: listen");
		return 1;
	}
	pthread_t pt;
	if (pthread_create(&pt, NULL, producer, NULL)) {
		fprintf(stderr, "condserver: starting the producer failed\n");
		return 1;
	}
	pthread_attr_t attr;
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	printf("condserver: listening on %d pid=%d\n", ntohs(a.sin_port), (int)getpid());
	fflush(stdout);
	for (;;) {
		int fd = accept4(ls, NULL, NULL, SOCK_CLOEXEC);
		if (fd < 0) {
			if (errno == EINTR || errno == ECONNABORTED || errno == EMFILE || errno == ENFILE) {
				if (errno == EMFILE || errno == ENFILE)
					usleep(10000);
				continue;
			}
			perror("condserver: accept");
			return 1;
		}
		pthread_t th;
		if (pthread_create(&th, &attr, serve, (void *)(intptr_t)fd)) {
			close(fd);
			continue;
		}
	}
}
