"""Models written after the size change's convolution rule was set, plainly, as a user brings
them: each recorded once on a GPU (`gpuaudit bench train --op-profile`), its other width
predicted (`gpuaudit predict RUN --model user.NAME:build_wide`) and measured (`gpuaudit bench
train --model user.NAME:build_wide`). Never tuned on: docs/predict.md shows them as they came
out."""
