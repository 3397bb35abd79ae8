"""Serving the task, not only the tensors: text in, answers out, and generation batched across requests.

``assets`` reads a version's own tokenizer and configs (checked against fwx.json),
``tokenize``, ``textinfer`` and ``postprocess`` turn text into the model's
tensors and its outputs into the task's answer; ``sampling``, ``scheduler``
and ``generate`` run decoders with a cache under iteration-level (continuous)
batching; ``chat`` renders chat templates in a sandbox; ``protocols``
translates OpenAI's and Triton's generation bodies; ``metrics`` counts tokens.
Transports call ``plane.TaskPlane``; nothing here knows HTTP or protobuf.
"""
