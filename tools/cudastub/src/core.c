/*
 * core.c: the simulated device. Work is not executed: every stream keeps a
 * timeline (the time its last enqueued operation completes) and the
 * synchronize calls wait until that time, sleeping or spinning.
 */
#define _GNU_SOURCE
#include "core.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

/* ---- configuration ---- */

static struct stub_config config;
static pthread_once_t config_once = PTHREAD_ONCE_INIT;
static uint64_t kernel_ns_now; /* atomic: cudastub_set_kernel_us */

static double env_double(const char *name, double def, double min)
{
	const char *s = getenv(name);
	char *end;
	double v;

	if (s == NULL || *s == '\0')
		return def;
	errno = 0;
	v = strtod(s, &end);
	if (errno != 0 || *end != '\0' || v < min) {
		fprintf(stderr, "cudastub: ignoring %s=%s (want a number >= %g)\n",
		        name, s, min);
		return def;
	}
	return v;
}

static uint64_t env_u64(const char *name, uint64_t def)
{
	const char *s = getenv(name);
	char *end;
	unsigned long long v;

	if (s == NULL || *s == '\0')
		return def;
	errno = 0;
	v = strtoull(s, &end, 0);
	if (errno != 0 || *end != '\0' || *s == '-') {
		fprintf(stderr,
		        "cudastub: ignoring %s=%s (want a non-negative integer)\n",
		        name, s);
		return def;
	}
	return v;
}

static void config_load(void)
{
	const char *mode = getenv("CUDASTUB_MODE");

	config.kernel_ns =
	    (uint64_t)(env_double("CUDASTUB_KERNEL_US", 1000.0, 0.0) * 1000.0);
	config.mode = STUB_MODE_SLEEP;
	if (mode != NULL && strcmp(mode, "spin") == 0)
		config.mode = STUB_MODE_SPIN;
	else if (mode != NULL && *mode != '\0' && strcmp(mode, "sleep") != 0)
		fprintf(stderr,
		        "cudastub: ignoring CUDASTUB_MODE=%s (want sleep or spin)\n",
		        mode);
	config.copy_gbps = env_double("CUDASTUB_COPY_GBPS", 25.0, 1e-6);
	config.mem_bytes = env_u64("CUDASTUB_MEM_BYTES", 80ull << 30);
	config.fail_bytes = env_u64("CUDASTUB_FAIL_BYTES", 0xDEADBEEFull);
	config.queue_depth = (unsigned)env_u64("CUDASTUB_QUEUE_DEPTH", 1024);
	config.devices = (int)env_u64("CUDASTUB_DEVICES", 1);
	config.pool_bytes = env_u64("CUDASTUB_POOL_BYTES", config.mem_bytes);
	config.pool_fragmentation =
	    env_u64("CUDASTUB_POOL_FRAGMENTATION", 0) != 0;
	__atomic_store_n(&kernel_ns_now, config.kernel_ns, __ATOMIC_RELAXED);
}

const struct stub_config *stub_config(void)
{
	pthread_once(&config_once, config_load);
	return &config;
}

/*
 * CUDASTUB_CONTROL_FILE names a file holding a kernel time in µs. It is
 * re-read when it changes (checked at most every 20 ms), so a test or a
 * scenario can slow the "GPU" of a running process down and speed it up.
 */
static uint64_t control_checked_ns;
static struct timespec control_mtime;
static pthread_mutex_t control_mu = PTHREAD_MUTEX_INITIALIZER;

