# wgmma_model/sync.py: a model of the synchronization of prefill_wgmma (kernels/
# prefill_wgmma.cuh) at the 2x128 shape (a producer warpgroup, two consumer warpgroups
# ping-ponging, two K/V stages, two Q buffers) on a persistent grid whose blocks take
# (item, KV head) units from the plan header's counter: the producer's warps, the eight
# consumer warps, the mbarriers (parity waits, arrival counts), named barriers 1-3, each
# wgmma issue as a warpgroup-collective barrier (conservative), cp.async arrivals as events
# that land at random later steps, and the counter's take / done / reset, across launches.
# The work units are those of rt_prefill_plan.c's partition (ported below) for
# gpu_prefill's "split-KV 160 rows" case (40 + 3 query tokens over 20000 / 9000 KV tokens,
# 8/2 heads, causal; q tile 128, chunk 384: 130 items, 260 units of 1-3 kv tiles, the
# second consumer idle in 75 of them). Random interleavings; prints DEADLOCK with the
# grid and seed if no warp and no pending arrival can move. The kernel's per-warp logic is
# transcribed by hand: re-check it against the kernel after a change there.
#   python3 lab/wgmma_model/sync.py [seeds]   (--mutate: drop one release; must deadlock)
import random, sys
def tile_range(r0,rows,g,lq,lkv,causal,wl):
    off=lkv-lq; tq0=r0//g; tq1=(r0+rows-1)//g
    lo = tq0+off-wl if (wl>=0 and tq0+off-wl>0) else 0
    hi = tq1+off+1 if (causal and tq1+off+1<lkv) else lkv
    return lo, max(hi,lo)
def count(lqs,lkvs,g,qt,chunk):
    items=slots=0
    for lq,lkv in zip(lqs,lkvs):
        rows=lq*g
        for r0 in range(0,rows,qt):
            nr=min(rows-r0,qt); lo,hi=tile_range(r0,nr,g,lq,lkv,1,-1)
            nc=(hi-lo+chunk-1)//chunk if chunk>0 and hi-lo>chunk else 1
            items+=nc
            if nc>1: slots+=nc
    return items,slots
