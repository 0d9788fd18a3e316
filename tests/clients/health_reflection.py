"""grpcio's own health and reflection clients against a tfserve gRPC address
(argv[1]); prints what they saw as JSON."""
import json
import sys

import grpc
from google.protobuf.descriptor_pool import DescriptorPool
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import ProtoReflectionDescriptorDatabase

channel = grpc.insecure_channel(sys.argv[1])
health = health_pb2_grpc.HealthStub(channel)
statuses = {}
for service in ("", "tensorflow.serving.PredictionService", "tensorflow.serving.ModelService",
                "inference.GRPCInferenceService"):
    status = health.Check(health_pb2.HealthCheckRequest(service=service), timeout=10).status
    statuses[service] = health_pb2.HealthCheckResponse.ServingStatus.Name(status)
database = ProtoReflectionDescriptorDatabase(channel)
pool = DescriptorPool(database)
predict = pool.FindServiceByName("tensorflow.serving.PredictionService")
tensor = pool.FindMessageTypeByName("tensorflow.TensorProto")
print(json.dumps({
    "health": statuses,
    "services": sorted(database.get_services()),
    "predict_methods": [m.name for m in predict.methods],
    "tensor_content_field": tensor.fields_by_name["tensor_content"].number,
}))
