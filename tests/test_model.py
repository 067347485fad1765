"""pdmux_cli.catalog.model: profiles, config variants, and the chapter's cost formulas (literal values)."""

from __future__ import annotations

import itertools
import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pdmux_cli.catalog import model as M
from pdmux_cli.util.errors import InputError
from pdmux_cli.catalog.model import Model, load_model

# The chapter's "Is it worth it: an estimate" constants for Qwen3-8B (pd-multiplexing-chapter.txt).
LINEAR = 36 * (2 * 4096 * 4096 + 2 * 4096 * 1024 + 3 * 4096 * 12288) + 4096 * 151936
KV_PER_TOKEN = 36 * 2 * 1024 * 2


def chapter_attn(tokens, start=0):
    return 2 * 2 * 36 * 4096 * (tokens * start + tokens * tokens / 2)


# model-specs.md, "KV B/token (bf16)" column: all layers, uncapped; DeepSeek-V3 = latent cache.
KV_BYTES_PER_TOKEN = {
    "Qwen3-0.6B": 114688,
    "Qwen3-8B": 147456,
    "Qwen3-8B-FP8": 147456,
    "Qwen3-14B": 163840,  # 40 layers x 8 KV heads x 128 x 2 (K, V) x 2 bytes (not in model-specs.md)
    "Qwen3-14B-FP8": 163840,
    "Qwen3-32B": 262144,
    "Qwen2.5-7B-Instruct": 57344,
    "Qwen2.5-32B-Instruct": 262144,  # 64 layers x 8 KV heads x 128 x 2 (K, V) x 2 bytes
    "Llama-3.1-8B": 131072,
    "Llama-3.1-70B": 327680,
    "Llama-3.1-405B": 516096,  # 126 layers x 8 KV heads x 128 x 2 (K, V) x 2 bytes
    "Llama-3.3-70B-Instruct": 327680,
    "Mistral-7B-v0.3": 131072,
    "Gemma-3-27B-it": 507904,
    "Phi-4": 204800,
    "Qwen3-30B-A3B": 98304,
    "Qwen3-235B-A22B": 192512,
    "Mixtral-8x7B": 131072,
    "DeepSeek-V3": 70272,
    "gpt-oss-20b": 49152,
    "gpt-oss-120b": 73728,
    "CodeLlama-34b-hf": 196608,  # 48 layers x 8 KV heads x 128 x 2 (K, V) x 2 bytes; not in model-specs.md
}

REQUIRED = ["Qwen3-8B", "Qwen3-0.6B", "Qwen3-32B", "Qwen3-30B-A3B", "Llama-3.1-8B", "Llama-3.1-70B",
            "Mistral-7B-v0.3", "Mixtral-8x7B", "gpt-oss-20b", "DeepSeek-V3"]


def write_config(tmp_path, config, name="config.json"):
    path = tmp_path / name
    path.write_text(json.dumps(config))
    return path


def within(value, target, rel):
    return abs(value - target) <= rel * target


# ------------------------------------------------------------------------------------------------
# Profiles
# ------------------------------------------------------------------------------------------------


def test_every_profile_is_listed_and_loads():
    names = M.list_models()
    assert set(REQUIRED) <= set(names)
    assert set(KV_BYTES_PER_TOKEN) == set(names)
    for name in names:
        m = load_model(name)
        assert m.name == name
        assert M.num_params_active(m) <= M.num_params_total(m)


@pytest.mark.parametrize("name,expected", sorted(KV_BYTES_PER_TOKEN.items()))
def test_kv_bytes_per_token_matches_model_specs(name, expected):
    assert M.kv_bytes_per_token(load_model(name)) == expected


def test_lookup_is_case_insensitive_and_accepts_hf_ids():
    assert load_model("qwen3-8b") == load_model("Qwen3-8B") == load_model("Qwen/Qwen3-8B")
    assert load_model("MIXTRAL-8X7B").num_experts == 8


