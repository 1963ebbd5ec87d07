/* fi_tvm_fa.c: libfi_runtime_tvm_flashinfer.so, the functions TVM's FlashInfer attention
 * backend calls (apache/tvm src/runtime/vm/attn_backend.h: FlashInferPagedPrefillFunc,
 * FlashInferRaggedPrefillFunc, FlashInferPagedDecodeFunc) on the modules FlashInfer
 * generates for it, with the same names and argument orders, run by fi_runtime:
 *
 *   batch_prefill_plan(float_ws, int_ws, page_locked_int_ws, qo_indptr, kv_indptr,
 *       kv_len_arr, total_num_rows, batch_size, num_qo_heads, num_kv_heads, page_size,
 *       enable_cuda_graph, head_dim_qk, head_dim_vo, causal, window_left,
 *       fixed_split_size, disable_split_kv, num_colocated_ctas) -> plan_info (int array)
 *   batch_prefill_paged_run(float_ws, int_ws, plan_info, q, paged_k_cache, paged_v_cache,
 *       qo_indptr, paged_kv_indptr, paged_kv_indices, paged_kv_last_page_len, o, lse,
 *       mask_mode_code, layout, window_left, enable_pdl, sm_scale, rope_rcp_scale,
 *       rope_rcp_theta)
 *   batch_prefill_ragged_run(float_ws, int_ws, plan_info, q, k, v, qo_indptr, kv_indptr,
 *       o, lse, mask_mode_code, layout, window_left, enable_pdl, sm_scale, rope_rcp_scale,
 *       rope_rcp_theta)
 *   batch_decode_plan(float_ws, int_ws, page_locked_int_ws, indptr, batch_size,
 *       num_qo_heads, num_kv_heads, page_size, enable_cuda_graph, window_left,
 *       logits_soft_cap, head_dim_qk, head_dim_vo, empty_q_data, empty_kv_data)
 *       -> plan_info
 *   batch_decode_run(float_ws, int_ws, plan_info, q, paged_k_cache, paged_v_cache,
 *       paged_kv_indptr, paged_kv_indices, paged_kv_last_page_len, o, lse, kv_layout_code,
 *       window_left, enable_pdl, sm_scale, rope_rcp_scale, rope_rcp_theta)
 *   configure(inline_rope) (fi_runtime's own: RoPE on the fly, which FlashInfer bakes
 *       into the module it generates; off by default, as MLC's models run RoPE before
 *       attention)
 *
 * lse is written in base 2, as FlashInfer's and TVM's own kernels write it (TVM merges
 * the two). How the ABI maps onto fi_runtime's plans:
 * - A plan call records its host arrays under TVM's int workspace (one a plan and
 *   depth) and returns [magic, record, generation]. fi_runtime's plans also fix the
 *   dtypes, the mask, the scale and RoPE, which TVM gives only to the run: the first run
 *   after a plan call makes the fi_runtime plan from the record and that run's
 *   arguments, and the layer's later runs reuse it (a run with other arguments re-plans).
 *   The plan's tables and split partials go to a sixteenth of TVM's float workspace a
 *   record (TVM shares that buffer between the ragged and paged plans and every depth).
 * - A prefill plan with page_size 1 makes a ragged plan at its first ragged run, a paged
 *   one at its first paged run; last_page_len comes from kv_len_arr.
 * - batch_decode_plan gets no request lengths (FlashInfer's decode reads them on the
 *   device at run time; fi_runtime's plan needs them on the host): the first run after
 *   it copies paged_kv_last_page_len to the host (fi_copy_to_host, a wait for the
 *   device) before it plans. CUDA-graph mode is refused for decode for that reason (TVM
 *   itself never sets it).
 * - CUDA-graph prefill (enable_cuda_graph): the first run (outside a capture, as with
 *   any warm-up) makes a graph-mode plan for batch_size requests and total_num_rows
 *   tokens; each later plan call re-plans it in place right away, so a captured run
 *   replays on the new tables.
 * - head_dim_qk must equal head_dim_vo, or be 192 with 128 for the ragged run (MLA's
 *   self-attention in TVM: DeepSeek's MHA prefill); fixed_split_size, disable_split_kv,
 *   num_colocated_ctas and enable_pdl are accepted and ignored (fi_runtime plans its own
 *   split). */
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fi_tvm.h"