static void control_poll(void)
{
	const char *path = getenv("CUDASTUB_CONTROL_FILE");
	uint64_t now;
	struct stat st;
	FILE *f;
	double us;

	if (path == NULL || *path == '\0')
		return;
	now = stub_now();
	if (now - __atomic_load_n(&control_checked_ns, __ATOMIC_RELAXED) <
	    20000000ull)
		return;
	if (pthread_mutex_trylock(&control_mu) != 0)
		return;
	__atomic_store_n(&control_checked_ns, now, __ATOMIC_RELAXED);
	if (stat(path, &st) == 0 &&
	    (st.st_mtim.tv_sec != control_mtime.tv_sec ||
	     st.st_mtim.tv_nsec != control_mtime.tv_nsec)) {
		control_mtime = st.st_mtim;
		f = fopen(path, "r");
		if (f != NULL) {
			if (fscanf(f, "%lf", &us) == 1 && us >= 0)
				__atomic_store_n(&kernel_ns_now,
				                 (uint64_t)(us * 1000.0),
				                 __ATOMIC_RELAXED);
			fclose(f);
		}
	}
	pthread_mutex_unlock(&control_mu);
}

uint64_t stub_kernel_ns(void)
{
	stub_config();
	control_poll();
	return __atomic_load_n(&kernel_ns_now, __ATOMIC_RELAXED);
}

void stub_set_kernel_ns(uint64_t ns)
{
	stub_config();
	__atomic_store_n(&kernel_ns_now, ns, __ATOMIC_RELAXED);
}

uint64_t stub_copy_ns(size_t bytes)
{
	/* 1 GB/s is one byte per nanosecond. */
	return (uint64_t)((double)bytes / stub_config()->copy_gbps);
}

/* ---- time ---- */

uint64_t stub_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* What a spinning wait does between clock reads: the CPU's spin hint. */
#if defined(__x86_64__) || defined(__i386__)
#define cpu_relax() __builtin_ia32_pause()
#elif defined(__aarch64__)
#define cpu_relax() __asm__ __volatile__("yield" ::: "memory")
#else
#define cpu_relax() __asm__ __volatile__("" ::: "memory")
#endif

void stub_wait_until(uint64_t t)
{
	struct timespec ts;

	if (stub_config()->mode == STUB_MODE_SPIN) {
		while (stub_now() < t)
			cpu_relax();
		return;
	}
	ts.tv_sec = (time_t)(t / 1000000000ull);
	ts.tv_nsec = (long)(t % 1000000000ull);
	while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) ==
	       EINTR)
		;
}

/* ---- objects ---- */

struct stub_object {
	uint32_t kind;
	uint32_t flags;
	uint64_t a; /* event: completion time; function: kernel ns */
	uint64_t b; /* event: recorded */
};

void *stub_object_new(enum stub_kind kind)
{
	struct stub_object *o = calloc(1, sizeof(*o));

	if (o != NULL)
		o->kind = (uint32_t)kind;
	return o;
}

int stub_object_is(const void *obj, enum stub_kind kind)
{
	const struct stub_object *o = obj;

	return o != NULL && o->kind == (uint32_t)kind;
}

void stub_object_free(void *obj)
{
	struct stub_object *o = obj;

	if (o == NULL)
		return;
	o->kind = 0;
	free(o);
}

struct stub_function *stub_function_new(const char *name)
{
	struct stub_object *o = stub_object_new(STUB_KIND_FUNCTION);
	unsigned long long us;
	int n = 0;

	if (o == NULL)
		return NULL;
	if (name != NULL && sscanf(name, "sleep_%lluus%n", &us, &n) == 1 &&
	    name[n] == '\0')
		o->a = us * 1000ull;
	else
		o->a = UINT64_MAX; /* the configured kernel time */
	return (struct stub_function *)o;
}

int stub_is_function(const void *f)
{
	return stub_object_is(f, STUB_KIND_FUNCTION);
}

uint64_t stub_function_ns(const void *f)
{
	const struct stub_object *o = f;

	if (stub_is_function(f) && o->a != UINT64_MAX)
		return o->a;
	return stub_kernel_ns();
}

/* ---- streams ---- */

struct stub_stream {
	uint32_t kind;
	uint32_t flags;
	uint64_t busy_until; /* completion time of the last operation */
	uint64_t seq;        /* operations enqueued */
	uint64_t *ring;      /* completion times of the last queue_depth ops */
};

static pthread_mutex_t timeline_lock = PTHREAD_MUTEX_INITIALIZER;
static struct stub_stream default_stream = {.kind = STUB_KIND_STREAM};
static uint64_t device_busy_until;