@pytest.mark.parametrize("name,head_dim", [
    ("Qwen3-0.6B", 128),  # hidden/heads would give 64
    ("Qwen3-32B", 128),  # would give 80
    ("Qwen3-30B-A3B", 128),
    ("gpt-oss-20b", 64),  # would give 45
    ("Gemma-3-27B-it", 128),  # would give 168
    ("Llama-3.1-8B", 128),  # no key: derived
    ("Qwen2.5-7B-Instruct", 128),  # no key: derived
])
def test_head_dim_from_config(name, head_dim):
    assert load_model(name).head_dim == head_dim


def test_profile_shapes():
    q = load_model("Qwen3-8B")
    assert (q.num_layers, q.hidden_size, q.intermediate_size, q.num_attention_heads, q.num_kv_heads,
            q.vocab_size, q.tie_word_embeddings, q.weight_dtype) == (
                36, 4096, 12288, 32, 8, 151936, False, "bf16")
    assert load_model("Qwen3-0.6B").tie_word_embeddings is True
    assert load_model("Mistral-7B-v0.3").num_sliding_layers == 0  # sliding_window: null
    assert load_model("Qwen2.5-7B-Instruct").num_sliding_layers == 0  # use_sliding_window: false

    mix = load_model("Mixtral-8x7B")
    assert (mix.num_experts, mix.experts_per_token, mix.moe_intermediate_size, mix.intermediate_size) == (
        8, 2, 14336, 0)
    q3 = load_model("Qwen3-30B-A3B")
    assert (q3.num_experts, q3.experts_per_token, q3.moe_intermediate_size, q3.intermediate_size,
            q3.num_dense_layers) == (128, 8, 768, 0, 0)

    ds = load_model("DeepSeek-V3")
    assert ds.is_mla and ds.weight_dtype == "fp8"
    assert (ds.num_experts, ds.experts_per_token, ds.num_shared_experts, ds.shared_expert_intermediate_size,
            ds.num_dense_layers, ds.intermediate_size) == (256, 8, 1, 2048, 3, 18432)
    assert (ds.q_lora_rank, ds.kv_lora_rank, ds.qk_nope_head_dim, ds.qk_rope_head_dim, ds.v_head_dim) == (
        1536, 512, 128, 64, 128)
    assert M.moe_layers(ds) == 58

    oss = load_model("gpt-oss-20b")
    assert (oss.num_experts, oss.experts_per_token, oss.sliding_window, oss.num_sliding_layers,
            oss.weight_dtype) == (32, 4, 128, 12, "mxfp4")
    assert load_model("gpt-oss-120b").num_sliding_layers == 18

    gemma = load_model("Gemma-3-27B-it")  # text_config + Gemma3TextConfig defaults
    assert (gemma.num_layers, gemma.vocab_size, gemma.tie_word_embeddings, gemma.sliding_window,
            gemma.num_sliding_layers) == (62, 262208, True, 1024, 52)


# ------------------------------------------------------------------------------------------------
# The chapter's formulas, exactly
# ------------------------------------------------------------------------------------------------


def test_qwen3_8b_linear_params_equal_chapter():
    m = load_model("Qwen3-8B")
    assert M.decode_linear_params(m) == LINEAR
    assert M.flops_per_token_linear(m) == 2 * LINEAR
    assert M.non_expert_linear_params(m) == LINEAR


def test_qwen3_8b_decode_step_bytes_equal_chapter():
    m = load_model("Qwen3-8B")
    assert M.decode_weight_bytes(m, 32) == 2 * LINEAR
    assert M.decode_weight_bytes(m, 1, weight_bytes_per_param=2) == 2 * LINEAR
    assert M.kv_bytes_per_token(m) == KV_PER_TOKEN
    assert M.kv_bytes(m, 2048) == 2048 * KV_PER_TOKEN
    assert M.decode_weight_bytes(m, 32) + 32 * M.kv_bytes(m, 2048) == 2 * LINEAR + 32 * 2048 * KV_PER_TOKEN


