import pytest

from workstation.engine.flags import UnknownFlagError, check_flags, known_flags

HELP = """
usage: vllm serve [model_tag] [options]
  --max-num-seqs MAX_NUM_SEQS
  --enforce-eager, --no-enforce-eager
  --kv-cache-memory-bytes KV_CACHE_MEMORY_BYTES
"""


def test_known_flags_reads_help_text():
    assert {"--max-num-seqs", "--enforce-eager", "--no-enforce-eager"} <= known_flags(HELP)


def test_unknown_flag_is_refused_with_a_suggestion():
    with pytest.raises(UnknownFlagError) as err:
        check_flags(["--max-num-seq", "8", "--enforce-eager"], known_flags(HELP), "0.32.0+cpu")
    message = str(err.value)
    assert "--max-num-seq " in message + " " and "did you mean --max-num-seqs" in message
    assert "0.32.0+cpu" in message


def test_values_and_equals_forms_pass():
    check_flags(["--max-num-seqs=8", "--kv-cache-memory-bytes", "1024"], known_flags(HELP))


def test_poll_lines_of_the_engine_log() -> None:
    from workstation.engine.launcher import is_poll_line

    assert is_poll_line('INFO:     127.0.0.1:45232 - "GET /metrics HTTP/1.1" 200 OK')
    assert is_poll_line('(APIServer pid=7) INFO:     127.0.0.1:51 - "GET /health HTTP/1.1" 200 OK')
    assert not is_poll_line('INFO:     127.0.0.1:45232 - "GET /metrics HTTP/1.1" 500 Internal Server Error')
    assert not is_poll_line('INFO:     127.0.0.1:51 - "POST /v1/chat/completions HTTP/1.1" 200 OK')
    assert not is_poll_line("INFO 12:01 [metrics.py] Avg prompt throughput: 12.0 tokens/s")
