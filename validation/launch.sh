#!/usr/bin/env bash
# The one place that knows the lent GPU machine's conventions; everything else takes folders as
# arguments. From the root of the checkout the machine received:
#   bash validation/launch.sh NAME [--mode M] [-- ARGS]     (NAME: python -m validation list)
# - the wheels that machine lacks travel in .whl and go to a scratch site folder;
# - the reference tools' sources travel in .peers and are handed over as --peers;
# - the graphics loaders travel in .gl as Debian packages (render-science): the EGL/GL/Vulkan
#   loaders unpacked into the system when it has no libEGL; .gl/native (glmark2's DRM build and
#   its libraries) unpacked into a scratch folder, with only the libraries the system lacks
#   put on the library path (ours must not shadow newer system ones), named to the entry by
#   GPUAUDIT_GLMARK2 and GPUAUDIT_GLMARK2_DATA;
# - results go to $OUT, the folder that comes back: NAME.json, NAME.md, NAME-raw.tar.gz (at most
#   8 files of 16 MiB come back, so the raw folder is removed once packed, and split if large).
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
if [ -d .gl ]; then
  if ! ldconfig -p | grep -q 'libEGL.so.1'; then
    for f in .gl/*.deb; do dpkg -x "$f" /; done
    ldconfig
  fi
  if [ -d .gl/native ]; then
    native=${TMPDIR:-/tmp}/native
    rm -rf "$native" && mkdir -p "$native/lib"
    for f in .gl/native/*.deb; do dpkg -x "$f" "$native"; done
    for lib in "$native"/usr/lib/x86_64-linux-gnu/*.so.*; do
      ldconfig -p | grep -q " $(basename "$lib") " || cp -a "$lib" "$native/lib/"
    done
    export GPUAUDIT_GLMARK2=$native/usr/bin/glmark2-drm
    export GPUAUDIT_GLMARK2_DATA=$native/usr/share/glmark2
    export LD_LIBRARY_PATH=$native/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  fi
fi
peers=(); [ -d .peers ] && peers=(--peers "$PWD/.peers")
python3 -m validation run "$name" --out "${OUT:?set OUT}" "${peers[@]}" "$@"
rc=$?
rm -rf "${OUT:?}/$name-raw"
# a file comes back only under 16 MiB: a larger raw archive travels in numbered parts
# (cat NAME-raw.tar.gz.* > NAME-raw.tar.gz joins them)
raw=$OUT/$name-raw.tar.gz
if [ -f "$raw" ] && [ "$(stat -c %s "$raw")" -gt $((15 * 1024 * 1024)) ]; then
  split -b 15M -d "$raw" "$raw." && rm "$raw"
fi
exit $rc
