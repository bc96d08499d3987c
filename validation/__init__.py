"""gpuaudit's validation harness: each capability measured against its reference
(`python -m validation list`, `python -m validation run NAME --out DIR`). docs/development.md
says how to run it; validation/results/ holds the latest result of each."""
