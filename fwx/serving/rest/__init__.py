"""The HTTP transport: KServe v2 and TF Serving REST bodies in, data-plane calls, bodies out."""
