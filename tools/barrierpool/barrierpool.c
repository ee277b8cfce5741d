/*
 * barrierpool: a thread pool that steps like llama.cpp/ggml's CPU backend.
 *
 * N worker threads run steps. In a step every thread does W µs of real
 * arithmetic (a loop calibrated once at start, not a clock spin), then meets
 * the others at a barrier: it spins (atomic loads and `pause`) for up to S µs
 * and then sleeps in futex_wait until the last thread arrives, which wakes
 * it. Every step therefore has up to N scheduler events per thread (a futex
 * sleep and its wakeup), and a step is as slow as its slowest thread: any
 * delay of one thread (a preemption, a late wakeup, a probe) stalls all.
 *
 *   barrierpool [-t N] [-w W_US] [-s S_US] [-d SECONDS] [-W]
 *
 * Prints "barrierpool: ready pid=P" on stderr once calibrated; with -W it
 * then waits for SIGUSR1 before it starts (attach an observer in between).
 * After D seconds of steps it prints one JSON line on stdout:
 *   {"threads":N,"steps":..,"seconds":..,"steps_per_second":..,...}
 * and, with -W, waits for a second SIGUSR1 before it exits, so that an
 * observer can be read and stopped while its target still exists.
 *
 * Build: gcc -O2 -pthread -o barrierpool barrierpool.c
 */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#if defined(__x86_64__) || defined(__i386__)
#define cpu_relax() __builtin_ia32_pause()
#elif defined(__aarch64__)
#define cpu_relax() __asm__ __volatile__("yield" ::: "memory")
#else
#define cpu_relax() __asm__ __volatile__("" ::: "memory")
#endif

static int nthreads = 2;
static double work_us = 200, spin_us = 50, duration_s = 5;
static int wait_start;

/* Loop iterations of work() per µs, from calibrate(). */
static double iters_per_us;

/* The barrier: arrivals of this step, the generation (the futex word) and
 * the number of threads asleep on it. The last arrival of a step sets done
 * when the run is over, before it bumps the generation, so that every
 * thread leaves after the same step. */
static _Atomic int arrived;
static _Atomic uint32_t generation;
static _Atomic int sleepers;
static _Atomic int stop_requested;
static _Atomic int done;
static uint64_t steps; /* written by the last arrival only */

/* Per-thread counters, summed at the end. */
struct worker {
	pthread_t th;
	int id;
	uint64_t futex_waits, spin_exits;
	double sink;
} __attribute__((aligned(64)));

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Floating point and integer arithmetic with a loop-carried dependency, so
 * the compiler can neither drop nor vectorize it away. */
static double __attribute__((noinline)) work(uint64_t iters, double seed)
{
	double x = seed, y = 1.000001;
	uint64_t r = (uint64_t)(seed * 1e6) | 1;
	for (uint64_t i = 0; i < iters; i++) {
		x = x * y + 1e-9;
		r ^= r << 13;
		r ^= r >> 7;
		r ^= r << 17;
		if (x > 2.0)
			x -= (double)(r & 0xff) * 1e-12 + 1.0;
	}
	return x + (double)(r & 1);
}

/* The fastest of several timed runs: preemption only ever adds time. */
static void calibrate(void)
{
	uint64_t iters = 1 << 16, best = UINT64_MAX;
	volatile double sink = 0;
	for (;;) { /* grow until one run takes >= 2 ms */
		uint64_t t0 = now_ns();
		sink += work(iters, 1.5);
		uint64_t dt = now_ns() - t0;
		if (dt >= 2000000)
			break;
		iters *= 2;
	}
	for (int i = 0; i < 10; i++) {
		uint64_t t0 = now_ns();
		sink += work(iters, 1.5 + i * 1e-3);
		uint64_t dt = now_ns() - t0;
		if (dt < best)
			best = dt;
	}
	iters_per_us = (double)iters / ((double)best / 1000.0);
	(void)sink;
}

static long futex(_Atomic uint32_t *uaddr, int op, uint32_t val)
{
	return syscall(SYS_futex, (uint32_t *)uaddr, op, val, NULL, NULL, 0);
}

/* Returns when all nthreads threads have called it for this step. */
static void barrier(struct worker *w)
{
	uint32_t gen = atomic_load(&generation);
	if (atomic_fetch_add(&arrived, 1) + 1 == nthreads) {
		atomic_store(&arrived, 0);
		steps++;
		if (atomic_load(&stop_requested))
			atomic_store(&done, 1);
		atomic_store(&generation, gen + 1);
		if (atomic_load(&sleepers) > 0)
			futex(&generation, FUTEX_WAKE_PRIVATE, INT_MAX);
		return;
	}
	uint64_t limit = (uint64_t)(spin_us * 1000.0);
	uint64_t t0 = now_ns();
	for (unsigned n = 1;; n++) {
		if (atomic_load_explicit(&generation, memory_order_acquire) != gen) {
			w->spin_exits++;
			return;
		}
		cpu_relax();
		if ((n & 63) == 0 && now_ns() - t0 >= limit)
			break;
	}
	atomic_fetch_add(&sleepers, 1);
	while (atomic_load(&generation) == gen) {
		w->futex_waits++;
		futex(&generation, FUTEX_WAIT_PRIVATE, gen);
	}
	atomic_fetch_sub(&sleepers, 1);
}

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	uint64_t iters = (uint64_t)(work_us * iters_per_us);
	double seed = 1.25 + w->id * 1e-3;
	while (!atomic_load(&done)) {
		if (iters)
			seed = work(iters, seed) * 1e-3 + 1.25;
		barrier(w);
	}
	w->sink = seed;
	return NULL;
}

