"""Serving the task, not only the tensors: text in, answers out, and generation batched across requests.

``assets`` reads a version's own tokenizer and configs (checked against fwx.json),
``tokenize`` and ``postprocess`` turn text into the model's tensors and its
outputs into the task's answer, ``sampling``, ``scheduler`` and ``generate``
run decoders with a cache under iteration-level (continuous) batching, and
``openai`` / ``triton`` translate the two generation protocols. Transports
call ``TaskPlane`` only; nothing here knows HTTP or protobuf framing.
"""