@pytest.mark.parametrize("tokens,start", [(8192, 0), (2048, 0), (2048, 2048), (512, 7680), (1, 4095),
                                          (131072, 0), (0, 100), (3, 5), (65536, 65536)])
def test_qwen3_8b_attention_flops_equal_chapter(tokens, start):
    m = load_model("Qwen3-8B")
    assert M.attention_flops(m, tokens, start) == chapter_attn(tokens, start)


def test_prefill_flops_equal_chapter():
    m = load_model("Qwen3-8B")
    for tokens, start in [(8192, 0), (2048, 6144), (512, 512)]:
        ours = M.flops_per_token_linear(m) * tokens + M.attention_flops(m, tokens, start)
        assert ours == 2 * LINEAR * tokens + chapter_attn(tokens, start)


def test_decode_attention_flops():
    m = load_model("Qwen3-8B")
    assert M.decode_attention_flops(m, 2048) == 2 * 2 * 36 * 4096 * 2048
    oss = load_model("gpt-oss-20b")  # 12 full layers at context, 12 sliding layers at 128
    per_key = 2 * 64 * (64 + 64)
    assert M.decode_attention_flops(oss, 10000) == per_key * (12 * 10000 + 12 * 128)
    assert M.decode_attention_flops(oss, 100) == per_key * 24 * 100


def test_mla_attention_widths():
    ds = load_model("DeepSeek-V3")
    assert M.qk_head_dim(ds) == 192 and M.v_head_dim(ds) == 128
    assert M.attention_flops(ds, 10, 0) == 61 * 2 * 128 * (192 + 128) * (10 * 10 / 2)


def test_sliding_window_attention_flops():
    oss = load_model("gpt-oss-20b")
    per_key = 2 * 64 * (64 + 64)
    full_pairs = 4096 * 4096 / 2
    window_pairs = 128 * 128 / 2 + (4096 - 128) * 128  # ramp to the window, then 128 keys a query
    assert M.attention_flops(oss, 4096) == per_key * (12 * full_pairs + 12 * window_pairs)
    # all queries past the window: exactly `window` keys each on the sliding layers
    assert M.attention_flops(oss, 10, 1000) == per_key * (12 * (10 * 1000 + 50) + 12 * 10 * 128)


# ------------------------------------------------------------------------------------------------
# Parameter counts and weight bytes
# ------------------------------------------------------------------------------------------------


def test_moe_param_counts():
    q3 = load_model("Qwen3-30B-A3B")
    assert within(M.num_params_total(q3), 30.5e9, 0.05)
    assert within(M.num_params_active(q3), 3.3e9, 0.05)
    mix = load_model("Mixtral-8x7B")
    assert within(M.num_params_total(mix), 46.7e9, 0.01)
    assert within(M.num_params_active(mix), 12.9e9, 0.02)
    ds = load_model("DeepSeek-V3")  # MTP layer not counted
    assert within(M.num_params_total(ds), 671e9, 0.03)
    assert within(M.num_params_active(ds), 37e9, 0.03)
    q235 = load_model("Qwen3-235B-A22B")
    assert within(M.num_params_total(q235), 235e9, 0.01)
    assert within(M.num_params_active(q235), 22e9, 0.02)
    for name in ("gpt-oss-20b", "gpt-oss-120b"):  # 21B / 117B total; 3.6B / 5.1B active without embedding
        m = load_model(name)
        assert M.decode_linear_params(m) < M.num_params_active(m) < M.num_params_total(m)
    assert within(M.num_params_total(load_model("gpt-oss-20b")), 20.9e9, 0.02)
    assert within(M.decode_linear_params(load_model("gpt-oss-20b")), 3.6e9, 0.02)
    assert within(M.num_params_total(load_model("gpt-oss-120b")), 116.8e9, 0.02)


