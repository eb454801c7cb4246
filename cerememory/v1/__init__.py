"""Generated gRPC code for CMP v1 (protos/cerememory/v1/cerememory.proto).

Do not edit the *_pb2* modules: run `python scripts/gen_proto.py` after changing the proto.
"""
