/// The `<metal_stdlib>` MetalCPU compiles shader source against: the MSL subset the harness's
/// kernels use, mapped onto C++17 for clang. Anything not mapped here fails to compile, with
/// clang's message: an unknown attribute is an error (the MSL attributes the emulation knows are
/// rewritten to `clang::annotate`), and so is any type, function or header it does not declare.
///
/// - Address spaces: `device` and `thread` vanish, `constant` is `const`, and a `threadgroup`
///   variable is `static thread_local`: one instance per host thread, and a host thread runs one
///   threadgroup at a time, so it is shared by exactly the threads of one threadgroup.
/// - Scalars and vectors: `half` is `_Float16` (compiled without excess precision, so each half
///   operation rounds to half); vectors are clang ext vectors (swizzles, element-wise
///   arithmetic); `float4(a, b, c, d)` and friends build vectors from scalars and vectors.
/// - Math: clang's element-wise builtins (host libm underneath: not Apple's GPU math).
/// - SIMD-group functions and barriers go to the runtime (`MetalCPURuntime`), tagged with their
///   call site so lanes at different calls are caught. Reductions combine lanes in a fixed
///   butterfly order (lane i with i + 16, then + 8, ..., + 1); Apple does not document its order.
///
/// Scan mode (`__METALCPU_SCAN__`) defines nothing: the source is preprocessed as written, so
/// the kernel scanner sees the MSL attributes themselves.
enum MSLPrelude {
    static let fileName = "metal_stdlib"

    static let text = #"""
    // metal_stdlib for MetalCPU (emulated Metal on the CPU); see MSLPrelude.swift.
    #pragma once
    #ifndef __METALCPU_SCAN__
    #define __METAL_VERSION__ 310
    #define __METALCPU__ 1

    typedef unsigned char uchar;
    typedef unsigned short ushort;
    typedef unsigned int uint;
    typedef unsigned long ulong;
    typedef _Float16 half;
    typedef __SIZE_TYPE__ size_t;
    typedef __PTRDIFF_TYPE__ ptrdiff_t;
    typedef __UINT8_TYPE__ uint8_t;
    typedef __UINT16_TYPE__ uint16_t;
    typedef __UINT32_TYPE__ uint32_t;
    typedef __UINT64_TYPE__ uint64_t;
    typedef __INT8_TYPE__ int8_t;
    typedef __INT16_TYPE__ int16_t;
    typedef __INT32_TYPE__ int32_t;
    typedef __INT64_TYPE__ int64_t;

    // The runtime's ABI (MetalCPURuntime.h), repeated; checked by size at load.
    typedef struct { uint x, y, z; } mtlcpu_uint3;
    typedef struct {
        // Named with a leading underscore: the attribute names are macros below.
        mtlcpu_uint3 _thread_position_in_grid, _thread_position_in_threadgroup, _threadgroup_position_in_grid;
        mtlcpu_uint3 _threads_per_threadgroup, _threadgroups_per_grid, _threads_per_grid;
        uint _thread_index_in_threadgroup, _thread_index_in_simdgroup, _simdgroup_index_in_threadgroup;
        uint _simdgroups_per_threadgroup, _threads_per_simdgroup, _reserved;
    } mtlcpu_builtins;
    typedef struct { uint done, reserved; unsigned char bytes[64]; } mtlcpu_cache;
    typedef struct {
        uint abi, builtins_size;
        const void *(*simd_exchange)(int, int, const void *, uint, uint *, uint *, mtlcpu_cache **);
        void (*threadgroup_barrier)(int);
        void (*fail)(const char *);
    } mtlcpu_api;
    typedef void (*mtlcpu_kernel_fn)(void *const *, const mtlcpu_builtins *);
    typedef struct {
        const char *name;
        mtlcpu_kernel_fn fn;
        uint arg_count;
        const int *arg_index;
        const uint *arg_min_bytes;
        const uint *arg_align;
        const char *const *arg_name;
        uint max_threads;
    } mtlcpu_kernel_info;
    static const mtlcpu_api *__mtlcpu_rt;