@pytest.mark.parametrize("name,billions", [("Qwen3-0.6B", 0.6), ("Qwen3-8B", 8.2), ("Qwen3-32B", 32.8),
                                           ("Llama-3.1-8B", 8.03), ("Llama-3.1-70B", 70.6),
                                           ("Mistral-7B-v0.3", 7.25), ("Qwen2.5-7B-Instruct", 7.6),
                                           ("Phi-4", 14.7), ("Gemma-3-27B-it", 27.0)])
def test_dense_param_counts(name, billions):
    m = load_model(name)
    assert within(M.num_params_total(m), billions * 1e9, 0.02)
    assert M.num_params_active(m) == M.num_params_total(m)


def test_tied_embedding_counted_once():
    m = load_model("Qwen3-0.6B")
    assert M.num_params_total(m) == M.decode_linear_params(m)  # embedding == lm_head, read by logits


def test_weight_bytes_total():
    assert M.weight_bytes_total(load_model("Llama-3.1-70B")) > 80e9
    q = load_model("Qwen3-8B")
    assert M.weight_bytes_total(q) == 2 * M.num_params_total(q)
    assert M.weight_bytes_total(q, 1) == M.num_params_total(q)
    ds = load_model("DeepSeek-V3")  # FP8 layers; BF16 embedding, lm_head, router
    assert M.num_params_total(ds) < M.weight_bytes_total(ds) < 1.01 * M.num_params_total(ds)
    assert M.weight_bytes_total(ds, 2) == 2 * M.num_params_total(ds)
    oss = load_model("gpt-oss-20b")  # MXFP4 experts: about 13-14 GB, not 42
    experts = M.moe_layers(oss) * oss.num_experts * M.expert_params(oss)
    assert M.weight_bytes_total(oss) == pytest.approx(
        experts * 4.25 / 8 + 2 * (M.num_params_total(oss) - experts), rel=1e-12)
    assert 13e9 < M.weight_bytes_total(oss) < 14.5e9


def test_decode_weight_bytes_moe_grows_with_batch_and_tends_to_all_experts():
    for name in ("Qwen3-30B-A3B", "Mixtral-8x7B", "DeepSeek-V3", "gpt-oss-20b"):
        m = load_model(name)
        reads = [M.decode_weight_bytes(m, bs) for bs in range(1, 257)]
        assert all(a <= b for a, b in itertools.pairwise(reads))  # flat only once every expert is read
        assert all(a < b for a, b in itertools.pairwise(reads[:8]))
        # everything but the (untied) embedding, which a step gathers one row of; it is BF16 in all four
        everything = M.weight_bytes_total(m) - (0 if m.tie_word_embeddings else 2 * M.embedding_params(m))
        assert reads[-1] <= everything * (1 + 1e-12)
        assert M.decode_weight_bytes(m, 100_000) == pytest.approx(everything, rel=1e-9)
    q3 = load_model("Qwen3-30B-A3B")
    assert M.decode_weight_bytes(q3, 1) == 2 * M.decode_linear_params(q3)  # one token: its k experts
    assert M.expected_experts_touched(q3, 1) == pytest.approx(8)
    assert M.expected_experts_touched(q3, 0) == 0
    assert M.decode_weight_bytes(q3, 0) == 0


def test_kv_bytes_window_cap():
    oss = load_model("gpt-oss-20b")
    per_layer_token = 2 * 8 * 64 * 2
    assert M.kv_bytes(oss, 100) == 100 * 49152
    assert M.kv_bytes(oss, 32768) == per_layer_token * (12 * 32768 + 12 * 128)
    assert M.kv_bytes(load_model("DeepSeek-V3"), 1000) == 1000 * 70272
    assert M.kv_bytes(load_model("Qwen3-8B"), 1000, kv_bytes_per_element=1) == 1000 * 73728


# ------------------------------------------------------------------------------------------------
# Config variants
# ------------------------------------------------------------------------------------------------

BASE = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 1024,
        "intermediate_size": 4096, "num_hidden_layers": 4, "num_attention_heads": 8, "vocab_size": 1000,
        "tie_word_embeddings": False}


