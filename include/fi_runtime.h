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
 *   the next failing call on the same thread.
 * Launches, once for the whole API: on sm_90 and later every kernel is
 * launched with programmatic dependent launch allowed. Its blocks may be
 * scheduled while the previous kernel in the stream finishes, but each one
 * waits for that kernel to complete (and its writes to be visible) before it
 * reads or writes memory, so stream order holds as with a plain launch; it
 * saves about 1 us between two of the runtime's kernels. Each kernel also
 * lets its dependents start at entry: a kernel of yours launched right after
 * one of ours with programmatic stream serialization allowed may start before
 * ours finishes, so it must call cudaGridDependencySynchronize (griddepcontrol.
 * wait) before it reads what ours wrote (FI_PDL=0 does not change that);
 * plain launches are unaffected. FI_PDL=0 in the environment (read once per
 * fi_runtime, when it first uses the driver) launches ours without the
 * attribute. */

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

/** Copies the first `bytes` bytes of src (a contiguous CUDA or ROCm tensor) into host
 * memory dst once the device's work before it is done (stream's included): a blocking
 * copy for callers that hold only DLPack tensors (the TVM-FFI shim's FlashInfer-ABI decode
 * plan reads request lengths its caller keeps on the device). Not for the hot path;
 * refused while a graph is being captured on stream. */
FI_API fi_status fi_copy_to_host(fi_runtime *rt, const DLTensor *src, void *dst, size_t bytes, void *stream);

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

/* ---- decode attention: one query token per request against its KV cache ----
 * Query head h reads KV head h / (H_qo / H_kv) (GQA and MQA; H_qo / H_kv from 1 to 128). dtypes:
 * q and out float16 or bfloat16; K and V caches q's dtype or fp8 (kDLFloat8_e4m3fn code 10,
 * kDLFloat8_e5m2 code 12, 8 bits) holding value / scale. head_dim 64, 128 or 256,
 * contiguous; every other dimension may be strided, with start addresses and strides in
 * multiples of 16 bytes (8 elements; 16 of an fp8 cache). lse, when not NULL, is float32,
 * the natural-log log-sum-exp of each head's scaled logits (fi_merge_state's convention;
 * -inf for an empty request, whose output is 0). Softmax in float32; P is rounded to the
 * mma's 16-bit type (q's, or float16 with an fp8 cache) before P.V, as in FlashInfer. */

/** Positional encoding applied on the fly: none, or RoPE with non-interleaved halves
 * (FlashInfer's ROPE_LLAMA) on q at position kv_len - 1 and on each k at its position. */
typedef enum fi_pos_encoding { FI_POS_NONE = 0, FI_POS_ROPE_LLAMA = 1 } fi_pos_encoding;

/** Attention parameters; fi_attention_params_init sets the defaults noted. */
typedef struct fi_attention_params {
  double sm_scale;        /**< logits scale; 0 (default): 1 / sqrt(head_dim) */
  double logits_soft_cap; /**< > 0: logit = cap * tanh(sm_scale * q.k / cap); 0 (default): off */
  int window_left;        /**< >= 0: attend to the last window_left + 1 tokens; -1 (default): all */
  fi_pos_encoding pos_encoding; /**< FI_POS_NONE (default) or FI_POS_ROPE_LLAMA */
  double rope_scale;      /**< RoPE: inv_freq_i = 1 / (rope_scale * rope_theta^(2i / head_dim)); 1 */
  double rope_theta;      /**< 1e4 */
  double k_scale, v_scale; /**< per-tensor cache scales (k = stored * k_scale); 1 */
} fi_attention_params;

FI_API void fi_attention_params_init(fi_attention_params *p);

/** What an attention run may take beyond its plan (the *_ex entry points; the plain ones
 * pass none). Call fi_attention_extras_init, then set what is used; struct_size lets later
 * versions add members.
 * - sinks: learned attention sinks (gpt-oss): a float32 device tensor [H_qo], contiguous,
 *   on q's device, or NULL. Each query head's sink is a logit in the units of the scaled
 *   logits (sm_scale * q.k, after the soft cap where one is set) that joins every row's
 *   softmax denominator and carries no value: out = sum_j e^{s_j} v_j / (e^{sink} +
 *   sum_j e^{s_j}), lse = log(e^{sink} + sum_j e^{s_j}) (natural log). A row with no key
 *   gets out = 0 and lse = sink. Each sink is finite or -inf (no sink for that head).
 *   Cascades (fi_merge_state) stay exact when one of the merged parts carries the sinks
 *   and the others do not.
 * - custom_mask (fi_single_prefill_ex, and the batch prefill plans' _ex forms, which lay
 *   the requests' segments one after the other): packed bits, a uint8 device tensor
 *   [ceil(L_q * L_kv / 8)] (or longer), contiguous: bit t * L_kv + j (byte (t * L_kv + j) / 8,
 *   bit (t * L_kv + j) % 8: FlashInfer's packbits order, little-endian) is 1 where query
 *   token t may attend KV token j; AND-ed with causal and the window. A row whose keys are
 *   all masked gets out = 0 and lse = -inf (or the sink). The call runs on the mma.sync
 *   kernel (not Hopper's wgmma one). Decode and the batch prefill runs refuse it (a batch
 *   takes its mask at plan time). */
typedef struct fi_attention_extras {
  size_t struct_size;    /**< sizeof(fi_attention_extras), set by init */
  const DLTensor *sinks; /**< NULL (default) or [H_qo] float32 */
  const DLTensor *custom_mask; /**< NULL (default) or packed uint8 bits (above) */
  int lse_base2; /**< 1: lse is written in base 2 (log2 of the softmax denominator, in
                      log2 units: FlashInfer's and TVM's convention); 0 (default): natural
                      log. Runs of decode and prefill read it. */
  int head_dim_vo; /**< V's and out's head_dim where it differs from q's and k's head_dim:
                        192 with 128 (DeepSeek's MHA prefill, the non-absorbed path);
                        read by fi_batch_prefill_ragged_plan_ex (ragged KV only; no
                        RoPE, fp8 cache or custom mask); 0 (default): head_dim.
                        fi_single_prefill takes V's head_dim from v's shape. */
} fi_attention_extras;

