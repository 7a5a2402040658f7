"""Generated gRPC stubs of controller.proto (scripts/gen_protos.sh writes them; do not edit)."""
