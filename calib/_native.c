/* The compiled kernels of calib.metrics, with AVX2 (calib/_native.py builds this file on
 * first use with cc -O3 -march=native -fopenmp; without a compiler or AVX2 the PyTorch
 * ops that define the same results are used, and the tests compare the two).
 *
 * calib_scan_{f32,f64}: one fused pass over the rows of an (N, K) probability matrix
 * (calib/_scan.py holds the contract and the reference in PyTorch ops). For each row i
 * of p (row-major, K entries) and label y_i it writes
 *     conf[i]    = max_k p_ik
 *     correct[i] = 1 if the FIRST k with p_ik = conf[i] is y_i (torch.argmax's rule), else 0
 *     p_true[i]  = p[i, y_i]                                   (only when p_true != NULL)
 * and for all rows
 *     stats[0] = min_ik p_ik,  stats[1], stats[2] = min and max row sum,  stats[3] = max conf
 * with stats[0..3] = NaN when any row sum is NaN (a NaN entry, or inf - inf).
 * calib_above_{f32,f64}: the entries above a threshold (classwise ECE's bins beyond 0).
 * calib_bin_sums_{f32,f64}: per equal-width bin, count, hits and confidence sum (ECE).
 * calib_classwise_{f32,f64}: the per-class, per-bin sums of classwise ECE.
 *
 * Why a kernel: PyTorch's row maximum of narrow rows (K = 10) is compute-bound, about
 * 12 ns a row on one core, and validation needs a row sum and a minimum besides; each
 * is another op over the rows. Here every row is loaded once into vector registers and
 * all four reductions run on the same registers.
 *
 * Ties: p[i, y_i] = conf[i] means correct unless an earlier entry equals conf[i] too.
 * Two entries equal to the maximum cannot both exceed half the largest valid row sum
 * (the caller's `tie_free`), so only rows with p[i, y_i] = conf[i] <= tie_free are
 * re-checked; they are collected branch-free while the rows are streamed and their
 * prefix p[i, 0:y_i] is compared after each block of BLOCK rows, still in L1 cache.
 * (A data-dependent branch per row costs more than the whole scan: half the rows of a
 * 50%-accurate model would mispredict it.)
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#define BLOCK 64      /* rows between tie checks: their prefixes are still in L1 cache */
#define PREFETCH 8    /* rows ahead to prefetch */
#define MAX_THREADS 256

#if defined(__AVX2__)
#include <immintrin.h>

int calib_native_abi(void) { return 1; }

/* Masks whose first r lanes are set: &TAIL32[8 - r] (float), &TAIL64[4 - r] (double). */
static const int32_t TAIL32[16] = {-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0};
static const int64_t TAIL64[8] = {-1, -1, -1, -1, 0, 0, 0, 0};

/* Horizontal max, min and sum of the lanes of one vector: hmax_ps, ..., hadd_pd. */
#define DEFINE_HREDUCE(OP)                                                                  \
    static inline float h##OP##_ps(__m256 v) {                                             \
        __m128 a = _mm_##OP##_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1)); \
        a = _mm_##OP##_ps(a, _mm_movehl_ps(a, a));                                          \
        return _mm_cvtss_f32(_mm_##OP##_ss(a, _mm_movehdup_ps(a)));                         \
    }                                                                                      \
    static inline double h##OP##_pd(__m256d v) {                                           \
        __m128d a = _mm_##OP##_pd(_mm256_castpd256_pd128(v), _mm256_extractf128_pd(v, 1)); \
        return _mm_cvtsd_f64(_mm_##OP##_sd(a, _mm_unpackhi_pd(a, a)));                      \
    }
DEFINE_HREDUCE(max)
DEFINE_HREDUCE(min)
DEFINE_HREDUCE(add)

/* The number of OpenMP threads to use: at least 1, at most MAX_THREADS. */
static inline int team(int threads) {
    return threads < 1 ? 1 : threads > MAX_THREADS ? MAX_THREADS : threads;
}

/* Zeroed scratch of nd doubles and ni int64s; 0, or -1 (nothing allocated) when out of
 * memory. */
static int zeroed(int64_t nd, double **d, int64_t ni, int64_t **i) {
    *d = calloc((size_t)nd, sizeof(double));
    *i = calloc((size_t)ni, sizeof(int64_t));
    if (*d && *i) return 0;
    free(*d), free(*i);
    return -1;
}