/** Zeroes the caller's struct of `size` bytes and sets struct_size to it: through the
 * macro, the size of the header the caller was built with, so that a later library reads
 * only the members that caller has. */
FI_API void fi_attention_extras_init_sized(fi_attention_extras *x, size_t size);
#define fi_attention_extras_init(x) fi_attention_extras_init_sized((x), sizeof *(x))

/** Decode attention for one request: q [H_qo, D], k and v [L, H_kv, D] (NHD) or
 * [H_kv, L, D] (HND), out [H_qo, D], lse [H_qo] or NULL; p NULL for the defaults. From
 * 512 attended tokens the tokens are split over the device (one wave of blocks), the
 * partials in scratch memory allocated and freed on `stream`; one block per KV head
 * (unsplit) on a stream being captured into a graph, without stream-ordered memory pools
 * (ROCm), if the scratch cannot be allocated, or with FI_DECODE_SINGLE_SPLIT=0. */
FI_API fi_status fi_single_decode(fi_runtime *rt, const DLTensor *q, const DLTensor *k,
                                  const DLTensor *v, DLTensor *out, DLTensor *lse,
                                  fi_kv_layout layout, const fi_attention_params *p,
                                  void *stream);
/** fi_single_decode with extras (NULL: none). */
FI_API fi_status fi_single_decode_ex(fi_runtime *rt, const DLTensor *q, const DLTensor *k,
                                     const DLTensor *v, DLTensor *out, DLTensor *lse,
                                     fi_kv_layout layout, const fi_attention_params *p,
                                     const fi_attention_extras *x, void *stream);

/** Batch decode over a paged KV cache, planned on the host and run on the device.
 * fi_batch_decode_plan decides the work partition (split-KV, flash-decoding, when the
 * batch cannot fill the device; partials merged by LSE inside the same kernel, each
 * chunk's output rounded to the output dtype and its LSE kept in float32, as FlashInfer
 * keeps them) from host copies of indptr and last_page_len and writes its tables into
 * the caller's workspace, in stream order; fi_batch_decode_run then only launches: no
 * host decision, no allocation, no synchronization. A plan is a host object owned by the
 * caller; it keeps the workspace's address, which must outlive it. Run the plan (or
 * re-plan) before planning again into the same workspace on another stream. */
typedef struct fi_decode_plan fi_decode_plan;

typedef struct fi_batch_decode_info {
  int batch;                    /**< B >= 0 */
  const int32_t *indptr;        /**< host copy, B + 1 entries: request b's pages are
                                     indices[indptr[b] .. indptr[b+1]) */
  const int32_t *last_page_len; /**< host copy, B entries: 1..page_size (0 for no pages) */
  int num_qo_heads, num_kv_heads, head_dim, page_size;
  DLDataType q_dtype, kv_dtype;
  /** CUDA-graph mode when > 0: the grid is fixed for batches up to max_batch, so a run
   * captured in a graph replays correctly after any re-plan of the same plan (same
   * heads, dtypes, parameters) for a batch <= max_batch; q, out and lse then need
   * max_batch rows, indptr max_batch + 1 entries and last_page_len max_batch (the run
   * refuses fewer). A replay is not checked: indices must hold every replayed batch's
   * indptr[B] entries. */
  int max_batch;
} fi_batch_decode_info;

/** Workspace bytes a plan for up to max_batch requests needs on device (the caller
 * allocates it, 256-byte aligned, and may keep it for every later plan). */
FI_API fi_status fi_batch_decode_workspace_size(fi_runtime *rt, DLDevice device, int max_batch,
                                                int num_qo_heads, int num_kv_heads,
                                                int head_dim, size_t *bytes);

/** Plans a batch: *plan NULL makes a new plan, else re-plans it in place (same heads,
 * dtypes, parameters, max_batch and workspace). workspace is a 1-D device tensor of at
 * least fi_batch_decode_workspace_size bytes; the tables are written on stream. */
FI_API fi_status fi_batch_decode_plan(fi_runtime *rt, const fi_batch_decode_info *info,
                                      const fi_attention_params *p, DLTensor *workspace,
                                      void *stream, fi_decode_plan **plan);

/** Runs a plan: q [B, H_qo, D], paged_k_cache and paged_v_cache [pages, page_size, H_kv,
 * D] (NHD) or [pages, H_kv, page_size, D] (HND) with equal strides (views of
 * FlashInfer's interleaved [pages, 2, ...] buffer qualify), indptr [B+1], indices [nnz]
 * (nnz at least the plan's indptr[B]), last_page_len [B] int32 contiguous device tensors
 * matching the plan's host copies,
 * out [B, H_qo, D], lse [B, H_qo] or NULL. Page ids are device data: one out of range
 * is the caller's error. */
FI_API fi_status fi_batch_decode_run(fi_runtime *rt, const fi_decode_plan *plan,
                                     const DLTensor *q, const DLTensor *paged_k_cache,
                                     const DLTensor *paged_v_cache, const DLTensor *indptr,
                                     const DLTensor *indices, const DLTensor *last_page_len,
                                     fi_kv_layout layout, DLTensor *out, DLTensor *lse,
                                     void *stream);
/** fi_batch_decode_run with extras (NULL: none). */
FI_API fi_status fi_batch_decode_run_ex(fi_runtime *rt, const fi_decode_plan *plan,
                                        const DLTensor *q, const DLTensor *paged_k_cache,
                                        const DLTensor *paged_v_cache, const DLTensor *indptr,
                                        const DLTensor *indices, const DLTensor *last_page_len,
                                        fi_kv_layout layout, DLTensor *out, DLTensor *lse,
                                        const fi_attention_extras *x, void *stream);

FI_API void fi_batch_decode_plan_destroy(fi_decode_plan *plan);

