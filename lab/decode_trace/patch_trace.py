#!/usr/bin/env python3
"""patch_trace.py IN OUT: writes a copy of kernels/decode.cuh with a per-phase clock trace
and two experiment switches, for lab/decode_trace/decode_trace.cu (nvcc, not NVRTC).
The kernel template gets one more parameter, TRC (bits): 1 trace (lane 0 of every warp
stores %clock64 at each phase, %globaltimer at the block's entry, after the PDL wait and
at the end), 4 no merge (a split block returns after its partial: the merge's cost
bound), 8 the chunk counter's earlier form (a fence in every thread before and after a
relaxed atomic). TRC = 0 is the kernel as it is; its entry (decode_enter) does the PDL
wait and trigger itself.
The merge's trace points go into a copy of split_merge from decode_merge.cuh (IN's folder).
Every anchor must match exactly once: a change of decode.cuh that moves one fails here."""
import os
import sys

src, dst = sys.argv[1], sys.argv[2]
s = open(src).read()


def rep(a, b):
    global s
    n = s.count(a)
    if n != 1:
        sys.exit("patch_trace.py: anchor found %d times (1 needed):\n%s" % (n, a))
    s = s.replace(a, b)


rep("template <typename QT, typename KVT, int D, int GM, int PF, int ROPE, int SINGLE, int WARPS, int HP>\n"
    "FI_DEVICE void decode_heads(",
    "template <typename QT, typename KVT, int D, int GM, int PF, int ROPE, int SINGLE, int WARPS, int HP, int TRC>\n"
    "FI_DEVICE void decode_heads(")
rep("template <typename QT, typename KVT, int D, int GM, int PF, int ROPE, int SINGLE, int WARPS>\n"
    "FI_DEVICE void decode(",
    "template <typename QT, typename KVT, int D, int GM, int PF, int ROPE, int SINGLE, int WARPS, int TRC>\n"
    "FI_DEVICE void decode(")
rep("      decode_heads<QT, KVT, D, GM, PF, ROPE, SINGLE, WARPS, 2>(p);",
    "      decode_heads<QT, KVT, D, GM, PF, ROPE, SINGLE, WARPS, 2, TRC>(p);")
rep("  decode_heads<QT, KVT, D, GM, PF, ROPE, SINGLE, WARPS, 1>(p);",
    "  decode_heads<QT, KVT, D, GM, PF, ROPE, SINGLE, WARPS, 1, TRC>(p);")
rep("struct tok_loc {\n  int32_t page, slot;\n};", r'''struct tok_loc {
  int32_t page, slot;
};
// ---- trace (lab/decode_trace) ----
__device__ unsigned long long *g_tr;  // [block][warp][NSL]
#define NSL 24
FI_DEVICE unsigned long long gclk() { unsigned long long t; asm volatile("mov.u64 %0, %%clock64;" : "=l"(t)); return t; }
FI_DEVICE unsigned long long gtim() { unsigned long long t; asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); return t; }
// Makes the next clock read wait for x (a load's result).
FI_DEVICE void dep(uint32_t &sink, uint32_t x) { asm volatile("xor.b32 %0, %0, %1;" : "+r"(sink) : "r"(x)); }
// p.lse_stride[0] (lse is NULL in the harness): the launch's slot offset, so that
// consecutive launches trace into separate regions.
#define TR_AT(slot) (p.lse_stride[0] + ((int64_t)(blockIdx.y * gridDim.x + blockIdx.x) * WARPS + warp) * NSL + (slot))
#define TRS(slot) do { if ((TRC & 1) && lane == 0) g_tr[TR_AT(slot)] = gclk(); } while (0)
#define TRG(slot) do { if ((TRC & 1) && lane == 0) g_tr[TR_AT(slot)] = gtim(); } while (0)''')
rep("  decode_enter<KVT, DE, SINGLE, WARPS, (WARPS >= 4 || PF != 0)>(p, blockIdx.y * HP);\n",
    "  if ((TRC & 1) && (threadIdx.x & 31) == 0)\n"
    "    g_tr[p.lse_stride[0] + ((int64_t)(blockIdx.y * gridDim.x + blockIdx.x) * WARPS + (threadIdx.x >> 5)) * NSL + 15] = gtim();\n"
    "  decode_enter<KVT, DE, SINGLE, WARPS, (WARPS >= 4 || PF != 0)>(p, blockIdx.y * HP);\n")
rep("  const int item = blockIdx.x, hkv = blockIdx.y * HP, G = p.group, GE = G * HP;\n",
    r'''  const int item = blockIdx.x, hkv = blockIdx.y * HP, G = p.group, GE = G * HP;
  uint32_t sink = 0;
  TRG(0);
  if ((TRC & 1) && lane == 0) { uint32_t sm; asm volatile("mov.u32 %0, %%smid;" : "=r"(sm)); g_tr[TR_AT(12)] = sm; }
  TRS(1);
''')
rep("    kv_len = it2.v[1];\n  }\n",
    "    kv_len = it2.v[1];\n  }\n"
    "  if (TRC & 1) { dep(sink, (uint32_t)hi); dep(sink, (uint32_t)page_base); }\n  TRS(2);\n")
