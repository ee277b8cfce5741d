/*
 * cudastub-driver: makes a known number of CUDA calls through the driver API
 * (libcuda.so.1) or the runtime API (libcudart.so.12), opened with dlopen, and
 * prints what it did as JSON on stdout: the ground truth for the tests of the
 * CUDA uprobes. Run with --help for the flags.
 */
#define _GNU_SOURCE
#include "cudastub.h"

#include <dlfcn.h>
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/select.h>
#include <time.h>
#include <unistd.h>

/* ---- options ---- */

enum api { API_DRIVER, API_RUNTIME };
enum launch_kind { LAUNCH_KERNEL, LAUNCH_EX, LAUNCH_GRAPH };
enum sync_kind { SYNC_STREAM, SYNC_DEVICE, SYNC_EVENT };

static struct {
	enum api api;
	const char *lib;
	long launches, syncs, allocs, copies;
	unsigned long long alloc_bytes, copy_bytes;
	int fail_alloc, async_copies, default_stream, wait_start, loop;
	long graphs, exhaust;
	unsigned long long pool_bytes;
	int fragment, fail_instantiate, end_wait;
	long rounds, idle_ms, tail_syncs;
	double rate, host_us;
	long duration_ms;
	unsigned grid[3], block[3];
	enum launch_kind launch;
	enum sync_kind sync;
} opt = {
    .api = API_DRIVER,
    .launches = 100,
    .syncs = 1,
    .alloc_bytes = 1 << 20,
    .copy_bytes = 1 << 20,
    .pool_bytes = 8 << 20,
    .grid = {1, 1, 1},
    .block = {128, 1, 1},
};

static const char *launch_names[] = {"kernel", "ex", "graph"};
static const char *sync_names[] = {"stream", "device", "event"};

static void usage(FILE *f)
{
	fprintf(f,
	    "usage: cudastub-driver [flags]\n"
	    "  --api driver|runtime   which API to call (default driver)\n"
	    "  --lib PATH             library to dlopen (default libcuda.so.1 or\n"
	    "                         libcudart.so.12, by the API)\n"
	    "  --launches N           kernel launches per round (default 100)\n"
	    "  --syncs M              synchronizes per round, spread evenly\n"
	    "                         over the launches (default 1)\n"
	    "  --launch kernel|ex|graph  cuLaunchKernel / cuLaunchKernelEx /\n"
	    "                         cuGraphLaunch (runtime: cudaLaunchKernel /\n"
	    "                         cudaLaunchKernelExC / cudaGraphLaunch)\n"
	    "  --sync stream|device|event  cuStreamSynchronize / cuCtxSynchronize\n"
	    "                         / cuEventRecord+cuEventSynchronize (runtime:\n"
	    "                         cudaStreamSynchronize, cudaDeviceSynchronize,\n"
	    "                         cudaEventRecord+cudaEventSynchronize)\n"
	    "  --default-stream       use stream 0 instead of a created stream\n"
	    "  --allocs K             device allocations per round, each freed at\n"
	    "                         the end of the round (default 0)\n"
	    "  --alloc-bytes B        bytes per allocation (default 1048576)\n"
	    "  --fail-alloc           the last allocation of each round asks for\n"
	    "                         the magic size 0xDEADBEEF and fails with\n"
	    "                         out of memory (K is raised to 1 if 0)\n"
	    "  --copies C             C host-to-device and C device-to-host\n"
	    "                         copies per round (default 0)\n"
	    "  --copy-bytes B         bytes per copy (default 1048576)\n"
	    "  --async-copies         use the Async copy calls on the stream\n"
	    "  --rate R               launches per second (default 0: as fast as\n"
	    "                         possible)\n"
	    "  --grid X[,Y[,Z]]       grid dimensions (default 1,1,1)\n"
	    "  --block X[,Y[,Z]]      block dimensions (default 128,1,1)\n"
	    "  --kernel-us US         sets CUDASTUB_KERNEL_US before the dlopen\n"
	    "  --mode sleep|spin      sets CUDASTUB_MODE before the dlopen\n"
	    "  --wait-start           after loading and initializing, print\n"
	    "                         'cudastub-driver: ready pid=N' on stderr and\n"
	    "                         wait for a byte (or EOF) on stdin or SIGUSR1\n"
	    "  --loop                 repeat rounds until SIGINT or SIGTERM\n"
	    "  --duration-ms D        with --loop, stop after D milliseconds\n"
	    "  --graphs N             per round, instantiate N executable graphs\n"
	    "                         (cycling through the instantiate calls), make\n"
	    "                         the round's launches graph launches spread\n"
	    "                         over them, then destroy them\n"
	    "  --fail-instantiate     per round, one more instantiation of a NULL\n"
	    "                         graph, which fails (with --graphs)\n"
	    "  --exhaust K            per round, exhaust a memory pool K times:\n"
	    "                         allocate --alloc-bytes blocks from it until one\n"
	    "                         fails with out of memory, free them, trim it\n"
	    "                         to keep one block's worth\n"
	    "  --pool-bytes P         the pool's maxSize (default 8388608)\n"
	    "  --host-us US           before each launch, spin US µs of this\n"
	    "                         thread's CPU time (a framework's dispatch)\n"
	    "  --rounds R             run R rounds (default 1; --loop: until\n"
	    "                         stopped)\n"
	    "  --idle-ms I            sleep I ms after each round but the last\n"
	    "  --tail-syncs N         N more synchronizes after each round's\n"
	    "                         launches\n"
	    "  --end-wait             after the JSON, wait for a byte (or EOF) on\n"
	    "                         stdin or SIGUSR1 before exiting\n"
	    "  --fragment             with --exhaust, before freeing, free every\n"
	    "                         other block and ask for two blocks' worth:\n"
	    "                         fits the free total, fails when the pool\n"
	    "                         fragments (CUDASTUB_POOL_FRAGMENTATION=1)\n");
}

static int parse_dims(const char *s, unsigned d[3])
{
	unsigned v[3] = {1, 1, 1};
	int n = 0;
	char *end;

	while (n < 3) {
		unsigned long x;

		errno = 0;
		x = strtoul(s, &end, 10);
		if (errno != 0 || end == s || x > 0xffffffffUL)
			return -1;
		v[n++] = (unsigned)x;
		if (*end == '\0')
			break;
		if (*end != ',' && *end != 'x')
			return -1;
		s = end + 1;
	}
	if (*end != '\0')
		return -1;
	memcpy(d, v, sizeof(v));
	return 0;
}