/* ---- sampling: softmax, sampling from probabilities or logits (top-k, top-p, min-p),
 * renorm and mask. Shared conventions:
 * - probs / logits are [batch, vocab] float16, bfloat16 or float32 (any row stride >= vocab,
 *   unit column stride), vocab from 1 to 2^30. A row of probs need not sum to 1: every
 *   definition below is relative to the row's own total. Negative and NaN probabilities
 *   count as 0; NaN logits as -inf.
 * - Per-request parameters: a [batch] device tensor (int32 top_k_arr; float32 top_p_arr,
 *   min_p_arr, temperature_arr; any element stride), or NULL and the scalar for every row.
 *   A scalar is checked (FI_ERR_INVALID_ARGUMENT naming it); array values are used as given,
 *   with the meanings stated for out-of-range values.
 * - Samples are int32 [batch] token indices. A row with no positive probability in its
 *   allowed set gives -1.
 * - Randomness: Philox4x32-10 keyed by seed, with a counter made of offset, the row and the
 *   position in the row (or a top-p draw's index). The same (seed, offset) on the same values gives the same draws,
 *   whatever the batch size or the device's SM count; a new offset gives fresh draws (an
 *   engine passes a new offset each step). No draw needs a synchronization or a workspace.
 * - Sets, with ties kept together (exact, value-based thresholds; no sort):
 *   top-k: the elements >= the k-th largest value (more than k on ties at the boundary);
 *     k <= 0 or k >= vocab keeps every element.
 *   top-p: sort the values in decreasing order; the set is every element >= the first value
 *     v at which the running mass reaches top_p x (the row's total mass), ties of v
 *     included. Masses are summed in 64-bit fixed point (units of 2^-36 of a probability;
 *     exact and order-independent), the target rounded up: ceil(top_p x total). top_p >= 1
 *     (or NaN, in an array) keeps everything; top_p <= 0 keeps the largest value(s).
 *   min-p: the elements with p >= min_p x max(p) (a float32 product); min_p <= 0 (or NaN,
 *     in an array) keeps all, min_p > 1 acts as 1.
 * - The draw is exact for the renormalized distribution over the set: P(i) = p_i / sum of
 *   the set (up to float32 rounding of partial sums), and every call ends in a bounded
 *   number of passes over the row. With a top-p filter (top_p < 1) the row first makes 4
 *   draws from the distribution before top-p (after top-k, from logits), weighted by the
 *   fixed-point masses above (so a probability below 2^-37 is not drawn there), and the
 *   first that lies in the top-p set is the sample: rejection sampling with at most 4
 *   tries, each inside with probability >= top_p. When all 4 miss, the set's threshold is
 *   searched and the row sampled from the set as above. ---- */

/** softmax(logits / temperature) into out, float32 [batch, vocab] (out may be logits
 * itself when logits is float32). temperature_arr (float32 [batch], positive) or the scalar
 * temperature (> 0) per row. A row of only -inf gives zeros. */
FI_API fi_status fi_softmax(fi_runtime *rt, const DLTensor *logits, const DLTensor *temperature_arr,
                            double temperature, DLTensor *out, void *stream);

/** One draw per row from probs: samples[b] = i with probability probs[b, i] / sum(probs[b]). */
FI_API fi_status fi_sampling_from_probs(fi_runtime *rt, const DLTensor *probs, DLTensor *samples,
                                        uint64_t seed, uint64_t offset, void *stream);

/** One draw per row from the top-k set of probs, renormalized. */
FI_API fi_status fi_top_k_sampling_from_probs(fi_runtime *rt, const DLTensor *probs,
                                              const DLTensor *top_k_arr, int top_k,
                                              DLTensor *samples, uint64_t seed, uint64_t offset,
                                              void *stream);

/** One draw per row from the top-p (nucleus) set of probs, renormalized. Scalar top_p in (0, 1]. */
FI_API fi_status fi_top_p_sampling_from_probs(fi_runtime *rt, const DLTensor *probs,
                                              const DLTensor *top_p_arr, double top_p,
                                              DLTensor *samples, uint64_t seed, uint64_t offset,
                                              void *stream);

/** One draw per row from the min-p set of probs, renormalized. Scalar min_p in [0, 1]. */
FI_API fi_status fi_min_p_sampling_from_probs(fi_runtime *rt, const DLTensor *probs,
                                              const DLTensor *min_p_arr, double min_p,
                                              DLTensor *samples, uint64_t seed, uint64_t offset,
                                              void *stream);

/** FlashInfer's top_k_top_p_sampling_from_logits with filter_apply_order "top_k_first":
 * the top-k set of the logits, softmax over it, then one draw from the top-p set of those
 * probabilities. Either filter may be off (k <= 0 or >= vocab; top_p = 1). */
FI_API fi_status fi_top_k_top_p_sampling_from_logits(fi_runtime *rt, const DLTensor *logits,
                                                     const DLTensor *top_k_arr, int top_k,
                                                     const DLTensor *top_p_arr, double top_p,
                                                     DLTensor *samples, uint64_t seed,
                                                     uint64_t offset, void *stream);

/** FlashInfer's top_k_top_p_sampling_from_probs with filter_apply_order "top_k_first": the
 * top-k set of probs, renormalized, then one draw from the top-p set of it. Either filter
 * may be off (k <= 0 or >= vocab; top_p = 1). */
FI_API fi_status fi_top_k_top_p_sampling_from_probs(fi_runtime *rt, const DLTensor *probs,
                                                    const DLTensor *top_k_arr, int top_k,
                                                    const DLTensor *top_p_arr, double top_p,
                                                    DLTensor *samples, uint64_t seed,
                                                    uint64_t offset, void *stream);

/** One draw per row from softmax(logits) (FlashInfer's sampling_from_logits): samples[b] =
 * i with probability exp(logits[b, i]) / sum_j exp(logits[b, j]). */
FI_API fi_status fi_sampling_from_logits(fi_runtime *rt, const DLTensor *logits, DLTensor *samples,
                                         uint64_t seed, uint64_t offset, void *stream);

