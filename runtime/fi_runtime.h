/* fi_runtime.h: the public API of libfi_runtime.so, FlashInfer-class GPU kernels
 * compiled just in time (NVRTC / hiprtc) and kept in an on-disk SQLite cache. */
#ifndef FI_RUNTIME_H
#define FI_RUNTIME_H

#include <stddef.h>
#include <stdint.h>
#include <dlpack/dlpack.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32)
#define FI_API
#else
#define FI_API __attribute__((visibility("default")))
#endif

/* Ownership, once for the whole API:
 * - fi_runtime_create makes a runtime; fi_runtime_destroy frees it and every
 *   module it loaded. A runtime may be used from several threads at once.
 * - Tensors, streams and device memory always belong to the caller; the
 *   runtime keeps no pointer to them after a call returns.
 * - Strings returned by the library (fi_status_string, fi_version,
 *   fi_last_error) belong to the library; fi_last_error's text is valid until
 *   the next failing call on the same thread. */

/** Every public function returns one of these; FI_OK is zero. */
typedef enum fi_status {
  FI_OK = 0,
  FI_ERR_INVALID_ARGUMENT = -1, /* a bad argument; fi_last_error names it */
  FI_ERR_UNSUPPORTED = -2,      /* valid, but not implemented (dtype, arch, ...) */
  FI_ERR_NO_DEVICE = -3,        /* no GPU driver, or no such device */
  FI_ERR_COMPILE = -4,          /* NVRTC/hiprtc missing or failed; log in fi_last_error */
  FI_ERR_CACHE = -5,            /* the on-disk cache could not be used */
  FI_ERR_DEVICE = -6,           /* a driver call (load, launch) failed */
  FI_ERR_OUT_OF_MEMORY = -7,
  FI_ERR_INTERNAL = -8
} fi_status;

/** Opaque runtime handle: the compiler, the cache and the loaded kernels. */
typedef struct fi_runtime fi_runtime;

/** Options for fi_runtime_create. Call fi_options_init first, then change
 * fields; fields added later keep their defaults for old callers. */
typedef struct fi_options {
  /** sizeof(fi_options) as the caller compiled it; set by fi_options_init. */
  size_t struct_size;
  /** Writable cache file. NULL: $FI_CACHE_PATH, else
   * $XDG_CACHE_HOME/fi_runtime/kernels.db, else ~/.cache/fi_runtime/kernels.db.
   * ":memory:" keeps compiled kernels in this process only. */
  const char *cache_path;
  /** Read-only cache searched before the user cache (e.g. shipped inside a
   * container image; made with `fi-cache export --to`). Opened read-only,
   * never written; refused if anyone but root or this user could write it.
   * NULL: $FI_CACHE_SYSTEM_PATH, else none. "" means none. */
  const char *system_cache_path;
  /** Messages on stderr: 0 off, 1 error, 2 warn, 3 info, 4 debug.
   * -1: $FI_LOG_LEVEL (a number or a name), else 2. */
  int log_level;
} fi_options;

/** Fills *o with the defaults. */
FI_API void fi_options_init(fi_options *o);

/** Creates a runtime. opts may be NULL for the defaults. Touches no GPU and
 * loads no compiler: both are loaded at first need, so a runtime can be
 * created (and the cache prewarmed) on a machine without a GPU. */
FI_API fi_status fi_runtime_create(const fi_options *opts, fi_runtime **out);

/** Destroys a runtime made by fi_runtime_create (NULL is ignored). The caller
 * must have finished or synchronized the work it launched through it. */
FI_API void fi_runtime_destroy(fi_runtime *rt);

/** "MAJOR.MINOR.PATCH" of this library. */
FI_API const char *fi_version(void);

/** A constant name for a status ("FI_ERR_INVALID_ARGUMENT", ...). */
FI_API const char *fi_status_string(fi_status s);

/** The message of the last failing call made on this thread: it names the
 * argument or the step that failed; for a compile failure it holds the
 * compiler's log. "" if no call on this thread has failed. */
FI_API const char *fi_last_error(void);

/** What a runtime has done since it was created. Set struct_size to
 * sizeof(fi_stats) before the call; fields added later stay unread by old callers. */
typedef struct fi_stats {
  size_t struct_size;
  int64_t memo_hits;        /* calls served from the in-process memo (the hot path) */
  int64_t cache_hits;       /* kernels loaded from the on-disk cache (either layer) */
  int64_t compiles;         /* kernels this process compiled */
  int64_t compile_failures;
  double compile_ms;        /* total time in the compiler */
  int64_t waits;            /* misses that waited for another thread or process's compile */
  int64_t evictions;        /* entries removed to keep the file under FI_CACHE_MAX_BYTES */
  int64_t repairs;          /* corrupt entries dropped, corrupt files moved aside,
                               binaries the driver rejected and rebuilt */
} fi_stats;

