"""Convert a llama.cpp GGUF of a Llama-architecture model into a Hugging Face folder.

Written for, and checked against, SmolLM2-135M-Instruct (`convert_smollm2.py`): byte-level BPE
("gpt2") vocabulary, tied embeddings, any quantization `gguf` can dequantize. Runs in the engine's
interpreter with the `gguf` package importable.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import torch
from checkpoint_dir import write_json
from gguf import GGUFReader
from gguf.quants import dequantize
from safetensors.torch import save_file
from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors

__all__ = ["write_checkpoint"]

DTYPE = torch.bfloat16
CONTROL_TOKEN = 3  # llama.cpp's token type for special tokens
# GGUF tensor name (after "blk.N.") -> Hugging Face Llama name (after "model.layers.N.")
LAYER_TENSORS = {
    "attn_norm": "input_layernorm",
    "ffn_norm": "post_attention_layernorm",
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}
TOP_TENSORS = {"token_embd": "model.embed_tokens", "output_norm": "model.norm", "output": "lm_head"}


def write_checkpoint(gguf_path: Path, folder: Path) -> None:
    """Write config, generation config, tokenizer and bfloat16 safetensors into an empty folder."""
    reader = GGUFReader(gguf_path)
    meta = Metadata(reader)
    if meta.get("general.architecture") != "llama" or meta.get("tokenizer.ggml.model") != "gpt2":
        raise ValueError(f"{gguf_path.name}: only llama models with a gpt2 (byte-level BPE) vocabulary convert")
    weights = hf_weights(reader, meta)
    write_json(folder / "config.json", model_config(meta, tied="lm_head.weight" not in weights))
    write_json(folder / "generation_config.json", generation_config(meta))
    tokenizer = build_tokenizer(meta)
    (folder / "tokenizer.json").write_text(_stable_json(tokenizer.to_str()), encoding="utf-8")
    write_json(folder / "tokenizer_config.json", tokenizer_config(meta))
    save_file(weights, str(folder / "model.safetensors"), metadata={"format": "pt"})


class Metadata:
    """The GGUF's key-value fields as Python values."""

    def __init__(self, reader: GGUFReader) -> None:
        self._fields = reader.fields

    def get(self, key: str, default: Any = None) -> Any:
        field = self._fields.get(key)
        return default if field is None else field.contents()

    def arch(self, key: str) -> Any:
        return self.get(f"llama.{key}")


def hf_weights(reader: GGUFReader, meta: Metadata) -> dict[str, torch.Tensor]:
    """Every tensor dequantized, renamed, and Q/K rows put back in Hugging Face's order."""
    heads, kv_heads = meta.arch("attention.head_count"), meta.arch("attention.head_count_kv")
    weights: dict[str, torch.Tensor] = {}
    for tensor in reader.tensors:
        # A copy: unquantized tensors come back as read-only views of the memory-mapped file.
        values = np.array(dequantize(tensor.data, tensor.tensor_type), dtype=np.float32)
        stem, _, kind = tensor.name.rpartition(".")
        if stem.endswith("attn_q"):
            values = unpermute(values, heads)
        elif stem.endswith("attn_k"):
            values = unpermute(values, kv_heads)
        weights[f"{hf_name(stem)}.{kind}"] = torch.from_numpy(np.ascontiguousarray(values)).to(DTYPE)
    return weights


def hf_name(stem: str) -> str:
    """`blk.3.attn_q` -> `model.layers.3.self_attn.q_proj`; `token_embd` -> `model.embed_tokens`."""
    if stem in TOP_TENSORS:
        return TOP_TENSORS[stem]
    blk, layer, name = stem.split(".")
    if blk != "blk" or name not in LAYER_TENSORS:
        raise ValueError(f"no Hugging Face name for GGUF tensor {stem}")
    return f"model.layers.{layer}.{LAYER_TENSORS[name]}"


