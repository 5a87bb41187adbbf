"""An offline character-level tokenizer in Hugging Face format (no hub access needed).

Every character of the alphabet is one token; ids 0-3 are <pad>, <s>, </s>, <unk>. Saved with
`save_pretrained`, it reopens with `AutoTokenizer.from_pretrained(dir)` in any HF tool.
"""

from __future__ import annotations

import string

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

SPECIAL_TOKENS = ("<pad>", "<s>", "</s>", "<unk>")
PAD_ID, BOS_ID, EOS_ID, UNK_ID = range(4)
# Digits, operators and separators the generated tasks use, plus lowercase letters for instructions.
DEFAULT_ALPHABET = string.digits + "+-*/()=<>,.:;[] ?" + string.ascii_lowercase


def build_char_tokenizer(alphabet: str = DEFAULT_ALPHABET) -> PreTrainedTokenizerFast:
    """A character tokenizer over `alphabet` (duplicates refused); vocab size = 4 + len(alphabet)."""
    if len(set(alphabet)) != len(alphabet):
        raise ValueError("alphabet has repeated characters")
    if not alphabet:
        raise ValueError("alphabet is empty")
    vocab = {tok: i for i, tok in enumerate([*SPECIAL_TOKENS, *alphabet])}
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    core.decoder = decoders.Fuse()
    tok = PreTrainedTokenizerFast(
        tokenizer_object=core, pad_token="<pad>", bos_token="<s>", eos_token="</s>", unk_token="<unk>"
    )
    tok.padding_side = "left"  # prompts are left-padded for generation
    return tok