/** Chain speculative sampling (FlashInfer's chain_speculative_sampling): per request, the S
 * draft tokens draft_token_ids [batch, S] (int32, drawn by the draft model from draft_probs
 * [batch, S, vocab]) are checked in order against target_probs [batch, S + 1, vocab] (both
 * float32): token t at position i is accepted with probability min(1, p_i(t) / q_i(t)). At
 * the first rejection j, output_token_ids [batch, S + 1] (int32) gets the accepted tokens,
 * then one token drawn from max(p_j - q_j, 0) renormalized (from p_j where that has no
 * mass), then -1; when all S are accepted, the S drafts and a bonus token drawn from p_S.
 * accepted_num [batch] (int32, or NULL) is added the positions whose test passes, each on
 * its own (not stopping at the first rejection; the rejected position's own test counts as
 * failed); emitted_num [batch] (or NULL) the draft tokens emitted (j). A draft id outside
 * the vocabulary is rejected; a row without mass gives -1. All tensors contiguous (the
 * counters too), on one device; a batch up to 2^24, S up to 1024. Randomness as the other
 * samplers: Philox keyed by seed, counter (position, request, offset). */
FI_API fi_status fi_chain_speculative_sampling(fi_runtime *rt, const DLTensor *draft_probs,
                                               const DLTensor *draft_token_ids, const DLTensor *target_probs,
                                               DLTensor *output_token_ids, DLTensor *accepted_num,
                                               DLTensor *emitted_num, uint64_t seed, uint64_t offset, void *stream);

/** out = probs / (sum of the top-k set) on the top-k set, 0 elsewhere; out has probs'
 * dtype and shape (it may be probs itself). */
FI_API fi_status fi_top_k_renorm_probs(fi_runtime *rt, const DLTensor *probs,
                                       const DLTensor *top_k_arr, int top_k, DLTensor *out,
                                       void *stream);

/** out = probs / (sum of the top-p set) on the top-p set, 0 elsewhere. */
FI_API fi_status fi_top_p_renorm_probs(fi_runtime *rt, const DLTensor *probs,
                                       const DLTensor *top_p_arr, double top_p, DLTensor *out,
                                       void *stream);

/** out = logits on the top-k set, -inf elsewhere; out has logits' dtype and shape (it may
 * be logits itself). */
FI_API fi_status fi_top_k_mask_logits(fi_runtime *rt, const DLTensor *logits,
                                      const DLTensor *top_k_arr, int top_k, DLTensor *out,
                                      void *stream);

/* ---- prefill / append attention: many query tokens per request against its KV ----
 * Conventions are decode's: GQA with any group
 * (H_qo a multiple of H_kv), q / k / v / out float16 or bfloat16 (one dtype), head_dim 64,
 * 128 or 256 contiguous, other dimensions strided in multiples of 8 elements; lse float32
 * [tokens, H_qo] in natural log (fi_merge_state's convention; -inf and a zero output for
 * a row that attends nothing). Query token t of a request with L_q query tokens and L_kv
 * KV tokens sits at position t + L_kv - L_q (its new tokens are the last L_q of the KV:
 * append); it attends KV token j iff j <= t + L_kv - L_q (causal; the mask aligned to the
 * bottom right) and j >= t + L_kv - L_q - window_left (window_left >= 0). RoPE (Llama
 * halves) on the fly puts q at t + L_kv - L_q and k at j. fp8 caches (e4m3, e5m2 with
 * k_scale / v_scale) run on the mma.sync kernel, without RoPE. head_dim 192 with V's and
 * out's 128 (DeepSeek's MHA prefill): single prefill from v's shape, the ragged plan from
 * fi_attention_extras.head_dim_vo. */

/** Prefill parameters: the attention parameters and the mask. */
typedef struct fi_prefill_params {
  fi_attention_params attn; /**< fi_attention_params_init's defaults */
  int causal;               /**< 1 (default): causal; L_q > L_kv is then refused */
} fi_prefill_params;

FI_API void fi_prefill_params_init(fi_prefill_params *p);

/** Prefill of one request: q [L_q, H_qo, D], k and v [L_kv, H_kv, D] (NHD) or [H_kv, L_kv, D]
 * (HND) with equal strides, out [L_q, H_qo, D], lse [L_q, H_qo] or NULL; p NULL for the
 * defaults. V's last dimension 128 under D = 192: v and out of 128, v with its own strides.
 * No workspace: one block per q tile and KV head, no split of L_kv. */
FI_API fi_status fi_single_prefill(fi_runtime *rt, const DLTensor *q, const DLTensor *k,
                                   const DLTensor *v, DLTensor *out, DLTensor *lse,
                                   fi_kv_layout layout, const fi_prefill_params *p, void *stream);
/** fi_single_prefill with extras (NULL: none). */
FI_API fi_status fi_single_prefill_ex(fi_runtime *rt, const DLTensor *q, const DLTensor *k,
                                      const DLTensor *v, DLTensor *out, DLTensor *lse,
                                      fi_kv_layout layout, const fi_prefill_params *p,
                                      const fi_attention_extras *x, void *stream);

/** Batch prefill, planned on the host and run on the device as batch decode is: the plan
 * (from host copies of the index arrays) cuts every request's packed rows (query token x
 * head of a KV head's group) into q tiles, skips KV tiles above the causal diagonal, splits
 * long KV ranges across blocks when the batch cannot fill the device (partials merged by
 * LSE in a second kernel) and writes its tables into the caller's workspace on the stream;
 * run only launches. A plan is a host object owned by the caller; it keeps the
 * workspace's address, which must outlive it. On sm_90 the run's blocks also take their
 * work from a counter in the workspace (a persistent grid; the last block resets it): two
 * runs of one plan, or of plans sharing a workspace, must not overlap in time (order them
 * on one stream or with events), nor may a re-plan into that workspace overlap a run; after
 * a run that failed on the device, plan again before the next run. */
typedef struct fi_prefill_plan fi_prefill_plan;

typedef struct fi_batch_prefill_info {
  int batch;                       /**< B >= 0 */
  const int32_t *qo_indptr;        /**< host copy, B + 1: request b's query tokens are rows
                                        qo_indptr[b] .. qo_indptr[b+1] of q and out */
  const int32_t *kv_indptr;        /**< host copy, B + 1: ragged: request b's KV tokens are
                                        rows kv_indptr[b] .. kv_indptr[b+1] of k and v;
                                        paged: its pages are kv_indices[kv_indptr[b] ..) */
  const int32_t *kv_last_page_len; /**< paged only: host copy, B entries (decode's) */
  int num_qo_heads, num_kv_heads, head_dim;
  int page_size;                   /**< paged only, >= 1 */
  DLDataType q_dtype, kv_dtype;
  /** CUDA-graph mode when max_batch > 0: the grid and the q tile are fixed for batches of
   * up to max_batch requests and max_qo_tokens query tokens in all, so a captured run
   * replays correctly after any re-plan of the same plan within those sizes. */
  int max_batch, max_qo_tokens;
} fi_batch_prefill_info;

