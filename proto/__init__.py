"""Wire schema of Cursor's agent protocol, generated from proto/facts/ by proto/generate.py.

    from byok.proto import agent_pb2 as apb, aiserver_pb2 as spb, cpp_pb2 as cpb
    from byok.proto import features_pb2 as fpb   # Cursor's other AI calls (addon/assist/)
"""

from .byok_pb.agent.v1 import agent_pb2
from .byok_pb.aiserver.v1 import aiserver_pb2
from .byok_pb.aiserver.v1 import cpp_pb2  # Tab (StreamCpp and the RPCs around it)
from .byok_pb.aiserver.v1 import features_pb2

__all__ = ["agent_pb2", "aiserver_pb2", "cpp_pb2", "features_pb2"]