static long parse_long(const char *name, const char *s)
{
	char *end;
	long v;

	errno = 0;
	v = strtol(s, &end, 0);
	if (errno != 0 || end == s || *end != '\0' || v < 0) {
		fprintf(stderr, "cudastub-driver: %s wants a non-negative integer, "
		                "got %s\n",
		        name, s);
		exit(2);
	}
	return v;
}

static void parse_args(int argc, char **argv)
{
	enum {
		O_API = 256, O_LIB, O_LAUNCHES, O_SYNCS, O_LAUNCH, O_SYNC,
		O_DEFSTREAM, O_ALLOCS, O_ALLOC_BYTES, O_FAIL_ALLOC, O_COPIES,
		O_COPY_BYTES, O_ASYNC_COPIES, O_RATE, O_GRID, O_BLOCK,
		O_KERNEL_US, O_MODE, O_WAIT_START, O_LOOP, O_DURATION, O_GRAPHS,
		O_FAIL_INST, O_EXHAUST, O_POOL_BYTES, O_FRAGMENT, O_HOST_US,
		O_ROUNDS, O_IDLE, O_TAIL_SYNCS, O_END_WAIT, O_HELP
	};
	static const struct option longopts[] = {
	    {"api", required_argument, NULL, O_API},
	    {"lib", required_argument, NULL, O_LIB},
	    {"launches", required_argument, NULL, O_LAUNCHES},
	    {"syncs", required_argument, NULL, O_SYNCS},
	    {"launch", required_argument, NULL, O_LAUNCH},
	    {"sync", required_argument, NULL, O_SYNC},
	    {"default-stream", no_argument, NULL, O_DEFSTREAM},
	    {"allocs", required_argument, NULL, O_ALLOCS},
	    {"alloc-bytes", required_argument, NULL, O_ALLOC_BYTES},
	    {"fail-alloc", no_argument, NULL, O_FAIL_ALLOC},
	    {"copies", required_argument, NULL, O_COPIES},
	    {"copy-bytes", required_argument, NULL, O_COPY_BYTES},
	    {"async-copies", no_argument, NULL, O_ASYNC_COPIES},
	    {"rate", required_argument, NULL, O_RATE},
	    {"grid", required_argument, NULL, O_GRID},
	    {"block", required_argument, NULL, O_BLOCK},
	    {"kernel-us", required_argument, NULL, O_KERNEL_US},
	    {"mode", required_argument, NULL, O_MODE},
	    {"wait-start", no_argument, NULL, O_WAIT_START},
	    {"loop", no_argument, NULL, O_LOOP},
	    {"duration-ms", required_argument, NULL, O_DURATION},
	    {"graphs", required_argument, NULL, O_GRAPHS},
	    {"fail-instantiate", no_argument, NULL, O_FAIL_INST},
	    {"exhaust", required_argument, NULL, O_EXHAUST},
	    {"pool-bytes", required_argument, NULL, O_POOL_BYTES},
	    {"fragment", no_argument, NULL, O_FRAGMENT},
	    {"host-us", required_argument, NULL, O_HOST_US},
	    {"rounds", required_argument, NULL, O_ROUNDS},
	    {"idle-ms", required_argument, NULL, O_IDLE},
	    {"tail-syncs", required_argument, NULL, O_TAIL_SYNCS},
	    {"end-wait", no_argument, NULL, O_END_WAIT},
	    {"help", no_argument, NULL, O_HELP},
	    {NULL, 0, NULL, 0},
	};
	int c;
	char *end;

	while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
		switch (c) {
		case O_API:
			if (strcmp(optarg, "driver") == 0)
				opt.api = API_DRIVER;
			else if (strcmp(optarg, "runtime") == 0)
				opt.api = API_RUNTIME;
			else
				goto bad;
			break;
		case O_LIB:
			opt.lib = optarg;
			break;
		case O_LAUNCHES:
			opt.launches = parse_long("--launches", optarg);
			break;
		case O_SYNCS:
			opt.syncs = parse_long("--syncs", optarg);
			break;
		case O_LAUNCH:
			if (strcmp(optarg, "kernel") == 0)
				opt.launch = LAUNCH_KERNEL;
			else if (strcmp(optarg, "ex") == 0)
				opt.launch = LAUNCH_EX;
			else if (strcmp(optarg, "graph") == 0)
				opt.launch = LAUNCH_GRAPH;
			else
				goto bad;
			break;
		case O_SYNC:
			if (strcmp(optarg, "stream") == 0)
				opt.sync = SYNC_STREAM;
			else if (strcmp(optarg, "device") == 0)
				opt.sync = SYNC_DEVICE;
			else if (strcmp(optarg, "event") == 0)
				opt.sync = SYNC_EVENT;
			else
				goto bad;
			break;
		case O_DEFSTREAM:
			opt.default_stream = 1;
			break;
		case O_ALLOCS:
			opt.allocs = parse_long("--allocs", optarg);
			break;
		case O_ALLOC_BYTES:
			opt.alloc_bytes =
			    (unsigned long long)parse_long("--alloc-bytes", optarg);
			break;
		case O_FAIL_ALLOC:
			opt.fail_alloc = 1;
			break;
		case O_COPIES:
			opt.copies = parse_long("--copies", optarg);
			break;
		case O_COPY_BYTES:
			opt.copy_bytes =
			    (unsigned long long)parse_long("--copy-bytes", optarg);
			break;
		case O_ASYNC_COPIES:
			opt.async_copies = 1;
			break;
		case O_RATE:
			errno = 0;
			opt.rate = strtod(optarg, &end);
			if (errno != 0 || *end != '\0' || opt.rate < 0)
				goto bad;
			break;
		case O_GRID:
			if (parse_dims(optarg, opt.grid) != 0)
				goto bad;
			break;
		case O_BLOCK:
			if (parse_dims(optarg, opt.block) != 0)
				goto bad;
			break;
		case O_KERNEL_US:
			setenv("CUDASTUB_KERNEL_US", optarg, 1);
			break;
		case O_MODE:
			setenv("CUDASTUB_MODE", optarg, 1);
			break;
		case O_WAIT_START:
			opt.wait_start = 1;
			break;
		case O_LOOP:
			opt.loop = 1;
			break;
		case O_DURATION:
			opt.duration_ms = parse_long("--duration-ms", optarg);
			break;
		case O_GRAPHS:
			opt.graphs = parse_long("--graphs", optarg);
			break;
		case O_FAIL_INST:
			opt.fail_instantiate = 1;
			break;
		case O_EXHAUST:
			opt.exhaust = parse_long("--exhaust", optarg);
			break;
		case O_POOL_BYTES:
			opt.pool_bytes =
			    (unsigned long long)parse_long("--pool-bytes", optarg);
			break;
		case O_FRAGMENT:
			opt.fragment = 1;
			break;
		case O_HOST_US:
			errno = 0;
			opt.host_us = strtod(optarg, &end);
			if (errno != 0 || *end != '\0' || opt.host_us < 0)
				goto bad;
			break;
		case O_ROUNDS:
			opt.rounds = parse_long("--rounds", optarg);
			break;
		case O_IDLE:
			opt.idle_ms = parse_long("--idle-ms", optarg);
			break;
		case O_TAIL_SYNCS:
			opt.tail_syncs = parse_long("--tail-syncs", optarg);
			break;
		case O_END_WAIT:
			opt.end_wait = 1;
			break;
		case 'h':
		case O_HELP:
			usage(stdout);
			exit(0);
		default:
			usage(stderr);
			exit(2);
		}
		continue;
	bad:
		fprintf(stderr, "cudastub-driver: bad value %s for --%s\n", optarg,
		        longopts[c - O_API].name);
		exit(2);
	}
	if (optind < argc) {
		fprintf(stderr, "cudastub-driver: unexpected argument %s\n",
		        argv[optind]);
		exit(2);
	}
	if (opt.fail_alloc && opt.allocs == 0)
		opt.allocs = 1;
	if (opt.graphs > 0)
		opt.launch = LAUNCH_GRAPH;
	if (opt.exhaust > 0 &&
	    (opt.alloc_bytes == 0 || opt.pool_bytes < opt.alloc_bytes)) {
		fprintf(stderr, "cudastub-driver: --exhaust wants --alloc-bytes "
		                "between 1 and --pool-bytes\n");
		exit(2);
	}
	if (opt.lib == NULL)
		opt.lib = opt.api == API_DRIVER ? "libcuda.so.1" : "libcudart.so.12";
}