/** Workspace bytes a batch prefill plan for up to max_batch requests and max_qo_tokens query
 * tokens in all needs on device (the caller allocates it, 256-byte aligned). */
FI_API fi_status fi_batch_prefill_workspace_size(fi_runtime *rt, DLDevice device, int max_batch,
                                                 int max_qo_tokens, int num_qo_heads,
                                                 int num_kv_heads, int head_dim, size_t *bytes);

/** Plans a batch over a ragged KV (info->kv_indptr in tokens): *plan NULL makes a new plan,
 * else re-plans it in place (same heads, dtypes, parameters, sizes and workspace). */
FI_API fi_status fi_batch_prefill_ragged_plan(fi_runtime *rt, const fi_batch_prefill_info *info,
                                              const fi_prefill_params *p, DLTensor *workspace,
                                              void *stream, fi_prefill_plan **plan);

/** Runs a ragged plan: q [nnz_q, H_qo, D], k and v [nnz_kv, H_kv, D] (NHD) or [H_kv, nnz_kv, D]
 * (HND), out like q, lse [nnz_q, H_qo] or NULL. The index arrays travel in the plan. */
FI_API fi_status fi_batch_prefill_ragged_run(fi_runtime *rt, const fi_prefill_plan *plan,
                                             const DLTensor *q, const DLTensor *k,
                                             const DLTensor *v, fi_kv_layout layout,
                                             DLTensor *out, DLTensor *lse, void *stream);
/** fi_batch_prefill_ragged_run with extras (NULL: none). */
FI_API fi_status fi_batch_prefill_ragged_run_ex(fi_runtime *rt, const fi_prefill_plan *plan,
                                                const DLTensor *q, const DLTensor *k,
                                                const DLTensor *v, fi_kv_layout layout,
                                                DLTensor *out, DLTensor *lse,
                                                const fi_attention_extras *x, void *stream);

/** Plans a batch over a paged KV cache (decode's description: info->kv_indptr in pages,
 * kv_last_page_len, page_size). */
FI_API fi_status fi_batch_prefill_paged_plan(fi_runtime *rt, const fi_batch_prefill_info *info,
                                             const fi_prefill_params *p, DLTensor *workspace,
                                             void *stream, fi_prefill_plan **plan);

/** Runs a paged plan: q [nnz_q, H_qo, D], paged caches as fi_batch_decode_run's, kv_indices
 * [nnz_pages] int32 device tensor (page ids, the caller's to keep in range), out like q,
 * lse [nnz_q, H_qo] or NULL. */
FI_API fi_status fi_batch_prefill_paged_run(fi_runtime *rt, const fi_prefill_plan *plan,
                                            const DLTensor *q, const DLTensor *paged_k_cache,
                                            const DLTensor *paged_v_cache,
                                            const DLTensor *kv_indices, fi_kv_layout layout,
                                            DLTensor *out, DLTensor *lse, void *stream);
/** The batch prefill plans with extras: a plan takes extras->custom_mask (its runs then
 * read it: keep it allocated, and its bits may change between runs; a CUDA-graph re-plan
 * must keep the same tensor), every request's [L_q][L_kv] bits one after the other, each padded to a
 * whole byte (FlashInfer's segment_packbits layout), at least sum ceil(L_q * L_kv / 8)
 * bytes; sinks go to the run. A masked plan runs the mma.sync kernel. */
FI_API fi_status fi_batch_prefill_ragged_plan_ex(fi_runtime *rt, const fi_batch_prefill_info *info,
                                                 const fi_prefill_params *p, const fi_attention_extras *x,
                                                 DLTensor *workspace, void *stream, fi_prefill_plan **plan);
FI_API fi_status fi_batch_prefill_paged_plan_ex(fi_runtime *rt, const fi_batch_prefill_info *info,
                                                const fi_prefill_params *p, const fi_attention_extras *x,
                                                DLTensor *workspace, void *stream, fi_prefill_plan **plan);
/** fi_batch_prefill_paged_run with extras (NULL: none). */
FI_API fi_status fi_batch_prefill_paged_run_ex(fi_runtime *rt, const fi_prefill_plan *plan,
                                               const DLTensor *q, const DLTensor *paged_k_cache,
                                               const DLTensor *paged_v_cache,
                                               const DLTensor *kv_indices, fi_kv_layout layout,
                                               DLTensor *out, DLTensor *lse,
                                               const fi_attention_extras *x, void *stream);

FI_API void fi_batch_prefill_plan_destroy(fi_prefill_plan *plan);

/* ---- mixture of experts ---- */

/** Routing methods of fi_moe_routing. Every method picks each token's top_k experts one
 * at a time, ties to the smaller expert index; weights are float32, then multiplied by
 * routed_scaling_factor. */
typedef enum fi_moe_routing_method {
  FI_MOE_ROUTING_SOFTMAX_TOPK = 0,        /**< softmax over all experts, top-k; weights the softmax values */
  FI_MOE_ROUTING_RENORMALIZE = 1,         /**< top-k of the logits, softmax over those k (Mixtral) */
  FI_MOE_ROUTING_SOFTMAX_TOPK_RENORM = 2, /**< softmax, top-k, weights divided by their sum (Qwen3) */
  /** DeepSeek-V3/R1, Kimi-K2: s = sigmoid(logit), b = s + correction_bias; experts in n_group
   * groups; a group's score is the sum of its two largest b; the topk_group best groups are
   * kept (ties to the smaller group); top-k by b among their experts; weight = s /
   * (sum of the chosen s + 1e-20). */
  FI_MOE_ROUTING_DEEPSEEK_V3 = 3,
  FI_MOE_ROUTING_LLAMA4 = 4 /**< top-k of the logits (Llama-4: k = 1), weight sigmoid(logit) */
} fi_moe_routing_method;