def test_defaults_when_keys_absent(tmp_path):
    m = load_model(str(write_config(tmp_path, BASE)))
    assert m.num_kv_heads == 8 and m.head_dim == 128  # no num_key_value_heads: MHA
    cfg = {k: v for k, v in BASE.items() if k != "tie_word_embeddings"}
    assert load_model(str(write_config(tmp_path, cfg))).tie_word_embeddings is True  # transformers default


def test_name_from_path(tmp_path):
    d = tmp_path / "my-model"
    d.mkdir()
    write_config(d, BASE)
    assert load_model(str(d)).name == "my-model"
    assert load_model(str(d / "config.json")).name == "my-model"
    assert load_model(str(write_config(tmp_path, {**BASE, "_name_or_path": "org/Cool-7B"},
                                       "x.json"))).name == (
        "Cool-7B")


def test_mistral_v01_sliding_every_layer_and_qwen_max_window_layers(tmp_path):
    m = load_model(str(write_config(tmp_path, {**BASE, "model_type": "mistral", "sliding_window": 4096})))
    assert (m.sliding_window, m.num_sliding_layers) == (4096, 4)
    qwen = {**BASE, "model_type": "qwen2", "sliding_window": 512, "use_sliding_window": True,
            "max_window_layers": 3}
    m = load_model(str(write_config(tmp_path, qwen)))
    assert (m.sliding_window, m.num_sliding_layers) == (512, 1)
    m = load_model(str(write_config(tmp_path, {**qwen, "use_sliding_window": False})))
    assert m.num_sliding_layers == 0


def test_qwen2_moe_shared_expert_and_dense_layers(tmp_path):
    cfg = {**BASE, "model_type": "qwen2_moe", "num_experts": 16, "num_experts_per_tok": 4,
           "moe_intermediate_size": 256, "shared_expert_intermediate_size": 1024, "decoder_sparse_step": 1,
           "mlp_only_layers": [0]}
    m = load_model(str(write_config(tmp_path, cfg)))
    assert (m.num_experts, m.experts_per_token, m.num_shared_experts, m.shared_expert_intermediate_size,
            m.num_dense_layers, m.intermediate_size) == (16, 4, 1, 1024, 1, 4096)
    h = 1024
    attn = 2 * h * 1024 + 2 * h * 1024
    expected = 4 * attn + 1 * 3 * h * 4096 + 3 * (4 * 3 * h * 256 + 3 * h * 1024 + h * 16) + 1000 * h
    assert M.decode_linear_params(m) == expected
    step2 = load_model(str(write_config(tmp_path, {**cfg, "decoder_sparse_step": 2, "mlp_only_layers": []})))
    assert step2.num_dense_layers == 2  # layers 1 and 3 sparse


def test_mla_without_q_lora(tmp_path):
    cfg = {**BASE, "model_type": "deepseek_v2", "n_routed_experts": 8, "num_experts_per_tok": 2,
           "moe_intermediate_size": 128, "n_shared_experts": 2, "first_k_dense_replace": 1,
           "q_lora_rank": None, "kv_lora_rank": 64, "qk_nope_head_dim": 32, "qk_rope_head_dim": 16,
           "v_head_dim": 32}
    m = load_model(str(write_config(tmp_path, cfg)))
    assert m.q_lora_rank == 0 and m.num_dense_layers == 1 and m.num_shared_experts == 2
    h, heads = 1024, 8
    assert M.attention_params_per_layer(m) == (h * heads * 48 + h * (64 + 16) + 64 * heads * (32 + 32)
                                               + heads * 32 * h)
    assert M.kv_bytes_per_token(m) == 4 * 80 * 2


def test_gemma3_text_only_defaults(tmp_path):
    m = load_model(str(write_config(tmp_path, {"model_type": "gemma3_text", "num_hidden_layers": 12})))
    assert (m.hidden_size, m.head_dim, m.vocab_size, m.sliding_window, m.num_sliding_layers) == (
        2304, 256, 262208, 4096, 10)