/* The kernel, written once for both element types: T, its vector V of W lanes, the
 * intrinsic suffix S (ps/pd) and the tail-mask table TAIL. */
#define CAT4(a, b, c, d) a##b##c##d
#define OP(name, S) CAT4(_mm256_, name, _, S)
#define H(name, S) CAT4(name, _, S, )

#define DEFINE_SCAN(NAME, T, V, W, S, TAIL)                                                 \
    static void NAME(const T *p, const int64_t *y, int64_t n, int64_t k, double tie_free, \
                     T *conf, uint8_t *correct, T *p_true, double *stats) {               \
        const int64_t full = k - k % W, rest = k % W;                                      \
        const __m256i tail = _mm256_loadu_si256((const __m256i *)(TAIL + W - rest));       \
        const V tail_mask = OP(castsi256, S)(tail);                                        \
        V lo = OP(set1, S)(INFINITY), hi = OP(set1, S)(-INFINITY);                         \
        V sum_lo = lo, sum_hi = hi, nan = OP(setzero, S)();                                \
        int64_t cand[BLOCK];                                                               \
        for (int64_t i0 = 0; i0 < n; i0 += BLOCK) {                                        \
            const int64_t i1 = i0 + BLOCK < n ? i0 + BLOCK : n;                            \
            int64_t n_cand = 0;                                                            \
            for (int64_t i = i0; i < i1; i++) {                                            \
                const T *r = p + i * k;                                                    \
                if (i + PREFETCH < n) /* a few rows ahead: keeps loads in flight */       \
                    for (int64_t b = 0; b < k * (int64_t)sizeof(T); b += 64)               \
                        _mm_prefetch((const char *)(r + PREFETCH * k) + b, _MM_HINT_T0);   \
                const V first = OP(set1, S)(r[0]); /* neutral for max/min in dead lanes */ \
                V m0 = first, m1 = first, s0 = OP(setzero, S)(), s1 = s0;                  \
                int64_t j = 0;                                                             \
                for (; j + 2 * W <= full; j += 2 * W) { /* two chains hide add latency */ \
                    const V a = OP(loadu, S)(r + j), b = OP(loadu, S)(r + j + W);         \
                    m0 = OP(max, S)(m0, a), m1 = OP(max, S)(m1, b);                        \
                    s0 = OP(add, S)(s0, a), s1 = OP(add, S)(s1, b);                        \
                    lo = OP(min, S)(lo, OP(min, S)(a, b));                                 \
                }                                                                          \
                if (j < full) {                                                            \
                    const V a = OP(loadu, S)(r + j);                                       \
                    m0 = OP(max, S)(m0, a), s0 = OP(add, S)(s0, a), lo = OP(min, S)(lo, a); \
                }                                                                          \
                if (rest) { /* masked load: dead lanes read as 0 (sum), then as r[0] */   \
                    V a = OP(maskload, S)(r + full, tail);                                 \
                    s1 = OP(add, S)(s1, a);                                                \
                    a = OP(blendv, S)(first, a, tail_mask);                                \
                    m1 = OP(max, S)(m1, a), lo = OP(min, S)(lo, a);                        \
                }                                                                          \
                const T m = H(hmax, S)(OP(max, S)(m0, m1));                                \
                const V sum = OP(set1, S)(H(hadd, S)(OP(add, S)(s0, s1)));                 \
                sum_lo = OP(min, S)(sum_lo, sum), sum_hi = OP(max, S)(sum_hi, sum);        \
                nan = OP(or, S)(nan, OP(cmp, S)(sum, sum, _CMP_UNORD_Q));                  \
                hi = OP(max, S)(hi, OP(set1, S)(m));                                       \
                const T at_label = r[y[i]];                                                \
                const int hit = at_label == m;                                             \
                cand[n_cand] = i; /* kept only if this row may be a tie */                 \
                n_cand += hit & ((double)m <= tie_free);                                   \
                conf[i] = m, correct[i] = (uint8_t)hit;                                    \
                if (p_true) p_true[i] = at_label;                                          \
            }                                                                              \
            for (int64_t c = 0; c < n_cand; c++) { /* an earlier maximum wins the tie */  \
                const int64_t i = cand[c], t = y[i];                                       \
                const T *r = p + i * k, m = conf[i];                                       \
                const V mv = OP(set1, S)(m);                                               \
                int64_t q = 0;                                                             \
                for (; q + W <= t; q += W)                                                 \
                    if (OP(movemask, S)(OP(cmp, S)(OP(loadu, S)(r + q), mv, _CMP_EQ_OQ))) break; \
                while (q < t && r[q] != m) q++;                                            \
                correct[i] = q == t;                                                       \
            }                                                                              \
        }                                                                                  \
        const int has_nan = OP(movemask, S)(nan) != 0;                                     \
        stats[0] = has_nan ? NAN : (double)H(hmin, S)(lo);                                 \
        stats[1] = has_nan ? NAN : (double)H(hmin, S)(sum_lo);                             \
        stats[2] = has_nan ? NAN : (double)H(hmax, S)(sum_hi);                             \
        stats[3] = has_nan ? NAN : (double)H(hmax, S)(hi);                                 \
    }