    // Address spaces and function kinds.
    #define device
    #define thread
    #define constant const
    #define threadgroup static thread_local
    #define kernel

    // The attributes the emulation understands; the kernel scanner reads them from the source.
    #define buffer(n) clang::annotate("mtl_buffer", n)
    #define thread_position_in_grid clang::annotate("mtl_builtin")
    #define thread_position_in_threadgroup clang::annotate("mtl_builtin")
    #define threadgroup_position_in_grid clang::annotate("mtl_builtin")
    #define threads_per_threadgroup clang::annotate("mtl_builtin")
    #define threadgroups_per_grid clang::annotate("mtl_builtin")
    #define threads_per_grid clang::annotate("mtl_builtin")
    #define thread_index_in_threadgroup clang::annotate("mtl_builtin")
    #define thread_index_in_simdgroup clang::annotate("mtl_builtin")
    #define simdgroup_index_in_threadgroup clang::annotate("mtl_builtin")
    #define simdgroups_per_threadgroup clang::annotate("mtl_builtin")
    #define threads_per_simdgroup clang::annotate("mtl_builtin")
    #define thread_execution_width clang::annotate("mtl_builtin")
    #define max_total_threads_per_threadgroup(n) clang::annotate("mtl_max_threads", n)

    // Vectors.
    #define __MTLCPU_VEC(T) \
        typedef T T##2 __attribute__((ext_vector_type(2))); \
        typedef T T##3 __attribute__((ext_vector_type(3))); \
        typedef T T##4 __attribute__((ext_vector_type(4)));
    __MTLCPU_VEC(float) __MTLCPU_VEC(half) __MTLCPU_VEC(int) __MTLCPU_VEC(uint) __MTLCPU_VEC(short)
    __MTLCPU_VEC(ushort) __MTLCPU_VEC(char) __MTLCPU_VEC(uchar) __MTLCPU_VEC(long) __MTLCPU_VEC(ulong)
    namespace metal { template <class T, int N> using vec = T __attribute__((ext_vector_type(N))); }

    namespace __mtlcpu {
    template <class T> struct vt { static constexpr int n = 0; using elem = T; };
    #define __MTLCPU_VT(T) \
        template <> struct vt<T##2> { static constexpr int n = 2; using elem = T; }; \
        template <> struct vt<T##3> { static constexpr int n = 3; using elem = T; }; \
        template <> struct vt<T##4> { static constexpr int n = 4; using elem = T; };
    __MTLCPU_VT(float) __MTLCPU_VT(half) __MTLCPU_VT(int) __MTLCPU_VT(uint) __MTLCPU_VT(short)
    __MTLCPU_VT(ushort) __MTLCPU_VT(char) __MTLCPU_VT(uchar) __MTLCPU_VT(long) __MTLCPU_VT(ulong)

    template <class E, int N> struct parts {
        E e[N > 0 ? N : 1];
        int k = 0;
        template <class A> void put(A a) {
            if constexpr (vt<A>::n == 0) { e[k++] = E(a); }
            else { for (int i = 0; i < vt<A>::n; i++) e[k++] = E(a[i]); }
        }
    };
    // float4(x): splat or element-wise conversion; float4(a, b, ...): components in order.
    template <class V, class... A> V make(A... a) {
        using E = typename vt<V>::elem;
        constexpr int N = vt<V>::n;
        constexpr int given = ((vt<A>::n == 0 ? 1 : vt<A>::n) + ... + 0);
        static_assert(sizeof...(A) == 1 || given == N, "vector constructor: wrong number of components");
        V v;
        if constexpr (sizeof...(A) == 1 && given == 1) {
            for (int i = 0; i < N; i++) v[i] = E(a...);
        } else {
            parts<E, N> p;
            (p.put(a), ...);
            for (int i = 0; i < N; i++) v[i] = p.e[i];
        }
        return v;
    }
    // Position attribute values as the declared parameter type (uint, ushort, uint2, uint3, ...).
    template <class T> T pos(mtlcpu_uint3 v) {
        if constexpr (vt<T>::n == 0) { return T(v.x); }
        else {
            T r;
            r[0] = v.x;
            r[1] = v.y;
            if constexpr (vt<T>::n > 2) r[2] = v.z;
            return r;
        }
    }
    template <class T> T pos(uint v) { return T(v); }
    }  // namespace __mtlcpu