def plan(lqs,lkvs,g,hkv,qt,sms=132,kt=64):
    target=sms*2; maxslots=max(1,sms*2//hkv)
    n0,_=count(lqs,lkvs,g,qt,0); maxlen=max(lkvs)
    lo=(256+kt-1)//kt; hi=(maxlen+kt-1)//kt
    while lo<hi:
        mid=lo+(hi-lo)//2; n,s=count(lqs,lkvs,g,qt,mid*kt)
        if n*hkv<=target and s<=maxslots: hi=mid
        else: lo=mid+1
    chunk=lo*kt
    items=[]
    for b,(lq,lkv) in enumerate(zip(lqs,lkvs)):
        rows=lq*g
        r0=(rows-1)//qt*qt
        while r0>=0:
            nr=min(rows-r0,qt); lo_,hi_=tile_range(r0,nr,g,lq,lkv,1,-1)
            nc=(hi_-lo_+chunk-1)//chunk if hi_-lo_>chunk else 1
            for k in range(nc):
                c0=lo_+k*chunk if nc>1 else lo_; c1=min(lo_+(k+1)*chunk,hi_) if nc>1 else hi_
                items.append((b,r0,nr,c0,c1,k,nc))
            r0-=qt
    return chunk,items
# plan header's unit counter shared by the blocks. Random interleavings; reports deadlock.

KT, NWG, QT = 128, 2, 128
G, H = 4, 2
LQ, LKV = [40, 3], [20000, 9000]
causal, wl = 1, -1

class MBar:
    def __init__(s, count): s.count, s.pend, s.phase = count, count, 0
    def arrive(s, n=1):
        s.pend -= n
        assert s.pend >= 0, "over-arrival"
        if s.pend == 0: s.phase += 1; s.pend = s.count
    def done(s, parity): return (s.phase & 1) != parity
class NBar:
    def __init__(s, count): s.count, s.arr, s.gen = count, 0, 0
    def arrive(s, n):
        s.arr += n
        assert s.arr <= s.count, "named barrier over-arrival"
        if s.arr == s.count: s.arr = 0; s.gen += 1

def unit_geom(item):
    b, r0, rows, kv_lo, kv_hi, k, nc = item
    lq, lkv = LQ[b], LKV[b]; off = lkv - lq; rlast = r0 + rows - 1
    ntiles = (kv_hi - kv_lo + KT - 1) // KT if kv_hi > kv_lo else 0
    wg = []
    for wgi in range(NWG):
        wr0 = r0 + 64 * wgi; wg_rows = wr0 <= rlast
        wrl = min(wr0 + 63, rlast)
        wt0 = (wr0 if wg_rows else rlast) // G; wt1 = wrl // G
        wg_hi = wt1 + off + 1 if causal and wt1 + off + 1 < kv_hi else kv_hi
        wg_lo = wt0 + off - wl if wl >= 0 and wt0 + off - wl > kv_lo else kv_lo
        ta = (wg_lo - kv_lo) // KT if wg_lo > kv_lo else 0
        num = wg_hi - kv_lo + KT - 1
        tb = int(num / KT) if wg_rows else 0   # C truncation
        tb = min(tb, ntiles)
        wg.append((ta, tb))
    return ntiles, wg

class Block:
    def __init__(s, bid, sim):
        s.bid, s.sim = bid, sim
        s.bq = [MBar(129), MBar(129)]
        s.fk = [MBar(128), MBar(128)]; s.fv = [MBar(128), MBar(128)]
        s.ek = [MBar(8), MBar(8)]; s.ev = [MBar(8), MBar(8)]; s.eq = [MBar(8), MBar(8)]
        s.nb = {1: NBar(128), 2: NBar(256), 3: NBar(256)}
        s.coll = [NBar(4), NBar(4)]
        s.slot = [None, None, None]

def producer_warp(blk, w, sim, ev):
    units, ustep = sim.units, sim.grid
    u = blk.bid; qn = 0; tbase = 0
    while True:
        qi = qn & 1
        par = ((qn >> 1) & 1) ^ 1
        yield lambda: blk.eq[qi].done(par)
        if w == 0: blk.slot[qi] = u
        if u >= units:
            blk.bq[qi].arrive(32)
            if w == 0: blk.bq[qi].arrive(1)
            break
        ntiles, _ = sim.geom[u % sim.nit]
        if ntiles > 0: ev.append(blk.bq[qi])
        else: blk.bq[qi].arrive(32)
        if w == 0: blk.bq[qi].arrive(1)
        for t in range(ntiles):
            b = (tbase + t) & 1; ep = (((tbase + t) >> 1) & 1) ^ 1
            yield lambda: blk.ek[b].done(ep)
            ev.append(blk.fk[b])
            yield lambda: blk.ev[b].done(ep)
            ev.append(blk.fv[b])
        tbase += ntiles
        if w == 0:
            blk.slot[2] = ustep + sim.ctr; sim.ctr += 1
        g = blk.nb[1].gen; blk.nb[1].arrive(32)
        yield lambda: blk.nb[1].gen != g
        u = blk.slot[2]
        g = blk.nb[1].gen; blk.nb[1].arrive(32)
        yield lambda: blk.nb[1].gen != g
        qn += 1
    if w == 0:
        sim.done_ctr += 1
        if sim.done_ctr == sim.grid: sim.ctr = 0; sim.done_ctr = 0; sim.resets += 1

def consumer_warp(blk, wgi, w, sim):
    units = sim.units
    qn = 0; tbase = 0
    def turn_wait():
        bid = 2 if wgi == 0 else 3
        nb = blk.nb[bid]; g = nb.gen; nb.arrive(32)
        return lambda: nb.gen != g
    def turn_pass():
        blk.nb[3 if wgi == 0 else 2].arrive(32)
    def coll():
        c = blk.coll[wgi]; g = c.gen; c.arrive(1)
        return lambda: c.gen != g
    if wgi == 1: turn_pass()
    while True:
        qi = qn & 1; par = (qn >> 1) & 1
        yield lambda: blk.bq[qi].done(par)
        u = blk.slot[qi]
        if u >= units: break
        ntiles, wg = sim.geom[u % sim.nit]
        ta, tb = wg[wgi]
        stg = lambda t: (tbase + t) & 1
        pr = lambda t: ((tbase + t) >> 1) & 1
        for t in range(ntiles + 1):
            act = ta < tb
            useK = act and ta <= t < tb; useV = act and ta < t <= tb
            if t < ntiles:
                b, p_ = stg(t), pr(t); yield lambda: blk.fk[b].done(p_)
            if t >= 1:
                b, p_ = stg(t - 1), pr(t - 1); yield lambda: blk.fv[b].done(p_)
            if t < ntiles and not useK and not (MUTATE and t == 0 and wgi == 1): blk.ek[stg(t)].arrive()
            if t >= 1 and not useV: blk.ev[stg(t - 1)].arrive()
            if t < ta or t > tb or ta >= tb:
                yield turn_wait(); turn_pass(); continue
            yield turn_wait()
            yield coll()
            turn_pass()
            yield None
            if t == ta:
                blk.ek[stg(t)].arrive()
            elif t < tb:
                blk.ek[stg(t)].arrive(); yield None; blk.ev[stg(t - 1)].arrive()
            else:
                blk.ev[stg(t - 1)].arrive()
            yield None
        blk.eq[qi].arrive()
        tbase += ntiles
        qn += 1

class Sim:
    def __init__(s, grid, seed, launches=2):
        s.rng = random.Random(seed)
        chunk, items = plan(LQ, LKV, G, H, QT)
        s.items = items; s.nit = len(items); s.units = s.nit * H
        s.geom = [unit_geom(it) for it in items]
        s.grid = grid; s.ctr = 0; s.done_ctr = 0; s.resets = 0
        s.launches = launches
    def run(s):
        for L in range(s.launches):
            assert s.ctr == 0 and s.done_ctr == 0
            tasks = []  # [gen, cond, events(list of pending async arrivals) or None]
            evq = []
            for bid in range(s.grid):
                blk = Block(bid, s)
                for w in range(4):
                    q = []
                    evq.append(q)
                    tasks.append([producer_warp(blk, w, s, q), None])
                for wgi in range(NWG):
                    for w in range(4):
                        tasks.append([consumer_warp(blk, wgi, w, s), None])
            steps = 0
            while True:
                ready = [t for t in tasks if t[1] is None or t[1]()]
                evs = [q for q in evq if q]
                if not ready and not evs:
                    if tasks:
                        return "DEADLOCK launch %d after %d steps, %d tasks stuck" % (L, steps, len(tasks))
                    break
                # fire an async arrival with some probability
                if evs and (not ready or s.rng.random() < 0.3):
                    q = s.rng.choice(evs); q.pop(0).arrive(32); continue
                t = s.rng.choice(ready)
                try:
                    t[1] = next(t[0])
                except StopIteration:
                    tasks.remove(t)
                steps += 1
        return "ok (units %d, resets %d)" % (s.units, s.resets)

MUTATE = '--mutate' in sys.argv
if __name__ == '__main__':
    args = [a for a in sys.argv[1:] if a != '--mutate']
    n = int(args[0]) if args else 10
    bad = 0
    for grid in (3, 1, 2, 5):
        for seed in range(n):
            r = Sim(grid, seed).run()
            if not r.startswith("ok"): print("grid", grid, "seed", seed, r); bad = 1; break
        else: print("grid", grid, n, "seeds:", r)
    sys.exit(bad)