/** Fills *st (st->struct_size set by the caller) with rt's counters. */
FI_API fi_status fi_runtime_stats(fi_runtime *rt, fi_stats *st);

/** RMSNorm: out[i, :] = input[i, :] / sqrt(mean(input[i, :]^2) + eps) * weight.
 * input and out are [tokens, hidden] on the same CUDA (or ROCm) device, with
 * a row stride of at least hidden elements and unit column stride; out may be
 * the same memory as input. weight is [hidden], contiguous. dtype float16,
 * bfloat16 or float32, the same for all three; accumulation in float32.
 * hidden may be any size >= 1; tokens may be 0 (nothing is launched).
 * stream is the caller's CUstream / hipStream_t (NULL: the legacy default
 * stream). The launch is asynchronous; nothing is synchronized. */
FI_API fi_status fi_rmsnorm(fi_runtime *rt, const DLTensor *input, const DLTensor *weight,
                            double eps, DLTensor *out, void *stream);

/* ---- more norms: same conventions as fi_rmsnorm ([tokens, hidden] rows, strided rows
 * allowed, fp16/bf16/fp32, float32 accumulation, the caller's stream) ---- */

/** residual += input; input = rmsnorm(residual) * weight. Both tensors are
 * updated in place (FlashInfer's fused_add_rmsnorm). */
FI_API fi_status fi_fused_add_rmsnorm(fi_runtime *rt, DLTensor *input, DLTensor *residual,
                                      const DLTensor *weight, double eps, void *stream);

/** Gemma's RMSNorm: out = input / rms(input) * (1 + weight). out may alias input. */
FI_API fi_status fi_gemma_rmsnorm(fi_runtime *rt, const DLTensor *input, const DLTensor *weight,
                                  double eps, DLTensor *out, void *stream);

/** residual += input; input = rmsnorm(residual) * (1 + weight), in place. */
FI_API fi_status fi_gemma_fused_add_rmsnorm(fi_runtime *rt, DLTensor *input, DLTensor *residual,
                                            const DLTensor *weight, double eps, void *stream);

/** LayerNorm: out = (input - mean) / sqrt(var + eps) * gamma + beta, per row.
 * gamma and beta [hidden] are the input's dtype or float32. out may alias input. */
FI_API fi_status fi_layernorm(fi_runtime *rt, const DLTensor *input, const DLTensor *gamma,
                              const DLTensor *beta, double eps, DLTensor *out, void *stream);

/* ---- gated activations: input [tokens, 2d] (rows may be strided), out [tokens, d];
 * out = act(input[:, :d]) * input[:, d:]; fp16, bf16, fp32 ---- */
FI_API fi_status fi_silu_and_mul(fi_runtime *rt, const DLTensor *input, DLTensor *out,
                                 void *stream);
/** act = GELU with erf. */
FI_API fi_status fi_gelu_and_mul(fi_runtime *rt, const DLTensor *input, DLTensor *out,
                                 void *stream);
/** act = GELU with the tanh approximation. */
FI_API fi_status fi_gelu_tanh_and_mul(fi_runtime *rt, const DLTensor *input, DLTensor *out,
                                      void *stream);

/* ---- cascade: merging partial attention states. A state is (v, s): v [seq, H, D]
 * fp16/bf16/fp32 and s [seq, H] float32, the log-sum-exp of that part's attention
 * scores in NATURAL log (the convention of every LSE fi_runtime returns). Merging
 * parts a and b: s = log(exp(s_a) + exp(s_b)); v = exp(s_a - s) v_a + exp(s_b - s) v_b. ---- */

/** Merges (v_a, s_a) and (v_b, s_b) into (v_out, s_out); s_out may be NULL. */
FI_API fi_status fi_merge_state(fi_runtime *rt, const DLTensor *v_a, const DLTensor *s_a,
                                const DLTensor *v_b, const DLTensor *s_b, DLTensor *v_out,
                                DLTensor *s_out, void *stream);

/** Merges (v_other, s_other) into (v, s) in place. mask, if not NULL, is a
 * uint8 or bool [seq]: rows where it is 0 are left as they are. */
FI_API fi_status fi_merge_state_in_place(fi_runtime *rt, DLTensor *v, DLTensor *s,
                                         const DLTensor *v_other, const DLTensor *s_other,
                                         const DLTensor *mask, void *stream);

/** Merges N states: v [seq, N, H, D], s [seq, N, H] into v_out [seq, H, D]
 * and s_out [seq, H] (s_out may be NULL). */
FI_API fi_status fi_merge_states(fi_runtime *rt, const DLTensor *v, const DLTensor *s,
                                 DLTensor *v_out, DLTensor *s_out, void *stream);

