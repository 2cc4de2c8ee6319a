// MetalCPU's device side: threadgroups as fibers (see include/MetalCPURuntime.h).
//
// Scheduling: a host thread runs one threadgroup at a time. Every GPU thread of it is a fiber
// with its own stack; the scheduler resumes ready fibers in thread-index order, round after
// round. A fiber runs until it reaches a SIMD-group function or a barrier (it then waits until
// its SIMD-group or threadgroup has all arrived; the last to arrive releases the others and
// goes on) or returns. Lanes that returned take no part in later collectives, as inactive
// lanes on the GPU. Lanes of one SIMD-group at different SIMD-group functions at once (divergent
// control flow around a collective, which the emulation does not model) fail the dispatch, and
// so does a threadgroup where no thread can go on.
#if defined(__linux__)
#define _GNU_SOURCE
#include "MetalCPURuntime.h"
#include <dlfcn.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

enum { READY, WAITING_SIMD, WAITING_GROUP, DONE };

typedef struct fiber {
    void *sp;          // saved stack pointer (fast switch)
    ucontext_t *uc;    // the portable switch's context (kept apart: it is ~1 KB)
    unsigned char *stack;  // lowest usable byte, above the guard page
    size_t stack_size;
    int state;
    uint32_t wait_gen;
    mtlcpu_builtins b;
} fiber;

typedef struct simdgroup {
    uint32_t live;     // lanes that have not returned
    uint32_t arrived;  // lanes waiting at the current collective (mask)
    uint32_t count;
    int32_t kind, site;
    uint32_t size;
    uint32_t gen;
    uint32_t active[2];
    mtlcpu_cache cache[2];
    _Alignas(64) unsigned char values[2][MTLCPU_SIMD_WIDTH * MTLCPU_MAX_VALUE_BYTES];
} simdgroup;

typedef struct worker {
    fiber *fibers;
    uint32_t fiber_count;  // fibers with a stack
    simdgroup *groups;
    uint32_t group_capacity;
    void *sched_sp;
    ucontext_t sched_uc;
    fiber *current;
    mtlcpu_dispatch *d;
    uint32_t threads;  // in the running threadgroup
    uint32_t live;
    uint32_t barrier_count;
    int32_t barrier_site;
    int aborted;
    int use_uc;
    mtlcpu_uint3 group_pos;
    volatile sig_atomic_t in_fiber;  // a fault now is the kernel's
    sigjmp_buf fault_jump;           // back into run_group after a fault
    void *alt_stack;
} worker;

static __thread worker *tls_worker;
static pthread_key_t worker_key;
static pthread_once_t worker_once = PTHREAD_ONCE_INIT;

// MARK: context switch

#if defined(__x86_64__)
// Saves the callee-saved registers on the current stack, stores the stack pointer in *save,
// and resumes the context whose stack pointer is `load`. A new fiber's stack holds a frame
// that "returns" into mtlcpu_fiber_start with r12 = the fiber and r13 = its main function.
void mtlcpu_switch(void **save, void *load) __attribute__((visibility("hidden")));
extern char mtlcpu_fiber_start[] __attribute__((visibility("hidden")));
__asm__(
    ".text\n"
    ".p2align 4\n"
    ".globl mtlcpu_switch\n"
    ".hidden mtlcpu_switch\n"
    ".type mtlcpu_switch,@function\n"
    "mtlcpu_switch:\n"
    "  pushq %rbp\n"
    "  pushq %rbx\n"
    "  pushq %r12\n"
    "  pushq %r13\n"
    "  pushq %r14\n"
    "  pushq %r15\n"
    "  movq %rsp, (%rdi)\n"
    "  movq %rsi, %rsp\n"
    "  popq %r15\n"
    "  popq %r14\n"
    "  popq %r13\n"
    "  popq %r12\n"
    "  popq %rbx\n"
    "  popq %rbp\n"
    "  ret\n"
    ".size mtlcpu_switch, .-mtlcpu_switch\n"
    ".globl mtlcpu_fiber_start\n"
    ".hidden mtlcpu_fiber_start\n"
    ".type mtlcpu_fiber_start,@function\n"
    "mtlcpu_fiber_start:\n"
    "  movq %r12, %rdi\n"
    "  callq *%r13\n"
    "  ud2\n"
    ".size mtlcpu_fiber_start, .-mtlcpu_fiber_start\n");
