"""`gpuaudit serve`: a local web UI over the store (runs, reports, compare) and a live page
fed by the monitor. Starlette + uvicorn; binds 127.0.0.1 unless told otherwise, and then only
with a token."""