/* ---- time and signals ---- */

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void sleep_until(uint64_t t)
{
	struct timespec ts = {.tv_sec = (time_t)(t / 1000000000ull),
	                      .tv_nsec = (long)(t % 1000000000ull)};

	while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
		;
}

static volatile sig_atomic_t stop_requested, start_requested;

static void on_stop(int sig)
{
	(void)sig;
	stop_requested = 1;
}

static void on_start(int sig)
{
	(void)sig;
	start_requested = 1;
}

/* Waits for a byte or EOF on stdin, or SIGUSR1. */
static void wait_start(void)
{
	struct sigaction sa = {.sa_handler = on_start};
	sigset_t block, orig;

	sigemptyset(&block);
	sigaddset(&block, SIGUSR1);
	sigprocmask(SIG_BLOCK, &block, &orig);
	sigaction(SIGUSR1, &sa, NULL);
	fprintf(stderr, "cudastub-driver: ready pid=%d\n", (int)getpid());
	fflush(stderr);
	while (!start_requested) {
		fd_set rfds;
		int n;

		FD_ZERO(&rfds);
		FD_SET(0, &rfds);
		n = pselect(1, &rfds, NULL, NULL, NULL, &orig);
		if (n > 0) {
			char c;

			if (read(0, &c, 1) >= 0)
				break;
		} else if (n < 0 && errno != EINTR) {
			break;
		}
	}
	sigprocmask(SIG_SETMASK, &orig, NULL);
}

/* ---- call accounting ---- */

#define MAX_NAMES 64

static struct {
	const char *name;
	unsigned long long calls, errors;
} counts[MAX_NAMES];
static int ncounts;
static unsigned long long unexpected_errors;

static int count(const char *name, int rc)
{
	int i;

	for (i = 0; i < ncounts; i++)
		if (counts[i].name == name || strcmp(counts[i].name, name) == 0)
			break;
	if (i == ncounts && ncounts < MAX_NAMES)
		counts[ncounts++].name = name;
	if (i < MAX_NAMES) {
		counts[i].calls++;
		if (rc != 0)
			counts[i].errors++;
	}
	return rc;
}

/* CALL(api, sym, args...): calls a resolved symbol and counts it. */
#define CALL(tab, sym, ...) count(#sym, (int)(tab).sym(__VA_ARGS__))

static void check(const char *what, int rc)
{
	if (rc != 0) {
		fprintf(stderr, "cudastub-driver: %s returned %d\n", what, rc);
		unexpected_errors++;
	}
}

/* ---- the libraries ---- */

#define SYM(name) __typeof__(name) *name

static struct {
	SYM(cuInit);
	SYM(cuDeviceGet);
	SYM(cuCtxCreate_v2);
	SYM(cuCtxDestroy_v2);
	SYM(cuCtxSynchronize);
	SYM(cuModuleLoadData);
	SYM(cuModuleGetFunction);
	SYM(cuLaunchKernel);
	SYM(cuLaunchKernelEx);
	SYM(cuGraphCreate);
	SYM(cuGraphInstantiateWithFlags);
	SYM(cuGraphLaunch);
	SYM(cuMemcpyHtoD_v2);
	SYM(cuMemcpyDtoH_v2);
	SYM(cuMemcpyHtoDAsync_v2);
	SYM(cuMemcpyDtoHAsync_v2);
	SYM(cuMemAlloc_v2);
	SYM(cuMemFree_v2);
	SYM(cuStreamCreate);
	SYM(cuStreamSynchronize);
	SYM(cuEventCreate);
	SYM(cuEventRecord);
	SYM(cuEventSynchronize);
	SYM(cuGraphInstantiate);
	SYM(cuGraphInstantiateWithParams);
	SYM(cuGraphExecDestroy);
	SYM(cuMemPoolCreate);
	SYM(cuMemPoolDestroy);
	SYM(cuMemAllocFromPoolAsync);
	SYM(cuMemFreeAsync);
	SYM(cuMemPoolTrimTo);
	SYM(cuMemPoolSetAttribute);
	SYM(cuMemPoolGetAttribute);
} drv;