    // Vector constructors (after every use of the vector type names above as types).
    #define float2(...) __mtlcpu::make<::float2>(__VA_ARGS__)
    #define float3(...) __mtlcpu::make<::float3>(__VA_ARGS__)
    #define float4(...) __mtlcpu::make<::float4>(__VA_ARGS__)
    #define half2(...) __mtlcpu::make<::half2>(__VA_ARGS__)
    #define half3(...) __mtlcpu::make<::half3>(__VA_ARGS__)
    #define half4(...) __mtlcpu::make<::half4>(__VA_ARGS__)
    #define int2(...) __mtlcpu::make<::int2>(__VA_ARGS__)
    #define int3(...) __mtlcpu::make<::int3>(__VA_ARGS__)
    #define int4(...) __mtlcpu::make<::int4>(__VA_ARGS__)
    #define uint2(...) __mtlcpu::make<::uint2>(__VA_ARGS__)
    #define uint3(...) __mtlcpu::make<::uint3>(__VA_ARGS__)
    #define uint4(...) __mtlcpu::make<::uint4>(__VA_ARGS__)
    #define short2(...) __mtlcpu::make<::short2>(__VA_ARGS__)
    #define short4(...) __mtlcpu::make<::short4>(__VA_ARGS__)
    #define ushort2(...) __mtlcpu::make<::ushort2>(__VA_ARGS__)
    #define ushort4(...) __mtlcpu::make<::ushort4>(__VA_ARGS__)
    #define char4(...) __mtlcpu::make<::char4>(__VA_ARGS__)
    #define uchar4(...) __mtlcpu::make<::uchar4>(__VA_ARGS__)

    #define INFINITY __builtin_inff()
    #define NAN __builtin_nanf("")
    #define HUGE_VALF __builtin_huge_valf()
    #define MAXFLOAT __FLT_MAX__
    #define FLT_MAX __FLT_MAX__
    #define FLT_MIN __FLT_MIN__
    #define FLT_EPSILON __FLT_EPSILON__
    #define M_PI_F 3.14159265358979323846264338327950288f

    namespace metal {
    template <class T, class U> inline T as_type(U x) {
        static_assert(sizeof(T) == sizeof(U), "as_type: sizes differ");
        return __builtin_bit_cast(T, x);
    }

