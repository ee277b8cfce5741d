/*
 * realcall: opens a CUDA driver library with dlopen (the real
 * libcuda.so.1 by default) and makes known numbers of calls, so that the
 * probes can be checked against a real driver where no GPU is: cuInit
 * once, then cuStreamSynchronize(NULL) S times and cuMemAlloc_v2 A times.
 * Without a device each returns an error (CUDA_ERROR_NOT_INITIALIZED after
 * a failed cuInit); the codes are the ground truth too.
 *
 *   realcall [-l LIB] [-s SYNCS] [-a ALLOCS]
 *
 * Prints "realcall: ready pid=P" on stderr, waits for a byte (or EOF) on
 * stdin, makes the calls and prints one JSON line on stdout:
 *   {"init":RC,"syncs":S,"sync_rc":RC,"allocs":A,"alloc_rc":RC}
 * Exit status 1 when the library or a symbol is missing, 2 for bad flags.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

typedef int (*init_fn)(unsigned);
typedef int (*sync_fn)(void *);
typedef int (*alloc_fn)(uint64_t *, size_t);

static void *sym(void *h, const char *name)
{
	void *p = dlsym(h, name);
	if (p == NULL) {
		fprintf(stderr, "realcall: %s: %s\n", name, dlerror());
		exit(1);
	}
	return p;
}

int main(int argc, char **argv)
{
	const char *lib = "libcuda.so.1";
	long syncs = 10, allocs = 100;
	int c;

	while ((c = getopt(argc, argv, "l:s:a:")) != -1) {
		switch (c) {
		case 'l':
			lib = optarg;
			break;
		case 's':
			syncs = atol(optarg);
			break;
		case 'a':
			allocs = atol(optarg);
			break;
		default:
			fprintf(stderr, "usage: realcall [-l LIB] [-s SYNCS] [-a ALLOCS]\n");
			return 2;
		}
	}
	void *h = dlopen(lib, RTLD_NOW | RTLD_GLOBAL);
	if (h == NULL) {
		fprintf(stderr, "realcall: %s\n", dlerror());
		return 1;
	}
	init_fn cu_init = (init_fn)sym(h, "cuInit");
	sync_fn cu_sync = (sync_fn)sym(h, "cuStreamSynchronize");
	alloc_fn cu_alloc = (alloc_fn)sym(h, "cuMemAlloc_v2");

	fprintf(stderr, "realcall: ready pid=%d\n", (int)getpid());
	fflush(stderr);
	char b;
	if (read(0, &b, 1) < 0)
		return 1;

	int init_rc = cu_init(0), sync_rc = 0, alloc_rc = 0;
	for (long i = 0; i < syncs; i++)
		sync_rc = cu_sync(NULL);
	for (long i = 0; i < allocs; i++) {
		uint64_t p = 0;
		alloc_rc = cu_alloc(&p, 1 << 20);
	}
	printf("{\"init\":%d,\"syncs\":%ld,\"sync_rc\":%d,\"allocs\":%ld,"
	       "\"alloc_rc\":%d}\n",
	       init_rc, syncs, sync_rc, allocs, alloc_rc);
	return 0;
}
