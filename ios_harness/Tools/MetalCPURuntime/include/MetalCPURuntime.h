// The device side of MetalCPU: runs the threadgroups of one compute dispatch on CPU threads with
// Metal's execution model. Each GPU thread of a threadgroup is a fiber on one host thread; the
// fibers of a SIMD-group meet at every SIMD-group function and the whole threadgroup at every
// threadgroup barrier, so lanes are in lockstep wherever Metal makes lockstep observable.
//
// The compiled shader library (a shared object built from the MSL source by clang) reaches this
// runtime only through `mtlcpu_api`; the layouts below are repeated in the library's prelude
// (MSLPrelude.swift) and checked at load by their sizes and MTLCPU_ABI_VERSION.
#ifndef METALCPU_RUNTIME_H
#define METALCPU_RUNTIME_H

#include <stdint.h>

#define MTLCPU_ABI_VERSION 1
#define MTLCPU_SIMD_WIDTH 32
#define MTLCPU_MAX_VALUE_BYTES 64
#define MTLCPU_MAX_BUFFERS 31

typedef struct { uint32_t x, y, z; } mtlcpu_uint3;

/// The values of a thread's position attributes.
typedef struct {
    mtlcpu_uint3 thread_position_in_grid;
    mtlcpu_uint3 thread_position_in_threadgroup;
    mtlcpu_uint3 threadgroup_position_in_grid;
    mtlcpu_uint3 threads_per_threadgroup;
    mtlcpu_uint3 threadgroups_per_grid;
    mtlcpu_uint3 threads_per_grid;
    uint32_t thread_index_in_threadgroup;
    uint32_t thread_index_in_simdgroup;
    uint32_t simdgroup_index_in_threadgroup;
    uint32_t simdgroups_per_threadgroup;
    uint32_t threads_per_simdgroup;
    uint32_t reserved;
} mtlcpu_builtins;

/// A kernel's entry in the library: unpacks the bound buffers and the thread's position values
/// into the kernel's parameters.
typedef void (*mtlcpu_kernel_fn)(void *const *buffers, const mtlcpu_builtins *builtins);

/// Per-collective scratch shared by the lanes: the first lane to compute a lane-independent
/// result (a sum, a maximum) stores it here for the others.
typedef struct {
    uint32_t done;
    uint32_t reserved;
    unsigned char bytes[MTLCPU_MAX_VALUE_BYTES];
} mtlcpu_cache;

/// What compiled shaders call.
typedef struct {
    uint32_t abi;
    uint32_t builtins_size;
    /// Waits until every active lane of the caller's SIMD-group has reached the same
    /// SIMD-group function (`kind` at `site`), each passing `size` bytes at `value`. Returns
    /// the lanes' values, `size` bytes apart in lane order, valid until the caller's next
    /// collective; `active` gets the mask of lanes that took part, `lane` the caller's lane.
    const void *(*simd_exchange)(int32_t kind, int32_t site, const void *value, uint32_t size,
                                 uint32_t *active, uint32_t *lane, mtlcpu_cache **cache);
    /// Waits until every thread of the threadgroup still running has reached this barrier.
    void (*threadgroup_barrier)(int32_t site);
    /// Fails the dispatch with `message` (the thread never resumes).
    void (*fail)(const char *message);
} mtlcpu_api;

/// One kernel of a compiled library, as its table lists it.
typedef struct {
    const char *name;
    mtlcpu_kernel_fn fn;
    uint32_t arg_count;
    /// Per buffer argument: its [[buffer(n)]] index, the bytes it reads at least
    /// (sizeof(T) for `constant T &`, 0 for pointers), and the alignment of its element type.
    const int32_t *arg_index;
    const uint32_t *arg_min_bytes;
    const uint32_t *arg_align;
    const char *const *arg_name;
    /// [[max_total_threads_per_threadgroup(n)]], or 0.
    uint32_t max_threads;
} mtlcpu_kernel_info;

/// One dispatch. The caller fills the first block; `mtlcpu_run`, called from any number of
/// host threads at once, shares out the threadgroups.
typedef struct {
    mtlcpu_kernel_fn fn;
    void *const *buffers;
    /// Bytes from each bound pointer to the end of its buffer (0: unbound); for fault reports.
    const uint64_t *buffer_lengths;
    mtlcpu_uint3 groups;      // threadgroups per grid
    mtlcpu_uint3 group_size;  // threads per threadgroup
    mtlcpu_uint3 grid;        // threads per grid: threadgroups on the edge stop here
    uint32_t use_ucontext;    // 1: switch fibers with swapcontext (the portable path)
    uint32_t stack_bytes;     // per GPU thread
    // Shared between the workers.
    uint64_t next_group;
    uint32_t failed;
    char error[1024];
} mtlcpu_dispatch;

const mtlcpu_api *mtlcpu_api_table(void);

/// Runs threadgroups of `d`, claimed one at a time, until none are left or one has failed
/// (then `failed` is 1 and `error` says why). A memory fault in a kernel (an access past a
/// buffer's end reaches the guard page after it; a stack overflow, the guard below a stack)
/// fails the dispatch with the address and the nearest bound buffer, an integer division by
/// zero with that; faults elsewhere go to the handler that was installed before.
void mtlcpu_run(mtlcpu_dispatch *d);

/// 1 where fibers switch with the hand-written x86-64 routine, 0 where only ucontext exists.
int mtlcpu_has_fast_switch(void);

/// The file of the loaded object that defines `symbol` (the Swift runtime's: where the
/// toolchain, and its clang, is), or NULL.
const char *mtlcpu_object_path(const char *symbol);

#endif