def test_layer_types(tmp_path):
    cfg = {**BASE, "layer_types": ["sliding_attention"] * 3 + ["full_attention"], "sliding_window": 64}
    m = load_model(str(write_config(tmp_path, cfg)))
    assert (m.num_sliding_layers, m.sliding_window) == (3, 64)


# ------------------------------------------------------------------------------------------------
# Bad input
# ------------------------------------------------------------------------------------------------


def one_line_error(call, *fragments):
    with pytest.raises(InputError) as info:
        call()
    message = str(info.value)
    assert "\n" not in message
    for fragment in fragments:
        assert fragment in message, message
    return message


def test_unknown_profile_lists_close_matches():
    one_line_error(lambda: load_model("qwen3-9b"), "qwen3-9b", "Qwen3-8B")
    one_line_error(lambda: load_model("Mixtral-8x7B-v0.1"), "Mixtral-8x7B")
    one_line_error(lambda: load_model("zzzzzz"), "available", "Qwen3-8B")
    one_line_error(lambda: load_model(""), "empty")


def test_missing_file(tmp_path):
    one_line_error(lambda: load_model(str(tmp_path / "missing.json")), "missing.json")
    one_line_error(lambda: load_model(str(tmp_path)), "config.json")  # a directory without one


def test_invalid_json(tmp_path):
    path = tmp_path / "bad.json"
    path.write_text("{ not json")
    one_line_error(lambda: load_model(str(path)), "bad.json", "invalid JSON")
    path.write_text("[1, 2]")
    one_line_error(lambda: load_model(str(path)), "bad.json", "JSON object")


@pytest.mark.parametrize("key", ["hidden_size", "num_hidden_layers", "num_attention_heads", "vocab_size",
                                 "intermediate_size"])
def test_missing_required_key(tmp_path, key):
    cfg = {k: v for k, v in BASE.items() if k != key}
    path = write_config(tmp_path, cfg)
    one_line_error(lambda: load_model(str(path)), str(path), key)


@pytest.mark.parametrize("key,value", [("hidden_size", 0), ("num_hidden_layers", -2), ("vocab_size", "big"),
                                       ("num_attention_heads", 2.5), ("num_key_value_heads", True),
                                       ("tie_word_embeddings", "no")])
def test_bad_values(tmp_path, key, value):
    path = write_config(tmp_path, {**BASE, key: value})
    one_line_error(lambda: load_model(str(path)), str(path), key)


def test_bad_variant_keys(tmp_path):
    cases = [
        ({**BASE, "num_local_experts": 4, "num_experts_per_tok": 8}, "num_experts_per_tok"),
        ({**BASE, "num_local_experts": 4}, "num_experts_per_tok"),
        ({**BASE, "layer_types": ["full_attention"]}, "layer_types"),
        ({**BASE, "quantization_config": {"quant_method": "awq"}}, "awq"),
        ({**BASE, "hidden_size": 1000, "num_attention_heads": 3}, "head_dim"),
        ({**BASE, "kv_lora_rank": 64}, "qk_nope_head_dim"),
    ]
    for cfg, fragment in cases:
        path = write_config(tmp_path, cfg)
        one_line_error(lambda path=path: load_model(str(path)), str(path), fragment)


@pytest.mark.parametrize("cfg,key", [
    ({"num_key_value_heads": 16}, "num_key_value_heads"),  # more KV heads than query heads
    ({"num_key_value_heads": 3}, "num_key_value_heads"),  # 8 query heads do not split into 3 groups
    ({"torch_dtype": "nonsense"}, "torch_dtype"),
    ({"torch_dtype": 16}, "torch_dtype"),
    ({"dtype": "int3"}, "dtype"),
    ({"num_local_experts": 4, "num_experts_per_tok": 5, "intermediate_size": 256}, "num_experts_per_tok"),
    ({"n_routed_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 128,
      "first_k_dense_replace": 5},
     "first_k_dense_replace"),
])
def test_inconsistent_config_names_file_and_key(tmp_path, cfg, key):
    path = write_config(tmp_path, {**BASE, **cfg})
    one_line_error(lambda: load_model(str(path)), str(path), f"'{key}'")