def unpermute(weight: np.ndarray, heads: int) -> np.ndarray:
    """Undo llama.cpp's interleaving of the rotary halves in a Q or K projection.

    llama.cpp's converter stores each head's rows as (dim/2, 2) pairs so its rope rotates adjacent
    elements; Hugging Face's Llama rotates the first half against the second. Without this the
    model attends to the wrong positions and writes fluent-looking garbage.
    """
    rows = weight.shape[0]
    return weight.reshape(heads, rows // heads // 2, 2, *weight.shape[1:]).swapaxes(1, 2).reshape(weight.shape)


def model_config(meta: Metadata, tied: bool) -> dict[str, Any]:
    """config.json for LlamaForCausalLM from the GGUF's hyperparameters."""
    hidden, heads = meta.arch("embedding_length"), meta.arch("attention.head_count")
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "attention_bias": False,
        "attention_dropout": 0.0,
        "bos_token_id": meta.get("tokenizer.ggml.bos_token_id"),
        "eos_token_id": meta.get("tokenizer.ggml.eos_token_id"),
        "pad_token_id": meta.get("tokenizer.ggml.padding_token_id"),
        "head_dim": meta.arch("rope.dimension_count") or hidden // heads,
        "hidden_act": "silu",
        "hidden_size": hidden,
        "intermediate_size": meta.arch("feed_forward_length"),
        "max_position_embeddings": meta.arch("context_length"),
        "mlp_bias": False,
        "num_attention_heads": heads,
        "num_hidden_layers": meta.arch("block_count"),
        "num_key_value_heads": meta.arch("attention.head_count_kv"),
        # GGUF stores float32: 1e-05 arrives as 9.99999974e-06; seven digits are what it holds.
        "rms_norm_eps": float(f"{meta.arch('attention.layer_norm_rms_epsilon'):.7g}"),
        "rope_scaling": None,
        "rope_theta": float(meta.arch("rope.freq_base")),
        "tie_word_embeddings": tied,
        "torch_dtype": "bfloat16",
        "use_cache": True,
        "vocab_size": len(meta.get("tokenizer.ggml.tokens")),
    }


def generation_config(meta: Metadata) -> dict[str, Any]:
    """generation_config.json: the special token ids only (no sampling defaults of its own)."""
    return {
        "bos_token_id": meta.get("tokenizer.ggml.bos_token_id"),
        "eos_token_id": meta.get("tokenizer.ggml.eos_token_id"),
        "pad_token_id": meta.get("tokenizer.ggml.padding_token_id"),
    }


def special_tokens(meta: Metadata) -> list[str]:
    """The control tokens, in id order."""
    tokens, kinds = meta.get("tokenizer.ggml.tokens"), meta.get("tokenizer.ggml.token_type")
    return [token for token, kind in zip(tokens, kinds, strict=True) if kind == CONTROL_TOKEN]


def build_tokenizer(meta: Metadata) -> Tokenizer:
    """The byte-level BPE tokenizer from the GGUF's vocabulary and merges.

    Pre-tokenization follows llama.cpp's `smollm` pre-tokenizer: every digit on its own, then
    GPT-2's byte-level split; no BOS is added (`tokenizer.ggml.add_bos_token` is false).
    """
    if meta.get("tokenizer.ggml.pre") != "smollm" or meta.get("tokenizer.ggml.add_bos_token", False):
        raise ValueError("only the smollm pre-tokenizer without an added BOS is known to convert exactly")
    vocab = {token: i for i, token in enumerate(meta.get("tokenizer.ggml.tokens"))}
    merges = [tuple(merge.split(" ")) for merge in meta.get("tokenizer.ggml.merges")]
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=merges, fuse_unk=False, byte_fallback=False))
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(add_prefix_space=False)]
    )
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.post_processor = processors.ByteLevel(trim_offsets=False)
    tokenizer.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in special_tokens(meta)])
    return tokenizer


def tokenizer_config(meta: Metadata) -> dict[str, Any]:
    """tokenizer_config.json: a fast tokenizer over tokenizer.json, its special tokens and chat template."""
    tokens = meta.get("tokenizer.ggml.tokens")
    specials = special_tokens(meta)
    decoder = {
        str(tokens.index(t)): {
            "content": t,
            "lstrip": False,
            "normalized": False,
            "rstrip": False,
            "single_word": False,
            "special": True,
        }
        for t in specials
    }
    return {
        "added_tokens_decoder": decoder,
        "bos_token": tokens[meta.get("tokenizer.ggml.bos_token_id")],
        "eos_token": tokens[meta.get("tokenizer.ggml.eos_token_id")],
        "pad_token": tokens[meta.get("tokenizer.ggml.padding_token_id")],
        "unk_token": tokens[meta.get("tokenizer.ggml.unknown_token_id")],
        "chat_template": meta.get("tokenizer.chat_template"),
        "clean_up_tokenization_spaces": False,
        "model_max_length": meta.arch("context_length"),
        "tokenizer_class": "PreTrainedTokenizerFast",
    }


def _stable_json(text: str) -> str:
    """The tokenizer's JSON with sorted keys, so the folder's hash does not depend on dict order."""
    return json.dumps(json.loads(text), indent=2, sort_keys=True, ensure_ascii=False) + "\n"
