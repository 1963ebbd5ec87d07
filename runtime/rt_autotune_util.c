/* rt_autotune_util.c: what the tuner's harness (rt_autotune.c) and the ops it measures
 * (rt_autotune_moe.c, rt_autotune_decode.c) share: device memory, random 16-bit inputs,
 * tensors and the shape text's items. Its own file so that the harness and the ops each
 * need it and not each other. */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rt_autotune.h"

fi_status rt_tune_dev_fail(rt_tune_dev *d, const char *what) {
  return rt_fail(FI_ERR_DEVICE, "fi_autotune: %s: %s", what, d->err);
}

fi_status rt_tune_alloc(rt_tune_dev *d, size_t bytes, void **p, const char *what) {
  if (d->t->mem_alloc(d->state, d->dev, bytes, p, d->err, sizeof d->err) != 0) return rt_tune_dev_fail(d, what);
  return FI_OK;
}

void rt_tune_free(rt_tune_dev *d, void *p) {
  if (p) d->t->mem_free(d->state, d->dev, p);
}

DLTensor rt_tune_tensor(void *p, int code, int bits, int nd, int64_t *shape, int dev) {
  DLTensor t;
  memset(&t, 0, sizeof t);
  t.data = p;
  t.device.device_type = kDLCUDA;
  t.device.device_id = dev;
  t.ndim = nd;
  t.dtype.code = (uint8_t)code;
  t.dtype.bits = (uint8_t)bits;
  t.dtype.lanes = 1;
  t.shape = shape;
  return t;
}

int rt_tune_items(const char *shape, char *buf, size_t n, int (*item)(const char *k, const char *v, void *u),
                  void *user) {
  snprintf(buf, n, "%s", shape);
  for (char *save = NULL, *it = strtok_r(buf, ";", &save); it; it = strtok_r(NULL, ";", &save)) {
    char *eq = strchr(it, '=');
    if (!eq) return item(it, NULL, user);
    *eq = 0;
    int rc = item(it, eq + 1, user);
    if (rc) return rc;
  }
  return 0;
}

/* ---- random 16-bit floats ---- */

uint64_t rt_tune_rand(uint64_t *s) {
  uint64_t x = *s;
  x ^= x << 13, x ^= x >> 7, x ^= x << 17;
  return *s = x;
}

/* Uniform in [-1, 1). */
static float rng_unit(uint64_t *s) { return (float)((double)(rt_tune_rand(s) >> 11) * 0x1.0p-52 - 1.0); }

static uint16_t to_bf16(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

static float from_bf16(uint16_t h) {
  const uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

/* IEEE half for |f| < 65504 (the tuner's values are small), round to nearest even. */
static uint16_t to_f16(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  const uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
  const float a = fabsf(f);
  if (a < 0x1.0p-24f) return sign;
  if (a < 0x1.0p-14f) return (uint16_t)(sign | (uint16_t)lrintf(a * 0x1.0p24f)); /* subnormal */
  int e;
  const float m = frexpf(a, &e); /* a = m 2^e, m in [0.5, 1) */
  long q = lrintf(m * 2048.0f); /* 11 significant bits */
  if (q == 2048) q = 1024, e++;
  return (uint16_t)(sign | (uint16_t)((e + 14) << 10) | (uint16_t)(q - 1024));
}

static float from_f16(uint16_t h) {
  const int e = (h >> 10) & 31, m = h & 1023;
  float v = e == 0 ? ldexpf((float)m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexpf((float)(m | 1024), e - 25);
  return h & 0x8000u ? -v : v;
}

fi_status rt_tune_fill(rt_tune_dev *d, void *p, size_t bytes, int bf16, float scale, uint64_t seed) {
  return rt_tune_fill_as(d, p, bytes, bf16 ? JIT_DT_BF16 : JIT_DT_F16, -scale, scale, seed);
}

/* One host chunk of random values copied up, then doubled on the device, so that gigabytes
 * of weights cost no host time. */
fi_status rt_tune_fill_as(rt_tune_dev *d, void *p, size_t bytes, int dt, float lo, float hi, uint64_t seed) {
  const size_t es = dt == JIT_DT_F32 ? 4 : 2;
  size_t chunk = bytes < ((size_t)8 << 20) ? bytes : ((size_t)8 << 20);
  chunk -= chunk % es;
  if (!chunk) return FI_OK;
  unsigned char *h = calloc(chunk + 4, 1);
  if (!h) return rt_fail(FI_ERR_OUT_OF_MEMORY, "fi_autotune: out of host memory");
  uint64_t s = seed | 1;
  for (size_t i = 0; i < chunk / es; i++) {
    const float v = lo + (hi - lo) * 0.5f * (rng_unit(&s) + 1.0f);
    if (es == 4) {
      memcpy(h + 4 * i, &v, 4);
    } else {
      const uint16_t x = dt == JIT_DT_BF16 ? to_bf16(v) : to_f16(v);
      memcpy(h + 2 * i, &x, 2);
    }
  }
  int rc = d->t->copy(d->state, d->dev, p, h, chunk, RT_COPY_H2D, d->err, sizeof d->err);
  free(h);
  if (rc != 0) return rt_tune_dev_fail(d, "copying inputs to the device");
  for (size_t done = chunk; done < bytes;) {
    const size_t n = done < bytes - done ? done : bytes - done;
    if (d->t->copy(d->state, d->dev, (char *)p + done, p, n, RT_COPY_D2D, d->err, sizeof d->err) != 0)
      return rt_tune_dev_fail(d, "filling inputs on the device");
    done += n;
  }
  return FI_OK;
}

double rt_tune_value(uint16_t h, int bf16) { return bf16 ? from_bf16(h) : from_f16(h); }

typedef struct shape_ctx {
  const char *const *names;
  int n, seen[16];
  int (*value)(int i, const char *v, void *c);
  void *c;
  char bad[160];
} shape_ctx;

static int shape_item(const char *k, const char *v, void *u) {
  shape_ctx *x = u;
  int i = 0;
  while (i < x->n && strcmp(k, x->names[i]) != 0) i++;
  if (!v || i == x->n || x->seen[i]) {
    snprintf(x->bad, sizeof x->bad, "item '%s' is %s", k,
             !v ? "not key=value" : i == x->n ? "unknown" : "given twice");
    return -1;
  }
  x->seen[i] = 1;
  if (x->value(i, v, x->c) != 0) {
    snprintf(x->bad, sizeof x->bad, "%s=%s is out of range", k, v);
    return -1;
  }
  return 0;
}

fi_status rt_tune_parse_shape(const char *shape, const char *const *names, int n,
                              int (*value)(int i, const char *v, void *c), void *c, const char *want) {
  shape_ctx x;
  memset(&x, 0, sizeof x);
  x.names = names, x.n = n < 16 ? n : 16, x.value = value, x.c = c;
  char buf[512];
  if (strlen(shape) >= sizeof buf)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "fi_autotune: o->shape is longer than %zu bytes", sizeof buf - 1);
  if (rt_tune_items(shape, buf, sizeof buf, shape_item, &x) != 0)
    return rt_fail(FI_ERR_INVALID_ARGUMENT, "fi_autotune: o->shape %s; %s", x.bad, want);
  for (int i = 0; i < x.n; i++)
    if (!x.seen[i]) return rt_fail(FI_ERR_INVALID_ARGUMENT, "fi_autotune: o->shape has no %s; %s", names[i], want);
  return FI_OK;
}
