// floor: the least a client can do to receive the same streams, the floor
// the kernel allows for chunks per CPU-second. It opens STREAMS non-blocking
// connections to HOST:PORT, sends each the same streaming completions
// request, and waits on them with one epoll loop, reading with a 256 KiB
// buffer once per readiness (level-triggered, so no read to EAGAIN) and
// counting the SSE "data: {" lines (no HTTP parsing beyond that, no JSON,
// no timestamps). It prints the chunks and its own CPU time.
//
//   cc -O2 -o floor floor.c && ./floor 127.0.0.1 8000 100 256
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static const char pat[] = "data: {";
#define PATLEN (sizeof(pat) - 1)

struct conn {
	int fd;
	size_t sent, len;
	int matched; // bytes of pat matched at the end of the last read
	long chunks;
};

int main(int argc, char **argv) {
	if (argc < 5) {
		fprintf(stderr, "usage: %s HOST PORT STREAMS TOKENS\n", argv[0]);
		return 2;
	}
	const char *host = argv[1];
	int port = atoi(argv[2]), n = atoi(argv[3]), tokens = atoi(argv[4]);
	char body[512], req[1024];
	int blen = snprintf(body, sizeof body,
		"{\"model\":\"llmsim\",\"prompt\":\"a a a a a a a a a a a a a a a a\",\"max_tokens\":%d,"
		"\"temperature\":0.0,\"stream\":true,\"ignore_eos\":true}", tokens);
	int rlen = snprintf(req, sizeof req,
		"POST /v1/completions HTTP/1.1\r\nHost: %s:%d\r\nContent-Type: application/json\r\n"
		"Accept: text/event-stream\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s",
		host, port, blen, body);
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port)};
	if (inet_pton(AF_INET, host, &sa.sin_addr) != 1) {
		fprintf(stderr, "floor: %s: want an IPv4 address\n", host);
		return 2;
	}
	int ep = epoll_create1(EPOLL_CLOEXEC);
	struct conn *cs = calloc(n, sizeof *cs);
	for (int i = 0; i < n; i++) {
		int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
		int one = 1;
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
		if (connect(fd, (struct sockaddr *)&sa, sizeof sa) < 0 && errno != EINPROGRESS) {
			perror("floor: connect");
			return 1;
		}
		cs[i].fd = fd;
		cs[i].len = rlen;
		struct epoll_event ev = {.events = EPOLLIN | EPOLLOUT, .data.ptr = &cs[i]};
		epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev);
	}
	static char buf[256 << 10];
	struct epoll_event evs[256];
	int open = n;
	long chunks = 0, reads = 0, waits = 0;
	while (open > 0) {
		int k = epoll_wait(ep, evs, 256, -1);
		waits++;
		if (k < 0) {
			if (errno == EINTR)
				continue;
			perror("floor: epoll_wait");
			return 1;
		}
		for (int j = 0; j < k; j++) {
			struct conn *c = evs[j].data.ptr;
			if ((evs[j].events & EPOLLOUT) && c->sent < c->len) {
				ssize_t w = write(c->fd, req + c->sent, c->len - c->sent);
				if (w > 0)
					c->sent += w;
				if (c->sent == c->len) {
					struct epoll_event ev = {.events = EPOLLIN, .data.ptr = c};
					epoll_ctl(ep, EPOLL_CTL_MOD, c->fd, &ev);
				}
			}
			if (!(evs[j].events & (EPOLLIN | EPOLLHUP | EPOLLERR)))
				continue;
			for (;;) {
				ssize_t r = read(c->fd, buf, sizeof buf);
				if (r > 0) {
					reads++;
					// Count "data: {" across read boundaries.
					int m = c->matched;
					for (ssize_t i = 0; i < r; i++) {
						if (m == 0) {
							char *p = memchr(buf + i, 'd', r - i);
							if (!p)
								break;
							i = p - buf;
						}
						if (buf[i] == pat[m]) {
							if (++m == (int)PATLEN) {
								c->chunks++;
								m = 0;
							}
						} else {
							m = buf[i] == pat[0];
						}
					}
					c->matched = m;
					// Level-triggered: read again only if the buffer was
					// filled; otherwise epoll says when more comes.
					if (r == (ssize_t)sizeof buf)
						continue;
					break;
				}
				if (r < 0 && errno == EAGAIN)
					break;
				if (r < 0 && errno == EINTR)
					continue;
				close(c->fd);
				chunks += c->chunks;
				open--;
				break;
			}
		}
	}
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	double cpu = ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 + ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6;
	printf("floor: %ld chunks, %ld reads, %ld epoll waits, %.3f CPU-s, %.0f chunks/CPU-s\n",
	       chunks, reads, waits, cpu, cpu > 0 ? chunks / cpu : 0);
	return 0;
}
