import pytest

from workstation.core.engine_sizing import (
    GIB, GpuMemory, ModelShape, SizingError, batch_for, memory_share, size_engine,
)

SMOLLM2 = {  # config.json of SmolLM2-135M-Instruct as the app prepares it
    "model_type": "llama", "num_hidden_layers": 30, "num_attention_heads": 9, "num_key_value_heads": 3,
    "hidden_size": 576, "max_position_embeddings": 8192, "torch_dtype": "bfloat16",
}
H200 = GpuMemory(0, "NVIDIA H200", total_bytes=150_754_820_096, free_bytes=150_000_000_000)


def test_kv_bytes_per_token_from_the_config():
    shape = ModelShape.from_config(SMOLLM2, weight_bytes=269_000_000)
    # 2 (K and V) x 30 layers x 3 KV heads x 64 head dims x 2 bytes
    assert shape.kv_bytes_per_token == 23_040
    assert shape.max_position_embeddings == 8192
    hybrid = {**SMOLLM2, "hybrid_override_pattern": "M-M-M*-M-M*-"}
    assert ModelShape.from_config(hybrid).kv_bytes_per_token == 2 * 2 * 3 * 64 * 2
    assert ModelShape.from_config(None).kv_bytes_per_token is None


def test_batch_is_twice_the_sessions_as_a_power_of_two():
    assert [batch_for(n) for n in (1, 8, 32, 33, 256, 5000)] == [16, 16, 64, 128, 512, 1024]


def test_the_batch_counts_sequences_not_requests():
    shape = ModelShape.from_config(SMOLLM2, weight_bytes=269_000_000)
    one = size_engine(shape, [H200], sessions=32, model_max_len=8192)
    six = size_engine(shape, [H200], sessions=32, sequences_per_session=6, model_max_len=8192)
    assert (one.max_num_seqs, six.max_num_seqs) == (64, 512)
    assert six.max_model_len == one.max_model_len and six.gpu_memory_utilization == one.gpu_memory_utilization
    assert size_engine(shape, [], sessions=32, sequences_per_session=6).max_num_seqs == 512


def test_a_big_free_gpu_keeps_the_models_window_and_vllms_memory_share():
    sizing = size_engine(ModelShape.from_config(SMOLLM2, weight_bytes=269_000_000), [H200], sessions=32,
                         model_max_len=8192)
    assert sizing.values() == {"max_num_seqs": "64", "max_model_len": "8192", "gpu_memory_utilization": "0.90"}
    assert sizing.kv_tokens > 5_000_000 and not sizing.notes


def test_memory_in_use_lowers_the_share_and_says_so():
    busy = GpuMemory(0, "NVIDIA H200", total_bytes=H200.total_bytes, free_bytes=60 * GIB)
    sizing = size_engine(ModelShape.from_config(SMOLLM2), [busy], sessions=32)
    assert sizing.gpu_memory_utilization == pytest.approx((60 - 1) / (H200.total_bytes / GIB), abs=0.01)
    assert sizing.gpu_memory_utilization * H200.total_bytes <= busy.free_bytes
    assert "already in use" in sizing.notes[0]


def test_a_context_that_cannot_hold_every_session_is_shortened_to_one_that_can():
    big = {**SMOLLM2, "num_hidden_layers": 80, "num_key_value_heads": 8, "hidden_size": 8192,
           "num_attention_heads": 64, "max_position_embeddings": 131072}
    sizing = size_engine(ModelShape.from_config(big, weight_bytes=70 * GIB), [H200], sessions=32)
    per_token = 2 * 80 * 8 * 128 * 2
    assert sizing.max_model_len < 131072
    assert sizing.max_model_len * 32 * per_token <= sizing.kv_tokens * per_token
    assert sizing.max_model_len % 256 == 0 and "holds 32 sessions" in sizing.notes[-1]


def test_tensor_parallel_splits_the_weights_and_adds_the_caches():
    shape = ModelShape.from_config(SMOLLM2, weight_bytes=100 * GIB)
    one = size_engine(shape, [H200], sessions=32)
    two = size_engine(shape, [H200, GpuMemory(1, "NVIDIA H200", H200.total_bytes, H200.free_bytes)], sessions=32)
    assert two.kv_tokens > 2 * one.kv_tokens


def test_no_gpu_facts_size_only_the_batch():
    sizing = size_engine(ModelShape.from_config(SMOLLM2), [], sessions=32, model_max_len=8192)
    assert sizing.values() == {"max_num_seqs": "64", "max_model_len": "8192"}