typedef struct fi_moe_routing_params {
  int method;                   /**< fi_moe_routing_method */
  int top_k;                    /**< 1 .. min(experts, 32) */
  int n_group, topk_group;      /**< DeepSeek-V3 only: groups (dividing experts, at most 32) and groups kept */
  double routed_scaling_factor; /**< weights are multiplied by it (DeepSeek-V3: 2.5); 1 by default */
} fi_moe_routing_params;

/** Defaults: softmax + top-k, top_k 2, no groups, scaling 1. */
FI_API void fi_moe_routing_params_init(fi_moe_routing_params *p);

/** Routes tokens to experts: logits [T, E] float32 or bfloat16 (unit column stride), E at
 * most 512; correction_bias [E] float32 (DeepSeek-V3; NULL means zeros) or NULL;
 * expert_ids [T, top_k] int32 and weights [T, top_k] float32 written. */
FI_API fi_status fi_moe_routing(fi_runtime *rt, const DLTensor *logits, const DLTensor *correction_bias,
                                const fi_moe_routing_params *p, DLTensor *expert_ids, DLTensor *weights,
                                void *stream);

/** The tile tables a grouped GEMM over the experts reads (fi_moe_sort). The routes are
 * the expanded indices x = token * top_k + k of a [T, top_k] expert_ids table; those to
 * the local experts [local_expert_offset, local_expert_offset + local_num_experts) of
 * this rank (expert parallelism) are sorted by expert, each expert with c routes
 * getting ceil(c / tile_size) contiguous tiles in expert order, its routes in
 * increasing x. Rows are permuted indices. Invariants (tests/gpu/gpu_moe.c checks each):
 * permuted_idx_to_expanded_idx[expanded_idx_to_permuted_idx[x]] == x for every local
 * route; expanded_idx_to_permuted_idx[x] == -1 exactly for the other routes; tile t's live
 * rows [t * tile_size, tile_idx_to_mn_limit[t]) all belong to tile_idx_to_expert_idx[t]
 * (a local index), the rest of its rows hold -1; tiles from num_non_exiting_tiles on have
 * expert -1 and no live rows; total_num_padded_tokens = tiles used * tile_size. */
typedef struct fi_moe_sort_params {
  int num_experts;         /**< every expert of the model (ids outside [0, num_experts) go nowhere) */
  int local_expert_offset; /**< this rank's first expert */
  int local_num_experts;   /**< this rank's experts, 1 .. 256 */
  int tile_size;           /**< 64, 128 or 256 rows a tile */
} fi_moe_sort_params;

/** The most tiles the sort can use for T tokens of top_k routes over local_num_experts
 * experts at tile_size, a bound some routing reaches: with R = T * top_k, R when R <=
 * local_num_experts, else (R + (tile_size - 1) * local_num_experts) / tile_size. -1 for
 * arguments out of range. The tile tables have this many entries and
 * permuted_idx_to_expanded_idx this many times tile_size. */
FI_API int64_t fi_moe_max_tiles(int64_t num_tokens, int top_k, int local_num_experts, int tile_size);
/** The tile size fi_fused_moe takes when its tile_size is 0: 64 rows when the routes
 * average fewer than 64 a local expert (num_tokens x top_k < 64 x local_num_experts:
 * decode and small batches, less padding), else 128. */
FI_API int fi_moe_default_tile(int64_t num_tokens, int top_k, int local_num_experts);

/** Workspace bytes fi_moe_sort needs for num_tokens tokens of top_k routes (device memory,
 * 256-byte aligned, the caller's; it may be kept for every later call of at most as many). */
FI_API fi_status fi_moe_sort_workspace_size(fi_runtime *rt, int64_t num_tokens, int top_k,
                                            const fi_moe_sort_params *p, size_t *bytes);

/** The outputs of fi_moe_sort, all int32 device tensors, contiguous. */
typedef struct fi_moe_sort_outputs {
  DLTensor *tile_idx_to_expert_idx;        /**< [max_tiles] */
  DLTensor *tile_idx_to_mn_limit;          /**< [max_tiles] */
  DLTensor *expanded_idx_to_permuted_idx;  /**< [T, top_k] */
  DLTensor *permuted_idx_to_expanded_idx;  /**< [max_tiles * tile_size] */
  DLTensor *num_non_exiting_tiles;         /**< [1] */
  DLTensor *total_num_padded_tokens;       /**< [1] */
} fi_moe_sort_outputs;

/** Sorts the routes of expert_ids [T, top_k] int32 (contiguous) into the tile tables (one
 * launch on stream for T * top_k <= 4096, two above; no host synchronization, no state kept
 * in the workspace between calls, so CUDA-graph safe for a fixed T). */
FI_API fi_status fi_moe_sort(fi_runtime *rt, const DLTensor *expert_ids, const fi_moe_sort_params *p,
                             DLTensor *workspace, const fi_moe_sort_outputs *out, void *stream);

/** Gathers each route's hidden row before the experts' first GEMM: out row p = x row
 * permuted_idx_to_expanded_idx[p] / top_k for every live row of the first
 * num_non_exiting_tiles * tile_size rows (fi_moe_sort's tables); padding rows are left as
 * they are (the GEMM reads a tile only up to its mn_limit). x [T, hidden] and out
 * [max_tiles * tile_size, hidden] float16, bfloat16 or float32, unit column stride. */
FI_API fi_status fi_moe_permute(fi_runtime *rt, const DLTensor *x, const DLTensor *permuted_idx_to_expanded_idx,
                                const DLTensor *num_non_exiting_tiles, int top_k, int tile_size, DLTensor *out,
                                void *stream);

/** Combines the experts' outputs after their second GEMM: out[t] = (accumulate ? out[t] :
 * 0) + the sum over k, in order, of weights[t, k] * y[expanded_idx_to_permuted_idx[t, k]]
 * for the local routes (index >= 0), in float32, one block a token: deterministic (no
 * atomics; the same bits every run). y [rows, hidden] and out [T, hidden] of one dtype;
 * weights [T, top_k] float32 (fi_moe_routing's). accumulate 1 adds, e.g. to a shared
 * expert's output or, under expert parallelism, before the all-reduce. */
