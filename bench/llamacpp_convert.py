"""Run llama.cpp's own convert_hf_to_gguf.py (from llama-cpp-python's source distribution) on a checkpoint.

    python bench/llamacpp_convert.py LLAMA_CPP_DIR CHECKPOINT OUT.gguf

One change: the bench checkpoints' tokenizer is a small BPE trained here, which
the converter does not recognise by its hash, so its pre-tokenizer is declared
`gpt-2`. The benches feed token ids, so tokenization never enters a figure.
"""

import sys
from pathlib import Path

llama_cpp_dir, checkpoint, out = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
sys.path[:0] = [str(llama_cpp_dir), str(llama_cpp_dir / "gguf-py")]

import conversion.base  # noqa: E402
import convert_hf_to_gguf  # noqa: E402

conversion.base.TextModel.get_vocab_base_pre = lambda self, tokenizer: "gpt-2"
sys.argv = ["convert_hf_to_gguf.py", checkpoint, "--outtype", "f32", "--outfile", out]
convert_hf_to_gguf.main()
