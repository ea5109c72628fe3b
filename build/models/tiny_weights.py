"""The tiny model's files: a deterministic, random-weight Llama checkpoint for the cpu engine.

Why this exists: this machine (and CI) cannot download model weights from any
hub, yet the appliance must boot a real vLLM engine in tests. So we fabricate a
complete Hugging Face style checkpoint locally:

* a byte-level BPE tokenizer trained with ``tokenizers`` on the English
  sentences embedded below (a few hundred tokens plus special tokens), with a
  small Jinja chat template and bos/eos set;
* a ``LlamaForCausalLM`` config (hidden 128, 2 layers, 2 attention heads,
  1 KV head, so head_dim 64 -- the vLLM CPU attention kernel rejects head_dim
  16 -- intermediate 256, 2048 positions);
* random weights from a fixed-seed generator saved as ``model.safetensors``.

The weights are noise, so generations are gibberish; the point is exercising
the real boot, scheduling, HTTP and metrics paths quickly on 2 CPU cores.
Two builds produce byte-identical files. ``make_tiny_model.py`` (the recipe)
imports this module, and with it torch, only when a build is due.
"""

from __future__ import annotations

import random
from pathlib import Path

import torch
from checkpoint_dir import write_json
from safetensors.torch import save_file
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

SEED = 20240611
DTYPE = "bfloat16"
HIDDEN = 128
LAYERS = 2
HEADS = 2
KV_HEADS = 1
HEAD_DIM = HIDDEN // HEADS  # 64
INTERMEDIATE = 256
MAX_POSITIONS = 2048
TARGET_VOCAB = 768
INIT_STD = 0.02

BOS = "<|begin_of_text|>"
EOS = "<|end_of_text|>"
EOT = "<|eot|>"
HEADER_START = "<|start_header|>"
HEADER_END = "<|end_header|>"
PAD = "<|pad|>"
SPECIAL_TOKENS = [BOS, EOS, EOT, HEADER_START, HEADER_END, PAD]

CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "<|start_header|>{{ message['role'] }}<|end_header|>\n"
    "{{ message['content'] | trim }}<|eot|>"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|start_header|>assistant<|end_header|>\n{% endif %}"
)

CORPUS = [
    "The quick brown fox jumps over the lazy dog.",
    "A journey of a thousand miles begins with a single step.",
    "She sells sea shells by the sea shore every summer morning.",
    "The weather today is sunny with a light breeze from the west.",
    "Please send me the report before the meeting on Thursday.",
    "Our server answers requests quickly and reports its health.",
    "The cat slept on the warm windowsill all afternoon.",
    "He opened the door, looked outside, and decided to stay home.",
    "Learning a new language takes patience, practice, and time.",
    "The library closes at nine o'clock on weekdays.",
    "Water boils at one hundred degrees Celsius at sea level.",
    "Can you tell me the way to the nearest train station?",
    "The committee will announce its decision next week.",
    "Fresh bread from the bakery smells wonderful in the morning.",
    "Mountains rise above the clouds like islands in the sky.",
    "I would like a cup of tea with milk and no sugar, please.",
    "The children played football in the park until it got dark.",
    "Every good engineer writes tests before shipping the code.",
    "The old bridge was repaired after the spring floods.",
    "Stars are distant suns that burn for billions of years.",
    "Thank you for your help; I could not have done it alone.",
    "The museum displays paintings from many different centuries.",
    "Rain fell softly on the roof while we read our books.",
    "A small boat drifted slowly across the quiet lake.",
    "What time does the next bus leave for the city center?",
    "The garden is full of roses, tulips, and bright sunflowers.",
    "Scientists measure the speed of light with great precision.",
    "He wrote a long letter to his grandmother last winter.",
    "The price of apples went up because of the dry summer.",
    "Music can change the mood of a room in a few seconds.",
    "Hello! How are you doing today? I am doing well, thanks.",
    "The assistant answered the question politely and briefly.",
    "Numbers like 1, 2, 3, 42 and 2048 appear in many examples.",
    "Keep the kitchen clean and put the dishes away after dinner.",
    "The train was late, so we waited on the platform for an hour.",
    "Birds build nests in the tall trees near the river.",
    "Good documentation explains why a choice was made, not only how.",
    "The doctor said that sleep and exercise are important for health.",
    "On Sunday we visited friends who live by the ocean.",
    "The map shows roads, rivers, forests, and small villages.",
    "Write clearly, check your facts, and keep your sentences short.",
    "The lights went out, and the whole street was suddenly quiet.",
    "Yesterday I learned how to bake a chocolate cake.",
    "A friendly dog followed us all the way back to the hotel.",
    "The computer restarted after installing the latest updates.",
    "Time flies like an arrow; fruit flies like a banana.",
]


def train_bpe(special_tokens: list[str]) -> Tokenizer:
    """A byte-level BPE tokenizer trained on CORPUS with `special_tokens` first (deterministic)."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=TARGET_VOCAB,
        min_frequency=1,
        special_tokens=special_tokens,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(CORPUS, trainer=trainer)
    return tok


def build_tokenizer() -> Tokenizer:
    """The tiny Llama's tokenizer: `train_bpe` with its special tokens, BOS added to every sequence."""
    tok = train_bpe(SPECIAL_TOKENS)
    bos_id = tok.token_to_id(BOS)
    tok.post_processor = processors.Sequence(
        [
            processors.ByteLevel(trim_offsets=False),
            processors.TemplateProcessing(
                single=f"{BOS}:0 $A:0",
                pair=f"{BOS}:0 $A:0 {BOS}:1 $B:1",
                special_tokens=[(BOS, bos_id)],
            ),
        ]
    )
    return tok


