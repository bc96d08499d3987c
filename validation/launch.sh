#!/usr/bin/env bash
# The one place that knows the lent GPU machine's conventions; everything else takes folders as
# arguments. From the root of the checkout the machine received:
#   bash validation/launch.sh NAME [--mode M] [-- ARGS]     (NAME: python -m validation list)
# - the wheels that machine lacks travel in .whl and go to a scratch site folder;
# - the reference tools' sources travel in .peers and are handed over as --peers;
# - results go to $OUT, the folder that comes back: NAME.json, NAME.md, NAME-raw.tar.gz (at most
#   8 files come back, so the raw folder is removed once packed).
set -u
name=${1:?usage: bash validation/launch.sh NAME [--mode M] [-- ARGS]}; shift
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1 COLUMNS=200
site=${TMPDIR:-/tmp}/site
if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target "$site" .whl/*.whl || exit 1
  export PYTHONPATH=$site:$PWD/src PATH=$site/bin:$PATH
else
  export PYTHONPATH=$PWD/src
fi
peers=(); [ -d .peers ] && peers=(--peers "$PWD/.peers")
python3 -m validation run "$name" --out "${OUT:?set OUT}" "${peers[@]}" "$@"
rc=$?
rm -rf "${OUT:?}/$name-raw"
exit $rc
