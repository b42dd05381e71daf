#!/usr/bin/env python3
"""PyTorch + transformers on the same weights as shardcheck's CUDA engine: the other side of the
comparison in docs/benchmarks.md (CUDA backend).

Loads a directory written by `shardcheck model gen --preset llama3-8b --seed 7 --dtype bf16
--out DIR` (config.json + model.safetensors, Hugging Face's layout) as LlamaForCausalLM in bf16
on the GPU, and times greedy generate at each batch size the way bench_cuda's "end to end" rows
time the engine: 16-token prompts built by the same formula (token i of request r is
3 + (31 i + 7 r) mod (vocab - 3)), exactly 64 new tokens, one timed run after one warm-up.
Prints a Markdown table. A benchmark: nothing here asserts a time.

usage: bench/torch_compare.py DIR [--batches 1,64] [--new 64] [--prompt 16]
"""
import argparse
import sys
import time


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model_dir")
    ap.add_argument("--batches", default="1,64")
    ap.add_argument("--new", type=int, default=64)
    ap.add_argument("--prompt", type=int, default=16)
    a = ap.parse_args()
    try:
        import torch
        from transformers import LlamaForCausalLM
    except ImportError as e:
        print(f"torch_compare: needs torch and transformers: {e}", file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print("torch_compare: no CUDA device", file=sys.stderr)
        return 2
    model = LlamaForCausalLM.from_pretrained(a.model_dir, torch_dtype=torch.bfloat16)
    model = model.to("cuda").eval()
    vocab = model.config.vocab_size
    print(f"transformers {__import__('transformers').__version__}, torch {torch.__version__}, "
          f"{torch.cuda.get_device_name(0)}: {a.model_dir}, bf16, greedy, "
          f"{a.prompt}-token prompts, {a.new} new tokens\n")
    print("| batch | seconds | tokens/s |\n|---|---|---|")
    for b in (int(x) for x in a.batches.split(",")):
        ids = torch.tensor([[3 + (i * 31 + r * 7) % (vocab - 3) for i in range(a.prompt)]
                            for r in range(b)], device="cuda")
        mask = torch.ones_like(ids)
        kw = dict(attention_mask=mask, do_sample=False, max_new_tokens=a.new,
                  min_new_tokens=a.new, pad_token_id=model.config.eos_token_id)
        with torch.inference_mode():
            model.generate(ids, **{**kw, "max_new_tokens": 4, "min_new_tokens": 4})  # warm-up
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            out = model.generate(ids, **kw)
            torch.cuda.synchronize()
            s = time.perf_counter() - t0
        new = (out.shape[1] - a.prompt) * b
        print(f"| {b} | {s:.3f} | {new / s:.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