static struct {
	SYM(cudaSetDevice);
	SYM(cudaLaunchKernel);
	SYM(cudaLaunchKernelExC);
	SYM(cudaGraphCreate);
	SYM(cudaGraphInstantiate);
	SYM(cudaGraphLaunch);
	SYM(cudaMemcpy);
	SYM(cudaMemcpyAsync);
	SYM(cudaMalloc);
	SYM(cudaFree);
	SYM(cudaStreamCreate);
	SYM(cudaStreamSynchronize);
	SYM(cudaDeviceSynchronize);
	SYM(cudaEventCreate);
	SYM(cudaEventRecord);
	SYM(cudaEventSynchronize);
	SYM(cudaGraphInstantiateWithFlags);
	SYM(cudaGraphInstantiateWithParams);
	SYM(cudaGraphExecDestroy);
	SYM(cudaMemPoolCreate);
	SYM(cudaMemPoolDestroy);
	SYM(cudaMallocFromPoolAsync);
	SYM(cudaFreeAsync);
	SYM(cudaMemPoolTrimTo);
	SYM(cudaMemPoolSetAttribute);
	SYM(cudaMemPoolGetAttribute);
} rt;

static double (*stub_kernel_us)(void);

static void *resolve(void *h, const char *name)
{
	void *p = dlsym(h, name);

	if (p == NULL) {
		fprintf(stderr, "cudastub-driver: symbol %s not in %s\n", name,
		        opt.lib);
		exit(2);
	}
	return p;
}

#define RESOLVE(h, tab, name) (tab).name = resolve(h, #name)

static void load(void)
{
	void *h = dlopen(opt.lib, RTLD_NOW | RTLD_LOCAL);

	if (h == NULL) {
		fprintf(stderr, "cudastub-driver: loading %s: %s\n", opt.lib,
		        dlerror());
		exit(2);
	}
	stub_kernel_us = (double (*)(void))dlsym(h, "cudastub_kernel_us");
	if (opt.api == API_DRIVER) {
		RESOLVE(h, drv, cuInit);
		RESOLVE(h, drv, cuDeviceGet);
		RESOLVE(h, drv, cuCtxCreate_v2);
		RESOLVE(h, drv, cuCtxDestroy_v2);
		RESOLVE(h, drv, cuCtxSynchronize);
		RESOLVE(h, drv, cuModuleLoadData);
		RESOLVE(h, drv, cuModuleGetFunction);
		RESOLVE(h, drv, cuLaunchKernel);
		RESOLVE(h, drv, cuLaunchKernelEx);
		RESOLVE(h, drv, cuGraphCreate);
		RESOLVE(h, drv, cuGraphInstantiateWithFlags);
		RESOLVE(h, drv, cuGraphLaunch);
		RESOLVE(h, drv, cuMemcpyHtoD_v2);
		RESOLVE(h, drv, cuMemcpyDtoH_v2);
		RESOLVE(h, drv, cuMemcpyHtoDAsync_v2);
		RESOLVE(h, drv, cuMemcpyDtoHAsync_v2);
		RESOLVE(h, drv, cuMemAlloc_v2);
		RESOLVE(h, drv, cuMemFree_v2);
		RESOLVE(h, drv, cuStreamCreate);
		RESOLVE(h, drv, cuStreamSynchronize);
		RESOLVE(h, drv, cuEventCreate);
		RESOLVE(h, drv, cuEventRecord);
		RESOLVE(h, drv, cuEventSynchronize);
		if (opt.graphs > 0) {
			RESOLVE(h, drv, cuGraphInstantiate);
			RESOLVE(h, drv, cuGraphInstantiateWithParams);
			RESOLVE(h, drv, cuGraphExecDestroy);
		}
		if (opt.exhaust > 0) {
			RESOLVE(h, drv, cuMemPoolCreate);
			RESOLVE(h, drv, cuMemPoolDestroy);
			RESOLVE(h, drv, cuMemAllocFromPoolAsync);
			RESOLVE(h, drv, cuMemFreeAsync);
			RESOLVE(h, drv, cuMemPoolTrimTo);
			RESOLVE(h, drv, cuMemPoolSetAttribute);
			RESOLVE(h, drv, cuMemPoolGetAttribute);
		}
	} else {
		RESOLVE(h, rt, cudaSetDevice);
		RESOLVE(h, rt, cudaLaunchKernel);
		RESOLVE(h, rt, cudaLaunchKernelExC);
		RESOLVE(h, rt, cudaGraphCreate);
		RESOLVE(h, rt, cudaGraphInstantiate);
		RESOLVE(h, rt, cudaGraphLaunch);
		RESOLVE(h, rt, cudaMemcpy);
		RESOLVE(h, rt, cudaMemcpyAsync);
		RESOLVE(h, rt, cudaMalloc);
		RESOLVE(h, rt, cudaFree);
		RESOLVE(h, rt, cudaStreamCreate);
		RESOLVE(h, rt, cudaStreamSynchronize);
		RESOLVE(h, rt, cudaDeviceSynchronize);
		RESOLVE(h, rt, cudaEventCreate);
		RESOLVE(h, rt, cudaEventRecord);
		RESOLVE(h, rt, cudaEventSynchronize);
		if (opt.graphs > 0) {
			RESOLVE(h, rt, cudaGraphInstantiateWithFlags);
			RESOLVE(h, rt, cudaGraphInstantiateWithParams);
			RESOLVE(h, rt, cudaGraphExecDestroy);
		}
		if (opt.exhaust > 0) {
			RESOLVE(h, rt, cudaMemPoolCreate);
			RESOLVE(h, rt, cudaMemPoolDestroy);
			RESOLVE(h, rt, cudaMallocFromPoolAsync);
			RESOLVE(h, rt, cudaFreeAsync);
			RESOLVE(h, rt, cudaMemPoolTrimTo);
			RESOLVE(h, rt, cudaMemPoolSetAttribute);
			RESOLVE(h, rt, cudaMemPoolGetAttribute);
		}
	}
}

/* ---- the work ---- */

static struct {
	CUcontext ctx;
	CUstream stream; /* also the runtime's cudaStream_t */
	CUfunction func;
	CUevent event;
	CUgraphExec graph;
	CUgraph graph_def;   /* what every instantiation instantiates */
	CUgraphExec *execs;  /* with --graphs: this round's */
	CUmemoryPool pool;   /* with --exhaust; also the runtime's cudaMemPool_t */
} h;

static const char kernel_image[] = "cudastub kernel image";
static char host_buf[64];

/* What --graphs and --exhaust did: the ground truth of the graph and pool
 * probes. */
static struct {
	unsigned long long instantiations, instantiate_errors, exec_destroys,
	    exhaustions, pool_allocs, pool_oom, pool_oom_fragmented, pool_trims,
	    pool_attribute_sets;
	uint64_t pool_reserved_peak, pool_reserved_after_trim;
	long next_exec;
} gres;