struct stub_stream *stub_stream_get(const void *handle)
{
	const struct stub_stream *s = handle;

	if (handle == NULL || handle == (const void *)0x1 ||
	    handle == (const void *)0x2)
		return &default_stream;
	if (s->kind != STUB_KIND_STREAM)
		return NULL;
	return (struct stub_stream *)s;
}

struct stub_stream *stub_stream_new(void)
{
	struct stub_stream *s = calloc(1, sizeof(*s));

	if (s != NULL)
		s->kind = STUB_KIND_STREAM;
	return s;
}

int stub_stream_free(struct stub_stream *s)
{
	if (s == NULL || s == &default_stream || s->kind != STUB_KIND_STREAM)
		return -1;
	/* Work already enqueued still completes: the device keeps its time. */
	pthread_mutex_lock(&timeline_lock);
	s->kind = 0;
	pthread_mutex_unlock(&timeline_lock);
	free(s->ring);
	free(s);
	return 0;
}

uint64_t stub_enqueue(struct stub_stream *s, uint64_t dur_ns)
{
	unsigned depth = stub_config()->queue_depth;
	uint64_t now, start, end, oldest = 0;

	pthread_mutex_lock(&timeline_lock);
	now = stub_now();
	start = s->busy_until > now ? s->busy_until : now;
	end = start + dur_ns;
	s->busy_until = end;
	if (end > device_busy_until)
		device_busy_until = end;
	if (depth > 0) {
		if (s->ring == NULL)
			s->ring = calloc(depth, sizeof(*s->ring));
		if (s->ring != NULL) {
			uint64_t *slot = &s->ring[s->seq % depth];

			oldest = *slot;
			*slot = end;
		}
	}
	s->seq++;
	pthread_mutex_unlock(&timeline_lock);
	/* A full queue blocks the host until its oldest operation is done. */
	if (oldest > now)
		stub_wait_until(oldest);
	return end;
}

uint64_t stub_stream_done_at(struct stub_stream *s)
{
	uint64_t t;

	pthread_mutex_lock(&timeline_lock);
	t = s->busy_until;
	pthread_mutex_unlock(&timeline_lock);
	return t;
}

uint64_t stub_device_done_at(void)
{
	uint64_t t;

	pthread_mutex_lock(&timeline_lock);
	t = device_busy_until;
	pthread_mutex_unlock(&timeline_lock);
	return t;
}

/* ---- events ---- */

void stub_event_record(void *ev, struct stub_stream *s)
{
	struct stub_object *o = ev;
	uint64_t now = stub_now();

	pthread_mutex_lock(&timeline_lock);
	o->a = s->busy_until > now ? s->busy_until : now;
	o->b = 1;
	pthread_mutex_unlock(&timeline_lock);
}

int stub_event_recorded(const void *ev)
{
	const struct stub_object *o = ev;
	int r;

	pthread_mutex_lock(&timeline_lock);
	r = o->b != 0;
	pthread_mutex_unlock(&timeline_lock);
	return r;
}

uint64_t stub_event_at(const void *ev)
{
	const struct stub_object *o = ev;
	uint64_t t;

	pthread_mutex_lock(&timeline_lock);
	t = o->a;
	pthread_mutex_unlock(&timeline_lock);
	return t;
}

/* ---- device memory ---- */

/* Device addresses come from a range no host mapping uses in practice: the
 * lower half for cuMemAlloc and friends, the upper half for pools. */
#define DEV_BASE 0x700000000000ull
#define DEV_SPAN (1ull << 40)
#define DEV_HALF (DEV_SPAN / 2)
#define DEV_ALIGN 512ull

struct allocation {
	uint64_t addr;
	uint64_t bytes;
};

static pthread_mutex_t mem_lock = PTHREAD_MUTEX_INITIALIZER;
static struct allocation *allocs;
static size_t nallocs, capallocs;
static uint64_t mem_used;
static uint64_t next_addr = DEV_BASE;