int mtlcpu_has_fast_switch(void) { return 1; }
#else
int mtlcpu_has_fast_switch(void) { return 0; }
#endif

static void fiber_main(fiber *f);

static void fiber_main_uc(void) { fiber_main(tls_worker->current); }

/// Prepares `f` to start at fiber_main on its own stack.
static void fiber_prepare(worker *w, fiber *f) {
#if defined(__x86_64__)
    if (!w->use_uc) {
        // Stack tops staggered by a cache line per fiber: at one page offset they would all
        // compete for the same few cache sets.
        uintptr_t color = (uintptr_t)((f - w->fibers) % 61) * 64;
        uintptr_t top = ((uintptr_t)(f->stack + f->stack_size) - color) & ~(uintptr_t)15;
        uint64_t *s = (uint64_t *)(top - 72);
        s[0] = 0;                             // r15
        s[1] = 0;                             // r14
        s[2] = (uint64_t)(uintptr_t)fiber_main;  // r13
        s[3] = (uint64_t)(uintptr_t)f;        // r12
        s[4] = 0;                             // rbx
        s[5] = 0;                             // rbp
        s[6] = (uint64_t)(uintptr_t)mtlcpu_fiber_start;
        f->sp = s;  // after the pops and ret, rsp = top - 16: aligned for the call
        return;
    }
#endif
    if (!f->uc) f->uc = malloc(sizeof(ucontext_t));
    getcontext(f->uc);
    f->uc->uc_stack.ss_sp = f->stack;
    f->uc->uc_stack.ss_size = f->stack_size;
    f->uc->uc_link = NULL;
    makecontext(f->uc, fiber_main_uc, 0);
}

/// Scheduler -> fiber.
static void resume(worker *w, fiber *f) {
    w->current = f;
    w->in_fiber = 1;
#if defined(__x86_64__)
    if (!w->use_uc) {
        mtlcpu_switch(&w->sched_sp, f->sp);
        w->in_fiber = 0;
        return;
    }
#endif
    swapcontext(&w->sched_uc, f->uc);
    w->in_fiber = 0;
}

/// Fiber -> scheduler.
static void yield(worker *w, fiber *f) {
#if defined(__x86_64__)
    if (!w->use_uc) {
        mtlcpu_switch(&f->sp, w->sched_sp);
        return;
    }
#endif
    swapcontext(f->uc, &w->sched_uc);
}

// MARK: workers

static void worker_free(void *p) {
    worker *w = p;
    if (!w) return;
    long page = sysconf(_SC_PAGESIZE);
    for (uint32_t i = 0; i < w->fiber_count; i++) {
        munmap(w->fibers[i].stack - page, w->fibers[i].stack_size + (size_t)page);
        free(w->fibers[i].uc);
    }
    free(w->fibers);
    free(w->groups);
    if (w->alt_stack) {
        stack_t none = {.ss_flags = SS_DISABLE};
        sigaltstack(&none, NULL);
        free(w->alt_stack);
    }
    free(w);
}

static void worker_key_init(void) { pthread_key_create(&worker_key, worker_free); }

static worker *worker_get(void) {
    if (tls_worker) return tls_worker;
    pthread_once(&worker_once, worker_key_init);
    worker *w = calloc(1, sizeof(worker));
    if (!w) return NULL;
    pthread_setspecific(worker_key, w);
    tls_worker = w;
    return w;
}

