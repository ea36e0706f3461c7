"""A byte-level BPE vocabulary's tokenizer must decode byte-level, and say so plainly.

(Imported by convert_gguf.py, in the engine's Python; ``needs_mending`` is plain JSON and the
app's model check reads it too.)

transformers 5.17 rebuilds SmolLM2's GGUF tokenizer (a GPT-2-style vocabulary: ``Ċ`` is the
newline byte, ``Ġ`` the space) with a sentencepiece decoder chain in front of the byte-level
one: ``Sequence[ByteFallback, Fuse, Replace(▁→' '), ByteLevel]``. Hugging Face still decodes
text right, but llguidance reads the chain's ByteFallback as "a sentencepiece vocabulary" and
takes every token for its literal characters, so ``Ċ`` became the bytes of 'Ċ', not '\\n':
on an H200 (vLLM 0.26, 2026-12-03) its grammar stopped every guided agent's request at its
first newline ("token "Ċ" doesn't satisfy the grammar; forced bytes: got '\\n'"), 0.75 tool
calls a session against 4.25 with xgrammar. transformers 5.19 writes the plain ByteLevel
decoder the original SmolLM2 tokenizer has; this makes every conversion write it.
"""

import json


def _has_byte_level(node):
    if not isinstance(node, dict):
        return False
    if node.get("type") == "ByteLevel":
        return True
    return any(_has_byte_level(n) for n in node.get("pretokenizers") or node.get("decoders") or [])


def needs_mending(spec):
    """Whether a ``tokenizer.json`` (as a dict) pre-tokenizes byte-level yet decodes otherwise."""
    if not isinstance(spec, dict) or not _has_byte_level(spec.get("pre_tokenizer")):
        return False
    decoder = spec.get("decoder")
    return not (isinstance(decoder, dict) and decoder.get("type") == "ByteLevel")


def mend(tokenizer):
    """Give a fast Hugging Face tokenizer the plain ByteLevel decoder where it needs one;
    returns whether it did."""
    backend = tokenizer.backend_tokenizer
    if not needs_mending(json.loads(backend.to_str())):
        return False
    from tokenizers import decoders

    backend.decoder = decoders.ByteLevel()
    return True
