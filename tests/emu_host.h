// emu_host.h: the host side the emulator tests share (test_prefill_emu.cc, test_decode_emu.cc,
// test_mla_emu.cc): a xorshift generator of uniform and normal doubles, and f16 / bf16
// bit patterns to and from float (round to nearest even).
#pragma once
#include <math.h>
#include <stdint.h>
#include <string.h>

static uint64_t rs = 0x853c49e6748fea9bull;
static double urand() {
  rs ^= rs << 13;
  rs ^= rs >> 7;
  rs ^= rs << 17;
  return (double)(rs >> 11) / 9007199254740992.0;
}
static double nrand() { return sqrt(-2 * log(urand() + 1e-300)) * cos(6.283185307179586 * urand()); }
static uint16_t to_bits(float f, int bf) {
  if (bf) {
    uint32_t u;
    memcpy(&u, &f, 4);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
  }
  _Float16 h = (_Float16)f;
  uint16_t b;
  memcpy(&b, &h, 2);
  return b;
}
static double from_bits(uint16_t b, int bf) {
  if (bf) {
    uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
  }
  _Float16 h;
  memcpy(&h, &b, 2);
  return (double)h;
}