    // Element-wise math on scalars and vectors of float / half.
    #define __MTLCPU_UNARY(NAME, BUILTIN) template <class T> inline T NAME(T x) { return BUILTIN(x); }
    __MTLCPU_UNARY(sqrt, __builtin_elementwise_sqrt)
    __MTLCPU_UNARY(exp, __builtin_elementwise_exp)
    __MTLCPU_UNARY(exp2, __builtin_elementwise_exp2)
    __MTLCPU_UNARY(log, __builtin_elementwise_log)
    __MTLCPU_UNARY(log2, __builtin_elementwise_log2)
    __MTLCPU_UNARY(log10, __builtin_elementwise_log10)
    __MTLCPU_UNARY(sin, __builtin_elementwise_sin)
    __MTLCPU_UNARY(cos, __builtin_elementwise_cos)
    __MTLCPU_UNARY(tan, __builtin_elementwise_tan)
    __MTLCPU_UNARY(asin, __builtin_elementwise_asin)
    __MTLCPU_UNARY(acos, __builtin_elementwise_acos)
    __MTLCPU_UNARY(atan, __builtin_elementwise_atan)
    __MTLCPU_UNARY(sinh, __builtin_elementwise_sinh)
    __MTLCPU_UNARY(cosh, __builtin_elementwise_cosh)
    __MTLCPU_UNARY(tanh, __builtin_elementwise_tanh)
    __MTLCPU_UNARY(floor, __builtin_elementwise_floor)
    __MTLCPU_UNARY(ceil, __builtin_elementwise_ceil)
    __MTLCPU_UNARY(round, __builtin_elementwise_round)
    __MTLCPU_UNARY(trunc, __builtin_elementwise_trunc)
    __MTLCPU_UNARY(rint, __builtin_elementwise_rint)
    __MTLCPU_UNARY(abs, __builtin_elementwise_abs)
    __MTLCPU_UNARY(fabs, __builtin_elementwise_abs)
    template <class T> inline T rsqrt(T x) { return T(1) / __builtin_elementwise_sqrt(x); }
    template <class T> inline T pow(T x, T y) { return __builtin_elementwise_pow(x, y); }
    template <class T> inline T powr(T x, T y) { return __builtin_elementwise_pow(x, y); }
    template <class T> inline T fma(T a, T b, T c) { return __builtin_elementwise_fma(a, b, c); }
    template <class T> inline T max(T a, T b) { return __builtin_elementwise_max(a, b); }
    template <class T> inline T min(T a, T b) { return __builtin_elementwise_min(a, b); }
    template <class T> inline T fmax(T a, T b) { return __builtin_elementwise_max(a, b); }
    template <class T> inline T fmin(T a, T b) { return __builtin_elementwise_min(a, b); }
    template <class T> inline T clamp(T x, T lo, T hi) { return min(max(x, lo), hi); }
    template <class T> inline T saturate(T x) { return clamp(x, T(0), T(1)); }
    template <class T> inline T mix(T a, T b, T t) { return a + (b - a) * t; }
    template <class T> inline T select(T a, T b, bool c) { return c ? b : a; }
    inline bool isnan(float x) { return __builtin_isnan(x); }
    inline bool isinf(float x) { return __builtin_isinf(x); }
    inline bool isfinite(float x) { return __builtin_isfinite(x); }
    inline bool isnan(half x) { return __builtin_isnan((float)x); }
    inline bool isinf(half x) { return __builtin_isinf((float)x); }
    template <class V> inline typename __mtlcpu::vt<V>::elem dot(V a, V b) {
        typename __mtlcpu::vt<V>::elem s = a[0] * b[0];
        for (int i = 1; i < __mtlcpu::vt<V>::n; i++) s += a[i] * b[i];
        return s;
    }
    namespace precise { using metal::sqrt; using metal::exp; using metal::exp2; using metal::log; using metal::log2;
        using metal::sin; using metal::cos; using metal::tanh; using metal::pow; using metal::rsqrt; }
    namespace fast { using metal::sqrt; using metal::exp; using metal::exp2; using metal::log; using metal::log2;
        using metal::sin; using metal::cos; using metal::tanh; using metal::pow; using metal::rsqrt; }

    enum class mem_flags : uint { mem_none = 0, mem_device = 1, mem_threadgroup = 2, mem_texture = 4,
                                  mem_threadgroup_imageblock = 8 };
    inline mem_flags operator|(mem_flags a, mem_flags b) { return mem_flags(uint(a) | uint(b)); }
    }  // namespace metal

