#!/usr/bin/env python3
"""GPU check of the Python path (python/minimakv_torch.py over libminimakv_cuda_capi.so) against torch attention.

For each model shape (Llama-3-8B layer: 32 q / 8 kv heads, d 128; Qwen3.6-27B layer: 24 / 4, d 256):
  1. random bf16 K/V for a batch of sequences of different lengths, appended into FP8 pages at shuffled page ids
     (plus padding rows with slot -1) through the library;
  2. decode with all pages FP8, then convert the old pages to TQ3 per the Minima policy (the pages holding none of
     the first 256 and none of the last 1024 tokens), poison the freed FP8 pages (NaN codes) and decode the mix;
  3. compare each decode (a) with the library's fp64 reference on the same pages (rounding only: relative L2 of the
     whole output <= 1e-3 as tests/install_consumer/cuda_example.cpp, <= 1e-2 per head, |lse_log2 diff| <= 2e-3)
     and (b) with torch scaled_dot_product_attention (enable_gqa, fp32 math) on the dense bf16 K/V: quantization
     error, printed per head (relative L2, cosine); fails only on NaN, a cosine < 0.9 or a relative L2 > 0.5.
Then bad inputs (wrong dtype, device, shape, layout, pool range) must raise clean Python errors, and a uniform
batch is timed: the library's decode step (all FP8, Minima mix) against torch SDPA on dense bf16 K/V (CUDA events,
median of --runs runs, L2 flushed before each). Exit 0 when every check passes, 1 otherwise.

    python3 tests/python/torch_decode_check.py --lib build/gpu/libminimakv_cuda_capi.so
"""
import argparse
import os
import sys

SHAPES = {"llama3-8b": (32, 8, 128), "qwen3.6-27b": (24, 4, 256)}  # (q heads, kv heads, head_dim)
ANCHOR_TOKENS, RECENT_TOKENS = 256, 1024  # the Minima policy (retention_policy.h defaults)
REF_TOTAL_REL_L2, REF_HEAD_REL_L2, REF_LSE_ABS = 1e-3, 1e-2, 2e-3
DENSE_MIN_COSINE, DENSE_MAX_REL_L2 = 0.9, 0.5
FLUSH_BYTES = 256 << 20  # > 4x the H200's 60 MB L2
WARMUP_RUNS = 10


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lib", default=os.environ.get("MINIMAKV_CUDA_CAPI"),
                        help="path of libminimakv_cuda_capi.so (default: $MINIMAKV_CUDA_CAPI)")
    parser.add_argument("--shapes", default=",".join(SHAPES), help=f"comma list of {', '.join(SHAPES)}")
    parser.add_argument("--seq-tokens", default="4099,1290,1,2500,333,1600",
                        help="cached tokens per sequence of the accuracy batch")
    parser.add_argument("--page-tokens", type=int, default=64)
    parser.add_argument("--time-batch", type=int, default=8, help="sequences of the timed batch (0: no timing)")
    parser.add_argument("--time-tokens", type=int, default=32768, help="tokens per sequence of the timed batch")
    parser.add_argument("--runs", type=int, default=50, help="timed runs per path (median)")
    parser.add_argument("--seed", type=int, default=1234)
    return parser.parse_args()


class Checker:
    """Collects pass / fail lines; the exit code is 1 if any check failed."""

    def __init__(self):
        self.failures = []

    def check(self, ok, line):
        print(("  ok   " if ok else "  FAIL ") + line, flush=True)
        if not ok:
            self.failures.append(line)

    def expect_error(self, name, error_type, fn):
        try:
            fn()
        except error_type as error:
            self.check(True, f"{name}: {type(error).__name__}: {error}")
            return
        except Exception as error:  # noqa: BLE001 - any other exception is the failure being tested for
            self.check(False, f"{name}: unexpected {type(error).__name__}: {error}")
            return
        self.check(False, f"{name}: no error raised")