def test_a_model_that_does_not_fit_is_refused_in_words():
    tiny_free = GpuMemory(0, "NVIDIA H200", total_bytes=H200.total_bytes, free_bytes=4 * GIB)
    with pytest.raises(SizingError, match="GiB free"):
        size_engine(ModelShape.from_config(SMOLLM2, weight_bytes=20 * GIB), [tiny_free], sessions=32)


def test_engines_sharing_a_gpu_take_an_equal_share_of_its_memory_and_of_the_sessions():
    shape = ModelShape.from_config(SMOLLM2, weight_bytes=269_000_000)
    alone = size_engine(shape, [H200], sessions=32, sequences_per_session=6, model_max_len=8192)
    first = size_engine(shape, [H200], sessions=32, sequences_per_session=6, model_max_len=8192,
                        engines_on_device=2, place=1)
    # 16 guided sessions of 6 drafts each: 96 sequences, twice that as a power of two
    assert (alone.max_num_seqs, first.max_num_seqs) == (512, 256)
    assert first.values() == {"max_num_seqs": "256", "max_model_len": "8192", "gpu_memory_utilization": "0.45"}
    assert first.notes == ("one of 2 engines on its GPU: memory share 0.45, sized for 16 of 32 sessions",)
    assert size_engine(shape, [H200], sessions=33, engines_on_device=2).max_num_seqs == batch_for(17)
    assert [memory_share(k) for k in range(1, 9)] == [0.90, 0.45, 0.30, 0.22, 0.18, 0.15, 0.12, 0.11]
    # without GPU facts a shared engine still takes its share (vLLM's 90 % would fail the second)
    blind = size_engine(shape, [], sessions=32, engines_on_device=4)
    assert blind.gpu_memory_utilization == 0.22 and blind.max_num_seqs == 16
    # the context rule is per engine: a big model's KV cache holds half the sessions per engine
    big = {**SMOLLM2, "num_hidden_layers": 80, "num_key_value_heads": 8, "hidden_size": 8192,
           "num_attention_heads": 64, "max_position_embeddings": 131072}
    whole = size_engine(ModelShape.from_config(big, weight_bytes=20 * GIB), [H200], sessions=32)
    half = size_engine(ModelShape.from_config(big, weight_bytes=20 * GIB), [H200], sessions=32, engines_on_device=2)
    assert half.kv_tokens < whole.kv_tokens and half.max_model_len * 16 <= half.kv_tokens


CONTEXT_BYTES = GIB // 2
"""What each engine process holds outside vLLM's budget (its CUDA context)."""


def _start_one_after_another(card: GpuMemory, k: int, held_by_others: int = 0) -> list[float]:
    """Start ``k`` engines on ``card`` in turn as the host does, each checked as vLLM checks
    it (``free >= utilization x total`` after its own CUDA context); their shares."""
    shape = ModelShape.from_config(SMOLLM2, weight_bytes=269_000_000)
    used = held_by_others
    shares = []
    for place in range(1, k + 1):
        now = GpuMemory(0, card.name, card.total_bytes, card.total_bytes - used)
        util = size_engine(shape, [now], sessions=32, engines_on_device=k, place=place).gpu_memory_utilization
        assert util is not None
        free_at_check = card.total_bytes - used - CONTEXT_BYTES
        assert free_at_check >= util * card.total_bytes, (k, place, util)  # vLLM's start-up check
        used += int(util * card.total_bytes) + CONTEXT_BYTES
        shares.append(util)
    assert used <= card.total_bytes
    return shares


@pytest.mark.parametrize("k", range(1, 9))
def test_the_last_engine_on_a_gpu_still_passes_vllms_free_memory_check(k: int):
    assert set(_start_one_after_another(H200, k)) == {memory_share(k, H200.total_bytes)}  # equal on an empty card
    small = GpuMemory(0, "24 GB card", total_bytes=24 * GIB, free_bytes=24 * GIB)
    if k <= 5:
        _start_one_after_another(small, k)
    else:  # a share too small for the working memory is refused in words, not left to fail the start
        with pytest.raises(SizingError, match=f"do not fit in a share for each of {k} engines"):
            _start_one_after_another(small, k)
    # something else holds 30 GiB: each still starts, in near-equal parts of what is left
    shares = _start_one_after_another(H200, k, held_by_others=30 * GIB)
    assert max(shares) - min(shares) <= 0.02 + 1e-9 and sum(shares) * H200.total_bytes <= H200.total_bytes - 30 * GIB
