"""Generated gRPC stubs of metrics.proto (scripts/gen_protos.sh writes them; do not edit)."""