    // SIMD-group functions: every lane hands its value to the runtime, which returns all lanes'
    // values once the SIMD-group has arrived; each lane then computes its own result.
    namespace __mtlcpu {
    enum { SUM = 1, PRODUCT, MIN, MAX, AND, OR, XOR, ALL, ANY, SHUFFLE, SHUFFLE_DOWN, SHUFFLE_UP, SHUFFLE_XOR,
           ROTATE_DOWN, ROTATE_UP, BROADCAST, BROADCAST_FIRST, PREFIX_EXCL_SUM, PREFIX_INCL_SUM,
           PREFIX_EXCL_PRODUCT, PREFIX_INCL_PRODUCT, BALLOT, SIMD_BARRIER, IS_FIRST };
    struct lanes {
        const void *all;
        uint active, lane;
        mtlcpu_cache *cache;
    };
    template <class T> inline lanes exchange(int kind, int site, const T &x) {
        static_assert(sizeof(T) <= 64, "SIMD-group function on a value over 64 bytes");
        lanes r;
        r.all = __mtlcpu_rt->simd_exchange(kind, site, &x, sizeof(T), &r.active, &r.lane, &r.cache);
        return r;
    }
    template <class T> inline T at(const lanes &l, uint i) {
        T v;
        __builtin_memcpy(&v, (const char *)l.all + i * sizeof(T), sizeof(T));
        return v;
    }
    // The butterfly reduction over active lanes; one lane computes it, the others read it.
    template <class T, class F> inline T reduce(const lanes &l, F op) {
        if (l.cache->done) { T v; __builtin_memcpy(&v, l.cache->bytes, sizeof(T)); return v; }
        T v[32];
        bool on[32];
        for (uint i = 0; i < 32; i++) { on[i] = (l.active >> i) & 1; if (on[i]) v[i] = at<T>(l, i); }
        for (uint off = 16; off >= 1; off >>= 1) {
            for (uint i = 0; i < off; i++) {
                if (on[i] && on[i + off]) v[i] = op(v[i], v[i + off]);
                else if (on[i + off]) { v[i] = v[i + off]; on[i] = true; }
            }
        }
        __builtin_memcpy(l.cache->bytes, &v[0], sizeof(T));
        l.cache->done = 1;
        return v[0];
    }
    inline void fail(const char *message) { __mtlcpu_rt->fail(message); }
    template <class T> inline T from_lane(const lanes &l, uint src, const char *what) {
        if (src >= 32 || !((l.active >> src) & 1)) fail(what);
        return at<T>(l, src);
    }
    }  // namespace __mtlcpu