#define FA_EXPORT(name, sig)                                                                  \
  static const char fa_sig_##name[] = sig;                                                    \
  static int fa_impl_##name(ft_call *c);                                                      \
  TVM_FFI_DLL_EXPORT int __tvm_ffi_##name(void *h, const TVMFFIAny *args, int32_t n,          \
                                          TVMFFIAny *rv) {                                    \
    (void)h;                                                                                  \
    ft_call call;                                                                             \
    if (ft_begin(&call, #name, fa_sig_##name, args, n, rv) != 0) return -1;                   \
    return fa_impl_##name(&call);                                                             \
  }                                                                                           \
  TVM_FFI_DLL_EXPORT int __tvm_ffi__doc_##name(void *h, const TVMFFIAny *args, int32_t n,     \
                                               TVMFFIAny *rv) {                               \
    (void)h, (void)args, (void)n;                                                             \
    return ft_ret_doc(rv, #name, fa_sig_##name);                                              \
  }                                                                                           \
  static int fa_impl_##name(ft_call *c)

enum { FA_MAGIC = 0x66694641, FA_RECORDS = 16 };
enum { FA_NONE = 0, FA_RAGGED = 1, FA_PAGED = 2, FA_DECODE = 3 };

/* What a run fixes in an fi_runtime plan besides the record's arrays. */
typedef struct fa_run {
  DLDataType qdt, kvdt;
  int causal, window, kind;
  double sm_scale, rope_rcp_scale, rope_rcp_theta;
} fa_run;

typedef struct fa_rec {
  const void *int_ws; /* TVM's int workspace: the record's identity */
  int decode;         /* a decode plan's record (else prefill) */
  int64_t gen;        /* plan calls so far; plan_info carries it */
  int32_t *qo, *kv, *last; /* host copies: qo_indptr, kv_indptr (pages or tokens), last_page_len */
  int32_t cap;        /* entries allocated in each (batch + 1) */
  int batch, total_rows, hq, hkv, page_size, head_dim, head_dim_vo, causal, window, graph;
  double soft_cap;
  DLDataType qdt, kvdt; /* decode: from the plan's empty tensors */
  int have_last;      /* last holds the lengths of this generation */
  /* the fi_runtime plan made from the record at a run */
  void *plan;
  fa_run made;
  int64_t plan_gen;
  int graph_batch, graph_rows; /* CUDA-graph prefill: the plan's limits */
  uint64_t used;      /* fa_clock at its last plan call: the least recent is evicted */
} fa_rec;

static pthread_mutex_t fa_mu = PTHREAD_MUTEX_INITIALIZER;
static fa_rec recs[FA_RECORDS];
static int inline_rope;
static uint64_t fa_clock;

/* Two runs' plan-fixing arguments equal (field by field: the struct has padding). */
static int run_eq(const fa_run *a, const fa_run *b) {
  return !memcmp(&a->qdt, &b->qdt, sizeof a->qdt) && !memcmp(&a->kvdt, &b->kvdt, sizeof a->kvdt) &&
         a->causal == b->causal && a->window == b->window && a->kind == b->kind && a->sm_scale == b->sm_scale &&
         a->rope_rcp_scale == b->rope_rcp_scale && a->rope_rcp_theta == b->rope_rcp_theta;
}

static void drop_plan(fa_rec *r) {
  if (!r->plan) return;
  if (r->made.kind == FA_DECODE) fi_batch_decode_plan_destroy(r->plan);
  else fi_batch_prefill_plan_destroy(r->plan);
  r->plan = NULL;
  r->made.kind = FA_NONE;
}

/* The record of int workspace ws (a new one when unseen: a free slot, else the least
 * recently planned record's, its plan destroyed: a KV cache made again, e.g. after a model
 * reload, takes the slots of the old one, whose plan_infos then read as stale). */
static fa_rec *rec_for(ft_call *c, const DLTensor *ws, int decode) {
  (void)c;
  const void *key = (const char *)ws->data + ws->byte_offset;
  int pick = -1;
  for (int i = 0; i < FA_RECORDS; i++) {
    if (recs[i].int_ws == key && recs[i].decode == decode) {
      recs[i].used = ++fa_clock;
      return &recs[i];
    }
    if (pick < 0 || (recs[pick].int_ws && (!recs[i].int_ws || recs[i].used < recs[pick].used))) pick = i;
  }
  fa_rec *r = &recs[pick];
  drop_plan(r);
  free(r->qo), free(r->kv), free(r->last);
  const int64_t gen = r->gen; /* kept growing: an evicted record's plan_infos stay stale */
  memset(r, 0, sizeof *r);
  r->gen = gen;
  r->int_ws = key;
  r->decode = decode;
  r->used = ++fa_clock;
  return r;
}

/* Room for n + 1 entries in each host array. */
static int rec_reserve(ft_call *c, fa_rec *r, int n) {
  if (n + 1 <= r->cap) return 0;
  const size_t bytes = sizeof(int32_t) * (size_t)(n + 1);
  int32_t *q = realloc(r->qo, bytes);
  if (q) r->qo = q;
  int32_t *k = q ? realloc(r->kv, bytes) : NULL;
  if (k) r->kv = k;
  int32_t *l = k ? realloc(r->last, bytes) : NULL;
  if (l) r->last = l;
  if (!l) return ft_fail(c, -1, "MemoryError", "out of memory for %d requests", n);
  r->cap = n + 1;
  return 0;
}

/* ---- plan_info: an ffi.Array of ints made and read through tvm-ffi's global functions
 * (the C ABI has no array accessors of its own). ---- */

static TVMFFIObjectHandle global_fn(const char *name) {
  TVMFFIByteArray b = {name, strlen(name)};
  TVMFFIObjectHandle f = NULL;
  return TVMFFIFunctionGetGlobal(&b, &f) == 0 ? f : NULL;
}

static int ret_plan_info(ft_call *c, int rec, int64_t gen) {
  static TVMFFIObjectHandle ctor;
  if (!ctor) ctor = global_fn("ffi.Array"); /* kept for the process's life */
  if (!ctor) return ft_fail(c, -1, "RuntimeError", "tvm-ffi has no global function ffi.Array");
  TVMFFIAny items[3];
  const int64_t v[3] = {FA_MAGIC, rec, gen};
  for (int i = 0; i < 3; i++) {
    items[i].type_index = kTVMFFIInt;
    items[i].zero_padding = 0;
    items[i].v_int64 = v[i];
  }
  return TVMFFIFunctionCall(ctor, items, 3, c->rv);
}

/* Argument i as a plan_info of this module: its record, checked live and current. */
static fa_rec *rec_of_info(ft_call *c, int i, int decode) {
  if (c->failed) return NULL;
  const TVMFFIAny *a = &c->args[i];
  if (a->type_index != kTVMFFIArray)
    return ft_fail(c, i, "TypeError", "must be the plan_info array a plan returned"), NULL;
  static TVMFFIObjectHandle get;
  if (!get) get = global_fn("ffi.ArrayGetItem");
  if (!get) return ft_fail(c, -1, "RuntimeError", "tvm-ffi has no global function ffi.ArrayGetItem"), NULL;
  int64_t v[3];
  for (int k = 0; k < 3; k++) {
    TVMFFIAny args[2], out;
    args[0] = *a;
    args[1].type_index = kTVMFFIInt, args[1].zero_padding = 0, args[1].v_int64 = k;
    memset(&out, 0, sizeof out);
    if (TVMFFIFunctionCall(get, args, 2, &out) != 0) {
      c->failed = 1; /* tvm-ffi raised (index out of range: not our array) */
      return NULL;
    }
    if (out.type_index != kTVMFFIInt) {
      if (out.type_index >= kTVMFFIStaticObjectBegin) TVMFFIObjectDecRef(out.v_obj);
      return ft_fail(c, i, "ValueError", "is not a plan_info of fi_runtime's FlashInfer-ABI module"), NULL;
    }
    v[k] = out.v_int64;
  }
  if (v[0] != FA_MAGIC || v[1] < 0 || v[1] >= FA_RECORDS || !recs[v[1]].int_ws || recs[v[1]].decode != decode)
    return ft_fail(c, i, "ValueError", "is not a %s plan_info of fi_runtime's FlashInfer-ABI module",
                   decode ? "decode" : "prefill"),
           NULL;
  if (recs[v[1]].gen != v[2])
    return ft_fail(c, i, "ValueError", "is stale: its int workspace was planned again since (generation %lld, now "
                   "%lld)", (long long)v[2], (long long)recs[v[1]].gen),
           NULL;
  return &recs[v[1]];
}

/* The record's share of TVM's float workspace (argument i) for the fi_runtime plan. */
static DLTensor ws_slot(ft_call *c, int i, const fa_rec *r, int64_t *shape) {
  DLTensor t;
  memset(&t, 0, sizeof t);
  DLTensor *f = ft_tensor(c, i);
  if (!f) return t;
  if (f->device.device_type != kDLCUDA && f->device.device_type != kDLROCM) {
    ft_fail(c, i, "ValueError", "must be a CUDA or ROCm device tensor (fi_runtime's plan tables go there)");
    return t;
  }
  int64_t bytes = (f->dtype.bits * f->dtype.lanes + 7) / 8;
  for (int d = 0; d < f->ndim; d++) bytes *= f->shape[d];
  const int64_t slot = bytes / FA_RECORDS / 256 * 256;
  t = *f;
  t.data = (char *)f->data + f->byte_offset + slot * (int64_t)(r - recs);
  t.byte_offset = 0;
  t.ndim = 1;
  shape[0] = slot;
  t.shape = shape;
  t.strides = NULL;
  t.dtype = (DLDataType){kDLUInt, 8, 1};
  return t;
}

static int need_ws(ft_call *c, fi_status st, size_t need, int64_t have) {
  if (ft_status(c, st) != 0) return -1;
  if ((int64_t)need > have)
    return ft_fail(c, 0, "ValueError", "is too small: fi_runtime's plan needs %zu bytes of its sixteenth (%lld)",
                   need, (long long)have);
  return 0;
}

/* ---- prefill ---- */

static int prefill_plan_make(ft_call *c, fa_rec *r, const fa_run *u, int mb, int mq, fi_prefill_plan **pl);

FA_EXPORT(batch_prefill_plan,
          "float_workspace_buffer: Tensor, int_workspace_buffer: Tensor, page_locked_int_workspace_buffer: Tensor, "
          "qo_indptr: Tensor, kv_indptr: Tensor, kv_len_arr: Tensor, total_num_rows: int, batch_size: int, "
          "num_qo_heads: int, num_kv_heads: int, page_size: int, enable_cuda_graph: bool, head_dim_qk: int, "
          "head_dim_vo: int, causal: bool, window_left: int, fixed_split_size: int, disable_split_kv: bool, "
          "num_colocated_ctas: int") {
  ft_tensor(c, 0);
  DLTensor *iws = ft_tensor(c, 1);
  const int64_t B = ft_int(c, 7);
  if (!c->failed && (B < 0 || B > (1 << 24))) return ft_fail(c, 7, "ValueError", "is %lld", (long long)B);
  const int32_t *qo = ft_host_i32(c, 3, B + 1), *kv = ft_host_i32(c, 4, B + 1), *kvlen = ft_host_i32(c, 5, B);
  const int64_t rows = ft_int(c, 6), hq = ft_int(c, 8), hkv = ft_int(c, 9), ps = ft_int(c, 10);
  const int graph = ft_int(c, 11) != 0;
  const int64_t dqk = ft_int(c, 12), dvo = ft_int(c, 13);
  const int causal = ft_int(c, 14) != 0;
  const int64_t window = ft_int(c, 15);
  (void)ft_int(c, 16), (void)ft_int(c, 17), (void)ft_int(c, 18); /* accepted, ignored */
  if (c->failed) return -1;
  if (dqk != dvo && !(dqk == 192 && dvo == 128 && ps == 1))
    return ft_fail(c, 13, "ValueError", "is %lld and head_dim_qk %lld: fi_runtime's prefill takes them equal, or 192 "
                   "with 128 for the ragged plan (page_size 1)", (long long)dvo, (long long)dqk);
  if (window < -1 || window > INT32_MAX)
    return ft_fail(c, 15, "ValueError", "is %lld; -1 or a token count is needed", (long long)window);
  if (ps < 1 || ps > INT32_MAX || hq < 1 || hkv < 1 || hkv > INT32_MAX || rows < 0 || rows > INT32_MAX ||
      hq > INT32_MAX || dqk > INT32_MAX)
    return ft_fail(c, -1, "ValueError", "page_size %lld, heads %lld/%lld, total_num_rows %lld: out of range",
                   (long long)ps, (long long)hq, (long long)hkv, (long long)rows);
  pthread_mutex_lock(&fa_mu);
  fa_rec *r = rec_for(c, iws, 0);
  int rc = r ? rec_reserve(c, r, (int)B) : -1;
  if (rc == 0) {
    memcpy(r->qo, qo, sizeof(int32_t) * (size_t)(B + 1));
    memcpy(r->kv, kv, sizeof(int32_t) * (size_t)(B + 1));
    for (int64_t b = 0; b < B; b++) { /* paged: the last page's tokens from the length */
      const int64_t pages = (int64_t)kv[b + 1] - kv[b];
      r->last[b] = pages > 0 ? (int32_t)(kvlen[b] - (pages - 1) * ps) : 0;
    }
    r->have_last = 1;
    r->batch = (int)B, r->total_rows = (int)rows, r->hq = (int)hq, r->hkv = (int)hkv, r->page_size = (int)ps;
    r->head_dim = (int)dqk, r->head_dim_vo = (int)dvo, r->causal = causal, r->window = (int)window;
    /* a plan made in the other mode is made again at the next run */
    if (r->plan && graph != (r->graph_batch > 0)) drop_plan(r);
    r->graph = graph;
    r->gen++;
    /* CUDA-graph mode: the plan a captured run uses is re-planned now, in place */
    if (graph && r->plan) {
      fi_prefill_plan *pl = r->plan;
      if (prefill_plan_make(c, r, &r->made, r->graph_batch, r->graph_rows, &pl) != 0) rc = -1, drop_plan(r);
      else r->plan_gen = r->gen;
    }
  }
  const int idx = r ? (int)(r - recs) : -1;
  const int64_t gen = r ? r->gen : 0;
  pthread_mutex_unlock(&fa_mu);
  return rc != 0 ? -1 : ret_plan_info(c, idx, gen);
}

/* An fi_runtime prefill plan of record r for run arguments u (CUDA-graph mode when mb > 0:
 * mb requests, mq tokens) into *pl: made when *pl is NULL, else re-planned in place. The
 * workspace is the record's slot, checked against the plan's size. The caller holds fa_mu. */
static int prefill_plan_make(ft_call *c, fa_rec *r, const fa_run *u, int mb, int mq, fi_prefill_plan **pl) {
  fi_runtime *rt = ft_rt(c);
  if (!rt) return -1;
  const int paged = u->kind == FA_PAGED;
  fi_batch_prefill_info in;
  memset(&in, 0, sizeof in);
  in.batch = r->batch, in.qo_indptr = r->qo, in.kv_indptr = r->kv;
  in.kv_last_page_len = paged ? r->last : NULL;
  in.num_qo_heads = r->hq, in.num_kv_heads = r->hkv, in.head_dim = r->head_dim;
  in.page_size = paged ? r->page_size : 0;
  in.q_dtype = u->qdt, in.kv_dtype = u->kvdt;
  in.max_batch = mb, in.max_qo_tokens = mq;
  fi_prefill_params p;
  fi_prefill_params_init(&p);
  p.causal = u->causal, p.attn.window_left = u->window, p.attn.sm_scale = u->sm_scale;
  p.attn.pos_encoding = inline_rope ? FI_POS_ROPE_LLAMA : FI_POS_NONE;
  p.attn.rope_scale = 1.0 / u->rope_rcp_scale, p.attn.rope_theta = 1.0 / u->rope_rcp_theta;
  int64_t shape[1];
  DLTensor ws = ws_slot(c, 0, r, shape);
  if (c->failed) return -1;
  size_t need = 0;
  const int wb = mb > 0 ? mb : (r->batch > 0 ? r->batch : 1), wq = mq > 0 ? mq : (r->total_rows > 0 ? r->total_rows : 1);
  if (need_ws(c, fi_batch_prefill_workspace_size(rt, c->dev, wb, wq, r->hq, r->hkv, r->head_dim, &need), need,
              shape[0]) != 0)
    return -1;
  fi_attention_extras x; /* V's head_dim (192 / 128: the ragged plan only; a paged one refuses it) */
  fi_attention_extras_init(&x);
  x.head_dim_vo = r->head_dim_vo;
  return ft_status(c, paged ? fi_batch_prefill_paged_plan_ex(rt, &in, &p, &x, &ws, ft_stream(c), pl)
                            : fi_batch_prefill_ragged_plan_ex(rt, &in, &p, &x, &ws, ft_stream(c), pl));
}

/* The fi_runtime plan of record r for a run with u, made or re-made when the record was
 * planned again or the run's arguments differ. The caller holds fa_mu. */
static int prefill_ready(ft_call *c, fa_rec *r, const fa_run *u) {
  if (u->kind == FA_RAGGED && r->page_size != 1)
    return ft_fail(c, 2, "ValueError", "was planned with page_size %d: a ragged run needs a plan of page_size 1 "
                   "(its kv_indptr counts tokens)", r->page_size);
  if (r->plan && r->plan_gen == r->gen && run_eq(&r->made, u)) return 0;
  drop_plan(r);
  const int mb = r->graph ? (r->batch > 0 ? r->batch : 1) : 0, mq = r->graph ? (r->total_rows > 0 ? r->total_rows : 1) : 0;
  fi_prefill_plan *pl = NULL;
  if (prefill_plan_make(c, r, u, mb, mq, &pl) != 0) return -1;
  r->plan = pl, r->made = *u, r->plan_gen = r->gen;
  r->graph_batch = mb, r->graph_rows = mq;
  return 0;
}

/* The run's scalars from argument i on: mask_mode_code, layout, window_left, enable_pdl,
 * sm_scale, rope_rcp_scale, rope_rcp_theta; *layout set. */
static void run_scalars(ft_call *c, int i, fa_run *u, fi_kv_layout *layout) {
  const int64_t mask = ft_int(c, i);
  if (!c->failed && mask != 0 && mask != 1)
    ft_fail(c, i, "ValueError", "is %lld: 0 (none) or 1 (causal); custom masks are not in this ABI", (long long)mask);
  u->causal = (int)mask;
  *layout = ft_layout(c, i + 1);
  u->window = (int)ft_int(c, i + 2);
  ft_int(c, i + 3);
  u->sm_scale = ft_float(c, i + 4);
  u->rope_rcp_scale = ft_float(c, i + 5);
  u->rope_rcp_theta = ft_float(c, i + 6);
  if (!c->failed && !(u->rope_rcp_scale > 0 && u->rope_rcp_theta > 0 && u->sm_scale > 0))
    ft_fail(c, i + 4, "ValueError", "sm_scale, rope_rcp_scale and rope_rcp_theta must be positive");
}

static const fi_attention_extras *base2(fi_attention_extras *x) {
  fi_attention_extras_init(x);
  x->lse_base2 = 1;
  return x;
}

/* A prefill run's common part: its scalars from argument at on, the plan_info's record
 * made ready for them (kind, q's and the KV's dtypes); returns the plan with fa_mu held
 * (the caller launches, then unlocks: a plan call on another thread cannot replace the
 * plan under the launch), or NULL after raising, unlocked. */
static fi_prefill_plan *prefill_run_plan(ft_call *c, int at, int kind, const DLTensor *q, const DLTensor *kv,
                                         fi_kv_layout *layout) {
  fa_run u;
  memset(&u, 0, sizeof u);
  run_scalars(c, at, &u, layout);
  if (c->failed) return NULL;
  u.kind = kind, u.qdt = q->dtype, u.kvdt = kv->dtype;
  pthread_mutex_lock(&fa_mu);
  fa_rec *r = rec_of_info(c, 2, 0);
  if (r && prefill_ready(c, r, &u) == 0) return r->plan;
  pthread_mutex_unlock(&fa_mu);
  return NULL;
}

FA_EXPORT(batch_prefill_paged_run,
          "float_workspace_buffer: Tensor, int_workspace_buffer: Tensor, plan_info: list, q: Tensor, "
          "paged_k_cache: Tensor, paged_v_cache: Tensor, qo_indptr: Tensor, paged_kv_indptr: Tensor, "
          "paged_kv_indices: Tensor, paged_kv_last_page_len: Tensor, o: Tensor, maybe_lse: Tensor?, "
          "mask_mode_code: int, layout: int, window_left: int, enable_pdl: bool, sm_scale: float, "
          "rope_rcp_scale: float, rope_rcp_theta: float") {
  DLTensor *q = ft_tensor(c, 3), *kc = ft_tensor(c, 4), *vc = ft_tensor(c, 5), *idx = ft_tensor(c, 8),
           *o = ft_tensor(c, 10), *lse = ft_tensor_opt(c, 11);
  (void)ft_tensor(c, 0), (void)ft_tensor(c, 1), (void)ft_tensor(c, 6), (void)ft_tensor(c, 7), (void)ft_tensor(c, 9);
  fi_kv_layout layout;
  if (c->failed) return -1;
  fi_prefill_plan *pl = prefill_run_plan(c, 12, FA_PAGED, q, kc, &layout);
  if (!pl) return -1;
  fi_attention_extras x;
  fi_runtime *rt = ft_rt(c); /* (made by the plan) */
  const int rc = ft_status(c, fi_batch_prefill_paged_run_ex(rt, pl, q, kc, vc, idx, layout, o, lse, base2(&x),
                                                             ft_stream(c)));
  pthread_mutex_unlock(&fa_mu);
  return rc;
}

FA_EXPORT(batch_prefill_ragged_run,
          "float_workspace_buffer: Tensor, int_workspace_buffer: Tensor, plan_info: list, q: Tensor, k: Tensor, "
          "v: Tensor, qo_indptr: Tensor, kv_indptr: Tensor, o: Tensor, maybe_lse: Tensor?, mask_mode_code: int, "
          "layout: int, window_left: int, enable_pdl: bool, sm_scale: float, rope_rcp_scale: float, "
          "rope_rcp_theta: float") {
  DLTensor *q = ft_tensor(c, 3), *k = ft_tensor(c, 4), *v = ft_tensor(c, 5), *o = ft_tensor(c, 8),
           *lse = ft_tensor_opt(c, 9);
  (void)ft_tensor(c, 0), (void)ft_tensor(c, 1), (void)ft_tensor(c, 6), (void)ft_tensor(c, 7);
  fi_kv_layout layout;
  if (c->failed) return -1;
  fi_prefill_plan *pl = prefill_run_plan(c, 10, FA_RAGGED, q, k, &layout);
  if (!pl) return -1;
  fi_attention_extras x;
  fi_runtime *rt = ft_rt(c); /* (made by the plan) */
  const int rc =
      ft_status(c, fi_batch_prefill_ragged_run_ex(rt, pl, q, k, v, layout, o, lse, base2(&x), ft_stream(c)));
  pthread_mutex_unlock(&fa_mu);
  return rc;
}

/* ---- decode ---- */

FA_EXPORT(batch_decode_plan,
          "float_workspace_buffer: Tensor, int_workspace_buffer: Tensor, page_locked_int_workspace_buffer: Tensor, "
          "indptr: Tensor, batch_size: int, num_qo_heads: int, num_kv_heads: int, page_size: int, "
          "enable_cuda_graph: bool, window_left: int, logits_soft_cap: float, head_dim_qk: int, head_dim_vo: int, "
          "empty_q_data: Tensor, empty_kv_data: Tensor") {
  ft_tensor(c, 0);
  DLTensor *iws = ft_tensor(c, 1);
  const int64_t B = ft_int(c, 4);
  if (!c->failed && (B < 0 || B > (1 << 24))) return ft_fail(c, 4, "ValueError", "is %lld", (long long)B);
  const int32_t *ip = ft_host_i32(c, 3, B + 1);
  const int64_t hq = ft_int(c, 5), hkv = ft_int(c, 6), ps = ft_int(c, 7);
  const int graph = ft_int(c, 8) != 0;
  const int64_t window = ft_int(c, 9);
  const double cap = ft_float(c, 10);
  const int64_t dqk = ft_int(c, 11), dvo = ft_int(c, 12);
  DLTensor *eq = ft_tensor(c, 13), *ekv = ft_tensor(c, 14);
  if (c->failed) return -1;
  if (graph)
    return ft_fail(c, 8, "ValueError", "is true: fi_runtime's decode plan needs the requests' lengths, which this "
                   "ABI's plan does not pass; CUDA-graph decode is not supported here");
  if (dqk != dvo)
    return ft_fail(c, 12, "ValueError", "is %lld and head_dim_qk %lld: fi_runtime's decode needs them equal",
                   (long long)dvo, (long long)dqk);
  if (ps < 1 || ps > INT32_MAX || hq < 1 || hkv < 1 || hkv > INT32_MAX || hq > INT32_MAX || dqk > INT32_MAX ||
      window < -1 || window > INT32_MAX)
    return ft_fail(c, -1, "ValueError", "page_size %lld, heads %lld/%lld, window_left %lld: out of range",
                   (long long)ps, (long long)hq, (long long)hkv, (long long)window);
  pthread_mutex_lock(&fa_mu);
  fa_rec *r = rec_for(c, iws, 1);
  int rc = r ? rec_reserve(c, r, (int)B) : -1;
  if (rc == 0) {
    memcpy(r->kv, ip, sizeof(int32_t) * (size_t)(B + 1));
    r->batch = (int)B, r->hq = (int)hq, r->hkv = (int)hkv, r->page_size = (int)ps, r->head_dim = (int)dqk;
    r->window = (int)window, r->soft_cap = cap, r->qdt = eq->dtype, r->kvdt = ekv->dtype;
    r->have_last = 0;
    r->gen++;
  }
  const int idx = r ? (int)(r - recs) : -1;
  const int64_t gen = r ? r->gen : 0;
  pthread_mutex_unlock(&fa_mu);
  return rc != 0 ? -1 : ret_plan_info(c, idx, gen);
}

/* The decode plan of record r for a run with u; the first run after a plan call reads
 * the lengths (argument li) from the device. The caller holds fa_mu. */
static int decode_ready(ft_call *c, fa_rec *r, const fa_run *u, const DLTensor *last) {
  if (r->plan && r->plan_gen == r->gen && run_eq(&r->made, u)) return 0;
  fi_runtime *rt = ft_rt(c);
  if (!rt) return -1;
  if (!r->have_last) {
    if (last->dtype.code != kDLInt || last->dtype.bits != 32 || last->ndim != 1 || last->shape[0] < r->batch)
      return ft_fail(c, 8, "ValueError", "must be int32 [batch_size] (%d)", r->batch);
    if (ft_status(c, fi_copy_to_host(rt, last, r->last, sizeof(int32_t) * (size_t)r->batch, ft_stream(c))) != 0)
      return -1;
    r->have_last = 1;
  }
  fi_batch_decode_info in;
  memset(&in, 0, sizeof in);
  in.batch = r->batch, in.indptr = r->kv, in.last_page_len = r->last;
  in.num_qo_heads = r->hq, in.num_kv_heads = r->hkv, in.head_dim = r->head_dim, in.page_size = r->page_size;
  in.q_dtype = u->qdt, in.kv_dtype = u->kvdt;
  fi_attention_params p;
  fi_attention_params_init(&p);
  p.sm_scale = u->sm_scale, p.window_left = u->window, p.logits_soft_cap = r->soft_cap;
  p.pos_encoding = inline_rope ? FI_POS_ROPE_LLAMA : FI_POS_NONE;
  p.rope_scale = 1.0 / u->rope_rcp_scale, p.rope_theta = 1.0 / u->rope_rcp_theta;
  size_t need = 0;
  int64_t shape[1];
  DLTensor ws = ws_slot(c, 0, r, shape);
  if (c->failed) return -1;
  if (need_ws(c, fi_batch_decode_workspace_size(rt, c->dev, r->batch > 0 ? r->batch : 1, r->hq, r->hkv, r->head_dim,
                                                &need),
              need, shape[0]) != 0)
    return -1;
  /* a re-plan in place when only the arrays changed; else, or where fi_runtime refuses it
   * (the heads or the sizes changed with the plan call), a new plan */
  fi_decode_plan *pl = r->plan && run_eq(&r->made, u) ? r->plan : NULL;
  if (!pl) drop_plan(r);
  fi_status st = fi_batch_decode_plan(rt, &in, &p, &ws, ft_stream(c), &pl);
  if (st != FI_OK && r->plan) {
    drop_plan(r);
    pl = NULL;
    st = fi_batch_decode_plan(rt, &in, &p, &ws, ft_stream(c), &pl);
  }
  if (st != FI_OK) return ft_status(c, st);
  r->plan = pl, r->made = *u, r->plan_gen = r->gen;
  return 0;
}

FA_EXPORT(batch_decode_run,
          "float_workspace_buffer: Tensor, int_workspace_buffer: Tensor, plan_info: list, q: Tensor, "
          "paged_k_cache: Tensor, paged_v_cache: Tensor, paged_kv_indptr: Tensor, paged_kv_indices: Tensor, "
          "paged_kv_last_page_len: Tensor, o: Tensor, maybe_lse: Tensor?, kv_layout_code: int, window_left: int, "
          "enable_pdl: bool, sm_scale: float, rope_rcp_scale: float, rope_rcp_theta: float") {
  DLTensor *q = ft_tensor(c, 3), *kc = ft_tensor(c, 4), *vc = ft_tensor(c, 5), *ip = ft_tensor(c, 6),
           *idx = ft_tensor(c, 7), *last = ft_tensor(c, 8), *o = ft_tensor(c, 9), *lse = ft_tensor_opt(c, 10);
  (void)ft_tensor(c, 0), (void)ft_tensor(c, 1);
  fa_run u;
  memset(&u, 0, sizeof u);
  const fi_kv_layout layout = ft_layout(c, 11);
  u.window = (int)ft_int(c, 12);
  ft_int(c, 13);
  u.sm_scale = ft_float(c, 14);
  u.rope_rcp_scale = ft_float(c, 15);
  u.rope_rcp_theta = ft_float(c, 16);
  if (!c->failed && !(u.rope_rcp_scale > 0 && u.rope_rcp_theta > 0 && u.sm_scale > 0))
    return ft_fail(c, 14, "ValueError", "sm_scale, rope_rcp_scale and rope_rcp_theta must be positive");
  if (c->failed) return -1;
  u.kind = FA_DECODE, u.qdt = q->dtype, u.kvdt = kc->dtype;
  pthread_mutex_lock(&fa_mu);
  fa_rec *r = rec_of_info(c, 2, 1);
  if (r && (memcmp(&r->qdt, &u.qdt, sizeof u.qdt) || memcmp(&r->kvdt, &u.kvdt, sizeof u.kvdt))) {
    ft_fail(c, 3, "ValueError", "q or the cache has another dtype than the plan's empty_q_data / empty_kv_data");
    r = NULL;
  }
  int rc = r ? decode_ready(c, r, &u, last) : -1;
  if (rc == 0) { /* launched under fa_mu: a plan call cannot replace the plan under it */
    fi_attention_extras x;
    rc = ft_status(c, fi_batch_decode_run_ex(ft_rt(c), r->plan, q, kc, vc, ip, idx, last, layout, o, lse, base2(&x),
                                             ft_stream(c)));
  }
  pthread_mutex_unlock(&fa_mu);
  return rc;
}

/* ---- fi_runtime's own ---- */

FA_EXPORT(configure, "inline_rope: bool") {
  const int64_t v = ft_int(c, 0);
  if (c->failed) return -1;
  pthread_mutex_lock(&fa_mu);
  inline_rope = v != 0;
  for (int i = 0; i < FA_RECORDS; i++) drop_plan(&recs[i]); /* made with the old setting */
  pthread_mutex_unlock(&fa_mu);
  return 0;
}