rep("  const tok_loc loc0 = locate(k0);\n",
    "  const tok_loc loc0 = locate(k0);\n  if (TRC & 1) dep(sink, (uint32_t)loc0.page);\n  TRS(3);\n")
rep("  __syncthreads();  // s_q\n", "  __syncthreads();  // s_q\n  TRS(4);\n")
rep("        compute(k, ka, va);\n        k += WARPS;",
    "        compute(k, ka, va);\n"
    "        if ((TRC & 1) && k == k0) { dep(sink, __float_as_uint(o[0][0][0])); TRS(5); }\n"
    "        k += WARPS;")
rep("  // ---- merge the warps: each adds its rescaled O^T in turn (no atomics) ----\n",
    "  if (TRC & 1) dep(sink, __float_as_uint(o[0][0][0]));\n  TRS(6);\n"
    "  // ---- merge the warps: each adds its rescaled O^T in turn (no atomics) ----\n")
rep("  const float LN2 = 0.6931471805599453f;", "  TRS(7);\n  const float LN2 = 0.6931471805599453f;")
rep('''  split_publish();
  __syncthreads();
  int32_t *counter = p.counters + (int64_t)b * p.num_kv_heads + hkv;
  if (tid == 0) s_last = split_arrive(counter) == nchunks - 1;
  __syncthreads();
  if (!s_last) return;
  split_acquired();''', r'''  if (TRC & 4) return;
  split_publish();
  if (TRC & 8) __threadfence();
  __syncthreads();
  TRS(8);
  int32_t *counter = p.counters + (int64_t)b * p.num_kv_heads + hkv;
  if (TRC & 8) {
    if (tid == 0) s_last = atomicAdd(counter, 1) == nchunks - 1;
  } else {
    if (tid == 0) s_last = split_arrive(counter) == nchunks - 1;
  }
  __syncthreads();
  TRS(9);
  TRG(11);
  if ((TRC & 1) && lane == 0) g_tr[TR_AT(13)] = sink;
  if (!s_last) return;
  split_acquired();
  if (TRC & 8) __threadfence();''')
rep("  if (tid == 0) *counter = 0;  // ready for the next run\n",
    "  if (tid == 0) *counter = 0;  // ready for the next run\n  TRS(16);\n")
# The merge (split_merge, kernels/decode_merge.cuh beside IN): a traced copy, split_merge_tr,
# placed before decode_heads, which calls it in place of split_merge.
rep("  split_merge<QT, D, THREADS>(p, b, head0, GE, hq, item - chunk, nchunks);\n}",
    "  split_merge_tr<QT, D, THREADS, WARPS, TRC>(p, b, head0, GE, hq, item - chunk, nchunks, sink);\n}")
main_s = s
s = open(os.path.join(os.path.dirname(src), "decode_merge.cuh")).read()
s = s[s.index("// The merge of a split"):s.rindex("}  // namespace dec")]
rep("template <typename QT, int D, int THREADS>\nFI_DEVICE void split_merge(",
    "template <typename QT, int D, int THREADS, int WARPS, int TRC>\nFI_DEVICE void split_merge_tr(")
rep("                           int nchunks) {\n  const int tid = threadIdx.x;\n",
    "                           int nchunks, uint32_t &sink) {\n"
    "  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;\n")
rep("        float mn = mx;\n",
    "        if ((TRC & 1) && i0 == q) {\n"
    "          dep(sink, __float_as_uint(l[0])); dep(sink, __float_as_uint(l[MB - 1]));\n"
    "          dep(sink, __float_as_uint(x[0][0])); dep(sink, __float_as_uint(x[MB - 1][3]));\n"
    "          TRS(17);\n        }\n"
    "        float mn = mx;\n")
rep("    if (uq < U && (Q == 1 || tid < U)) {\n",
    "    if (TRC & 1) { dep(sink, __float_as_uint(acc[0])); dep(sink, __float_as_uint(sw)); }\n    TRS(18);\n"
    "    if (uq < U && (Q == 1 || tid < U)) {\n")
rep('''            sw > 0.0f ? (mx + log2f(sw)) * LN2 : neg_inf();
    }
  }
}''', '''            sw > 0.0f ? (mx + log2f(sw)) * LN2 : neg_inf();
    }
  }
  if (TRC & 1) __syncthreads();
  TRS(10);
  TRG(14);
}''')
merge_tr = s
s = main_s
rep("// QT: q/out dtype; KVT: cache dtype;", merge_tr + "\n// QT: q/out dtype; KVT: cache dtype;")
open(dst, "w").write(s)
