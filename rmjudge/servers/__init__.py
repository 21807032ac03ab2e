"""OpenAI-compatible servers as rmjudge speaks to them: the transport (`client.py`) and its
settings (`settings.py`), request bodies per server flavour (`bodies.py`), the prompts sent and
the start-up probe (`prompts.py`, with `control_text.py`), responses read (`responses.py`), the
strict OpenAI chat schema (`openai_chat.py`), and llama-cpp-python's server with plain weight
buffers (`llamacpp_server.py`). The server engine (rmjudge/engine/server.py) judges through
them."""