/// Makes room for `threads` fibers of `stack_bytes` each (with a guard page below each stack).
static int worker_reserve(worker *w, uint32_t threads, size_t stack_bytes) {
    long page = sysconf(_SC_PAGESIZE);
    stack_bytes = (stack_bytes + (size_t)page - 1) / (size_t)page * (size_t)page;
    if (w->fiber_count > 0 && w->fibers[0].stack_size != stack_bytes) {
        for (uint32_t i = 0; i < w->fiber_count; i++) {
            munmap(w->fibers[i].stack - page, w->fibers[i].stack_size + (size_t)page);
            free(w->fibers[i].uc);
        }
        w->fiber_count = 0;
    }
    if (threads > w->fiber_count) {
        fiber *grown = realloc(w->fibers, threads * sizeof(fiber));
        if (!grown) return 0;
        w->fibers = grown;
        for (uint32_t i = w->fiber_count; i < threads; i++) {
            unsigned char *m = mmap(NULL, stack_bytes + (size_t)page, PROT_READ | PROT_WRITE,
                                    MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK, -1, 0);
            if (m == MAP_FAILED) return 0;
            mprotect(m, (size_t)page, PROT_NONE);
            memset(&w->fibers[i], 0, sizeof(fiber));
            w->fibers[i].stack = m + page;
            w->fibers[i].stack_size = stack_bytes;
            w->fiber_count = i + 1;
        }
    }
    uint32_t groups = (threads + MTLCPU_SIMD_WIDTH - 1) / MTLCPU_SIMD_WIDTH;
    if (groups > w->group_capacity) {
        free(w->groups);
        if (posix_memalign((void **)&w->groups, 64, groups * sizeof(simdgroup)) != 0) {
            w->groups = NULL;
            w->group_capacity = 0;
            return 0;
        }
        w->group_capacity = groups;
    }
    return 1;
}

// MARK: failures

static const char *kind_name(int32_t kind) {
    static const char *names[] = {
        "?", "simd_sum", "simd_product", "simd_min", "simd_max", "simd_and", "simd_or", "simd_xor",
        "simd_all", "simd_any", "simd_shuffle", "simd_shuffle_down", "simd_shuffle_up",
        "simd_shuffle_xor", "simd_shuffle_rotate_down", "simd_shuffle_rotate_up", "simd_broadcast",
        "simd_broadcast_first", "simd_prefix_exclusive_sum", "simd_prefix_inclusive_sum",
        "simd_prefix_exclusive_product", "simd_prefix_inclusive_product", "simd_ballot",
        "simdgroup_barrier", "simd_is_first"};
    if (kind > 0 && kind < (int32_t)(sizeof(names) / sizeof(names[0]))) return names[kind];
    return "a SIMD-group function";
}

/// Records the dispatch's first failure (later ones are dropped).
static void record(mtlcpu_dispatch *d, const char *fmt, ...) {
    if (__atomic_exchange_n(&d->failed, 1, __ATOMIC_ACQ_REL) != 0) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(d->error, sizeof(d->error), fmt, ap);
    va_end(ap);
}

/// Fails the running threadgroup from inside a fiber; the fiber is never resumed.
static void abort_from_fiber(worker *w, const char *message) {
    fiber *f = w->current;
    record(w->d, "threadgroup (%u,%u,%u), thread (%u,%u,%u): %s", w->group_pos.x, w->group_pos.y,
           w->group_pos.z, f->b.thread_position_in_threadgroup.x, f->b.thread_position_in_threadgroup.y,
           f->b.thread_position_in_threadgroup.z, message);
    w->aborted = 1;
    for (;;) yield(w, f);
}

// MARK: collectives

static void simd_complete(worker *w, simdgroup *g, uint32_t first) {
    uint32_t slot = g->gen & 1;
    g->active[slot] = g->arrived;
    g->cache[slot].done = 0;
    for (uint32_t l = 0; l < MTLCPU_SIMD_WIDTH; l++) {
        if (g->arrived & (1u << l)) {
            fiber *f = &w->fibers[first + l];
            if (f->state == WAITING_SIMD) f->state = READY;
        }
    }
    g->arrived = 0;
    g->count = 0;
    g->gen++;
}

static void group_complete(worker *w) {
    for (uint32_t i = 0; i < w->threads; i++) {
        if (w->fibers[i].state == WAITING_GROUP) w->fibers[i].state = READY;
    }
    w->barrier_count = 0;
}

