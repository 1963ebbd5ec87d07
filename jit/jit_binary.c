/* jit_binary.c: what a compiled binary says about itself: the target a cubin or an
 * AMD code object was built for, read from its ELF header, so that a stored row's
 * arch label can be checked against the code it carries. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jit_key.h"

enum { EM_CUDA_ = 190, EM_AMDGPU_ = 224, ELF64_HEADER = 64 };

static uint16_t rd16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }
static uint32_t rd32(const uint8_t *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static uint64_t rd64(const uint8_t *p) { return (uint64_t)rd32(p) | (uint64_t)rd32(p + 4) << 32; }

/* A 64-bit little-endian ELF header: its e_machine, e_flags and ABI version. */
static int elf_header(const uint8_t *b, size_t n, unsigned *machine, uint32_t *flags,
                      unsigned *abiver) {
  if (n < ELF64_HEADER || memcmp(b, "\177ELF", 4) != 0 || b[4] != 2 || b[5] != 1) return -1;
  *abiver = b[8];
  *machine = rd16(b + 18);
  *flags = rd32(b + 48);
  return 0;
}

/* EF_AMDGPU_MACH values (the low byte of e_flags) of the targets fi_runtime
 * builds for; a target missing here is judged by e_machine alone. */
static const struct {
  const char *name;
  unsigned mach;
} amd_mach[] = {
    {"gfx900", 0x2c},  {"gfx906", 0x2f},  {"gfx908", 0x30},  {"gfx90a", 0x3f},
    {"gfx940", 0x40},  {"gfx941", 0x4b},  {"gfx942", 0x4c},  {"gfx950", 0x4f},
    {"gfx1030", 0x36}, {"gfx1100", 0x41}, {"gfx1200", 0x48}, {"gfx1201", 0x4e},
};

static int check_amd_elf(const uint8_t *b, size_t n, const char *base, char *why, size_t wl) {
  unsigned machine = 0, abiver = 0;
  uint32_t flags = 0;
  if (elf_header(b, n, &machine, &flags, &abiver) != 0) {
    snprintf(why, wl, "the binary is not a 64-bit ELF code object");
    return -1;
  }
  if (machine != EM_AMDGPU_) {
    snprintf(why, wl, "the binary is for ELF machine %u, not an AMD GPU (%u)", machine,
             (unsigned)EM_AMDGPU_);
    return -1;
  }
  for (size_t i = 0; i < sizeof amd_mach / sizeof amd_mach[0]; i++)
    if (strcmp(amd_mach[i].name, base) == 0 && (flags & 0xff) != amd_mach[i].mach) {
      snprintf(why, wl, "the code object's target (e_flags mach 0x%02x) is not %s (0x%02x)",
               (unsigned)(flags & 0xff), base, amd_mach[i].mach);
      return -1;
    }
  return 0;
}

/* A clang offload bundle: "__CLANG_OFFLOAD_BUNDLE__", a count, then per entry
 * offset, size, id length and id ("hipv4-amdgcn-amd-amdhsa--gfx90a[:features]"). */
static int check_amd_bundle(const uint8_t *b, size_t n, const char *base, char *why, size_t wl) {
  static const char magic[] = "__CLANG_OFFLOAD_BUNDLE__";
  size_t pos = sizeof magic - 1;
  if (n < pos + 8) return -1;
  uint64_t count = rd64(b + pos);
  pos += 8;
  for (uint64_t i = 0; i < count && i < 64; i++) {
    if (n - pos < 24) break;
    uint64_t off = rd64(b + pos), size = rd64(b + pos + 8), idlen = rd64(b + pos + 16);
    pos += 24;
    if (idlen > n - pos) break;
    const char *id = (const char *)b + pos;
    pos += (size_t)idlen;
    const char *sep = NULL;
    for (size_t k = 0; k + 1 < idlen; k++)
      if (id[k] == '-' && id[k + 1] == '-') sep = id + k + 2;
    if (!sep) continue;
    size_t tl = (size_t)(id + idlen - sep), bl = strlen(base);
    if (tl < bl || memcmp(sep, base, bl) != 0 || (tl > bl && sep[bl] != ':')) continue;
    if (off > n || size > n - off) break;
    return check_amd_elf(b + off, (size_t)size, base, why, wl);
  }
  snprintf(why, wl, "the offload bundle holds no code object for %s", base);
  return -1;
}

int jit_binary_arch_check(const void *binary, size_t bytes, const char *arch, char *why,
                          size_t whylen) {
  const uint8_t *b = binary;
  if (!b || !arch) {
    snprintf(why, whylen, "no binary or no arch");
    return -1;
  }
  if (strncmp(arch, "sm_", 3) == 0) {
    unsigned machine = 0, abiver = 0;
    uint32_t flags = 0;
    if (elf_header(b, bytes, &machine, &flags, &abiver) != 0) {
      snprintf(why, whylen, "the binary is not a 64-bit ELF cubin");
      return -1;
    }
    if (machine != EM_CUDA_) {
      snprintf(why, whylen, "the binary is for ELF machine %u, not CUDA (%u)", machine,
               (unsigned)EM_CUDA_);
      return -1;
    }
    /* The SM moved from bits 0-7 to bits 8-15 with ELF ABI version 8. A
     * later version may move it again: judged by e_machine alone until it is
     * known here (a binary for another GPU still fails at its module load). */
    if (abiver > 8) return 0;
    unsigned sm = abiver == 8 ? (flags >> 8) & 0xff : flags & 0xff;
    unsigned want = (unsigned)strtoul(arch + 3, NULL, 10);
    if (sm != want) {
      snprintf(why, whylen, "the cubin is for sm_%u, not %s", sm, arch);
      return -1;
    }
    return 0;
  }
  if (strncmp(arch, "gfx", 3) == 0) {
    char base[32];
    size_t bl = strcspn(arch, ":");
    if (bl >= sizeof base) bl = sizeof base - 1;
    memcpy(base, arch, bl);
    base[bl] = 0;
    if (bytes >= 24 && memcmp(b, "__CLANG_OFFLOAD_BUNDLE__", 24) == 0)
      return check_amd_bundle(b, bytes, base, why, whylen);
    return check_amd_elf(b, bytes, base, why, whylen);
  }
  snprintf(why, whylen, "unknown arch %s", arch);
  return -1;
}
