"""Record training steps of a GPT-2 model (Hugging Face transformers, random weights: no
download) with its eager attention and with SDPA: a model trace whose attention is composed of
ops (matmul, scale, causal mask, softmax, dropout, matmul) against one that calls
F.scaled_dot_product_attention, for `traceanalyze attention` (issue 39).

    python scripts/record_gpt2_gpu.py --out sample_traces/h100_gpt2 [--device cpu --small]

Writes gpt2_eager.json.gz, gpt2_sdpa.json.gz and facts.json (the model's shapes, the figures
the traces should show per layer and step). Needs torch and transformers.
"""

from __future__ import annotations

import argparse
import json
import platform
from pathlib import Path
from typing import Any


def build(implementation: str, layers: int, heads: int, width: int, seq: int, device: Any) -> Any:
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(
        n_layer=layers, n_head=heads, n_embd=width, n_positions=seq, vocab_size=50304,
        attn_pdrop=0.1, resid_pdrop=0.1, embd_pdrop=0.1,
    )  # fmt: skip
    config._attn_implementation = implementation
    torch.manual_seed(0)
    model = GPT2LMHeadModel(config).to(device)
    model.train()
    return model


def record(
    model: Any, batch: int, seq: int, steps: int, device: Any, dtype: Any, path: Path
) -> None:
    """``steps`` profiled training steps (forward, backward, AdamW) after two warm-up steps."""
    import torch
    from torch.profiler import ProfilerActivity, profile, schedule

    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    tokens = torch.randint(0, 50304, (batch, seq), device=device)

    def step() -> None:
        with torch.autocast(device.type, dtype=dtype, enabled=device.type == "cuda"):
            loss = model(input_ids=tokens, labels=tokens).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with profile(
        activities=activities,
        schedule=schedule(wait=1, warmup=1, active=steps, repeat=1),
        record_shapes=True,
        on_trace_ready=lambda p: p.export_chrome_trace(str(path)),
    ) as prof:
        for _ in range(steps + 2):
            step()
            prof.step()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--small", action="store_true", help="2 layers, 4 heads, seq 64")
    parser.add_argument("--steps", type=int, default=2)
    args = parser.parse_args()
    import torch
    import transformers

    device = torch.device(args.device)
    layers, heads, width, batch, seq = (2, 4, 128, 2, 64) if args.small else (12, 12, 768, 8, 1024)
    args.out.mkdir(parents=True, exist_ok=True)
    facts: dict[str, Any] = {
        "model": "GPT-2 (transformers GPT2LMHeadModel, random weights), training steps",
        "layers": layers, "batch": batch, "heads": heads, "seq": seq, "head_dim": width // heads,
        "dtype": "bf16 (autocast)" if device.type == "cuda" else "fp32",
        "attention_dropout": 0.1, "profiled_steps": args.steps,
        "attention_calls_per_step": {"forward": layers, "backward": layers},
        "flops_dense_forward_per_call": 4 * batch * heads * seq * seq * (width // heads),
        "torch": torch.__version__, "transformers": transformers.__version__,
        "gpu": torch.cuda.get_device_name() if device.type == "cuda" else platform.processor(),
        "traces": {},
    }  # fmt: skip
    for implementation in ("eager", "sdpa"):
        path = args.out / f"gpt2_{implementation}.json.gz"
        model = build(implementation, layers, heads, width, seq, device)
        record(model, batch, seq, args.steps, device, torch.bfloat16, path)
        facts["traces"][path.name] = {"attn_implementation": implementation}
        del model
        if device.type == "cuda":
            torch.cuda.empty_cache()
    (args.out / "facts.json").write_text(json.dumps(facts, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