int stub_alloc(size_t bytes, uint64_t *addr)
{
	const struct stub_config *c = stub_config();
	uint64_t span = ((uint64_t)bytes + DEV_ALIGN - 1) & ~(DEV_ALIGN - 1);

	if (span == 0)
		span = DEV_ALIGN;
	if ((uint64_t)bytes == c->fail_bytes || span >= DEV_HALF)
		return -1;
	pthread_mutex_lock(&mem_lock);
	if (mem_used + (uint64_t)bytes > c->mem_bytes) {
		pthread_mutex_unlock(&mem_lock);
		return -1;
	}
	if (nallocs == capallocs) {
		size_t cap = capallocs ? capallocs * 2 : 64;
		struct allocation *n = realloc(allocs, cap * sizeof(*n));

		if (n == NULL) {
			pthread_mutex_unlock(&mem_lock);
			return -1;
		}
		allocs = n;
		capallocs = cap;
	}
	if (next_addr + span > DEV_BASE + DEV_HALF)
		next_addr = DEV_BASE;
	*addr = next_addr;
	next_addr += span;
	allocs[nallocs].addr = *addr;
	allocs[nallocs].bytes = bytes;
	nallocs++;
	mem_used += bytes;
	pthread_mutex_unlock(&mem_lock);
	return 0;
}

int stub_free(uint64_t addr)
{
	size_t i;

	pthread_mutex_lock(&mem_lock);
	for (i = nallocs; i-- > 0;) {
		if (allocs[i].addr == addr) {
			mem_used -= allocs[i].bytes;
			allocs[i] = allocs[--nallocs];
			pthread_mutex_unlock(&mem_lock);
			return 0;
		}
	}
	pthread_mutex_unlock(&mem_lock);
	return -1;
}

int stub_is_device_ptr(uint64_t addr)
{
	return addr >= DEV_BASE && addr < DEV_BASE + DEV_SPAN;
}

void stub_mem_info(size_t *free_bytes, size_t *total_bytes)
{
	const struct stub_config *c = stub_config();

	pthread_mutex_lock(&mem_lock);
	if (free_bytes != NULL)
		*free_bytes = (size_t)(c->mem_bytes - mem_used);
	if (total_bytes != NULL)
		*total_bytes = (size_t)c->mem_bytes;
	pthread_mutex_unlock(&mem_lock);
}

/* ---- memory pools ---- */

#define STUB_MAX_POOLS 8
#define POOL_SPAN (DEV_HALF / STUB_MAX_POOLS) /* 64 GiB of addresses each */

struct pool_block {
	uint64_t off, size;
};

struct stub_pool {
	uint32_t kind;
	uint32_t live;
	uint64_t base;  /* first address */
	uint64_t limit; /* live bytes at most */
	uint64_t arena; /* addresses blocks are placed in */
	uint64_t used, used_high, reserved, reserved_high, threshold;
	int reuse[3];
	struct pool_block *blocks; /* sorted by offset */
	size_t n, cap;
};

static pthread_mutex_t pool_lock = PTHREAD_MUTEX_INITIALIZER;
static struct stub_pool pools[STUB_MAX_POOLS];

/* Callers hold pool_lock. */
static struct stub_pool *pool_of(const void *handle)
{
	uintptr_t d = (uintptr_t)handle - (uintptr_t)pools;
	struct stub_pool *p;

	if ((uintptr_t)handle < (uintptr_t)pools || d >= sizeof(pools) ||
	    d % sizeof(pools[0]) != 0)
		return NULL;
	p = &pools[d / sizeof(pools[0])];
	return p->kind == STUB_KIND_POOL && p->live ? p : NULL;
}

struct stub_pool *stub_pool_new(uint64_t max_bytes)
{
	const struct stub_config *c = stub_config();
	struct stub_pool *p = NULL;
	int i;

