/* jit_key.h: kernel keys, an op plus typed compile-time parameters, their
 * canonical string and the hashes that name a binary in the cache. */
#ifndef JIT_KEY_H
#define JIT_KEY_H

#include <stddef.h>
#include <stdint.h>

#define JIT_MAX_PARAMS 16

/* Element types a key can name. Numbering is part of the memo key only
 * (in-process); the cache key uses the names. */
typedef enum jit_dtype {
  JIT_DT_NONE = 0,
  JIT_DT_F16 = 1,
  JIT_DT_BF16 = 2,
  JIT_DT_F32 = 3,
  JIT_DT_E4M3 = 4,
  JIT_DT_E5M2 = 5,
  JIT_DT_I32 = 6,
  JIT_DT_I64 = 7,
  JIT_DT_COUNT
} jit_dtype;

const char *jit_dtype_name(int dt);     /* "f16", "bf16", ... or NULL */
const char *jit_dtype_cxx(int dt);      /* "fi_half", "fi_bf16", "float", ... */
int jit_dtype_bytes(int dt);

typedef enum jit_param_kind { JIT_P_INT = 0, JIT_P_DTYPE = 1, JIT_P_BOOL = 2 } jit_param_kind;

typedef struct jit_param_desc {
  const char *name;
  jit_param_kind kind;
} jit_param_desc;

typedef struct jit_key jit_key;

/* An op family's compile-time description: its parameters in canonical
 * order, its template, how to write the extern "C" entry for one key, and
 * the configurations prewarm compiles. Defined in jit/ops_*.c. */
typedef struct jit_op {
  const char *name;
  const char *template_name;           /* file under kernels/ */
  int nparams;
  jit_param_desc params[JIT_MAX_PARAMS];
  /* Writes the entry wrapper for key (calling into the template) into buf;
   * returns the length, or -1 if it does not fit. */
  int (*render_entry)(const jit_key *key, const char *entry, char *buf, size_t buflen);
  int (*config_count)(void);
  void (*config)(int idx, jit_key *out); /* idx in [0, config_count) */
  /* Dynamic shared memory bytes every launch of key's kernel passes (raised past the
   * 48 KB default at module load); NULL: none. */
  unsigned (*dyn_smem)(const jit_key *key);
  /* The arch key's kernels compile for on a device (or prewarm target) of arch `arch`,
   * or NULL where the op has none (e.g. wgmma kernels: sm_90 -> sm_90a, nothing on
   * sm_80). NULL hook: `arch` itself. */
  const char *(*target_arch)(const char *arch);
} jit_op;

struct jit_key {
  const jit_op *op;
  int64_t v[JIT_MAX_PARAMS]; /* in op->params order */
};

/* "op=rmsnorm;dtype=bf16;vec=8;..." into buf; returns length or -1. */
int jit_key_canonical(const jit_key *k, char *buf, size_t buflen);

/* Parses a canonical string back into a key for a registered op; 0 on success. */
int jit_key_parse(const char *canonical, jit_key *out);

/* Everything besides the key that changes the binary. */
typedef struct jit_target {
  const char *arch;          /* "sm_90", "gfx90a" */
  const char *options;       /* compile options as one string */
  const char *template_hash; /* jit_template_set_hash() */
  const char *compiler;      /* "nvrtc-13.0"; only for the full hash */
} jit_target;

/* The version of the cache format and kernel ABI folded into every hash. */
#define JIT_CACHE_FORMAT 1

/* "kernel.decode.prefill.format": the ABI versions every row records and every hash covers. */
const char *jit_abi_string(void);

/* key_hash: XXH3-128 over the canonical key, template set, arch, options
 * and ABI; what a process that has not loaded a compiler can compute.
 * hash: the same plus the compiler's name and version; the row's identity. */
void jit_key_hashes(const jit_key *k, const jit_target *t, uint8_t key_hash[16],
                    uint8_t hash[16]);

/* The same hashes from a stored row's own fields (abi as the row spells it,
 * "<kernel ABI>.<cache format>"): a row whose hash or key_hash differs from
 * these was not written for the key it carries. */
void jit_row_hashes(const char *canon, const char *templates, const char *arch,
                    const char *options, const char *abi, const char *compiler,
                    uint8_t key_hash[16], uint8_t hash[16]);

/* The in-process memo key: cheap (no formatting), never stored. */
void jit_key_fast(const jit_key *k, uint64_t *k0, uint64_t *k1);

/* Entry symbol for a key_hash: "fi_<op>_<16 hex>". */
void jit_entry_name(const jit_key *k, const uint8_t key_hash[16], char *buf, size_t buflen);
void jit_entry_name_op(const char *op, const uint8_t key_hash[16], char *buf, size_t buflen);

/* Does binary (a cubin or an AMD code object) say it was built for arch?
 * A cubin: 64-bit ELF, e_machine EM_CUDA (190), the SM in e_flags (bits 0-7
 * before ELF ABI version 8, bits 8-15 in it, the machine alone in a later
 * version). An AMD code object: ELF with
 * e_machine EM_AMDGPU (224) and the gfx target in e_flags' low byte, or a
 * clang offload bundle naming that target. 0 yes; -1 with the reason in why. */
int jit_binary_arch_check(const void *binary, size_t bytes, const char *arch, char *why,
                          size_t whylen);

#endif
