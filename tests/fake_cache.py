"""Anthropic's prompt cache, as the fake server reports it (`FakeLLMServer.prompt_cache`).

A request's cacheable prefix is its blocks in the order Anthropic processes them: each tool definition, each system
block, then each content block of each message. A `cache_control` on a block is a breakpoint after it; a top-level
`cache_control` (automatic caching) is one after the last block of the last message. As the real service does, the
longest prefix an earlier request wrote that ends at or before the request's last breakpoint is read, the rest up to
that breakpoint is written, and `input_tokens` is what is left: the uncached remainder after the last breakpoint.
A prefix shorter than `min_tokens` is neither written nor read (Anthropic's minimum cacheable length).

Tokens are counted as the fake server counts them, a quarter of the characters of each block's JSON (its
`cache_control` left out: moving a breakpoint does not change the content).
"""

from __future__ import annotations

import hashlib
import json
import threading
from dataclasses import dataclass, field
from typing import Any, NamedTuple


class CacheUsage(NamedTuple):
    """What one request reads from the cache, writes to it, and pays full price for."""

    input_tokens: int
    cache_read_tokens: int
    cache_write_tokens: int


@dataclass
class AnthropicPromptCache:
    """The prefixes written so far, by the hash of their blocks (shared by every conversation, as the provider's
    cache is by every request of one organisation)."""

    min_tokens: int = 0
    written: dict[str, int] = field(default_factory=dict[str, int])
    """Each written prefix's hash, and its tokens."""
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def usage(self, body: dict[str, Any], total_tokens: int) -> CacheUsage:
        """The usage of a request of `total_tokens` with this `body`, and the prefixes it writes remembered."""
        blocks = _blocks(body)
        hashes: list[str] = []
        tokens: list[int] = []
        digest = hashlib.sha256()
        count = 0
        for block, _ in blocks:
            text = json.dumps(
                {key: value for key, value in block.items() if key != "cache_control"}, separators=(",", ":")
            )
            digest.update(text.encode())
            count += len(text) // 4
            hashes.append(digest.copy().hexdigest())
            tokens.append(count)
        breakpoints = [index for index, (_, marked) in enumerate(blocks) if marked]
        if body.get("cache_control") and blocks:
            breakpoints.append(len(blocks) - 1)
        breakpoints = [index for index in breakpoints if tokens[index] >= self.min_tokens]
        if not breakpoints:
            return CacheUsage(total_tokens, 0, 0)
        last = max(breakpoints)
        with self._lock:
            read = next((tokens[index] for index in range(last, -1, -1) if hashes[index] in self.written), 0)
            for index in breakpoints:
                self.written[hashes[index]] = tokens[index]
        write = tokens[last] - read
        return CacheUsage(max(total_tokens - tokens[last], 0), read, write)


def _blocks(body: dict[str, Any]) -> list[tuple[dict[str, Any], bool]]:
    """The request's cacheable blocks in order, each with whether it carries a breakpoint."""
    blocks: list[dict[str, Any]] = [*body.get("tools", [])]
    system = body.get("system")
    blocks += [{"type": "text", "text": system}] if isinstance(system, str) else (system or [])
    for message in body.get("messages", []):
        content = message["content"]
        parts = [{"type": "text", "text": content}] if isinstance(content, str) else content
        blocks += [{"role": message["role"], **part} for part in parts]
    return [(block, "cache_control" in block) for block in blocks]