/* ---- RoPE: rotary position embedding on q [nnz, H_qo, D] and k [nnz, H_kv, D]
 * (fp16/bf16; head dims may be strided, D contiguous), in place when q_out == q and
 * k_out == k, else written to q_out/k_out of the same shapes. pos_ids [nnz] int32 or
 * int64. Only the first rotary_dim (even, <= D) elements of each head rotate; the rest
 * are copied (out of place) or left (in place). interleave = 0: pairs (i, i + rotary_dim/2)
 * (GPT-NeoX / Llama); 1: pairs (2i, 2i+1) (GPT-J). Frequencies in float:
 * inv_freq_i = 1 / (rope_scale * rope_theta^(2i / rotary_dim)). ---- */
FI_API fi_status fi_apply_rope_pos_ids(fi_runtime *rt, const DLTensor *q, const DLTensor *k,
                                       DLTensor *q_out, DLTensor *k_out, const DLTensor *pos_ids,
                                       int rotary_dim, int interleave, double rope_scale,
                                       double rope_theta, void *stream);

/** Llama 3.1's frequency scaling on top of fi_apply_rope_pos_ids (rope_scale is the
 * scaling factor, 8 for Llama 3.1): wavelengths longer than old_context_len /
 * low_freq_factor are divided by rope_scale, shorter than old_context_len /
 * high_freq_factor kept, and interpolated between. */
FI_API fi_status fi_apply_llama31_rope_pos_ids(fi_runtime *rt, const DLTensor *q,
                                               const DLTensor *k, DLTensor *q_out,
                                               DLTensor *k_out, const DLTensor *pos_ids,
                                               int rotary_dim, int interleave, double rope_scale,
                                               double rope_theta, double low_freq_factor,
                                               double high_freq_factor, double old_context_len,
                                               void *stream);

/** RoPE from a precomputed float32 cos_sin_cache [max_pos, rotary_dim]: the first
 * rotary_dim/2 columns are cos, the last rotary_dim/2 sin (vLLM's and FlashInfer's
 * layout). A pos_id outside [0, max_pos) is the caller's error (not checked on the GPU). */
FI_API fi_status fi_apply_rope_with_cos_sin_cache(fi_runtime *rt, const DLTensor *q,
                                                  const DLTensor *k, DLTensor *q_out,
                                                  DLTensor *k_out, const DLTensor *cos_sin_cache,
                                                  const DLTensor *pos_ids, int interleave,
                                                  void *stream);

/* ---- paged KV cache ---- */

/** Layout of a paged K or V cache: NHD [pages, page_size, H_kv, D] or HND
 * [pages, H_kv, page_size, D]. Strided views are allowed (FlashInfer's interleaved
 * [pages, 2, ...] buffer is a K view and a V view of one tensor). */
typedef enum fi_kv_layout { FI_KV_LAYOUT_NHD = 0, FI_KV_LAYOUT_HND = 1 } fi_kv_layout;

/** Writes new tokens' K and V (append_k, append_v [nnz, H_kv, D], fp16/bf16) into the
 * paged caches (fp16/bf16 like the input, or fp8 e4m3/e5m2 storing value / scale with
 * k_scale/v_scale, 1.0 meaning none). Token i goes to request batch_indices[i] at
 * position positions[i] (int32 [nnz]): page kv_indices[kv_indptr[b] + pos / page_size],
 * slot pos % page_size. kv_indptr [B+1], kv_indices [nnz_pages], kv_last_page_len [B]
 * are int32 device tensors describing the cache after the append. */
FI_API fi_status fi_append_paged_kv_cache(fi_runtime *rt, const DLTensor *append_k,
                                          const DLTensor *append_v,
                                          const DLTensor *batch_indices,
                                          const DLTensor *positions, DLTensor *paged_k_cache,
                                          DLTensor *paged_v_cache, const DLTensor *kv_indices,
                                          const DLTensor *kv_indptr,
                                          const DLTensor *kv_last_page_len, fi_kv_layout layout,
                                          double k_scale, double v_scale, void *stream);

/** For each appended token i of request b (append_indptr [B+1] int32, seq_lens [B]
 * int32 = lengths after the append): batch_indices[i] = b and positions[i] =
 * seq_lens[b] - (append_indptr[b+1] - append_indptr[b]) + (i - append_indptr[b]).
 * batch_indices and positions are int32 [nnz]. */
FI_API fi_status fi_get_batch_indices_positions(fi_runtime *rt, const DLTensor *append_indptr,
                                                const DLTensor *seq_lens,
                                                DLTensor *batch_indices, DLTensor *positions,
                                                void *stream);

#ifdef __cplusplus
}
#endif
#endif /* FI_RUNTIME_H */
