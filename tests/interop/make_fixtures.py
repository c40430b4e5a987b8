#!/usr/bin/env python3
"""The reference side of tests/interop: tiny Hugging Face models with random
weights, made with transformers (nothing is downloaded), and what
transformers computes with them in float64. CI needs no torch: it compares
against the files this script wrote, which are committed.

  make_fixtures.py make FIXTURES            writes FIXTURES/<model>/hf (the
      folder save_pretrained writes: config.json, model.safetensors) and
      FIXTURES/<model>/reference.json (token ids and float64 logits)
  make_fixtures.py check-export FIXTURES EXPORTS   loads each sharc export
      EXPORTS/<model> with transformers, checks that every tensor is the
      original's bit for bit, then copies it to FIXTURES/<model>/export (the
      bytes CI compares sharc's exports against)
  make_fixtures.py check FIXTURES           makes everything again in a
      temporary folder and checks it is the same bytes as FIXTURES

Needs torch and transformers (pip install torch transformers); the models
are seeded, so a rerun gives the same files.
"""
import filecmp
import json
import os
import shutil
import sys
import tempfile

import torch
import transformers

# name -> (config class, model class, config keyword arguments)
MODELS = {
    # 4 heads (the tests' meshes split them over model=4 and model=2), two
    # layers, tied embeddings: GPT-2's own layout. No dropout, so training
    # steps are deterministic on both sides.
    "gpt2_tiny": ("GPT2Config", "GPT2LMHeadModel",
                  dict(vocab_size=64, n_positions=16, n_embd=32, n_head=4, n_layer=2,
                       resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                       bos_token_id=0, eos_token_id=0)),
    # 8 query heads over 4 key/value heads (grouped-query attention, both
    # divisible by model=4), an untied head: Llama's layout.
    "llama_tiny": ("LlamaConfig", "LlamaForCausalLM",
                   dict(vocab_size=64, max_position_embeddings=16, hidden_size=64, num_attention_heads=8,
                        num_key_value_heads=4, num_hidden_layers=2, intermediate_size=96,
                        bos_token_id=0, eos_token_id=0)),
}
BATCH = 2
SEED = 20261127
# Training parity: AdamW with nanoGPT's two parameter groups, decay on the
# matrices but not on biases, LayerNorm and the embeddings.
STEPS = 5
LR, BETAS, EPS, WEIGHT_DECAY = 1e-3, (0.9, 0.95), 1e-8, 0.1


def tokens(vocab, context):
    g = torch.Generator().manual_seed(SEED + 1)
    return torch.randint(0, vocab, (BATCH, context), generator=g)


def train(model, vocab, context):
    """STEPS AdamW steps in float64 on batches of random tokens; returns the
    batches and the loss before each update."""
    model = model.double().train()
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2 and "wte" not in n and "wpe" not in n]
    rest = [p for n, p in model.named_parameters() if not (p.dim() >= 2 and "wte" not in n and "wpe" not in n)]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": WEIGHT_DECAY}, {"params": rest, "weight_decay": 0.0}],
                            lr=LR, betas=BETAS, eps=EPS)
    g = torch.Generator().manual_seed(SEED + 2)
    batches, losses = [], []
    for _ in range(STEPS):
        ids = torch.randint(0, vocab, (BATCH, context + 1), generator=g)
        x, y = ids[:, :-1], ids[:, 1:]
        logits = model(x).logits
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, vocab), y.reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        batches.append({"tokens": x.tolist(), "targets": y.tolist()})
        losses.append(loss.item())
    return batches, losses


def make(root):
    for name, (config_class, model_class, kwargs) in MODELS.items():
        torch.manual_seed(SEED)
        config = getattr(transformers, config_class)(**kwargs)
        model = getattr(transformers, model_class)(config).eval()
        # Larger than the 0.02 initialisation, so the logits differ by more
        # than rounding and a wrong layout shows.
        with torch.no_grad():
            for p in model.parameters():
                p.copy_(torch.randn(p.shape, dtype=torch.float32) * 0.2)
        folder = os.path.join(root, name)
        shutil.rmtree(os.path.join(folder, "hf"), ignore_errors=True)
        model.save_pretrained(os.path.join(folder, "hf"))
        ids = tokens(config.vocab_size, config.max_position_embeddings if hasattr(config, "max_position_embeddings")
                     else config.n_positions)
        with torch.no_grad():
            logits = model.double()(ids).logits
        reference = {
            "model": model_class,
            "transformers": transformers.__version__,
            "torch": torch.__version__,
            "tokens": ids.tolist(),
            "logits": logits.tolist(),
        }
        if model_class == "GPT2LMHeadModel":
            batches, losses = train(model, config.vocab_size, config.n_positions)
            reference["training"] = {"lr": LR, "betas": list(BETAS), "eps": EPS, "weight_decay": WEIGHT_DECAY,
                                     "no_decay": "biases, LayerNorm, wte, wpe", "batches": batches,
                                     "losses": losses}
        with open(os.path.join(folder, "reference.json"), "w") as f:
            json.dump(reference, f)
            f.write("\n")
        print(f"{name}: {folder}/hf and reference.json (logits {tuple(logits.shape)}, "
              f"largest {logits.abs().max().item():.4f})")


def check_export(root, exports):
    for name, (_, model_class, _) in MODELS.items():
        exported = os.path.join(exports, name)
        original = getattr(transformers, model_class).from_pretrained(os.path.join(root, name, "hf"))
        loaded, info = getattr(transformers, model_class).from_pretrained(exported, output_loading_info=True)
        problems = {k: v for k, v in info.items() if v and k in ("missing_keys", "unexpected_keys", "mismatched_keys")}
        if problems:
            sys.exit(f"{name}: transformers loads the export with {problems}")
        a, b = original.state_dict(), loaded.state_dict()
        if a.keys() != b.keys():
            sys.exit(f"{name}: the export's tensors {sorted(b.keys())} are not the original's {sorted(a.keys())}")
        for key in a:
            if not torch.equal(a[key], b[key]):
                sys.exit(f"{name}: tensor {key} differs (largest difference {(a[key] - b[key]).abs().max()})")
        # The config too: the same logits, to the bit, in float64.
        with open(os.path.join(root, name, "reference.json")) as f:
            ids = torch.tensor(json.load(f)["tokens"])
        with torch.no_grad():
            if not torch.equal(original.double()(ids).logits, loaded.double()(ids).logits):
                sys.exit(f"{name}: the export's config gives other logits than the original's")
        target = os.path.join(root, name, "export")
        shutil.rmtree(target, ignore_errors=True)
        shutil.copytree(exported, target)
        print(f"{name}: transformers loads the export ({len(a)} tensors, each the original's bit for bit, "
              f"and the same float64 logits); "
              f"copied to {target}")


def check(root):
    with tempfile.TemporaryDirectory() as d:
        make(d)
        for name in MODELS:
            for rel in ["hf/config.json", "hf/model.safetensors", "reference.json"]:
                if not filecmp.cmp(os.path.join(d, name, rel), os.path.join(root, name, rel), shallow=False):
                    sys.exit(f"{name}/{rel}: made again, it differs from the committed file")
    print("the fixtures made again are the committed files, byte for byte")


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "make":
        make(sys.argv[2])
    elif len(sys.argv) == 4 and sys.argv[1] == "check-export":
        check_export(sys.argv[2], sys.argv[3])
    elif len(sys.argv) == 3 and sys.argv[1] == "check":
        check(sys.argv[2])
    else:
        sys.exit(__doc__)