@pytest.mark.parametrize("dtype",
                         ["bfloat16", "float16", "float32", "auto", "float8_e4m3fn", "torch.bfloat16",
                                   "BFloat16"])
def test_real_torch_dtypes_are_accepted(tmp_path, dtype):
    m = load_model(str(write_config(tmp_path, {**BASE, "torch_dtype": dtype, "num_key_value_heads": 2})))
    assert m.num_kv_heads == 2 and m.weight_dtype == "bf16"  # the dtype key does not change the weight format


def test_first_k_dense_replace_equal_to_layers_is_all_dense(tmp_path):
    cfg = {**BASE, "n_routed_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 128,
           "first_k_dense_replace": 4}
    m = load_model(str(write_config(tmp_path, cfg)))
    assert m.num_dense_layers == 4 and M.moe_layers(m) == 0


def test_text_config_dtype_checked(tmp_path):
    cfg = {"model_type": "gemma3", "torch_dtype": "bfloat16",
           "text_config": {"model_type": "gemma3_text", "num_hidden_layers": 12, "torch_dtype": "bogus"}}
    one_line_error(lambda: load_model(str(write_config(tmp_path, cfg))), "'text_config.torch_dtype'")


def test_empty_model_name_lists_the_profiles():
    message = one_line_error(lambda: load_model(""), "empty", "Qwen3-8B", "DeepSeek-V3", "config.json")
    assert "pdmux models" not in message
    one_line_error(lambda: load_model("   "), "empty")


def test_special_and_huge_model_files(tmp_path, monkeypatch):
    one_line_error(lambda: load_model("/dev/zero"), "/dev/zero", "not a regular file")
    (tmp_path / "config.json").mkdir()
    one_line_error(lambda: load_model(str(tmp_path)), "config.json: is a directory")
    path = write_config(tmp_path, BASE, name="small.json")
    monkeypatch.setattr(M, "MAX_CONFIG_BYTES", path.stat().st_size - 1)
    one_line_error(lambda: load_model(str(path)), "small.json", "larger than")
    monkeypatch.setattr(M, "MAX_CONFIG_BYTES", path.stat().st_size)
    assert load_model(str(path)).hidden_size == 1024


def test_constructor_refuses_kv_heads_that_do_not_divide():
    ok = {"name": "x", "num_layers": 2, "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4,
          "num_kv_heads": 2, "head_dim": 16, "vocab_size": 100, "tie_word_embeddings": False}
    assert Model(**ok).num_kv_heads == 2
    for kv in (3, 8):
        with pytest.raises(InputError, match="num_kv_heads"):
            Model(**{**ok, "num_kv_heads": kv})


def test_bad_numbers():
    m = load_model("Qwen3-8B")
    one_line_error(lambda: M.attention_flops(m, -1), "new tokens")
    one_line_error(lambda: M.attention_flops(m, 1, -5), "cached tokens")
    one_line_error(lambda: M.kv_bytes(m, -1), "context")
    one_line_error(lambda: M.kv_bytes(m, float("nan")), "context")
    one_line_error(lambda: M.kv_bytes_per_token(m, 0), "KV bytes")
    one_line_error(lambda: M.decode_weight_bytes(m, -1), "decode batch")
    one_line_error(lambda: M.weight_bytes_total(m, -2), "weight bytes")
    one_line_error(lambda: M.decode_attention_flops(m, -3), "context")