def tokenizer_config(tok: Tokenizer) -> dict[str, object]:
    """Return tokenizer_config.json contents for a fast tokenizer backed by tokenizer.json."""
    added = {
        str(tok.token_to_id(t)): {
            "content": t,
            "lstrip": False,
            "normalized": False,
            "rstrip": False,
            "single_word": False,
            "special": True,
        }
        for t in SPECIAL_TOKENS
    }
    return {
        "added_tokens_decoder": added,
        "bos_token": BOS,
        "eos_token": EOT,
        "pad_token": PAD,
        "clean_up_tokenization_spaces": False,
        "model_max_length": MAX_POSITIONS,
        "model_input_names": ["input_ids", "attention_mask"],
        "tokenizer_class": "PreTrainedTokenizerFast",
        "chat_template": CHAT_TEMPLATE,
    }


def model_config(tok: Tokenizer) -> dict[str, object]:
    """Return config.json contents for the tiny LlamaForCausalLM."""
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "attention_bias": False,
        "attention_dropout": 0.0,
        "bos_token_id": tok.token_to_id(BOS),
        "eos_token_id": [tok.token_to_id(EOS), tok.token_to_id(EOT)],
        "pad_token_id": tok.token_to_id(PAD),
        "head_dim": HEAD_DIM,
        "hidden_act": "silu",
        "hidden_size": HIDDEN,
        "initializer_range": INIT_STD,
        "intermediate_size": INTERMEDIATE,
        "max_position_embeddings": MAX_POSITIONS,
        "mlp_bias": False,
        "num_attention_heads": HEADS,
        "num_hidden_layers": LAYERS,
        "num_key_value_heads": KV_HEADS,
        "rms_norm_eps": 1e-05,
        "rope_scaling": None,
        "rope_theta": 10000.0,
        "tie_word_embeddings": False,
        "torch_dtype": DTYPE,
        "use_cache": True,
        "vocab_size": tok.get_vocab_size(with_added_tokens=True),
    }


def generation_config(tok: Tokenizer) -> dict[str, object]:
    """Return generation_config.json contents."""
    return {
        "bos_token_id": tok.token_to_id(BOS),
        "eos_token_id": [tok.token_to_id(EOS), tok.token_to_id(EOT)],
        "pad_token_id": tok.token_to_id(PAD),
        "do_sample": False,
    }


def make_weights(vocab_size: int) -> dict[str, torch.Tensor]:
    """Create the Llama state dict from a fixed-seed CPU generator."""
    gen = torch.Generator(device="cpu").manual_seed(SEED)
    dtype = getattr(torch, DTYPE)

    def normal(*shape: int) -> torch.Tensor:
        return (torch.randn(*shape, generator=gen, dtype=torch.float32) * INIT_STD).to(dtype)

    def ones(n: int) -> torch.Tensor:
        return torch.ones(n, dtype=dtype)

    kv_dim = KV_HEADS * HEAD_DIM
    weights: dict[str, torch.Tensor] = {"model.embed_tokens.weight": normal(vocab_size, HIDDEN)}
    for i in range(LAYERS):
        p = f"model.layers.{i}."
        weights[p + "self_attn.q_proj.weight"] = normal(HEADS * HEAD_DIM, HIDDEN)
        weights[p + "self_attn.k_proj.weight"] = normal(kv_dim, HIDDEN)
        weights[p + "self_attn.v_proj.weight"] = normal(kv_dim, HIDDEN)
        weights[p + "self_attn.o_proj.weight"] = normal(HIDDEN, HEADS * HEAD_DIM)
        weights[p + "mlp.gate_proj.weight"] = normal(INTERMEDIATE, HIDDEN)
        weights[p + "mlp.up_proj.weight"] = normal(INTERMEDIATE, HIDDEN)
        weights[p + "mlp.down_proj.weight"] = normal(HIDDEN, INTERMEDIATE)
        weights[p + "input_layernorm.weight"] = ones(HIDDEN)
        weights[p + "post_attention_layernorm.weight"] = ones(HIDDEN)
    weights["model.norm.weight"] = ones(HIDDEN)
    weights["lm_head.weight"] = normal(vocab_size, HIDDEN)
    return {k: v.contiguous() for k, v in weights.items()}


def write_checkpoint(directory: Path) -> None:
    """Write every checkpoint file into an existing empty directory."""
    tok = build_tokenizer()
    tok.save(str(directory / "tokenizer.json"), pretty=True)
    write_json(directory / "tokenizer_config.json", tokenizer_config(tok))
    write_json(
        directory / "special_tokens_map.json",
        {"bos_token": BOS, "eos_token": EOT, "pad_token": PAD},
    )
    write_json(directory / "config.json", model_config(tok))
    write_json(directory / "generation_config.json", generation_config(tok))
    weights = make_weights(tok.get_vocab_size(with_added_tokens=True))
    save_file(weights, str(directory / "model.safetensors"), metadata={"format": "pt"})


def seeded(seed: int) -> None:
    """Seed every generator and make torch deterministic on one thread, so two builds are byte-identical."""
    random.seed(seed)
    torch.manual_seed(seed)
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)


def write_seeded(directory: Path) -> None:
    """`write_checkpoint` after `seeded`."""
    seeded(SEED)
    write_checkpoint(directory)
