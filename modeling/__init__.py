"""Model code below both tiers: a checkpoint's config read and checked (`model_config`), the torch model
(`llama`, with its `layers`), and loading a Hugging Face checkpoint into it (`loader`). The cloud worker runs it;
the edge agent exports it to ONNX."""
