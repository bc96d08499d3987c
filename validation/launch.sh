# Sourced by the device_*.sh scripts: the environment every run on the GPU machine needs.
# NVLink multicast stays off (it can take a shared host's GPUs out of service); the wheels the
# machine lacks (.whl, carried) go to /tmp/site; our sources come first on the path.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1 COLUMNS=200
if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site:$PWD/src
else
  export PYTHONPATH=$PWD/src
fi
