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