	if (max_bytes == 0)
		max_bytes = c->pool_bytes;
	if (max_bytes > POOL_SPAN)
		max_bytes = POOL_SPAN;
	pthread_mutex_lock(&pool_lock);
	for (i = 0; i < STUB_MAX_POOLS; i++) {
		if (!pools[i].live) {
			p = &pools[i];
			break;
		}
	}
	if (p != NULL) {
		memset(p, 0, sizeof(*p));
		p->kind = STUB_KIND_POOL;
		p->live = 1;
		p->base = DEV_BASE + DEV_HALF + (uint64_t)i * POOL_SPAN;
		p->limit = max_bytes;
		/* Without fragmentation the addresses never run out first. */
		p->arena = c->pool_fragmentation ? max_bytes : POOL_SPAN;
		p->reuse[0] = p->reuse[1] = p->reuse[2] = 1;
	}
	pthread_mutex_unlock(&pool_lock);
	return p;
}

int stub_pool_free(void *pool)
{
	struct stub_pool *p;

	pthread_mutex_lock(&pool_lock);
	p = pool_of(pool);
	if (p != NULL) {
		free(p->blocks);
		memset(p, 0, sizeof(*p));
	}
	pthread_mutex_unlock(&pool_lock);
	return p != NULL ? 0 : -1;
}

int stub_is_pool(const void *pool)
{
	int r;

	pthread_mutex_lock(&pool_lock);
	r = pool_of(pool) != NULL;
	pthread_mutex_unlock(&pool_lock);
	return r;
}

int stub_pool_alloc(void *pool, size_t bytes, uint64_t *addr)
{
	uint64_t size = ((uint64_t)bytes + DEV_ALIGN - 1) & ~(DEV_ALIGN - 1);
	uint64_t at = 0;
	struct stub_pool *p;
	size_t i;

	if (size == 0)
		size = DEV_ALIGN;
	pthread_mutex_lock(&pool_lock);
	p = pool_of(pool);
	if (p == NULL || (uint64_t)bytes == stub_config()->fail_bytes ||
	    size > p->limit || p->used + size > p->limit)
		goto oom;
	/* First fit: the first gap between blocks (or after the last) that
	 * holds size. */
	for (i = 0; i < p->n; i++) {
		if (p->blocks[i].off - at >= size)
			break;
		at = p->blocks[i].off + p->blocks[i].size;
	}
	if (i == p->n && p->arena - at < size)
		goto oom;
	if (p->n == p->cap) {
		size_t cap = p->cap ? p->cap * 2 : 64;
		struct pool_block *nb = realloc(p->blocks, cap * sizeof(*nb));

		if (nb == NULL)
			goto oom;
		p->blocks = nb;
		p->cap = cap;
	}
	memmove(&p->blocks[i + 1], &p->blocks[i], (p->n - i) * sizeof(*p->blocks));
	p->blocks[i].off = at;
	p->blocks[i].size = size;
	p->n++;
	p->used += size;
	if (p->used > p->used_high)
		p->used_high = p->used;
	if (p->used > p->reserved)
		p->reserved = p->used;
	if (p->reserved > p->reserved_high)
		p->reserved_high = p->reserved;
	*addr = p->base + at;
	pthread_mutex_unlock(&pool_lock);
	return 0;
oom:
	pthread_mutex_unlock(&pool_lock);
	return -1;
}

