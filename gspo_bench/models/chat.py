"""How a task's prompt becomes the model's input: raw text, or rendered with the tokenizer's chat
template (`apply_chat_template`, `add_generation_prompt=True`, an optional system prompt), as an
instruct model was trained to see it. Rollout, warm start and evaluation all go through here.

Tiny built-in models use a character tokenizer without a template; `rollout.chat_template: true`
gives them `TINY_CHAT_TEMPLATE` (its text uses only the tokenizer's alphabet), so the chat path can
be tested and benchmarked on CPU.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

# role tags in angle brackets, then the content; the generation prompt opens the assistant turn
TINY_CHAT_TEMPLATE = (
    "{% for message in messages %}<{{ message['role'] }}>{{ message['content'] }}{% endfor %}"
    "{% if add_generation_prompt %}<assistant>{% endif %}"
)


@dataclass(frozen=True)
class PromptFormat:
    chat: bool = False  # render with the tokenizer's chat template
    system_prompt: str | None = None  # a system message before the user's (chat only)

    def messages(self, prompt: str) -> list[dict[str, str]]:
        system = [{"role": "system", "content": self.system_prompt}] if self.system_prompt else []
        return [*system, {"role": "user", "content": prompt}]

    def render(self, tokenizer: PreTrainedTokenizerBase, prompt: str) -> str:
        """The text the model sees for `prompt`."""
        if not self.chat:
            return prompt
        text = tokenizer.apply_chat_template(self.messages(prompt), tokenize=False, add_generation_prompt=True)
        if not isinstance(text, str):
            raise TypeError(f"the chat template rendered {type(text).__name__}, not text")
        return text

    def encode(self, tokenizer: PreTrainedTokenizerBase, prompt: str) -> list[int]:
        """Token ids of the rendered prompt (a chat template writes its own special tokens)."""
        ids: list[int]  # (transformers' decorated encode reads as untyped)
        if not self.chat:
            ids = tokenizer.encode(prompt)
        else:
            ids = tokenizer.encode(self.render(tokenizer, prompt), add_special_tokens=False)
        return ids


def resolve_prompt_format(chat_template: bool | None, system_prompt: str | None, tokenizer: PreTrainedTokenizerBase,
                          *, tiny: bool,
                          source: str = "the model") -> PromptFormat:
    """The prompt format a suite asks for: `chat_template` None means on when the tokenizer has a
    template and the model is not a tiny built-in; True with a tokenizer without one is an error."""
    has_template = getattr(tokenizer, "chat_template", None) is not None
    if chat_template is None:
        chat_template = has_template and not tiny
    if chat_template and not has_template:
        raise ValueError(f"rollout.chat_template is on, but the tokenizer of {source} has no chat template")
    if system_prompt and not chat_template:
        raise ValueError("rollout.system_prompt needs the chat template (rollout.chat_template: true)")
    return PromptFormat(chat=chat_template, system_prompt=system_prompt)
