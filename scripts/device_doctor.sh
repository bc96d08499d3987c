#!/usr/bin/env bash
# One device call for `gpuaudit doctor` and `gpuaudit tune` (issue 12): every known-answer
# workload under the doctor, the watching overhead on the LM preset, tune on the LM. Writes
# 5 files under $OUT: doctor_known_answers.md, doctor_diagnoses.json, doctor_overhead.md,
# tune.json, doctor_log.txt. At most ~9.5 minutes on one H200 (GPUAUDIT_DOCTOR_DEADLINE_S,
# default 560 s, cuts the last command short); parts can be run alone:
#   bash scripts/device_doctor.sh [known] [overhead] [tune]
# On a machine without a GPU: DRY=1 bash scripts/device_doctor.sh (the CPU-observable part).
set -u
source "$(dirname "$0")/device_env.sh"
export CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-0}
python3 scripts/device_doctor.py "${OUT:-/tmp/doctor-out}" "$@" ${DRY:+--dry}
