//! `ollamars serve`: the Ollama- and OpenAI-compatible HTTP APIs and the model scheduler.
