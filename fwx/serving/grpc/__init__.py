"""The gRPC transport: KServe v2 / Triton ``GRPCInferenceService`` and ``grpc.health.v1`` over the data plane."""
