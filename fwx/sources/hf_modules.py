"""The modules fwx exports from a Hugging Face model: flat named tensors in, the task's outputs out.

A Transformers model takes keyword arguments and returns a ``ModelOutput``;
every exporter here wants positional tensors and a dict of tensors. These
wrappers are that adapter and nothing more (imported only when a folder is
loaded: they import torch).
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any

import torch


def forward_params(model: Any) -> frozenset[str]:
    try:
        return frozenset(inspect.signature(model.forward).parameters)
    except (TypeError, ValueError):
        return frozenset()


class TaskModule(torch.nn.Module):
    """``model(**dict(zip(inputs, tensors)))`` -> ``{name: output.name}`` for the task's outputs."""

    fwx_trace_only = True  # a Transformers model does not script

    def __init__(
        self,
        model: Any,
        inputs: tuple[str, ...],
        outputs: tuple[str, ...],
        rename: Mapping[str, str] | None = None,
        fixed: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__()
        self.model = model
        self.inputs = inputs
        self.outputs = outputs
        self.rename = dict(rename or {})
        self.fixed = dict(fixed or {})

    def forward(self, *tensors: Any) -> dict[str, Any]:
        kwargs = {self.rename.get(n, n): t for n, t in zip(self.inputs, tensors, strict=True)}
        out = self.model(**kwargs, **self.fixed)
        return {name: out[name] for name in self.outputs}


class Seq2SeqDecoder(torch.nn.Module):
    """Optimum's ``decoder_model`` (no cache): decoder ids, the encoder's mask and hidden states -> logits."""

    fwx_trace_only = True

    def __init__(self, model: Any) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids: Any, encoder_attention_mask: Any, encoder_hidden_states: Any) -> dict[str, Any]:
        out = self.model(
            decoder_input_ids=input_ids,
            attention_mask=encoder_attention_mask,
            encoder_outputs=(encoder_hidden_states,),
            use_cache=False,
        )
        return {"logits": out.logits}