/* The executable graph the next launch runs: this round's, in turn, with
 * --graphs; else one instantiated at the first launch (after --wait-start,
 * so that probes see every graph call). */
static CUgraphExec graph_exec(void)
{
	if (opt.graphs > 0 && h.execs != NULL)
		return h.execs[gres.next_exec++ % opt.graphs];
	if (h.graph == NULL) {
		int rc = opt.api == API_DRIVER
		             ? CALL(drv, cuGraphInstantiateWithFlags, &h.graph,
		                    h.graph_def, 0)
		             : CALL(rt, cudaGraphInstantiate,
		                    (cudaGraphExec_t *)&h.graph,
		                    (cudaGraph_t)h.graph_def, 0);

		check("graph instantiation", rc);
		if (rc == 0)
			gres.instantiations++;
	}
	return h.graph;
}

static void pool_setup(void)
{
	CUmemPoolProps props = {.allocType = 1,
	                        .location = {.type = 1, .id = 0},
	                        .maxSize = (size_t)opt.pool_bytes};
	unsigned long long keep_all = ~0ull; /* never release on free */
	int rc;

	if (opt.api == API_DRIVER) {
		check("cuMemPoolCreate", CALL(drv, cuMemPoolCreate, &h.pool, &props));
		rc = CALL(drv, cuMemPoolSetAttribute, h.pool,
		          CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &keep_all);
	} else {
		check("cudaMemPoolCreate",
		      CALL(rt, cudaMemPoolCreate, (cudaMemPool_t *)&h.pool, &props));
		rc = CALL(rt, cudaMemPoolSetAttribute, (cudaMemPool_t)h.pool,
		          cudaMemPoolAttrReleaseThreshold, &keep_all);
	}
	check("pool set attribute", rc);
	if (rc == 0)
		gres.pool_attribute_sets++;
}

static uint64_t pool_attr(int attr)
{
	uint64_t v = 0;

	if (opt.api == API_DRIVER)
		check("cuMemPoolGetAttribute",
		      CALL(drv, cuMemPoolGetAttribute, h.pool,
		           (CUmemPool_attribute)attr, &v));
	else
		check("cudaMemPoolGetAttribute",
		      CALL(rt, cudaMemPoolGetAttribute, (cudaMemPool_t)h.pool,
		           (enum cudaMemPoolAttr)attr, &v));
	return v;
}

static int pool_alloc(size_t bytes, uint64_t *addr)
{
	int rc;

	gres.pool_allocs++;
	if (opt.api == API_DRIVER) {
		CUdeviceptr p = 0;

		rc = CALL(drv, cuMemAllocFromPoolAsync, &p, bytes, h.pool, h.stream);
		*addr = p;
	} else {
		void *p = NULL;

		rc = CALL(rt, cudaMallocFromPoolAsync, &p, bytes,
		          (cudaMemPool_t)h.pool, (cudaStream_t)h.stream);
		*addr = (uint64_t)(uintptr_t)p;
	}
	if (rc == 2)
		gres.pool_oom++;
	else if (rc != 0)
		check("pool allocation", rc);
	return rc;
}

static void pool_release(uint64_t addr)
{
	if (opt.api == API_DRIVER)
		check("cuMemFreeAsync", CALL(drv, cuMemFreeAsync, addr, h.stream));
	else
		check("cudaFreeAsync", CALL(rt, cudaFreeAsync, (void *)(uintptr_t)addr,
		                            (cudaStream_t)h.stream));
}

static void pool_trim(size_t keep)
{
	int rc;

	if (opt.api == API_DRIVER)
		rc = CALL(drv, cuMemPoolTrimTo, h.pool, keep);
	else
		rc = CALL(rt, cudaMemPoolTrimTo, (cudaMemPool_t)h.pool, keep);
	check("pool trim", rc);
	if (rc == 0)
		gres.pool_trims++;
}

/* One exhaustion: blocks until the pool refuses one (out of memory); with
 * --fragment, every other block freed and a request for two blocks' worth,
 * which the free total holds; then everything freed and the pool trimmed. */
static void exhaust_once(void)
{
	size_t cap = (size_t)(opt.pool_bytes / opt.alloc_bytes) + 2, n = 0, i;
	uint64_t *blocks = calloc(cap, sizeof(*blocks)), addr, r;

	if (blocks == NULL) {
		perror("cudastub-driver");
		exit(1);
	}
	/* The pool is made with the first exhaustion, after --wait-start. */
	if (h.pool == NULL)
		pool_setup();
	for (;;) {
		int rc = pool_alloc((size_t)opt.alloc_bytes, &addr);

		if (rc != 0)
			break;
		if (n == cap) {
			fprintf(stderr, "cudastub-driver: the pool holds more than "
			                "--pool-bytes\n");
			unexpected_errors++;
			pool_release(addr);
			break;
		}
		blocks[n++] = addr;
	}
	gres.exhaustions++;
	if ((r = pool_attr(CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT)) >
	    gres.pool_reserved_peak)
		gres.pool_reserved_peak = r;
	if (opt.fragment) {
		uint64_t want = 2 * opt.alloc_bytes, free_total;

		for (i = 1; i < n; i += 2) {
			pool_release(blocks[i]);
			blocks[i] = 0;
		}
		free_total =
		    opt.pool_bytes - pool_attr(CU_MEMPOOL_ATTR_USED_MEM_CURRENT);
		if (pool_alloc((size_t)want, &addr) == 0)
			pool_release(addr);
		else if (want <= free_total)
			gres.pool_oom_fragmented++;
	}
	for (i = 0; i < n; i++)
		if (blocks[i] != 0)
			pool_release(blocks[i]);
	free(blocks);
	/* Keep one block's worth reserved. */
	pool_trim((size_t)opt.alloc_bytes);
	gres.pool_reserved_after_trim =
	    pool_attr(CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT);
}

