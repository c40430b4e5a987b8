#!/usr/bin/env python3
"""The reference side of tests/interop: tiny Hugging Face models with random
weights, made with transformers (nothing is downloaded), and what
transformers computes with them in float64. CI needs no torch: it compares
against the files this script wrote, which are committed.

  make_fixtures.py make FIXTURES            writes FIXTURES/<model>/hf (the
      folder save_pretrained writes: config.json, model.safetensors) and
      FIXTURES/<model>/reference.json (token ids and float64 logits); a
      byte-level BPE tokenizer trained with tokenizers on the GPL-3 in
      FIXTURES/tokenizer (vocab.json, merges.txt) with the ids transformers
      and GPT-2's own algorithm give for test strings (reference.json); and
      samples/finetune/tiny-gpt2, a small GPT-2 with random weights and that
      tokenizer, which the fine-tuning sample imports by default
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

import regex
import tokenizers
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


# The tokenizer: byte-level BPE trained on a text every Debian machine has.
TOKENIZER_TEXT = "/usr/share/common-licenses/GPL-3"
TOKENIZER_VOCAB = 512
TOKENIZER_CASES = [
    "Hello world",
    "The GNU General Public License is a free, copyleft license.",
    "don't I'll we've they're she's it'd I'm 'quoted' O'Neil ''s",
    "  two spaces,   three, tabs\t\tand\nnew\n\nlines \n end  ",
    "numbers 12345 3.14159 1,000,000 x2 ½ Ⅷ ٣٤",
    "café naïve résumé Über Straße",
    "Καλημέρα мир 中文字 日本語",
    "emoji 😀🚀 and é (combining)  nbsp 　ideographic",
    "punctuation!?... (brackets) [x] {y} <z> @#$%^&*_+=~`|\\/",
    "a<|endoftext|>b <|endoftext|> c<|endoftext|>",
    "",
    " ",
    "\n",
    "trailing space ",
]
GPT2_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""


def bytes_to_unicode():
    printable = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
    table, n = {}, 0
    for b in range(256):
        if b in printable:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + n)
            n += 1
    return table


def gpt2_encode(text, vocab, ranks):
    """GPT-2's algorithm as its paper's encoder describes it (the pattern,
    byte-to-unicode, merges by rank), independent of tokenizers: a second
    opinion on the ids transformers gives."""
    table, eot = bytes_to_unicode(), "<|endoftext|>"
    ids = []
    for i, piece in enumerate(text.split(eot)):
        if i:
            ids.append(vocab[eot])
        for word in regex.findall(GPT2_PATTERN, piece):
            parts = [table[b] for b in word.encode("utf-8")]
            while len(parts) > 1:
                pairs = [(ranks.get((a, b), 1 << 30), k) for k, (a, b) in enumerate(zip(parts, parts[1:]))]
                best, k = min(pairs)
                if best == 1 << 30:
                    break
                left, right, merged, j = parts[k], parts[k + 1], [], 0
                while j < len(parts):
                    if j + 1 < len(parts) and parts[j] == left and parts[j + 1] == right:
                        merged.append(left + right)
                        j += 2
                    else:
                        merged.append(parts[j])
                        j += 1
                parts = merged
            ids += [vocab[p] for p in parts]
    return ids


def make_tokenizer(root):
    folder = os.path.join(root, "tokenizer")
    shutil.rmtree(folder, ignore_errors=True)
    os.makedirs(folder)
    bpe = tokenizers.ByteLevelBPETokenizer()
    bpe.train([TOKENIZER_TEXT], vocab_size=TOKENIZER_VOCAB, min_frequency=2, special_tokens=["<|endoftext|>"],
              show_progress=False)
    bpe.save_model(folder)
    vocab_file, merges_file = os.path.join(folder, "vocab.json"), os.path.join(folder, "merges.txt")
    fast = transformers.GPT2TokenizerFast.from_pretrained(folder)
    with open(vocab_file) as f:
        vocab = json.load(f)
    with open(merges_file) as f:
        ranks = {tuple(line.split()): k for k, line in enumerate(l for l in f.read().splitlines()[1:] if l)}
    with open(TOKENIZER_TEXT, encoding="utf-8") as f:
        text = f.read()
    cases = []
    for t in TOKENIZER_CASES + [text]:
        ids = fast.encode(t)
        if ids != gpt2_encode(t, vocab, ranks):
            sys.exit(f"transformers and GPT-2's algorithm disagree on {t[:40]!r}")
        if fast.decode(ids) != t:
            sys.exit(f"transformers does not decode {t[:40]!r} back")
        cases.append({"text": t, "ids": ids})
    reference = {"tokenizers": tokenizers.__version__, "transformers": transformers.__version__,
                 "trained_on": TOKENIZER_TEXT, "cases": cases}
    with open(os.path.join(folder, "reference.json"), "w") as f:
        json.dump(reference, f, ensure_ascii=True)
        f.write("\n")
    print(f"tokenizer: {folder} ({len(vocab)} ids, {len(ranks)} merges; {len(cases)} cases, the GPL-3 as "
          f"{len(cases[-1]['ids'])} ids)")
    return folder


def make_sample_model(tokenizer, folder):
    """The fine-tuning sample's default model: GPT-2's layout at a size a CPU
    trains in seconds, random weights (transformers' own initialisation),
    the tokenizer above."""
    with open(os.path.join(tokenizer, "vocab.json")) as f:
        eot = json.load(f)["<|endoftext|>"]
    torch.manual_seed(SEED)
    config = transformers.GPT2Config(vocab_size=TOKENIZER_VOCAB, n_positions=64, n_embd=64, n_head=4, n_layer=2,
                                     bos_token_id=eot, eos_token_id=eot)
    model = transformers.GPT2LMHeadModel(config)
    shutil.rmtree(folder, ignore_errors=True)
    model.save_pretrained(folder)
    for name in ["vocab.json", "merges.txt"]:
        shutil.copy(os.path.join(tokenizer, name), folder)
    print(f"sample model: {folder} ({sum(p.numel() for p in model.parameters())} parameters)")


SAMPLE_MODEL = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "samples", "finetune",
                            "tiny-gpt2")


def make(root, sample_model=SAMPLE_MODEL):
    make_sample_model(make_tokenizer(root), sample_model)
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
        for key in ("bos_token_id", "eos_token_id", "pad_token_id"):
            if getattr(original.config, key, None) != getattr(loaded.config, key, None):
                sys.exit(f"{name}: the export's {key} is {getattr(loaded.config, key, None)}, "
                         f"the original's {getattr(original.config, key, None)}")
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
        make(d, os.path.join(d, "tiny-gpt2"))
        files = [(os.path.join(d, name, rel), os.path.join(root, name, rel))
                 for name in MODELS for rel in ["hf/config.json", "hf/model.safetensors", "reference.json"]]
        files += [(os.path.join(d, "tokenizer", rel), os.path.join(root, "tokenizer", rel))
                  for rel in ["vocab.json", "merges.txt", "reference.json"]]
        files += [(os.path.join(d, "tiny-gpt2", rel), os.path.join(SAMPLE_MODEL, rel))
                  for rel in ["config.json", "generation_config.json", "model.safetensors", "vocab.json",
                              "merges.txt"]]
        for made, committed in files:
            if not filecmp.cmp(made, committed, shallow=False):
                sys.exit(f"{committed}: made again, it differs from the committed file")
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