static const void *api_simd_exchange(int32_t kind, int32_t site, const void *value, uint32_t size,
                                     uint32_t *active, uint32_t *lane, mtlcpu_cache **cache) {
    worker *w = tls_worker;
    fiber *f = w->current;
    uint32_t sg = f->b.simdgroup_index_in_threadgroup, l = f->b.thread_index_in_simdgroup;
    simdgroup *g = &w->groups[sg];
    if (size > MTLCPU_MAX_VALUE_BYTES) abort_from_fiber(w, "a SIMD-group function's value is over 64 bytes");
    if (g->count == 0) {
        g->kind = kind;
        g->site = site;
        g->size = size;
    } else if (g->kind != kind || g->site != site) {
        char m[256];
        snprintf(m, sizeof(m),
                 "divergent SIMD-group functions: lane %u reached %s (site %d) while other lanes wait at %s "
                 "(site %d); the emulation needs every active lane at the same call",
                 l, kind_name(kind), site, kind_name(g->kind), g->site);
        abort_from_fiber(w, m);
    }
    uint32_t gen = g->gen, slot = gen & 1;
    memcpy(g->values[slot] + l * size, value, size);
    g->arrived |= 1u << l;
    g->count++;
    if (g->count == g->live) {
        simd_complete(w, g, sg * MTLCPU_SIMD_WIDTH);
    } else {
        f->state = WAITING_SIMD;
        f->wait_gen = gen;
        yield(w, f);
    }
    *active = g->active[slot];
    *lane = l;
    *cache = &g->cache[slot];
    return g->values[slot];
}

static void api_threadgroup_barrier(int32_t site) {
    worker *w = tls_worker;
    fiber *f = w->current;
    if (w->barrier_count == 0) {
        w->barrier_site = site;
    } else if (w->barrier_site != site) {
        char m[200];
        snprintf(m, sizeof(m), "threadgroup_barrier at site %d while other threads wait at the one at site %d", site,
                 w->barrier_site);
        abort_from_fiber(w, m);
    }
    w->barrier_count++;
    if (w->barrier_count == w->live) {
        group_complete(w);
        return;
    }
    f->state = WAITING_GROUP;
    yield(w, f);
}

static void api_fail(const char *message) { abort_from_fiber(tls_worker, message); }

static const mtlcpu_api api = {
    MTLCPU_ABI_VERSION, sizeof(mtlcpu_builtins), api_simd_exchange, api_threadgroup_barrier, api_fail};

const mtlcpu_api *mtlcpu_api_table(void) { return &api; }

// MARK: memory faults

static struct sigaction previous_segv, previous_bus, previous_fpe;
static pthread_once_t fault_once = PTHREAD_ONCE_INIT;

/// Where `address` is, for the report: past the end of a bound buffer, in a stack's guard.
static void describe_fault(worker *w, uintptr_t address, char *out, size_t n) {
    mtlcpu_dispatch *d = w->d;
    long page = sysconf(_SC_PAGESIZE);
    for (uint32_t i = 0; i < w->fiber_count; i++) {
        uintptr_t lo = (uintptr_t)w->fibers[i].stack - (uintptr_t)page;
        if (address >= lo && address < (uintptr_t)w->fibers[i].stack) {
            snprintf(out, n, "stack overflow (each thread has %u bytes of stack)", d->stack_bytes);
            return;
        }
    }
    int best = -1;
    uintptr_t best_distance = 0;
    for (int i = 0; i < MTLCPU_MAX_BUFFERS; i++) {
        if (!d->buffers[i] || !d->buffer_lengths[i]) continue;
        uintptr_t end = (uintptr_t)d->buffers[i] + d->buffer_lengths[i];
        if (address >= end && (best < 0 || address - end < best_distance)) {
            best = i;
            best_distance = address - end;
        }
    }
    if (best >= 0 && best_distance < (uintptr_t)page + 64) {
        snprintf(out, n, "memory fault at %p, %lu bytes past the end of [[buffer(%d)]] (%llu bytes from its bound offset)",
                 (void *)address, (unsigned long)best_distance, best, (unsigned long long)d->buffer_lengths[best]);
    } else {
        snprintf(out, n, "memory fault at %p, outside every bound buffer", (void *)address);
    }
}

