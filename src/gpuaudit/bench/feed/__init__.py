"""Can this server feed its GPUs? Storage, network and host (memory bandwidth, JPEG decode)
suites of `gpuaudit bench`, their reference tools (fio, iperf3, perftest), and the feed verdict
for a training job."""
