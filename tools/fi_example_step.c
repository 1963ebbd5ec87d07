/* fi_example_step.c: one serving step of a Llama-3-8B-class model's kernels on random data,
 * through the entry points fi_example.c looked up: fused add + RMSNorm, the batch indices
 * and positions of the new tokens, Llama 3.1 RoPE on q and k, the append to the paged KV
 * cache, a paged batch prefill (plan + run) for the requests with a prompt, a paged batch
 * decode (plan + run) for the ones generating, SiLU-and-mul, and top-k/top-p sampling.
 * The GEMMs between them are not kernels of fi_runtime: their outputs (q, k, v, gate/up,
 * logits) are random stand-ins. Every call on the legacy default stream (NULL), so the
 * pageable uploads and the memsets before it are ordered with it. Each kernel: the first
 * call (which may load or compile), then the median of warm repetitions, and a check of
 * what it wrote against the host (finite everywhere; float64 references where cheap). */
#include <math.h>
#include <time.h>

#include "fi_example_step.h"

/* ---- small helpers ---- */

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}
static uint64_t rnd(uint64_t *s) {
  *s ^= *s << 13;
  *s ^= *s >> 7;
  *s ^= *s << 17;
  return *s;
}
static double normal(uint64_t *s) {
  const double u = ((double)(rnd(s) >> 11) + 1.0) / 9007199254740993.0;
  const double w = (double)(rnd(s) >> 11) / 9007199254740992.0;
  return sqrt(-2.0 * log(u)) * cos(6.283185307179586 * w);
}
static int cmp_double(const void *a, const void *b) {
  const double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static CUdeviceptr dalloc(step *s, size_t bytes) {
  if (s->nmem == (int)(sizeof s->mem / sizeof s->mem[0])) {
    fprintf(stderr, "fi-example: more buffers than the step keeps track of\n");
    exit(1);
  }
  CUdeviceptr p;
  CU_CHECK(s->cu, cuMemAlloc(&p, bytes));
  s->mem[s->nmem++] = p;
  return p;
}
/* n random bf16 values of standard deviation sd around mean, uploaded to p; the host copy
 * returned (the caller frees it). */
static uint16_t *upload_bf16(step *s, CUdeviceptr p, size_t n, double mean, double sd) {
  uint16_t *h = xmalloc(n * 2);
  for (size_t i = 0; i < n; i++) h[i] = to_bf((float)(mean + sd * normal(&s->rng)));
  CU_CHECK(s->cu, cuMemcpyHtoD(p, h, n * 2));
  return h;
}
static CUdeviceptr upload_i32(step *s, const int32_t *v, int n) {
  CUdeviceptr p = dalloc(s, (size_t)n * 4);
  CU_CHECK(s->cu, cuMemcpyHtoD(p, v, (size_t)n * 4));
  return p;
}

static const DLDataType BF16 = {kDLBfloat, 16, 1}, F32 = {kDLFloat, 32, 1},
                        I32 = {kDLInt, 32, 1}, U8 = {kDLUInt, 8, 1};

/* A contiguous tensor of up to 4 dimensions (those after ndim ignored). */
static DLTensor tensor(step *s, CUdeviceptr p, uint64_t byte_offset, DLDataType dt, int ndim,
                       int64_t d0, int64_t d1, int64_t d2, int64_t d3) {
  if (s->ndims == (int)(sizeof s->dims / sizeof s->dims[0])) {
    fprintf(stderr, "fi-example: more tensors than the step keeps shapes for\n");
    exit(1);
  }
  int64_t *shape = s->dims[s->ndims++];
  shape[0] = d0, shape[1] = d1, shape[2] = d2, shape[3] = d3;
  DLTensor t;
  memset(&t, 0, sizeof t);
  t.data = (void *)(uintptr_t)p;
  t.byte_offset = byte_offset;
  t.device.device_type = kDLCUDA;
  t.device.device_id = 0;
  t.ndim = ndim;
  t.dtype = dt;
  t.shape = shape;
  return t;
}


/* ---- the batch and its buffers ---- */

static void setup(step *s) {
  s->qo[0] = 0;
  s->kv_indptr[0] = 0;
  for (int b = 0; b < NREQ; b++) {
    const int pages = (kv_len[b] + PAGE - 1) / PAGE;
    s->qo[b + 1] = s->qo[b] + q_len[b];
    s->seq[b] = kv_len[b];
    s->kv_indptr[b + 1] = s->kv_indptr[b] + pages;
    s->kv_last[b] = kv_len[b] - (pages - 1) * PAGE;
  }
  s->T = s->qo[NREQ];
  /* Pages in a random order out of a larger pool, as a cache manager hands them out. */
  int32_t perm[POOL_PAGES];
  for (int i = 0; i < POOL_PAGES; i++) perm[i] = i;
  for (int i = POOL_PAGES - 1; i > 0; i--) {
    const int j = (int)(rnd(&s->rng) % (uint64_t)(i + 1));
    const int32_t t = perm[i];
    perm[i] = perm[j], perm[j] = t;
  }
  memcpy(s->kv_indices, perm, sizeof perm);
  for (int b = 0; b <= NDEC; b++) s->dec_indptr[b] = s->kv_indptr[NPRE + b] - s->kv_indptr[NPRE];

  const int T = s->T;
  const size_t qe = (size_t)T * HQ * HD, ke = (size_t)T * HKV * HD;
  const size_t cache_elems = (size_t)POOL_PAGES * PAGE * HKV * HD;
  /* The residual stream and the norm's weight. */
  s->hidden = dalloc(s, (size_t)T * HIDDEN * 2);
  s->resid = dalloc(s, (size_t)T * HIDDEN * 2);
  s->normw = dalloc(s, HIDDEN * 2);
  s->h_hidden = upload_bf16(s, s->hidden, (size_t)T * HIDDEN, 0, 1);
  s->h_resid = upload_bf16(s, s->resid, (size_t)T * HIDDEN, 0, 1);
  s->h_normw = upload_bf16(s, s->normw, HIDDEN, 1, 0.1);
  /* The QKV projection's output (stand-in). */
  s->q = dalloc(s, qe * 2);
  s->k = dalloc(s, ke * 2);
  s->v = dalloc(s, ke * 2);
  s->h_q0 = upload_bf16(s, s->q, qe, 0, 1);
  s->h_k0 = upload_bf16(s, s->k, ke, 0, 1);
  free(upload_bf16(s, s->v, ke, 0, 1));
  /* Where the new tokens go: fi_get_batch_indices_positions's inputs and outputs. */
  s->aip = upload_i32(s, s->qo, NREQ + 1);
  s->seqlen = upload_i32(s, s->seq, NREQ);
  s->bidx = dalloc(s, (size_t)T * 4);
  s->pos = dalloc(s, (size_t)T * 4);
  CU_CHECK(s->cu, cuMemsetD8(s->bidx, 0xff, (size_t)T * 4));
  CU_CHECK(s->cu, cuMemsetD8(s->pos, 0xff, (size_t)T * 4));
  /* The paged cache: every slot random (the earlier tokens' K and V), the new tokens'
   * slots overwritten by the append. */
  s->kvip = upload_i32(s, s->kv_indptr, NREQ + 1);
  s->kvidx = upload_i32(s, s->kv_indices, s->kv_indptr[NREQ]);
  s->kvlast = upload_i32(s, s->kv_last, NREQ);
  s->kc = dalloc(s, cache_elems * 2);
  s->vc = dalloc(s, cache_elems * 2);
  free(upload_bf16(s, s->kc, cache_elems, 0, 1));
  free(upload_bf16(s, s->vc, cache_elems, 0, 1));
  /* Attention's output for every token (prefill rows first, then decode), poisoned:
   * 0xffff is a NaN in bf16 and float32, so a row never written fails the check. */
  s->out = dalloc(s, qe * 2);
  s->lse = dalloc(s, (size_t)T * HQ * 4);
  CU_CHECK(s->cu, cuMemsetD8(s->out, 0xff, qe * 2));
  CU_CHECK(s->cu, cuMemsetD8(s->lse, 0xff, (size_t)T * HQ * 4));
  /* The decode requests' page table (indptr from 0, their pages, their last pages). */
  s->dip = upload_i32(s, s->dec_indptr, NDEC + 1);
  s->didx = upload_i32(s, s->kv_indices + s->kv_indptr[NPRE], s->dec_indptr[NDEC]);
  s->dlast = upload_i32(s, s->kv_last + NPRE, NDEC);
  /* The MLP: gate/up projection's output (stand-in) and SiLU-and-mul's output, poisoned. */
  s->gu = dalloc(s, (size_t)T * 2 * INTER * 2);
  s->act = dalloc(s, (size_t)T * INTER * 2);
  s->h_gu = upload_bf16(s, s->gu, (size_t)T * 2 * INTER, 0, 2);
  CU_CHECK(s->cu, cuMemsetD8(s->act, 0xff, (size_t)T * INTER * 2));
  /* The LM head's output for each request's last token (stand-in), float32. */
  s->logits = dalloc(s, (size_t)NREQ * VOCAB * 4);
  s->samples = dalloc(s, NREQ * 4);
  s->h_logits = xmalloc((size_t)NREQ * VOCAB * 4);
  for (size_t i = 0; i < (size_t)NREQ * VOCAB; i++) s->h_logits[i] = (float)(3 * normal(&s->rng));
  CU_CHECK(s->cu, cuMemcpyHtoD(s->logits, s->h_logits, (size_t)NREQ * VOCAB * 4));
  CU_CHECK(s->cu, cuMemsetD8(s->samples, 0xff, NREQ * 4));

  s->t_hidden = tensor(s, s->hidden, 0, BF16, 2, T, HIDDEN, 0, 0);
  s->t_resid = tensor(s, s->resid, 0, BF16, 2, T, HIDDEN, 0, 0);
  s->t_normw = tensor(s, s->normw, 0, BF16, 1, HIDDEN, 0, 0, 0);
  s->t_q = tensor(s, s->q, 0, BF16, 3, T, HQ, HD, 0);
  s->t_k = tensor(s, s->k, 0, BF16, 3, T, HKV, HD, 0);
  s->t_v = tensor(s, s->v, 0, BF16, 3, T, HKV, HD, 0);
  s->t_aip = tensor(s, s->aip, 0, I32, 1, NREQ + 1, 0, 0, 0);
  s->t_seq = tensor(s, s->seqlen, 0, I32, 1, NREQ, 0, 0, 0);
  s->t_bidx = tensor(s, s->bidx, 0, I32, 1, T, 0, 0, 0);
  s->t_pos = tensor(s, s->pos, 0, I32, 1, T, 0, 0, 0);
  s->t_kvip = tensor(s, s->kvip, 0, I32, 1, NREQ + 1, 0, 0, 0);
  s->t_kvidx = tensor(s, s->kvidx, 0, I32, 1, s->kv_indptr[NREQ], 0, 0, 0);
  s->t_kvlast = tensor(s, s->kvlast, 0, I32, 1, NREQ, 0, 0, 0);
  s->t_kc = tensor(s, s->kc, 0, BF16, 4, POOL_PAGES, PAGE, HKV, HD); /* NHD */
  s->t_vc = tensor(s, s->vc, 0, BF16, 4, POOL_PAGES, PAGE, HKV, HD);
  /* Prefill reads the prompt requests' rows of q and writes theirs of out and lse; it
   * takes the whole page list (its plan's indptr covers the first requests' pages). */
  const int np = s->qo[NPRE];
  s->t_pq = tensor(s, s->q, 0, BF16, 3, np, HQ, HD, 0);
  s->t_pout = tensor(s, s->out, 0, BF16, 3, np, HQ, HD, 0);
  s->t_plse = tensor(s, s->lse, 0, F32, 2, np, HQ, 0, 0);
  /* Decode: the generating requests' rows, one token each, after the prompts' rows. */
  const uint64_t drow = (uint64_t)s->qo[NPRE];
  s->t_dq = tensor(s, s->q, drow * HQ * HD * 2, BF16, 3, NDEC, HQ, HD, 0);
  s->t_dout = tensor(s, s->out, drow * HQ * HD * 2, BF16, 3, NDEC, HQ, HD, 0);
  s->t_dlse = tensor(s, s->lse, drow * HQ * 4, F32, 2, NDEC, HQ, 0, 0);
  s->t_dip = tensor(s, s->dip, 0, I32, 1, NDEC + 1, 0, 0, 0);
  s->t_didx = tensor(s, s->didx, 0, I32, 1, s->dec_indptr[NDEC], 0, 0, 0);
  s->t_dlast = tensor(s, s->dlast, 0, I32, 1, NDEC, 0, 0, 0);
  s->t_gu = tensor(s, s->gu, 0, BF16, 2, T, 2 * INTER, 0, 0);
  s->t_act = tensor(s, s->act, 0, BF16, 2, T, INTER, 0, 0);
  s->t_logits = tensor(s, s->logits, 0, F32, 2, NREQ, VOCAB, 0, 0);
  s->t_samples = tensor(s, s->samples, 0, I32, 1, NREQ, 0, 0, 0);
}

/* The plans' descriptions and their workspaces (sizes from the runtime). 0 or 1. */
static int setup_plans(step *s) {
  const fi_api *fi = s->fi;
  DLDevice dev = {kDLCUDA, 0};
  size_t pbytes = 0, dbytes = 0;
  fi_status st = fi->batch_prefill_workspace_size(s->rt, dev, NPRE, s->qo[NPRE], HQ, HKV, HD, &pbytes);
  if (st == FI_OK) st = fi->batch_decode_workspace_size(s->rt, dev, NDEC, HQ, HKV, HD, &dbytes);
  if (st != FI_OK) {
    fprintf(stderr, "fi-example: workspace size: %s: %s\n", fi->status_string(st), fi->last_error());
    return 1;
  }
  s->pws = dalloc(s, pbytes); /* cuMemAlloc is 256-byte aligned, as the plans need */
  s->dws = dalloc(s, dbytes);
  s->t_pws = tensor(s, s->pws, 0, U8, 1, (int64_t)pbytes, 0, 0, 0);
  s->t_dws = tensor(s, s->dws, 0, U8, 1, (int64_t)dbytes, 0, 0, 0);

  fi_batch_prefill_info *pi = &s->pinfo;
  memset(pi, 0, sizeof *pi);
  pi->batch = NPRE;
  pi->qo_indptr = s->qo;            /* the prompts' tokens are the first rows */
  pi->kv_indptr = s->kv_indptr;     /* and their pages the first entries of kv_indices */
  pi->kv_last_page_len = s->kv_last;
  pi->num_qo_heads = HQ;
  pi->num_kv_heads = HKV;
  pi->head_dim = HD;
  pi->page_size = PAGE;
  pi->q_dtype = pi->kv_dtype = BF16;
  fi->prefill_params_init(&s->pparams); /* causal; RoPE already applied to q and k */

  fi_batch_decode_info *di = &s->dinfo;
  memset(di, 0, sizeof *di);
  di->batch = NDEC;
  di->indptr = s->dec_indptr;
  di->last_page_len = s->kv_last + NPRE;
  di->num_qo_heads = HQ;
  di->num_kv_heads = HKV;
  di->head_dim = HD;
  di->page_size = PAGE;
  di->q_dtype = di->kv_dtype = BF16;
  fi->attention_params_init(&s->dparams);
  printf("workspaces: prefill %zu bytes, decode %zu bytes\n", pbytes, dbytes);
  return 0;
}

/* ---- the calls: rep is -1 for the first call, then 0, 1, ... ---- */

static fi_status op_norm(step *s, int rep) {
  (void)rep;
  return s->fi->fused_add_rmsnorm(s->rt, &s->t_hidden, &s->t_resid, &s->t_normw, RMS_EPS, NULL);
}
static fi_status op_bip(step *s, int rep) {
  (void)rep;
  return s->fi->get_batch_indices_positions(s->rt, &s->t_aip, &s->t_seq, &s->t_bidx, &s->t_pos, NULL);
}
static fi_status op_rope(step *s, int rep) {
  (void)rep; /* in place: each repetition rotates q and k again, which keeps them finite */
  return s->fi->apply_llama31_rope_pos_ids(s->rt, &s->t_q, &s->t_k, &s->t_q, &s->t_k, &s->t_pos, HD, 0,
                                           ROPE_FACTOR, ROPE_THETA, 1.0, 4.0, 8192.0, NULL);
}
static fi_status op_append(step *s, int rep) {
  (void)rep;
  return s->fi->append_paged_kv_cache(s->rt, &s->t_k, &s->t_v, &s->t_bidx, &s->t_pos, &s->t_kc, &s->t_vc,
                                      &s->t_kvidx, &s->t_kvip, &s->t_kvlast, FI_KV_LAYOUT_NHD, 1.0, 1.0,
                                      NULL);
}
static fi_status op_prefill_plan(step *s, int rep) {
  (void)rep; /* the first call makes the plan, the others re-plan it in place */
  return s->fi->batch_prefill_paged_plan(s->rt, &s->pinfo, &s->pparams, &s->t_pws, NULL, &s->pplan);
}
static fi_status op_prefill_run(step *s, int rep) {
  (void)rep;
  return s->fi->batch_prefill_paged_run(s->rt, s->pplan, &s->t_pq, &s->t_kc, &s->t_vc, &s->t_kvidx,
                                        FI_KV_LAYOUT_NHD, &s->t_pout, &s->t_plse, NULL);
}
static fi_status op_decode_plan(step *s, int rep) {
  (void)rep;
  return s->fi->batch_decode_plan(s->rt, &s->dinfo, &s->dparams, &s->t_dws, NULL, &s->dplan);
}
static fi_status op_decode_run(step *s, int rep) {
  (void)rep;
  return s->fi->batch_decode_run(s->rt, s->dplan, &s->t_dq, &s->t_kc, &s->t_vc, &s->t_dip, &s->t_didx,
                                 &s->t_dlast, FI_KV_LAYOUT_NHD, &s->t_dout, &s->t_dlse, NULL);
}
static fi_status op_silu(step *s, int rep) {
  (void)rep;
  return s->fi->silu_and_mul(s->rt, &s->t_gu, &s->t_act, NULL);
}
/* Philox offset 0 for the first call, a fresh one for each repetition (as an engine
 * passes a new offset every step). */
fi_status op_sample(step *s, int rep) {
  return s->fi->top_k_top_p_sampling_from_logits(s->rt, &s->t_logits, NULL, TOP_K, NULL, TOP_P,
                                                 &s->t_samples, 42, (uint64_t)(rep + 1), NULL);
}

/* ---- timing ---- */

typedef fi_status (*op_fn)(step *s, int rep);
typedef void (*check_fn)(step *s);

static void stats(step *s, fi_stats *st) {
  memset(st, 0, sizeof *st);
  st->struct_size = sizeof *st;
  fi_status r = s->fi->runtime_stats(s->rt, st);
  if (r != FI_OK) {
    fprintf(stderr, "fi-example: fi_runtime_stats: %s: %s\n", s->fi->status_string(r), s->fi->last_error());
    exit(1);
  }
}

static int call_failed(step *s, const char *name, fi_status st) {
  fputs(s->notes, stdout);
  s->notes[0] = 0;
  fflush(stdout);
  fprintf(stderr, "fi-example: fi_%s: %s: %s\n", name, s->fi->status_string(st), s->fi->last_error());
  s->failed = 1;
  return 1;
}

/* Runs name once (timed on the host clock up to the end of its work: a load or a compile
 * counts), checks what it wrote when after_first is given, then times the warm
 * repetitions between CUDA events (device time) and on the host clock (with the launch
 * and the synchronization), prints the line and runs check. 0, or 1 if a call failed. */
static int timed(step *s, const char *name, const char *shape, op_fn fn, check_fn after_first,
                 check_fn check) {
  static double gpu[MAX_REPS], host[MAX_REPS];
  fi_stats a, b, c;
  stats(s, &a);
  const double t0 = now_ms();
  fi_status st = fn(s, -1);
  if (st != FI_OK) return call_failed(s, name, st);
  CU_CHECK(s->cu, cuCtxSynchronize());
  const double first = now_ms() - t0;
  stats(s, &b);
  if (after_first) after_first(s);
  for (int r = 0; r < s->reps; r++) {
    const double h0 = now_ms();
    CU_CHECK(s->cu, cuEventRecord(s->e0, NULL));
    if ((st = fn(s, r)) != FI_OK) return call_failed(s, name, st);
    CU_CHECK(s->cu, cuEventRecord(s->e1, NULL));
    CU_CHECK(s->cu, cuEventSynchronize(s->e1));
    host[r] = now_ms() - h0;
    float ms;
    CU_CHECK(s->cu, cuEventElapsedTime(&ms, s->e0, s->e1));
    gpu[r] = ms;
  }
  stats(s, &c);
  qsort(gpu, (size_t)s->reps, sizeof *gpu, cmp_double);
  qsort(host, (size_t)s->reps, sizeof *host, cmp_double);
  /* How the first call found its kernels: compiled now, loaded from the disk cache,
   * already in this process (the memo), or none needed (host-side work only). */
  char how[64], paren[72];
  const long long comp = b.compiles - a.compiles, hit = b.cache_hits - a.cache_hits,
                  memo = b.memo_hits - a.memo_hits;
  if (comp && hit)
    snprintf(how, sizeof how, "%lld compiled, %lld cached", comp, hit);
  else if (comp)
    snprintf(how, sizeof how, "%lld compiled", comp);
  else if (hit)
    snprintf(how, sizeof how, "%lld from the cache", hit);
  else
    snprintf(how, sizeof how, "%s", memo ? "in memory" : "no kernel");
  snprintf(paren, sizeof paren, "(%s)", how);
  printf("%-34s %-40s %9.2f ms %-20s %9.1f us %9.1f us\n", name, shape, first, paren, gpu[s->reps / 2] * 1e3,
         host[s->reps / 2] * 1e3);
  s->gpu_us += gpu[s->reps / 2] * 1e3;
  s->host_us += host[s->reps / 2] * 1e3;
  const long long all = c.compiles - a.compiles;
  if (all > 0) {
    s->res->compiles += all;
    const size_t used = strlen(s->res->compiled_by);
    snprintf(s->res->compiled_by + used, sizeof s->res->compiled_by - used, "%sfi_%s", used ? ", " : "", name);
  }
  if (check) check(s);
  fputs(s->notes, stdout);
  s->notes[0] = 0;
  return 0;
}

int fi_example_step(const fi_api *fi, fi_runtime *rt, cu_api *cu, const fi_step_opts *opts,
                    fi_step_result *res) {
  static step st; /* large (host copies, shapes): not on the stack */
  step *s = &st;
  memset(s, 0, sizeof *s);
  s->fi = fi, s->rt = rt, s->cu = cu, s->res = res;
  s->reps = opts->reps < 1 ? 1 : opts->reps > MAX_REPS ? MAX_REPS : opts->reps;
  s->rng = 0x9e3779b97f4a7c15ull;

  char name[128] = "?";
  int dev = 0, major = 0, minor = 0, sms = 0;
  CU_CHECK(cu, cuDeviceGet(&dev, 0));
  CU_CHECK(cu, cuDeviceGetName(name, sizeof name, dev));
  CU_CHECK(cu, cuDeviceGetAttribute(&major, 75 /* COMPUTE_CAPABILITY_MAJOR */, dev));
  CU_CHECK(cu, cuDeviceGetAttribute(&minor, 76 /* COMPUTE_CAPABILITY_MINOR */, dev));
  CU_CHECK(cu, cuDeviceGetAttribute(&sms, 16 /* MULTIPROCESSOR_COUNT */, dev));
  printf("GPU: %s (sm_%d%d, %d SMs)\n", name, major, minor, sms);
  CU_CHECK(cu, cuEventCreate(&s->e0, 0));
  CU_CHECK(cu, cuEventCreate(&s->e1, 0));

  setup(s);
  printf("one serving step of a Llama-3-8B-class layer's kernels on random data: bf16, hidden %d, "
         "%d query / %d KV heads of %d, page %d, intermediate %d, vocabulary %d (the GEMMs are not "
         "fi_runtime kernels: their outputs are random stand-ins)\n",
         HIDDEN, HQ, HKV, HD, PAGE, INTER, VOCAB);
  printf("batch: %d requests with KV lengths %d, %d, %d, %d after this step; %d prompts (%d and %d new "
         "tokens) and %d decoding (1 token each): %d tokens, %d of %d pages used\n",
         NREQ, kv_len[0], kv_len[1], kv_len[2], kv_len[3], NPRE, q_len[0], q_len[1], NDEC, s->T,
         s->kv_indptr[NREQ], POOL_PAGES);
  if (setup_plans(s)) return 1;
  CU_CHECK(cu, cuCtxSynchronize());
  printf("%-34s %-40s %-33s %12s %12s\n", "call", "shape", "first call (its kernels)", "warm: gpu",
         "host");

  char shp[10][96];
  snprintf(shp[0], sizeof shp[0], "x, residual [%d, %d] bf16", s->T, HIDDEN);
  snprintf(shp[1], sizeof shp[1], "%d requests, %d tokens", NREQ, s->T);
  snprintf(shp[2], sizeof shp[2], "q [%d, %d, %d], k [%d, %d, %d] bf16", s->T, HQ, HD, s->T, HKV, HD);
  snprintf(shp[3], sizeof shp[3], "k, v [%d, %d, %d] -> %d pages of %d", s->T, HKV, HD, POOL_PAGES, PAGE);
  snprintf(shp[4], sizeof shp[4], "%d requests, %d + %d tokens", NPRE, q_len[0], q_len[1]);
  snprintf(shp[5], sizeof shp[5], "q [%d, %d, %d], KV %d and %d", s->qo[NPRE], HQ, HD, kv_len[0], kv_len[1]);
  snprintf(shp[6], sizeof shp[6], "%d requests", NDEC);
  snprintf(shp[7], sizeof shp[7], "q [%d, %d, %d], KV %d and %d", NDEC, HQ, HD, kv_len[2], kv_len[3]);
  snprintf(shp[8], sizeof shp[8], "[%d, %d] -> [%d, %d] bf16", s->T, 2 * INTER, s->T, INTER);
  snprintf(shp[9], sizeof shp[9], "logits [%d, %d] f32, k %d, p %.1f", NREQ, VOCAB, TOP_K, TOP_P);
  int rc = 0;
  rc = rc || timed(s, "fused_add_rmsnorm", shp[0], op_norm, check_norm, NULL);
  rc = rc || timed(s, "get_batch_indices_positions", shp[1], op_bip, NULL, check_bip);
  rc = rc || timed(s, "apply_llama31_rope_pos_ids", shp[2], op_rope, check_rope, keep_q);
  rc = rc || timed(s, "append_paged_kv_cache", shp[3], op_append, NULL, check_append);
  rc = rc || timed(s, "batch_prefill_paged_plan", shp[4], op_prefill_plan, NULL, NULL);
  rc = rc || timed(s, "batch_prefill_paged_run", shp[5], op_prefill_run, NULL, check_prefill);
  rc = rc || timed(s, "batch_decode_plan", shp[6], op_decode_plan, NULL, NULL);
  rc = rc || timed(s, "batch_decode_run", shp[7], op_decode_run, NULL, check_decode);
  rc = rc || timed(s, "silu_and_mul", shp[8], op_silu, NULL, check_silu);
  rc = rc || timed(s, "top_k_top_p_sampling_from_logits", shp[9], op_sample, check_sample_first, check_sample);
  CU_CHECK(cu, cuCtxSynchronize());
  if (!rc)
    printf("%-34s %-40s %33s %9.1f us %9.1f us\n", "the step, warm", "", "", s->gpu_us, s->host_us);
  printf("(warm: the median of %d repetitions; gpu: between CUDA events around the call on its stream; "
         "host: the call, launch included, up to the end of a synchronize)\n",
         s->reps);

  if (s->pplan) fi->batch_prefill_plan_destroy(s->pplan);
  if (s->dplan) fi->batch_decode_plan_destroy(s->dplan);
  for (int i = 0; i < s->nmem; i++) CU_CHECK(cu, cuMemFree(s->mem[i]));
  CU_CHECK(cu, cuEventDestroy(s->e0));
  CU_CHECK(cu, cuEventDestroy(s->e1));
  void *host[] = {s->h_hidden, s->h_resid, s->h_normw, s->h_q0, s->h_k0, s->h_gu, s->h_logits, s->kf, s->vf, s->h_q};
  for (size_t i = 0; i < sizeof host / sizeof host[0]; i++) free(host[i]);
  if (rc || s->failed) {
    printf("the serving step FAILED (see above)\n");
    return 1;
  }
  printf("the serving step ran: every call succeeded and every check passed\n");
  return 0;
}