DEFINE_SCAN(scan_rows_f32, float, __m256, 8, ps, TAIL32)
DEFINE_SCAN(scan_rows_f64, double, __m256d, 4, pd, TAIL64)

/* The exported entry points: `threads` contiguous slices of rows, one per OpenMP thread,
 * their statistics combined. Linked against libgomp.so.1, this shares the OpenMP runtime
 * (and its thread team) that PyTorch has already loaded: threads of a second pool would
 * compete with PyTorch's, which spin for a while after each parallel op. */
#define DEFINE_ENTRY(NAME, ROWS, T)                                                           \
    void NAME(const T *p, const int64_t *y, int64_t n, int64_t k, double tie_free,        \
              T *conf, uint8_t *correct, T *p_true, double *stats, int threads) {         \
        double part[MAX_THREADS][4];                                                       \
        threads = team(threads);                                                           \
        _Pragma("omp parallel for num_threads(threads) schedule(static, 1)")               \
        for (int t = 0; t < threads; t++) {                                                \
            const int64_t a = n * t / threads, b = n * (t + 1) / threads;                  \
            ROWS(p + a * k, y + a, b - a, k, tie_free, conf + a, correct + a,              \
                 p_true ? p_true + a : 0, part[t]);                                        \
        }                                                                                  \
        combine(part, threads, stats);                                                     \
    }

/* stats of the whole from those of the slices (an empty slice has +-inf, neutral). */
static void combine(double part[][4], int threads, double *stats) {
    stats[0] = stats[1] = INFINITY, stats[2] = stats[3] = -INFINITY;
    for (int t = 0; t < threads; t++) {
        if (isnan(part[t][0])) { stats[0] = stats[1] = stats[2] = stats[3] = NAN; return; }
        stats[0] = fmin(stats[0], part[t][0]), stats[1] = fmin(stats[1], part[t][1]);
        stats[2] = fmax(stats[2], part[t][2]), stats[3] = fmax(stats[3], part[t][3]);
    }
}

DEFINE_ENTRY(calib_scan_f32, scan_rows_f32, float)
DEFINE_ENTRY(calib_scan_f64, scan_rows_f64, double)

/* The entries of x[0:n] above `threshold` (at or above it when `inclusive`): their
 * positions in idx and values in val, in order; returns how many. Classwise ECE bins
 * only these (most entries of a wide row fall in bin 0). One compare per W entries;
 * the rare lanes that pass are written one by one. */
#define SELECT_LOOP(T, V, W, S, PRED)                                                       \
    for (; i + W <= n; i += W) {                                                           \
        unsigned m = OP(movemask, S)(OP(cmp, S)(OP(loadu, S)(x + i), tv, PRED));          \
        for (; m; m &= m - 1) {                                                            \
            const int64_t j = i + __builtin_ctz(m);                                        \
            idx[c] = j, val[c] = x[j], c++;                                                \
        }                                                                                  \
    }
