"""One Anthropic Messages call per case."""

from __future__ import annotations

from typing import Any

from .base import AgentOutput


class ClaudeAgent:
    default_model = "claude-opus-4-8"

    def __init__(self, model: str = default_model, *, timeout: float = 120.0, max_retries: int = 4,
                 max_tokens: int = 4096, client: Any = None) -> None:
        import anthropic

        self.name = "claude"
        self.model = model
        self.max_tokens = max_tokens
        self.client = client or anthropic.Anthropic(timeout=timeout, max_retries=max_retries)

    def run(self, prompt: str) -> AgentOutput:
        response = self.client.messages.create(
            model=self.model,
            max_tokens=self.max_tokens,
            messages=[{"role": "user", "content": prompt}],
        )
        text = "".join(block.text for block in response.content if getattr(block, "type", None) == "text")
        usage = getattr(response, "usage", None)
        return AgentOutput(
            text=text,
            model=getattr(response, "model", self.model),
            usage={
                "input_tokens": getattr(usage, "input_tokens", None),
                "output_tokens": getattr(usage, "output_tokens", None),
            } if usage is not None else None,
        )