def test_model_constructor_validates():
    ok = {"name": "x", "num_layers": 2, "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4,
          "num_kv_heads": 4, "head_dim": 16, "vocab_size": 100, "tie_word_embeddings": False}
    Model(**ok)
    for bad in ({"num_layers": 0}, {"num_experts": 4, "experts_per_token": 5, "moe_intermediate_size": 8},
                {"weight_dtype": "int4"}, {"num_sliding_layers": 1},
                {"num_sliding_layers": 3, "sliding_window": 8}, {"intermediate_size": 0}, {"head_dim": True},
                {"experts_per_token": 2}):
        with pytest.raises(InputError):
            Model(**{**ok, **bad})


# ------------------------------------------------------------------------------------------------
# Properties
# ------------------------------------------------------------------------------------------------

PROFILES = {name: load_model(name) for name in M.list_models()}


@settings(max_examples=200, deadline=None)
@given(name=st.sampled_from(sorted(PROFILES)), a=st.integers(0, 2_000_000), b=st.integers(0, 2_000_000))
def test_kv_bytes_monotone(name, a, b):
    m = PROFILES[name]
    lo, hi = min(a, b), max(a, b)
    assert M.kv_bytes(m, lo) <= M.kv_bytes(m, hi)
    assert M.kv_bytes(m, hi) <= hi * M.kv_bytes_per_token(m)


@settings(max_examples=300, deadline=None)
@given(name=st.sampled_from(sorted(PROFILES)), a=st.integers(0, 1_000_000), b=st.integers(0, 1_000_000))
def test_attention_flops_additive(name, a, b):
    m = PROFILES[name]
    whole = M.attention_flops(m, a + b, 0)
    parts = M.attention_flops(m, a, 0) + M.attention_flops(m, b, a)
    assert math.isclose(parts, whole, rel_tol=1e-12, abs_tol=1e-6)


@settings(max_examples=100, deadline=None)
@given(a=st.integers(0, 30_000), b=st.integers(0, 30_000))  # products stay below 2**53: exact
def test_attention_flops_additive_exact_for_full_attention(a, b):
    m = PROFILES["Qwen3-8B"]
    assert M.attention_flops(m, a, 0) + M.attention_flops(m, b, a) == M.attention_flops(m, a + b, 0)


@settings(max_examples=100, deadline=None)
@given(name=st.sampled_from(sorted(PROFILES)), bs=st.integers(1, 2048))
def test_decode_weight_bytes_bounds(name, bs):
    m = PROFILES[name]
    assert M.decode_weight_bytes(m, bs) <= M.decode_weight_bytes(m, bs + 1) * (1 + 1e-12)
    assert M.decode_weight_bytes(m, bs) <= M.weight_bytes_total(m) + M.lm_head_params(m) * 2


def test_huge_and_deep_json_configs(tmp_path):
    """Numbers past float's range (int -> float overflow), past Python's 4300-digit limit, and
    nesting past the recursion limit: each one line, exit 2."""
    huge = write_config(tmp_path, {**BASE, "hidden_size": 10**400}, name="huge.json")
    one_line_error(lambda: load_model(str(huge)), "hidden_size", "past any real model")
    wide = write_config(tmp_path, {**BASE, "num_hidden_layers": M.MAX_DIMENSION + 1}, name="wide.json")
    one_line_error(lambda: load_model(str(wide)), "num_layers", "10,000,000")
    digits = tmp_path / "digits.json"
    digits.write_text('{"hidden_size": ' + "9" * 5000 + "}")
    one_line_error(lambda: load_model(str(digits)), "thousands of digits")
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 200_000)
    one_line_error(lambda: load_model(str(deep)), "nested too deeply")


def test_control_characters_in_the_model_name_are_escaped(tmp_path):
    path = write_config(tmp_path, {**BASE, "_name_or_path": "org/\x1b[31mRED\x07"}, name="esc.json")
    assert load_model(str(path)).name == "\\x1b[31mRED\\x07"


def test_config_with_a_byte_order_mark_loads(tmp_path):
    path = tmp_path / "bom.json"
    path.write_text("\ufeff" + json.dumps(BASE), encoding="utf-8")
    assert load_model(str(path)).hidden_size == 1024
