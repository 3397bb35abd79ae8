"""KServe v2 / Triton gRPC messages and the gRPC health protocol (generated code).

The ``.proto`` files here are the sources; ``scripts/gen_proto.sh`` regenerates
the ``*_pb2.py`` / ``*_pb2_grpc.py`` modules next to them. Import the modules
directly (``from fwx.serving.proto import grpc_service_pb2``); this package
itself imports nothing heavy.
"""