    template <class T> inline T __mtlcpu_simd_sum(int site, T x) {
        return __mtlcpu::reduce<T>(__mtlcpu::exchange(__mtlcpu::SUM, site, x), [](T a, T b) { return a + b; });
    }
    template <class T> inline T __mtlcpu_simd_product(int site, T x) {
        return __mtlcpu::reduce<T>(__mtlcpu::exchange(__mtlcpu::PRODUCT, site, x), [](T a, T b) { return a * b; });
    }
    template <class T> inline T __mtlcpu_simd_max(int site, T x) {
        return __mtlcpu::reduce<T>(__mtlcpu::exchange(__mtlcpu::MAX, site, x),
                                   [](T a, T b) { return __builtin_elementwise_max(a, b); });
    }
    template <class T> inline T __mtlcpu_simd_min(int site, T x) {
        return __mtlcpu::reduce<T>(__mtlcpu::exchange(__mtlcpu::MIN, site, x),
                                   [](T a, T b) { return __builtin_elementwise_min(a, b); });
    }
    template <class T> inline T __mtlcpu_simd_and(int site, T x) {
        return __mtlcpu::reduce<T>(__mtlcpu::exchange(__mtlcpu::AND, site, x), [](T a, T b) { return a & b; });
    }
    template <class T> inline T __mtlcpu_simd_or(int site, T x) {
        return __mtlcpu::reduce<T>(__mtlcpu::exchange(__mtlcpu::OR, site, x), [](T a, T b) { return a | b; });
    }
    template <class T> inline T __mtlcpu_simd_xor(int site, T x) {
        return __mtlcpu::reduce<T>(__mtlcpu::exchange(__mtlcpu::XOR, site, x), [](T a, T b) { return a ^ b; });
    }
    inline bool __mtlcpu_simd_all(int site, bool x) {
        return __mtlcpu::reduce<bool>(__mtlcpu::exchange(__mtlcpu::ALL, site, x), [](bool a, bool b) { return a && b; });
    }
    inline bool __mtlcpu_simd_any(int site, bool x) {
        return __mtlcpu::reduce<bool>(__mtlcpu::exchange(__mtlcpu::ANY, site, x), [](bool a, bool b) { return a || b; });
    }
    template <class T> inline T __mtlcpu_simd_shuffle(int site, T x, ushort lane) {
        __mtlcpu::lanes l = __mtlcpu::exchange(__mtlcpu::SHUFFLE, site, x);
        return __mtlcpu::from_lane<T>(l, lane, "simd_shuffle reads a lane that is not active");
    }
    template <class T> inline T __mtlcpu_simd_broadcast(int site, T x, ushort lane) {
        __mtlcpu::lanes l = __mtlcpu::exchange(__mtlcpu::BROADCAST, site, x);
        return __mtlcpu::from_lane<T>(l, lane, "simd_broadcast reads a lane that is not active");
    }
    template <class T> inline T __mtlcpu_simd_broadcast_first(int site, T x) {
        __mtlcpu::lanes l = __mtlcpu::exchange(__mtlcpu::BROADCAST_FIRST, site, x);
        return __mtlcpu::at<T>(l, __builtin_ctz(l.active));
    }
    // Lanes past the edge keep their own value, as in Metal.
    template <class T> inline T __mtlcpu_simd_shuffle_down(int site, T x, ushort delta) {
        __mtlcpu::lanes l = __mtlcpu::exchange(__mtlcpu::SHUFFLE_DOWN, site, x);
        if (l.lane + delta >= 32) return x;
        return __mtlcpu::from_lane<T>(l, l.lane + delta, "simd_shuffle_down reads a lane that is not active");
    }
    template <class T> inline T __mtlcpu_simd_shuffle_up(int site, T x, ushort delta) {
        __mtlcpu::lanes l = __mtlcpu::exchange(__mtlcpu::SHUFFLE_UP, site, x);
        if (l.lane < delta) return x;
        return __mtlcpu::from_lane<T>(l, l.lane - delta, "simd_shuffle_up reads a lane that is not active");
    }
    template <class T> inline T __mtlcpu_simd_shuffle_xor(int site, T x, ushort mask) {
        __mtlcpu::lanes l = __mtlcpu::exchange(__mtlcpu::SHUFFLE_XOR, site, x);
        return __mtlcpu::from_lane<T>(l, (l.lane ^ mask) & 31, "simd_shuffle_xor reads a lane that is not active");
    }
    template <class T> inline T __mtlcpu_simd_shuffle_rotate_down(int site, T x, ushort delta) {
        __mtlcpu::lanes l = __mtlcpu::exchange(__mtlcpu::ROTATE_DOWN, site, x);
        return __mtlcpu::from_lane<T>(l, (l.lane + delta) & 31, "simd_shuffle_rotate_down reads a lane that is not active");
    }
    template <class T> inline T __mtlcpu_simd_shuffle_rotate_up(int site, T x, ushort delta) {
        __mtlcpu::lanes l = __mtlcpu::exchange(__mtlcpu::ROTATE_UP, site, x);
        return __mtlcpu::from_lane<T>(l, (l.lane - delta) & 31, "simd_shuffle_rotate_up reads a lane that is not active");
    }
    // Prefix sums run over the active lanes below the caller, in lane order.
    template <class T> inline T __mtlcpu_simd_prefix_exclusive_sum(int site, T x) {
        __mtlcpu::lanes l = __mtlcpu::exchange(__mtlcpu::PREFIX_EXCL_SUM, site, x);
        T s = T(0);
        for (uint i = 0; i < l.lane; i++) if ((l.active >> i) & 1) s = s + __mtlcpu::at<T>(l, i);
        return s;
    }
    template <class T> inline T __mtlcpu_simd_prefix_inclusive_sum(int site, T x) {
        __mtlcpu::lanes l = __mtlcpu::exchange(__mtlcpu::PREFIX_INCL_SUM, site, x);
        T s = T(0);
        for (uint i = 0; i <= l.lane; i++) if ((l.active >> i) & 1) s = s + __mtlcpu::at<T>(l, i);
        return s;
    }
    inline bool __mtlcpu_simd_is_first(int site) {
        __mtlcpu::lanes l = __mtlcpu::exchange(__mtlcpu::IS_FIRST, site, 0);
        return l.lane == uint(__builtin_ctz(l.active));
    }
    inline void __mtlcpu_simdgroup_barrier(int site, metal::mem_flags) {
        __mtlcpu::exchange(__mtlcpu::SIMD_BARRIER, site, 0);
    }
    inline void __mtlcpu_threadgroup_barrier(int site, metal::mem_flags) { __mtlcpu_rt->threadgroup_barrier(site); }

