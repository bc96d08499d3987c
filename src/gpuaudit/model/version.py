"""The version of the documents gpuaudit stores and prints (apart from the records, so that a
command printing light records need not import pydantic to say it)."""

# Bumped whenever a stored or printed document changes shape incompatibly.
#   2: Run.node (the fleet node a run was measured on)
#   3: Run.op_profiles (bench train --op-profile's records for predict)
SCHEMA_VERSION = 3