/* --graphs: this round's N instantiations, cycling through the calls. */
static void instantiate_round(void)
{
	long i;

	free(h.execs);
	h.execs = calloc((size_t)opt.graphs, sizeof(*h.execs));
	if (h.execs == NULL) {
		perror("cudastub-driver");
		exit(1);
	}
	gres.next_exec = 0;
	for (i = 0; i < opt.graphs; i++) {
		CUgraphExec *e = &h.execs[i];
		int rc;

		if (opt.api == API_DRIVER) {
			CUDA_GRAPH_INSTANTIATE_PARAMS params = {0};

			if (i % 3 == 0)
				rc = CALL(drv, cuGraphInstantiateWithFlags, e,
				          h.graph_def, 0);
			else if (i % 3 == 1)
				rc = CALL(drv, cuGraphInstantiateWithParams, e,
				          h.graph_def, &params);
			else
				rc = CALL(drv, cuGraphInstantiate, e, h.graph_def,
				          NULL, NULL, 0);
		} else {
			cudaGraphInstantiateParams params = {0};
			cudaGraphExec_t *re = (cudaGraphExec_t *)e;

			if (i % 3 == 0)
				rc = CALL(rt, cudaGraphInstantiate, re,
				          (cudaGraph_t)h.graph_def, 0);
			else if (i % 3 == 1)
				rc = CALL(rt, cudaGraphInstantiateWithFlags, re,
				          (cudaGraph_t)h.graph_def, 0);
			else
				rc = CALL(rt, cudaGraphInstantiateWithParams, re,
				          (cudaGraph_t)h.graph_def, &params);
		}
		check("graph instantiation", rc);
		if (rc == 0)
			gres.instantiations++;
	}
	if (opt.fail_instantiate) {
		CUgraphExec bad = NULL;
		int rc = opt.api == API_DRIVER
		             ? CALL(drv, cuGraphInstantiateWithFlags, &bad, NULL, 0)
		             : CALL(rt, cudaGraphInstantiate,
		                    (cudaGraphExec_t *)&bad, NULL, 0);

		if (rc == 0) {
			fprintf(stderr, "cudastub-driver: instantiating a NULL "
			                "graph succeeded\n");
			unexpected_errors++;
		} else {
			gres.instantiate_errors++;
		}
	}
}

static void destroy_round(void)
{
	long i;

	for (i = 0; i < opt.graphs; i++) {
		int rc = opt.api == API_DRIVER
		             ? CALL(drv, cuGraphExecDestroy, h.execs[i])
		             : CALL(rt, cudaGraphExecDestroy,
		                    (cudaGraphExec_t)h.execs[i]);

		check("graph exec destroy", rc);
		if (rc == 0)
			gres.exec_destroys++;
	}
	free(h.execs);
	h.execs = NULL;
}

static void setup(void)
{
	if (opt.api == API_DRIVER) {
		CUdevice dev;
		CUmodule mod;

		check("cuInit", CALL(drv, cuInit, 0));
		check("cuDeviceGet", CALL(drv, cuDeviceGet, &dev, 0));
		check("cuCtxCreate_v2", CALL(drv, cuCtxCreate_v2, &h.ctx, 0, dev));
		check("cuModuleLoadData",
		      CALL(drv, cuModuleLoadData, &mod, kernel_image));
		check("cuModuleGetFunction",
		      CALL(drv, cuModuleGetFunction, &h.func, mod, "stub_kernel"));
		if (!opt.default_stream)
			check("cuStreamCreate",
			      CALL(drv, cuStreamCreate, &h.stream, 0));
		if (opt.sync == SYNC_EVENT)
			check("cuEventCreate", CALL(drv, cuEventCreate, &h.event, 0));
		if (opt.launch == LAUNCH_GRAPH)
			check("cuGraphCreate",
			      CALL(drv, cuGraphCreate, &h.graph_def, 0));
	} else {

		check("cudaSetDevice", CALL(rt, cudaSetDevice, 0));
		if (!opt.default_stream)
			check("cudaStreamCreate",
			      CALL(rt, cudaStreamCreate, &h.stream));
		if (opt.sync == SYNC_EVENT)
			check("cudaEventCreate", CALL(rt, cudaEventCreate, &h.event));
		if (opt.launch == LAUNCH_GRAPH)
			check("cudaGraphCreate",
			      CALL(rt, cudaGraphCreate,
			           (cudaGraph_t *)&h.graph_def, 0));
	}
}

static const void *runtime_kernel = (const void *)kernel_image;

/* spin_host burns opt.host_us of this thread's CPU time: the work a
 * framework does on the launching thread before each launch (CPU time, not
 * wall time, so that a preempted thread does the same work). */
static void spin_host(void)
{
	struct timespec ts;
	uint64_t t0, t;

	if (opt.host_us <= 0)
		return;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	t0 = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
	do {
		clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
		t = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
	} while (t - t0 < (uint64_t)(opt.host_us * 1000));
}

static void launch(void)
{
	int rc;

	spin_host();
	if (opt.api == API_DRIVER) {
		if (opt.launch == LAUNCH_KERNEL) {
			rc = CALL(drv, cuLaunchKernel, h.func, opt.grid[0],
			          opt.grid[1], opt.grid[2], opt.block[0],
			          opt.block[1], opt.block[2], 0, h.stream, NULL,
			          NULL);
		} else if (opt.launch == LAUNCH_EX) {
			CUlaunchConfig cfg = {
			    .gridDimX = opt.grid[0],
			    .gridDimY = opt.grid[1],
			    .gridDimZ = opt.grid[2],
			    .blockDimX = opt.block[0],
			    .blockDimY = opt.block[1],
			    .blockDimZ = opt.block[2],
			    .hStream = h.stream,
			};
			rc = CALL(drv, cuLaunchKernelEx, &cfg, h.func, NULL, NULL);
		} else {
			rc = CALL(drv, cuGraphLaunch, graph_exec(), h.stream);
		}
	} else {
		dim3 grid = {opt.grid[0], opt.grid[1], opt.grid[2]};
		dim3 block = {opt.block[0], opt.block[1], opt.block[2]};

		if (opt.launch == LAUNCH_KERNEL) {
			rc = CALL(rt, cudaLaunchKernel, runtime_kernel, grid, block,
			          NULL, 0, (cudaStream_t)h.stream);
		} else if (opt.launch == LAUNCH_EX) {
			cudaLaunchConfig_t cfg = {
			    .gridDim = grid,
			    .blockDim = block,
			    .stream = (cudaStream_t)h.stream,
			};
			rc = CALL(rt, cudaLaunchKernelExC, &cfg, runtime_kernel, NULL);
		} else {
			rc = CALL(rt, cudaGraphLaunch, (cudaGraphExec_t)graph_exec(),
			          (cudaStream_t)h.stream);
		}
	}
	check("launch", rc);
}