    namespace metal {
    using ::__mtlcpu_simd_sum; using ::__mtlcpu_simd_product; using ::__mtlcpu_simd_max; using ::__mtlcpu_simd_min;
    using ::__mtlcpu_simd_and; using ::__mtlcpu_simd_or; using ::__mtlcpu_simd_xor; using ::__mtlcpu_simd_all;
    using ::__mtlcpu_simd_any; using ::__mtlcpu_simd_shuffle; using ::__mtlcpu_simd_broadcast;
    using ::__mtlcpu_simd_broadcast_first; using ::__mtlcpu_simd_shuffle_down; using ::__mtlcpu_simd_shuffle_up;
    using ::__mtlcpu_simd_shuffle_xor; using ::__mtlcpu_simd_shuffle_rotate_down;
    using ::__mtlcpu_simd_shuffle_rotate_up; using ::__mtlcpu_simd_prefix_exclusive_sum;
    using ::__mtlcpu_simd_prefix_inclusive_sum; using ::__mtlcpu_simd_is_first;
    using ::__mtlcpu_simdgroup_barrier; using ::__mtlcpu_threadgroup_barrier;
    }  // namespace metal

    #define simd_sum(...) __mtlcpu_simd_sum(__COUNTER__, __VA_ARGS__)
    #define simd_product(...) __mtlcpu_simd_product(__COUNTER__, __VA_ARGS__)
    #define simd_max(...) __mtlcpu_simd_max(__COUNTER__, __VA_ARGS__)
    #define simd_min(...) __mtlcpu_simd_min(__COUNTER__, __VA_ARGS__)
    #define simd_and(...) __mtlcpu_simd_and(__COUNTER__, __VA_ARGS__)
    #define simd_or(...) __mtlcpu_simd_or(__COUNTER__, __VA_ARGS__)
    #define simd_xor(...) __mtlcpu_simd_xor(__COUNTER__, __VA_ARGS__)
    #define simd_all(...) __mtlcpu_simd_all(__COUNTER__, __VA_ARGS__)
    #define simd_any(...) __mtlcpu_simd_any(__COUNTER__, __VA_ARGS__)
    #define simd_shuffle(...) __mtlcpu_simd_shuffle(__COUNTER__, __VA_ARGS__)
    #define simd_broadcast(...) __mtlcpu_simd_broadcast(__COUNTER__, __VA_ARGS__)
    #define simd_broadcast_first(...) __mtlcpu_simd_broadcast_first(__COUNTER__, __VA_ARGS__)
    #define simd_shuffle_down(...) __mtlcpu_simd_shuffle_down(__COUNTER__, __VA_ARGS__)
    #define simd_shuffle_up(...) __mtlcpu_simd_shuffle_up(__COUNTER__, __VA_ARGS__)
    #define simd_shuffle_xor(...) __mtlcpu_simd_shuffle_xor(__COUNTER__, __VA_ARGS__)
    #define simd_shuffle_rotate_down(...) __mtlcpu_simd_shuffle_rotate_down(__COUNTER__, __VA_ARGS__)
    #define simd_shuffle_rotate_up(...) __mtlcpu_simd_shuffle_rotate_up(__COUNTER__, __VA_ARGS__)
    #define simd_prefix_exclusive_sum(...) __mtlcpu_simd_prefix_exclusive_sum(__COUNTER__, __VA_ARGS__)
    #define simd_prefix_inclusive_sum(...) __mtlcpu_simd_prefix_inclusive_sum(__COUNTER__, __VA_ARGS__)
    #define simd_is_first() __mtlcpu_simd_is_first(__COUNTER__)
    #define simdgroup_barrier(...) __mtlcpu_simdgroup_barrier(__COUNTER__, __VA_ARGS__)
    #define threadgroup_barrier(...) __mtlcpu_threadgroup_barrier(__COUNTER__, __VA_ARGS__)

