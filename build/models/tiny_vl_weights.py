"""The tiny vision model's files: a deterministic, random-weight Qwen2.5-VL checkpoint for the cpu engine.

Recorded parts (tiny_vl.yaml): the real preprocessor config and chat template. Made here: a byte-level BPE
tokenizer trained like the tiny Llama's (tiny_weights.train_bpe) with Qwen2.5's special tokens, a config with
Qwen2.5-VL's structure at toy sizes (text: hidden 128, 2 layers, 2 heads of 64, mrope sections 8/12/12 = 32
rotary pairs; vision: 2 blocks, hidden 128, patch 14, spatial merge 2, window 112, the last block full-attention),
and weights initialised by transformers' own Qwen2.5-VL class from a fixed seed. Two builds are byte-identical.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
import yaml
from checkpoint_dir import write_json
from safetensors.torch import save_file
from tiny_weights import seeded, train_bpe
from tokenizers import Tokenizer
from transformers import Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration

SEED = 20261205
DTYPE = "bfloat16"
MAX_POSITIONS = 4096
RECORD = yaml.safe_load(Path(__file__).with_name("tiny_vl.yaml").read_text(encoding="utf-8"))
SPECIAL_TOKENS: list[str] = RECORD["special_tokens"]
PAD, EOS = "<|endoftext|>", "<|im_end|>"


def model_config(tok: Tokenizer) -> Qwen2_5_VLConfig:
    ids = {t: tok.token_to_id(t) for t in SPECIAL_TOKENS}
    text = {
        "vocab_size": tok.get_vocab_size(with_added_tokens=True),
        "hidden_size": 128,
        "intermediate_size": 256,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "num_key_value_heads": 1,
        "max_position_embeddings": MAX_POSITIONS,
        "rope_theta": 1000000.0,
        "rope_scaling": {"type": "mrope", "mrope_section": [8, 12, 12]},
        "rms_norm_eps": 1e-6,
        "tie_word_embeddings": False,
        "bos_token_id": ids[PAD],
        "eos_token_id": ids[EOS],
        "pad_token_id": ids[PAD],
    }
    vision = {
        "depth": 2,
        "hidden_size": 128,
        "intermediate_size": 256,
        "num_heads": 2,
        "out_hidden_size": 128,
        "patch_size": 14,
        "spatial_merge_size": 2,
        "temporal_patch_size": 2,
        "window_size": 112,
        "fullatt_block_indexes": [1],
        "in_channels": 3,
    }
    return Qwen2_5_VLConfig(
        text_config=text,
        vision_config=vision,
        image_token_id=ids["<|image_pad|>"],
        video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"],
        vision_end_token_id=ids["<|vision_end|>"],
        bos_token_id=ids[PAD],
        eos_token_id=ids[EOS],
        tie_word_embeddings=False,
        torch_dtype=DTYPE,
        architectures=["Qwen2_5_VLForConditionalGeneration"],
    )


def tokenizer_config() -> dict[str, Any]:
    return {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "eos_token": EOS,
        "pad_token": PAD,
        "model_max_length": MAX_POSITIONS,
        "clean_up_tokenization_spaces": False,
        "chat_template": RECORD["chat_template"],
    }


def write_checkpoint(directory: Path) -> None:
    """Write every checkpoint file into an existing empty directory."""
    tok = train_bpe(SPECIAL_TOKENS)
    tok.save(str(directory / "tokenizer.json"), pretty=True)
    write_json(directory / "tokenizer_config.json", tokenizer_config())
    write_json(directory / "chat_template.json", {"chat_template": RECORD["chat_template"]})
    write_json(directory / "preprocessor_config.json", RECORD["preprocessor_config"])
    config = model_config(tok)
    write_json(directory / "config.json", config.to_dict())
    ids = config.text_config
    write_json(
        directory / "generation_config.json",
        {"bos_token_id": ids.bos_token_id, "eos_token_id": ids.eos_token_id, "do_sample": False},
    )
    model = Qwen2_5_VLForConditionalGeneration(config).to(getattr(torch, DTYPE))
    weights = {name: tensor.contiguous() for name, tensor in model.state_dict().items()}
    save_file(weights, str(directory / "model.safetensors"), metadata={"format": "pt"})


def write_seeded(directory: Path) -> None:
    """`write_checkpoint` after tiny_weights.seeded."""
    seeded(SEED)
    write_checkpoint(directory)
