"""Sample models for ``make run``, the benchmarks and the docs (``samples.models`` builds them)."""

#: The class that rebuilds the sample CNN from its ``cnn.pt`` state_dict (``--model-class``).
CNN_CLASS = "samples.models:SmallCNN"
#: The ``fwx export`` flags that pin the sample CNN's signature; kept here (no torch import) so the
#: walkthrough and every benchmark export the very same model.
CNN_EXPORT_ARGS = ("--model-class", CNN_CLASS, "--input", "image:float32[N,3,32,32]", "--output", "logits")