int stub_pool_release(uint64_t addr)
{
	struct stub_pool *p;
	uint64_t off;
	size_t lo, hi;
	int i = (int)((addr - (DEV_BASE + DEV_HALF)) / POOL_SPAN);

	if (addr < DEV_BASE + DEV_HALF || addr >= DEV_BASE + DEV_SPAN)
		return 1;
	pthread_mutex_lock(&pool_lock);
	p = &pools[i];
	if (!p->live) {
		pthread_mutex_unlock(&pool_lock);
		return -1;
	}
	off = addr - p->base;
	for (lo = 0, hi = p->n; lo < hi;) {
		size_t mid = lo + (hi - lo) / 2;

		if (p->blocks[mid].off < off)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (lo == p->n || p->blocks[lo].off != off) {
		pthread_mutex_unlock(&pool_lock);
		return -1;
	}
	p->used -= p->blocks[lo].size;
	memmove(&p->blocks[lo], &p->blocks[lo + 1],
	        (p->n - lo - 1) * sizeof(*p->blocks));
	p->n--;
	/* Memory above the release threshold goes back to the device. */
	if (p->reserved > p->threshold)
		p->reserved = p->used > p->threshold ? p->used : p->threshold;
	pthread_mutex_unlock(&pool_lock);
	return 0;
}

void stub_pool_trim(void *pool, uint64_t keep)
{
	struct stub_pool *p;

	pthread_mutex_lock(&pool_lock);
	p = pool_of(pool);
	if (p != NULL && p->reserved > keep)
		p->reserved = p->used > keep ? p->used : keep;
	pthread_mutex_unlock(&pool_lock);
}

int stub_pool_set_attr(void *pool, int attr, const void *value)
{
	struct stub_pool *p;
	int r = 0;

	if (value == NULL)
		return -1;
	pthread_mutex_lock(&pool_lock);
	p = pool_of(pool);
	if (p == NULL) {
		r = -1;
	} else if (attr >= 1 && attr <= 3) {
		p->reuse[attr - 1] = *(const int *)value != 0;
	} else if (attr == 4) {
		p->threshold = *(const uint64_t *)value;
	} else if ((attr == 6 || attr == 8) && *(const uint64_t *)value == 0) {
		/* The high watermarks can only be reset. */
		if (attr == 6)
			p->reserved_high = p->reserved;
		else
			p->used_high = p->used;
	} else {
		r = -1;
	}
	pthread_mutex_unlock(&pool_lock);
	return r;
}

int stub_pool_get_attr(void *pool, int attr, void *value)
{
	struct stub_pool *p;
	uint64_t v = 0;
	int r = 0;

	if (value == NULL)
		return -1;
	pthread_mutex_lock(&pool_lock);
	p = pool_of(pool);
	if (p == NULL || attr < 1 || attr > 8) {
		r = -1;
	} else if (attr <= 3) {
		*(int *)value = p->reuse[attr - 1];
	} else {
		switch (attr) {
		case 4:
			v = p->threshold;
			break;
		case 5:
			v = p->reserved;
			break;
		case 6:
			v = p->reserved_high;
			break;
		case 7:
			v = p->used;
			break;
		default:
			v = p->used_high;
		}
		*(uint64_t *)value = v;
	}
	pthread_mutex_unlock(&pool_lock);
	return r;
}

/* ---- errors (the driver and runtime codes used here coincide) ---- */

struct error_text {
	int code;
	const char *name;
	const char *text;
};

static const struct error_text errors[] = {
    {0, "CUDA_SUCCESS", "no error"},
    {1, "CUDA_ERROR_INVALID_VALUE", "invalid argument"},
    {2, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
    {3, "CUDA_ERROR_NOT_INITIALIZED", "initialization error"},
    {4, "CUDA_ERROR_DEINITIALIZED", "driver shutting down"},
    {100, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"},
    {101, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"},
    {201, "CUDA_ERROR_INVALID_CONTEXT", "invalid device context"},
    {301, "CUDA_ERROR_FILE_NOT_FOUND", "file not found"},
    {400, "CUDA_ERROR_INVALID_HANDLE", "invalid resource handle"},
    {500, "CUDA_ERROR_NOT_FOUND", "named symbol not found"},
    {600, "CUDA_ERROR_NOT_READY", "device not ready"},
    {801, "CUDA_ERROR_NOT_SUPPORTED", "operation not supported"},
    {999, "CUDA_ERROR_UNKNOWN", "unknown error"},
};

static const struct error_text *error_find(int code)
{
	size_t i;

	for (i = 0; i < sizeof(errors) / sizeof(errors[0]); i++)
		if (errors[i].code == code)
			return &errors[i];
	return NULL;
}

const char *stub_error_name(int code)
{
	const struct error_text *e = error_find(code);

	return e ? e->name : NULL;
}

const char *stub_error_string(int code)
{
	const struct error_text *e = error_find(code);

	return e ? e->text : NULL;
}
