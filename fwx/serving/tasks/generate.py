"""One generation request, from token ids out of the engine to text deltas: detokenize, stop, count.

Text is decoded incrementally the way TGI and vLLM do (decode a short window
and emit what grew, holding back an incomplete UTF-8 sequence), so the deltas
concatenate to exactly ``tokenizer.decode(all tokens)``. A stop string ends
the request at its first occurrence (the stop text itself is not returned);
text that could still turn into a stop string is held back until it cannot.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator, AsyncIterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from fwx.errors import FwxError
from fwx.serving.tasks.scheduler import Engine, Sequence

if TYPE_CHECKING:
    from fwx.serving.models import LoadedModel


class ClientGoneError(FwxError):
    """The client disconnected mid-stream (nobody reads the answer; counted as ``cancelled``)."""

    http_status = 499


@dataclass(frozen=True)
class Delta:
    """Text produced since the previous delta; ``finish_reason`` (``stop`` or ``length``) on the last one."""

    text: str
    finish_reason: str | None = None


class Detokenizer:
    """Incremental decoding of one sequence's tokens."""

    def __init__(self, tokenizer: Any) -> None:
        self.tok = tokenizer
        self.ids: list[int] = []
        self._prefix = 0
        self._read = 0

    def add(self, token: int) -> str:
        self.ids.append(token)
        before = self.tok.decode(self.ids[self._prefix : self._read], skip_special_tokens=True)
        after = self.tok.decode(self.ids[self._prefix :], skip_special_tokens=True)
        if len(after) > len(before) and not after.endswith("\ufffd"):
            self._prefix, self._read = self._read, len(self.ids)
            return str(after[len(before) :])
        return ""


class StopScanner:
    """Finds the first stop string in the text so far; says how much text is safe to send."""

    def __init__(self, stops: tuple[str, ...]) -> None:
        self.stops = stops
        self.text = ""
        self.sent = 0

    def feed(self, delta: str) -> tuple[str, bool]:
        """The text that may be sent now, and whether a stop string ended the request."""
        self.text += delta
        longest = max((len(s) for s in self.stops), default=0)
        start = max(0, self.sent - longest + 1)
        hits = [i for i in (self.text.find(s, start) for s in self.stops) if i >= 0]
        if hits:
            end = min(hits)
            out, self.sent = self.text[self.sent : end], max(self.sent, end)
            return out, True
        hold = max((k for s in self.stops for k in range(1, len(s)) if self.text.endswith(s[:k])), default=0)
        end = max(self.sent, len(self.text) - hold)
        out, self.sent = self.text[self.sent : end], end
        return out, False

    def flush(self) -> str:
        out, self.sent = self.text[self.sent :], len(self.text)
        return out


class Generation:
    """A submitted request: iterate ``deltas()`` once; usage counts are read after it ends."""

    def __init__(
        self, engine: Engine, seq: Sequence, tokenizer: Any, release: contextlib.ExitStack, model: LoadedModel
    ) -> None:
        self.engine = engine
        self.model = model  # the version that answers (its name and number go into each protocol's answer)
        self.seq = seq
        self.prompt_tokens = len(seq.prompt)
        self._detok = Detokenizer(tokenizer)
        self._stops = StopScanner(seq.params.stop)
        self._release = release
        self._delivered = 0

    @property
    def completion_tokens(self) -> int:
        """Tokens delivered to this request (a row cut short by a stop string may have drawn one more)."""
        return self._delivered

    def abandon(self) -> None:
        """The client went away: stop generating and end ``deltas()`` with a 499-style error."""
        if not self.seq.done:
            self.engine.cancel(self.seq)
        self.seq.tokens.put_nowait(ClientGoneError("the client closed the connection"))

    async def deltas(self) -> AsyncGenerator[Delta, None]:
        """Text deltas as tokens arrive; the last has the finish reason. Leaving early cancels the request."""
        try:
            async for delta in self._deltas():
                yield delta
        finally:
            if not self.seq.done:
                self.engine.cancel(self.seq)
            self.engine.stats.forget(id(self.seq))
            self._release.close()

    async def _deltas(self) -> AsyncIterator[Delta]:
        """One delta per wake-up: tokens that queued while the client was being written to go out together."""
        seq = self.seq
        while True:
            items = [await seq.tokens.get()]
            while not seq.tokens.empty():
                items.append(seq.tokens.get_nowait())
            parts: list[str] = []
            for item in items:
                if isinstance(item, FwxError):
                    raise item
                if item is None:
                    yield Delta("".join(parts) + self._stops.flush(), seq.finish_reason)
                    return
                token, finish = item
                self._delivered += 1
                eos = finish == "stop"  # the end-of-sequence token itself is not text
                text, stopped = self._stops.feed("" if eos else self._detok.add(token))
                parts.append(text)
                if stopped:
                    self.engine.cancel(seq)
                    seq.finish_reason = "stop"
                    yield Delta("".join(parts), "stop")
                    return
            if any(parts):
                yield Delta("".join(parts))

    async def text(self) -> tuple[str, str]:
        """The whole completion and its finish reason."""
        parts, reason = [], "length"
        async with contextlib.aclosing(self.deltas()) as deltas:
            async for delta in deltas:
                parts.append(delta.text)
                reason = delta.finish_reason or reason
        return "".join(parts), reason
