/* jit_templates.c: lookups in the embedded template set and its hash, computed
 * once per process (a few microseconds) so no build step has to agree with it. */
#include "jit_templates.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

const jit_template *jit_template_find(const char *name) {
  for (int i = 0; i < jit_template_count; i++)
    if (strcmp(jit_templates[i].name, name) == 0) return &jit_templates[i];
  return NULL;
}

static pthread_once_t once = PTHREAD_ONCE_INIT;
static char set_hash[33];

static void compute(void) {
  XXH3_state_t st;
  XXH3_INITSTATE(&st);
  XXH3_128bits_reset(&st);
  for (int i = 0; i < jit_template_count; i++) {
    /* Name and length first, so moving text between files changes the hash. */
    char head[300];
    int n = snprintf(head, sizeof head, "%s\n%zu\n", jit_templates[i].name, jit_templates[i].len);
    XXH3_128bits_update(&st, head, (size_t)n);
    XXH3_128bits_update(&st, jit_templates[i].text, jit_templates[i].len);
  }
  XXH128_hash_t h = XXH3_128bits_digest(&st);
  snprintf(set_hash, sizeof set_hash, "%016llx%016llx", (unsigned long long)h.high64,
           (unsigned long long)h.low64);
}

const char *jit_template_set_hash(void) {
  pthread_once(&once, compute);
  return set_hash;
}

int jit_template_headers(const char **names, const char **texts, int max) {
  int n = jit_template_count < max ? jit_template_count : max;
  for (int i = 0; i < n; i++) {
    names[i] = jit_templates[i].name;
    texts[i] = jit_templates[i].text;
  }
  return n;
}
