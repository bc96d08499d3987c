"""Models written the way users write them (plain torch.nn), each with a `build()` entry point
as `gpuaudit bench train --model zoo.NAME:build` takes it, run from examples/predict/. Which
families tune `gpuaudit predict` and which are held out of it: manifest.json."""
