// philox.cuh: the Philox4x32-10 counter-based generator (Salmon et al., SC'11): a
// 128-bit counter and a 64-bit key give 128 random bits, with no state between calls, so
// a draw depends only on what the caller puts in the counter (say seed, offset, row and
// element group), not on the launch geometry.
#pragma once

namespace fi {
namespace rng {

// Philox4x32-10 of counter c under key (k0, k1).
struct u4 {
  uint32_t x, y, z, w;
};
FI_DEVICE u4 philox(u4 c, uint32_t k0, uint32_t k1) {
#pragma unroll
  for (int i = 0; i < 10; i++) {
    const uint32_t lo0 = 0xD2511F53u * c.x, hi0 = __umulhi(0xD2511F53u, c.x);
    const uint32_t lo1 = 0xCD9E8D57u * c.z, hi1 = __umulhi(0xCD9E8D57u, c.z);
    c = u4{hi1 ^ c.y ^ k0, lo1, hi0 ^ c.w ^ k1, lo0};
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return c;
}

}  // namespace rng
}  // namespace fi