static void synchronize(void)
{
	int rc;

	if (opt.api == API_DRIVER) {
		if (opt.sync == SYNC_STREAM) {
			rc = CALL(drv, cuStreamSynchronize, h.stream);
		} else if (opt.sync == SYNC_DEVICE) {
			rc = CALL(drv, cuCtxSynchronize);
		} else {
			check("cuEventRecord",
			      CALL(drv, cuEventRecord, h.event, h.stream));
			rc = CALL(drv, cuEventSynchronize, h.event);
		}
	} else {
		if (opt.sync == SYNC_STREAM) {
			rc = CALL(rt, cudaStreamSynchronize, (cudaStream_t)h.stream);
		} else if (opt.sync == SYNC_DEVICE) {
			rc = CALL(rt, cudaDeviceSynchronize);
		} else {
			check("cudaEventRecord",
			      CALL(rt, cudaEventRecord, (cudaEvent_t)h.event,
			           (cudaStream_t)h.stream));
			rc = CALL(rt, cudaEventSynchronize, (cudaEvent_t)h.event);
		}
	}
	check("synchronize", rc);
}

/* Allocates; returns 0 on success, the error code otherwise. */
static int allocate(size_t bytes, uint64_t *addr)
{
	if (opt.api == API_DRIVER) {
		CUdeviceptr p = 0;
		int rc = CALL(drv, cuMemAlloc_v2, &p, bytes);

		*addr = p;
		return rc;
	} else {
		void *p = NULL;
		int rc = CALL(rt, cudaMalloc, &p, bytes);

		*addr = (uint64_t)(uintptr_t)p;
		return rc;
	}
}

static void release(uint64_t addr)
{
	if (opt.api == API_DRIVER)
		check("cuMemFree_v2", CALL(drv, cuMemFree_v2, addr));
	else
		check("cudaFree", CALL(rt, cudaFree, (void *)(uintptr_t)addr));
}

static void copy(uint64_t dev, size_t bytes, int to_device)
{
	int rc;

	if (opt.api == API_DRIVER) {
		if (to_device && opt.async_copies)
			rc = CALL(drv, cuMemcpyHtoDAsync_v2, dev, host_buf, bytes,
			          h.stream);
		else if (to_device)
			rc = CALL(drv, cuMemcpyHtoD_v2, dev, host_buf, bytes);
		else if (opt.async_copies)
			rc = CALL(drv, cuMemcpyDtoHAsync_v2, host_buf, dev, bytes,
			          h.stream);
		else
			rc = CALL(drv, cuMemcpyDtoH_v2, host_buf, dev, bytes);
	} else {
		void *d = (void *)(uintptr_t)dev;
		enum cudaMemcpyKind k =
		    to_device ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost;
		void *dst = to_device ? d : host_buf;
		const void *src = to_device ? (const void *)host_buf : d;

		if (opt.async_copies)
			rc = CALL(rt, cudaMemcpyAsync, dst, src, bytes, k,
			          (cudaStream_t)h.stream);
		else
			rc = CALL(rt, cudaMemcpy, dst, src, bytes, k);
	}
	check("copy", rc);
}

/* ---- results ---- */

#define MAX_SYNC_SAMPLES 1024

static struct {
	unsigned long long rounds, launches, syncs, allocs, alloc_errors,
	    frees, copies, copy_bytes;
	int alloc_error_code;
	uint64_t sync_ns, sync_max_ns, launch_ns;
	uint64_t sync_samples[MAX_SYNC_SAMPLES];
	unsigned nsync_samples;
	uint64_t start_ns, end_ns;
} res;

static void round_once(uint64_t *next_launch, uint64_t period)
{
	uint64_t *ptrs = calloc((size_t)opt.allocs + 1, sizeof(*ptrs));
	uint64_t dev = 0;
	long i, j, launched = 0, nptrs = 0;

	if (ptrs == NULL) {
		perror("cudastub-driver");
		exit(1);
	}
	if (opt.graphs > 0)
		instantiate_round();
	for (i = 0; i < opt.allocs; i++) {
		int last = i == opt.allocs - 1;
		size_t bytes = opt.fail_alloc && last ? CUDASTUB_FAIL_BYTES_DEFAULT
		                                      : opt.alloc_bytes;
		uint64_t addr;
		int rc = allocate(bytes, &addr);

		res.allocs++;
		if (rc != 0) {
			res.alloc_errors++;
			res.alloc_error_code = rc;
			if (!(opt.fail_alloc && last)) {
				fprintf(stderr, "cudastub-driver: allocation of %zu "
				                "bytes returned %d\n",
				        bytes, rc);
				unexpected_errors++;
			}
		} else {
			ptrs[nptrs++] = addr;
		}
	}
	if (opt.fail_alloc && res.alloc_errors == 0) {
		fprintf(stderr, "cudastub-driver: the failing allocation succeeded\n");
		unexpected_errors++;
	}
	if (nptrs > 0)
		dev = ptrs[0];
	for (i = 0; i < opt.copies; i++) {
		copy(dev, opt.copy_bytes, 1);
		copy(dev, opt.copy_bytes, 0);
		res.copies += 2;
		res.copy_bytes += 2 * opt.copy_bytes;
	}
	for (j = 0; j < opt.syncs && !stop_requested; j++) {
		long target = (long)(((long long)(j + 1) * opt.launches) / opt.syncs);
		uint64_t t0, d;

		for (; launched < target && !stop_requested; launched++) {
			if (period > 0) {
				sleep_until(*next_launch);
				*next_launch += period;
			}
			t0 = now_ns();
			launch();
			res.launch_ns += now_ns() - t0;
			res.launches++;
		}
		t0 = now_ns();
		synchronize();
		d = now_ns() - t0;
		res.syncs++;
		res.sync_ns += d;
		if (d > res.sync_max_ns)
			res.sync_max_ns = d;
		if (res.nsync_samples < MAX_SYNC_SAMPLES)
			res.sync_samples[res.nsync_samples++] = d;
	}
	/* Launches left when there are no synchronizes. */
	for (; opt.syncs == 0 && launched < opt.launches && !stop_requested;
	     launched++) {
		uint64_t t0;

		if (period > 0) {
			sleep_until(*next_launch);
			*next_launch += period;
		}
		t0 = now_ns();
		launch();
		res.launch_ns += now_ns() - t0;
		res.launches++;
	}
	for (i = 0; i < opt.tail_syncs && !stop_requested; i++) {
		synchronize();
		res.syncs++;
	}
	for (i = 0; i < opt.exhaust && !stop_requested; i++)
		exhaust_once();
	if (opt.graphs > 0)
		destroy_round();
	for (i = 0; i < nptrs; i++) {
		release(ptrs[i]);
		res.frees++;
	}
	free(ptrs);
	res.rounds++;
}

