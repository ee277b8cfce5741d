/*
 * launchloop: a decode-like loop on the CUDA driver API, linked against
 * libcuda.so.1 (the stub, or a real driver) so that the library is in
 * /proc/PID/maps from the start, as in an inference server. A step is L
 * cuLaunchKernel calls on one stream and one cuStreamSynchronize, as a
 * launch-bound decode step of a small model is. With the stub's kernel time
 * at 0 (the default here) a step costs only the calls themselves, so a probe
 * on them shows at its full price.
 *
 *   launchloop [-l LAUNCHES] [-d SECONDS] [-k KERNEL_US] [-W]
 *
 * Prints "launchloop: ready pid=P" on stderr once initialized; with -W it
 * then waits for SIGUSR1 before it starts. After D seconds it prints one
 * JSON line on stdout:
 *   {"steps":..,"steps_per_second":..,"launches":..,...}
 * and, with -W, waits for a second SIGUSR1 before it exits, so that an
 * observer can be read and stopped while its target still exists.
 * Exit status 1 when a CUDA call failed, 2 for bad flags.
 */
#define _GNU_SOURCE
#include "cudastub.h"

#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static double num(const char *s, const char *flag)
{
	char *end;
	errno = 0;
	double v = strtod(s, &end);
	if (errno || end == s || *end || v < 0) {
		fprintf(stderr, "launchloop: bad %s %s\n", flag, s);
		exit(2);
	}
	return v;
}

#define CHECK(call)                                                            \
	do {                                                                   \
		CUresult r_ = (call);                                          \
		if (r_ != CUDA_SUCCESS) {                                      \
			fprintf(stderr, "launchloop: %s: error %d\n", #call,   \
			        (int)r_);                                      \
			return 1;                                              \
		}                                                              \
	} while (0)

static void usage(FILE *f)
{
	fprintf(f, "usage: launchloop [-l LAUNCHES] [-d SECONDS] [-k KERNEL_US] "
	           "[-W]\n"
	           "  -l  cuLaunchKernel calls per step (default 2000)\n"
	           "  -d  run this long, seconds (default 5)\n"
	           "  -k  stub kernel time, µs (default 0; sets "
	           "CUDASTUB_KERNEL_US)\n"
	           "  -W  after \"launchloop: ready pid=P\" on stderr, wait for "
	           "SIGUSR1;\n"
	           "      after the JSON, wait for another before exiting\n");
}

int main(int argc, char **argv)
{
	unsigned long launches = 2000;
	double duration_s = 5;
	double kernel_us = 0;
	int wait_start = 0, c;

	while ((c = getopt(argc, argv, "l:d:k:Wh")) != -1) {
		switch (c) {
		case 'l':
			launches = (unsigned long)num(optarg, "-l");
			break;
		case 'd':
			duration_s = num(optarg, "-d");
			break;
		case 'k':
			kernel_us = num(optarg, "-k");
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
	if (optind != argc || launches < 1) {
		usage(stderr);
		return 2;
	}
	/* The stub reads its environment at the first call. */
	char kus[64];
	snprintf(kus, sizeof kus, "%.17g", kernel_us);
	setenv("CUDASTUB_KERNEL_US", kus, 1);

	sigset_t usr1;
	sigemptyset(&usr1);
	sigaddset(&usr1, SIGUSR1);
	sigprocmask(SIG_BLOCK, &usr1, NULL);

	CUdevice dev;
	CUcontext ctx;
	CUmodule mod;
	CUfunction fn;
	CUstream stream;
	static const char image[] = "launchloop decode step";
	CHECK(cuInit(0));
	CHECK(cuDeviceGet(&dev, 0));
	CHECK(cuCtxCreate_v2(&ctx, 0, dev));
	CHECK(cuModuleLoadData(&mod, image));
	CHECK(cuModuleGetFunction(&fn, mod, "decode_step"));
	CHECK(cuStreamCreate(&stream, 0));

	fprintf(stderr, "launchloop: ready pid=%d\n", (int)getpid());
	fflush(stderr);
	if (wait_start) {
		int sig;
		sigwait(&usr1, &sig);
	}

	void *params[] = {NULL};
	uint64_t steps = 0, t0 = now_ns();
	uint64_t end = t0 + (uint64_t)(duration_s * 1e9), t = t0;
	uint64_t sync_ns = 0;
	while (t < end) {
		for (unsigned long i = 0; i < launches; i++)
			CHECK(cuLaunchKernel(fn, 1, 1, 1, 128, 1, 1, 0, stream,
			                     params, NULL));
		uint64_t s0 = now_ns();
		CHECK(cuStreamSynchronize(stream));
		t = now_ns();
		sync_ns += t - s0;
		steps++;
	}
	double secs = (double)(t - t0) / 1e9;
	printf("{\"steps\":%llu,\"seconds\":%.6f,\"steps_per_second\":%.3f,"
	       "\"launches\":%llu,\"launches_per_step\":%lu,"
	       "\"launches_per_second\":%.1f,\"sync_seconds\":%.6f,"
	       "\"kernel_us\":%g,\"pid\":%d}\n",
	       (unsigned long long)steps, secs,
	       secs > 0 ? (double)steps / secs : 0.0,
	       (unsigned long long)(steps * launches), launches,
	       secs > 0 ? (double)(steps * launches) / secs : 0.0,
	       (double)sync_ns / 1e9, kernel_us, (int)getpid());
	fflush(stdout);
	if (wait_start) {
		int sig;
		sigwait(&usr1, &sig);
	}
	CHECK(cuStreamDestroy_v2(stream));
	CHECK(cuCtxDestroy_v2(ctx));
	return 0;
}