class LayerCache:
    """One layer's K/V for a batch: dense bf16 copies and the library's FP8 (then Minima: FP8 + TQ3) pages."""

    def __init__(self, torch, mk, shape, seq_tokens, page_tokens, generator):
        self.torch, self.mk = torch, mk
        self.num_q_heads, self.kv_heads, self.head_dim = shape
        self.seq_tokens, self.pt = list(seq_tokens), page_tokens
        dev = torch.device("cuda")
        self.k = [torch.randn(n, self.kv_heads, self.head_dim, generator=generator, device=dev).bfloat16()
                  for n in seq_tokens]
        self.v = [torch.randn(n, self.kv_heads, self.head_dim, generator=generator, device=dev).bfloat16()
                  for n in seq_tokens]
        pages_per_seq = [(n + page_tokens - 1) // page_tokens for n in seq_tokens]
        spare_pages = 3  # never listed: a stray page id would read them
        self.fp8 = mk.PagePool(mk.FORMAT_FP8, sum(pages_per_seq) + spare_pages, self.kv_heads, self.head_dim,
                               page_tokens)
        cpu_gen = torch.Generator().manual_seed(int(torch.randint(1 << 30, (1,), generator=generator, device=dev)))
        self.cpu_gen = cpu_gen
        order = torch.randperm(self.fp8.num_pages, generator=cpu_gen).tolist()
        self.seq_pages, start = [], 0  # page ids of sequence s, page i of the sequence at [s][i]
        for count in pages_per_seq:
            self.seq_pages.append(order[start:start + count])
            start += count
        # One append for the whole batch, with two padding rows (slot -1) in the middle, as an engine's batch has.
        slots = []
        for s, n in enumerate(seq_tokens):
            pages = torch.tensor(self.seq_pages[s], dtype=torch.int64) if n else torch.zeros(0, dtype=torch.int64)
            t = torch.arange(n, dtype=torch.int64)
            slots.append(pages[t // page_tokens] * page_tokens + t % page_tokens)
        pad = torch.full((2,), -1, dtype=torch.int64)
        half = len(slots) // 2
        slot_mapping = torch.cat(slots[:half] + [pad] + slots[half:]).to(dev)
        pad_kv = torch.randn(2, self.kv_heads, self.head_dim, generator=generator, device=dev).bfloat16()
        k_all = torch.cat(self.k[:half] + [pad_kv] + self.k[half:])
        v_all = torch.cat(self.v[:half] + [pad_kv] + self.v[half:])
        mk.append(self.fp8, k_all, v_all, slot_mapping)
        self.tq3 = None

    def _shuffled(self, pages, last_partial):
        """pages in a random order, except that a partly filled last page stays last (the view's rule)."""
        pages = list(pages)
        keep_last = pages[-1:] if last_partial else []
        body = pages[:-1] if last_partial else pages
        perm = self.torch.randperm(len(body), generator=self.cpu_gen).tolist()
        return [body[i] for i in perm] + keep_last

    def fp8_views(self):
        """All pages FP8: one view."""
        lists = [self._shuffled(p, n % self.pt != 0) for p, n in zip(self.seq_pages, self.seq_tokens)]
        return [self.mk.PagedView(self.fp8, lists, self.seq_tokens)]

    def convert_minima(self):
        """Converts the stale pages to TQ3 (Minima policy) and poisons their FP8 copies; returns the mix's views."""
        mk, torch, pt = self.mk, self.torch, self.pt
        stale = []  # per sequence: indices of its pages that go to TQ3, from the library's policy function
        for n in self.seq_tokens:
            stale.append(mk.pages_to_convert(0, n, ANCHOR_TOKENS, RECENT_TOKENS, pt))
            # The same by hand: page i holds tokens [i*pt, (i+1)*pt): stale if none is an anchor (< 256) and none is
            # recent (>= n - 1024). A partly filled page always holds the last token, so it is never stale.
            by_hand = [i for i in range((n + pt - 1) // pt) if i * pt >= ANCHOR_TOKENS and (i + 1) * pt <= n - RECENT_TOKENS]
            if stale[-1] != by_hand:
                raise AssertionError(f"pages_to_convert(0, {n}) = {stale[-1]}, by hand {by_hand}")
        num_stale = sum(len(x) for x in stale)
        self.tq3 = mk.PagePool(mk.FORMAT_TQ3, num_stale + 3, self.kv_heads, self.head_dim, pt)
        tq3_order = torch.randperm(self.tq3.num_pages, generator=self.cpu_gen).tolist()
        pairs, fp8_lists, fp8_tokens, tq3_lists, tq3_tokens, next_tq3 = [], [], [], [], [], 0
        for s, n in enumerate(self.seq_tokens):
            tq3_ids = tq3_order[next_tq3:next_tq3 + len(stale[s])]
            next_tq3 += len(stale[s])
            pairs += [(self.seq_pages[s][i], dst, pt) for i, dst in zip(stale[s], tq3_ids)]
            kept = [p for i, p in enumerate(self.seq_pages[s]) if i not in set(stale[s])]
            fp8_lists.append(self._shuffled(kept, n % pt != 0))
            fp8_tokens.append(n - len(stale[s]) * pt)
            tq3_lists.append(self._shuffled(tq3_ids, False))
            tq3_tokens.append(len(stale[s]) * pt)
        mk.convert_to_tq3(self.fp8, self.tq3, pairs)
        if pairs:  # the freed FP8 pages: 0x7F is E4M3 NaN, and a huge fp32 scale; a decode must not read them
            self.fp8.data[torch.tensor([p[0] for p in pairs], device=self.fp8.device)] = 0x7F
        views = [mk.PagedView(self.fp8, fp8_lists, fp8_tokens)]
        if num_stale:
            views.append(mk.PagedView(self.tq3, tq3_lists, tq3_tokens))
        return views, num_stale

    def dense_attention(self, q):
        """torch SDPA per sequence on the dense bf16 K/V (fp32 math): [num_seqs][num_q_heads][head_dim]."""
        import torch.nn.functional as F
        torch = self.torch
        out = torch.zeros_like(q)
        for s, n in enumerate(self.seq_tokens):
            if n == 0:
                continue
            k = self.k[s].float().permute(1, 0, 2).unsqueeze(0)  # [1][kv_heads][n][d]
            v = self.v[s].float().permute(1, 0, 2).unsqueeze(0)
            out[s] = F.scaled_dot_product_attention(q[s].unsqueeze(0).unsqueeze(2), k, v,
                                                    enable_gqa=True)[0, :, 0, :]
        return out


def compare(torch, out, ref):
    """Relative L2 of the whole output, and per (sequence, head) relative L2 and cosine, in fp64."""
    out, ref = out.double(), ref.double()
    total = float((out - ref).norm() / ref.norm().clamp_min(1e-300))
    head_rel = (out - ref).norm(dim=-1) / ref.norm(dim=-1).clamp_min(1e-300)
    cosine = (out * ref).sum(-1) / (out.norm(dim=-1) * ref.norm(dim=-1)).clamp_min(1e-300)
    return total, head_rel, cosine


def same_result(torch, a, b):
    """Bit-identical, or equal up to float rounding in a different summation order (relative L2 <= 1e-5)."""
    return torch.equal(a, b) or float((a - b).double().norm() / b.double().norm().clamp_min(1e-300)) <= 1e-5


def describe(torch, a, b):
    if torch.equal(a, b):
        return "bit-identical"
    return f"relative L2 {float((a - b).double().norm() / b.double().norm().clamp_min(1e-300)):.2e}"


def check_decode(torch, mk, checker, label, cache, views, q, dense):
    plan = mk.DecodePlan(views, cache.num_q_heads)
    out, lse = plan.run(q)
    torch.cuda.synchronize()
    finite = bool(torch.isfinite(out).all()) and not bool(torch.isnan(lse).any())
    checker.check(finite, f"{label}: output finite ({plan.total_items} work items, {len(views)} view(s))")
    # (a) Same pages, fp64 reference: only rounding separates them.
    ref_out, ref_lse = mk.reference_decode(q, views)
    total, head_rel, _ = compare(torch, out.cpu(), ref_out)
    lse_diff = float((lse.cpu() - ref_lse).abs().max())
    checker.check(total <= REF_TOTAL_REL_L2 and float(head_rel.max()) <= REF_HEAD_REL_L2 and lse_diff <= REF_LSE_ABS,
                  f"{label} vs library fp64 reference (same pages): rel L2 {total:.2e} (<= {REF_TOTAL_REL_L2:g}), "
                  f"worst head {float(head_rel.max()):.2e} (<= {REF_HEAD_REL_L2:g}), |lse_log2 diff| {lse_diff:.2e} "
                  f"(<= {REF_LSE_ABS:g})")
    # (b) Dense bf16 K/V through torch: the quantization error of the format mix.
    total, head_rel, cosine = compare(torch, out, dense)
    checker.check(finite and float(cosine.min()) >= DENSE_MIN_COSINE and float(head_rel.max()) <= DENSE_MAX_REL_L2,
                  f"{label} vs torch SDPA on dense bf16: rel L2 {total:.3e}, per head median "
                  f"{float(head_rel.median()):.3e} max {float(head_rel.max()):.3e}, cosine min "
                  f"{float(cosine.min()):.5f} median {float(cosine.median()):.5f}")
    # A second run of the same plan (no new upload) gives the same result.
    out2, _ = plan.run(q)
    checker.check(same_result(torch, out, out2), f"{label}: a second run of the plan: {describe(torch, out, out2)}")
    plan.close()


def check_query_tokens(torch, mk, checker, label, cache, views, generator, tokens=3):
    """Several query tokens per sequence (speculative decoding's verification): one plan over [seq][token][head]
    queries against the library's fp64 reference, and each token against a one-token plan's run."""
    q = torch.randn(len(cache.seq_tokens), tokens, cache.num_q_heads, cache.head_dim, generator=generator,
                    device="cuda")
    plan = mk.DecodePlan(views, cache.num_q_heads, query_tokens=tokens)
    out, lse = plan.run(q)
    torch.cuda.synchronize()
    ref_out, ref_lse = mk.reference_decode(q, views)
    total, head_rel, _ = compare(torch, out.cpu(), ref_out)
    lse_diff = float((lse.cpu() - ref_lse).abs().max())
    checker.check(total <= REF_TOTAL_REL_L2 and float(head_rel.max()) <= REF_HEAD_REL_L2 and lse_diff <= REF_LSE_ABS,
                  f"{label}, {tokens} query tokens per sequence vs library fp64 reference: rel L2 {total:.2e}, worst "
                  f"head {float(head_rel.max()):.2e}, |lse_log2 diff| {lse_diff:.2e}")
    single = mk.DecodePlan(views, cache.num_q_heads)
    worst = 0.0
    for t in range(tokens):
        one, _ = single.run(q[:, t].contiguous())
        worst = max(worst, float((out[:, t] - one).double().norm() / one.double().norm().clamp_min(1e-300)))
    # Not bit-identical: the plan splits the larger row groups differently (other items, other merge order).
    checker.check(worst <= REF_TOTAL_REL_L2, f"{label}: each of the {tokens} tokens as a one-token step: worst rel L2 "
                  f"{worst:.2e} (<= {REF_TOTAL_REL_L2:g})")
    # The same plan on another stream (it waits for the plan's last use there) and back on this one.
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        side_out, side_lse = plan.run(q)
    back_out, _ = plan.run(q)
    torch.cuda.synchronize()
    checker.check(torch.equal(side_out, out) and torch.equal(side_lse, lse) and torch.equal(back_out, out),
                  f"{label}: runs on a side stream and back: {describe(torch, side_out, out)}, "
                  f"{describe(torch, back_out, out)}")
    checker.expect_error(f"{label}: a one-token query given to a {tokens}-token plan", ValueError,
                         lambda: plan.run(q[:, 0].contiguous()))
    plan.close()
    single.close()


def accuracy(torch, mk, checker, name, shape, seq_tokens, page_tokens, generator):
    print(f"\n== {name}: {shape[0]} q / {shape[1]} kv heads, d {shape[2]}, tokens {seq_tokens}, "
          f"{page_tokens}-token pages", flush=True)
    cache = LayerCache(torch, mk, shape, seq_tokens, page_tokens, generator)
    q = torch.randn(len(seq_tokens), shape[0], shape[2], generator=generator, device="cuda")
    dense = cache.dense_attention(q)
    check_decode(torch, mk, checker, f"{name} all-FP8", cache, cache.fp8_views(), q, dense)
    views, num_stale = cache.convert_minima()
    print(f"  {num_stale} of {sum(len(p) for p in cache.seq_pages)} pages converted to TQ3 "
          f"(anchors {ANCHOR_TOKENS} + recent {RECENT_TOKENS} tokens stay FP8)")
    check_decode(torch, mk, checker, f"{name} Minima mix", cache, views, q, dense)
    check_query_tokens(torch, mk, checker, f"{name} Minima mix", cache, views, generator)
    return cache, views, q


def bad_inputs(torch, mk, checker, cache, views, q):
    """Wrong dtypes, devices, shapes and ranges raise Python errors; the library keeps working afterwards."""
    print("\n== bad inputs: each must raise a clean Python error", flush=True)
    fp8, n = cache.fp8, 4
    k = torch.randn(n, cache.kv_heads, cache.head_dim, device="cuda", dtype=torch.bfloat16)
    slots = torch.arange(n, device="cuda", dtype=torch.int64)
    checker.expect_error("append: fp16 keys", ValueError, lambda: mk.append(fp8, k.half(), k.half(), slots))
    checker.expect_error("append: keys on the CPU", ValueError, lambda: mk.append(fp8, k.cpu(), k, slots))
    checker.expect_error("append: values of another shape", ValueError, lambda: mk.append(fp8, k, k[:, :-1], slots))
    checker.expect_error("append: int32 slot mapping", ValueError, lambda: mk.append(fp8, k, k, slots.int()))
    checker.expect_error("append: non-contiguous keys", ValueError,
                         lambda: mk.append(fp8, k.transpose(0, 1).contiguous().transpose(0, 1), k, slots))
    checker.expect_error("append: kv_heads differ from the pool's", ValueError,
                         lambda: mk.append(fp8, k[:, :1].contiguous(), k[:, :1].contiguous(), slots))
    # Values the Python side cannot see: the library's row check (slot past the pool) names the row.
    far = torch.full((n,), fp8.num_pages * fp8.page_tokens, device="cuda", dtype=torch.int64)
    checker.expect_error("append: slot past the pool (library row check)", mk.MinimakvError,
                         lambda: mk.append(fp8, k, k, far))
    checker.expect_error("append into a TQ3 pool", ValueError, lambda: mk.append(cache.tq3, k, k, slots))
    checker.expect_error("page_bytes: head_dim 96 (library check)", ValueError,
                         lambda: mk.page_bytes(mk.FORMAT_FP8, 8, 96, 64))
    checker.expect_error("pool: page_tokens 0 (library check)", ValueError,
                         lambda: mk.PagePool(mk.FORMAT_FP8, 4, 8, 128, 0))
    checker.expect_error("pages_to_convert: fewer tokens after than before (library check)", ValueError,
                         lambda: mk.pages_to_convert(100, 50))
    checker.expect_error("pages_to_convert: page_tokens 0 (library check)", ValueError,
                         lambda: mk.pages_to_convert(0, 5000, page_tokens=0))
    # An append of 64 tokens to a 4096-token sequence moves page 48 (tokens 3072-3135) out of the 1024-token
    # window; a pin inside it keeps it FP8.
    checker.check(mk.pages_to_convert(4096, 4160) == [48], "pages_to_convert: one page per 64 appended tokens")
    checker.check(mk.pages_to_convert(4096, 4160, pins=[(3100, 3101)]) == [], "pages_to_convert: a pinned page stays")
    checker.expect_error("convert: destination page outside the pool", ValueError,
                         lambda: mk.convert_to_tq3(fp8, cache.tq3, [(0, cache.tq3.num_pages, 64)]))
    # Pairs already on the device: checked by the kernel, which converts nothing of a bad pair (session 16).
    scratch = mk.PagePool(mk.FORMAT_TQ3, 2, cache.kv_heads, cache.head_dim, cache.pt)
    before = scratch.data.clone()
    device_pairs = torch.tensor([[fp8.num_pages, 0, cache.pt]], dtype=torch.int32, device="cuda")
    checker.expect_error("convert: CUDA pairs with a source page outside the pool (device check)", mk.MinimakvError,
                         lambda: mk.convert_to_tq3(fp8, scratch, device_pairs))
    checker.check(torch.equal(scratch.data, before), "convert: the rejected pair wrote nothing")
    checker.expect_error("plan: query_tokens 0", ValueError, lambda: mk.DecodePlan(views, cache.num_q_heads,
                                                                                   query_tokens=0))
    checker.expect_error("plan: 4 x 17 query rows per KV head (library check: 64 at most)", ValueError,
                         lambda: mk.DecodePlan(views, cache.kv_heads * 4, query_tokens=17))
    checker.expect_error("view: page id outside the pool", ValueError,
                         lambda: mk.PagedView(fp8, [[fp8.num_pages]], [1]))
    checker.expect_error("view: tokens that do not fill the pages", ValueError,
                         lambda: mk.PagedView(fp8, [[0, 1]], [10]))
    checker.expect_error("plan: num_q_heads not a multiple of kv_heads (library check)", ValueError,
                         lambda: mk.DecodePlan(views, cache.kv_heads * 4 - 1))
    checker.expect_error("plan: page_tokens 8 (library check: CUDA key tile 16)", ValueError,
                         lambda: mk.DecodePlan([mk.PagedView(mk.PagePool(mk.FORMAT_FP8, 2, cache.kv_heads,
                                                                         cache.head_dim, 8), [[0]], [3])],
                                               cache.num_q_heads))
    plan = mk.DecodePlan(views, cache.num_q_heads)
    checker.expect_error("run: bf16 query", ValueError, lambda: plan.run(q.bfloat16()))
    checker.expect_error("run: query on the CPU", ValueError, lambda: plan.run(q.cpu()))
    checker.expect_error("run: query of another shape", ValueError, lambda: plan.run(q[:-1].contiguous()))
    checker.expect_error("run: views of other lengths", ValueError, lambda: plan.run(q, cache.fp8_views()))
    # The C functions themselves, called wrongly (null plan, null pointers): a status, not a crash.
    lib = mk.load_library()
    code = lib.minimakv_cuda_decode_run(None, 0, None, None, None, None, None, None, None, None, None)
    checker.check(code != 0, f"C call with a null plan: status {code}: {lib.minimakv_last_error().decode()}")
    code = lib.minimakv_cuda_append(1, 8, 128, 64, None, None, 0, 5, None, None, 10, None, None)
    checker.check(code != 0, f"C append with null pointers: status {code}: {lib.minimakv_last_error().decode()}")
    # After all that, a run still works and matches a fresh plan's output.
    out, _ = plan.run(q)
    fresh, _ = mk.DecodePlan(views, cache.num_q_heads).run(q)
    torch.cuda.synchronize()
    checker.check(same_result(torch, out, fresh),
                  f"after the errors: CUDA context healthy, decode as a fresh plan's ({describe(torch, out, fresh)})")
    plan.close()


def median_us(torch, fn, runs, flush):
    """Median of fn's time over runs (CUDA events), the L2 flushed before each run outside the timed region."""
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for r in range(WARMUP_RUNS + runs):
        flush()
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        if r >= WARMUP_RUNS:
            times.append(start.elapsed_time(stop) * 1000.0)
    times.sort()
    return times[len(times) // 2]


def graph_replay(torch, fn):
    """fn captured in a CUDA graph (after a warm-up on a side stream); returns the replay function. Times the GPU
    work alone: an eager call also pays Python's launch overhead, which can exceed a ~50 us decode step."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return graph.replay


def time_both(torch, fn, runs, flush):
    """(eager us, graph-replay us or None if the capture failed, with the reason printed)."""
    eager = median_us(torch, fn, runs, flush)
    try:
        graphed = median_us(torch, graph_replay(torch, fn), runs, flush)
    except Exception as error:  # noqa: BLE001 - reported, the eager time still stands
        print(f"  note: CUDA graph capture failed ({type(error).__name__}: {error}); eager time only")
        graphed = None
    return eager, graphed


def timing(torch, mk, checker, name, shape, batch, tokens, page_tokens, runs, generator):
    import torch.nn.functional as F
    print(f"\n== timing {name}: batch {batch} x {tokens} tokens", flush=True)
    cache = LayerCache(torch, mk, shape, [tokens] * batch, page_tokens, generator)
    q = torch.randn(batch, shape[0], shape[2], generator=generator, device="cuda")
    # Dense bf16 [batch][kv_heads][tokens][d] for SDPA (no mask needed: equal lengths).
    k_dense = torch.stack(cache.k).permute(0, 2, 1, 3).contiguous()
    v_dense = torch.stack(cache.v).permute(0, 2, 1, 3).contiguous()
    q_dense = q.bfloat16().unsqueeze(2)
    cache.k = cache.v = None  # the dense copies above are all torch needs
    flush_buffer = torch.ones(FLUSH_BYTES // 4, device="cuda", dtype=torch.int32)
    flush = lambda: flush_buffer.sum()  # noqa: E731
    torch_fn = lambda: F.scaled_dot_product_attention(q_dense, k_dense, v_dense, enable_gqa=True)  # noqa: E731
    expected = torch_fn()[:, :, 0, :].float()
    torch_us = time_both(torch, torch_fn, runs, flush)
    results = {}
    for label, views in (("all-FP8", cache.fp8_views()), ("Minima mix", None)):
        if views is None:
            views, _ = cache.convert_minima()
        plan = mk.DecodePlan(views, shape[0])
        out, _ = plan.run(q)
        _, _, cosine = compare(torch, out, expected)
        checker.check(float(cosine.min()) >= DENSE_MIN_COSINE,
                      f"timed batch {label} vs torch bf16: cosine min {float(cosine.min()):.5f}")
        results[label] = time_both(torch, lambda: plan.run(q), runs, flush)
        plan.close()
    kv_bytes = 2 * batch * tokens * shape[1] * shape[2] * 2

    def fmt(us):
        return "      n/a" if us is None else f"{us:9.1f}"

    def ratio(a, b):
        return "  n/a" if a is None or b is None else f"{a / b:5.2f}"

    print(f"  {'path':24s} {'eager us':>9s} {'graph us':>9s}  torch / path (eager, graph)")
    print(f"  {'torch SDPA dense bf16':24s} {fmt(torch_us[0])} {fmt(torch_us[1])}  "
          f"({kv_bytes / torch_us[0] * 1e-3:.0f} GB/s of bf16 K/V eager)")
    for label, (eager, graphed) in results.items():
        print(f"  {'minimakv ' + label:24s} {fmt(eager)} {fmt(graphed)}  {ratio(torch_us[0], eager)}x "
              f"{ratio(torch_us[1], graphed)}x")
    print(f"  (median of {runs} runs each, CUDA events, L2 flushed before every run; eager = one Python call per "
          f"step, graph = CUDA graph replay: GPU time alone)")


def main():
    args = parse_args()
    try:
        import torch
    except ImportError:
        print("torch_decode_check: torch is not installed (needed to run the check; --help works without it)",
              file=sys.stderr)
        return 1
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
    import minimakv_torch as mk
    if not args.lib:
        print("torch_decode_check: give --lib PATH/libminimakv_cuda_capi.so or set MINIMAKV_CUDA_CAPI", file=sys.stderr)
        return 1
    if not torch.cuda.is_available():
        print("torch_decode_check: no CUDA device visible to torch", file=sys.stderr)
        return 1
    mk.load_library(args.lib)
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}, library {args.lib}")
    shapes = [s for s in args.shapes.split(",") if s]
    unknown = [s for s in shapes if s not in SHAPES]
    if unknown:
        print(f"torch_decode_check: unknown shape(s) {unknown}; known: {list(SHAPES)}", file=sys.stderr)
        return 1
    seq_tokens = [int(x) for x in args.seq_tokens.split(",")]
    generator = torch.Generator(device="cuda").manual_seed(args.seed)
    checker = Checker()
    first = None
    for name in shapes:
        result = accuracy(torch, mk, checker, name, SHAPES[name], seq_tokens, args.page_tokens, generator)
        first = first or result
    bad_inputs(torch, mk, checker, *first)
    if args.time_batch > 0:
        for name in shapes:
            timing(torch, mk, checker, name, SHAPES[name], args.time_batch, args.time_tokens, args.page_tokens,
                   args.runs, generator)
    if checker.failures:
        print(f"\ntorch_decode_check: {len(checker.failures)} check(s) FAILED:")
        for line in checker.failures:
            print("  " + line)
        return 1
    print("\ntorch_decode_check: all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