#define DEFINE_SELECT(NAME, T, V, W, S)                                                     \
    int64_t NAME(const T *x, int64_t n, double threshold, int inclusive, int64_t *idx,    \
                 T *val) {                                                                 \
        const T t = (T)threshold;                                                          \
        const V tv = OP(set1, S)(t);                                                       \
        int64_t c = 0, i = 0;                                                              \
        if (inclusive) {                                                                   \
            SELECT_LOOP(T, V, W, S, _CMP_GE_OQ)                                            \
        } else {                                                                           \
            SELECT_LOOP(T, V, W, S, _CMP_GT_OQ)                                            \
        }                                                                                  \
        for (; i < n; i++)                                                                 \
            if (inclusive ? x[i] >= t : x[i] > t) idx[c] = i, val[c] = x[i], c++;          \
        return c;                                                                          \
    }

DEFINE_SELECT(calib_above_f32, float, __m256, 8, ps)
DEFINE_SELECT(calib_above_f64, double, __m256d, 4, pd)

/* The bin of x among the m bins of the edges e[0..m] (increasing, e[k] within a few
 * float32 ulps of k/m), exactly as torch.bucketize against the inner edges e[1..m-1]:
 * the number of inner edges below x, or at or below it for [lo, hi) bins (`left`).
 * Far from every edge floor(x m) is the bin; near one (within 1e-6 m in units of x m,
 * more than the edges' rounding) the edges decide, one comparison at a time. */
static inline int64_t bin_of(double x, const double *e, int64_t m, int left) {
    const double g = x * (double)m;
    if (g > 0 && g < (double)m) {
        const int64_t b = (int64_t)g;
        const double frac = g - (double)b, margin = 1e-6 * (double)m;
        if (frac > margin && frac < 1 - margin) return b;
    }
    int64_t b = !(g > 0) ? 0 : g >= (double)m ? m - 1 : (int64_t)g; /* NaN: bin 0 */
    if (left) {
        while (b > 0 && x < e[b]) b--;
        while (b < m - 1 && x >= e[b + 1]) b++;
    } else {
        while (b > 0 && x <= e[b]) b--;
        while (b < m - 1 && x > e[b + 1]) b++;
    }
    return b;
}

/* Per bin of the confidences: sums[0:m] the count, sums[m:2m] the hits (correct = 1) and
 * sums[2m:3m] the sum of confidences, in float64; one pass over conf and correct.
 * Counts go to integer cells (bin, correct), confidences to float64 sums; each thread
 * has COPIES interleaved copies of them (consecutive samples in one bin would otherwise
 * wait on each other's additions). Returns 0, or -1 when its scratch memory cannot be
 * allocated (the caller then uses the PyTorch ops). */
#define COPIES 4
#define DEFINE_BIN_SUMS(NAME, T)                                                            \
    int NAME(const T *conf, const uint8_t *correct, int64_t n, const double *edges,      \
             int64_t m, int left, double *sums, int threads) {                             \
        threads = team(threads);                                                           \
        const int64_t copies = (int64_t)threads * COPIES;                                  \
        double *conf_sums;                                                                 \
        int64_t *cells;                                                                    \
        if (zeroed(copies * m, &conf_sums, copies * 2 * m, &cells)) return -1;             \
        _Pragma("omp parallel for num_threads(threads) schedule(static, 1)")               \
        for (int t = 0; t < threads; t++) {                                                \
            const int64_t a = n * t / threads, b = n * (t + 1) / threads;                  \
            for (int64_t i = a; i < b; i++) {                                              \
                const int64_t c = (int64_t)t * COPIES + (i & (COPIES - 1));                \
                const int64_t j = bin_of((double)conf[i], edges, m, left);                 \
                cells[(c * m + j) * 2 + (correct[i] != 0)]++;                              \
                conf_sums[c * m + j] += conf[i];                                           \
            }                                                                              \
        }                                                                                  \
        for (int64_t j = 0; j < m; j++) {                                                  \
            int64_t misses = 0, hits = 0;                                                  \
            double total = 0;                                                              \
            for (int64_t c = 0; c < copies; c++) {                                         \
                misses += cells[(c * m + j) * 2], hits += cells[(c * m + j) * 2 + 1];      \
                total += conf_sums[c * m + j];                                             \
            }                                                                              \
            sums[j] = (double)(misses + hits), sums[m + j] = (double)hits, sums[2 * m + j] = total; \
        }                                                                                  \
        free(cells), free(conf_sums);                                                      \
        return 0;                                                                          \
    }