static void usage(FILE *f)
{
	fprintf(f, "usage: barrierpool [-t THREADS] [-w WORK_US] [-s SPIN_US] "
	           "[-d SECONDS] [-W]\n"
	           "  -t  worker threads (default 2)\n"
	           "  -w  compute per thread per step, µs (default 200)\n"
	           "  -s  spin at the barrier before futex_wait, µs (default 50)\n"
	           "  -d  run this long, seconds (default 5)\n"
	           "  -W  after \"barrierpool: ready pid=P\" on stderr, wait for "
	           "SIGUSR1;\n"
	           "      after the JSON, wait for another before exiting\n");
}

static double num(const char *s, const char *flag)
{
	char *end;
	errno = 0;
	double v = strtod(s, &end);
	if (errno || end == s || *end || v < 0) {
		fprintf(stderr, "barrierpool: bad %s %s\n", flag, s);
		exit(2);
	}
	return v;
}

int main(int argc, char **argv)
{
	int c;
	while ((c = getopt(argc, argv, "t:w:s:d:Wh")) != -1) {
		switch (c) {
		case 't':
			nthreads = (int)num(optarg, "-t");
			break;
		case 'w':
			work_us = num(optarg, "-w");
			break;
		case 's':
			spin_us = num(optarg, "-s");
			break;
		case 'd':
			duration_s = num(optarg, "-d");
			break;
		case 'W':
			wait_start = 1;
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (optind != argc || nthreads < 1 || nthreads > 1024) {
		usage(stderr);
		return 2;
	}

	sigset_t usr1;
	sigemptyset(&usr1);
	sigaddset(&usr1, SIGUSR1);
	/* Blocked before any thread exists, so every thread inherits it and
	 * only sigwait below takes the signal. */
	pthread_sigmask(SIG_BLOCK, &usr1, NULL);

	calibrate();
	fprintf(stderr, "barrierpool: ready pid=%d\n", (int)getpid());
	if (wait_start) {
		int sig;
		sigwait(&usr1, &sig);
	}

	struct worker *ws = calloc((size_t)nthreads, sizeof *ws);
	if (!ws) {
		perror("barrierpool: calloc");
		return 1;
	}
	uint64_t t0 = now_ns();
	for (int i = 0; i < nthreads; i++) {
		ws[i].id = i;
		int err = pthread_create(&ws[i].th, NULL, worker_main, &ws[i]);
		if (err) {
			fprintf(stderr, "barrierpool: pthread_create: %s\n",
			        strerror(err));
			return 1;
		}
	}
	struct timespec until;
	clock_gettime(CLOCK_MONOTONIC, &until);
	uint64_t end_ns = (uint64_t)until.tv_sec * 1000000000ull +
	                  (uint64_t)until.tv_nsec +
	                  (uint64_t)(duration_s * 1e9);
	until.tv_sec = (time_t)(end_ns / 1000000000ull);
	until.tv_nsec = (long)(end_ns % 1000000000ull);
	while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &until, NULL) ==
	       EINTR)
		;
	atomic_store(&stop_requested, 1);
	uint64_t futex_waits = 0, spin_exits = 0;
	for (int i = 0; i < nthreads; i++) {
		pthread_join(ws[i].th, NULL);
		futex_waits += ws[i].futex_waits;
		spin_exits += ws[i].spin_exits;
	}
	double secs = (double)(now_ns() - t0) / 1e9;
	printf("{\"threads\":%d,\"steps\":%llu,\"seconds\":%.6f,"
	       "\"steps_per_second\":%.3f,\"work_us\":%g,\"spin_us\":%g,"
	       "\"iters_per_us\":%.2f,\"futex_waits\":%llu,\"spin_exits\":%llu,"
	       "\"pid\":%d}\n",
	       nthreads, (unsigned long long)steps, secs,
	       secs > 0 ? (double)steps / secs : 0.0, work_us, spin_us,
	       iters_per_us, (unsigned long long)futex_waits,
	       (unsigned long long)spin_exits, (int)getpid());
	fflush(stdout);
	free(ws);
	if (wait_start) {
		int sig;
		sigwait(&usr1, &sig);
	}
	return 0;
}
