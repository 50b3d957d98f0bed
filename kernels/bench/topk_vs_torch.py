"""Times arbiter's radix top-512 kernel against torch.topk on 528 rows x 32768 fp32 scores.

Usage: python3 kernels/bench/topk_vs_torch.py [LIB] [JSON_OUT]
Both run on the same stream and inputs; times are CUDA-event medians over many runs,
rotating among several input sets so the L2 cache does not hold the scores.
"""
import ctypes
import json
import os
import statistics
import sys

import torch

ROWS, COLS, K = 528, 32768, 512
SETS, WARMUP, ITERS = 4, 20, 200


def load(path):
    lib = ctypes.CDLL(path)
    lib.arb_topk_f32.argtypes = [ctypes.c_void_p, ctypes.c_int32, ctypes.c_int32, ctypes.c_int32,
                                 ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int32]
    lib.arb_topk_f32.restype = ctypes.c_int32
    lib.arb_last_error.restype = ctypes.c_char_p
    return lib


def topk_arb(lib, x, out, variant):
    rc = lib.arb_topk_f32(x.data_ptr(), x.shape[0], x.shape[1], K, out.data_ptr(),
                          torch.cuda.current_stream().cuda_stream, variant)
    if rc != 0:
        raise RuntimeError(lib.arb_last_error().decode())


def median_ms(fn, inputs):
    for i in range(WARMUP):
        fn(inputs[i % len(inputs)])
    times = []
    for i in range(ITERS):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        x = inputs[i % len(inputs)]
        a.record()
        fn(x)
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    return statistics.median(times), min(times), max(times)


def check(lib, variant):
    """The kernel's selection must be the torch.topk selection, as a set of values."""
    bad = 0
    for trial in range(3):
        g = torch.Generator(device="cuda").manual_seed(1234 + trial)
        x = torch.randn(ROWS, COLS, device="cuda", generator=g)
        if trial == 2:
            x = torch.relu(x).round()  # heavy ties and zeros: the tie path
        out = torch.full((ROWS, K), -7, dtype=torch.int32, device="cuda")
        topk_arb(lib, x, out, variant)
        torch.cuda.synchronize()
        assert (out >= 0).all() and (out < COLS).all(), "unwritten or out-of-range index"
        assert all(len(set(r)) == K for r in out.cpu().tolist()), "duplicate index in a row"
        mine = torch.gather(x, 1, out.long()).sort(dim=1, descending=True).values
        ref = torch.topk(x, K, dim=1).values
        bad += int((mine != ref).any(dim=1).sum())
    return bad


def main():
    path = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("ARBITER_KERNELS_LIB", "kernels/build/libarbiter_kernels.so")
    lib = load(path)
    torch.manual_seed(0)
    inputs = [torch.randn(ROWS, COLS, device="cuda") for _ in range(SETS)]
    out = torch.empty(ROWS, K, dtype=torch.int32, device="cuda")
    res = {"device": torch.cuda.get_device_name(0), "torch": torch.__version__, "rows": ROWS, "cols": COLS, "k": K,
           "iters": ITERS, "input_sets": SETS}
    res["torch_topk_sorted_ms"] = median_ms(lambda x: torch.topk(x, K, dim=1), inputs)
    res["torch_topk_unsorted_ms"] = median_ms(lambda x: torch.topk(x, K, dim=1, sorted=False), inputs)
    for v in (1, 2, 3):
        res[f"arb_variant{v}_wrong_rows"] = check(lib, v)
        res[f"arb_variant{v}_ms"] = median_ms(lambda x: topk_arb(lib, x, out, v), inputs)
    res["torch_topk_sorted_ms_again"] = median_ms(lambda x: torch.topk(x, K, dim=1), inputs)
    best = min((res[f"arb_variant{v}_ms"][0], v) for v in (1, 2, 3))
    res["speedup_vs_torch_sorted"] = res["torch_topk_sorted_ms"][0] / best[0]
    res["speedup_vs_torch_unsorted"] = res["torch_topk_unsorted_ms"][0] / best[0]
    res["best_variant"] = best[1]
    print(json.dumps(res, indent=2))
    if len(sys.argv) > 2:
        with open(sys.argv[2], "w") as f:
            json.dump(res, f, indent=2)
    print(f"\n| kernel | median ms (min, max) over {ITERS} |")
    print("|---|---|")
    for key in ("torch_topk_sorted_ms", "torch_topk_unsorted_ms", "arb_variant1_ms", "arb_variant2_ms", "arb_variant3_ms",
                "torch_topk_sorted_ms_again"):
        m = res[key]
        print(f"| {key} | {m[0]:.4f} ({m[1]:.4f}, {m[2]:.4f}) |")
    print(f"best variant {best[1]}: {res['speedup_vs_torch_sorted']:.2f}x torch.topk (sorted), "
          f"{res['speedup_vs_torch_unsorted']:.2f}x (sorted=False)")


if __name__ == "__main__":
    main()