DEFINE_BIN_SUMS(calib_bin_sums_f32, float)
DEFINE_BIN_SUMS(calib_bin_sums_f64, double)

/* Classwise ECE's sums over rows of p: per class k the column sum col[k]; per cell
 * (k, b), flat k * m + b, the sum psum of the entries p_ik above the first inner edge
 * e[1] (at or above it when `left`) that fall in bin b, and the count hits of rows with
 * y_i = k whose p[i, y_i] falls in bin b. Entries at or below e[1] all lie in bin 0,
 * whose psum the caller gets as the column sum minus the other bins' (most entries of
 * wide rows are there, so they are only summed, never binned). Accumulates into
 * col (k), psum (k m) and hits (k m), which the caller zeroes; float64 sums. Each thread
 * sums into its own copy. Returns 0, or -1 when out of memory. */
#define DEFINE_CLASSWISE(NAME, T, V, W, S, TAIL)                                                  \
    static void NAME##_rows(const T *p, const int64_t *y, int64_t n, int64_t k,           \
                            const double *e, int64_t m, int left, double *col,             \
                            double *psum, int64_t *hits) {                                 \
        const V ev = OP(set1, S)((T)e[1]);                                                 \
        const int64_t rest = k % W;                                                        \
        const __m256i tail = _mm256_loadu_si256((const __m256i *)(TAIL + W - rest));       \
        for (int64_t i = 0; i < n; i++) {                                                  \
            const T *r = p + i * k;                                                        \
            for (int64_t j = 0; j < k; j += W) { /* the tail: masked lanes read 0 < e[1] */ \
                const V a = j + W <= k ? OP(loadu, S)(r + j) : OP(maskload, S)(r + j, tail); \
                unsigned bits = OP(movemask, S)(left ? OP(cmp, S)(a, ev, _CMP_GE_OQ)       \
                                                     : OP(cmp, S)(a, ev, _CMP_GT_OQ));     \
                for (; bits; bits &= bits - 1) {                                           \
                    const int64_t q = j + __builtin_ctz(bits);                             \
                    psum[q * m + bin_of((double)r[q], e, m, left)] += r[q];                \
                }                                                                          \
            }                                                                              \
            for (int64_t q = 0; q < k; q++) col[q] += r[q]; /* vectorised by the compiler */ \
            hits[y[i] * m + bin_of((double)r[y[i]], e, m, left)]++;                        \
        }                                                                                  \
    }                                                                                      \
    int NAME(const T *p, const int64_t *y, int64_t n, int64_t k, const double *e,         \
             int64_t m, int left, double *col, double *psum, int64_t *hits, int threads) { \
        threads = team(threads);                                                           \
        const int64_t width = k + k * m; /* one thread's col, then psum */                \
        double *sums;                                                                      \
        int64_t *counts;                                                                   \
        if (zeroed(threads * width, &sums, threads * k * m, &counts)) return -1;           \
        _Pragma("omp parallel for num_threads(threads) schedule(static, 1)")               \
        for (int t = 0; t < threads; t++) {                                                \
            const int64_t a = n * t / threads, b = n * (t + 1) / threads;                  \
            double *mine = sums + (int64_t)t * width;                                      \
            NAME##_rows(p + a * k, y + a, b - a, k, e, m, left, mine, mine + k,            \
                        counts + (int64_t)t * k * m);                                      \
        }                                                                                  \
        for (int t = 0; t < threads; t++) {                                                \
            const double *mine = sums + (int64_t)t * width;                                \
            const int64_t *theirs = counts + (int64_t)t * k * m;                           \
            for (int64_t q = 0; q < k; q++) col[q] += mine[q];                             \
            for (int64_t c = 0; c < k * m; c++) psum[c] += mine[k + c], hits[c] += theirs[c]; \
        }                                                                                  \
        free(sums), free(counts);                                                          \
        return 0;                                                                          \
    }

DEFINE_CLASSWISE(calib_classwise_f32, float, __m256, 8, ps, TAIL32)
DEFINE_CLASSWISE(calib_classwise_f64, double, __m256d, 4, pd, TAIL64)

#else /* no AVX2 on this machine: calib/_native.py sees 0 and keeps the PyTorch ops */

int calib_native_abi(void) { return 0; }

#endif