static void on_fault(int sig, siginfo_t *info, void *context) {
    worker *w = tls_worker;
    if (w && w->in_fiber) {
        char where[300];
        if (sig == SIGFPE) {
            snprintf(where, sizeof(where), "integer division by zero (a GPU gives an undefined value; the emulation stops)");
        } else {
            describe_fault(w, (uintptr_t)info->si_addr, where, sizeof(where));
        }
        fiber *f = w->current;
        record(w->d, "threadgroup (%u,%u,%u), thread (%u,%u,%u): %s", w->group_pos.x, w->group_pos.y, w->group_pos.z,
               f->b.thread_position_in_threadgroup.x, f->b.thread_position_in_threadgroup.y,
               f->b.thread_position_in_threadgroup.z, where);
        w->in_fiber = 0;
        siglongjmp(w->fault_jump, 1);
    }
    // Not a kernel's: hand it to whoever handled it before (or the default: a crash).
    struct sigaction *prev = sig == SIGSEGV ? &previous_segv : sig == SIGBUS ? &previous_bus : &previous_fpe;
    if (prev->sa_flags & SA_SIGINFO) {
        prev->sa_sigaction(sig, info, context);
    } else if (prev->sa_handler != SIG_IGN && prev->sa_handler != SIG_DFL) {
        prev->sa_handler(sig);
    } else {
        signal(sig, SIG_DFL);  // the faulting instruction runs again and takes the default
    }
}

static void install_fault_handler(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_sigaction = on_fault;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_NODEFER;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGSEGV, &sa, &previous_segv);
    sigaction(SIGBUS, &sa, &previous_bus);
    sigaction(SIGFPE, &sa, &previous_fpe);
}

/// The handler runs on its own stack: a fiber's may be the one that overflowed.
static int worker_arm_faults(worker *w) {
    pthread_once(&fault_once, install_fault_handler);
    if (w->alt_stack) return 1;
    size_t size = 64 * 1024;
    w->alt_stack = malloc(size);
    if (!w->alt_stack) return 0;
    stack_t st = {.ss_sp = w->alt_stack, .ss_size = size, .ss_flags = 0};
    return sigaltstack(&st, NULL) == 0;
}

// MARK: threadgroups

static void fiber_main(fiber *f) {
    worker *w = tls_worker;
    w->d->fn(w->d->buffers, &f->b);
    // Returned: the thread leaves its SIMD-group and threadgroup, which may complete a
    // collective or barrier the others wait at.
    f->state = DONE;
    w->live--;
    uint32_t sg = f->b.simdgroup_index_in_threadgroup;
    simdgroup *g = &w->groups[sg];
    g->live--;
    if (g->count > 0 && g->count == g->live) simd_complete(w, g, sg * MTLCPU_SIMD_WIDTH);
    if (w->barrier_count > 0 && w->barrier_count == w->live) group_complete(w);
    for (;;) yield(w, f);
}

static uint32_t min_u32(uint32_t a, uint32_t b) { return a < b ? a : b; }

