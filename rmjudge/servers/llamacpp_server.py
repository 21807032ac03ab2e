"""llama-cpp-python's OpenAI-compatible server with the model's weights in llama.cpp's plain
CPU buffers (`rmjudge.engine.vocab.plain_weight_buffers`): the same arguments as
`python -m llama_cpp.server`, for CPUs whose AMX kernels crash it (docs/serving.md).

    python -m rmjudge.servers.llamacpp_server --model FILE --host 127.0.0.1 --port 8000
"""

from __future__ import annotations


def main() -> None:
    from llama_cpp.server.__main__ import main as serve

    from rmjudge.models.llamacpp import plain_weight_buffers

    with plain_weight_buffers():
        serve()


if __name__ == "__main__":
    main()