static void json_string(const char *s)
{
	putchar('"');
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;

		if (c == '"' || c == '\\')
			printf("\\%c", c);
		else if (c < 0x20)
			printf("\\u%04x", c);
		else
			putchar(c);
	}
	putchar('"');
}

/* CUDASTUB_POOL_FRAGMENTATION as the library reads it (non-zero: on). */
static int fragmentation_env(void)
{
	const char *v = getenv("CUDASTUB_POOL_FRAGMENTATION");

	return v != NULL && *v != '\0' && strtoull(v, NULL, 0) != 0;
}

static void print_json(void)
{
	double secs = (double)(res.end_ns - res.start_ns) / 1e9;
	unsigned i;
	int n;

	printf("{\"api\":\"%s\",\"lib\":",
	       opt.api == API_DRIVER ? "driver" : "runtime");
	json_string(opt.lib);
	printf(",\"pid\":%d,\"launch\":\"%s\",\"sync\":\"%s\","
	       "\"default_stream\":%s,",
	       (int)getpid(), launch_names[opt.launch], sync_names[opt.sync],
	       opt.default_stream ? "true" : "false");
	printf("\"grid\":[%u,%u,%u],\"block\":[%u,%u,%u],", opt.grid[0],
	       opt.grid[1], opt.grid[2], opt.block[0], opt.block[1], opt.block[2]);
	printf("\"kernel_us\":%g,", stub_kernel_us ? stub_kernel_us() : -1.0);
	printf("\"rounds\":%llu,\"launches\":%llu,\"syncs\":%llu,"
	       "\"allocs\":%llu,\"alloc_errors\":%llu,\"alloc_error_code\":%d,"
	       "\"frees\":%llu,\"copies\":%llu,\"copy_bytes\":%llu,",
	       res.rounds, res.launches, res.syncs, res.allocs, res.alloc_errors,
	       res.alloc_error_code, res.frees, res.copies, res.copy_bytes);
	printf("\"graphs\":%ld,\"instantiations\":%llu,\"instantiate_errors\":%llu,"
	       "\"graph_launches\":%llu,\"exec_destroys\":%llu,",
	       opt.graphs, gres.instantiations, gres.instantiate_errors,
	       opt.launch == LAUNCH_GRAPH ? res.launches : 0ull,
	       gres.exec_destroys);
	printf("\"exhaustions\":%llu,\"pool_bytes\":%llu,"
	       "\"pool_fragmentation\":%d,\"pool_allocs\":%llu,"
	       "\"pool_oom\":%llu,\"pool_oom_fragmented\":%llu,"
	       "\"pool_trims\":%llu,\"pool_attribute_sets\":%llu,"
	       "\"pool_reserved_peak\":%llu,\"pool_reserved_after_trim\":%llu,",
	       gres.exhaustions, opt.exhaust > 0 ? opt.pool_bytes : 0ull,
	       fragmentation_env(), gres.pool_allocs, gres.pool_oom,
	       gres.pool_oom_fragmented, gres.pool_trims, gres.pool_attribute_sets,
	       (unsigned long long)gres.pool_reserved_peak,
	       (unsigned long long)gres.pool_reserved_after_trim);
	printf("\"calls\":{");
	for (i = 0, n = 0; i < (unsigned)ncounts; i++)
		printf("%s\"%s\":%llu", n++ ? "," : "", counts[i].name,
		       counts[i].calls);
	printf("},\"errors\":{");
	for (i = 0, n = 0; i < (unsigned)ncounts; i++)
		if (counts[i].errors > 0)
			printf("%s\"%s\":%llu", n++ ? "," : "", counts[i].name,
			       counts[i].errors);
	printf("},\"unexpected_errors\":%llu,", unexpected_errors);
	printf("\"sync_wall_ns\":%llu,\"sync_max_ns\":%llu,\"sync_ns\":[",
	       (unsigned long long)res.sync_ns,
	       (unsigned long long)res.sync_max_ns);
	for (i = 0; i < res.nsync_samples; i++)
		printf("%s%llu", i ? "," : "",
		       (unsigned long long)res.sync_samples[i]);
	printf("],\"launch_wall_ns\":%llu,\"start_ns\":%llu,\"end_ns\":%llu,"
	       "\"elapsed_ns\":%llu,\"launches_per_second\":%.1f}\n",
	       (unsigned long long)res.launch_ns,
	       (unsigned long long)res.start_ns, (unsigned long long)res.end_ns,
	       (unsigned long long)(res.end_ns - res.start_ns),
	       secs > 0 ? (double)res.launches / secs : 0.0);
	fflush(stdout);
}

int main(int argc, char **argv)
{
	uint64_t period = 0, next_launch, deadline = 0;

	parse_args(argc, argv);
	load();
	setup();
	if (opt.wait_start)
		wait_start();
	if (opt.loop) {
		struct sigaction sa = {.sa_handler = on_stop};

		sigaction(SIGINT, &sa, NULL);
		sigaction(SIGTERM, &sa, NULL);
	}
	if (opt.rate > 0)
		period = (uint64_t)(1e9 / opt.rate);
	res.start_ns = now_ns();
	next_launch = res.start_ns;
	if (opt.loop && opt.duration_ms > 0)
		deadline = res.start_ns + (uint64_t)opt.duration_ms * 1000000ull;
	for (long r = 1;; r++) {
		round_once(&next_launch, period);
		if (deadline && now_ns() >= deadline)
			break;
		if (stop_requested || (!opt.loop && r >= opt.rounds))
			break;
		if (opt.idle_ms > 0) {
			sleep_until(now_ns() + (uint64_t)opt.idle_ms * 1000000ull);
			next_launch = now_ns();
		}
	}
	res.end_ns = now_ns();
	if (h.pool != NULL) {
		if (opt.api == API_DRIVER)
			check("cuMemPoolDestroy",
			      CALL(drv, cuMemPoolDestroy, h.pool));
		else
			check("cudaMemPoolDestroy",
			      CALL(rt, cudaMemPoolDestroy, (cudaMemPool_t)h.pool));
	}
	print_json();
	fflush(stdout);
	if (opt.end_wait) {
		start_requested = 0;
		wait_start();
	}
	return unexpected_errors ? 1 : 0;
}