FI_API fi_status fi_moe_finalize(fi_runtime *rt, const DLTensor *y, const DLTensor *expanded_idx_to_permuted_idx,
                                 const DLTensor *weights, int accumulate, DLTensor *out, void *stream);

/** What fi_moe_grouped_gemm's epilogue does with a row's dot products. */
typedef enum fi_moe_gemm_activation {
  FI_MOE_GEMM_PLAIN = 0,  /**< out = a . W^T (the experts' second GEMM, W2) */
  FI_MOE_GEMM_SWIGLU = 1  /**< out[:, j] = silu(a . gate_j) * (a . up_j) over W13's 2n rows (the first GEMM) */
} fi_moe_gemm_activation;

typedef struct fi_moe_gemm_params {
  int tile_size;  /**< the sort's tile_size: 64, 128 or 256 */
  int activation; /**< fi_moe_gemm_activation */
  int gate_first; /**< SwiGLU: W13 rows are [gate; up] (vLLM's order) when 1, [up; gate] when 0 */
  int gather;     /**< 1: a is the tokens' x [T, k], row r read at permuted_idx_to_expanded_idx[r] / top_k
                       (fi_moe_permute fused into the GEMM); 0: a is already permuted [rows, k] */
  int block_m;    /**< rows a block takes: 16, 64 or 128 (dividing tile_size), or 0 for the rule:
                       16 when the routes average fewer than 32 a local expert, else min(tile_size, 128) */
} fi_moe_gemm_params;

/** Defaults: tile_size 128, plain, [up; gate], no gather, block_m by the rule. */
FI_API void fi_moe_gemm_params_init(fi_moe_gemm_params *p);

/** The experts' grouped GEMM over fi_moe_sort's tables (tables: its outputs; the tile
 * tables, num_non_exiting_tiles, and permuted_idx_to_expanded_idx when gathering, are read
 * on the device; expanded_idx_to_permuted_idx gives T and top_k by its shape). For every
 * tile t below num_non_exiting_tiles and its live rows r < tile_idx_to_mn_limit[t], with e =
 * tile_idx_to_expert_idx[t]: out[r] = a[r] . weights[e]^T (plain) or SwiGLU as above. a:
 * [rows, k] or, gathering, [T, k]; weights [local experts, n or 2n, k] (the nn.Linear
 * layout; k contiguous); out [rows, n] with rows = max_tiles * tile_size; one dtype,
 * float16 or bfloat16, fp32 accumulation. k and n multiples of 64; row strides multiples of
 * 8 elements, data 16-byte aligned (out: even stride, 4-byte aligned). Padding rows of out
 * are never written and padding rows of a never read. The tables must be fi_moe_sort's for
 * local_num_experts == weights' first dimension (the device reads them as they are). mma.sync
 * tensor cores (sm_80 and later). */
FI_API fi_status fi_moe_grouped_gemm(fi_runtime *rt, const DLTensor *a, const DLTensor *weights,
                                     const fi_moe_sort_outputs *tables, const fi_moe_gemm_params *p, DLTensor *out,
                                     void *stream);

/** One MoE layer in one call (fi_fused_moe). */
typedef struct fi_fused_moe_params {
  fi_moe_routing_params routing; /**< method and top_k (top_k also when the caller gives expert_ids) */
  int num_experts;               /**< every expert of the model */
  int local_expert_offset;       /**< this rank's first expert (expert parallelism; 0 for all) */
  int local_num_experts;         /**< this rank's experts: w13's and w2's first dimension */
  int tile_size;                 /**< the sort's tile: 64, 128, 256, or 0 for the rule (64 when the
                                      routes average fewer than 64 a local expert, else 128) */
  int gate_first;                /**< W13 rows [gate; up] (vLLM's order) when 1, [up; gate] when 0 */
  int accumulate;                /**< 1: out += the layer (a shared expert's output, EP partial sums) */
  int block_m;                   /**< the GEMMs' block rows (fi_moe_gemm_params.block_m); 0 for the rule */
} fi_fused_moe_params;

/** Defaults: fi_moe_routing_params_init's routing, no experts (set them), rules elsewhere. */
FI_API void fi_fused_moe_params_init(fi_fused_moe_params *p);

/** Device workspace bytes fi_fused_moe needs for num_tokens tokens of hidden size `hidden`
 * and expert intermediate size `inter` (256-byte aligned, the caller's; reusable by every
 * call of at most as many tokens with the same parameters). */
FI_API fi_status fi_fused_moe_workspace_size(fi_runtime *rt, int64_t num_tokens, int64_t hidden, int64_t inter,
                                             const fi_fused_moe_params *p, size_t *bytes);

/** A whole MoE layer: routes x [T, hidden] (router_logits [T, E] through fi_moe_routing,
 * or the caller's expert_ids [T, top_k] int32 and expert_weights [T, top_k] float32: give
 * one or the other), sorts the routes, then per local expert h = silu(x . gate^T) * (x .
 * up^T) with w13 [local experts, 2 inter, hidden], y = h . w2^T with w2 [local experts,
 * hidden, inter], and out [T, hidden] (+)= sum_k weight x y, deterministic. x, w13, w2 and
 * out float16 or bfloat16, one dtype. The ops of the steps check their own arguments
 * (their names in the messages). Nothing is synchronized with the host: a fixed T can be
 * captured in a CUDA graph. */
FI_API fi_status fi_fused_moe(fi_runtime *rt, const DLTensor *x, const DLTensor *router_logits,
                              const DLTensor *correction_bias, const DLTensor *expert_ids,
                              const DLTensor *expert_weights, const DLTensor *w13, const DLTensor *w2,
                              const fi_fused_moe_params *p, DLTensor *workspace, DLTensor *out, void *stream);


/* ---- bit packing (the packed custom masks of batch prefill) ---- */
typedef enum fi_bitorder {
  FI_BITORDER_BIG = 0,   /**< element 8 j + k is bit 7 - k of byte j (numpy's default) */
  FI_BITORDER_LITTLE = 1 /**< element 8 j + k is bit k of byte j (prefill's custom masks) */
} fi_bitorder;