static void run_group(worker *w, mtlcpu_dispatch *d, uint64_t index) {
    mtlcpu_uint3 gs = d->group_size, n = d->groups;
    mtlcpu_uint3 pos = {(uint32_t)(index % n.x), (uint32_t)(index / n.x % n.y), (uint32_t)(index / n.x / n.y)};
    // Threadgroups on the edge of a dispatchThreads grid are smaller.
    mtlcpu_uint3 size = {min_u32(gs.x, d->grid.x - pos.x * gs.x), min_u32(gs.y, d->grid.y - pos.y * gs.y),
                         min_u32(gs.z, d->grid.z - pos.z * gs.z)};
    uint32_t threads = size.x * size.y * size.z;
    uint32_t simdgroups = (threads + MTLCPU_SIMD_WIDTH - 1) / MTLCPU_SIMD_WIDTH;
    if (!worker_reserve(w, threads, d->stack_bytes)) {
        record(d, "cannot allocate stacks for %u threads", threads);
        return;
    }
    w->group_pos = pos;
    w->threads = threads;
    w->live = threads;
    w->barrier_count = 0;
    w->aborted = 0;
    for (uint32_t s = 0; s < simdgroups; s++) {
        simdgroup *g = &w->groups[s];
        g->live = min_u32(MTLCPU_SIMD_WIDTH, threads - s * MTLCPU_SIMD_WIDTH);
        g->arrived = 0;
        g->count = 0;
        g->gen = 0;
    }
    for (uint32_t i = 0; i < threads; i++) {
        fiber *f = &w->fibers[i];
        mtlcpu_uint3 t = {i % size.x, i / size.x % size.y, i / size.x / size.y};
        f->b.thread_position_in_threadgroup = t;
        f->b.threadgroup_position_in_grid = pos;
        f->b.threads_per_threadgroup = size;
        f->b.threadgroups_per_grid = n;
        f->b.threads_per_grid = d->grid;
        f->b.thread_position_in_grid =
            (mtlcpu_uint3){pos.x * gs.x + t.x, pos.y * gs.y + t.y, pos.z * gs.z + t.z};
        f->b.thread_index_in_threadgroup = i;
        f->b.thread_index_in_simdgroup = i % MTLCPU_SIMD_WIDTH;
        f->b.simdgroup_index_in_threadgroup = i / MTLCPU_SIMD_WIDTH;
        f->b.simdgroups_per_threadgroup = simdgroups;
        f->b.threads_per_simdgroup = MTLCPU_SIMD_WIDTH;
        f->state = READY;
        fiber_prepare(w, f);
    }
    // No mask to save: the handler runs with SA_NODEFER and an empty sa_mask, so the mask it
    // leaves is the one it found (and a syscall a threadgroup is measurable).
    if (sigsetjmp(w->fault_jump, 0) != 0) {
        w->aborted = 1;  // a kernel faulted; its fibers are abandoned
        return;
    }
    while (w->live > 0) {
        int ran = 0;
        for (uint32_t i = 0; i < threads; i++) {
            if (w->fibers[i].state != READY) continue;
            ran = 1;
            resume(w, &w->fibers[i]);
            if (w->aborted) return;
        }
        if (!ran) {
            uint32_t simd = 0, group = 0;
            for (uint32_t i = 0; i < threads; i++) {
                simd += w->fibers[i].state == WAITING_SIMD;
                group += w->fibers[i].state == WAITING_GROUP;
            }
            record(d,
                   "threadgroup (%u,%u,%u) cannot go on: %u threads wait at SIMD-group functions, %u at "
                   "threadgroup_barrier (divergent barrier or collective)",
                   pos.x, pos.y, pos.z, simd, group);
            return;
        }
    }
}

void mtlcpu_run(mtlcpu_dispatch *d) {
    worker *w = worker_get();
    if (!w) {
        record(d, "cannot allocate a worker");
        return;
    }
    w->d = d;
    w->use_uc = d->use_ucontext || !mtlcpu_has_fast_switch();
    if (!worker_arm_faults(w)) {
        record(d, "cannot set up the fault handler's stack");
        return;
    }
    uint64_t total = (uint64_t)d->groups.x * d->groups.y * d->groups.z;
    for (;;) {
        if (__atomic_load_n(&d->failed, __ATOMIC_ACQUIRE)) return;
        uint64_t g = __atomic_fetch_add(&d->next_group, 1, __ATOMIC_RELAXED);
        if (g >= total) return;
        run_group(w, d, g);
    }
}
const char *mtlcpu_object_path(const char *symbol) {
    void *p = dlsym(RTLD_DEFAULT, symbol);
    Dl_info info;
    if (!p || dladdr(p, &info) == 0) return NULL;
    return info.dli_fname;
}
#endif
