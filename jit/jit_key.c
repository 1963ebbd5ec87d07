/* jit_key.c: canonical key strings and the XXH3-128 hashes over them; the golden
 * vectors in tests/test_key.c pin both, since changing either orphans every cache. */
#include "jit_key.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "decode_params.h"
#include "fi_params.h"
#include "prefill_params.h"
#include "jit_registry.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

static const struct {
  const char *name, *cxx;
  int bytes;
} dtypes[JIT_DT_COUNT] = {
    [JIT_DT_NONE] = {"none", "void", 0},       [JIT_DT_F16] = {"f16", "fi_half", 2},
    [JIT_DT_BF16] = {"bf16", "fi_bf16", 2},    [JIT_DT_F32] = {"f32", "float", 4},
    [JIT_DT_E4M3] = {"e4m3", "fi_e4m3", 1},    [JIT_DT_E5M2] = {"e5m2", "fi_e5m2", 1},
    [JIT_DT_I32] = {"i32", "int32_t", 4},      [JIT_DT_I64] = {"i64", "int64_t", 8},
};

const char *jit_dtype_name(int dt) { return dt >= 0 && dt < JIT_DT_COUNT ? dtypes[dt].name : NULL; }
const char *jit_dtype_cxx(int dt) { return dt >= 0 && dt < JIT_DT_COUNT ? dtypes[dt].cxx : NULL; }
int jit_dtype_bytes(int dt) { return dt >= 0 && dt < JIT_DT_COUNT ? dtypes[dt].bytes : 0; }

int jit_key_canonical(const jit_key *k, char *buf, size_t buflen) {
  size_t n = 0;
  int w = snprintf(buf, buflen, "op=%s", k->op->name);
  if (w < 0 || (size_t)w >= buflen) return -1;
  n = (size_t)w;
  for (int i = 0; i < k->op->nparams; i++) {
    const jit_param_desc *p = &k->op->params[i];
    if (p->kind == JIT_P_DTYPE) {
      const char *dn = jit_dtype_name((int)k->v[i]);
      if (!dn) return -1;
      w = snprintf(buf + n, buflen - n, ";%s=%s", p->name, dn);
    } else {
      w = snprintf(buf + n, buflen - n, ";%s=%lld", p->name, (long long)k->v[i]);
    }
    if (w < 0 || (size_t)w >= buflen - n) return -1;
    n += (size_t)w;
  }
  return (int)n;
}

int jit_key_parse(const char *canonical, jit_key *out) {
  memset(out, 0, sizeof *out);
  if (strncmp(canonical, "op=", 3) != 0) return -1;
  const char *p = canonical + 3;
  size_t oplen = strcspn(p, ";");
  char opname[64];
  if (oplen == 0 || oplen >= sizeof opname) return -1;
  memcpy(opname, p, oplen);
  opname[oplen] = 0;
  out->op = jit_registry_find(opname);
  if (!out->op) return -1;
  p += oplen;
  for (int i = 0; i < out->op->nparams; i++) {
    const jit_param_desc *d = &out->op->params[i];
    size_t nl = strlen(d->name);
    if (*p != ';' || strncmp(p + 1, d->name, nl) != 0 || p[1 + nl] != '=') return -1;
    p += 2 + nl;
    size_t vl = strcspn(p, ";");
    char val[32];
    if (vl == 0 || vl >= sizeof val) return -1;
    memcpy(val, p, vl);
    val[vl] = 0;
    p += vl;
    if (d->kind == JIT_P_DTYPE) {
      int found = -1;
      for (int t = 1; t < JIT_DT_COUNT; t++)
        if (strcmp(val, dtypes[t].name) == 0) found = t;
      if (found < 0) return -1;
      out->v[i] = found;
    } else {
      char *end;
      long long x = strtoll(val, &end, 10);
      if (*end) return -1;
      out->v[i] = x;
    }
  }
  return *p ? -1 : 0;
}

static void to_bytes(XXH128_hash_t h, uint8_t out[16]) {
  XXH128_canonical_t c;
  XXH128_canonicalFromHash(&c, h);
  memcpy(out, c.digest, 16);
}

/* Every kernel ABI version (fi_params.h's, the decode and prefill families') and the
 * cache format, as one string: a bump of any retires every binary built before it. */
#define JIT_STR2(x) #x
#define JIT_STR(x) JIT_STR2(x)
const char *jit_abi_string(void) {
  return JIT_STR(FI_KERNEL_ABI_VERSION) "." JIT_STR(FI_DECODE_ABI_VERSION) "." JIT_STR(
      FI_PREFILL_ABI_VERSION) "." JIT_STR(JIT_CACHE_FORMAT);
}

void jit_key_hashes(const jit_key *k, const jit_target *t, uint8_t key_hash[16],
                    uint8_t hash[16]) {
  char canon[1024];
  if (jit_key_canonical(k, canon, sizeof canon) < 0) canon[0] = 0;
  jit_row_hashes(canon, t->template_hash, t->arch, t->options, jit_abi_string(), t->compiler, key_hash, hash);
}

void jit_row_hashes(const char *canon, const char *templates, const char *arch,
                    const char *options, const char *abi, const char *compiler,
                    uint8_t key_hash[16], uint8_t hash[16]) {
  char buf[2048];
  int n = snprintf(buf, sizeof buf,
                   "fi_runtime\nkey=%s\ntemplates=%s\narch=%s\noptions=%s\nabi=%s\n",
                   canon ? canon : "", templates ? templates : "", arch ? arch : "",
                   options ? options : "", abi ? abi : "");
  if (n < 0) n = 0;
  if ((size_t)n >= sizeof buf) n = sizeof buf - 1;
  if (key_hash) to_bytes(XXH3_128bits(buf, (size_t)n), key_hash);
  if (hash) {
    int m = snprintf(buf + n, sizeof buf - (size_t)n, "compiler=%s\n", compiler ? compiler : "");
    if (m < 0) m = 0;
    if ((size_t)(n + m) >= sizeof buf) m = (int)(sizeof buf - 1 - (size_t)n);
    to_bytes(XXH3_128bits(buf, (size_t)(n + m)), hash);
  }
}

void jit_key_fast(const jit_key *k, uint64_t *k0, uint64_t *k1) {
  struct {
    const void *op;
    int64_t v[JIT_MAX_PARAMS];
  } blob;
  memset(&blob, 0, sizeof blob);
  blob.op = k->op;
  memcpy(blob.v, k->v, sizeof(int64_t) * (size_t)k->op->nparams);
  XXH128_hash_t h = XXH3_128bits(&blob, sizeof blob);
  *k0 = h.high64;
  *k1 = h.low64;
}

void jit_entry_name(const jit_key *k, const uint8_t key_hash[16], char *buf, size_t buflen) {
  jit_entry_name_op(k->op->name, key_hash, buf, buflen);
}

void jit_entry_name_op(const char *op, const uint8_t key_hash[16], char *buf, size_t buflen) {
  snprintf(buf, buflen, "fi_%s_%02x%02x%02x%02x%02x%02x%02x%02x", op, key_hash[0], key_hash[1],
           key_hash[2], key_hash[3], key_hash[4], key_hash[5], key_hash[6], key_hash[7]);
}
