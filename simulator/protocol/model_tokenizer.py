"""A model's own tokenizer (its tokenizer.json, through the `tokenizers` library, no torch), so
the stand-in's `usage.prompt_tokens` is what vLLM would count for the same prompt.

vLLM tokenizes a completion's text with the special tokens added (Llama's BOS) and a chat by
rendering the model's chat template (tokenizer_config.json) and tokenizing that without adding
them again; this does both. Without a tokenizer the stand-in estimates instead
(domain/workload/tokenizer.py).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from jinja2.sandbox import ImmutableSandboxedEnvironment
from tokenizers import Tokenizer


class TokenizerError(ValueError):
    """A tokenizer path with no readable tokenizer.json; the message says which file."""


class ModelTokenizer:
    def __init__(self, path: Path) -> None:
        folder = path if path.is_dir() else path.parent
        file = path / "tokenizer.json" if path.is_dir() else path
        try:
            self._tokenizer = Tokenizer.from_file(str(file))
        except Exception as exc:  # tokenizers raises a bare Exception for a missing or bad file
            raise TokenizerError(f"{file}: not a readable tokenizer.json ({exc})") from None
        config = _json(folder / "tokenizer_config.json")
        self._specials = {k: _token(config.get(k)) for k in ("bos_token", "eos_token")}
        template = config.get("chat_template")
        # transformers renders chat templates in a sandbox with these two settings.
        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
        self._template = env.from_string(template) if isinstance(template, str) else None

    def encode(self, text: str) -> list[int]:
        """A completion prompt's ids, special tokens added as vLLM's completions do."""
        return list(self._tokenizer.encode(text, add_special_tokens=True).ids)

    def encode_chat(self, messages: list[dict[str, Any]]) -> list[int]:
        """A chat's ids: the chat template rendered, then tokenized without added specials;
        a tokenizer without a template gets each message's role and content in turn."""
        if self._template is None:
            text = "\n".join(f"{m['role']}\n{m['content']}" for m in messages) + "\nassistant\n"
        else:
            text = self._template.render(
                messages=messages, add_generation_prompt=True, **self._specials
            )
        return list(self._tokenizer.encode(text, add_special_tokens=False).ids)


def _json(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    data = json.loads(path.read_text())
    return data if isinstance(data, dict) else {}


def _token(value: Any) -> str:
    """A special token as tokenizer_config.json spells it: a string or an AddedToken dict."""
    if isinstance(value, dict):
        return str(value.get("content", ""))
    return str(value or "")