    // GPU families without them refuse SIMD-group reductions (before Apple 7: A14) and permutes
    // (before Apple 6: A13), as Metal's compiler does; the device sets what it supports.
    #ifndef __METALCPU_SIMD_REDUCTION__
    #undef simd_sum
    #undef simd_product
    #undef simd_max
    #undef simd_min
    #undef simd_and
    #undef simd_or
    #undef simd_xor
    #undef simd_prefix_exclusive_sum
    #undef simd_prefix_inclusive_sum
    #define simd_sum(...) simd_sum_needs_Apple_GPU_family_7_or_Mac2(__VA_ARGS__)
    #define simd_product(...) simd_product_needs_Apple_GPU_family_7_or_Mac2(__VA_ARGS__)
    #define simd_max(...) simd_max_needs_Apple_GPU_family_7_or_Mac2(__VA_ARGS__)
    #define simd_min(...) simd_min_needs_Apple_GPU_family_7_or_Mac2(__VA_ARGS__)
    #define simd_and(...) simd_and_needs_Apple_GPU_family_7_or_Mac2(__VA_ARGS__)
    #define simd_or(...) simd_or_needs_Apple_GPU_family_7_or_Mac2(__VA_ARGS__)
    #define simd_xor(...) simd_xor_needs_Apple_GPU_family_7_or_Mac2(__VA_ARGS__)
    #define simd_prefix_exclusive_sum(...) simd_prefix_exclusive_sum_needs_Apple_GPU_family_7_or_Mac2(__VA_ARGS__)
    #define simd_prefix_inclusive_sum(...) simd_prefix_inclusive_sum_needs_Apple_GPU_family_7_or_Mac2(__VA_ARGS__)
    #endif
    #ifndef __METALCPU_SIMD_PERMUTE__
    #undef simd_shuffle
    #undef simd_shuffle_down
    #undef simd_shuffle_up
    #undef simd_shuffle_xor
    #undef simd_shuffle_rotate_down
    #undef simd_shuffle_rotate_up
    #undef simd_broadcast
    #undef simd_broadcast_first
    #define simd_shuffle(...) simd_shuffle_needs_Apple_GPU_family_6_or_Mac2(__VA_ARGS__)
    #define simd_shuffle_down(...) simd_shuffle_down_needs_Apple_GPU_family_6_or_Mac2(__VA_ARGS__)
    #define simd_shuffle_up(...) simd_shuffle_up_needs_Apple_GPU_family_6_or_Mac2(__VA_ARGS__)
    #define simd_shuffle_xor(...) simd_shuffle_xor_needs_Apple_GPU_family_6_or_Mac2(__VA_ARGS__)
    #define simd_shuffle_rotate_down(...) simd_shuffle_rotate_down_needs_Apple_GPU_family_6_or_Mac2(__VA_ARGS__)
    #define simd_shuffle_rotate_up(...) simd_shuffle_rotate_up_needs_Apple_GPU_family_6_or_Mac2(__VA_ARGS__)
    #define simd_broadcast(...) simd_broadcast_needs_Apple_GPU_family_6_or_Mac2(__VA_ARGS__)
    #define simd_broadcast_first(...) simd_broadcast_first_needs_Apple_GPU_family_6_or_Mac2(__VA_ARGS__)
    #endif
    #endif
    """#
}
