#!/usr/bin/env bash
# The doctor's zoo on the GPU machine (scripts/doctor_zoo.py), then the watching overhead on
# the LM preset (scripts/device_doctor.py overhead). Everything lands in $OUT: the zoo's
# tables (dev and held-out apart), its results and evidence archive, the overhead table.
#   bash scripts/device_doctor_zoo.sh [zoo] [overhead]      (default: both)
# GPUAUDIT_ZOO_ARGS: extra arguments for doctor_zoo.py (--set held-out, --only a,b, ...).
set -u
source "$(dirname "$0")/device_env.sh"
export CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-0}
export PATH=/tmp/site/bin:$PATH  # the carried py-spy
OUT=${OUT:-/tmp/zoo-out}
parts=${*:-zoo overhead}
for part in $parts; do
  case $part in
    zoo) python3 scripts/doctor_zoo.py "$OUT" ${GPUAUDIT_ZOO_ARGS:-} ;;
    overhead) GPUAUDIT_DOCTOR_DEADLINE_S=${GPUAUDIT_OVERHEAD_S:-200} \
        python3 scripts/device_doctor.py "$OUT" overhead ;;
  esac
done
# Only 8 files come back: the per-job folders are inside the archive.
rm -rf "$OUT/diagnoses" "$OUT/evidence"
ls -la "$OUT"