/** FlashInfer's packbits: x [N] (bool, int8 or uint8; nonzero is 1) into y [ceil(N / 8)]
 * uint8. */
FI_API fi_status fi_packbits(fi_runtime *rt, const DLTensor *x, fi_bitorder bitorder, DLTensor *y, void *stream);
/** FlashInfer's segment_packbits: each segment x[indptr[s] .. indptr[s+1]) packed on its own,
 * padded to whole bytes, one after the other into y; indptr_new [S + 1] int32 gets where
 * each starts (indptr_new[S]: the bytes written). indptr is device data (non-decreasing, the
 * caller's to keep in range of x); y needs indptr_new[S] bytes ((N + 7 S) / 8 always
 * suffices; bytes past y's end are not written). A batch prefill plan's custom mask is
 * the segment_packbits (little) of each request's [L_q][L_kv] mask. */
FI_API fi_status fi_segment_packbits(fi_runtime *rt, const DLTensor *x, const DLTensor *indptr, fi_bitorder bitorder,
                                     DLTensor *y, DLTensor *indptr_new, void *stream);

/* ---- multi-head latent attention (DeepSeek-V2/V3/R1, Kimi-K2; the absorbed form) ----
 * Every head attends one shared compressed cache: a token's key is ckv [512] then kpe [64],
 * its value is ckv. q_nope [N, H, 512] is the query after the absorbed up-projection,
 * q_pe [N, H, 64] its rotary part (RoPE applied by the caller, as for the cache's kpe);
 * out [N, H, 512] is the latent output (the caller applies the absorbed output projection).
 * out[t, h] = softmax(sm_scale * (q_nope[t, h] . ckv_j + q_pe[t, h] . kpe_j)) ckv over the
 * request's KV tokens j (causal: j <= t + L_kv - L_q). Planned on the host as batch prefill
 * is (query token x head rows cut into tiles, long KV ranges split when the batch cannot
 * fill the device, partials merged by LSE), run on the caller's stream. */
typedef struct fi_mla_plan fi_mla_plan;

typedef struct fi_batch_mla_info {
  int batch;                 /**< B >= 0 */
  const int32_t *qo_indptr;  /**< host copy, B + 1: request b's query tokens are rows
                                  qo_indptr[b] .. qo_indptr[b+1] of q_nope, q_pe and out */
  const int32_t *kv_indptr;  /**< host copy, B + 1: request b's pages are
                                  kv_indices[kv_indptr[b] .. kv_indptr[b+1]) */
  const int32_t *kv_len;     /**< host copy, B: request b's KV tokens (FlashInfer's kv_len_arr),
                                  at most its pages x page_size */
  int num_heads;             /**< H: 1 to 1024 (DeepSeek: 128, or 128 / TP) */
  int head_dim_ckv;          /**< 512 */
  int head_dim_kpe;          /**< 64 */
  int page_size;             /**< >= 1 */
  int causal;                /**< 0 or 1 */
  float sm_scale;            /**< > 0 (DeepSeek: 1 / sqrt(192), times its YaRN mscale^2) */
  DLDataType q_dtype, kv_dtype; /**< float16 or bfloat16, the same */
  /** CUDA-graph mode when max_batch > 0: the grid and the q tile are fixed for batches of
   * up to max_batch requests and max_qo_tokens query tokens in all. */
  int max_batch, max_qo_tokens;
} fi_batch_mla_info;

/** Workspace bytes an MLA plan for up to max_batch requests and max_qo_tokens query tokens
 * needs on device (the caller allocates it, 256-byte aligned). */
FI_API fi_status fi_batch_mla_workspace_size(fi_runtime *rt, DLDevice device, int max_batch, int max_qo_tokens,
                                             int num_heads, size_t *bytes);
/** Plans a batch: *plan NULL makes a new plan, else re-plans it in place (same heads,
 * page size, dtypes, causal, sm_scale, q tile, sizes and workspace). Runs of one plan (or of
 * plans sharing a workspace) must not overlap in time. */
FI_API fi_status fi_batch_mla_paged_plan(fi_runtime *rt, const fi_batch_mla_info *info, DLTensor *workspace,
                                         void *stream, fi_mla_plan **plan);
/** Runs a plan: q_nope [N, H, 512] and q_pe [N, H, 64] (N >= qo_indptr[B]), ckv_cache
 * [pages, page_size, 512] and kpe_cache [pages, page_size, 64], kv_indices [nnz_pages]
 * int32 (page ids, the caller's to keep in range), out [N, H, 512], lse [N, H] float32
 * (natural log) or NULL. Last dimensions contiguous, rows 16-byte aligned. */
FI_API fi_status fi_batch_mla_paged_run(fi_runtime *rt, const fi_mla_plan *plan, const DLTensor *q_nope,
                                        const DLTensor *q_pe, const DLTensor *ckv_cache, const DLTensor *kpe_cache,
                                        const DLTensor *kv_indices, DLTensor *out, DLTensor *lse, void *stream);
FI_API void fi_batch_mla_plan_destroy(fi_mla_plan *plan);

/** Appends tokens to an MLA cache (FlashInfer's append_paged_mla_kv_cache): token i's
 * append_ckv [nnz, 512] and append_kpe [nnz, 64] rows go to slot positions[i] % page_size
 * of page kv_indices[kv_indptr[batch_indices[i]] + positions[i] / page_size] of ckv_cache
 * [pages, page_size, 512] and kpe_cache [pages, page_size, 64]. One 16-bit dtype for all;
 * int32 index tensors (batch_indices and positions as fi_get_batch_indices_positions makes
 * them; kv_last_page_len [B] is checked, not read). Page ids and positions are device data,
 * the caller's to keep in range. */
FI_API fi_status fi_append_paged_mla_kv_cache(fi_runtime *rt, const DLTensor *append_ckv, const DLTensor *append_kpe,
                                              const DLTensor *batch_indices, const DLTensor *positions,
                                              DLTensor *ckv_cache, DLTensor *kpe_cache, const DLTensor *kv_indices,
                                              const DLTensor *kv_indptr, const DLTensor *kv_last_page_len,
                                              void *stream);

#ifdef __cplusplus
}
#endif
#endif /* FI_RUNTIME_H */
