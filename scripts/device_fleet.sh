#!/usr/bin/env bash
# One device call for `gpuaudit fleet`: a local Ray cluster of one Ray node per GPU
# (scripts/fleet_local_cluster.py), then `fleet run` (inspect + quick bench on every node,
# NCCL all-reduce across the nodes) and `fleet report`, into a SQLite store under $OUT.
# Needs Ray there: carry its wheel (cp312; `ray` without extras is enough) and what it needs
# that the image lacks (jsonschema, referencing, rpds-py, jsonschema-specifications) in .whl
# beside gpuaudit's own.
# What it shows: the driver, the pinned node tasks and the cross-node ranks (rendezvous
# through Ray, LOCAL_RANK → GPU) on real GPUs. The all-reduce goes over this host's
# NVLink/PCIe, not a network; every node reads the same host through NVML (both GPUs, one
# host name), so the report sees one host: fleet_run.json is the evidence here.
# Best on nvidia-h200-x2 (one GPU: the audit runs, the all-reduce is skipped, needing 2 nodes).
# Dry mode on a machine without GPUs: DRY=1 (two CPU nodes offering a "GPU" each, gloo).
# Usage: bash scripts/device_fleet.sh NAME      (writes $OUT/NAME/: 5 files)
set -u
source "$(dirname "$0")/device_env.sh"
name=$1
o="$OUT/$name"; mkdir -p "$o"
extra=(); [ -n "${DRY:-}" ] && extra=(--gpus 2)
python3 scripts/fleet_local_cluster.py "$o" "${extra[@]}" > "$o/fleet.txt" 2>&1
echo "rc=$?" >> "$o/fleet.txt"
rm -f "$o/fleet.db-wal" "$o/fleet.db-shm"
[ -f "$o/fleet.db" ] && gzip -f "$o/fleet.db"
ls -la "$o" >> "$o/fleet.txt"
