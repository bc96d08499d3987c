"""Layers written the many ways users write them, to check what `gpuaudit predict`'s operator
classes make of them (`gpuaudit.workloads.opclass`): each module's `EXPECT` names, per
family, the class its units must land in, and each family is a `build()`-style entry point
as `bench train --model styles.MODULE:FAMILY` takes it (run from examples/predict/).

`development`: the families the classes were corrected on (an inline ALiBi bias, einsum
attention, F.normalize's vector norm, Swin's shifted-window mask, grouped-GEMM experts, a
batch of keyword arguments). `held_out`, `held_out_second`, `held_out_third`: written, with
their expected classes, after the last correction and before they were first profiled.
`training_patterns`: models set up the ways users set up training around them (compiled
blocks, batch norm over features, sparse embeddings, a TorchScript model, a vmap ensemble…),
development. `libraries`: models from transformers, timm, torchvision, diffusers, PyTorch
Geometric and lucidrains' packages, development and held out (its `HELD_OUT`), each run where
its library is installed."""
