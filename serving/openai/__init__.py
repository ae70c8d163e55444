"""The OpenAI API as Tandem speaks it, wherever a request arrives (the gateway, or an engine's own HTTP): request
models (`schemas`), response shapes and SSE (`format`), tool calls (`tools`), answer checks (`answer`), the chat
template and tokenizer, and errors in OpenAI's shape (`errors`)."""
