"""Judge model files: finding them (`resolve.py`: `--model`, `RMJUDGE_MODEL`, the embedded default;
`hub.py`: Hub judges), what the installation ships (`packaged.py`), the embedded judge's cached
copies (`embedded.py`, merged by `lora_merge.py`), checking and hashing them (`checks.py`),
reading GGUF headers (`gguf_header.py`) and an adapter's prompt format (`adapter_format.py`),
and llama.cpp's library as rmjudge loads it (`llamacpp.py`). No engine code: the engines
(rmjudge/engine/) build on this layer."""
